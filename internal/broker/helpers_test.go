package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

var ctx = context.Background()

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// env is a broker on a memstore with a fake clock.
type env struct {
	t   testing.TB
	clk *clock.Fake
	st  store.Store
	b   *Broker
}

func newEnv(t testing.TB) *env {
	return newEnvOn(t, memstore.New())
}

func newEnvOn(t testing.TB, st store.Store) *env {
	t.Helper()
	e := &env{t: t, clk: clock.NewFake(t0), st: st}
	e.open()
	t.Cleanup(func() { e.b.Close() })
	return e
}

func (e *env) open() {
	e.t.Helper()
	b, err := Open(Options{Store: e.st, Clock: e.clk})
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.b = b
}

// restart closes the broker and opens a new one on the same store.
func (e *env) restart() {
	e.t.Helper()
	if err := e.b.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	e.open()
}

func (e *env) advance(d time.Duration) {
	e.clk.Advance(d)
}

// queue creates a queue with default properties changed by mods.
func (e *env) queue(name string, mods ...func(*QueueProperties)) {
	e.t.Helper()
	p := DefaultQueueProperties()
	for _, m := range mods {
		m(&p)
	}
	if _, err := e.b.CreateQueue(name, p); err != nil {
		e.t.Fatalf("CreateQueue(%q): %v", name, err)
	}
}

func msg(body string) *message.Message {
	return &message.Message{Body: []byte(body)}
}

func msgID(body, id string) *message.Message {
	return &message.Message{Body: []byte(body), MessageID: id}
}

func (e *env) send(path string, msgs ...*message.Message) {
	e.t.Helper()
	if err := e.b.Send(ctx, path, msgs); err != nil {
		e.t.Fatalf("Send(%s): %v", path, err)
	}
}

func (e *env) sendN(path string, n int) {
	e.t.Helper()
	for i := range n {
		e.send(path, msg(fmt.Sprint(i)))
	}
}

func (e *env) receiver(path string, mode ReceiveMode) *Receiver {
	e.t.Helper()
	r, err := e.b.OpenReceiver(path, mode)
	if err != nil {
		e.t.Fatalf("OpenReceiver(%s): %v", path, err)
	}
	e.t.Cleanup(func() { r.Close() })
	return r
}

func (e *env) recv(path string, mode ReceiveMode, max int) []*Delivery {
	e.t.Helper()
	r := e.receiver(path, mode)
	defer r.Close()
	ds, err := r.TryReceive(max)
	if err != nil {
		e.t.Fatalf("TryReceive(%s): %v", path, err)
	}
	return ds
}

// recv1 receives exactly one message in PeekLock mode.
func (e *env) recv1(path string) *Delivery {
	e.t.Helper()
	ds := e.recv(path, PeekLock, 1)
	if len(ds) != 1 {
		e.t.Fatalf("receive from %s: got %d messages, want 1", path, len(ds))
	}
	return ds[0]
}

func (e *env) expectEmpty(path string) {
	e.t.Helper()
	if ds := e.recv(path, PeekLock, 10); len(ds) != 0 {
		e.t.Fatalf("receive from %s: got %d messages (first seq %d), want none", path, len(ds), ds[0].SequenceNumber)
	}
}

func (e *env) peek(path string, from int64, max int) []*Delivery {
	e.t.Helper()
	ds, err := e.b.Peek(ctx, path, from, max)
	if err != nil {
		e.t.Fatalf("Peek(%s): %v", path, err)
	}
	return ds
}

func (e *env) counts(name string) Counts {
	e.t.Helper()
	info, err := e.b.GetQueue(name)
	if err != nil {
		e.t.Fatalf("GetQueue(%s): %v", name, err)
	}
	return info.Counts
}

func (e *env) complete(path string, tok uuid.UUID) {
	e.t.Helper()
	if err := e.b.Complete(ctx, path, tok); err != nil {
		e.t.Fatalf("Complete: %v", err)
	}
}

func (e *env) abandon(path string, tok uuid.UUID, props map[string]any) {
	e.t.Helper()
	if err := e.b.Abandon(ctx, path, tok, props); err != nil {
		e.t.Fatalf("Abandon: %v", err)
	}
}

func body(d *Delivery) string { return string(d.Message.Body) }

func seqs(ds []*Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.SequenceNumber
	}
	return out
}

func bodies(ds []*Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = body(d)
	}
	return out
}

func wantKind(t testing.TB, err error, sentinel *Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel.Kind)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("got error %q (kind %v), want kind %v", err, KindOf(err), sentinel.Kind)
	}
}

func prop(d *Delivery, k string) any { return d.Message.ApplicationProperties[k] }
