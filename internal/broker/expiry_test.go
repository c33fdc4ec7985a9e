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
