package server

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/version"
)

// health answers the probes:
//
//	GET /health        liveness: 503 {"status":"unavailable"} until the
//	                   broker serves and once shutdown has begun; 503
//	                   {"status":"failed","reason":…} when the store stopped
//	                   after an I/O error (only a restart recovers it);
//	                   otherwise 200 {"status":"healthy"}, or 200
//	                   {"status":"degraded","reason":…} while the disk is
//	                   full or below the low-disk watermark (a restart would
//	                   not help: the broker resumes by itself once there is
//	                   space).
//	GET /health/ready  readiness: 200 {"status":"ready"} only when the broker
//	                   serves and can take new messages; else 503 with the
//	                   status and the reason (starting, stopping, the disk is
//	                   full or below the watermark, the store stopped, a
//	                   cluster node that cannot renew its session in the
//	                   database: liveness then says "degraded").
//
// Every body also carries the running build's version (package version),
// "faults": true while fault injection is on (--faults), and
// "testClock": true with the broker's current "testTime" (RFC 3339, UTC)
// while it runs on the test clock (--test-clock): those fields are the
// default namespace's. With several namespaces (Config.json, or
// --namespace-per-key-name) "namespaces" lists each one, the default
// first: its "name" and, with --test-clock, its own "testTime".
type health struct {
	ready     atomic.Bool
	faults    atomic.Bool
	testClock atomic.Pointer[clock.Test]
	// check is the broker's Health once it exists.
	check atomic.Pointer[func() error]
	// list is the namespaces' entries once there are several.
	list atomic.Pointer[func() []nsHealth]
}

// nsHealth is one namespace's entry in /health's "namespaces".
type nsHealth struct {
	Name     string `json:"name"`
	Default  bool   `json:"default,omitempty"`
	Origin   string `json:"origin"`
	TestTime string `json:"testTime,omitempty"`
}

type healthBody struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Version string `json:"version"`
	Faults  bool   `json:"faults,omitempty"`

	TestClock bool   `json:"testClock,omitempty"`
	TestTime  string `json:"testTime,omitempty"`

	Namespaces []nsHealth `json:"namespaces,omitempty"`
}

func (h *health) setCheck(f func() error) { h.check.Store(&f) }

// state is the store's problem, if any, once the broker serves.
func (h *health) state() error {
	if f := h.check.Load(); f != nil {
		return (*f)()
	}
	return nil
}

func (h *health) write(w http.ResponseWriter, status int, body healthBody) {
	body.Faults = h.faults.Load()
	if c := h.testClock.Load(); c != nil {
		body.TestClock = true
		body.TestTime = c.Now().UTC().Format(time.RFC3339Nano)
	}
	if f := h.list.Load(); f != nil {
		body.Namespaces = (*f)()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	body.Version = version.Version()
	_ = json.NewEncoder(w).Encode(body)
}

// ServeHTTP answers GET /health (liveness).
func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.ready.Load() {
		h.write(w, http.StatusServiceUnavailable, healthBody{Status: "unavailable"})
		return
	}
	switch err := h.state(); {
	case err == nil:
		h.write(w, http.StatusOK, healthBody{Status: "healthy"})
	case broker.KindOf(err) == broker.KindNoSpace, broker.KindOf(err) == broker.KindStoreUnavailable:
		// A full disk or an unreachable database: restarting the process
		// would not help; readiness says not ready meanwhile.
		h.write(w, http.StatusOK, healthBody{Status: "degraded", Reason: err.Error()})
	default:
		h.write(w, http.StatusServiceUnavailable, healthBody{Status: "failed", Reason: err.Error()})
	}
}

// serveReady answers GET /health/ready (readiness).
func (h *health) serveReady(w http.ResponseWriter, r *http.Request) {
	if !h.ready.Load() {
		h.write(w, http.StatusServiceUnavailable, healthBody{Status: "not ready", Reason: "the broker is starting or stopping"})
		return
	}
	if err := h.state(); err != nil {
		h.write(w, http.StatusServiceUnavailable, healthBody{Status: "not ready", Reason: err.Error()})
		return
	}
	h.write(w, http.StatusOK, healthBody{Status: "ready"})
}

// lateHandler serves 503 until its handler is set: the admin API needs the
// broker, which exists only after recovery, but the HTTP listener is up
// before that.
type lateHandler struct {
	h atomic.Pointer[http.Handler]
}

func (l *lateHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "Busbar is starting", http.StatusServiceUnavailable)
}
