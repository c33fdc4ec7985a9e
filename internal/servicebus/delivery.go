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
