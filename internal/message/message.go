// Package message is the broker's protocol-neutral form of a Service Bus
// message: what a sender supplied, kept so it can be delivered back
// unchanged. The AMQP endpoint converts between AMQP sections and Message;
// the broker core and the store never see AMQP.
//
// Property values (ApplicationProperties, Annotations, MessageID,
// CorrelationID) hold only these Go types, mirroring AMQP primitive types:
//
//	nil, bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64,
//	float32, float64, string, Symbol, []byte, time.Time, UUID, Char
//
// Body is the sender's encoded body section(s) exactly as received
// (AMQP data / amqp-sequence / amqp-value sections), opaque to the broker,
// so a message is delivered byte for byte as sent.
package message

import "time"

// Symbol is an AMQP symbol value (ASCII).
type Symbol string

// UUID is an AMQP uuid value in RFC 4122 byte order.
type UUID [16]byte

// Char is an AMQP char value (a UTF-32 code point).
type Char rune

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
}

// HasSessionID reports whether the sender gave a session id, possibly
// the empty one.
func (m *Message) HasSessionID() bool { return m.SessionID != "" || m.EmptySessionID }
