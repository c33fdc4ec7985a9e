package relay

import (
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/servicebus"
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

// attachProps are the properties of a relayed link's attach to the owner:
// the client's own (com.microsoft:timeout, how long a next-available
// session receiver's attach may wait, among them) and the client's rights
// in servicebus.RelayProperty, which only the gateway sets.
func attachProps(client map[frames.Symbol]any, r servicebus.Relayed) map[string]any {
	out := relayProps(r)
	for k, v := range client {
		if string(k) != servicebus.RelayProperty {
			out[string(k)] = v
		}
	}
	return out
}

// attachTimeoutKey is the attach property with which a client asks how
// long a next-available session receiver's attach may wait (ms).
const attachTimeoutKey frames.Symbol = "com.microsoft:timeout"

// attachWait is how long the gateway waits for the owner's answer to a
// relayed attach: base, or longer when the client asked the owner to hold
// the attach longer (com.microsoft:timeout), plus base for the rest.
func attachWait(client map[frames.Symbol]any, base time.Duration) time.Duration {
	var ms int64
	switch v := client[attachTimeoutKey].(type) {
	case uint32:
		ms = int64(v)
	case int32:
		ms = int64(v)
	case uint64:
		ms = int64(min(v, 1<<40))
	case int64:
		ms = v
	case int:
		ms = int64(v)
	}
	if ms <= 0 {
		return base
	}
	return base + time.Duration(ms)*time.Millisecond
}
