// Command busbar-null is the "null broker" of busbar-bench (target
// null): an AMQP 1.0 server on Busbar's endpoint (internal/amqp) that
// stores nothing, accepts every transfer at once, answers $cbs put-token
// without checking the token and feeds every receiver credit with a
// pre-encoded message. Run against it, the load generator shows what it
// costs by itself on this machine, and so the throughput a zero-cost
// broker would reach (see bench/nullbroker).
//
// With --forward it instead hands each message sent to an address, as
// sent, to a receiver of that address (held in memory, in order, while
// no receiver has credit), for the end-to-end latency workload W3.
//
// With --sync DIR it is durable at the least cost a durable broker can
// pay: every transfer and every settlement the client asks for is written
// to a journal file in DIR and settled (with --forward: handed on) only
// after an fdatasync, in group commits (target null-durable). With
// --retain as well the journal keeps everything, in new files, instead of
// rewriting one (target null-durable-retain).
//
//	go build -o /tmp/busbar-null ./cmd/busbar-null
//	/tmp/busbar-null --amqp 127.0.0.1:25810 --size 1024
//	/tmp/busbar-null --amqp 127.0.0.1:25810 --forward
//	/tmp/busbar-null --amqp 127.0.0.1:25811 --sync /tmp/null-journal
//	/tmp/busbar-null --amqp 127.0.0.1:25811 --sync /tmp/null-journal --retain
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/busbarmq/busbar/bench/nullbroker"
	"github.com/busbarmq/busbar/internal/amqp"
)

func main() {
	addr := flag.String("amqp", "127.0.0.1:25810", "AMQP listen address")
	size := flag.Int("size", 1024, "body bytes of the messages sent to receivers")
	forward := flag.Bool("forward", false, "forward what senders send to an address to its receivers (in memory, in order) instead of feeding receivers a pre-encoded message")
	maxHeld := flag.Int("max-held", nullbroker.DefaultMaxHeld, "with --forward: messages held per address while no receiver has credit")
	syncDir := flag.String("sync", "", "durable: write what is accepted to a journal file in this directory and settle it (and, with --forward, hand it on) only after an fdatasync (group commit)")
	retain := flag.Bool("retain", false, "with --sync: keep everything (a new journal file, zero-filled ahead of use, each time one is full) instead of rewriting one file")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := nullbroker.New(*size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	h.Forward, h.MaxHeld = *forward, *maxHeld
	if *syncDir != "" {
		open := nullbroker.OpenJournal
		if *retain {
			open = nullbroker.OpenRetainingJournal
		}
		j, err := open(*syncDir, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		h.Journal = j
		defer func() {
			if err := j.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			fmt.Fprintf(os.Stderr, "busbar-null: journal: %d fdatasyncs, %d bytes\n", j.Syncs.Load(), j.Bytes.Load())
		}()
	}
	srv, err := amqp.NewServer(h, amqp.Config{ContainerID: "busbar-null", Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && err != amqp.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "busbar-null: received %d, delivered %d, dispositions %d\n", h.Received.Load(), h.Delivered.Load(), h.Settled.Load())
}
