package broker

import (
	"slices"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

func ttlMsg(b string, ttl time.Duration) *message.Message {
	return &message.Message{Body: []byte(b), TTL: ttl}
}

func TestTTL(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.DefaultMessageTimeToLive = time.Hour })
	e.send("q", ttlMsg("short", 10*time.Second), ttlMsg("long", 2*time.Hour), msg("default"))
	ps := e.peek("q", 0, 10)
	if ps[0].TimeToLive != 10*time.Second || !ps[0].ExpiresAt.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("short: ttl %v expires %v", ps[0].TimeToLive, ps[0].ExpiresAt)
	}
	// The entity default is a ceiling, and the default.
	if ps[1].TimeToLive != time.Hour || ps[2].TimeToLive != time.Hour {
		t.Fatalf("long/default ttl %v %v, want 1h", ps[1].TimeToLive, ps[2].TimeToLive)
	}
	e.advance(10 * time.Second)
	// Expired: never received. (Service Bus may show it in a peek until it
	// is purged; here the first access after the expiry purges it.)
	if d := e.recv1("q"); body(d) != "long" {
		t.Fatalf("received %q", body(d))
	}
	if got := seqs(e.peek("q", 0, 10)); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("peek after purge %v", got)
	}
	if e.counts("q").DeadLetter != 0 {
		t.Fatal("expired message dead-lettered without DeadLetteringOnMessageExpiration")
	}
}

func TestTTLExpiryByTick(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.DeadLetteringOnMessageExpiration = true })
	e.send("q", ttlMsg("a", time.Minute), ttlMsg("b", 2*time.Minute))
	if next := e.b.NextDeadline(); !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("NextDeadline %v", next)
	}
	e.advance(time.Minute)
	e.b.Tick()
	c := e.counts("q")
	if c.Active != 1 || c.DeadLetter != 1 {
		t.Fatalf("counts after first expiry %+v", c)
	}
	d := e.recv1("q/$DeadLetterQueue")
	if prop(d, PropDeadLetterReason) != ReasonTTLExpired || prop(d, PropDeadLetterErrorDescription) != DescriptionTTLExpired {
		t.Fatalf("properties %v", d.Message.ApplicationProperties)
	}
	// TTL does not apply in the DLQ.
	e.abandon("q/$DeadLetterQueue", d.LockToken, nil)
	e.advance(time.Hour)
	e.b.Tick()
	if d := e.recv1("q/$DeadLetterQueue"); body(d) != "a" {
		t.Fatal("message expired in the DLQ")
	}
}

func TestLockedMessageDoesNotExpire(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.DeadLetteringOnMessageExpiration = true })
	e.send("q", ttlMsg("a", 10*time.Second), ttlMsg("b", 10*time.Second), ttlMsg("c", 10*time.Second))
	ds := e.recv("q", PeekLock, 3)
	e.advance(20 * time.Second)
	e.b.Tick()
	if c := e.counts("q"); c.Active != 3 {
		t.Fatalf("locked messages expired: %+v", c)
	}
	// Renewing an expired message's lock is fine; completing it succeeds.
	e.complete("q", ds[0].LockToken)
	// Abandon: the expiry takes effect at once.
	e.abandon("q", ds[1].LockToken, nil)
	// Lock expiry: likewise.
	e.advance(time.Minute)
	e.b.Tick()
	e.expectEmpty("q")
	dl := e.recv("q/$DeadLetterQueue", PeekLock, 10)
	if got := bodies(dl); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("dead-lettered %v", got)
	}
	for _, d := range dl {
		if prop(d, PropDeadLetterReason) != ReasonTTLExpired {
			t.Fatalf("reason %v", prop(d, PropDeadLetterReason))
		}
	}
}

func TestScheduled(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	at := t0.Add(5 * time.Minute)
	ss, err := e.b.Schedule(ctx, "q", []*message.Message{ttlMsg("s1", 10*time.Minute), msg("s2")}, at)
	if err != nil || len(ss) != 2 || ss[0] != 1 || ss[1] != 2 {
		t.Fatalf("Schedule: %v %v", ss, err)
	}
	// Scheduled via the annotation on a plain send.
	ann := &message.Message{Body: []byte("s3"), Annotations: map[string]any{ScheduledEnqueueTimeAnnotation: at}}
	e.send("q", ann)
	// An annotation in the past enqueues at once.
	past := &message.Message{Body: []byte("now"), Annotations: map[string]any{ScheduledEnqueueTimeAnnotation: t0.Add(-time.Minute)}}
	e.send("q", past)
	c := e.counts("q")
	if c.Scheduled != 3 || c.Active != 1 {
		t.Fatalf("counts %+v", c)
	}
	ps := e.peek("q", 0, 10)
	if ps[0].State != StateScheduled || !ps[0].ScheduledEnqueueTime.Equal(at) || ps[3].State != StateActive {
		t.Fatalf("peek states %v %v %v", ps[0].State, ps[0].ScheduledEnqueueTime, ps[3].State)
	}
	if d := e.recv1("q"); body(d) != "now" {
		t.Fatalf("received %q before the scheduled time", body(d))
	} else {
		e.complete("q", d.LockToken)
	}
	// Cancel one; unknown and non-scheduled numbers are ignored.
	if err := e.b.CancelScheduled(ctx, "q", []int64{ss[1], 99, 4}); err != nil {
		t.Fatal(err)
	}
	// NextDeadline may be early (the completed message's lock end at +1
	// min is a stale entry); a Tick then does nothing and moves it on.
	if next := e.b.NextDeadline(); next.After(at) {
		t.Fatalf("NextDeadline %v, after %v", next, at)
	}
	e.advance(time.Minute)
	e.b.Tick()
	if next := e.b.NextDeadline(); !next.Equal(at) {
		t.Fatalf("NextDeadline %v, want %v", next, at)
	}
	e.advance(4 * time.Minute)
	e.b.Tick()
	ds := e.recv("q", PeekLock, 10)
	if got := bodies(ds); !slices.Equal(got, []string{"s1", "s3"}) {
		t.Fatalf("after the scheduled time got %v", got)
	}
	// TTL counts from the scheduled time: +5 min, TTL 10 min → +15 min.
	if !ds[0].ExpiresAt.Equal(t0.Add(15*time.Minute)) || !ds[0].EnqueuedTime.Equal(at) || !ds[0].ScheduledEnqueueTime.Equal(at) {
		t.Fatalf("expires %v enqueued %v", ds[0].ExpiresAt, ds[0].EnqueuedTime)
	}
	e.abandon("q", ds[0].LockToken, nil)
	e.complete("q", ds[1].LockToken)
	e.advance(10*time.Minute - time.Second)
	if d := e.recv1("q"); body(d) != "s1" {
		t.Fatal("s1 expired early")
	} else {
		e.abandon("q", d.LockToken, nil)
	}
	e.advance(time.Second)
	e.expectEmpty("q")

	// Schedule without a time is refused; a sub-queue cannot schedule.
	_, err = e.b.Schedule(ctx, "q", []*message.Message{msg("x")}, time.Time{})
	wantKind(t, err, ErrInvalidArgument)
	_, err = e.b.Schedule(ctx, "q/$DeadLetterQueue", []*message.Message{msg("x")}, at)
	wantKind(t, err, ErrNotAllowed)
}

func TestDeferral(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 4)
	ds := e.recv("q", PeekLock, 4)
	for _, d := range ds[:3] {
		if err := e.b.Defer(ctx, "q", d.LockToken, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.abandon("q", ds[3].LockToken, nil)
	// Never returned by a normal receive; visible in peek with its state.
	if d := e.recv1("q"); d.SequenceNumber != 4 {
		t.Fatalf("normal receive returned %d", d.SequenceNumber)
	}
	ps := e.peek("q", 0, 10)
	if ps[0].State != StateDeferred || ps[3].State != StateActive {
		t.Fatalf("peek states %v %v", ps[0].State, ps[3].State)
	}
	if c := e.counts("q"); c.Deferred != 3 || c.Active != 1 {
		t.Fatalf("counts %+v", c)
	}
	// By sequence number: one, or many, locked.
	got, err := e.b.ReceiveDeferred(ctx, "q", []int64{3, 1}, PeekLock)
	if err != nil || len(got) != 2 || got[0].SequenceNumber != 3 || got[1].SequenceNumber != 1 {
		t.Fatalf("ReceiveDeferred: %v %v", seqs(got), err)
	}
	if got[0].LockedUntil.IsZero() || got[0].State != StateDeferred || got[0].DeliveryCount != 1 {
		t.Fatalf("deferred delivery %+v", got[0])
	}
	// Locked now: asking again fails, and so does an unknown or active number.
	_, err = e.b.ReceiveDeferred(ctx, "q", []int64{3}, PeekLock)
	wantKind(t, err, ErrMessageNotFound)
	_, err = e.b.ReceiveDeferred(ctx, "q", []int64{2, 42}, PeekLock)
	wantKind(t, err, ErrMessageNotFound)
	_, err = e.b.ReceiveDeferred(ctx, "q", []int64{4}, PeekLock)
	wantKind(t, err, ErrMessageNotFound)
	// Abandon: stays deferred, count raised.
	e.abandon("q", got[0].LockToken, map[string]any{"hello": "world"})
	if p := e.peek("q", 3, 1)[0]; p.State != StateDeferred || p.DeliveryCount != 2 || prop(p, "hello") != "world" {
		t.Fatalf("after abandon: state %v count %d", p.State, p.DeliveryCount)
	}
	// Defer again with properties.
	if err := e.b.Defer(ctx, "q", got[1].LockToken, map[string]any{"again": int32(1)}); err != nil {
		t.Fatal(err)
	}
	got, _ = e.b.ReceiveDeferred(ctx, "q", []int64{1}, PeekLock)
	if prop(got[0], "again") != int32(1) || got[0].DeliveryCount != 1 {
		t.Fatalf("re-deferred: %v count %d", got[0].Message.ApplicationProperties, got[0].DeliveryCount)
	}
	// Dead-letter a deferred message: it becomes active in the DLQ.
	if err := e.b.DeadLetter(ctx, "q", got[0].LockToken, "r", "", nil); err != nil {
		t.Fatal(err)
	}
	if d := e.recv1("q/$DeadLetterQueue"); d.SequenceNumber != 1 || d.State != StateActive {
		t.Fatalf("DLQ got %d %v", d.SequenceNumber, d.State)
	}
	// ReceiveAndDelete by sequence number, then complete the last one.
	got, err = e.b.ReceiveDeferred(ctx, "q", []int64{2}, ReceiveAndDelete)
	if err != nil || len(got) != 1 || !got[0].LockedUntil.IsZero() {
		t.Fatalf("R&D deferred: %v", err)
	}
	got, _ = e.b.ReceiveDeferred(ctx, "q", []int64{3}, PeekLock)
	e.complete("q", got[0].LockToken)
	if c := e.counts("q"); c.Deferred != 0 {
		t.Fatalf("counts %+v", c)
	}
}

func TestDeferredExpiry(t *testing.T) {
	for _, dlq := range []bool{false, true} {
		e := newEnv(t)
		e.queue("q", func(p *QueueProperties) { p.DeadLetteringOnMessageExpiration = dlq })
		e.send("q", ttlMsg("a", time.Minute), ttlMsg("b", time.Hour))
		for _, d := range e.recv("q", PeekLock, 2) {
			if err := e.b.Defer(ctx, "q", d.LockToken, nil); err != nil {
				t.Fatal(err)
			}
		}
		e.advance(2 * time.Minute)
		e.b.Tick()
		// Not expired until touched by a receive by sequence number.
		if c := e.counts("q"); c.Deferred != 2 {
			t.Fatalf("deferred expired on its own: %+v", c)
		}
		got, err := e.b.ReceiveDeferred(ctx, "q", []int64{1, 2}, PeekLock)
		if err != nil || len(got) != 1 || got[0].SequenceNumber != 2 {
			t.Fatalf("ReceiveDeferred returned %v %v", seqs(got), err)
		}
		c := e.counts("q")
		if dlq && c.DeadLetter != 1 || !dlq && c.DeadLetter != 0 || c.Deferred != 1 {
			t.Fatalf("dlq=%v counts %+v", dlq, c)
		}
	}
}

func TestPeek(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 5)
	locked := e.recv1("q")
	ps := e.peek("q", 2, 2)
	if got := seqs(ps); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("peek from 2 max 2: %v", got)
	}
	ps = e.peek("q", 0, 100)
	if len(ps) != 5 || ps[0].SequenceNumber != 1 || !ps[0].LockedUntil.IsZero() || ps[0].LockToken != ([16]byte{}) {
		t.Fatalf("peek includes locked messages, without lock info: %+v", ps[0])
	}
	// No lock taken, no count changed.
	e.abandon("q", locked.LockToken, nil)
	ps = e.peek("q", 1, 1)
	if ps[0].DeliveryCount != 2 {
		t.Fatalf("peek count %d, want 2", ps[0].DeliveryCount)
	}
	if d := e.recv1("q"); d.DeliveryCount != 2 {
		t.Fatalf("receive count %d after peeks", d.DeliveryCount)
	}
	if ps := e.peek("q", 6, 10); len(ps) != 0 {
		t.Fatal("peek past the end returned messages")
	}
	if ps := e.peek("q/$DeadLetterQueue", 0, 10); len(ps) != 0 {
		t.Fatal("peek of the empty DLQ returned messages")
	}
}

func TestHeaderSizeExceeded(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.send("q", &message.Message{Body: []byte("x"), ApplicationProperties: map[string]any{"keep": "me"}})
	d := e.recv1("q")
	big := map[string]any{"big": string(make([]byte, 40*1024)), "big2": string(make([]byte, 30*1024))}
	e.abandon("q", d.LockToken, big) // accepted, but the message moves to the DLQ
	e.expectEmpty("q")
	dl := e.recv1("q/$DeadLetterQueue")
	if prop(dl, PropDeadLetterReason) != ReasonHeaderSizeExceeded || prop(dl, PropDeadLetterErrorDescription) != DescriptionHeaderSizeExceeded {
		t.Fatalf("properties %v", dl.Message.ApplicationProperties)
	}
	if prop(dl, "big") != nil || prop(dl, "keep") != "me" {
		t.Fatal("the oversized changes must be dropped, the original properties kept")
	}
}

func TestReceiveBoundsExpiryWork(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	n := maxExpirePerReceive + 10
	for range n {
		e.send("q", ttlMsg("old", time.Second))
	}
	e.send("q", msg("fresh"))
	e.advance(2 * time.Second)
	q, _, _ := e.b.lookup("q")
	q.mu.Lock()
	q.mu.timers.Reset() // leave the purge to receives alone
	q.mu.Unlock()
	r := e.receiver("q", PeekLock)
	ds, err := r.TryReceive(1)
	if err != nil || len(ds) != 0 {
		t.Fatalf("first receive: %d %v (it should stop after %d expiries)", len(ds), err, maxExpirePerReceive)
	}
	select {
	case <-r.Ready():
	default:
		t.Fatal("Ready must fire: more to purge, a message behind")
	}
	ds, _ = r.TryReceive(1)
	if len(ds) != 1 || body(ds[0]) != "fresh" {
		t.Fatalf("second receive got %v", bodies(ds))
	}
}
