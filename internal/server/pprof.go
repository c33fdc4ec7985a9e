package server

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// startPprof serves the runtime's profiles on addr (busbar serve --pprof).
// Mutex and block profiling are sampled only while it is on: one
// contention event in 5, one blocking sample per 100 µs blocked.
func (s *Server) startPprof(addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pprof listener: %w", err)
	}
	s.pprofLn = ln
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(100_000)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s.pprofSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Warn("serving runtime profiles without authentication", "addr", ln.Addr().String())
	s.goServe("pprof", func() error { return s.pprofSrv.Serve(ln) })
	return nil
}

// PprofAddr is the profiles listener's address, nil when off.
func (s *Server) PprofAddr() net.Addr { return addrOf(s.pprofLn) }
