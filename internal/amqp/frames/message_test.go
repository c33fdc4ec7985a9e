package frames

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

var (
	t0 = time.Date(2025, 1, 20, 16, 53, 32, 0, time.UTC)
	t1 = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
)

func fullMessage(t testing.TB) *Message {
	body := AppendDataSection(nil, []byte("first"))
	body = AppendDataSection(body, []byte("second"))
	return &Message{
		Header:              &Header{Durable: true, Priority: 7, TTL: 60000, FirstAcquirer: true, DeliveryCount: 2},
		DeliveryAnnotations: map[Symbol]any{"x-opt-lock-token": UUID{1, 2, 3}},
		MessageAnnotations: map[Symbol]any{
			"x-opt-sequence-number":        int64(42),
			"x-opt-enqueued-time":          t0,
			"x-opt-scheduled-enqueue-time": t0.Add(time.Minute),
			"x-opt-partition-key":          "pk",
			"x-opt-message-state":          int32(1),
		},
		Properties: &Properties{
			MessageID: "id-1", UserID: []byte("user"), To: "queue", Subject: "label", ReplyTo: "reply",
			CorrelationID: UUID{9}, ContentType: "application/json", ContentEncoding: "gzip",
			AbsoluteExpiryTime: t1, CreationTime: t0, GroupID: "session-1", GroupSequence: 3, ReplyToGroupID: "rsession",
		},
		ApplicationProperties: map[string]any{
			"s": "v", "i": int32(-1), "l": int64(1 << 40), "b": true, "d": 1.5, "t": t0, "u": UUID{7}, "bin": []byte{0},
			"nil": nil, "ub": uint8(1), "sym": Symbol("x"),
		},
		RawBody: body,
		Footer:  map[Symbol]any{"hash": []byte{0xff}},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	m := fullMessage(t)
	p, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Message
	if err := got.UnmarshalBinary(p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, m) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, *m)
	}
	var buf MessageBuf // the same, its header and properties inside it
	if err := buf.UnmarshalBinary(p); err != nil || !reflect.DeepEqual(&buf.Message, m) ||
		buf.Header != &buf.header || buf.Properties != &buf.properties {
		t.Fatalf("MessageBuf round trip: %v\n got %+v\nwant %+v", err, buf.Message, *m)
	}
	p2, err := got.MarshalBinary()
	if err != nil || !bytes.Equal(p, p2) {
		t.Fatalf("re-encoding differs (%v):\n% x\n% x", err, p, p2)
	}
	data, err := DataSections(got.RawBody)
	if err != nil || !reflect.DeepEqual(data, [][]byte{[]byte("first"), []byte("second")}) {
		t.Fatalf("DataSections = %q, %v", data, err)
	}
}

// TestMessageIDTypes covers the four message-id types, in both id fields.
func TestMessageIDTypes(t *testing.T) {
	for _, id := range []any{uint64(0), uint64(1 << 50), UUID{1}, []byte{1, 2}, "s", ""} {
		m := &Message{Properties: &Properties{MessageID: id, CorrelationID: id}}
		p, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Message
		if err := got.UnmarshalBinary(p); err != nil {
			t.Fatalf("%#v: %v", id, err)
		}
		if !reflect.DeepEqual(got.Properties.MessageID, id) || !reflect.DeepEqual(got.Properties.CorrelationID, id) {
			t.Fatalf("id %#v decoded as %#v / %#v", id, got.Properties.MessageID, got.Properties.CorrelationID)
		}
	}
	// Any other type is refused on decode.
	var b encoding.Buffer
	b.WriteDescriptor(DescriptorProperties)
	l := b.BeginList()
	b.WriteInt(5)
	l.Next()
	l.End()
	var m Message
	if err := m.UnmarshalBinary(b.Bytes()); err == nil {
		t.Fatal("int message-id accepted")
	}
}

// TestRawBodyVerbatim checks that body sections, whatever their form,
// come back byte for byte, including non-canonical encodings.
func TestRawBodyVerbatim(t *testing.T) {
	value, _ := AppendValueSection(nil, map[string]any{"operation": "put-token"})
	seq, _ := AppendSequenceSection(nil, []any{"a", int32(1)})
	seq, _ = AppendSequenceSection(seq, nil)
	// A data section in vbin32 form and an amqp-value with a list32 where
	// list8 would do: non-canonical, must survive unchanged.
	vbin32 := unhex(t, "00 53 75 b0 00 00 00 02 68 69")
	list32 := unhex(t, "00 53 77 d0 00 00 00 05 00 00 00 01 41")
	for _, body := range [][]byte{value, seq, vbin32, list32, nil} {
		h, _ := (&Header{Durable: true}).AppendAMQP(nil)
		p := append(h, body...)
		var m Message
		if err := m.UnmarshalBinary(p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.RawBody, body) {
			t.Fatalf("RawBody % x, want % x", m.RawBody, body)
		}
		out, err := m.MarshalBinary()
		if err != nil || !bytes.Equal(out, p) {
			t.Fatalf("re-encoded % x, want % x", out, p)
		}
	}
	v, err := BodyValue(value)
	if err != nil || !reflect.DeepEqual(v, Map{{Key: "operation", Value: "put-token"}}) {
		t.Fatalf("BodyValue = %#v, %v", v, err)
	}
	seqs, err := BodySequences(seq)
	if err != nil || !reflect.DeepEqual(seqs, [][]any{{"a", int32(1)}, nil}) {
		t.Fatalf("BodySequences = %#v, %v", seqs, err)
	}
	if _, err := BodyValue(seq); err == nil {
		t.Fatal("BodyValue of a sequence: no error")
	}
	if _, err := BodySequences(value); err == nil {
		t.Fatal("BodySequences of a value: no error")
	}
	if _, err := DataSections(value); err == nil {
		t.Fatal("DataSections of a value: no error")
	}
}

func TestSectionOrder(t *testing.T) {
	h, _ := (&Header{}).AppendAMQP(nil)
	props, _ := (&Properties{To: "q"}).AppendAMQP(nil)
	ma, _ := AppendAnnotationsSection(nil, DescriptorMessageAnnotations, map[Symbol]any{})
	data := AppendDataSection(nil, []byte("x"))
	value, _ := AppendValueSection(nil, "v")
	seq, _ := AppendSequenceSection(nil, []any{})
	footer, _ := AppendAnnotationsSection(nil, DescriptorFooter, map[Symbol]any{})
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name string
		p    []byte
		want error
	}{
		{"properties before header", cat(props, h), ErrSectionOrder},
		{"two headers", cat(h, h), ErrSectionOrder},
		{"annotations after properties", cat(props, ma), ErrSectionOrder},
		{"value after data", cat(data, value), ErrSectionOrder},
		{"two values", cat(value, value), ErrSectionOrder},
		{"sequence after data", cat(data, seq), ErrSectionOrder},
		{"body after footer", cat(footer, data), ErrSectionOrder},
		{"data after properties after data", cat(data, props), ErrSectionOrder},
		{"unknown section", unhex(t, "00 53 79 45"), ErrUnknownSection},
		{"not described", unhex(t, "45"), nil},
		{"truncated section", cat(h, data[:len(data)-1]), encoding.ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Message
			err := m.UnmarshalBinary(tt.p)
			if err == nil {
				t.Fatalf("accepted % x", tt.p)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
	// All sections in order, empty maps kept as present.
	var m Message
	if err := m.UnmarshalBinary(cat(h, ma, props, data, data, footer)); err != nil {
		t.Fatal(err)
	}
	if m.MessageAnnotations == nil || m.Footer == nil || len(m.RawBody) != 2*len(data) {
		t.Fatalf("got %+v", m)
	}
}

// TestSectionsAppendWith re-encodes a stored message for delivery with a
// new header and annotations, leaving the bare message untouched.
func TestSectionsAppendWith(t *testing.T) {
	m := fullMessage(t)
	p, _ := m.MarshalBinary()
	s, err := SplitMessage(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.BodyType != DescriptorData || !bytes.Equal(s.Body, m.RawBody) {
		t.Fatalf("Sections body % x type %x", s.Body, s.BodyType)
	}
	if again := s.AppendBinary(nil); !bytes.Equal(again, p) {
		t.Fatal("Sections.AppendBinary does not reproduce the message")
	}
	newHeader := &Header{Priority: 4, DeliveryCount: 5}
	ma := map[Symbol]any{"x-opt-locked-until": t0}
	out, err := s.AppendWith(nil, newHeader, nil, ma)
	if err != nil {
		t.Fatal(err)
	}
	var got Message
	if err := got.UnmarshalBinary(out); err != nil {
		t.Fatal(err)
	}
	want := *m
	want.Header = newHeader
	want.DeliveryAnnotations = nil
	want.MessageAnnotations = ma
	if !reflect.DeepEqual(&got, &want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if !bytes.Contains(out, s.Properties) || !bytes.Contains(out, s.ApplicationProperties) {
		t.Fatal("bare message sections not copied verbatim")
	}
}

func TestSplitBatch(t *testing.T) {
	var inner [][]byte
	var body []byte
	for i, id := range []string{"a", "b", "c"} {
		m := &Message{
			Properties:            &Properties{MessageID: id, GroupID: "s"},
			ApplicationProperties: map[string]any{"n": int32(i)},
			RawBody:               AppendDataSection(nil, []byte(id)),
		}
		p, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		inner = append(inner, p)
		body = AppendDataSection(body, p)
	}
	envelope := &Message{
		Properties:         &Properties{MessageID: "a", GroupID: "s"},
		MessageAnnotations: map[Symbol]any{"x-opt-partition-key": "s"},
		RawBody:            body,
	}
	p, _ := envelope.MarshalBinary()
	var got Message
	if err := got.UnmarshalBinary(p); err != nil {
		t.Fatal(err)
	}
	parts, err := SplitBatch(got.RawBody)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(parts, inner) {
		t.Fatalf("SplitBatch = %q", parts)
	}
	for i, part := range parts {
		var m Message
		if err := m.UnmarshalBinary(part); err != nil || m.ApplicationProperties["n"] != int32(i) {
			t.Fatalf("inner %d: %+v %v", i, m, err)
		}
	}
	value, _ := AppendValueSection(nil, "x")
	if _, err := SplitBatch(value); err == nil {
		t.Fatal("SplitBatch of amqp-value: no error")
	}
}

func TestHeaderDefaults(t *testing.T) {
	p, _ := (&Header{}).AppendAMQP(nil)
	// Priority 0 is not the default and is written; so is delivery-count
	// 0, which rhea would read as undefined if absent; the rest is absent.
	if !bytes.Equal(p, unhex(t, "00 53 70 c0 07 05 40 50 00 40 40 43")) {
		t.Fatalf("Header{} = % x", p)
	}
	var h Header
	if err := unmarshalBytes(unhex(t, "00 53 70 45"), &h); err != nil || h.Priority != 4 {
		t.Fatalf("empty header: %+v %v", h, err)
	}
	p, _ = (&Header{Priority: 4}).AppendAMQP(nil)
	if !bytes.Equal(p, unhex(t, "00 53 70 c0 06 05 40 40 40 40 43")) {
		t.Fatalf("default header = % x", p)
	}
}
