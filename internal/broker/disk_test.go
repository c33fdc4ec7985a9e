package broker

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// diskStore is a spyStore whose disk can be made full (every commit fails
// with a NoSpaceError) or low (CheckGrowth refuses, below the watermark).
type diskStore struct {
	*spyStore
	low atomic.Pointer[store.NoSpaceError]
}

func (d *diskStore) CheckGrowth() error {
	if ns := d.low.Load(); ns != nil {
		return ns
	}
	return nil
}

func (d *diskStore) Health() error {
	d.mu.Lock()
	fail := d.fail
	d.mu.Unlock()
	if fail != nil {
		return fail
	}
	return d.CheckGrowth()
}

func (d *diskStore) setFull(full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = nil
	if full {
		d.fail = &store.NoSpaceError{Free: 10, Total: 100, Err: syscall.ENOSPC}
	}
}

func queueNames(b *Broker) []string {
	var names []string
	for _, q := range b.ListQueues() {
		names = append(names, q.Name)
	}
	return names
}

// TestDiskFull: while the disk is full every change is refused as
// KindNoSpace with the store's text and changes nothing in memory: a
// failed settlement keeps its lock (the retry succeeds once there is
// space), a failed create or delete leaves the entity list as it was.
// Reads go on. With space back the same broker carries on, and a restart
// finds the state it had.
func TestDiskFull(t *testing.T) {
	ds := &diskStore{spyStore: &spyStore{Store: memstore.New()}}
	e := newEnvOn(t, ds)
	e.queue("q")
	e.topic("tp")
	e.sub("tp", "s")
	e.sendN("q", 3)
	d := e.recv1("q")
	d2 := e.recv1("q")
	ds.setFull(true)

	err := e.b.Send(ctx, "q", nil)
	if err != nil {
		t.Fatalf("empty send: %v", err)
	}
	err = e.b.Send(ctx, "q", []*message.Message{msg("x")})
	wantKind(t, err, ErrNoSpace)
	if !strings.Contains(err.Error(), "the broker's disk is full: 10 bytes free of 100") {
		t.Fatalf("send error %q does not say why", err)
	}
	wantKind(t, e.b.Send(ctx, "tp", []*message.Message{msg("x")}), ErrNoSpace)
	for range 2 { // the retry finds the lock, and the same cause
		wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrNoSpace)
	}
	wantKind(t, e.b.DeadLetter(ctx, "q", d2.LockToken, "r", "", nil), ErrNoSpace)
	wantKind(t, e.b.Abandon(ctx, "q", d2.LockToken, map[string]any{"k": "v"}), ErrNoSpace)
	if errs := e.b.CompleteBatch(ctx, "q", []uuid.UUID{d.LockToken, d2.LockToken}); !errors.Is(errs[0], ErrNoSpace) || !errors.Is(errs[1], ErrNoSpace) {
		t.Fatalf("CompleteBatch: %v", errs)
	}
	_, err = e.b.CreateQueue("q2", DefaultQueueProperties())
	wantKind(t, err, ErrNoSpace)
	wantKind(t, e.b.DeleteQueue("q"), ErrNoSpace)
	wantKind(t, e.b.DeleteSubscription("tp", "s"), ErrNoSpace)
	wantKind(t, e.b.DeleteTopic("tp"), ErrNoSpace)
	if got := queueNames(e.b); !slices.Equal(got, []string{"q"}) {
		t.Fatalf("queues after failed create and delete: %v", got)
	}
	if _, err := e.b.GetSubscription("tp", "s"); err != nil {
		t.Fatalf("subscription after a failed delete: %v", err)
	}
	if got := e.peek("q", 0, 10); len(got) != 3 {
		t.Fatalf("peek on a full disk: %d messages", len(got))
	}
	wantKind(t, e.b.Health(), ErrNoSpace)

	ds.setFull(false)
	if err := e.b.Health(); err != nil {
		t.Fatalf("Health: %v", err)
	}
	e.complete("q", d.LockToken)
	if err := e.b.DeadLetter(ctx, "q", d2.LockToken, "r", "", nil); err != nil {
		t.Fatalf("dead-letter after space returned: %v", err)
	}
	if _, err := e.b.CreateQueue("q2", DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if got := queueNames(e.b); !slices.Equal(got, []string{"q", "q2"}) {
		t.Fatalf("queues after restart: %v", got)
	}
	if c := e.counts("q"); c.Active != 1 || c.DeadLetter != 1 {
		t.Fatalf("counts after restart: %+v", c)
	}
}

// TestFailedSettlementKeepsLockUntilItExpires: the lock a failed
// settlement keeps still expires on time, and the message is then
// redelivered.
func TestFailedSettlementKeepsLockUntilItExpires(t *testing.T) {
	ds := &diskStore{spyStore: &spyStore{Store: memstore.New()}}
	e := newEnvOn(t, ds)
	e.queue("q", func(p *QueueProperties) { p.LockDuration = 10 * time.Second })
	e.sendN("q", 1)
	d := e.recv1("q")
	ds.setFull(true)
	wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrNoSpace)
	e.expectEmpty("q") // still locked
	ds.setFull(false)
	e.advance(11 * time.Second)
	wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrLockLost)
	if again := e.recv1("q"); again.DeliveryCount != 2 {
		t.Fatalf("redelivered with count %d", again.DeliveryCount)
	}
}

// TestLowDisk: below the watermark new messages and entities are refused
// while settlements and deletes go through.
func TestLowDisk(t *testing.T) {
	ds := &diskStore{spyStore: &spyStore{Store: memstore.New()}}
	e := newEnvOn(t, ds)
	e.queue("q")
	e.queue("old")
	e.sendN("q", 2)
	d := e.recv1("q")
	ds.low.Store(&store.NoSpaceError{Free: 5, Total: 100, MinFree: 10})
	err := e.b.Send(ctx, "q", []*message.Message{msg("x")})
	wantKind(t, err, ErrNoSpace)
	if !strings.Contains(err.Error(), "5 bytes free of 100, below the 10 bytes kept free") {
		t.Fatalf("send error %q", err)
	}
	_, err = e.b.CreateQueue("q2", DefaultQueueProperties())
	wantKind(t, err, ErrNoSpace)
	_, err = e.b.CreateTopic("t2", DefaultTopicProperties())
	wantKind(t, err, ErrNoSpace)
	e.complete("q", d.LockToken)
	if err := e.b.DeleteQueue("old"); err != nil {
		t.Fatalf("delete below the watermark: %v", err)
	}
	wantKind(t, e.b.Health(), ErrNoSpace)
	ds.low.Store(nil)
	e.send("q", msg("y"))
}

// TestStoreStopped: a store stopped by an I/O error gives KindStoreFailed
// with the cause, for sends and settlements alike, and Health says so.
func TestStoreStopped(t *testing.T) {
	ds := &diskStore{spyStore: &spyStore{Store: memstore.New()}}
	e := newEnvOn(t, ds)
	e.queue("q")
	e.sendN("q", 1)
	d := e.recv1("q")
	ds.mu.Lock()
	ds.fail = fmt.Errorf("%w: filestore: sync /secret/1.seg: %w", store.ErrFailed, &os.PathError{Op: "fdatasync", Path: "/secret/1.seg", Err: syscall.EIO})
	ds.mu.Unlock()
	err := e.b.Send(ctx, "q", []*message.Message{msg("x")})
	wantKind(t, err, ErrStoreFailed)
	if !strings.Contains(err.Error(), "input/output error") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q does not give the cause, or shows a path", err)
	}
	wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrStoreFailed)
	wantKind(t, e.b.Health(), ErrStoreFailed)
}

// TestStoreUnavailable: a database store that cannot be reached, that lost
// a commit's answer or that was fenced off refuses with KindStoreUnavailable
// or KindMoved and changes nothing in memory: the send is not there, the
// settled message keeps its lock, and both succeed once the store takes
// writes again.
func TestStoreUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want *Error
	}{
		{fmt.Errorf("pgstore: commit: %w: dial tcp: connection refused", store.ErrUnavailable), ErrStoreUnavailable},
		{fmt.Errorf("pgstore: %w: unexpected EOF", store.ErrOutcomeUnknown), ErrStoreUnavailable},
		{fmt.Errorf("%w (units [4])", store.ErrNotOwner), ErrMoved},
	} {
		ss := &spyStore{Store: memstore.New()}
		e := newEnvOn(t, ss)
		e.queue("q")
		e.sendN("q", 1)
		d := e.recv1("q")
		ss.mu.Lock()
		ss.fail = tc.err
		ss.mu.Unlock()
		wantKind(t, e.b.Send(ctx, "q", []*message.Message{msg("x")}), tc.want)
		wantKind(t, e.b.Complete(ctx, "q", d.LockToken), tc.want)
		ss.mu.Lock()
		ss.fail = nil
		ss.mu.Unlock()
		if err := e.b.Complete(ctx, "q", d.LockToken); err != nil {
			t.Fatalf("%v: complete after the store came back: %v", tc.err, err)
		}
		if info, _ := e.b.GetQueue("q"); info.Counts.Total != 0 {
			t.Fatalf("%v: %d active messages, want 0 (the refused send must not be there)", tc.err, info.Counts.Total)
		}
	}
}
