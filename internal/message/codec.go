package message

// Storage codec: a compact, versioned binary encoding of Message.
//
// The broker stores each message as the bytes produced here (the store's
// Data) and decodes them on delivery or peek. The encoding is private to
// this module: it is not AMQP, it is not meant for the wire, and it may
// only change by bumping the version byte (old versions stay decodable).
//
// Layout (versions 1 and 2). Integers are unsigned LEB128 varints (uvarint) unless
// marked zigzag (varint); strings and byte strings are a uvarint length
// followed by the bytes.
//
//	+---------+----------------+---------------------------------------------+
//	| version | presence       | present fields, in bit order                |
//	| 1 byte  | uvarint bitset | (absent fields take no space at all)        |
//	+---------+----------------+---------------------------------------------+
//
//	bit field                 encoding
//	  0 Durable               (no payload: the bit is the value)
//	  1 Priority              1 byte
//	  2 TTL                   varint nanoseconds
//	  3 Annotations           map
//	  4 MessageID             value
//	  5 UserID                bytes
//	  6 To                    string
//	  7 Subject               string
//	  8 ReplyTo               string
//	  9 CorrelationID         value
//	 10 ContentType           string
//	 11 ContentEncoding       string
//	 12 AbsoluteExpiryTime    time
//	 13 CreationTime          time
//	 14 SessionID             string
//	 15 GroupSequence         uvarint
//	 16 ReplyToSessionID      string
//	 17 ApplicationProperties map
//	 18 Body                  bytes (always last, so everything before it is
//	                          the "header" counted against the 64 KB limit)
//	 19 DeliveryAnnotations   map    (version 2; encoded after bit 17)
//	 20 Footer                bytes  (version 2; encoded after bit 19)
//	 21 EmptySessionID        (version 2; no payload: the session id is "")
//
// Bits 19 to 21 came with version 2: their payloads sit between
// ApplicationProperties and Body, so Body stays last. A message that uses
// none of them is still written as version 1, byte for byte what version 1
// wrote (an older binary reads it); one that uses any is written as
// version 2. Version 1 records are read as they are: they never carry
// bits 19 to 21, and there is nothing to migrate on disk. An older binary
// meets a version 2 record with a clear "unknown version 2" error.
//
//	map   = uvarint count, then count × (key string, value)
//	time  = varint Unix seconds, uvarint nanoseconds (decoded as UTC)
//	value = 1 tag byte, then:
//	        0 nil  1 false  2 true             (no payload)
//	        3 uint8  (1 byte)   4 uint16, 5 uint32, 6 uint64 (uvarint)
//	        7 int8   (1 byte)   8 int16, 9 int32, 10 int64   (varint)
//	        11 float32 (4 bytes LE bits)  12 float64 (8 bytes LE bits)
//	        13 string  14 Symbol  15 []byte                  (bytes)
//	        16 time.Time (time)  17 UUID (16 bytes)  18 Char (uvarint)
//	        19 []any    (uvarint count, values)
//	        20 map[string]any (map)
//	        21 map[any]any    (uvarint count, count × (value key, value))
//
// A field is present when it differs from its zero value, so a nil and an
// empty map (or byte slice) both decode as nil. Times lose their location
// (they decode as UTC) but keep full nanosecond precision.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Codec versions: 1 has bits 0–18; 2 adds bits 19 to 21.
const (
	codecV1 = 1
	codecV2 = 2
)

// Presence bits.
const (
	fDurable = 1 << iota
	fPriority
	fTTL
	fAnnotations
	fMessageID
	fUserID
	fTo
	fSubject
	fReplyTo
	fCorrelationID
	fContentType
	fContentEncoding
	fAbsoluteExpiryTime
	fCreationTime
	fSessionID
	fGroupSequence
	fReplyToSessionID
	fApplicationProperties
	fBody
	fDeliveryAnnotations
	fFooter
	fEmptySessionID
	fAllV1 = fBody<<1 - 1
	fAll   = fEmptySessionID<<1 - 1
)

// Value tags.
const (
	tagNil = iota
	tagFalse
	tagTrue
	tagUint8
	tagUint16
	tagUint32
	tagUint64
	tagInt8
	tagInt16
	tagInt32
	tagInt64
	tagFloat32
	tagFloat64
	tagString
	tagSymbol
	tagBinary
	tagTime
	tagUUID
	tagChar
	tagList
	tagMap
	tagAnyMap
)

// maxDepth bounds the nesting of lists and maps, on encode and decode.
const maxDepth = 32

// ErrCorrupt is returned (wrapped) by Unmarshal for input it cannot decode.
var ErrCorrupt = errors.New("message: corrupt encoding")

// UnsupportedTypeError is returned by Marshal for a property value of a Go
// type outside the set listed in the package documentation.
type UnsupportedTypeError struct {
	Field string // e.g. "ApplicationProperties[\"k\"]"
	Value any
}

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("message: %s has unsupported type %T", e.Field, e.Value)
}

// Marshal encodes m in the storage format.
func Marshal(m *Message) ([]byte, error) {
	return m.AppendBinary(nil)
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (m *Message) MarshalBinary() ([]byte, error) {
	return m.AppendBinary(nil)
}

// AppendBinary appends the encoding of m to b (encoding.BinaryAppender).
func (m *Message) AppendBinary(b []byte) ([]byte, error) {
	b, _, err := AppendWithHeaderSize(b, m)
	return b, err
}

// AppendWithHeaderSize appends the encoding of m to b like AppendBinary and
// also returns m's HeaderSize, computing it only once.
func AppendWithHeaderSize(b []byte, m *Message) ([]byte, int, error) {
	if m.BodyTail != nil {
		return b, 0, ErrBodyTail
	}
	hs, err := m.headerSize()
	if err != nil {
		return b, 0, err
	}
	return m.appendBinary(b, hs, true), hs, nil
}

// ErrBodyTail is the refusal of an encoder that needs the body in memory
// to encode a message whose body is a BodyTail.
var ErrBodyTail = errors.New("message: the body is not in memory")

// AppendHead appends the record of m as AppendWithHeaderSize does, except
// that for a message with a BodyTail it stops before the body's bytes:
// the record is what it appends followed by the BodyTail's bytes.
func AppendHead(b []byte, m *Message) ([]byte, int, error) {
	hs, err := m.headerSize()
	if err != nil {
		return b, 0, err
	}
	return m.appendBinary(b, hs, true), hs, nil
}

// AppendBeforeBody appends the record of m up to the body's bytes:
// everything AppendHead appends for it, the body's length included, but
// not the body itself, whether it is in Body or a BodyTail. The record is
// what it appends followed by the body's bytes (m.Body, or the
// BodyTail's), so that a caller can store a large body where it lies
// rather than copy it behind the head.
func AppendBeforeBody(b []byte, m *Message) ([]byte, int, error) {
	hs, err := m.headerSize()
	if err != nil {
		return b, 0, err
	}
	return m.appendBinary(b, hs, false), hs, nil
}

// bodyLen is the length of m's body, in Body or BodyTail.
func (m *Message) bodyLen() int64 {
	if m.BodyTail != nil {
		return m.BodyTail.Size()
	}
	return int64(len(m.Body))
}

// appendBinary appends m's record, with the bytes of an in-memory Body
// if body is set (a BodyTail's are never appended), else up to them.
func (m *Message) appendBinary(b []byte, hs int, body bool) []byte {
	n := hs
	if bn := m.bodyLen(); bn > 0 {
		n += uvarintLen(uint64(bn))
		if body {
			n += len(m.Body)
		}
	}
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	p := m.presence()
	if p&^fAllV1 != 0 {
		b = append(b, codecV2)
	} else {
		b = append(b, codecV1)
	}
	b = binary.AppendUvarint(b, p)
	if m.Priority != 0 {
		b = append(b, m.Priority)
	}
	if m.TTL != 0 {
		b = binary.AppendVarint(b, int64(m.TTL))
	}
	if len(m.Annotations) > 0 {
		b = appendStringMap(b, m.Annotations, 0)
	}
	if m.MessageID != nil {
		b = appendValue(b, m.MessageID, 0)
	}
	if len(m.UserID) > 0 {
		b = appendBytes(b, m.UserID)
	}
	b = appendOptString(b, m.To)
	b = appendOptString(b, m.Subject)
	b = appendOptString(b, m.ReplyTo)
	if m.CorrelationID != nil {
		b = appendValue(b, m.CorrelationID, 0)
	}
	b = appendOptString(b, m.ContentType)
	b = appendOptString(b, m.ContentEncoding)
	if !m.AbsoluteExpiryTime.IsZero() {
		b = appendTime(b, m.AbsoluteExpiryTime)
	}
	if !m.CreationTime.IsZero() {
		b = appendTime(b, m.CreationTime)
	}
	b = appendOptString(b, m.SessionID)
	if m.GroupSequence != 0 {
		b = binary.AppendUvarint(b, uint64(m.GroupSequence))
	}
	b = appendOptString(b, m.ReplyToSessionID)
	if len(m.ApplicationProperties) > 0 {
		b = appendStringMap(b, m.ApplicationProperties, 0)
	}
	if len(m.DeliveryAnnotations) > 0 {
		b = appendStringMap(b, m.DeliveryAnnotations, 0)
	}
	if len(m.Footer) > 0 {
		b = appendBytes(b, m.Footer)
	}
	if len(m.Body) > 0 && body {
		b = appendBytes(b, m.Body)
	} else if n := m.bodyLen(); n > 0 {
		b = binary.AppendUvarint(b, uint64(n)) // the body's bytes follow
	}
	return b
}

// HeaderSize is the encoded size in bytes of everything but the body: the
// header, properties, annotations and application properties. The broker
// holds it against Service Bus's 64 KB header limit. It reports an
// UnsupportedTypeError like Marshal.
func (m *Message) HeaderSize() (int, error) {
	return m.headerSize()
}

func (m *Message) presence() uint64 {
	var p uint64
	if m.Durable {
		p |= fDurable
	}
	if m.Priority != 0 {
		p |= fPriority
	}
	if m.TTL != 0 {
		p |= fTTL
	}
	if len(m.Annotations) > 0 {
		p |= fAnnotations
	}
	if m.MessageID != nil {
		p |= fMessageID
	}
	if len(m.UserID) > 0 {
		p |= fUserID
	}
	if m.To != "" {
		p |= fTo
	}
	if m.Subject != "" {
		p |= fSubject
	}
	if m.ReplyTo != "" {
		p |= fReplyTo
	}
	if m.CorrelationID != nil {
		p |= fCorrelationID
	}
	if m.ContentType != "" {
		p |= fContentType
	}
	if m.ContentEncoding != "" {
		p |= fContentEncoding
	}
	if !m.AbsoluteExpiryTime.IsZero() {
		p |= fAbsoluteExpiryTime
	}
	if !m.CreationTime.IsZero() {
		p |= fCreationTime
	}
	if m.SessionID != "" {
		p |= fSessionID
	}
	if m.GroupSequence != 0 {
		p |= fGroupSequence
	}
	if m.ReplyToSessionID != "" {
		p |= fReplyToSessionID
	}
	if len(m.ApplicationProperties) > 0 {
		p |= fApplicationProperties
	}
	if m.bodyLen() > 0 {
		p |= fBody
	}
	if len(m.DeliveryAnnotations) > 0 {
		p |= fDeliveryAnnotations
	}
	if len(m.Footer) > 0 {
		p |= fFooter
	}
	if m.EmptySessionID && m.SessionID == "" {
		p |= fEmptySessionID
	}
	return p
}

// headerSize computes the encoded size of everything before the body and
// validates every property value's type on the way.
func (m *Message) headerSize() (int, error) {
	n := 1 + uvarintLen(m.presence())
	if m.Priority != 0 {
		n++
	}
	if m.TTL != 0 {
		n += varintLen(int64(m.TTL))
	}
	if len(m.Annotations) > 0 {
		s, err := stringMapSize(m.Annotations, "Annotations", 0)
		if err != nil {
			return 0, err
		}
		n += s
	}
	if m.MessageID != nil {
		s, err := valueSize(m.MessageID, "MessageID", 0)
		if err != nil {
			return 0, err
		}
		n += s
	}
	if len(m.UserID) > 0 {
		n += bytesLen(len(m.UserID))
	}
	n += optStringLen(m.To) + optStringLen(m.Subject) + optStringLen(m.ReplyTo)
	if m.CorrelationID != nil {
		s, err := valueSize(m.CorrelationID, "CorrelationID", 0)
		if err != nil {
			return 0, err
		}
		n += s
	}
	n += optStringLen(m.ContentType) + optStringLen(m.ContentEncoding)
	if !m.AbsoluteExpiryTime.IsZero() {
		n += timeLen(m.AbsoluteExpiryTime)
	}
	if !m.CreationTime.IsZero() {
		n += timeLen(m.CreationTime)
	}
	n += optStringLen(m.SessionID)
	if m.GroupSequence != 0 {
		n += uvarintLen(uint64(m.GroupSequence))
	}
	n += optStringLen(m.ReplyToSessionID)
	if len(m.ApplicationProperties) > 0 {
		s, err := stringMapSize(m.ApplicationProperties, "ApplicationProperties", 0)
		if err != nil {
			return 0, err
		}
		n += s
	}
	if len(m.DeliveryAnnotations) > 0 {
		s, err := stringMapSize(m.DeliveryAnnotations, "DeliveryAnnotations", 0)
		if err != nil {
			return 0, err
		}
		n += s
	}
	if len(m.Footer) > 0 {
		n += bytesLen(len(m.Footer))
	}
	return n, nil
}

// Unmarshal decodes data produced by Marshal into a new Message. The
// returned message does not alias data.
func Unmarshal(data []byte) (*Message, error) {
	m := new(Message)
	if err := m.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return m, nil
}

// UnmarshalShared decodes data as Unmarshal does, except that the
// message's byte slices (Body, UserID, binary ids and values) alias data
// instead of being copies: one allocation and copy of the payload less.
// The caller hands data over: it must not change or reuse it while the
// message is in use. The slices are capped, so appending to one never
// writes into its neighbours.
func UnmarshalShared(data []byte) (*Message, error) {
	m := new(Message)
	if err := m.UnmarshalShared(data); err != nil {
		return nil, err
	}
	return m, nil
}

// UnmarshalShared decodes data into m as the function UnmarshalShared
// does (for a caller that allocates m along with something else). It
// overwrites every field of m.
func (m *Message) UnmarshalShared(data []byte) error {
	return m.unmarshal(data, true)
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler. It overwrites
// every field of m.
func (m *Message) UnmarshalBinary(data []byte) error {
	return m.unmarshal(data, false)
}

func (m *Message) unmarshal(data []byte, shared bool) error {
	*m = Message{}
	d := decoder{b: data, shared: shared}
	p, err := d.presence()
	if err != nil {
		return err
	}
	// The fields follow in the order of their presence bits.
	d.header(m, p)
	d.properties(m, p)
	d.sections(m, p)
	m.canonical()
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		*m = Message{}
		return d.err
	}
	return nil
}

// ErrShortHead is UnmarshalHead's answer when head ends before the body
// does begin: the caller reads more of the record and tries again.
var ErrShortHead = errors.New("message: the record's head is longer than the bytes given")

// UnmarshalHead decodes every field of a record but its Body from head,
// the first bytes of a record of total bytes, and says where the body's
// bytes are in the record: [bodyOff, bodyOff+bodyLen). The Body is last in
// the record, so a large message's properties are read without its body
// (which a receiver is then sent straight from the store). The message's
// byte slices alias head. If head is too short it fails with
// ErrShortHead.
func UnmarshalHead(head []byte, total int64) (m *Message, bodyOff, bodyLen int64, err error) {
	m = new(Message)
	d := decoder{b: head, shared: true}
	p, err := d.presence()
	if err == nil {
		d.header(m, p)
		d.properties(m, p)
		d.sectionsButBody(m, p)
		if p&fBody != 0 {
			bodyLen = int64(d.uvarint())
		}
	}
	if err == nil {
		err = d.err
	}
	if err != nil {
		if int64(len(head)) < total {
			return nil, 0, 0, ErrShortHead
		}
		return nil, 0, 0, err
	}
	bodyOff = int64(len(head) - len(d.b))
	if bodyLen < 0 || bodyOff+bodyLen != total {
		return nil, 0, 0, fmt.Errorf("%w: body of %d bytes at %d in a record of %d", ErrCorrupt, bodyLen, bodyOff, total)
	}
	m.canonical()
	return m, bodyOff, bodyLen, nil
}

// presence reads the version byte and the presence bits that follow it,
// refusing bits the version does not know.
func (d *decoder) presence() (uint64, error) {
	known := uint64(fAll)
	switch v := d.byte(); {
	case d.err != nil:
		return 0, d.err
	case v == codecV1:
		known = fAllV1
	case v == codecV2:
	default:
		return 0, fmt.Errorf("%w: unknown version %d", ErrCorrupt, v)
	}
	p := d.uvarint()
	if p&^known != 0 {
		return 0, fmt.Errorf("%w: unknown field bits %#x", ErrCorrupt, p&^known)
	}
	return p, nil
}

// header decodes the header fields and message annotations present in p.
func (d *decoder) header(m *Message, p uint64) {
	m.Durable = p&fDurable != 0
	if p&fPriority != 0 {
		m.Priority = d.byte()
	}
	if p&fTTL != 0 {
		m.TTL = time.Duration(d.varint())
	}
	if p&fAnnotations != 0 {
		m.Annotations = nilIfEmpty(d.stringMap(0))
	}
}

// properties decodes the AMQP properties fields present in p.
func (d *decoder) properties(m *Message, p uint64) {
	if p&fMessageID != 0 {
		m.MessageID = d.value(0)
	}
	if p&fUserID != 0 {
		m.UserID = d.bytes()
	}
	if p&fTo != 0 {
		m.To = d.string()
	}
	if p&fSubject != 0 {
		m.Subject = d.string()
	}
	if p&fReplyTo != 0 {
		m.ReplyTo = d.string()
	}
	if p&fCorrelationID != 0 {
		m.CorrelationID = d.value(0)
	}
	if p&fContentType != 0 {
		m.ContentType = d.string()
	}
	if p&fContentEncoding != 0 {
		m.ContentEncoding = d.string()
	}
	if p&fAbsoluteExpiryTime != 0 {
		m.AbsoluteExpiryTime = d.time()
	}
	if p&fCreationTime != 0 {
		m.CreationTime = d.time()
	}
	if p&fSessionID != 0 {
		m.SessionID = d.string()
	}
	if p&fEmptySessionID != 0 && p&fSessionID == 0 {
		m.EmptySessionID = true
	}
	if p&fGroupSequence != 0 {
		v := d.uvarint()
		if v > math.MaxUint32 {
			d.fail("group sequence out of range")
		}
		m.GroupSequence = uint32(v)
	}
	if p&fReplyToSessionID != 0 {
		m.ReplyToSessionID = d.string()
	}
}

// sections decodes the application properties, delivery annotations,
// footer and body present in p.
func (d *decoder) sections(m *Message, p uint64) {
	d.sectionsButBody(m, p)
	if p&fBody != 0 {
		m.Body = d.bytes()
	}
}

// sectionsButBody decodes the sections before the body.
func (d *decoder) sectionsButBody(m *Message, p uint64) {
	if p&fApplicationProperties != 0 {
		m.ApplicationProperties = nilIfEmpty(d.stringMap(0))
	}
	if p&fDeliveryAnnotations != 0 {
		m.DeliveryAnnotations = nilIfEmpty(d.stringMap(0))
	}
	if p&fFooter != 0 {
		m.Footer = d.bytes()
	}
}

// canonical makes present but empty byte fields absent.
func (m *Message) canonical() {
	// A present but empty field decodes as absent, so that decoding is
	// canonical (what decodes, re-encodes to the same message).
	if len(m.UserID) == 0 {
		m.UserID = nil
	}
	if len(m.Body) == 0 {
		m.Body = nil
	}
	if len(m.Footer) == 0 {
		m.Footer = nil
	}
}

// ---- encoding helpers ----

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func varintLen(v int64) int { return uvarintLen(zigzag(v)) }

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func bytesLen(n int) int { return uvarintLen(uint64(n)) + n }

func optStringLen(s string) int {
	if s == "" {
		return 0
	}
	return bytesLen(len(s))
}

func timeLen(t time.Time) int {
	return varintLen(t.Unix()) + uvarintLen(uint64(t.Nanosecond()))
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendOptString(b []byte, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(b, s)
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

func stringMapSize(m map[string]any, field string, depth int) (int, error) {
	if depth >= maxDepth {
		return 0, fmt.Errorf("message: %s nests deeper than %d levels", field, maxDepth)
	}
	n := uvarintLen(uint64(len(m)))
	for k, v := range m {
		s, err := valueSize(v, field, depth+1)
		if err != nil {
			var ute *UnsupportedTypeError
			if errors.As(err, &ute) && ute.Field == field {
				ute.Field = fmt.Sprintf("%s[%q]", field, k)
			}
			return 0, err
		}
		n += bytesLen(len(k)) + s
	}
	return n, nil
}

// valueSize returns the encoded size of v (tag included), or an error for
// an unsupported type.
func valueSize(v any, field string, depth int) (int, error) {
	switch v := v.(type) {
	case nil, bool:
		return 1, nil
	case uint8, int8:
		return 2, nil
	case uint16:
		return 1 + uvarintLen(uint64(v)), nil
	case uint32:
		return 1 + uvarintLen(uint64(v)), nil
	case uint64:
		return 1 + uvarintLen(v), nil
	case int16:
		return 1 + varintLen(int64(v)), nil
	case int32:
		return 1 + varintLen(int64(v)), nil
	case int64:
		return 1 + varintLen(v), nil
	case float32:
		return 5, nil
	case float64:
		return 9, nil
	case string:
		return 1 + bytesLen(len(v)), nil
	case Symbol:
		return 1 + bytesLen(len(v)), nil
	case []byte:
		return 1 + bytesLen(len(v)), nil
	case time.Time:
		return 1 + timeLen(v), nil
	case UUID:
		return 17, nil
	case Char:
		return 1 + uvarintLen(uint64(uint32(v))), nil
	case []any:
		if depth >= maxDepth {
			return 0, fmt.Errorf("message: %s nests deeper than %d levels", field, maxDepth)
		}
		n := 1 + uvarintLen(uint64(len(v)))
		for _, e := range v {
			s, err := valueSize(e, field, depth+1)
			if err != nil {
				return 0, err
			}
			n += s
		}
		return n, nil
	case map[string]any:
		s, err := stringMapSize(v, field, depth)
		return 1 + s, err
	case map[any]any:
		if depth >= maxDepth {
			return 0, fmt.Errorf("message: %s nests deeper than %d levels", field, maxDepth)
		}
		n := 1 + uvarintLen(uint64(len(v)))
		for k, e := range v {
			ks, err := valueSize(k, field, depth+1)
			if err != nil {
				return 0, err
			}
			es, err := valueSize(e, field, depth+1)
			if err != nil {
				return 0, err
			}
			n += ks + es
		}
		return n, nil
	default:
		return 0, &UnsupportedTypeError{Field: field, Value: v}
	}
}

func appendStringMap(b []byte, m map[string]any, depth int) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	for k, v := range m {
		b = appendString(b, k)
		b = appendValue(b, v, depth+1)
	}
	return b
}

// appendValue encodes v; its type has been validated by valueSize.
func appendValue(b []byte, v any, depth int) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, tagNil)
	case bool:
		if v {
			return append(b, tagTrue)
		}
		return append(b, tagFalse)
	case uint8:
		return append(b, tagUint8, v)
	case uint16:
		return binary.AppendUvarint(append(b, tagUint16), uint64(v))
	case uint32:
		return binary.AppendUvarint(append(b, tagUint32), uint64(v))
	case uint64:
		return binary.AppendUvarint(append(b, tagUint64), v)
	case int8:
		return append(b, tagInt8, byte(v))
	case int16:
		return binary.AppendVarint(append(b, tagInt16), int64(v))
	case int32:
		return binary.AppendVarint(append(b, tagInt32), int64(v))
	case int64:
		return binary.AppendVarint(append(b, tagInt64), v)
	case float32:
		return binary.LittleEndian.AppendUint32(append(b, tagFloat32), math.Float32bits(v))
	case float64:
		return binary.LittleEndian.AppendUint64(append(b, tagFloat64), math.Float64bits(v))
	case string:
		return appendString(append(b, tagString), v)
	case Symbol:
		return appendString(append(b, tagSymbol), string(v))
	case []byte:
		return appendBytes(append(b, tagBinary), v)
	case time.Time:
		return appendTime(append(b, tagTime), v)
	case UUID:
		return append(append(b, tagUUID), v[:]...)
	case Char:
		return binary.AppendUvarint(append(b, tagChar), uint64(uint32(v)))
	case []any:
		b = binary.AppendUvarint(append(b, tagList), uint64(len(v)))
		for _, e := range v {
			b = appendValue(b, e, depth+1)
		}
		return b
	case map[string]any:
		return appendStringMap(append(b, tagMap), v, depth)
	case map[any]any:
		b = binary.AppendUvarint(append(b, tagAnyMap), uint64(len(v)))
		for k, e := range v {
			b = appendValue(b, k, depth+1)
			b = appendValue(b, e, depth+1)
		}
		return b
	}
	panic(fmt.Sprintf("message: appendValue of unchecked type %T", v))
}

// ---- decoding ----

func nilIfEmpty(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	return m
}

type decoder struct {
	b      []byte
	err    error
	shared bool // bytes aliases b instead of copying (UnmarshalShared)
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// raw returns the next n bytes, aliasing the input.
func (d *decoder) raw(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail("length exceeds input")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	r := d.raw(d.uvarint())
	if d.err != nil {
		return nil
	}
	if d.shared {
		if len(r) == 0 {
			return nil // as a copy would be
		}
		return r[:len(r):len(r)]
	}
	return append([]byte(nil), r...)
}

func (d *decoder) string() string {
	return string(d.raw(d.uvarint()))
}

func (d *decoder) time() time.Time {
	sec := d.varint()
	nsec := d.uvarint()
	if nsec >= 1e9 {
		d.fail("bad nanoseconds")
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// count reads a collection length; every element takes at least one byte,
// so a count larger than the remaining input is corrupt (this also bounds
// allocations on hostile input).
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("count exceeds input")
		return 0
	}
	return int(n)
}

func (d *decoder) stringMap(depth int) map[string]any {
	if depth >= maxDepth {
		d.fail("nesting too deep")
		return nil
	}
	n := d.count()
	m := make(map[string]any, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.string()
		m[k] = d.value(depth + 1)
	}
	return m
}

func (d *decoder) value(depth int) any {
	switch tag := d.byte(); tag {
	case tagNil:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagUint8:
		return d.byte()
	case tagUint16:
		return uint16(d.uvarintMax(math.MaxUint16, "uint16"))
	case tagUint32:
		return uint32(d.uvarintMax(math.MaxUint32, "uint32"))
	case tagUint64:
		return d.uvarint()
	case tagInt8:
		return int8(d.byte())
	case tagInt16:
		return int16(d.varintIn(math.MinInt16, math.MaxInt16, "int16"))
	case tagInt32:
		return int32(d.varintIn(math.MinInt32, math.MaxInt32, "int32"))
	case tagInt64:
		return d.varint()
	case tagFloat32:
		r := d.raw(4)
		if d.err != nil {
			return nil
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(r))
	case tagFloat64:
		r := d.raw(8)
		if d.err != nil {
			return nil
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(r))
	case tagString:
		return d.string()
	case tagSymbol:
		return Symbol(d.string())
	case tagBinary:
		return d.bytes()
	case tagTime:
		return d.time()
	case tagUUID:
		var u UUID
		copy(u[:], d.raw(16))
		return u
	case tagChar:
		return Char(rune(uint32(d.uvarintMax(math.MaxUint32, "char"))))
	case tagList:
		return d.list(depth)
	case tagMap:
		return d.stringMap(depth)
	case tagAnyMap:
		return d.anyMap(depth)
	default:
		d.fail(fmt.Sprintf("unknown value tag %d", tag))
		return nil
	}
}

// uvarintMax reads a uvarint, failing if it is over max.
func (d *decoder) uvarintMax(max uint64, what string) uint64 {
	v := d.uvarint()
	if v > max {
		d.fail(what + " out of range")
	}
	return v
}

// varintIn reads a varint, failing if it is outside [min, max].
func (d *decoder) varintIn(min, max int64, what string) int64 {
	v := d.varint()
	if v < min || v > max {
		d.fail(what + " out of range")
	}
	return v
}

func (d *decoder) list(depth int) any {
	if depth >= maxDepth {
		d.fail("nesting too deep")
		return nil
	}
	n := d.count()
	l := make([]any, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		l = append(l, d.value(depth+1))
	}
	return l
}

func (d *decoder) anyMap(depth int) any {
	if depth >= maxDepth {
		d.fail("nesting too deep")
		return nil
	}
	n := d.count()
	m := make(map[any]any, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.value(depth + 1)
		v := d.value(depth + 1)
		if d.err != nil {
			break
		}
		if !hashable(k) {
			d.fail("unhashable map key")
			break
		}
		m[k] = v
	}
	return m
}

// hashable reports whether v can be a Go map key.
func hashable(v any) bool {
	switch v.(type) {
	case []byte, []any, map[string]any, map[any]any:
		return false
	}
	return true
}
