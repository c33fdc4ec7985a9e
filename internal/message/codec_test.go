package message

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func full() *Message {
	ts := time.Date(2026, 11, 21, 12, 0, 0, 123456789, time.UTC)
	return &Message{
		Durable:  true,
		Priority: 7,
		TTL:      90 * time.Second,
		Annotations: map[string]any{
			"x-opt-scheduled-enqueue-time": ts,
			"x-opt-partition-key":          "pk",
			"list":                         []any{int32(1), "two", nil, []any{true}},
			"map":                          map[string]any{"a": uint16(1)},
			"anymap":                       map[any]any{Symbol("k"): int64(-1), int64(2): "v"},
		},
		MessageID:          "id-1",
		UserID:             []byte("user"),
		To:                 "to",
		Subject:            "label",
		ReplyTo:            "reply",
		CorrelationID:      UUID{1, 2, 3},
		ContentType:        "application/json",
		ContentEncoding:    "gzip",
		AbsoluteExpiryTime: ts.Add(time.Hour),
		CreationTime:       time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		SessionID:          "session",
		GroupSequence:      math.MaxUint32,
		ReplyToSessionID:   "reply-session",
		ApplicationProperties: map[string]any{
			"nil": nil, "t": true, "f": false,
			"u8": uint8(255), "u16": uint16(65535), "u32": uint32(math.MaxUint32), "u64": uint64(math.MaxUint64),
			"i8": int8(-128), "i16": int16(-32768), "i32": int32(math.MinInt32), "i64": int64(math.MinInt64),
			"f32": float32(1.5), "f64": math.Inf(-1), "s": "ü string", "sym": Symbol("sym"),
			"bin": []byte{0, 1, 2}, "time": ts, "uuid": UUID{15: 1}, "char": Char('€'),
			"old": time.Unix(-1e10, 5).UTC(),
		},
		Body: []byte("the body"),
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range []*Message{{}, {Body: []byte("x")}, {MessageID: uint64(7)}, {MessageID: []byte{1}}, full()} {
		b, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("Unmarshal: %v", err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
		}
		// AppendBinary to a non-empty prefix. (Map order varies, so compare
		// decoded messages, not bytes.)
		b2, _ := m.AppendBinary([]byte("prefix"))
		if string(b2[:6]) != "prefix" || len(b2)-6 != len(b) {
			t.Fatal("AppendBinary differs from Marshal")
		}
		if got2, err := Unmarshal(b2[6:]); err != nil || !reflect.DeepEqual(got2, m) {
			t.Fatalf("AppendBinary output does not decode: %v", err)
		}
	}
}

// TestUnmarshalShared: the sharing decode gives the same message, with
// its byte slices inside data and capped at their own length.
func TestUnmarshalShared(t *testing.T) {
	for _, m := range []*Message{{}, {Body: []byte("x")}, {MessageID: []byte{1}}, full()} {
		b, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalShared(b)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("UnmarshalShared = %#v, %v; want %#v", got, err, m)
		}
		for name, s := range map[string][]byte{"body": got.Body, "user-id": got.UserID, "bin": asBytes(got.ApplicationProperties["bin"]), "id": asBytes(got.MessageID)} {
			if len(s) == 0 {
				continue
			}
			if !within(s, b) || cap(s) != len(s) {
				t.Fatalf("%s: not a capped slice of the input", name)
			}
		}
	}
	if _, err := UnmarshalShared([]byte{99}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt input: %v", err)
	}
}

func asBytes(v any) []byte { b, _ := v.([]byte); return b }

// within reports whether s lies inside b.
func within(s, b []byte) bool {
	for i := range b {
		if &b[i] == &s[0] {
			return i+len(s) <= len(b)
		}
	}
	return false
}

// fullV2 is full with the fields version 2 added.
func fullV2() *Message {
	m := full()
	m.DeliveryAnnotations = map[string]any{"x-opt-delivery-annotation-test": "test-value", "n": int64(3)}
	m.Footer = []byte{0x00, 0x53, 0x78, 0xc1, 0x03, 0x01, 0xa1, 0x00} // an encoded footer section
	return m
}

// TestVersion2: a message with delivery annotations, a footer or the empty
// session id is written as version 2 and round-trips; one without is
// written as version 1.
func TestVersion2(t *testing.T) {
	for _, m := range []*Message{fullV2(), {Footer: []byte{1}}, {DeliveryAnnotations: map[string]any{"k": "v"}}, {EmptySessionID: true, Body: []byte("b")}} {
		b, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != codecV2 {
			t.Fatalf("version %d, want 2", b[0])
		}
		got, err := Unmarshal(b)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: %#v, %v; want %#v", got, err, m)
		}
		if hs, _ := m.HeaderSize(); hs != len(b)-bytesLen(len(m.Body)) && len(m.Body) > 0 {
			t.Fatalf("header size %d of %d bytes", hs, len(b))
		}
	}
	if b, _ := Marshal(full()); b[0] != codecV1 {
		t.Fatalf("a message without version 2 fields is written as version %d", b[0])
	}
}

// TestVersion1Fixtures: records written by the version 1 codec (before
// delivery annotations and footers were kept; testdata/v1, made by commit
// 6c7dc4a) decode to the messages they were made from, and the same
// messages are still written byte for byte as they were (map order aside).
func TestVersion1Fixtures(t *testing.T) {
	for name, want := range map[string]*Message{"empty": {}, "body": {Body: []byte("x")}, "full": full()} {
		data, err := os.ReadFile(filepath.Join("testdata", "v1", name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: decoded %#v, want %#v", name, got, want)
		}
		b, _ := Marshal(want)
		if len(b) != len(data) || b[0] != data[0] || name != "full" && !bytes.Equal(b, data) {
			t.Fatalf("%s: written as %x, version 1 wrote %x", name, b, data)
		}
	}
}

// v2Fixtures are the messages testdata/v2 was made from.
func v2Fixtures() map[string]*Message {
	return map[string]*Message{
		"full":                 fullV2(),
		"footer":               {Footer: []byte{0x00, 0x53, 0x78, 0xc1, 0x01, 0x00}, Body: []byte("b")},
		"delivery-annotations": {DeliveryAnnotations: map[string]any{"k": "v"}},
		"empty-session-id":     {EmptySessionID: true, Priority: 4, Body: []byte("b")},
	}
}

// TestVersion2Fixtures: records written by the version 2 codec
// (testdata/v2, made by the code of commit de718e2, before the message model took
// amqp/encoding's value types) decode to the messages they were made from.
func TestVersion2Fixtures(t *testing.T) {
	for name, want := range v2Fixtures() {
		data, err := os.ReadFile(filepath.Join("testdata", "v2", name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		if data[0] != codecV2 {
			t.Fatalf("%s: version %d", name, data[0])
		}
		got, err := Unmarshal(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: decoded %#v, want %#v", name, got, want)
		}
		b, _ := Marshal(want)
		if len(b) != len(data) || name != "full" && !bytes.Equal(b, data) {
			t.Fatalf("%s: written as %x, version 2 wrote %x", name, b, data)
		}
	}
}

func TestTimesDecodeAsUTC(t *testing.T) {
	loc := time.FixedZone("X", 3600)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6, loc)
	b, _ := Marshal(&Message{CreationTime: ts})
	m, _ := Unmarshal(b)
	if !m.CreationTime.Equal(ts) || m.CreationTime.Location() != time.UTC {
		t.Fatalf("got %v", m.CreationTime)
	}
}

func TestHeaderSize(t *testing.T) {
	m := full()
	b, hs, err := AppendWithHeaderSize(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(b) - len(m.Body) - 1; hs != want {
		t.Fatalf("header size %d, want %d", hs, want)
	}
	if hs2, _ := m.HeaderSize(); hs2 != hs {
		t.Fatalf("HeaderSize %d, AppendWithHeaderSize %d", hs2, hs)
	}
	big := &Message{ApplicationProperties: map[string]any{"k": strings.Repeat("v", 70000)}}
	if hs, _ := big.HeaderSize(); hs < 70000 {
		t.Fatalf("header size %d", hs)
	}
}

func TestUnsupportedTypes(t *testing.T) {
	for _, m := range []*Message{
		{ApplicationProperties: map[string]any{"k": 1}}, // plain int is not an AMQP type
		{Annotations: map[string]any{"k": struct{}{}}},
		{MessageID: 3.5 + 1i},
		{CorrelationID: []string{"x"}},
		{ApplicationProperties: map[string]any{"k": []any{map[string]any{"x": uint(1)}}}},
	} {
		_, err := Marshal(m)
		var ute *UnsupportedTypeError
		if !errors.As(err, &ute) {
			t.Fatalf("Marshal(%v): %v", m, err)
		}
	}
	var ute *UnsupportedTypeError
	_, err := Marshal(&Message{ApplicationProperties: map[string]any{"key": 1}})
	if !errors.As(err, &ute) || !strings.Contains(err.Error(), `ApplicationProperties["key"]`) {
		t.Fatalf("error does not name the property: %v", err)
	}
	// Too deep.
	var v any = "leaf"
	for range maxDepth + 2 {
		v = []any{v}
	}
	if _, err := Marshal(&Message{ApplicationProperties: map[string]any{"deep": v}}); err == nil {
		t.Fatal("accepted nesting beyond the limit")
	}
}

func TestCorrupt(t *testing.T) {
	good, _ := Marshal(full())
	for i := range len(good) {
		if _, err := Unmarshal(good[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	for _, bad := range [][]byte{
		nil,
		{3, 0},                                 // version
		{1, 0x80, 0x80, 0x20},                  // a version 2 field in a version 1 record
		{1, 0x80, 0x80, 0x80, 0x80, 0x10},      // unknown field bits
		{1, 0, 0},                              // trailing bytes
		{1, byte(fAnnotations), 1, 1, 'k', 99}, // unknown tag
		{1, byte(fAnnotations), 200, 1},        // count beyond input
		{1, byte(fMessageID), tagUint16, 0xff, 0xff, 0xff, 0x0f},             // out of range
		{1, byte(fAnnotations), 1, 1, 'k', tagAnyMap, 1, tagList, 0, tagNil}, // unhashable key
	} {
		if _, err := Unmarshal(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%x: error %v, want ErrCorrupt", bad, err)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	good, _ := Marshal(full())
	f.Add(good)
	small, _ := Marshal(&Message{Body: []byte("x"), MessageID: "id"})
	f.Add(small)
	f.Add([]byte{1, 0})
	v2, _ := Marshal(fullV2())
	f.Add(v2)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		// The sharing decode agrees.
		if ms, err := UnmarshalShared(data); err != nil || !reflect.DeepEqual(ms, m) && !hasNaN(m) {
			t.Fatalf("UnmarshalShared disagrees with Unmarshal: %v", err)
		}
		// Whatever decodes re-encodes and decodes to the same message.
		b, err := Marshal(m)
		if err != nil {
			t.Fatalf("re-encoding a decoded message: %v", err)
		}
		m2, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("decoding a re-encoded message: %v", err)
		}
		if !reflect.DeepEqual(m, m2) && !hasNaN(m) {
			t.Fatalf("unstable round trip")
		}
	})
}

// hasNaN reports whether m holds a NaN, which DeepEqual never matches.
func hasNaN(m *Message) bool {
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case float32:
			return v != v
		case float64:
			return v != v
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case map[any]any:
			for k, e := range v {
				if walk(k) || walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(m.Annotations) || walk(m.ApplicationProperties) || walk(m.DeliveryAnnotations) || walk(m.MessageID) || walk(m.CorrelationID)
}

func BenchmarkMarshal1K(b *testing.B) {
	m := &Message{MessageID: "0123456789abcdef", Body: make([]byte, 1024),
		ApplicationProperties: map[string]any{"a": "b", "n": int64(1)}}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkUnmarshal1K(b *testing.B) {
	data, _ := Marshal(&Message{MessageID: "0123456789abcdef", Body: make([]byte, 1024),
		ApplicationProperties: map[string]any{"a": "b", "n": int64(1)}})
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := Unmarshal(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used so far (user + system),
// for benchmarks on a shared machine where wall time per op is noise.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// FuzzUnmarshalHead checks UnmarshalHead against Unmarshal on every
// record and every cut of it: a long enough head decodes the same fields,
// and the body it points at is the body; a shorter one asks for more
// (ErrShortHead) or fails as the whole record does. The corpus is in
// testdata/fuzz/FuzzUnmarshalHead.
func FuzzUnmarshalHead(f *testing.F) {
	good, _ := Marshal(full())
	f.Add(good, uint16(40))
	v2, _ := Marshal(fullV2())
	f.Add(v2, uint16(7))
	f.Add([]byte{1, 0}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		k := min(int(cut), len(data))
		m, off, n, err := UnmarshalHead(data[:k], int64(len(data)))
		whole, werr := Unmarshal(data)
		if err != nil {
			if errors.Is(err, ErrShortHead) {
				if k == len(data) {
					t.Fatal("ErrShortHead for the whole record")
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is neither ErrShortHead nor ErrCorrupt", err)
			}
			if werr == nil {
				t.Fatalf("head fails (%v) where the whole record decodes", err)
			}
			return
		}
		if werr != nil {
			t.Fatalf("head decodes where the whole record fails: %v", werr)
		}
		body := data[off : off+n]
		if len(body) == 0 {
			body = nil
		}
		if !bytes.Equal(body, whole.Body) {
			t.Fatal("the body UnmarshalHead points at is not the record's")
		}
		whole.Body = nil
		if !reflect.DeepEqual(m, whole) && !hasNaN(whole) {
			t.Fatalf("UnmarshalHead disagrees with Unmarshal:\n%+v\n%+v", m, whole)
		}
	})
}

func TestUnmarshalHeadLargeBody(t *testing.T) {
	m := full()
	m.Body = bytes.Repeat([]byte("body"), 100000)
	rec, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := UnmarshalHead(rec[:10], int64(len(rec))); !errors.Is(err, ErrShortHead) {
		t.Fatalf("short head: %v", err)
	}
	h, off, n, err := UnmarshalHead(rec[:4096], int64(len(rec)))
	if err != nil || n != int64(len(m.Body)) || !bytes.Equal(rec[off:], m.Body) || h.Body != nil || h.MessageID != m.MessageID {
		t.Fatalf("UnmarshalHead: %v, %d at %d", err, n, off)
	}
}

// TestAppendHead: a message whose body is a BodyTail encodes as the head
// AppendHead writes followed by the body's bytes, the same record as with
// the body in memory; the encoders that need the body refuse it.
func TestAppendHead(t *testing.T) {
	m := full()
	body := bytes.Repeat([]byte("tail"), 5000)
	m.Body = body
	want, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	m.Body, m.BodyTail = nil, bytes.NewReader(body)
	head, hs, err := AppendHead(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(append(head, body...))
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := Unmarshal(want); len(head)+len(body) != len(want) || !reflect.DeepEqual(got, w) {
		t.Fatal("head + body is not the record") // (map order may differ byte-wise)
	}
	if whs, _ := full().HeaderSize(); hs != whs {
		t.Fatalf("header size %d, want %d", hs, whs)
	}
	if _, err := Marshal(m); !errors.Is(err, ErrBodyTail) {
		t.Fatalf("Marshal of a message with a BodyTail: %v", err)
	}
}

// TestAppendBeforeBody: the record up to the body's bytes, followed by
// the body, is the record AppendHead writes, for a body in memory of any
// size (none included) and for a BodyTail.
func TestAppendBeforeBody(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 20 << 10, 64 << 10} {
		body := bytes.Repeat([]byte{byte(n)}, n)
		plain := &Message{MessageID: "id", Subject: "s", ApplicationProperties: map[string]any{"k": int32(1)}, Body: body}
		want, hs, err := AppendHead(nil, plain)
		if err != nil {
			t.Fatal(err)
		}
		got, ghs, err := AppendBeforeBody([]byte("prefix"), plain)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(append(got[6:], body...), want) || ghs != hs {
			t.Fatalf("body of %d bytes: head + body differs from the record", n)
		}
		// A BodyTail: the same head as AppendHead's.
		tailed := *plain
		tailed.Body, tailed.BodyTail = nil, bytes.NewReader(body)
		th, _, err := AppendHead(nil, &tailed)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && !bytes.Equal(th, got[6:]) {
			t.Fatalf("body of %d bytes: the head differs from a BodyTail's", n)
		}
	}
	// Every field: decoded, head + body is the message.
	m := full()
	m.Body = bytes.Repeat([]byte("b"), 70000)
	head, _, err := AppendBeforeBody(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(append(head, m.Body...))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := Unmarshal(mustMarshal(t, m)); !reflect.DeepEqual(got, want) {
		t.Fatal("head + body decodes to another message")
	}
}

func mustMarshal(t *testing.T, m *Message) []byte {
	t.Helper()
	b, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
