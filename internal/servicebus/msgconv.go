package servicebus

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/message"
)

// This file converts between AMQP messages (frames.Message) and the
// broker's protocol-neutral message.Message. Every section a sender sends
// is kept and delivered back, as Service Bus does: the bare message, the
// message annotations, the delivery annotations (beside the broker's
// x-opt-lock-token) and the footer.

// fromAMQP converts a decoded AMQP message into out, a message.Message
// it overwrites. The body aliases m.RawBody, so the data m was decoded
// from must not be reused afterwards; nothing else aliases m.
func fromAMQP(out *message.Message, m *frames.Message) error {
	*out = message.Message{Priority: 4}
	if h := m.Header; h != nil {
		out.Durable = h.Durable
		out.Priority = h.Priority
		out.TTL = time.Duration(h.TTL) * time.Millisecond
	}
	if len(m.MessageAnnotations) > 0 {
		out.Annotations = make(map[string]any, len(m.MessageAnnotations))
		for k, v := range m.MessageAnnotations {
			if k == annEnqueueSequenceNumber {
				continue // the broker's alone (auto-forwarding sets it)
			}
			mv, err := toMessageValue(v)
			if err != nil {
				return fmt.Errorf("message annotation %q: %w", string(k), err)
			}
			out.Annotations[string(k)] = mv
		}
	}
	if len(m.DeliveryAnnotations) > 0 {
		out.DeliveryAnnotations = make(map[string]any, len(m.DeliveryAnnotations))
		for k, v := range m.DeliveryAnnotations {
			mv, err := toMessageValue(v)
			if err != nil {
				return fmt.Errorf("delivery annotation %q: %w", string(k), err)
			}
			out.DeliveryAnnotations[string(k)] = mv
		}
	}
	if m.Footer != nil {
		// Kept encoded, whatever its values, and sent back as it came.
		f, err := frames.AppendAnnotationsSection(nil, frames.DescriptorFooter, m.Footer)
		if err != nil {
			return fmt.Errorf("footer: %w", err)
		}
		out.Footer = f
	}
	if p := m.Properties; p != nil {
		var err error
		if out.MessageID, err = toMessageValue(p.MessageID); err != nil {
			return fmt.Errorf("message-id: %w", err)
		}
		if out.CorrelationID, err = toMessageValue(p.CorrelationID); err != nil {
			return fmt.Errorf("correlation-id: %w", err)
		}
		out.UserID = clone(p.UserID)
		out.To = p.To
		out.Subject = p.Subject
		out.ReplyTo = p.ReplyTo
		out.ContentType = string(p.ContentType)
		out.ContentEncoding = string(p.ContentEncoding)
		out.AbsoluteExpiryTime = p.AbsoluteExpiryTime
		out.CreationTime = p.CreationTime
		out.SessionID = p.GroupID
		out.EmptySessionID = p.EmptyGroupID // "" is a session id of its own
		out.GroupSequence = p.GroupSequence
		out.ReplyToSessionID = p.ReplyToGroupID
	}
	if m.ApplicationProperties != nil {
		out.ApplicationProperties = make(map[string]any, len(m.ApplicationProperties))
		for k, v := range m.ApplicationProperties {
			mv, err := toMessageValue(v)
			if err != nil {
				return fmt.Errorf("application property %q: %w", k, err)
			}
			out.ApplicationProperties[k] = mv
		}
	}
	out.Body = m.RawBody
	return nil
}

// decodeMessage decodes one encoded AMQP message a client sends into a
// message.Message. A message without a message-id gets one (a GUID in "N"
// format), as Service Bus gives it one, also for duplicate detection
// ("ServiceBus sets an ID as default, only if the application doesn't set
// its own ID", Azure/azure-service-bus-java#69): the JS SDK keys its lock
// renewal by message id and fails to settle a received message that has
// none ("Failed to stop auto lock renewal - no message ID").
//
// The message's body aliases data (saving a copy of every payload on the
// send path): data must be owned by the caller and never reused, as an
// amqp.IncomingDelivery's payload is (the endpoint gives each frame, and
// each reassembled delivery, a buffer of its own).
//
// The message, the decoded AMQP message and its header and properties take
// one allocation.
func decodeMessage(data []byte) (*message.Message, error) {
	v := new(struct {
		out message.Message
		in  frames.MessageBuf
	})
	if err := v.in.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	out := &v.out
	if err := fromAMQP(out, &v.in.Message); err != nil {
		return nil, err
	}
	if out.MessageID == nil {
		out.MessageID = newMessageID()
	}
	return out, nil
}

// newMessageID is a message id the broker assigns: 32 hex digits, a
// random (version 4) UUID. The random bytes are drawn from crypto/rand in
// blocks rather than once per message (this runs for every message sent
// without an id).
func newMessageID() string {
	var u uuid.UUID
	idRand.Lock()
	if idRand.off == 0 || idRand.off+len(u) > len(idRand.buf) {
		_, _ = rand.Read(idRand.buf[:]) // never fails (crypto/rand)
		idRand.off = 0
	}
	copy(u[:], idRand.buf[idRand.off:])
	clear(idRand.buf[idRand.off : idRand.off+len(u)]) // not kept once used
	idRand.off += len(u)
	idRand.Unlock()
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var out [32]byte
	hex.Encode(out[:], u[:])
	return string(out[:])
}

var idRand struct {
	sync.Mutex
	buf [64 * 16]byte
	off int
}

// amqpProperties is msg's properties section.
func amqpProperties(msg *message.Message) frames.Properties {
	return frames.Properties{
		MessageID:          toAMQPValue(msg.MessageID),
		UserID:             msg.UserID,
		To:                 msg.To,
		Subject:            msg.Subject,
		ReplyTo:            msg.ReplyTo,
		CorrelationID:      toAMQPValue(msg.CorrelationID),
		ContentType:        frames.Symbol(msg.ContentType),
		ContentEncoding:    frames.Symbol(msg.ContentEncoding),
		AbsoluteExpiryTime: msg.AbsoluteExpiryTime,
		CreationTime:       msg.CreationTime,
		GroupID:            msg.SessionID,
		EmptyGroupID:       msg.EmptySessionID,
		GroupSequence:      msg.GroupSequence,
		ReplyToGroupID:     msg.ReplyToSessionID,
	}
}

// toAMQP converts msg's bare message into AMQP sections: header (with
// delivery count 0), message annotations, properties (always present, as
// the Go SDK reads the header only when properties exist, §4.4),
// application properties and body. The caller adds the broker's
// annotations and header fields.
func toAMQP(msg *message.Message) *frames.Message {
	props := amqpProperties(msg)
	m := &frames.Message{
		Header:     &frames.Header{Durable: msg.Durable, Priority: msg.Priority},
		Properties: &props,
		RawBody:    msg.Body,
	}
	if ttl := msg.TTL; ttl > 0 {
		m.Header.TTL = ttlMillis(ttl)
	}
	m.MessageAnnotations = make(map[frames.Symbol]any, len(msg.Annotations)+8)
	for k, v := range msg.Annotations {
		m.MessageAnnotations[frames.Symbol(k)] = toAMQPValue(v)
	}
	if msg.ApplicationProperties != nil {
		m.ApplicationProperties = make(map[string]any, len(msg.ApplicationProperties)+2)
		for k, v := range msg.ApplicationProperties {
			m.ApplicationProperties[k] = toAMQPValue(v)
		}
	}
	return m
}

// ttlMillis converts a TTL to the header's uint milliseconds, clamped.
func ttlMillis(d time.Duration) uint32 {
	ms := d.Milliseconds()
	if ms > int64(^uint32(0)) {
		return ^uint32(0)
	}
	if ms < 1 {
		return 1
	}
	return uint32(ms)
}

// toMessageValue converts a decoded AMQP value to the types message.Message
// allows. Lists, maps, arrays and described values are refused: Service
// Bus allows only simple types in properties.
func toMessageValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64,
		float32, float64, string, time.Time:
		return x, nil
	case []byte:
		return clone(x), nil
	case encoding.Symbol:
		return message.Symbol(x), nil
	case encoding.UUID:
		return message.UUID(x), nil
	case encoding.Char:
		return message.Char(x), nil
	}
	return nil, fmt.Errorf("unsupported AMQP type %T (only simple types are allowed)", v)
}

// toAMQPValue converts a message.Message value to the encoding package's
// Go mapping.
func toAMQPValue(v any) any {
	switch x := v.(type) {
	case message.Symbol:
		return encoding.Symbol(x)
	case message.UUID:
		return encoding.UUID(x)
	case message.Char:
		return encoding.Char(x)
	}
	return v
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
