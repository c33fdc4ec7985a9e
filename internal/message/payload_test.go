package message

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// decodePayload is the payload of a whole encoded body, decoded with the
// section codec: ok is false if it is not data sections or one binary or
// string amqp-value.
func decodePayload(raw []byte) (out []byte, ok bool) {
	r := encoding.NewReader(raw)
	out = []byte{}
	for i := 0; r.Len() > 0; i++ {
		code, _, err := r.ReadDescriptor()
		if err != nil {
			return nil, false
		}
		switch code {
		case codeData:
			p, err := r.ReadBinary()
			if err != nil {
				return nil, false
			}
			out = append(out, p...)
		case codeValue:
			v, err := r.ReadAny()
			if err != nil || i > 0 || r.Len() > 0 {
				return nil, false
			}
			switch v := v.(type) {
			case []byte:
				return append([]byte{}, v...), true
			case string:
				return []byte(v), true
			}
			return nil, false
		default:
			return nil, false
		}
	}
	return out, true
}

func TestPayload(t *testing.T) {
	data := func(p string) []byte { return append(AppendDataSectionHead(nil, uint32(len(p))), p...) }
	for _, c := range []struct {
		raw  []byte
		want string
		ok   bool
	}{
		{nil, "", true},
		{data("hello"), "hello", true},
		{append(data("ab"), data("cd")...), "abcd", true},
		{[]byte{0x00, 0x53, codeValue, 0xa1, 3, 'a', 'b', 'c'}, "abc", true},
		{[]byte{0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, codeData, 0xa0, 1, 'z'}, "z", true},
		{append(data("x"), 0x00, 0x53, codeValue, 0xa1, 1, 'y'), "", false}, // a value after data
		{[]byte{0x00, 0x53, codeData, 0xa1, 1, 'y'}, "", false},             // a string in a data section
		{[]byte{0x00, 0x53, 0x76, 0x45}, "", false},                         // amqp-sequence
		{data("hello")[:7], "", false},                                      // cut short
	} {
		n, err := PayloadLen(bytes.NewReader(c.raw), int64(len(c.raw)))
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrNotPayload) {
			t.Errorf("PayloadLen(%x): %d, %v; want ok %v", c.raw, n, err, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		got, err := io.ReadAll(NewPayloadReader(bytes.NewReader(c.raw), int64(len(c.raw))))
		if err != nil || string(got) != c.want || n != int64(len(c.want)) {
			t.Errorf("payload of %x: %q (%v), length %d; want %q", c.raw, got, err, n, c.want)
		}
	}
}

// FuzzPayload: whatever PayloadLen accepts, the section codec decodes to
// the same payload, which PayloadReader reads, PayloadLen bytes of it.
// The corpus is in testdata/fuzz/FuzzPayload.
func FuzzPayload(f *testing.F) {
	f.Add([]byte{})
	f.Add(append(AppendDataSectionHead(nil, 5), "hello"...))
	f.Add([]byte{0x00, 0x53, codeValue, 0xa1, 3, 'a', 'b', 'c'})
	f.Add([]byte{0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, codeData, 0xa0, 1, 'z'})
	f.Fuzz(func(t *testing.T, raw []byte) {
		ra := bytes.NewReader(raw)
		n, err := PayloadLen(ra, int64(len(raw)))
		if err != nil {
			if !errors.Is(err, ErrNotPayload) {
				t.Fatalf("PayloadLen: %v", err)
			}
			return
		}
		want, ok := decodePayload(raw)
		if !ok {
			t.Fatalf("PayloadLen took %x, the codec did not", raw)
		}
		got, err := io.ReadAll(NewPayloadReader(ra, int64(len(raw))))
		if err != nil || int64(len(got)) != n || !bytes.Equal(got, want) {
			t.Fatalf("read %x (%v), %d bytes said; want %x", got, err, n, want)
		}
	})
}
