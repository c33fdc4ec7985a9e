package relay

import (
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// deliveryPayload encodes an owner's delivery, decoded by go-amqp on the
// internal link, for the client. go-amqp writes a header without its
// field defaults, delivery-count 0 among them, where the broker writes
// every delivery-count: rhea (the JS SDK) does not apply the defaults, so
// a first delivery relayed that way reached applications with a
// deliveryCount of undefined instead of 0. The header is therefore
// written as the broker writes it (frames.Header), and go-amqp encodes
// the sections after it.
func deliveryPayload(m *goamqp.Message) ([]byte, error) {
	if m.Header == nil {
		return m.MarshalBinary()
	}
	h := frames.Header{Durable: m.Header.Durable, Priority: m.Header.Priority,
		TTL: uint32(m.Header.TTL / time.Millisecond), FirstAcquirer: m.Header.FirstAcquirer,
		DeliveryCount: m.Header.DeliveryCount}
	out, err := h.AppendAMQP(nil)
	if err != nil {
		return nil, err
	}
	rest := goamqp.Message{Format: m.Format, DeliveryTag: m.DeliveryTag, DeliveryAnnotations: m.DeliveryAnnotations,
		Annotations: m.Annotations, Properties: m.Properties, ApplicationProperties: m.ApplicationProperties,
		Data: m.Data, Value: m.Value, Sequence: m.Sequence, Footer: m.Footer}
	b, err := rest.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(out, b...), nil
}

// ownerOutcome is the outcome a client's disposition is settled with once
// the owner accepted it: the outcome the broker settles a local one with
// (internal/servicebus), not the client's state echoed. A dead-letter is
// a rejected outcome whose error carries the reason; echoed, the JS SDK
// read that error as the settlement failing (GeneralError) although the
// message was dead-lettered.
func ownerOutcome(state frames.DeliveryState) frames.DeliveryState {
	switch s := state.(type) {
	case *frames.Rejected:
		return &frames.Rejected{}
	case *frames.Modified:
		return &frames.Modified{DeliveryFailed: s.DeliveryFailed, UndeliverableHere: s.UndeliverableHere}
	case nil:
		return &frames.Accepted{}
	}
	return state
}
