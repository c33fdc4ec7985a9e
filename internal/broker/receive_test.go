package broker

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestReceiveAndDelete(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 3)
	r := e.receiver("q", ReceiveAndDelete)
	ds, err := r.TryReceive(2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("TryReceive: %d %v", len(ds), err)
	}
	if ds[0].LockToken == (uuid.UUID{}) || ds[0].LockToken == ds[1].LockToken {
		t.Fatal("ReceiveAndDelete deliveries need fresh, distinct tokens")
	}
	if !ds[0].LockedUntil.IsZero() || ds[0].DeliveryCount != 1 {
		t.Fatalf("LockedUntil %v DeliveryCount %d", ds[0].LockedUntil, ds[0].DeliveryCount)
	}
	// Gone for good: not settleable, not peekable, not counted, not after restart.
	wantKind(t, e.b.Complete(ctx, "q", ds[0].LockToken), ErrLockLost)
	if got := seqs(e.peek("q", 0, 10)); !slices.Equal(got, []int64{3}) {
		t.Fatalf("peek after R&D: %v", got)
	}
	e.restart()
	if c := e.counts("q"); c.Active != 1 || c.Total != 1 {
		t.Fatalf("counts after restart %+v", c)
	}
}

func TestPeekLockCompetingReceivers(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.LockDuration = 30 * time.Second })
	e.sendN("q", 3)
	r1 := e.receiver("q", PeekLock)
	r2 := e.receiver("q", PeekLock)
	a, _ := r1.TryReceive(1)
	b, _ := r2.TryReceive(1)
	c, _ := r1.TryReceive(5)
	if len(a) != 1 || len(b) != 1 || len(c) != 1 {
		t.Fatalf("got %d %d %d messages", len(a), len(b), len(c))
	}
	if a[0].SequenceNumber != 1 || b[0].SequenceNumber != 2 || c[0].SequenceNumber != 3 {
		t.Fatalf("competing receivers got %d %d %d", a[0].SequenceNumber, b[0].SequenceNumber, c[0].SequenceNumber)
	}
	if !a[0].LockedUntil.Equal(t0.Add(30*time.Second)) || a[0].LockToken == (uuid.UUID{}) {
		t.Fatalf("lock %v until %v", a[0].LockToken, a[0].LockedUntil)
	}
	if a[0].LockToken.Version() != 4 {
		t.Fatalf("lock token %v is not a version-4 uuid", a[0].LockToken)
	}
	if ds, _ := r2.TryReceive(1); len(ds) != 0 {
		t.Fatal("a locked message was handed out twice")
	}
	// Locks resolve entity-wide: settle r1's message after closing r1, via
	// another path spelling.
	r1.Close()
	e.complete("Q", a[0].LockToken)
	e.complete("q", c[0].LockToken)
	if cnt := e.counts("q"); cnt.Active != 1 {
		t.Fatalf("active %d, want 1 (the one still locked)", cnt.Active)
	}
}

func TestCompleteAndLockLost(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 2)
	d := e.recv1("q")
	// Unknown token.
	wantKind(t, e.b.Complete(ctx, "q", uuid.New()), ErrLockLost)
	// Token of another sub-queue path.
	wantKind(t, e.b.Complete(ctx, "q/$DeadLetterQueue", d.LockToken), ErrLockLost)
	e.complete("q", d.LockToken)
	// Used token: every settlement fails and nothing changes.
	wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrLockLost)
	wantKind(t, e.b.Abandon(ctx, "q", d.LockToken, nil), ErrLockLost)
	wantKind(t, e.b.DeadLetter(ctx, "q", d.LockToken, "r", "d", nil), ErrLockLost)
	wantKind(t, e.b.Defer(ctx, "q", d.LockToken, nil), ErrLockLost)
	wantKind(t, e.b.Release(ctx, "q", d.LockToken), ErrLockLost)
	_, err := e.b.RenewLock(ctx, "q", []uuid.UUID{d.LockToken})
	wantKind(t, err, ErrLockLost)
	if c := e.counts("q"); c.Active != 1 || c.DeadLetter != 0 {
		t.Fatalf("counts %+v", c)
	}
	// Expired token.
	d2 := e.recv1("q")
	e.advance(time.Minute)
	wantKind(t, e.b.Complete(ctx, "q", d2.LockToken), ErrLockLost)
	if d3 := e.recv1("q"); d3.SequenceNumber != d2.SequenceNumber || d3.DeliveryCount != 2 {
		t.Fatalf("after expiry: seq %d count %d", d3.SequenceNumber, d3.DeliveryCount)
	}
}

func TestAbandon(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 3)
	ds := e.recv("q", PeekLock, 2)
	e.abandon("q", ds[1].LockToken, map[string]any{"hello": "world", "n": int64(7)})
	e.abandon("q", ds[0].LockToken, nil)
	// Back at the front, in sequence order, count raised, properties set.
	got := e.recv("q", PeekLock, 3)
	if s := seqs(got); !slices.Equal(s, []int64{1, 2, 3}) {
		t.Fatalf("order after abandon %v", s)
	}
	if got[0].DeliveryCount != 2 || got[1].DeliveryCount != 2 || got[2].DeliveryCount != 1 {
		t.Fatalf("delivery counts %d %d %d", got[0].DeliveryCount, got[1].DeliveryCount, got[2].DeliveryCount)
	}
	if prop(got[1], "hello") != "world" || prop(got[1], "n") != int64(7) {
		t.Fatalf("properties %v", got[1].Message.ApplicationProperties)
	}
	if body(got[1]) != "1" {
		t.Fatalf("body changed: %q", body(got[1]))
	}
	// A property change of an unsupported type is refused, lock kept.
	wantKind(t, e.b.Abandon(ctx, "q", got[0].LockToken, map[string]any{"x": []int{1}}), ErrInvalidArgument)
	e.complete("q", got[0].LockToken)
}

func TestLockExpiryActsLikeAbandon(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 2)
	d := e.recv1("q")
	if next := e.b.NextDeadline(); !next.Equal(d.LockedUntil) {
		t.Fatalf("NextDeadline %v, want the lock end %v", next, d.LockedUntil)
	}
	e.advance(59 * time.Second)
	e.b.Tick()
	if c := e.counts("q"); c.Active != 2 {
		t.Fatalf("counts %+v", c)
	}
	r := e.receiver("q", PeekLock)
	if ds, _ := r.TryReceive(1); len(ds) != 1 || ds[0].SequenceNumber != 2 {
		t.Fatal("want message 2 while 1 is locked")
	}
	select {
	case <-r.Ready():
		t.Fatal("Ready fired with nothing available")
	default:
	}
	ready := r.Ready()
	e.advance(time.Second)
	e.b.Tick()
	select {
	case <-ready:
	default:
		t.Fatal("Ready did not fire when the lock expired")
	}
	ds, _ := r.TryReceive(1)
	if len(ds) != 1 || ds[0].SequenceNumber != 1 || ds[0].DeliveryCount != 2 {
		t.Fatalf("after lock expiry got %v", seqs(ds))
	}
}

func TestReadyAndPublish(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	r := e.receiver("q", PeekLock)
	ready := r.Ready()
	select {
	case <-ready:
		t.Fatal("Ready fired on an empty queue")
	default:
	}
	e.send("q", msg("x"))
	select {
	case <-ready:
	default:
		t.Fatal("Ready did not fire on send")
	}
	select {
	case <-r.Ready():
	default:
		t.Fatal("Ready must be closed while a message is available")
	}
	// Delete: pending receivers fail with not found.
	if err := e.b.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Ready():
	default:
		t.Fatal("Ready did not fire on delete")
	}
	_, err := r.TryReceive(1)
	wantKind(t, err, ErrNotFound)
	// Closed receivers.
	e.queue("q2")
	r2 := e.receiver("q2", PeekLock)
	r2.Close()
	_, err = r2.TryReceive(1)
	wantKind(t, err, ErrClosed)
}

func TestWakeOneReceiverPerMessage(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	const n = 5
	rs := make([]*Receiver, n)
	chs := make([]<-chan struct{}, n)
	for i := range rs {
		rs[i] = e.receiver("q", PeekLock)
		chs[i] = rs[i].Ready()
	}
	fired := func() (k int) {
		for _, c := range chs {
			select {
			case <-c:
				k++
			default:
			}
		}
		return k
	}
	e.send("q", msg("1"))
	if k := fired(); k != 1 {
		t.Fatalf("one message woke %d receivers", k)
	}
	e.send("q", msg("2"), msg("3"))
	if k := fired(); k != 3 {
		t.Fatalf("three messages woke %d receivers", k)
	}
	// Receiver 0 was woken first; it closes without receiving: its
	// message passes on to the next waiter.
	rs[0].Close()
	if k := fired(); k != 4 {
		t.Fatalf("after a woken receiver closed, %d woken", k)
	}
	// A woken receiver that takes all it asked for while more remain
	// passes the rest on.
	ds, _ := rs[1].TryReceive(1)
	if len(ds) != 1 {
		t.Fatal("no message")
	}
	if k := fired(); k != 5 {
		t.Fatalf("after a full TryReceive with messages left, %d woken", k)
	}
	// Delete wakes everyone, with an error to find.
	chs[0] = rs[1].Ready() // closed: messages available
	if err := e.b.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs[1:] {
		select {
		case <-r.Ready():
		default:
			t.Fatalf("receiver %d not woken by delete", i+1)
		}
	}
}

func TestDeleteMessages(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 3)
	e.advance(time.Minute)
	e.sendN("q", 2)
	if _, err := e.b.Schedule(ctx, "q", nil, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.send("q", schedMsg("sched", t0.Add(time.Hour)))
	locked := e.recv1("q")
	// Older than t0+30s: seqs 2, 3 (1 is locked); at most 5.
	n, err := e.b.DeleteMessages(ctx, "q", 5, t0.Add(30*time.Second))
	if err != nil || n != 2 {
		t.Fatalf("DeleteMessages = %d, %v", n, err)
	}
	n, err = e.b.DeleteMessages(ctx, "q", 1, e.clk.Now().Add(time.Second))
	if err != nil || n != 1 {
		t.Fatalf("DeleteMessages max 1 = %d, %v", n, err)
	}
	if got := seqs(e.peek("q", 0, 10)); !slices.Equal(got, []int64{1, 5, 6}) {
		t.Fatalf("left %v", got)
	}
	e.complete("q", locked.LockToken)
}

// TestCheckLocks reports held and lost locks without changing them.
func TestCheckLocks(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.LockDuration = 10 * time.Second })
	e.sendN("q", 3)
	ds := e.recv("q", PeekLock, 3)
	e.complete("q", ds[0].LockToken)
	e.advance(8 * time.Second)
	if _, err := e.b.RenewLock(ctx, "q", []uuid.UUID{ds[2].LockToken}); err != nil {
		t.Fatal(err)
	}
	e.advance(4 * time.Second) // ds[1]'s lock expired, ds[2]'s renewed one holds
	toks := []uuid.UUID{ds[0].LockToken, ds[1].LockToken, ds[2].LockToken, uuid.New()}
	errs, err := e.b.CheckLocks("q", toks)
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, errs[0], ErrLockLost)
	wantKind(t, errs[1], ErrLockLost)
	if errs[2] != nil {
		t.Errorf("renewed lock: %v", errs[2])
	}
	wantKind(t, errs[3], ErrLockLost)
	e.complete("q", ds[2].LockToken) // still held: checking changed nothing
	if _, err := e.b.CheckLocks("nope", toks); KindOf(err) != KindNotFound {
		t.Errorf("unknown queue: %v", err)
	}
}
