package frames

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"testing"
	"testing/iotest"
)

// FuzzParseFrame parses arbitrary bytes as a frame. ParseFrame and
// ReadFrame must agree; whatever parses must re-encode, and the
// re-encoding must be a fixed point. Seeds: testdata/fuzz/FuzzParseFrame.
func FuzzParseFrame(f *testing.F) {
	f.Add(AppendEmptyFrame(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 20
		fr, n, err := ParseFrame(data, max)
		rf, rerr := ReadFrame(bufio.NewReader(bytes.NewReader(data)), max)
		rf = unpooled(t, rf)
		if (err == nil) != (rerr == nil) && !errors.Is(err, ErrIncomplete) {
			t.Fatalf("ParseFrame error %v, ReadFrame error %v", err, rerr)
		}
		if err != nil {
			return
		}
		if n > len(data) {
			t.Fatalf("consumed %d of %d bytes", n, len(data))
		}
		if !reflect.DeepEqual(fr, rf) {
			t.Fatalf("ParseFrame %v, ReadFrame %v", fr, rf)
		}
		// The same bytes arriving one at a time read the same.
		cf, err := ReadFrame(bufio.NewReaderSize(iotest.OneByteReader(bytes.NewReader(data)), 16), max)
		cf = unpooled(t, cf)
		if err != nil || !reflect.DeepEqual(cf, fr) {
			t.Fatalf("byte-at-a-time ReadFrame %v, %v", cf, err)
		}
		// And so do they when the body past the (smallest) buffer is read
		// from the source directly.
		src := iotest.OneByteReader(bytes.NewReader(data))
		df, err := ReadFrameDirect(bufio.NewReaderSize(src, 16), src, max)
		df = unpooled(t, df)
		if err != nil || !reflect.DeepEqual(df, fr) {
			t.Fatalf("byte-at-a-time ReadFrameDirect %v, %v", df, err)
		}
		if fr.Body == nil {
			return
		}
		p1, err := AppendFrame(nil, fr.Channel, fr.Body)
		if err != nil {
			t.Fatalf("re-encode %v: %v", fr.Body, err)
		}
		fr2, n2, err := ParseFrame(p1, 0)
		if err != nil || n2 != len(p1) {
			t.Fatalf("parse re-encoding % x: %v", p1, err)
		}
		p2, err := AppendFrame(nil, fr2.Channel, fr2.Body)
		if err != nil {
			t.Fatalf("re-encode twice: %v", err)
		}
		if !bytes.Equal(p1, p2) {
			t.Fatalf("encoding not a fixed point:\n%v\n% x\n%v\n% x", fr.Body, p1, fr2.Body, p2)
		}
	})
}

// FuzzMessage decodes arbitrary bytes as a message. Whatever decodes
// must re-encode with its body verbatim, and the re-encoding must be a
// fixed point. Seeds: testdata/fuzz/FuzzMessage.
func FuzzMessage(f *testing.F) {
	f.Add(AppendDataSection(nil, []byte("x")))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if err := m.UnmarshalBinary(data); err != nil {
			return
		}
		if len(m.RawBody) > 0 && !bytes.Contains(data, m.RawBody) {
			t.Fatal("RawBody is not a slice of the input")
		}
		p1, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("re-encode %+v: %v", m, err)
		}
		var m2 Message
		if err := m2.UnmarshalBinary(p1); err != nil {
			t.Fatalf("decode re-encoding % x: %v", p1, err)
		}
		if !bytes.Equal(m.RawBody, m2.RawBody) {
			t.Fatal("body changed")
		}
		p2, err := m2.MarshalBinary()
		if err != nil || !bytes.Equal(p1, p2) {
			t.Fatalf("encoding not a fixed point (%v):\n% x\n% x", err, p1, p2)
		}
		// The section splitter sees the same body, and the batch splitter
		// and body decoders never panic.
		s, err := SplitMessage(data)
		if err != nil || !bytes.Equal(s.Body, m.RawBody) {
			t.Fatalf("SplitMessage: %v", err)
		}
		_, _ = SplitBatch(m.RawBody)
		_, _ = BodyValue(m.RawBody)
		_, _ = BodySequences(m.RawBody)
	})
}
