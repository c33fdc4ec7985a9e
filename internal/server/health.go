package server

import (
	"net/http"
	"sync/atomic"
)

// health answers GET /health: 503 until the broker is ready to serve,
// 200 {"status":"healthy"} after, and 503 again once shutdown has begun.
type health struct {
	ready atomic.Bool
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !h.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"unavailable"}` + "\n"))
		return
	}
	_, _ = w.Write([]byte(`{"status":"healthy"}` + "\n"))
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
