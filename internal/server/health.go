package server

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/busbarmq/busbar/internal/version"
)

// health answers GET /health: 503 until the broker is ready to serve,
// 200 {"status":"healthy","version":"…"} after, and 503 again once
// shutdown has begun. The version is the running build's (package version).
type health struct {
	ready atomic.Bool
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !h.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(healthBody("unavailable"))
		return
	}
	_, _ = w.Write(healthBody("healthy"))
}

// healthBody is the /health JSON: the status and the build's version.
func healthBody(status string) []byte {
	b, _ := json.Marshal(struct {
		Status  string `json:"status"`
		Version string `json:"version"`
	}{status, version.Version()})
	return append(b, '\n')
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
