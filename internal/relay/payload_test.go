package relay

import (
	"bytes"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// TestDeliveryPayloadKeepsDeliveryCount: a relayed first delivery carries
// delivery-count 0 in its header, as the broker writes it (rhea reads an
// absent one as undefined); the other header fields and the sections
// after the header come through unchanged.
func TestDeliveryPayloadKeepsDeliveryCount(t *testing.T) {
	for _, h := range []frames.Header{
		{Priority: 4},
		{Durable: true, Priority: 7, TTL: 60000, FirstAcquirer: true, DeliveryCount: 3},
	} {
		head, err := h.AppendAMQP(nil)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := (&goamqp.Message{
			Annotations:           goamqp.Annotations{"x-opt-sequence-number": int64(5)},
			Properties:            &goamqp.MessageProperties{MessageID: "m1"},
			ApplicationProperties: map[string]any{"k": "v"},
			Data:                  [][]byte{[]byte("body")},
		}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var m goamqp.Message // as the internal receiver decodes the owner's delivery
		if err := m.UnmarshalBinary(append(head, rest...)); err != nil {
			t.Fatal(err)
		}
		out, err := deliveryPayload(&m)
		if err != nil {
			t.Fatal(err)
		}
		s, err := frames.SplitMessage(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(s.Header, head) {
			t.Fatalf("header %x, want the broker's %x", s.Header, head)
		}
		if !bytes.Equal(out[len(s.Header):], rest) {
			t.Fatalf("sections after the header changed:\n got %x\nwant %x", out[len(s.Header):], rest)
		}
	}
	// No header: go-amqp's encoding as it is.
	m := goamqp.Message{Data: [][]byte{[]byte("x")}, Header: nil}
	want, _ := m.MarshalBinary()
	if got, err := deliveryPayload(&m); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("no header: %x, %v; want %x", got, err, want)
	}
}
