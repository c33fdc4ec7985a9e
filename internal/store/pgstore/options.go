package pgstore

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store"
)

// Options configure a Store. The zero value of every field means its
// default.
type Options struct {
	// Clock times commits for SyncObserver; default the wall clock.
	Clock clock.Clock
	// Log receives session and connection events; default discards.
	Log *slog.Logger
	// Conns is the number of commit transactions in flight at once, each
	// on its own connection (default 4).
	Conns int
	// InlineLimit is the largest Data kept in the message row (default
	// 8 KiB); larger Data goes to bb_body in chunks.
	InlineLimit int
	// ChunkSize is the largest bb_body row (default 256 KiB).
	ChunkSize int
	// TxnDeadline bounds one commit transaction, including waiting for a
	// connection and resolving a lost answer (default 5 s).
	TxnDeadline time.Duration
	// ResolveWait bounds how long a commit whose connection broke after
	// it was sent waits to learn its outcome (the database may be
	// restarting) before it fails with ErrOutcomeUnknown (default 30 s).
	ResolveWait time.Duration
	// NodeID names this process's row in bb_node (default "busbar"). Two
	// live processes never share a node id.
	NodeID string
	// SessionTTL is how long the node's session stays live without a
	// renewal (default 5 s); Heartbeat how often it is renewed (default
	// 1 s). A second process on the same database refuses to start while
	// the session is live. In cluster mode the node's lease TTL and
	// heartbeat: the store bounds its lock waits by the TTL (lockWait).
	SessionTTL, Heartbeat time.Duration
	// StartWait is how long Open waits for a previous session of the same
	// node id to expire (a restart after a crash) before refusing
	// (default SessionTTL + 1 s).
	StartWait time.Duration
	// FollowerWait bounds how long a committer holds a queue after a
	// commit for the closed-loop committers it released to commit again
	// (store.Follower), so that their batches share the next transaction
	// (default 1 ms; negative: never wait).
	FollowerWait time.Duration
	// Cluster opens the store for a node of a cluster: it registers no
	// session and takes no unit at Open; the node does both through
	// Membership (Register, Renew) and UnitLeases (Acquire, Release), and
	// replays each unit it takes with RecoverUnit.
	Cluster bool
	// SyncObserver, if set, is told of every commit transaction.
	SyncObserver store.SyncObserver
}

const (
	defaultConns       = 4
	defaultInline      = 8 << 10
	defaultChunk       = 256 << 10
	defaultTxnDeadline = 5 * time.Second
	defaultResolveWait = 30 * time.Second
	defaultTTL         = 5 * time.Second
	defaultHeartbeat   = time.Second
	maxBatchOps        = 2000
	maxBatchBytes      = 8 << 20
	maxBatchUnits      = 64
	maxRetries         = 5
	lostBuffer         = 256
	defaultReserve     = 10 * time.Second
)

func (o *Options) defaults() {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Conns <= 0 {
		o.Conns = defaultConns
	}
	if o.InlineLimit <= 0 {
		o.InlineLimit = defaultInline
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = defaultChunk
	}
	if o.TxnDeadline <= 0 {
		o.TxnDeadline = defaultTxnDeadline
	}
	if o.ResolveWait <= 0 {
		o.ResolveWait = defaultResolveWait
	}
	if o.FollowerWait == 0 {
		o.FollowerWait = time.Millisecond
	}
	if o.NodeID == "" {
		o.NodeID = "busbar"
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = defaultTTL
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = defaultHeartbeat
	}
	if o.Heartbeat*3 > o.SessionTTL {
		o.Heartbeat = o.SessionTTL / 3
	}
	if o.StartWait <= 0 {
		o.StartWait = o.SessionTTL + time.Second
	}
}

// lockWait bounds how long a transaction of this store keeps its row
// locks while its client is silent (idle_in_transaction_session_timeout)
// and how long an acquire waits for a unit row (lock_timeout): a quarter
// of the session TTL, so that a node cut off from the database mid-way
// through a transaction, or a slow acquire, delays the renewals of the
// nodes whose rows it locked by much less than their trust window.
func (o *Options) lockWait() time.Duration {
	return max(o.SessionTTL/4, 50*time.Millisecond)
}

// longRead is how long a recovery's read-only snapshot may stay idle
// between its statements (its visitor may be slow); it holds no row lock.
const longRead = time.Minute

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
