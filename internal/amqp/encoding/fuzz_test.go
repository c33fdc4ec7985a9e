package encoding

import (
	"bytes"
	"testing"
)

// FuzzDecode decodes arbitrary input. Whatever decodes must re-encode,
// and the re-encoding must be a fixed point: decoding and encoding it
// again gives the same bytes. Skip must agree with ReadAny on the extent
// of every value ReadAny accepts. The seed corpus is in
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{TypeCodeNull})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(data)
		v, err := r.ReadAny()
		s := NewReader(data)
		skipErr := s.Skip()
		if err != nil {
			return
		}
		if skipErr != nil || s.Offset() != r.Offset() {
			t.Fatalf("ReadAny consumed %d bytes, Skip %d (%v)", r.Offset(), s.Offset(), skipErr)
		}
		var b1 Buffer
		if err := b1.WriteAny(v); err != nil {
			t.Fatalf("re-encode %#v: %v", v, err)
		}
		r2 := NewReader(b1.Bytes())
		v2, err := r2.ReadAny()
		if err != nil || r2.Len() != 0 {
			t.Fatalf("decode re-encoding % x: %v (%d left)", b1.Bytes(), err, r2.Len())
		}
		var b2 Buffer
		if err := b2.WriteAny(v2); err != nil {
			t.Fatalf("re-encode twice: %v", err)
		}
		if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
			t.Fatalf("encoding not a fixed point:\n% x\n% x", b1.Bytes(), b2.Bytes())
		}
	})
}
