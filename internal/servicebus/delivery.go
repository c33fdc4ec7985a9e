package servicebus

import (
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
)

// Annotations the broker adds to delivered and peeked messages, with the
// exact AMQP types the SDKs assert (amqp-wire §4.5): the Go SDK panics on
// any other type.
const (
	annSequenceNumber        frames.Symbol = "x-opt-sequence-number"         // long
	annEnqueuedTime          frames.Symbol = "x-opt-enqueued-time"           // timestamp
	annLockedUntil           frames.Symbol = "x-opt-locked-until"            // timestamp
	annEnqueueSequenceNumber frames.Symbol = "x-opt-enqueue-sequence-number" // long
	annMessageState          frames.Symbol = "x-opt-message-state"           // int
	annScheduledEnqueueTime  frames.Symbol = "x-opt-scheduled-enqueue-time"  // timestamp
	annDeadLetterSource      frames.Symbol = "x-opt-deadletter-source"       // string
	annLockToken             frames.Symbol = "x-opt-lock-token"              // uuid (delivery annotation)
)

// deliveryOpts say which lock information an encoded delivery carries.
type deliveryOpts struct {
	// locked adds x-opt-locked-until (peek-lock deliveries and messages
	// received by sequence number with a lock).
	locked bool
	// lockTokenAnnotation adds the delivery annotation x-opt-lock-token,
	// which is how the Go SDK learns the lock token of a message that
	// came back in a management response (§4.3, §6.3).
	lockTokenAnnotation bool
}

// encodeDelivery encodes d as the AMQP message a client receives: the
// sender's bare message with a header whose delivery-count is the number
// of previous attempts (§4.4), the properties section always present,
// header.ttl and absolute-expiry-time from the effective TTL, and the
// broker's annotations. Annotations are omitted rather than sent as null.
func encodeDelivery(d *broker.Delivery, opts deliveryOpts) ([]byte, error) {
	m := toAMQP(d.Message)
	if d.DeliveryCount > 0 {
		m.Header.DeliveryCount = d.DeliveryCount - 1
	}
	m.Header.TTL = 0
	m.Properties.AbsoluteExpiryTime = d.ExpiresAt // zero (absent) if it never expires
	if d.TimeToLive > 0 && !d.ExpiresAt.IsZero() {
		m.Header.TTL = ttlMillis(d.TimeToLive)
		// The JS, .NET and Java SDKs read the time to live as
		// absolute-expiry-time - creation-time when both are present (so
		// that TTLs beyond the header's uint32 milliseconds survive), and
		// the JS SDK's expiresAtUtc is enqueued time + that. The sender's
		// creation-time is kept, so absolute-expiry-time is creation-time
		// + the effective TTL: the sender's own value when its TTL is in
		// force. Against the enqueued time it would add the send latency.
		if ct := m.Properties.CreationTime; !ct.IsZero() {
			m.Properties.AbsoluteExpiryTime = ct.Add(d.TimeToLive)
		}
	}

	ma := m.MessageAnnotations
	// Drop whatever a sender put under the broker's keys.
	for _, k := range []frames.Symbol{annLockedUntil, annMessageState, annDeadLetterSource, annSequenceNumber, annEnqueuedTime, annEnqueueSequenceNumber} {
		delete(ma, k)
	}
	ma[annSequenceNumber] = d.SequenceNumber
	ma[annEnqueueSequenceNumber] = d.SequenceNumber
	ma[annEnqueuedTime] = d.EnqueuedTime
	if d.State != broker.StateActive {
		ma[annMessageState] = int32(d.State)
	}
	if !d.ScheduledEnqueueTime.IsZero() {
		ma[annScheduledEnqueueTime] = d.ScheduledEnqueueTime
	} else if v, ok := ma[annScheduledEnqueueTime]; ok {
		if _, isTime := v.(time.Time); !isTime {
			delete(ma, annScheduledEnqueueTime) // never a non-timestamp (§4.6)
		}
	}
	if d.DeadLetterSource != "" {
		ma[annDeadLetterSource] = d.DeadLetterSource
	}
	if opts.locked && !d.LockedUntil.IsZero() {
		ma[annLockedUntil] = d.LockedUntil
	}
	if opts.lockTokenAnnotation {
		m.DeliveryAnnotations = map[frames.Symbol]any{annLockToken: encoding.UUID(d.LockToken)}
	}
	return m.AppendBinary(make([]byte, 0, 256+len(d.Message.Body)))
}
