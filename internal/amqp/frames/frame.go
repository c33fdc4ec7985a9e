package frames

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Protocol headers sent before any frame (part 2 section 2.2; part 5
// section 5.2.1 for TLS and 5.3.1 for SASL).
const (
	ProtocolHeaderAMQP = "AMQP\x00\x01\x00\x00"
	ProtocolHeaderTLS  = "AMQP\x02\x01\x00\x00"
	ProtocolHeaderSASL = "AMQP\x03\x01\x00\x00"
)

// FrameType is the TYPE byte of a frame header.
type FrameType uint8

// Frame types.
const (
	FrameTypeAMQP FrameType = 0x0
	FrameTypeSASL FrameType = 0x1
)

// Frame size limits.
const (
	// HeaderSize is the size of a frame header without extended header.
	HeaderSize = 8
	// MinMaxFrameSize is the smallest max-frame-size a peer may
	// advertise (part 2 section 2.7.1, "512 octets").
	MinMaxFrameSize = 512
	// DefaultMaxFrameSize is the spec default of open's max-frame-size.
	DefaultMaxFrameSize = 4294967295
)

// Errors returned by the frame readers and parsers.
var (
	ErrFrameTooLarge   = errors.New("frames: frame larger than max-frame-size")
	ErrInvalidHeader   = errors.New("frames: invalid frame header")
	ErrIncomplete      = errors.New("frames: incomplete frame")
	ErrUnknownBody     = errors.New("frames: unknown performative")
	ErrUnexpectedBytes = errors.New("frames: unexpected bytes after performative")
	ErrMissingField    = errors.New("frames: mandatory field missing")
	ErrUnknownSection  = errors.New("frames: unknown message section")
	ErrSectionOrder    = errors.New("frames: message sections out of order")
)

// FrameHeader is a decoded frame header.
type FrameHeader struct {
	Size       uint32    // whole frame size, header included
	DataOffset uint8     // body offset in 4-byte words, at least 2
	Type       FrameType // AMQP or SASL
	Channel    uint16    // session channel; ignored for SASL frames
}

// ParseHeader decodes and checks a frame header. maxFrameSize bounds
// Size; 0 means no bound beyond the header's own consistency.
func ParseHeader(b []byte, maxFrameSize uint32) (FrameHeader, error) {
	if len(b) < HeaderSize {
		return FrameHeader{}, ErrIncomplete
	}
	h := FrameHeader{
		Size:       binary.BigEndian.Uint32(b),
		DataOffset: b[4],
		Type:       FrameType(b[5]),
		Channel:    binary.BigEndian.Uint16(b[6:]),
	}
	switch {
	case h.Size < HeaderSize:
		return h, fmt.Errorf("%w: size %d", ErrInvalidHeader, h.Size)
	case h.DataOffset < 2 || uint32(h.DataOffset)*4 > h.Size:
		return h, fmt.Errorf("%w: data offset %d for size %d", ErrInvalidHeader, h.DataOffset, h.Size)
	case h.Type != FrameTypeAMQP && h.Type != FrameTypeSASL:
		return h, fmt.Errorf("%w: frame type %d", ErrInvalidHeader, h.Type)
	case maxFrameSize != 0 && h.Size > maxFrameSize:
		return h, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, h.Size, maxFrameSize)
	}
	return h, nil
}

// Frame is one decoded frame.
type Frame struct {
	Type    FrameType
	Channel uint16
	// Body is the performative, nil for an empty (heartbeat) frame.
	// Transfer bodies carry their payload in Transfer.Payload.
	Body Body
}

// ReadFrame reads one frame from r. maxFrameSize is the limit this end
// advertised (0: no limit beyond the 32-bit size field); a larger frame
// is an error and nothing more should be read from the connection. The frame gets a buffer of its own,
// which all of its []byte fields alias.
func ReadFrame(r *bufio.Reader, maxFrameSize uint32) (Frame, error) {
	return ReadFrameDirect(r, nil, maxFrameSize)
}

// ReadFrameDirect is ReadFrame for a reader r that reads from src: of a
// frame body at least as large as r's buffer, it takes what r holds and
// reads the rest from src straight into the frame's buffer. Through r, a
// read that found the buffer empty with less than its size to go would
// fill the buffer, reading ahead into the next frames, and copy out of it.
// With src nil it reads everything through r.
func ReadFrameDirect(r *bufio.Reader, src io.Reader, maxFrameSize uint32) (Frame, error) {
	hb, err := r.Peek(HeaderSize)
	if err != nil {
		if len(hb) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	h, err := ParseHeader(hb, maxFrameSize)
	if err != nil {
		return Frame{}, err
	}
	if _, err := r.Discard(HeaderSize); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: h.Type, Channel: h.Channel}
	if h.Size == HeaderSize {
		return f, nil
	}
	if ext := int(h.DataOffset)*4 - HeaderSize; ext > 0 {
		if _, err := r.Discard(ext); err != nil {
			return Frame{}, unexpectedEOF(err)
		}
	}
	n := int(h.Size) - int(h.DataOffset)*4
	if n == 0 {
		return f, nil
	}
	if pb, ok, err := readPooledTransfer(r, src, n); err != nil {
		return Frame{}, err
	} else if ok {
		if f.Body, err = ParseBody(pb.b); err != nil {
			pb.Release()
			return Frame{}, err
		}
		f.Body.(*Transfer).Buf = pb // the transfer descriptor parses as one
		return f, nil
	}
	if b, ok := parsePeeked(r, n); ok {
		f.Body = b
		return f, nil
	}
	buf, err := readBody(r, src, n)
	if err != nil {
		return Frame{}, err
	}
	f.Body, err = ParseBody(buf)
	if err != nil {
		return Frame{}, err
	}
	return f, nil
}

// maxPeekedBody bounds the frame bodies parsePeeked tries: dispositions
// and flows are some 10–40 bytes.
const maxPeekedBody = 128

// parsePeeked parses a small n-byte frame body where it lies in r's buffer
// and consumes it, if the frame it holds cannot alias its bytes: a flow
// without properties, or a disposition whose state, if any, is accepted or
// released — one per settled message and per credit update, each of which
// would otherwise cost a buffer of its own. ok is false, and nothing is
// consumed, for any other body (and for one that does not parse: reading
// it as usual reports the error).
func parsePeeked(r *bufio.Reader, n int) (Body, bool) {
	if n < 3 || n > maxPeekedBody || n > r.Buffered() {
		return nil, false
	}
	p, err := r.Peek(n)
	if err != nil {
		return nil, false
	}
	// Only flows and dispositions (bodyPrefix): other frames are not
	// parsed twice.
	if d := [3]byte(p); d != bodyPrefix(DescriptorFlow) && d != bodyPrefix(DescriptorDisposition) {
		return nil, false
	}
	b, err := ParseBody(p)
	if err != nil {
		return nil, false
	}
	switch b := b.(type) {
	case *Flow:
		if b.Properties != nil {
			return nil, false
		}
	case *Disposition:
		switch b.State.(type) {
		case nil, *Accepted, *Released:
		default:
			return nil, false
		}
	default:
		return nil, false
	}
	_, _ = r.Discard(n) // cannot fail: n bytes are buffered
	return b, true
}

// readBody reads an n-byte frame body. Large bodies are read into a
// buffer that grows as data arrives, so a header that declares a huge
// frame does not allocate it before the bytes exist.
func readBody(r *bufio.Reader, src io.Reader, n int) ([]byte, error) {
	const step = 1 << 20
	if n <= step {
		buf := make([]byte, n)
		if err := readFull(r, src, buf); err != nil {
			return nil, unexpectedEOF(err)
		}
		return buf, nil
	}
	buf := make([]byte, 0, step)
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n-len(buf), cap(buf)))
		}
		next := buf[len(buf):min(cap(buf), n)]
		if err := readFull(r, src, next); err != nil {
			return nil, unexpectedEOF(err)
		}
		buf = buf[:len(buf)+len(next)]
	}
	return buf, nil
}

// readFull fills p from r, or, when src is set and p is at least as large
// as r's buffer, with what r holds and then from src (ReadFrameDirect).
func readFull(r *bufio.Reader, src io.Reader, p []byte) error {
	if src == nil || len(p) < r.Size() {
		_, err := io.ReadFull(r, p)
		return err
	}
	k, err := r.Read(p[:min(len(p), r.Buffered())])
	if err != nil {
		return err
	}
	_, err = io.ReadFull(src, p[k:])
	return err
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ParseFrame decodes the first frame in data and returns it with the
// number of bytes it occupied. If data holds less than a whole frame it
// returns ErrIncomplete (read more and call again). The frame aliases
// data.
func ParseFrame(data []byte, maxFrameSize uint32) (Frame, int, error) {
	h, err := ParseHeader(data, maxFrameSize)
	if err != nil {
		return Frame{}, 0, err
	}
	if uint64(len(data)) < uint64(h.Size) {
		return Frame{}, 0, ErrIncomplete
	}
	f := Frame{Type: h.Type, Channel: h.Channel}
	body := data[int(h.DataOffset)*4 : h.Size : h.Size]
	if len(body) > 0 {
		if f.Body, err = ParseBody(body); err != nil {
			return Frame{}, 0, err
		}
	}
	return f, int(h.Size), nil
}

// ParseBody decodes a frame body: one performative and, for a transfer,
// the payload that follows it. The result aliases body.
func ParseBody(body []byte) (Body, error) {
	var r encoding.Reader
	r.Reset(body)
	code, name, err := r.PeekDescriptor()
	if err != nil {
		return nil, fmt.Errorf("frames: performative: %w", err)
	}
	if name != "" {
		code = symbolicDescriptor(name)
	}
	// Concrete calls only: an interface call would move r to the heap.
	// Transfers, flows and dispositions come with their uintSlots in the
	// same allocation.
	var b Body
	switch code {
	case DescriptorTransfer:
		v := new(struct {
			t Transfer
			s uintSlots
		})
		t := &v.t
		if err := t.unmarshal(&r, &v.s); err != nil {
			return nil, err
		}
		if r.Len() > 0 {
			t.Payload = r.Remaining()
		}
		return t, nil
	case DescriptorOpen:
		v := new(Open)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorBegin:
		v := new(Begin)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorAttach:
		v := new(Attach)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorFlow:
		v := new(struct {
			f Flow
			s uintSlots
		})
		err, b = v.f.unmarshal(&r, &v.s), &v.f
	case DescriptorDisposition:
		v := new(struct {
			d Disposition
			s uintSlots
		})
		err, b = v.d.unmarshal(&r, &v.s), &v.d
	case DescriptorDetach:
		v := new(Detach)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorEnd:
		v := new(End)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorClose:
		v := new(Close)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorSASLMechanisms:
		v := new(SASLMechanisms)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorSASLInit:
		v := new(SASLInit)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorSASLChallenge:
		v := new(SASLChallenge)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorSASLResponse:
		v := new(SASLResponse)
		err, b = v.UnmarshalAMQP(&r), v
	case DescriptorSASLOutcome:
		v := new(SASLOutcome)
		err, b = v.UnmarshalAMQP(&r), v
	default:
		if name != "" {
			return nil, fmt.Errorf("%w: %s", ErrUnknownBody, name)
		}
		return nil, fmt.Errorf("%w: descriptor 0x%x", ErrUnknownBody, code)
	}
	if err != nil {
		return nil, err
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d bytes after %s", ErrUnexpectedBytes, r.Len(), b)
	}
	return b, nil
}

// AppendFrame appends a complete frame carrying body to dst and returns
// the extended slice. The frame type (AMQP or SASL) follows from the body;
// a Transfer's Payload is written after the performative. AppendFrame does
// not split payloads: the caller keeps len(frame) within the peer's
// max-frame-size.
//
// With a reused dst it does not allocate, and body may live on the
// caller's stack. Values that body's pointer fields point to (for example
// Transfer.DeliveryID) do escape, because nested values such as an
// error's info map are encoded through interfaces: point them at
// long-lived variables (a field of the link) rather than fresh locals to
// keep the hot path allocation-free.
func AppendFrame(dst []byte, channel uint16, body Body) ([]byte, error) {
	start := len(dst)
	typ := byte(FrameTypeAMQP)
	switch body.(type) {
	case *SASLMechanisms, *SASLInit, *SASLChallenge, *SASLResponse, *SASLOutcome:
		typ = byte(FrameTypeSASL)
	}
	dst = append(dst, 0, 0, 0, 0, 2, typ, byte(channel>>8), byte(channel))
	var err error
	// A type switch over every concrete type, with no interface call,
	// keeps body from escaping: a caller's performative can live on its
	// stack.
	switch v := body.(type) {
	case *Transfer:
		dst, err = v.AppendAMQP(dst)
		dst = append(dst, v.Payload...)
	case *Disposition:
		dst, err = v.AppendAMQP(dst)
	case *Flow:
		dst, err = v.AppendAMQP(dst)
	case *Open:
		dst, err = v.AppendAMQP(dst)
	case *Begin:
		dst, err = v.AppendAMQP(dst)
	case *Attach:
		dst, err = v.AppendAMQP(dst)
	case *Detach:
		dst, err = v.AppendAMQP(dst)
	case *End:
		dst, err = v.AppendAMQP(dst)
	case *Close:
		dst, err = v.AppendAMQP(dst)
	case *SASLMechanisms:
		dst, err = v.AppendAMQP(dst)
	case *SASLInit:
		dst, err = v.AppendAMQP(dst)
	case *SASLChallenge:
		dst, err = v.AppendAMQP(dst)
	case *SASLResponse:
		dst, err = v.AppendAMQP(dst)
	case *SASLOutcome:
		dst, err = v.AppendAMQP(dst)
	default:
		err = ErrUnknownBody
	}
	if err != nil {
		return dst[:start], err
	}
	size := len(dst) - start
	if uint64(size) > DefaultMaxFrameSize {
		return dst[:start], ErrFrameTooLarge
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(size))
	return dst, nil
}

// AppendEmptyFrame appends an empty AMQP frame (a heartbeat) to dst.
func AppendEmptyFrame(dst []byte) []byte {
	return append(dst, 0, 0, 0, 8, 2, 0, 0, 0)
}
