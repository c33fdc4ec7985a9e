package broker

import (
	"testing"
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
