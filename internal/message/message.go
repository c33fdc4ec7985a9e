// Package message is Busbar's one model of a Service Bus message, Message,
// and its two encodings: the AMQP form a client sends and receives
// (amqp.go) and the record the store keeps (codec.go). The broker core and
// the store see only Message and the record; the AMQP endpoint converts at
// the edge with DecodeAMQP and AppendAMQP.
//
//	client --AMQP--> DecodeAMQP --> Message --Marshal--> store record
//	client <--AMQP-- AppendAMQP <-- Message <--Unmarshal-- store record
//	                    ^
//	                    Delivery: the broker's state (sequence number,
//	                    lock, delivery count, ...) added on the way out
//
// # Layering
//
// Property values are AMQP values, so this package builds on the AMQP
// codec packages, which only encode and decode: amqp/encoding defines the
// value types (Symbol, UUID and Char, named here as aliases) and
// amqp/frames the message sections (header, properties, section order).
// It imports nothing else of Busbar; the packages above it (broker, store,
// filter, admin, metrics) link those two through it but never import them, and
// never the AMQP endpoint (internal/lint enforces it). frames.Message, the
// generic AMQP message, is left to control traffic ($cbs and $management
// requests and responses), which is not stored.
//
// # Values
//
// Property values (ApplicationProperties, Annotations, DeliveryAnnotations,
// MessageID, CorrelationID) hold only these Go types, the simple AMQP
// types Service Bus allows (SimpleValue checks one):
//
//	nil, bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64,
//	float32, float64, string, Symbol, []byte, time.Time, UUID, Char
//
// The record can also hold lists and maps of them (its tags 19 to 21);
// AppendAMQP writes such values, DecodeAMQP never produces them.
//
// Body is the sender's encoded body section(s) exactly as received
// (AMQP data / amqp-sequence / amqp-value sections), opaque to the broker,
// so a message is delivered byte for byte as sent; Footer likewise.
//
// # The AMQP form
//
// An AMQP message is a sequence of described sections (AMQP 1.0 part 3):
//
//	+--------+------------+------------+------------+-----------+------+--------+
//	| header | delivery-  | message-   | properties | applic.-  | body | footer |
//	| 0x70   | annotations| annotations| 0x73       | properties| 0x75 | 0x78   |
//	|        | 0x71       | 0x72       |            | 0x74      | ..77 |        |
//	+--------+------------+------------+------------+-----------+------+--------+
//
//	section                 Message fields
//	header                  Durable, Priority, TTL (ttl, milliseconds)
//	delivery-annotations    DeliveryAnnotations (symbol keys)
//	message-annotations     Annotations (symbol keys)
//	properties              MessageID, UserID, To, Subject, ReplyTo,
//	                        CorrelationID, ContentType, ContentEncoding,
//	                        AbsoluteExpiryTime, CreationTime, SessionID
//	                        (group-id; EmptySessionID for ""), GroupSequence,
//	                        ReplyToSessionID (reply-to-group-id)
//	application-properties  ApplicationProperties (string keys)
//	body (data, amqp-       Body, the sections' bytes
//	sequence or amqp-value)
//	footer                  Footer, the section's bytes
//
// On delivery the broker's state goes in the same sections: the header's
// delivery-count and ttl, x-opt-lock-token among the delivery
// annotations, and x-opt-sequence-number, x-opt-enqueued-time,
// x-opt-locked-until, x-opt-message-state, x-opt-scheduled-enqueue-time
// and x-opt-deadletter-source among the message annotations
// (AppendAMQP).
package message

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// The AMQP value types a property may hold beside Go's own, defined once
// in package encoding and named here for the packages that know messages
// but not AMQP.
type (
	Symbol = encoding.Symbol // an AMQP symbol (ASCII)
	UUID   = encoding.UUID   // an AMQP uuid, RFC 4122 byte order
	Char   = encoding.Char   // an AMQP char (a UTF-32 code point)
)

// Message is a message as a sender supplied it. System properties the
// broker assigns (sequence number, enqueued time, lock token, delivery
// count, state) are not part of it; the broker keeps them beside it.
type Message struct {
	// Header section.
	Durable  bool
	Priority uint8
	// TTL is the sender's time to live; 0 means none given (the entity's
	// DefaultMessageTimeToLive applies).
	TTL time.Duration

	// Annotations are the sender's message-annotations (symbol keys), such
	// as x-opt-scheduled-enqueue-time or x-opt-partition-key.
	Annotations map[string]any

	// Properties section. Empty strings and zero times mean "not set".
	MessageID          any // string, UUID, uint64 or []byte; nil if absent
	UserID             []byte
	To                 string
	Subject            string // Service Bus "Label"
	ReplyTo            string
	CorrelationID      any // like MessageID
	ContentType        string
	ContentEncoding    string
	AbsoluteExpiryTime time.Time
	CreationTime       time.Time
	SessionID          string // AMQP group-id
	// EmptySessionID reports a session id given as the empty string (with
	// SessionID ""): Service Bus treats "" as a session id of its own.
	// It is false whenever SessionID is not empty.
	EmptySessionID   bool
	GroupSequence    uint32
	ReplyToSessionID string // AMQP reply-to-group-id

	// ApplicationProperties are the user properties.
	ApplicationProperties map[string]any

	// DeliveryAnnotations are the sender's delivery-annotations (symbol
	// keys, simple values). Service Bus keeps them and hands them to
	// receivers beside its own (x-opt-lock-token).
	DeliveryAnnotations map[string]any

	// Footer is the sender's encoded footer section exactly as received
	// (descriptor included), opaque like Body; nil if none was sent.
	Footer []byte

	// Body is the encoded body section(s), opaque.
	Body []byte

	// BodyTail, if set, holds the body instead of Body (which is nil): a
	// large message kept on disk as it arrived (DecodeAMQPHead). The
	// broker stores it as the tail of the record AppendHead encodes;
	// Marshal and the other encoders that need the body in memory refuse
	// such a message with ErrBodyTail.
	BodyTail BodyReader
}

// BodyReader is a body that is not in memory (Message.BodyTail).
type BodyReader interface {
	ReadAt(p []byte, off int64) (int, error)
	Size() int64
}

// HasSessionID reports whether the sender gave a session id, possibly
// the empty one.
func (m *Message) HasSessionID() bool { return m.SessionID != "" || m.EmptySessionID }

// IDText renders a message id, correlation id or property value as text:
// a string or symbol as it is, a uuid in its canonical form, binary in
// hex, a char as its character, anything else as fmt prints it; "" for
// none. The admin API's BrokerProperties and the message histories'
// message-id lookup both show ids this way.
func IDText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case Symbol:
		return string(x)
	case UUID:
		return x.String()
	case []byte:
		return hex.EncodeToString(x)
	case Char:
		return string(rune(x))
	}
	return fmt.Sprint(v)
}
