// Command busbar-pprof is `busbar serve` with net/http/pprof, for
// profiling the broker under the benchmark's load without changing the
// broker: it starts the same internal/server with the same subset of
// flags busbar-bench passes, and serves /debug/pprof/ on $BUSBAR_PPROF
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
		fmt.Fprintln(os.Stderr, "usage: busbar-pprof serve --data DIR --amqp ADDR --http ADDR [--config FILE] [--log-level L]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	data := fs.String("data", "./busbar-data", "")
	amqpAddr := fs.String("amqp", "127.0.0.1:5672", "")
	httpAddr := fs.String("http", "127.0.0.1:5300", "")
	cfg := fs.String("config", "", "")
	level := fs.String("log-level", "warn", "")
	_ = fs.Parse(os.Args[2:])

	var lv slog.Level
	_ = lv.UnmarshalText([]byte(*level))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(100000) // one sample per 100 µs blocked
	addr := os.Getenv("BUSBAR_PPROF")
	if addr == "" {
		addr = "127.0.0.1:6061"
	}
	go func() { log.Error("pprof", "err", http.ListenAndServe(addr, nil)) }()

	opts := server.Options{Server: config.Server{DataDir: *data, AMQPAddr: *amqpAddr, HTTPAddr: *httpAddr}, Logger: log}
	if *cfg != "" {
		ec, err := config.LoadEmulatorConfigFile(*cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		opts.Entities = ec
	}
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
