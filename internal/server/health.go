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
