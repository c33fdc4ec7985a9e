package bench

import (
	"context"
	"time"
)

// Target is one broker under test with one client protocol.
type Target struct {
	Client Client
	// Proc returns the broker process being measured (it may change
	// after a restart); nil when unknown.
	Proc func() Process
	// Fresh prepares empty queues (and topics: name → subscriptions) for
	// one cell: Busbar starts a new process on a new data directory,
	// the peers delete and re-create their queues.
	Fresh func(ctx context.Context, queues []string, topics map[string][]string) error
	// FreshW3, when set, prepares W3's cells instead of Fresh (the null
	// broker starts in its forwarding mode for W3).
	FreshW3 func(ctx context.Context, queues []string, topics map[string][]string) error
	// Kill9Restart kills the broker with SIGKILL and starts it again on
	// the same data; it returns when the process has been started (not
	// necessarily ready). nil when the harness cannot restart it.
	Kill9Restart func(ctx context.Context) error
	// Started returns when the current broker process was started (for
	// the kill -9 test); nil when unknown.
	Started func() time.Time
	// Topics says why fan-out is not measured for this target ("" when it is).
	TopicsNA string
	// SkipW4 says why the backlog test is not run ("" runs it).
	SkipW4 string
	// Workloads, when set, are the only workloads run against this
	// target; the others print WorkloadsNA.
	Workloads   map[string]bool
	WorkloadsNA string
	// NoPrefill: the broker delivers without being filled first (the null
	// broker), so W2 skips its pre-fill.
	NoPrefill bool
	// Note is printed with every figure of this target (e.g. credit used).
	Note string
	// DB, when set, measures the broker's PostgreSQL during each cell
	// (Result.DBus, Result.WALBytes).
	DB *pgMeter
	// StoreMetrics, when set, returns the URL of the broker's GET
	// /metrics (open): the notes then give the store's transactions in
	// the cell (storeNote).
	StoreMetrics func() string
}

func (t *Target) pid() int {
	if t.Proc == nil {
		return 0
	}
	p := t.Proc()
	if p == nil {
		return 0
	}
	return p.PID()
}

func (t *Target) dataDir() string {
	if t.Proc == nil {
		return ""
	}
	p := t.Proc()
	if p == nil {
		return ""
	}
	return p.DataDir()
}
