package broker

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// TestLargeBodyStoredApart: messages whose body the store takes where it
// lies (bodyApartMin and more: store.Op.More) and smaller ones come back
// identical however they travel — received, peeked, dead-lettered,
// auto-forwarded, through a topic to two subscriptions, scheduled on a
// topic, in a transaction, and after a restart — though the sender
// overwrites every body as soon as its send returns (as the AMQP layer
// reuses its frame buffers).
func TestLargeBodyStoredApart(t *testing.T) {
	for _, kind := range []string{"filestore", "memstore"} {
		t.Run(kind, func(t *testing.T) {
			var st store.Store = memstore.New()
			if kind == "filestore" {
				fs, err := filestore.Open(filestore.Options{Dir: t.TempDir(), BackgroundInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				st = fs
			}
			t.Cleanup(func() { st.Close() })
			testLargeBodyStoredApart(t, newEnvOn(t, st), kind == "filestore")
		})
	}
}

func testLargeBodyStoredApart(t *testing.T, e *env, persistent bool) {
	rng := rand.New(rand.NewSource(1))
	sizes := []int{64 << 10, 20 << 10, bodyApartMin, bodyApartMin - 1, 10}
	n := 0
	// fresh makes one message per size, with its expected copy.
	fresh := func() (msgs, want []*message.Message) {
		for _, size := range sizes {
			n++
			b := make([]byte, size)
			rng.Read(b)
			m := &message.Message{MessageID: fmt.Sprintf("m%d", n), Subject: "s", Durable: true,
				ApplicationProperties: map[string]any{"n": int64(n)}, Body: b}
			w := *m
			w.Body = bytes.Clone(b)
			msgs, want = append(msgs, m), append(want, &w)
		}
		return msgs, want
	}
	// spoil overwrites the bodies sent: the broker must hold none of them.
	spoil := func(msgs []*message.Message) {
		for _, m := range msgs {
			for i := range m.Body {
				m.Body[i] = 0xee
			}
		}
	}
	send := func(path string) []*message.Message {
		t.Helper()
		msgs, want := fresh()
		e.send(path, msgs...)
		spoil(msgs)
		return want
	}
	same := func(step string, d *Delivery, w *message.Message) {
		t.Helper()
		m := d.Message
		if m.MessageID != w.MessageID || m.Subject != w.Subject || prop(d, "n") != w.ApplicationProperties["n"] || !bytes.Equal(m.Body, w.Body) {
			t.Fatalf("%s: message %v came back as %v with a body of %d bytes (want %d, equal %t)",
				step, w.MessageID, m.MessageID, len(m.Body), len(w.Body), bytes.Equal(m.Body, w.Body))
		}
	}
	all := func(step, path string, want []*message.Message, settle func(*Delivery)) {
		t.Helper()
		for _, w := range want {
			d := e.recv1(path)
			same(step, d, w)
			settle(d)
		}
		e.expectEmpty(path)
	}
	complete := func(path string) func(*Delivery) {
		return func(d *Delivery) { e.complete(path, d.LockToken) }
	}

	e.queue("q")
	e.queue("out")
	e.queue("in", forwardTo("out"))
	e.topic("t")
	s1, s2 := e.sub("t", "a"), e.sub("t", "b")

	// Sent one by one and as one batch; peeked, then received.
	want := send("q")
	for _, w := range want[:2] {
		msgs := []*message.Message{{MessageID: fmt.Sprint(w.MessageID, "-alone"), Body: bytes.Clone(w.Body)}}
		e.send("q", msgs...)
		spoil(msgs)
	}
	ps := e.peek("q", 0, 100)
	if len(ps) != len(want)+2 {
		t.Fatalf("peeked %d messages, want %d", len(ps), len(want)+2)
	}
	for i, w := range want {
		same("peeked", ps[i], w)
	}
	for i, w := range want[:2] {
		if !bytes.Equal(ps[len(want)+i].Message.Body, w.Body) {
			t.Fatalf("peeked: message %d sent alone differs", i)
		}
	}
	for _, w := range want {
		same("received", e.recv1("q"), w)
	}
	for _, w := range want[:2] {
		if d := e.take("q"); !bytes.Equal(d.Message.Body, w.Body) {
			t.Fatal("received: a message sent alone differs")
		}
	}
	e.advance(2 * time.Minute) // the locks of the first ones expire

	// Dead-lettered with a reason (a rewrite of the stored form).
	for _, w := range want {
		d := e.recv1("q")
		same("received again", d, w)
		if err := e.b.DeadLetter(ctx, "q", d.LockToken, "Why", "because", nil); err != nil {
			t.Fatal(err)
		}
	}
	all("dead-lettered", "q/$DeadLetterQueue", want, complete("q/$DeadLetterQueue"))

	// Auto-forwarded.
	want = send("in")
	e.flush()
	all("forwarded", "out", want, complete("out"))

	// Through a topic to two subscriptions (the topic's shared data).
	want = send("t")
	all("subscription a", s1, want, complete(s1))
	all("subscription b", s2, want, complete(s2))

	// Scheduled on a topic (the topic keeps the message until then).
	msgs, swant := fresh()
	if _, err := e.b.Schedule(ctx, "t", msgs, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	spoil(msgs)
	e.advance(2 * time.Hour)
	e.flush()
	all("scheduled, subscription a", s1, swant, complete(s1))
	all("scheduled, subscription b", s2, swant, complete(s2))

	// In a transaction, to a queue and a topic.
	qm, qwant := fresh()
	tm, twant := fresh()
	if err := e.b.CommitTxn(ctx, &Txn{Sends: append(txnTo("q", qm...), txnTo("t", tm...)...)}); err != nil {
		t.Fatal(err)
	}
	spoil(qm)
	spoil(tm)
	all("transaction, queue", "q", qwant, complete("q"))
	all("transaction, subscription a", s1, twant, complete(s1))
	all("transaction, subscription b", s2, twant, complete(s2))

	if !persistent {
		return
	}
	// Durable as sent.
	want = send("q")
	twant = send("t")
	e.restart()
	all("after a restart", "q", want, complete("q"))
	all("after a restart, subscription a", s1, twant, complete(s1))
	all("after a restart, subscription b", s2, twant, complete(s2))
}
