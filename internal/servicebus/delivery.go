package servicebus

import (
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// deliveryOpts say which lock information an encoded delivery carries.
type deliveryOpts struct {
	// locked adds x-opt-locked-until (peek-lock deliveries and messages
	// received by sequence number with a lock).
	locked bool
	// lockTokenAnnotation adds the delivery annotation x-opt-lock-token,
	// as Service Bus does on every locked delivery; it is how the Go SDK
	// learns the lock token of a message that came back in a management
	// response (§4.3, §6.3).
	lockTokenAnnotation bool
}

// encodeDelivery encodes d as the AMQP message a client receives
// (message.AppendAMQP): the header's delivery-count is the number of
// previous attempts (§4.4), and the broker's annotations carry d's state.
func encodeDelivery(d *broker.Delivery, opts deliveryOpts) ([]byte, error) {
	s := message.Delivery{
		SequenceNumber:       d.SequenceNumber,
		EnqueuedTime:         d.EnqueuedTime,
		TimeToLive:           d.TimeToLive,
		ExpiresAt:            d.ExpiresAt,
		State:                int32(d.State),
		ScheduledEnqueueTime: d.ScheduledEnqueueTime,
		DeadLetterSource:     d.DeadLetterSource,
		WithLockToken:        opts.lockTokenAnnotation,
		LockToken:            message.UUID(d.LockToken),
	}
	if d.DeliveryCount > 0 {
		s.DeliveryCount = d.DeliveryCount - 1
	}
	if opts.locked {
		s.LockedUntil = d.LockedUntil
	}
	return message.AppendAMQP(make([]byte, 0, 320+len(d.Message.Body)), d.Message, &s)
}

// encodeDeliveryHead is encodeDelivery for a delivery whose body may be
// streamed (d.Body): then head is the message up to its body and trailer
// its footer, to be sent around the body's bytes; otherwise head is the
// whole message.
func encodeDeliveryHead(d *broker.Delivery, opts deliveryOpts) (head, trailer []byte, err error) {
	if d.Body == nil {
		head, err = encodeDelivery(d, opts)
		return head, nil, err
	}
	m := *d.Message
	m.Body, m.Footer = nil, nil
	sent := *d
	sent.Message = &m
	head, err = encodeDelivery(&sent, opts)
	return head, d.Message.Footer, err
}

// closeBody closes the streamed body of a delivery that is not sent.
func closeBody(d *broker.Delivery) {
	if d.Body != nil {
		d.Body.Close()
		d.Body = nil
	}
}
