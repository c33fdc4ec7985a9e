package message

// The AMQP form: how a Message travels between a client and the broker.
// DecodeAMQP reads what a sender sends; AppendAMQP writes what a receiver
// gets, with the broker's state of that delivery (Delivery) in the header
// and annotations. Both use the AMQP section codec of package frames and
// the value types of package encoding, so a property value decoded from
// the wire is stored, and delivered back, as the same Go value.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Annotations the broker adds to delivered and peeked messages, with the
// exact AMQP types the SDKs assert (the Go SDK panics on any other type).
const (
	AnnSequenceNumber       Symbol = "x-opt-sequence-number"        // long
	AnnEnqueuedTime         Symbol = "x-opt-enqueued-time"          // timestamp
	AnnLockedUntil          Symbol = "x-opt-locked-until"           // timestamp
	AnnMessageState         Symbol = "x-opt-message-state"          // int
	AnnScheduledEnqueueTime Symbol = "x-opt-scheduled-enqueue-time" // timestamp
	AnnDeadLetterSource     Symbol = "x-opt-deadletter-source"      // string
	AnnLockToken            Symbol = "x-opt-lock-token"             // uuid (delivery annotation)
	// AnnEnqueueSequenceNumber (long) is on auto-forwarded messages only,
	// as in Service Bus: the sequence number a message had where it was
	// first enqueued, which auto-forwarding stores with the message. A
	// sender's is dropped by DecodeAMQP.
	AnnEnqueueSequenceNumber Symbol = "x-opt-enqueue-sequence-number"
)

// DecodeAMQP decodes one encoded AMQP message, as a sender sends it, into
// out, which it overwrites. Every section is kept: header, delivery and
// message annotations, properties, application properties, body and
// footer. Annotation and property values must be of the simple types
// listed in the package documentation; lists, maps, arrays and described
// values are refused, as Service Bus refuses them. A message without a
// header has priority 4, the AMQP default.
//
// out.Body aliases data (saving a copy of every payload on the send
// path), so data must not be reused while out is in use; everything else
// is copied.
func DecodeAMQP(out *Message, data []byte) error {
	s, err := frames.SplitMessage(data)
	if err != nil {
		return err
	}
	*out = Message{Priority: 4, Body: s.Body}
	// Read every section first, then check the values: a malformed
	// section is reported before an unsupported value.
	var v decodedSections
	if err := v.read(&s, out); err != nil {
		return err
	}
	return v.store(out)
}

// decodedSections are the sections of a message DecodeAMQP read, before
// their values are checked.
type decodedSections struct {
	da, ma, ap map[string]any
	footer     map[Symbol]any
	p          frames.Properties
	hasProps   bool
}

// read decodes the sections of s, the header straight into out.
func (v *decodedSections) read(s *frames.Sections, out *Message) error {
	var r encoding.Reader
	var err error
	if s.Header != nil {
		var h frames.Header
		r.Reset(s.Header)
		if err := h.UnmarshalAMQP(&r); err != nil {
			return err
		}
		out.Durable = h.Durable
		out.Priority = h.Priority
		out.TTL = time.Duration(h.TTL) * time.Millisecond
	}
	if s.DeliveryAnnotations != nil {
		if v.da, err = readAnnotations(&r, s.DeliveryAnnotations); err != nil {
			return fmt.Errorf("frames: delivery-annotations: %w", err)
		}
	}
	if s.MessageAnnotations != nil {
		if v.ma, err = readAnnotations(&r, s.MessageAnnotations); err != nil {
			return fmt.Errorf("frames: message-annotations: %w", err)
		}
	}
	if s.Properties != nil {
		v.hasProps = true
		r.Reset(s.Properties)
		if err := v.p.UnmarshalAMQP(&r); err != nil {
			return err
		}
	}
	if s.ApplicationProperties != nil {
		r.Reset(s.ApplicationProperties)
		if _, _, err := r.ReadDescriptor(); err != nil {
			return err
		}
		if v.ap, err = r.ReadStringMap(); err != nil {
			return fmt.Errorf("frames: application-properties: %w", err)
		}
		if v.ap == nil {
			v.ap = map[string]any{} // present, if null: kept as present
		}
	}
	if s.Footer != nil {
		r.Reset(s.Footer)
		if _, _, err := r.ReadDescriptor(); err != nil {
			return fmt.Errorf("frames: footer: %w", err)
		}
		if v.footer, err = r.ReadSymbolMap(); err != nil {
			return fmt.Errorf("frames: footer: %w", err)
		}
		if v.footer == nil {
			v.footer = map[Symbol]any{}
		}
	}
	return nil
}

// store checks the values read and stores them in out.
func (v *decodedSections) store(out *Message) error {
	var err error
	if ma := v.ma; len(ma) > 0 {
		delete(ma, string(AnnEnqueueSequenceNumber)) // the broker's alone
		if err := simpleValues(ma, "message annotation"); err != nil {
			return err
		}
		out.Annotations = ma
	}
	if da := v.da; len(da) > 0 {
		if err := simpleValues(da, "delivery annotation"); err != nil {
			return err
		}
		out.DeliveryAnnotations = da
	}
	if v.footer != nil {
		// Kept encoded, whatever its values, and sent back as it came
		// (in key order).
		if out.Footer, err = frames.AppendAnnotationsSection(nil, frames.DescriptorFooter, v.footer); err != nil {
			return fmt.Errorf("footer: %w", err)
		}
	}
	if v.hasProps {
		if err := storeProperties(out, &v.p); err != nil {
			return err
		}
	}
	if v.ap != nil {
		if err := simpleValues(v.ap, "application property"); err != nil {
			return err
		}
		out.ApplicationProperties = v.ap
	}
	return nil
}

// storeProperties stores the properties section p in out.
func storeProperties(out *Message, p *frames.Properties) error {
	var err error
	if out.MessageID, err = SimpleValue(p.MessageID); err != nil {
		return fmt.Errorf("message-id: %w", err)
	}
	if out.CorrelationID, err = SimpleValue(p.CorrelationID); err != nil {
		return fmt.Errorf("correlation-id: %w", err)
	}
	if p.UserID != nil {
		out.UserID = append([]byte(nil), p.UserID...)
	}
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
	return nil
}

// readAnnotations decodes a described symbol-keyed map section into a
// map with string keys.
func readAnnotations(r *encoding.Reader, raw []byte) (map[string]any, error) {
	r.Reset(raw)
	if _, _, err := r.ReadDescriptor(); err != nil {
		return nil, err
	}
	return r.ReadAnnotations()
}

// simpleValues checks, in place, that every value of m is a simple value
// (SimpleValue), replacing byte slices by copies.
func simpleValues(m map[string]any, what string) error {
	for k, v := range m {
		sv, err := SimpleValue(v)
		if err != nil {
			return fmt.Errorf("%s %q: %w", what, k, err)
		}
		if _, ok := sv.([]byte); ok {
			m[k] = sv
		}
	}
	return nil
}

// SimpleValue checks that v, a value decoded from AMQP, is of a simple
// type a property may hold (see the package documentation) and returns
// it, a byte slice as a copy. Lists, maps, arrays and described values
// are refused: Service Bus allows only simple types in properties.
func SimpleValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64,
		float32, float64, string, time.Time, Symbol, UUID, Char:
		return x, nil
	case []byte:
		return append([]byte(nil), x...), nil
	}
	return nil, fmt.Errorf("unsupported AMQP type %T (only simple types are allowed)", v)
}

// Delivery is the broker's state of one delivery of a message: what the
// AMQP form carries beside the sender's message.
type Delivery struct {
	SequenceNumber int64
	EnqueuedTime   time.Time
	// DeliveryCount is header.delivery-count: the number of earlier
	// deliveries that failed.
	DeliveryCount uint32
	// TimeToLive is the effective time to live, 0 if the message never
	// expires; ExpiresAt is when it does (zero if never).
	TimeToLive time.Duration
	ExpiresAt  time.Time
	// State is x-opt-message-state; 0 (active) is left out.
	State                int32
	ScheduledEnqueueTime time.Time // zero: not scheduled
	DeadLetterSource     string    // "": left out
	// LockedUntil, unless zero, is sent as x-opt-locked-until.
	LockedUntil time.Time
	// WithLockToken adds the delivery annotation x-opt-lock-token holding
	// LockToken, as Service Bus does on every locked delivery.
	WithLockToken bool
	LockToken     UUID
}

// AppendAMQP appends to dst the AMQP form of m as a client receives it in
// delivery d:
//
//	header                 durable, priority, ttl (from d's effective time
//	                       to live), delivery-count d.DeliveryCount
//	delivery-annotations   the sender's, and x-opt-lock-token in place of
//	                       any the sender gave (if d.WithLockToken)
//	message-annotations    the sender's, less those under the broker's keys,
//	                       and the broker's: x-opt-sequence-number,
//	                       x-opt-enqueued-time, x-opt-message-state,
//	                       x-opt-scheduled-enqueue-time,
//	                       x-opt-deadletter-source, x-opt-locked-until
//	properties             always present (the Go SDK reads the header only
//	                       when properties exist); absolute-expiry-time from
//	                       the effective time to live
//	application-properties if the sender gave them
//	body, footer           the sender's bytes
//
// Map entries are written in key order and absent annotations are left
// out rather than sent as null.
func AppendAMQP(dst []byte, m *Message, d *Delivery) ([]byte, error) {
	h := frames.Header{Durable: m.Durable, Priority: m.Priority, DeliveryCount: d.DeliveryCount}
	p := frames.Properties{
		MessageID:          m.MessageID,
		UserID:             m.UserID,
		To:                 m.To,
		Subject:            m.Subject,
		ReplyTo:            m.ReplyTo,
		CorrelationID:      m.CorrelationID,
		ContentType:        Symbol(m.ContentType),
		ContentEncoding:    Symbol(m.ContentEncoding),
		AbsoluteExpiryTime: d.ExpiresAt, // zero (absent) if it never expires
		CreationTime:       m.CreationTime,
		GroupID:            m.SessionID,
		EmptyGroupID:       m.EmptySessionID,
		GroupSequence:      m.GroupSequence,
		ReplyToGroupID:     m.ReplyToSessionID,
	}
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

	var arr [16]annotation
	ma := messageAnnotations(arr[:0], m, d)

	dst, err := h.AppendAMQP(dst)
	if err != nil {
		return nil, err
	}
	var b encoding.Buffer
	b.SetBytes(dst)
	if err := writeDeliveryAnnotations(&b, m, d); err != nil {
		return nil, err
	}
	if err := writeMessageAnnotations(&b, ma); err != nil {
		return nil, err
	}
	if dst, err = p.AppendAMQP(b.Bytes()); err != nil {
		return nil, err
	}
	b.SetBytes(dst)
	if ap := m.ApplicationProperties; ap != nil {
		b.WriteDescriptor(frames.DescriptorApplicationProperties)
		if err := b.WriteStringMap(ap); err != nil {
			return nil, err
		}
	}
	return append(append(b.Bytes(), m.Body...), m.Footer...), nil
}

// messageAnnotations appends to ma, sorted by key, the message annotations
// of m as delivered in d: the sender's, without whatever it put under the
// broker's keys, and the broker's.
func messageAnnotations(ma []annotation, m *Message, d *Delivery) []annotation {
	for k, v := range m.Annotations {
		switch Symbol(k) {
		case AnnLockedUntil, AnnMessageState, AnnDeadLetterSource, AnnSequenceNumber, AnnEnqueuedTime:
			continue
		case AnnEnqueueSequenceNumber:
			if _, isLong := v.(int64); !isLong {
				continue // never another type (the Go SDK asserts int64)
			}
		case AnnScheduledEnqueueTime:
			if !d.ScheduledEnqueueTime.IsZero() {
				continue // the broker's value replaces it
			}
			if _, isTime := v.(time.Time); !isTime {
				continue // never a non-timestamp
			}
		}
		ma = append(ma, annotation{k: Symbol(k), v: v})
	}
	ma = append(ma,
		annotation{k: AnnSequenceNumber, kind: annLong, n: d.SequenceNumber},
		annotation{k: AnnEnqueuedTime, kind: annTime, t: d.EnqueuedTime})
	if d.State != 0 {
		ma = append(ma, annotation{k: AnnMessageState, kind: annInt, n: int64(d.State)})
	}
	if !d.ScheduledEnqueueTime.IsZero() {
		ma = append(ma, annotation{k: AnnScheduledEnqueueTime, kind: annTime, t: d.ScheduledEnqueueTime})
	}
	if d.DeadLetterSource != "" {
		ma = append(ma, annotation{k: AnnDeadLetterSource, v: d.DeadLetterSource})
	}
	if !d.LockedUntil.IsZero() {
		ma = append(ma, annotation{k: AnnLockedUntil, kind: annTime, t: d.LockedUntil})
	}
	sortAnnotations(ma)
	return ma
}

// writeDeliveryAnnotations writes the delivery-annotations section of m
// as delivered in d, if it has any: the sender's (in key order), the
// broker's lock token in place of any the sender gave.
func writeDeliveryAnnotations(b *encoding.Buffer, m *Message, d *Delivery) error {
	da := m.DeliveryAnnotations
	if !d.WithLockToken && len(da) == 0 {
		return nil
	}
	var karr [8]string
	keys := karr[:0]
	for k := range da {
		if Symbol(k) != AnnLockToken {
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
		b.WriteSymbol(Symbol(k))
		if err := b.WriteAny(da[k]); err != nil {
			return err
		}
	}
	if d.WithLockToken {
		b.WriteSymbol(AnnLockToken)
		b.WriteUUID(d.LockToken)
		n++
	}
	w.End(n)
	return nil
}

// writeMessageAnnotations writes the message-annotations section of ma.
func writeMessageAnnotations(b *encoding.Buffer, ma []annotation) error {
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
				return err
			}
		}
	}
	w.End(len(ma))
	return nil
}

// ttlMillis converts a time to live to the header's uint milliseconds,
// clamped to 1 ms – 2^32-1 ms.
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

// annotation is one entry of a message-annotations map being encoded:
// the broker's own values are kept unboxed (kind), the sender's in v.
type annotation struct {
	k    Symbol
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

// ErrNotStreamable is DecodeAMQPHead's answer for a message whose body it
// cannot leave where it is: its body is not data sections running to the
// end of the message (an amqp-value or amqp-sequence body, a footer), or
// its sections before the body do not fit in the head. Decode it whole.
var ErrNotStreamable = errors.New("message: the body cannot be left out")

// DecodeAMQPHead decodes an encoded AMQP message of total bytes, all of
// them in r (offsets from 0) and its first ones also in head, without
// reading its body into memory: out gets every section but the body, as
// DecodeAMQP decodes them (Body nil), and the body, data sections that
// run to the end of the message, is [bodyOff, total) of r. It reads only
// the body sections' headers from r. It fails with ErrNotStreamable for
// a message it cannot do so for, and with DecodeAMQP's errors for a
// malformed one.
func DecodeAMQPHead(out *Message, head []byte, total int64, r io.ReaderAt) (bodyOff int64, err error) {
	var rd encoding.Reader
	rd.Reset(head)
	for {
		if rd.Len() == 0 {
			return 0, ErrNotStreamable // no body section begins in head
		}
		start := rd.Offset()
		code, name, err := rd.ReadDescriptor()
		if err != nil || name != "" {
			return 0, ErrNotStreamable
		}
		if code == frames.DescriptorData {
			bodyOff = int64(start)
			break
		}
		if code >= frames.DescriptorData {
			return 0, ErrNotStreamable // another body type, or a footer and no body
		}
		if err := rd.Skip(); err != nil {
			return 0, ErrNotStreamable
		}
	}
	if err := DecodeAMQP(out, head[:bodyOff]); err != nil {
		return 0, err
	}
	if err := walkDataSections(r, bodyOff, total); err != nil {
		*out = Message{}
		return 0, err
	}
	out.Body = nil
	return bodyOff, nil
}

// walkDataSections checks that [pos, total) of r is data sections and
// nothing else, reading only their headers (through a window, so that
// many small sections cost few reads).
func walkDataSections(r io.ReaderAt, pos, total int64) error {
	var win []byte
	var winOff int64
	// at returns the bytes of r from p on, at least n of them if r has
	// them.
	at := func(p int64, n int) ([]byte, error) {
		if p >= winOff && p+int64(n) <= winOff+int64(len(win)) {
			return win[p-winOff:], nil
		}
		if cap(win) == 0 {
			win = make([]byte, 64<<10)
		}
		win = win[:min(int64(cap(win)), total-p)]
		k, err := r.ReadAt(win, p)
		if k < len(win) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		winOff = p
		return win, nil
	}
	for pos < total {
		h, err := at(pos, int(min(12, total-pos)))
		if err != nil {
			return err
		}
		var n int // descriptor length
		switch {
		case len(h) >= 3 && h[0] == 0 && h[1] == 0x53 && h[2] == byte(frames.DescriptorData):
			n = 3
		case len(h) >= 10 && h[0] == 0 && h[1] == 0x80 && binary.BigEndian.Uint64(h[2:]) == frames.DescriptorData:
			n = 10
		default:
			return ErrNotStreamable
		}
		var size, hl int64
		switch {
		case len(h) >= n+2 && h[n] == 0xa0:
			size, hl = int64(h[n+1]), int64(n+2)
		case len(h) >= n+5 && h[n] == 0xb0:
			size, hl = int64(binary.BigEndian.Uint32(h[n+1:])), int64(n+5)
		default:
			return ErrNotStreamable
		}
		if pos+hl+size > total {
			return errors.New("message: a data section runs past the end of the message")
		}
		pos += hl + size
	}
	return nil
}
