// Command busbar-pprof is `busbar serve` with net/http/pprof, for
// profiling the broker under the benchmark's load without changing the
// broker: it starts the same internal/server with the flags of busbar
// serve (its settings, config.ServerSettings), and serves /debug/pprof/ on $BUSBAR_PPROF
// (default 127.0.0.1:6061) with mutex and block profiling on.
//
//	go build -o /tmp/busbar-pprof ./cmd/busbar-pprof
//	go run ./cmd/busbar-bench -busbar-bin /tmp/busbar-pprof -targets busbar -workloads W1
//	go tool pprof -top http://127.0.0.1:6061/debug/pprof/profile?seconds=10
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: busbar-pprof serve [busbar serve flags]")
		os.Exit(2)
	}
	// Every setting of busbar serve, as busbar-bench passes them.
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	for _, st := range config.ServerSettings() {
		if st.Bool {
			fs.Bool(st.Name, st.Default == "true", st.Usage)
		} else {
			fs.String(st.Name, st.Default, st.Usage)
		}
	}
	_ = fs.Parse(os.Args[2:])
	settings := config.DefaultServer()
	addr := os.Getenv("BUSBAR_PPROF")
	if addr == "" {
		addr = "127.0.0.1:6061"
	}
	if err := settings.FromEnv(func(k string) (string, bool) {
		if k == "BUSBAR_PPROF" {
			return "", false // served below, with mutex and block profiling on
		}
		return os.LookupEnv(k)
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		if err := settings.Set(f.Name, f.Value.String()); err != nil && bad == nil {
			bad = fmt.Errorf("--%s: %w", f.Name, err)
		}
	})
	if bad == nil {
		bad = settings.Validate()
	}
	if bad != nil {
		fmt.Fprintln(os.Stderr, bad)
		os.Exit(2)
	}

	var lv slog.Level
	_ = lv.UnmarshalText([]byte(settings.LogLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(100000) // one sample per 100 µs blocked
	go func() { log.Error("pprof", "err", http.ListenAndServe(addr, nil)) }()

	opts := server.Options{Server: settings, Logger: log}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
}
