package broker

import (
	"slices"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// stores runs a restart test against the memstore (Close + Open on the
// same instance) and the filestore (the broker and the store reopened on
// the same directory).
func stores(t *testing.T, fn func(t *testing.T, e *env, reopen func())) {
	t.Run("memstore", func(t *testing.T) {
		e := newEnvOn(t, memstore.New())
		fn(t, e, e.restart)
	})
	t.Run("filestore", func(t *testing.T) {
		dir := t.TempDir()
		open := func() store.Store {
			st, err := filestore.Open(filestore.Options{Dir: dir, BackgroundInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		e := newEnvOn(t, open())
		t.Cleanup(func() { e.st.Close() })
		fn(t, e, func() {
			if err := e.b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := e.st.Close(); err != nil {
				t.Fatal(err)
			}
			e.st = open()
			e.open()
		})
	})
}

func TestRestartSequenceNumbersNeverReused(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("q")
		e.sendN("q", 3)
		e.recv("q", ReceiveAndDelete, 3) // the queue is empty, lastSeq 3
		reopen()
		e.send("q", msg("x"))
		if d := e.recv1("q"); d.SequenceNumber != 4 {
			t.Fatalf("seq after restart %d, want 4", d.SequenceNumber)
		}
		// Scheduled numbers too.
		ss, _ := e.b.Schedule(ctx, "q", []*message.Message{msg("s")}, t0.Add(time.Hour))
		reopen()
		ss2, _ := e.b.Schedule(ctx, "q", []*message.Message{msg("s")}, t0.Add(time.Hour))
		if ss2[0] <= ss[0] {
			t.Fatalf("scheduled seq %d after %d", ss2[0], ss[0])
		}
	})
}

func TestRestartKeepsDeliveryCountsAndDropsLocks(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("q", func(p *QueueProperties) { p.MaxDeliveryCount = 4 })
		e.sendN("q", 2)
		d := e.recv1("q")
		e.abandon("q", d.LockToken, nil) // persisted count 1 (synced)
		e.recv1("q")                     // locked again; the lock expires below
		e.advance(time.Minute)
		e.b.Tick() // lock expiry: count 2 (sync=false, durable with the next commit)
		ds := e.recv("q", PeekLock, 2)
		if ds[0].DeliveryCount != 3 || ds[1].DeliveryCount != 1 {
			t.Fatalf("counts before restart %d %d", ds[0].DeliveryCount, ds[1].DeliveryCount)
		}
		reopen()
		// Both locks are gone: available again, counts not raised by the restart.
		ds2 := e.recv("q", PeekLock, 2)
		if len(ds2) != 2 || ds2[0].DeliveryCount != 3 || ds2[1].DeliveryCount != 1 {
			t.Fatalf("after restart: %v counts %d %d", seqs(ds2), ds2[0].DeliveryCount, ds2[1].DeliveryCount)
		}
		wantKind(t, e.b.Complete(ctx, "q", ds[0].LockToken), ErrLockLost)
		// MaxDeliveryCount still counts from the persisted value.
		e.abandon("q", ds2[0].LockToken, nil)
		if d := e.recv1("q"); d.DeliveryCount != 4 {
			t.Fatalf("count %d, want 4", d.DeliveryCount)
		} else {
			e.abandon("q", d.LockToken, nil)
		}
		if d := e.recv1("q/$DeadLetterQueue"); prop(d, PropDeadLetterReason) != ReasonMaxDeliveryCountExceeded {
			t.Fatal("not dead-lettered at MaxDeliveryCount after restart")
		}
	})
}

func TestRestartKeepsStates(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("q", func(p *QueueProperties) { p.DefaultMessageTimeToLive = time.Hour })
		e.sendN("q", 4)
		ds := e.recv("q", PeekLock, 3)
		if err := e.b.Defer(ctx, "q", ds[0].LockToken, map[string]any{"d": "1"}); err != nil {
			t.Fatal(err)
		}
		if err := e.b.DeadLetter(ctx, "q", ds[1].LockToken, "r", "d", nil); err != nil {
			t.Fatal(err)
		}
		e.complete("q", ds[2].LockToken)
		at := t0.Add(10 * time.Minute)
		ss, _ := e.b.Schedule(ctx, "q", []*message.Message{ttlMsg("sched", 10*time.Minute)}, at)
		before, _ := e.b.GetQueue("q")
		reopen()
		after, _ := e.b.GetQueue("q")
		if after.Counts != before.Counts {
			t.Fatalf("counts %+v, before restart %+v", after.Counts, before.Counts)
		}
		ps := e.peek("q", 0, 10)
		if got := seqs(ps); !slices.Equal(got, []int64{1, 4, ss[0]}) {
			t.Fatalf("peek %v", got)
		}
		if ps[0].State != StateDeferred || ps[1].State != StateActive || ps[2].State != StateScheduled {
			t.Fatalf("states %v %v %v", ps[0].State, ps[1].State, ps[2].State)
		}
		if !ps[1].ExpiresAt.Equal(t0.Add(time.Hour)) || !ps[2].ScheduledEnqueueTime.Equal(at) {
			t.Fatalf("times %v %v", ps[1].ExpiresAt, ps[2].ScheduledEnqueueTime)
		}
		got, err := e.b.ReceiveDeferred(ctx, "q", []int64{1}, PeekLock)
		if err != nil || prop(got[0], "d") != "1" {
			t.Fatalf("deferred after restart: %v", err)
		}
		if d := e.recv1("q/$DeadLetterQueue"); d.SequenceNumber != 2 || prop(d, PropDeadLetterReason) != "r" {
			t.Fatalf("DLQ after restart: %d", d.SequenceNumber)
		}
		// The scheduled message still materialises on time, TTL from then.
		e.advance(10 * time.Minute)
		e.b.Tick()
		ds = e.recv("q", PeekLock, 5)
		if len(ds) != 2 || body(ds[1]) != "sched" || !ds[1].ExpiresAt.Equal(at.Add(10*time.Minute)) {
			t.Fatalf("after the scheduled time: %v", bodies(ds))
		}
	})
}

func TestRestartScheduledTimePassedWhileDown(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("q")
		if _, err := e.b.Schedule(ctx, "q", []*message.Message{msg("s")}, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		reopen()
		e.advance(2 * time.Minute)
		if d := e.recv1("q"); body(d) != "s" || d.State != StateActive {
			t.Fatalf("got %q %v", body(d), d.State)
		}
	})
}

func TestRestartKeepsDuplicateHistory(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("q", func(p *QueueProperties) { p.RequiresDuplicateDetection = true })
		e.send("q", msgID("a", "id"))
		reopen()
		e.send("q", msgID("a", "id"))
		if c := e.counts("q"); c.Active != 1 {
			t.Fatalf("duplicate accepted after restart: %+v", c)
		}
	})
}
