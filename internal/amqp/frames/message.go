package frames

import (
	"fmt"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Message is an AMQP annotated message (part 3 section 3.2): the bare
// message a sender produced plus the header and annotations intermediaries
// may change. The body is kept encoded.
type Message struct {
	// Header carries transport headers; nil if the section is absent.
	Header *Header

	// DeliveryAnnotations are delivery-specific non-standard properties
	// (Service Bus: x-opt-lock-token on messages returned by
	// receive-by-sequence-number). nil if absent.
	DeliveryAnnotations map[Symbol]any

	// MessageAnnotations are message-specific non-standard properties
	// (x-opt-sequence-number, x-opt-enqueued-time, ...). nil if absent.
	MessageAnnotations map[Symbol]any

	// Properties are the immutable standard properties of the bare
	// message; nil if the section is absent.
	Properties *Properties

	// ApplicationProperties are the user properties (string keys); nil if
	// absent.
	ApplicationProperties map[string]any

	// RawBody is the exact encoding of the body sections: one or more
	// data sections, one or more amqp-sequence sections, or one amqp-value
	// section, descriptors included. Unmarshal fills it with a sub-slice
	// of the input; Marshal writes it verbatim. Build one with
	// AppendDataSection, AppendValueSection or AppendSequenceSection.
	RawBody []byte

	// Footer carries transport footers (message hashes, signatures); nil
	// if absent.
	Footer map[Symbol]any
}

// Header is the header section (part 3 section 3.2.1).
//
//	<type name="header" class="composite" source="list" provides="section">
//	    <descriptor name="amqp:header:list" code="0x00000000:0x00000070"/>
//	    <field name="durable" type="boolean" default="false"/>
//	    <field name="priority" type="ubyte" default="4"/>
//	    <field name="ttl" type="milliseconds"/>
//	    <field name="first-acquirer" type="boolean" default="false"/>
//	    <field name="delivery-count" type="uint" default="0"/>
//	</type>
type Header struct {
	// Durable specifies durability requirements.
	Durable bool

	// Priority is the relative message priority. Absent decodes as 4,
	// and 4 is written as absent; note that Header{} has priority 0.
	Priority uint8

	// TTL is the time to live in milliseconds. 0 is absent: no expiry.
	TTL uint32

	// FirstAcquirer says the message has not been acquired by any other
	// link.
	FirstAcquirer bool

	// DeliveryCount is the number of prior unsuccessful delivery
	// attempts. It is always written, 0 too: rhea (the JS SDK's AMQP
	// stack) does not apply field defaults, so an absent delivery-count
	// would reach JS applications as undefined instead of 0.
	DeliveryCount uint32
}

// Properties is the properties section (part 3 section 3.2.4). Empty
// strings, zero times and a nil id are absent.
//
//	<type name="properties" class="composite" source="list" provides="section">
//	    <descriptor name="amqp:properties:list" code="0x00000000:0x00000073"/>
//	    <field name="message-id" type="*" requires="message-id"/>
//	    <field name="user-id" type="binary"/>
//	    <field name="to" type="*" requires="address"/>
//	    <field name="subject" type="string"/>
//	    <field name="reply-to" type="*" requires="address"/>
//	    <field name="correlation-id" type="*" requires="message-id"/>
//	    <field name="content-type" type="symbol"/>
//	    <field name="content-encoding" type="symbol"/>
//	    <field name="absolute-expiry-time" type="timestamp"/>
//	    <field name="creation-time" type="timestamp"/>
//	    <field name="group-id" type="string"/>
//	    <field name="group-sequence" type="sequence-no"/>
//	    <field name="reply-to-group-id" type="string"/>
//	</type>
type Properties struct {
	// MessageID uniquely identifies the message: uint64 (message-id-ulong),
	// UUID, []byte or string; nil is absent.
	MessageID any
	// UserID is the identity of the user responsible for producing the
	// message.
	UserID []byte
	// To is the address of the node the message is destined for.
	To string
	// Subject is a common field for summary information about the message
	// content and purpose (Service Bus: Label / Subject).
	Subject string
	// ReplyTo is the address of the node to send replies to.
	ReplyTo string
	// CorrelationID is a client-specific id used to mark or identify
	// messages between clients; same types as MessageID.
	CorrelationID any
	// ContentType is the RFC-2046 MIME type of the message body.
	ContentType Symbol
	// ContentEncoding is the content-encoding of the body (RFC-2616).
	ContentEncoding Symbol
	// AbsoluteExpiryTime is the time when this message is considered
	// expired.
	AbsoluteExpiryTime time.Time
	// CreationTime is the time when this message was created.
	CreationTime time.Time
	// GroupID identifies the group the message belongs to (Service Bus:
	// SessionId).
	GroupID string
	// EmptyGroupID reports a group-id present as the empty string (with
	// GroupID ""), which Service Bus treats as a session id of its own;
	// an empty GroupID is otherwise written as null.
	EmptyGroupID bool
	// GroupSequence is the relative position of this message within its
	// group. 0 is written as absent.
	GroupSequence uint32
	// ReplyToGroupID is a client-specific id used so that a client can
	// send replies to this message to a specific group (Service Bus:
	// ReplyToSessionId).
	ReplyToGroupID string
}

// AppendAMQP appends the encoded header section to dst.
func (h *Header) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	f := beginFields(&b, DescriptorHeader)
	f.boolOmitFalse(h.Durable)
	if h.Priority == 4 {
		f.null()
	} else {
		f.ubyte(h.Priority)
	}
	f.uintOmitZero(h.TTL)
	f.boolOmitFalse(h.FirstAcquirer)
	f.uint(h.DeliveryCount)
	f.end()
	return b.Bytes(), nil
}

// UnmarshalAMQP decodes a header section.
func (h *Header) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorHeader, "header")
	if err != nil {
		return err
	}
	*h = Header{Priority: 4}
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		switch i {
		case 0:
			h.Durable, err = r.ReadBool()
		case 1:
			h.Priority, err = r.ReadUint8()
		case 2:
			h.TTL, err = r.ReadUint32()
		case 3:
			h.FirstAcquirer, err = r.ReadBool()
		case 4:
			h.DeliveryCount, err = r.ReadUint32()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, 0, 0)
}

// AppendAMQP appends the encoded properties section to dst.
func (p *Properties) AppendAMQP(dst []byte) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	err := p.marshal(&b)
	return b.Bytes(), err
}

func (p *Properties) marshal(b *encoding.Buffer) error {
	f := beginFields(b, DescriptorProperties)
	if err := f.messageID(p.MessageID); err != nil {
		return fmt.Errorf("frames: message-id: %w", err)
	}
	f.binary(p.UserID)
	f.str(p.To)
	f.str(p.Subject)
	f.str(p.ReplyTo)
	if err := f.messageID(p.CorrelationID); err != nil {
		return fmt.Errorf("frames: correlation-id: %w", err)
	}
	f.sym(p.ContentType)
	f.sym(p.ContentEncoding)
	f.timestamp(p.AbsoluteExpiryTime)
	f.timestamp(p.CreationTime)
	if p.GroupID == "" && p.EmptyGroupID {
		f.strAlways("")
	} else {
		f.str(p.GroupID)
	}
	f.uintOmitZero(p.GroupSequence)
	f.str(p.ReplyToGroupID)
	f.end()
	return nil
}

func (f *fields) messageID(v any) error {
	if v == nil {
		f.l.Null()
		return nil
	}
	if err := f.b.WriteAny(v); err != nil {
		return err
	}
	f.l.Next()
	return nil
}

func (f *fields) timestamp(t time.Time) {
	if t.IsZero() {
		f.l.Null()
		return
	}
	f.b.WriteTimestamp(t)
	f.l.Next()
}

// UnmarshalAMQP decodes a properties section.
func (p *Properties) UnmarshalAMQP(r *encoding.Reader) error {
	c, err := beginComposite(r, DescriptorProperties, "properties")
	if err != nil {
		return err
	}
	*p = Properties{}
	for i := 0; i < c.n; i++ {
		if r.ReadNull() {
			continue
		}
		switch i {
		case 0:
			p.MessageID, err = readMessageID(r)
		case 1:
			p.UserID, err = r.ReadBinary()
		case 2:
			p.To, err = readAddress(r)
		case 3:
			p.Subject, err = r.ReadString()
		case 4:
			p.ReplyTo, err = readAddress(r)
		case 5:
			p.CorrelationID, err = readMessageID(r)
		case 6:
			p.ContentType, err = r.ReadSymbol()
		case 7:
			p.ContentEncoding, err = r.ReadSymbol()
		case 8:
			p.AbsoluteExpiryTime, err = r.ReadTimestamp()
		case 9:
			p.CreationTime, err = r.ReadTimestamp()
		case 10:
			p.GroupID, err = r.ReadString()
			p.EmptyGroupID = err == nil && p.GroupID == ""
		case 11:
			p.GroupSequence, err = r.ReadUint32()
		case 12:
			p.ReplyToGroupID, err = r.ReadString()
		default:
			err = r.Skip()
		}
		if err != nil {
			return c.fieldErr(i, err)
		}
	}
	return c.finish(r, 0, 0)
}

// readMessageID reads a message-id or correlation-id: ulong, uuid, binary
// or string (part 3 section 3.2.11 to 3.2.15).
func readMessageID(r *encoding.Reader) (any, error) {
	c, err := r.PeekCode()
	if err != nil {
		return nil, err
	}
	switch c {
	case encoding.TypeCodeUlong0, encoding.TypeCodeSmallUlong, encoding.TypeCodeUlong,
		encoding.TypeCodeUUID, encoding.TypeCodeVbin8, encoding.TypeCodeVbin32,
		encoding.TypeCodeStr8, encoding.TypeCodeStr32:
		return r.ReadAny()
	}
	return nil, &encoding.TypeError{Code: c, Want: "message-id (ulong, uuid, binary or string)"}
}

// UnmarshalBinary decodes an encoded message. The result aliases data:
// RawBody, UserID and binary values are sub-slices of it.
func (m *Message) UnmarshalBinary(data []byte) error {
	return m.unmarshal(data, nil, nil)
}

// MessageBuf is a Message with room for its header and properties: decoding
// one costs no allocation of their own.
type MessageBuf struct {
	Message
	header     Header
	properties Properties
}

// UnmarshalBinary decodes data into b.Message as Message.UnmarshalBinary
// does, its Header and Properties pointing into b.
func (b *MessageBuf) UnmarshalBinary(data []byte) error {
	return b.unmarshal(data, &b.header, &b.properties)
}

// unmarshal decodes data into m, into h and p if they are not nil.
func (m *Message) unmarshal(data []byte, h *Header, p *Properties) error {
	s, err := SplitMessage(data)
	if err != nil {
		return err
	}
	*m = Message{RawBody: s.Body}
	var r encoding.Reader
	if s.Header != nil {
		if h == nil {
			h = new(Header)
		}
		m.Header = h
		r.Reset(s.Header)
		if err := m.Header.UnmarshalAMQP(&r); err != nil {
			return err
		}
	}
	if s.DeliveryAnnotations != nil {
		if m.DeliveryAnnotations, err = readAnnotations(&r, s.DeliveryAnnotations); err != nil {
			return fmt.Errorf("frames: delivery-annotations: %w", err)
		}
	}
	if s.MessageAnnotations != nil {
		if m.MessageAnnotations, err = readAnnotations(&r, s.MessageAnnotations); err != nil {
			return fmt.Errorf("frames: message-annotations: %w", err)
		}
	}
	if s.Properties != nil {
		if p == nil {
			p = new(Properties)
		}
		m.Properties = p
		r.Reset(s.Properties)
		if err := m.Properties.UnmarshalAMQP(&r); err != nil {
			return err
		}
	}
	if s.ApplicationProperties != nil {
		r.Reset(s.ApplicationProperties)
		if _, _, err := r.ReadDescriptor(); err != nil {
			return err
		}
		if m.ApplicationProperties, err = r.ReadStringMap(); err != nil {
			return fmt.Errorf("frames: application-properties: %w", err)
		}
		if m.ApplicationProperties == nil {
			m.ApplicationProperties = map[string]any{}
		}
	}
	if s.Footer != nil {
		if m.Footer, err = readAnnotations(&r, s.Footer); err != nil {
			return fmt.Errorf("frames: footer: %w", err)
		}
	}
	return nil
}

// readAnnotations decodes a described symbol-keyed map section. A null
// map decodes as an empty one, so that presence survives.
func readAnnotations(r *encoding.Reader, raw []byte) (map[Symbol]any, error) {
	r.Reset(raw)
	if _, _, err := r.ReadDescriptor(); err != nil {
		return nil, err
	}
	m, err := r.ReadSymbolMap()
	if m == nil && err == nil {
		m = map[Symbol]any{}
	}
	return m, err
}

// MarshalBinary encodes the message.
func (m *Message) MarshalBinary() ([]byte, error) {
	return m.AppendBinary(make([]byte, 0, 256+len(m.RawBody)))
}

// AppendBinary appends the encoded message to dst: the sections present,
// in spec order, with RawBody copied verbatim.
func (m *Message) AppendBinary(dst []byte) ([]byte, error) {
	var err error
	if m.Header != nil {
		if dst, err = m.Header.AppendAMQP(dst); err != nil {
			return dst, err
		}
	}
	if dst, err = AppendAnnotationsSection(dst, DescriptorDeliveryAnnotations, m.DeliveryAnnotations); err != nil {
		return dst, err
	}
	if dst, err = AppendAnnotationsSection(dst, DescriptorMessageAnnotations, m.MessageAnnotations); err != nil {
		return dst, err
	}
	if m.Properties != nil {
		if dst, err = m.Properties.AppendAMQP(dst); err != nil {
			return dst, err
		}
	}
	if m.ApplicationProperties != nil {
		var b encoding.Buffer
		b.SetBytes(dst)
		b.WriteDescriptor(DescriptorApplicationProperties)
		err = b.WriteStringMap(m.ApplicationProperties)
		dst = b.Bytes()
		if err != nil {
			return dst, err
		}
	}
	dst = append(dst, m.RawBody...)
	return AppendAnnotationsSection(dst, DescriptorFooter, m.Footer)
}

// AppendAnnotationsSection appends a symbol-keyed map section
// (delivery-annotations, message-annotations or footer, chosen by
// descriptor) to dst. A nil map appends nothing.
func AppendAnnotationsSection(dst []byte, descriptor uint64, m map[Symbol]any) ([]byte, error) {
	if m == nil {
		return dst, nil
	}
	var b encoding.Buffer
	b.SetBytes(dst)
	b.WriteDescriptor(descriptor)
	err := b.WriteSymbolMap(m)
	return b.Bytes(), err
}

// AppendDataSection appends a data body section holding p.
func AppendDataSection(dst, p []byte) []byte {
	var b encoding.Buffer
	b.SetBytes(dst)
	b.WriteDescriptor(DescriptorData)
	b.WriteBinary(p)
	return b.Bytes()
}

// AppendValueSection appends an amqp-value body section holding v.
func AppendValueSection(dst []byte, v any) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	b.WriteDescriptor(DescriptorAMQPValue)
	err := b.WriteAny(v)
	return b.Bytes(), err
}

// AppendSequenceSection appends an amqp-sequence body section holding the
// list v.
func AppendSequenceSection(dst []byte, v []any) ([]byte, error) {
	var b encoding.Buffer
	b.SetBytes(dst)
	b.WriteDescriptor(DescriptorAMQPSequence)
	err := b.WriteList(v)
	return b.Bytes(), err
}

// Sections locates the sections of an encoded message without decoding
// them. Each field is the section's exact encoding (descriptor included),
// a sub-slice of the input, or nil when absent. Body spans all body
// sections.
type Sections struct {
	Header                []byte
	DeliveryAnnotations   []byte
	MessageAnnotations    []byte
	Properties            []byte
	ApplicationProperties []byte
	Body                  []byte
	Footer                []byte

	// BodyType is the descriptor of the body sections (DescriptorData,
	// DescriptorAMQPSequence or DescriptorAMQPValue), 0 if there is no
	// body.
	BodyType uint64
}

// SplitMessage locates the sections of an encoded message. It checks the
// section order and that each value is well-formed at its top level.
func SplitMessage(data []byte) (Sections, error) {
	var s Sections
	var r encoding.Reader
	r.Reset(data)
	rank := -1
	bodyStart, bodyEnd := -1, -1
	for r.Len() > 0 {
		start := r.Offset()
		code, name, err := r.ReadDescriptor()
		if err != nil {
			return Sections{}, fmt.Errorf("frames: message section at %d: %w", start, err)
		}
		if name != "" {
			code = symbolicDescriptor(name)
		}
		if err := r.Skip(); err != nil {
			return Sections{}, fmt.Errorf("frames: message section 0x%x: %w", code, err)
		}
		raw := data[start:r.Offset():r.Offset()]
		if code < DescriptorHeader || code > DescriptorFooter {
			return Sections{}, fmt.Errorf("%w: descriptor 0x%x", ErrUnknownSection, code)
		}
		rk := int(code - DescriptorHeader)
		isBody := code >= DescriptorData && code <= DescriptorAMQPValue
		if isBody {
			rk = int(DescriptorData - DescriptorHeader)
		}
		switch {
		case rk < rank:
			return Sections{}, fmt.Errorf("%w: 0x%x after later sections", ErrSectionOrder, code)
		case rk == rank && !isBody:
			return Sections{}, fmt.Errorf("%w: repeated section 0x%x", ErrSectionOrder, code)
		case isBody && s.BodyType != 0 && (code != s.BodyType || code == DescriptorAMQPValue):
			return Sections{}, fmt.Errorf("%w: body section 0x%x after 0x%x", ErrSectionOrder, code, s.BodyType)
		}
		rank = rk
		switch code {
		case DescriptorHeader:
			s.Header = raw
		case DescriptorDeliveryAnnotations:
			s.DeliveryAnnotations = raw
		case DescriptorMessageAnnotations:
			s.MessageAnnotations = raw
		case DescriptorProperties:
			s.Properties = raw
		case DescriptorApplicationProperties:
			s.ApplicationProperties = raw
		case DescriptorFooter:
			s.Footer = raw
		default:
			if bodyStart < 0 {
				bodyStart = start
				s.BodyType = code
			}
			bodyEnd = r.Offset()
		}
	}
	if bodyStart >= 0 {
		s.Body = data[bodyStart:bodyEnd:bodyEnd]
	}
	return s, nil
}

// AppendBinary appends the sections, in spec order, to dst.
func (s *Sections) AppendBinary(dst []byte) []byte {
	dst = append(dst, s.Header...)
	dst = append(dst, s.DeliveryAnnotations...)
	dst = append(dst, s.MessageAnnotations...)
	dst = append(dst, s.Properties...)
	dst = append(dst, s.ApplicationProperties...)
	dst = append(dst, s.Body...)
	return append(dst, s.Footer...)
}

// AppendWith appends to dst the message with its header, delivery
// annotations and message annotations replaced by h, da and ma (nil
// leaves the section out) and the properties, application properties,
// body and footer copied verbatim. This is how a stored message is
// re-encoded for delivery without decoding its bare message.
func (s *Sections) AppendWith(dst []byte, h *Header, da, ma map[Symbol]any) ([]byte, error) {
	var err error
	if h != nil {
		if dst, err = h.AppendAMQP(dst); err != nil {
			return dst, err
		}
	}
	if dst, err = AppendAnnotationsSection(dst, DescriptorDeliveryAnnotations, da); err != nil {
		return dst, err
	}
	if dst, err = AppendAnnotationsSection(dst, DescriptorMessageAnnotations, ma); err != nil {
		return dst, err
	}
	dst = append(dst, s.Properties...)
	dst = append(dst, s.ApplicationProperties...)
	dst = append(dst, s.Body...)
	return append(dst, s.Footer...), nil
}

// DataSections returns the payloads of the data sections that make up
// rawBody (Message.RawBody). It is an error if rawBody holds any other
// kind of section. The payloads alias rawBody.
func DataSections(rawBody []byte) ([][]byte, error) {
	var out [][]byte
	var r encoding.Reader
	r.Reset(rawBody)
	for r.Len() > 0 {
		code, name, err := r.ReadDescriptor()
		if err != nil {
			return nil, fmt.Errorf("frames: body section: %w", err)
		}
		if name != "" {
			code = symbolicDescriptor(name)
		}
		if code != DescriptorData {
			return nil, fmt.Errorf("frames: body section 0x%x is not data", code)
		}
		p, err := r.ReadBinary()
		if err != nil {
			return nil, fmt.Errorf("frames: data section: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// SplitBatch returns the encoded inner messages of a batched message
// (message-format MessageFormatBatch): its body is one data section per
// message, each holding a complete encoded message. The results alias
// rawBody; decode each with Message.UnmarshalBinary.
func SplitBatch(rawBody []byte) ([][]byte, error) {
	parts, err := DataSections(rawBody)
	if err != nil {
		return nil, fmt.Errorf("frames: batch: %w", err)
	}
	return parts, nil
}

// BodyValue decodes rawBody when it is a single amqp-value section (the
// body of CBS and management requests).
func BodyValue(rawBody []byte) (any, error) {
	var r encoding.Reader
	r.Reset(rawBody)
	code, name, err := r.ReadDescriptor()
	if err != nil {
		return nil, fmt.Errorf("frames: amqp-value: %w", err)
	}
	if name != "" {
		code = symbolicDescriptor(name)
	}
	if code != DescriptorAMQPValue {
		return nil, fmt.Errorf("frames: body section 0x%x is not amqp-value", code)
	}
	v, err := r.ReadAny()
	if err != nil {
		return nil, fmt.Errorf("frames: amqp-value: %w", err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: after amqp-value", ErrUnexpectedBytes)
	}
	return v, nil
}

// BodySequences decodes rawBody when it is made of amqp-sequence
// sections, returning one list per section.
func BodySequences(rawBody []byte) ([][]any, error) {
	var out [][]any
	var r encoding.Reader
	r.Reset(rawBody)
	for r.Len() > 0 {
		code, name, err := r.ReadDescriptor()
		if err != nil {
			return nil, fmt.Errorf("frames: body section: %w", err)
		}
		if name != "" {
			code = symbolicDescriptor(name)
		}
		if code != DescriptorAMQPSequence {
			return nil, fmt.Errorf("frames: body section 0x%x is not amqp-sequence", code)
		}
		c, err := r.PeekCode()
		if err != nil {
			return nil, err
		}
		if c != encoding.TypeCodeList0 && c != encoding.TypeCodeList8 && c != encoding.TypeCodeList32 {
			return nil, &encoding.TypeError{Code: c, Want: "list"}
		}
		v, err := r.ReadAny()
		if err != nil {
			return nil, fmt.Errorf("frames: amqp-sequence: %w", err)
		}
		l, _ := v.([]any)
		out = append(out, l)
	}
	return out, nil
}
