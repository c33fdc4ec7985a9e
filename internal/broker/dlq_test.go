package broker

import (
	"testing"
	"time"
)

// deadLetterN puts n messages into q's DLQ.
func (e *env) deadLetterN(n int) {
	e.t.Helper()
	e.sendN("q", n)
	for _, d := range e.recv("q", PeekLock, n) {
		if err := e.b.DeadLetter(ctx, "q", d.LockToken, "why", "because", nil); err != nil {
			e.t.Fatal(err)
		}
	}
}

func TestDeadLetterQueueOperations(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	const dlq = "q/$DeadLetterQueue"
	e.deadLetterN(4)

	// Exists without being created; matched case-insensitively.
	if ps := e.peek("Q/$deadletterqueue", 0, 10); len(ps) != 4 {
		t.Fatalf("peek DLQ: %d", len(ps))
	}
	// Cannot be deleted alone, has no properties of its own.
	wantKind(t, e.b.DeleteQueue(dlq), ErrNotAllowed)
	_, err := e.b.UpdateQueue(dlq, DefaultQueueProperties())
	wantKind(t, err, ErrNotAllowed)

	// ReceiveAndDelete.
	if ds := e.recv(dlq, ReceiveAndDelete, 1); len(ds) != 1 || ds[0].SequenceNumber != 1 {
		t.Fatal("R&D from DLQ")
	}
	// PeekLock + complete.
	d := e.recv1(dlq)
	e.complete(dlq, d.LockToken)
	// Abandon: back at the front; the delivery count is frozen in a DLQ.
	d = e.recv1(dlq)
	e.abandon(dlq, d.LockToken, map[string]any{"note": "x"})
	d = e.recv1(dlq)
	if d.SequenceNumber != 3 || d.DeliveryCount != 1 || prop(d, "note") != "x" {
		t.Fatalf("after DLQ abandon: seq %d count %d", d.SequenceNumber, d.DeliveryCount)
	}
	// Lock expiry in a DLQ: available again, count still frozen, no
	// MaxDeliveryCount there.
	for range 12 {
		e.advance(time.Minute)
		e.b.Tick()
		d = e.recv1(dlq)
	}
	if d.SequenceNumber != 3 || d.DeliveryCount != 1 {
		t.Fatalf("after DLQ lock expiries: seq %d count %d", d.SequenceNumber, d.DeliveryCount)
	}
	// Defer inside the DLQ, then receive it by sequence number there.
	if err := e.b.Defer(ctx, dlq, d.LockToken, nil); err != nil {
		t.Fatal(err)
	}
	if ps := e.peek(dlq, 3, 1); ps[0].State != StateDeferred {
		t.Fatalf("DLQ peek state %v", ps[0].State)
	}
	got, err := e.b.ReceiveDeferred(ctx, dlq, []int64{3}, PeekLock)
	if err != nil || len(got) != 1 {
		t.Fatalf("ReceiveDeferred in DLQ: %v", err)
	}
	e.complete(dlq, got[0].LockToken)
	// Nothing is cleaned up automatically.
	e.advance(365 * 24 * time.Hour)
	e.b.Tick()
	if c := e.counts("q"); c.DeadLetter != 1 {
		t.Fatalf("DLQ count %d, want 1", c.DeadLetter)
	}
}

func TestTransferDeadLetterQueue(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	const tdlq = "q/$Transfer/$DeadLetterQueue"
	r := e.receiver(tdlq, PeekLock)
	if r.Path() != "q/$Transfer/$DeadLetterQueue" {
		t.Fatalf("path %q", r.Path())
	}
	if ds, err := r.TryReceive(1); err != nil || len(ds) != 0 {
		t.Fatalf("transfer DLQ: %d %v", len(ds), err)
	}
	if ps := e.peek("q/$TRANSFER/$DeadLetterQueue", 0, 1); len(ps) != 0 {
		t.Fatal("transfer DLQ peek")
	}
	if c := e.counts("q"); c.Transfer != 0 || c.TransferDeadLetter != 0 {
		t.Fatalf("counts %+v", c)
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Path
		ok   bool
	}{
		{"q", Path{Entity: "q", SubQueue: SubQueueMain}, true},
		{"a/b.c-d_e", Path{Entity: "a/b.c-d_e", SubQueue: SubQueueMain}, true},
		{"q/$DeadLetterQueue", Path{Entity: "q", SubQueue: SubQueueDeadLetter}, true},
		{"q/$deadletterqueue", Path{Entity: "q", SubQueue: SubQueueDeadLetter}, true},
		{"q/$Transfer/$DeadLetterQueue", Path{Entity: "q", SubQueue: SubQueueTransferDeadLetter}, true},
		{"Q/$TRANSFER/$DEADLETTERQUEUE", Path{Entity: "Q", SubQueue: SubQueueTransferDeadLetter}, true},
		{"$DeadLetterQueue", Path{}, false},
		{"/q", Path{}, false},
		{"q/", Path{}, false},
		{"a//b", Path{}, false},
		{"q/$Other", Path{}, false},
		{"", Path{}, false},
		{"t/Subscriptions/s", Path{Entity: "t", Subscription: "s"}, true},
		{"T/subscriptions/S/$deadletterqueue", Path{Entity: "T", Subscription: "S", SubQueue: SubQueueDeadLetter}, true},
		{"a/b/Subscriptions/s/$Transfer/$DeadLetterQueue", Path{Entity: "a/b", Subscription: "s", SubQueue: SubQueueTransferDeadLetter}, true},
		{"t/Subscriptions/s/x", Path{}, false},
		{"t/Subscriptions/", Path{}, false},
		{"t/Subscriptions", Path{}, false},
		{"t/Subscriptions/$Default", Path{}, false},
	} {
		got, err := ParsePath(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParsePath(%q) = %+v, %v", tc.in, got, err)
		}
		if err == nil && got.String() != tc.in && !tc.ok {
			t.Errorf("String round trip %q", got.String())
		}
	}
}
