package servicebus_test

// Behaviours the JavaScript SDK (@azure/service-bus over rhea) depends on,
// found by the JS conformance suite in tests/js and pinned here at the
// wire, with go-amqp.

import (
	"regexp"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// TestWireAssignsMessageID: a message sent without a message-id is
// delivered with one the broker assigned, as Service Bus does. The JS SDK
// keys lock renewal by message id and cannot settle a message without one
// ("Failed to stop auto lock renewal - no message ID"). A message with an
// id keeps it.
func TestWireAssignsMessageID(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/")
	sess := w.session()
	snd, err := sess.NewSender(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*amqp.Message{
		{Data: [][]byte{[]byte("no id")}},
		{Data: [][]byte{[]byte("no id either")}},
		{Data: [][]byte{[]byte("own id")}, Properties: &amqp.MessageProperties{MessageID: uint64(7)}},
	} {
		if err := snd.Send(w.ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := sess.NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	var ids []any
	for range 3 {
		m, err := rcv.Receive(w.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rcv.AcceptMessage(w.ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.Properties.MessageID)
	}
	for i := range 2 {
		if id, ok := ids[i].(string); !ok || !hex32.MatchString(id) {
			t.Errorf("message %d has message-id %#v; want 32 hex digits", i, ids[i])
		}
	}
	if ids[0] == ids[1] {
		t.Errorf("assigned ids are equal: %v", ids[0])
	}
	if ids[2] != uint64(7) {
		t.Errorf("own message-id became %#v", ids[2])
	}
}

// TestWireTTLFromCreationTime: the JS, .NET and Java SDKs compute a
// received message's time to live as absolute-expiry-time - creation-time
// (and JS its expiresAtUtc as enqueued time + that), so a sender's
// creation-time and TTL must come back as a consistent pair: the
// sender's own pair, not absolute-expiry-time = enqueued time + TTL,
// which would add the send latency. Without a creation-time,
// absolute-expiry-time is the expiry instant.
func TestWireTTLFromCreationTime(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/")
	sess := w.session()
	snd, err := sess.NewSender(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond) // a slow sender
	ttl := time.Hour
	withCreation := &amqp.Message{Data: [][]byte{[]byte("a")}, Header: &amqp.MessageHeader{TTL: ttl},
		Properties: &amqp.MessageProperties{CreationTime: &created, AbsoluteExpiryTime: ptr(created.Add(ttl))}}
	without := &amqp.Message{Data: [][]byte{[]byte("b")}, Header: &amqp.MessageHeader{TTL: ttl}}
	for _, m := range []*amqp.Message{withCreation, without} {
		if err := snd.Send(w.ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := sess.NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		m, err := rcv.Receive(w.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rcv.AcceptMessage(w.ctx, m); err != nil {
			t.Fatal(err)
		}
		if m.Header == nil || m.Header.TTL != ttl {
			t.Fatalf("message %d header %+v; want ttl %v", i, m.Header, ttl)
		}
		p := m.Properties
		enq, _ := m.Annotations["x-opt-enqueued-time"].(time.Time)
		switch i {
		case 0:
			if p.CreationTime == nil || !p.CreationTime.Equal(created) || p.AbsoluteExpiryTime == nil || p.AbsoluteExpiryTime.Sub(*p.CreationTime) != ttl {
				t.Errorf("with creation-time: creation %v, absolute-expiry %v; want %v and +%v", p.CreationTime, p.AbsoluteExpiryTime, created, ttl)
			}
		case 1:
			if p.AbsoluteExpiryTime == nil || !p.AbsoluteExpiryTime.Equal(enq.Add(ttl)) {
				t.Errorf("without creation-time: absolute-expiry %v; want enqueued %v + %v", p.AbsoluteExpiryTime, enq, ttl)
			}
		}
	}
}
