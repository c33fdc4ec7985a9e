package servicebus

import (
	"slices"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
)

// Annotations the broker adds to delivered and peeked messages, with the
// exact AMQP types the SDKs assert (docs/wire/amqp.md §4.5): the Go SDK panics on
// any other type.
const (
	annSequenceNumber       frames.Symbol = "x-opt-sequence-number"        // long
	annEnqueuedTime         frames.Symbol = "x-opt-enqueued-time"          // timestamp
	annLockedUntil          frames.Symbol = "x-opt-locked-until"           // timestamp
	annMessageState         frames.Symbol = "x-opt-message-state"          // int
	annScheduledEnqueueTime frames.Symbol = "x-opt-scheduled-enqueue-time" // timestamp
	annDeadLetterSource     frames.Symbol = "x-opt-deadletter-source"      // string
	annLockToken            frames.Symbol = "x-opt-lock-token"             // uuid (delivery annotation)
	// annEnqueueSequenceNumber (long) is on auto-forwarded messages only,
	// as in Service Bus: the sequence number a message had where it was
	// first enqueued (broker.EnqueueSequenceNumberAnnotation, set by
	// auto-forwarding and stored with the message); a sender's is dropped.
	annEnqueueSequenceNumber frames.Symbol = "x-opt-enqueue-sequence-number"
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

// encodeDelivery encodes d as the AMQP message a client receives: the
// sender's delivery annotations, bare message and footer with a header whose delivery-count is the number
// of previous attempts (§4.4), the properties section always present,
// header.ttl and absolute-expiry-time from the effective TTL, and the
// broker's annotations. Annotations are omitted rather than sent as null.
//
// It writes the sections straight into the result, without building a
// frames.Message and its maps (this runs once per delivered message); the
// encoding is the one frames.Message.AppendBinary gives for the same
// sections (map entries in key order), which encodeDeliveryReference in
// the tests checks.
func encodeDelivery(d *broker.Delivery, opts deliveryOpts) ([]byte, error) {
	msg := d.Message
	h := frames.Header{Durable: msg.Durable, Priority: msg.Priority}
	if d.DeliveryCount > 0 {
		h.DeliveryCount = d.DeliveryCount - 1
	}
	p := amqpProperties(msg)
	p.AbsoluteExpiryTime = d.ExpiresAt // zero (absent) if it never expires
	if d.TimeToLive > 0 && !d.ExpiresAt.IsZero() {
		h.TTL = ttlMillis(d.TimeToLive)
		// The JS, .NET and Java SDKs read the time to live as
		// absolute-expiry-time - creation-time when both are present (so
		// that TTLs beyond the header's uint32 milliseconds survive), and
		// the JS SDK's expiresAtUtc is enqueued time + that. The sender's
		// creation-time is kept, so absolute-expiry-time is creation-time
		// + the effective TTL: the sender's own value when its TTL is in
		// force. Against the enqueued time it would add the send latency.
		if ct := p.CreationTime; !ct.IsZero() {
			p.AbsoluteExpiryTime = ct.Add(d.TimeToLive)
		}
	}

	// Message annotations: the sender's, without whatever it put under the
	// broker's keys, and the broker's.
	var arr [16]annotation
	ma := arr[:0]
	for k, v := range msg.Annotations {
		switch frames.Symbol(k) {
		case annLockedUntil, annMessageState, annDeadLetterSource, annSequenceNumber, annEnqueuedTime:
			continue
		case annEnqueueSequenceNumber:
			if _, isLong := v.(int64); !isLong {
				continue // never another type (the Go SDK asserts int64)
			}
		case annScheduledEnqueueTime:
			if !d.ScheduledEnqueueTime.IsZero() {
				continue // the broker's value replaces it
			}
			if _, isTime := v.(time.Time); !isTime {
				continue // never a non-timestamp (§4.6)
			}
		}
		ma = append(ma, annotation{k: frames.Symbol(k), v: toAMQPValue(v)})
	}
	ma = append(ma,
		annotation{k: annSequenceNumber, kind: annLong, n: d.SequenceNumber},
		annotation{k: annEnqueuedTime, kind: annTime, t: d.EnqueuedTime})
	if d.State != broker.StateActive {
		ma = append(ma, annotation{k: annMessageState, kind: annInt, n: int64(d.State)})
	}
	if !d.ScheduledEnqueueTime.IsZero() {
		ma = append(ma, annotation{k: annScheduledEnqueueTime, kind: annTime, t: d.ScheduledEnqueueTime})
	}
	if d.DeadLetterSource != "" {
		ma = append(ma, annotation{k: annDeadLetterSource, v: d.DeadLetterSource})
	}
	if opts.locked && !d.LockedUntil.IsZero() {
		ma = append(ma, annotation{k: annLockedUntil, kind: annTime, t: d.LockedUntil})
	}
	sortAnnotations(ma)

	dst, err := h.AppendAMQP(make([]byte, 0, 320+len(msg.Body)))
	if err != nil {
		return nil, err
	}
	var b encoding.Buffer
	b.SetBytes(dst)
	if da := msg.DeliveryAnnotations; opts.lockTokenAnnotation || len(da) > 0 {
		// The sender's delivery annotations (in key order), the broker's
		// lock token in place of any the sender gave.
		var karr [8]string
		keys := karr[:0]
		for k := range da {
			if frames.Symbol(k) != annLockToken {
				keys = append(keys, k)
			}
		}
		if len(keys) > 1 {
			slices.Sort(keys)
		}
		b.WriteDescriptor(frames.DescriptorDeliveryAnnotations)
		w := b.BeginMap()
		n := len(keys)
		for _, k := range keys {
			b.WriteSymbol(frames.Symbol(k))
			if err := b.WriteAny(toAMQPValue(da[k])); err != nil {
				return nil, err
			}
		}
		if opts.lockTokenAnnotation {
			b.WriteSymbol(annLockToken)
			b.WriteUUID(encoding.UUID(d.LockToken))
			n++
		}
		w.End(n)
	}
	b.WriteDescriptor(frames.DescriptorMessageAnnotations)
	w := b.BeginMap()
	for i := range ma {
		a := &ma[i]
		b.WriteSymbol(a.k)
		switch a.kind {
		case annLong:
			b.WriteLong(a.n)
		case annInt:
			b.WriteInt(int32(a.n))
		case annTime:
			b.WriteTimestamp(a.t)
		default:
			if err := b.WriteAny(a.v); err != nil {
				return nil, err
			}
		}
	}
	w.End(len(ma))
	if dst, err = p.AppendAMQP(b.Bytes()); err != nil {
		return nil, err
	}
	b.SetBytes(dst)
	if ap := msg.ApplicationProperties; ap != nil {
		var karr [16]string
		keys := karr[:0]
		for k := range ap {
			keys = append(keys, k)
		}
		if len(keys) > 1 {
			slices.Sort(keys)
		}
		b.WriteDescriptor(frames.DescriptorApplicationProperties)
		w := b.BeginMap()
		for _, k := range keys {
			b.WriteString(k)
			if err := b.WriteAny(toAMQPValue(ap[k])); err != nil {
				return nil, err
			}
		}
		w.End(len(keys))
	}
	return append(append(b.Bytes(), msg.Body...), msg.Footer...), nil
}

// annotation is one entry of a message-annotations map being encoded:
// the broker's own values are kept unboxed (kind), the sender's in v.
type annotation struct {
	k    frames.Symbol
	kind uint8
	v    any
	n    int64
	t    time.Time
}

const (
	annAny  uint8 = iota // v
	annLong              // n as long
	annInt               // n as int
	annTime              // t as timestamp
)

// sortAnnotations sorts by key (insertion sort: a handful of entries).
func sortAnnotations(ma []annotation) {
	if len(ma) > 16 {
		slices.SortFunc(ma, func(a, b annotation) int { return strings.Compare(string(a.k), string(b.k)) })
		return
	}
	for i := 1; i < len(ma); i++ {
		for j := i; j > 0 && ma[j].k < ma[j-1].k; j-- {
			ma[j], ma[j-1] = ma[j-1], ma[j]
		}
	}
}
