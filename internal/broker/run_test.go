package broker

import (
	"context"
	"errors"
	"go/build"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestRunTicksAndStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 1)
	r := e.receiver("q", PeekLock)
	if ds, _ := r.TryReceive(1); len(ds) != 1 {
		t.Fatal("no message")
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.b.Run(runCtx) }()

	// Move the fake clock past the lock end and wake the shell: it ticks,
	// the lock expires, the receiver's Ready fires. (Waiting on a channel,
	// not sleeping.)
	ready := r.Ready()
	e.advance(time.Minute)
	e.b.Wake()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not tick the lock expiry")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop on cancel")
	}
}

func TestRunStopsOnClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.AutoDeleteOnIdle = time.Hour })
	done := make(chan error, 1)
	go func() { done <- e.b.Run(ctx) }()
	// A real timer is pending (the idle deadline an hour away on the fake
	// clock); Close must still stop Run promptly.
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop on Close")
	}
	// After Close everything fails with ErrClosed, and Run returns at once.
	wantKind(t, e.b.Send(ctx, "q", nil), ErrClosed)
	if err := e.b.Run(ctx); err != nil {
		t.Fatalf("Run after Close: %v", err)
	}
}

func TestRunProcessesOverdueDeadline(t *testing.T) {
	// A deadline already due when Run looks is ticked at once. (The test
	// queues the receiver as a waiter by hand: Ready would do the lazy
	// tick itself.)
	defer goleak.VerifyNone(t)
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 1)
	e.recv1("q")
	e.clk.Advance(time.Hour) // lock long expired by the time Run looks
	r := e.receiver("q", PeekLock)
	q, _, _ := e.b.lookup("q")
	q.mu.Lock()
	r.waitCh = make(chan struct{})
	ready := r.waitCh
	q.mu.subs[SubQueueMain].waiters = append(q.mu.subs[SubQueueMain].waiters, r)
	q.mu.Unlock()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { e.b.Run(runCtx); close(done) }()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not process an overdue deadline")
	}
	if ds, _ := r.TryReceive(1); len(ds) != 1 || ds[0].DeliveryCount != 2 {
		t.Fatal("lock not expired")
	}
	cancel()
	<-done
}

// TestForbiddenImports keeps the core free of protocol and network code.
func TestForbiddenImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/busbarmq/busbar/internal/store":         true,
		"github.com/busbarmq/busbar/internal/message":       true,
		"github.com/busbarmq/busbar/internal/clock":         true,
		"github.com/busbarmq/busbar/internal/broker/expiry": true,
		"github.com/busbarmq/busbar/internal/filter":        true,
		"github.com/busbarmq/busbar/internal/names":         true,
		"github.com/busbarmq/busbar/internal/history":       true,
		"github.com/google/uuid":                            true,
	}
	for _, dir := range []string{".", "expiry"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			switch {
			case allowed[imp]:
			case strings.Contains(imp, "."):
				t.Errorf("%s imports %s", dir, imp)
			case strings.HasPrefix(imp, "net") || imp == "crypto/tls" || strings.HasPrefix(imp, "os/exec"):
				t.Errorf("%s imports %s", dir, imp)
			}
		}
	}
}
