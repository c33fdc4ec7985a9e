package message

// A large message's payload, read from its encoded body sections where
// they lie (a store file, a spool) without holding them: PayloadLen walks
// the section heads with small reads, PayloadReader reads the payload a
// section at a time. The payload is what the HTTP data plane and the
// console hand out: the data sections' bytes one after another, or the
// bytes of one amqp-value that is a binary or a string.
//
//	data:       0x00 0x53 0x75  vbin8 (0xa0 len:u8) | vbin32 (0xb0 len:u32)  bytes   (one or more)
//	amqp-value: 0x00 0x53 0x77  the same, or str8 (0xa1) | str32 (0xb1)      bytes   (the only section)
//
// A descriptor may also be written as 0x00 0x80 and its ulong code.

import (
	"encoding/binary"
	"errors"
	"io"
)

// ErrNotPayload is a body that is not data sections or one amqp-value
// binary or string.
var ErrNotPayload = errors.New("message: the body is not data sections or one binary or string value")

const (
	codeData  = 0x75
	codeValue = 0x77
	// maxSectionHead is the longest section head: a ulong descriptor (10
	// bytes) and a vbin32/str32 constructor with its length (5).
	maxSectionHead = 15
)

// AppendDataSectionHead appends the head of a data section of n bytes
// (vbin32), which the n bytes follow.
func AppendDataSectionHead(b []byte, n uint32) []byte {
	return binary.BigEndian.AppendUint32(append(b, 0x00, 0x53, codeData, 0xb0), n)
}

// bodySection reads the head of the section at pos of the size bytes of
// encoded body b: where its payload starts, how long it is, and whether it
// is an amqp-value.
func bodySection(b io.ReaderAt, size, pos int64) (off, n int64, value bool, err error) {
	var buf [maxSectionHead]byte
	k, err := b.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, false, err
	}
	h := buf[:k]
	var code uint64
	var dn int
	switch {
	case len(h) >= 3 && h[0] == 0x00 && h[1] == 0x53:
		code, dn = uint64(h[2]), 3
	case len(h) >= 10 && h[0] == 0x00 && h[1] == 0x80:
		code, dn = binary.BigEndian.Uint64(h[2:10]), 10
	default:
		return 0, 0, false, ErrNotPayload
	}
	if (code != codeData && code != codeValue) || len(h) < dn+2 {
		return 0, 0, false, ErrNotPayload
	}
	value = code == codeValue
	switch c := h[dn]; {
	case c == 0xa0 || (value && c == 0xa1):
		off, n = pos+int64(dn)+2, int64(h[dn+1])
	case (c == 0xb0 || (value && c == 0xb1)) && len(h) >= dn+5:
		off, n = pos+int64(dn)+5, int64(binary.BigEndian.Uint32(h[dn+1:]))
	default:
		return 0, 0, false, ErrNotPayload
	}
	if off+n > size {
		return 0, 0, false, ErrNotPayload
	}
	return off, n, value, nil
}

// PayloadLen walks the sections of the size bytes of encoded body b and
// returns the payload's length; ErrNotPayload if b is not such a body,
// another error if reading b failed.
func PayloadLen(b io.ReaderAt, size int64) (int64, error) {
	var total int64
	for pos, i := int64(0), 0; pos < size; i++ {
		off, n, value, err := bodySection(b, size, pos)
		if err != nil {
			return 0, err
		}
		if value && (i > 0 || off+n != size) {
			return 0, ErrNotPayload // an amqp-value is the only section
		}
		total += n
		pos = off + n
	}
	return total, nil
}

// PayloadReader reads the payload of the size bytes of encoded body b,
// which PayloadLen accepted, a section at a time.
type PayloadReader struct {
	b    io.ReaderAt
	size int64
	pos  int64 // next byte of the body to read
	left int64 // payload bytes left in the current section
}

// NewPayloadReader returns a reader of b's payload.
func NewPayloadReader(b io.ReaderAt, size int64) *PayloadReader {
	return &PayloadReader{b: b, size: size}
}

func (r *PayloadReader) Read(p []byte) (int, error) {
	for r.left == 0 {
		if r.pos >= r.size {
			return 0, io.EOF
		}
		off, n, _, err := bodySection(r.b, r.size, r.pos)
		if err != nil {
			return 0, err
		}
		r.pos, r.left = off, n
	}
	p = p[:min(int64(len(p)), r.left)]
	k, err := r.b.ReadAt(p, r.pos)
	r.pos += int64(k)
	r.left -= int64(k)
	if errors.Is(err, io.EOF) && r.left == 0 {
		err = nil
	}
	if k == 0 && err == nil {
		err = io.ErrUnexpectedEOF
	}
	return k, err
}
