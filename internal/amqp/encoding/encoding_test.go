package encoding

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	var b Buffer
	if err := b.WriteAny(v); err != nil {
		t.Fatalf("WriteAny(%#v): %v", v, err)
	}
	return b.Bytes()
}

func decode(t testing.TB, p []byte) any {
	t.Helper()
	r := NewReader(p)
	v, err := r.ReadAny()
	if err != nil {
		t.Fatalf("ReadAny(% x): %v", p, err)
	}
	if r.Len() != 0 {
		t.Fatalf("ReadAny(% x): %d bytes left", p, r.Len())
	}
	return v
}

var ts = time.Date(2024, 5, 6, 7, 8, 9, 123e6, time.UTC)

// TestGolden checks the encoder's choice of format code against encodings
// worked out by hand from part 1 of the spec, and that they decode back.
func TestGolden(t *testing.T) {
	tests := []struct {
		name string
		v    any
		hex  string
	}{
		{"null", nil, "40"},
		{"true", true, "41"},
		{"false", false, "42"},
		{"ubyte", uint8(7), "50 07"},
		{"ushort", uint16(0x1234), "60 12 34"},
		{"uint0", uint32(0), "43"},
		{"smalluint", uint32(255), "52 ff"},
		{"uint", uint32(256), "70 00 00 01 00"},
		{"ulong0", uint64(0), "44"},
		{"smallulong", uint64(0x70), "53 70"},
		{"ulong", uint64(1) << 40, "80 00 00 01 00 00 00 00 00"},
		{"byte", int8(-2), "51 fe"},
		{"short", int16(-2), "61 ff fe"},
		{"smallint", int32(-1), "54 ff"},
		{"int", int32(1000), "71 00 00 03 e8"},
		{"smalllong", int64(127), "55 7f"},
		{"long", int64(-129), "81 ff ff ff ff ff ff ff 7f"},
		{"float", float32(1.5), "72 3f c0 00 00"},
		{"double", float64(-2), "82 c0 00 00 00 00 00 00 00"},
		{"decimal32", Decimal32{1, 2, 3, 4}, "74 01 02 03 04"},
		{"decimal64", Decimal64{1, 2, 3, 4, 5, 6, 7, 8}, "84 01 02 03 04 05 06 07 08"},
		{"decimal128", Decimal128{15: 9}, "94 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 09"},
		{"char", Char('€'), "73 00 00 20 ac"},
		{"timestamp", time.UnixMilli(1311704463521).UTC(), "83 00 00 01 31 67 ad b8 a1"},
		{"uuid", UUID{0x01, 15: 0xff}, "98 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ff"},
		{"vbin8", []byte{1, 2}, "a0 02 01 02"},
		{"str8", "abc", "a1 03 61 62 63"},
		{"sym8", Symbol("ab"), "a3 02 61 62"},
		{"list0", []any(nil), "45"},
		{"list8", []any{uint32(1), "a"}, "c0 06 02 52 01 a1 01 61"},
		{"map8", Map{{Symbol("a"), true}}, "c1 05 02 a3 01 61 41"},
		{"symbol map sorted", map[Symbol]any{"b": nil, "a": true}, "c1 09 04 a3 01 61 41 a3 01 62 40"},
		{"string map sorted", map[string]any{"y": int32(1), "x": uint8(2)}, "c1 0b 04 a1 01 78 50 02 a1 01 79 54 01"},
		{"array of sym8", []Symbol{"a", "bc"}, "e0 07 02 a3 01 61 02 62 63"},
		{"array of str8", []string{"hi"}, "e0 05 01 a1 02 68 69"},
		{"array of vbin8", [][]byte{{1}}, "e0 04 01 a0 01 01"},
		{"array of uuid", []UUID{{}}, "e0 12 01 98 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
		{"array of long", []int64{1, -1}, "e0 12 02 81 00 00 00 00 00 00 00 01 ff ff ff ff ff ff ff ff"},
		{"array of timestamp", []time.Time{time.UnixMilli(1).UTC()}, "e0 0a 01 83 00 00 00 00 00 00 00 01"},
		{"array of bool", []bool{true, false}, "e0 04 02 56 01 00"},
		{"described list", Described{uint64(0x70), []any{true}}, "00 53 70 c0 02 01 41"},
		{"described symbol", Described{Symbol("x:y"), "v"}, "00 a3 03 78 3a 79 a1 01 76"},
		{"described array", Array{Descriptor: uint64(0x24), Code: TypeCodeList0, Elems: []any{[]any(nil), []any(nil)}},
			"e0 05 02 00 53 24 45"},
		{"array of list32", Array{Code: TypeCodeList32, Elems: []any{[]any{true}}},
			"e0 0b 01 d0 00 00 00 05 00 00 00 01 41"},
		{"array of map8", Array{Code: TypeCodeMap8, Elems: []any{Map{{"k", nil}}}},
			"e0 08 01 c1 05 02 a1 01 6b 40"},
		{"array of nulls", Array{Code: TypeCodeNull, Elems: []any{nil, nil, nil}}, "e0 02 03 40"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			got := encode(t, tt.v)
			if !bytes.Equal(got, want) {
				t.Fatalf("encode(%#v)\n got % x\nwant % x", tt.v, got, want)
			}
			back := decode(t, want)
			if !equalValues(back, tt.v) {
				t.Fatalf("decode(% x) = %#v, want %#v", want, back, tt.v)
			}
		})
	}
}

// equalValues compares decoded values; maps written from Go maps decode as
// ordered Maps.
func equalValues(got, want any) bool {
	switch w := want.(type) {
	case map[Symbol]any:
		m, ok := got.(Map)
		if !ok || len(m) != len(w) {
			return false
		}
		for k, v := range w {
			g, ok := m.Get(k)
			if !ok || !equalValues(g, v) {
				return false
			}
		}
		return true
	case map[string]any:
		m, ok := got.(Map)
		if !ok || len(m) != len(w) {
			return false
		}
		for k, v := range w {
			g, ok := m.Get(k)
			if !ok || !equalValues(g, v) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// TestDecodeAlternativeForms checks encodings our encoder never chooses
// but peers may send.
func TestDecodeAlternativeForms(t *testing.T) {
	tests := []struct {
		hex  string
		want any
	}{
		{"56 01", true},
		{"56 00", false},
		{"70 00 00 00 05", uint32(5)},
		{"80 00 00 00 00 00 00 00 05", uint64(5)},
		{"71 ff ff ff ff", int32(-1)},
		{"81 00 00 00 00 00 00 00 01", int64(1)},
		{"b0 00 00 00 01 ff", []byte{0xff}},
		{"b1 00 00 00 02 68 69", "hi"},
		{"b3 00 00 00 01 78", Symbol("x")},
		{"d0 00 00 00 06 00 00 00 02 41 42", []any{true, false}},
		{"c0 01 00", []any{}},
		{"d1 00 00 00 08 00 00 00 02 a3 01 6b 40", Map{{Symbol("k"), nil}}},
		{"f0 00 00 00 0a 00 00 00 01 b3 00 00 00 01 61", []Symbol{"a"}},
		{"e0 04 02 52 01 ff", []uint32{1, 255}},
		{"e0 02 02 43", []uint32{0, 0}},
		{"e0 04 02 54 ff 01", []int32{-1, 1}},
		{"e0 04 02 55 ff 01", []int64{-1, 1}},
		{"e0 04 02 53 01 02", []uint64{1, 2}},
		{"e0 06 01 a1 03 61 62 63", []string{"abc"}},
		{"e0 04 01 a0 01 07", [][]byte{{7}}},
		{"e0 0a 01 82 3f f0 00 00 00 00 00 00", []float64{1}},
		{"e0 02 00 a3", []Symbol{}},
		{"e0 03 01 50 09", Array{Code: TypeCodeUbyte, Elems: []any{uint8(9)}}},
		{"e0 04 02 52 01 02", []uint32{1, 2}},
		{"e0 08 01 e0 05 02 a3 01 61 00", Array{Code: TypeCodeArray8, Elems: []any{[]Symbol{"a", ""}}}},
	}
	for _, tt := range tests {
		got := decode(t, unhex(t, tt.hex))
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("decode(%s) = %#v, want %#v", tt.hex, got, tt.want)
		}
	}
}

// TestRoundTrip encodes every Go type of the mapping and decodes it back.
func TestRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 300)
	values := []any{
		nil, true, false,
		uint8(0), uint8(255), uint16(65535), uint32(math.MaxUint32), uint64(math.MaxUint64),
		int8(math.MinInt8), int16(math.MinInt16), int32(math.MinInt32), int32(math.MaxInt32),
		int64(math.MinInt64), int64(math.MaxInt64),
		float32(3.25), math.Inf(1), math.SmallestNonzeroFloat64,
		Char(0x1F600), ts, time.UnixMilli(-1).UTC(),
		UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		[]byte{}, []byte(long), "", long, Symbol(""), Symbol(long),
		Decimal32{1}, Decimal64{2}, Decimal128{3},
		[]any{nil, uint32(1), []any{"nested", Map{{"k", []any(nil)}}}},
		make([]any, 300),
		Map{{[]byte{1}, "binary key"}, {uint64(7), int32(-7)}, {"s", Symbol("s")}},
		Described{Descriptor: uint64(0x137000000c), Value: "session-1"},
		Described{Descriptor: Symbol("com.microsoft:x"), Value: []any{int64(1)}},
		[]Symbol{}, []Symbol{"x", Symbol(long)},
		[]string{"a", long}, []UUID{{1}, {2}}, []int64{math.MinInt64, 0}, []int32{1, 2},
		[]uint64{1 << 63}, []uint32{0, 1 << 31}, []time.Time{ts, ts.Add(time.Hour)},
		[]bool{false, true}, []float64{0.5}, [][]byte{{}, {1, 2}},
		Array{Descriptor: uint64(0x1234), Code: TypeCodeList32, Elems: []any{[]any{"a"}, []any{}}},
		Array{Code: TypeCodeMap32, Elems: []any{Map{{"a", int64(1)}}, Map{}}},
		Array{Code: TypeCodeArray32, Elems: []any{[]Symbol{"a"}, []Symbol{}}},
		Array{Code: TypeCodeUbyte, Elems: []any{uint8(1), uint8(2)}},
		Array{Code: TypeCodeChar, Elems: []any{Char('a')}},
		Array{Code: TypeCodeDecimal128, Elems: []any{Decimal128{}}},
	}
	for _, v := range values {
		p := encode(t, v)
		got := decode(t, p)
		want := v
		// Arrays of arrays decode into the typed slices.
		if !equalValues(got, want) {
			// Widened forms: empty lists decode as nil.
			if l, ok := v.([]any); ok && len(l) == 0 && got == nil {
				continue
			}
			t.Errorf("round trip %#v\n bytes % x\n   got %#v", v, p, got)
		}
		// Skip and ReadRaw agree with ReadAny about the extent.
		r := NewReader(p)
		raw, err := r.ReadRaw()
		if err != nil || !bytes.Equal(raw, p) {
			t.Errorf("ReadRaw(% x) = % x, %v", p, raw, err)
		}
	}
}

func TestWriteAnyIntAndUint(t *testing.T) {
	if got := encode(t, 5); !bytes.Equal(got, []byte{TypeCodeSmallLong, 5}) {
		t.Errorf("int: % x", got)
	}
	if got := encode(t, uint(5)); !bytes.Equal(got, []byte{TypeCodeSmallUlong, 5}) {
		t.Errorf("uint: % x", got)
	}
	var b Buffer
	if err := b.WriteAny(struct{}{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("struct: %v", err)
	}
	if err := b.WriteAny(Array{Code: TypeCodeUint, Elems: []any{"x"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad array element: %v", err)
	}
	if err := b.WriteAny(Array{Code: TypeCodeUint, Elems: []any{uint8(1)}}); err == nil {
		t.Errorf("ubyte in uint array: no error")
	}
	if err := b.WriteAny(Array{Code: TypeCodeList8, Elems: []any{Map{}}}); err == nil {
		t.Errorf("map in list array: no error")
	}
}

// TestListWriter covers the composite fast path used by the frames
// package: trailing nulls dropped, explicit nulls kept, list0/list8/list32.
func TestListWriter(t *testing.T) {
	tests := []struct {
		name  string
		write func(b *Buffer, l *ListWriter)
		hex   string
	}{
		{"empty", func(b *Buffer, l *ListWriter) {}, "45"},
		{"only nulls", func(b *Buffer, l *ListWriter) { l.Null(); l.Null() }, "45"},
		{"trailing nulls", func(b *Buffer, l *ListWriter) {
			b.WriteUint(1)
			l.Next()
			l.Null()
			b.WriteBool(true)
			l.Next()
			l.Null()
			l.Null()
		}, "c0 05 03 52 01 40 41"},
		{"explicit null kept", func(b *Buffer, l *ListWriter) {
			l.Null()
			l.ExplicitNull()
		}, "c0 03 02 40 40"},
		{"list32 when large", func(b *Buffer, l *ListWriter) {
			b.WriteBinary(make([]byte, 300))
			l.Next()
		}, "d0 00 00 01 35 00 00 00 01 b0 00 00 01 2c" + strings.Repeat("00", 300)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Buffer{}
			b.WriteRaw([]byte{0xaa}) // lists may start mid-buffer
			l := b.BeginList()
			tt.write(&b, &l)
			l.End()
			want := append([]byte{0xaa}, unhex(t, tt.hex)...)
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("got  % x\nwant % x", b.Bytes(), want)
			}
		})
	}
}

func TestLargeCompounds(t *testing.T) {
	m := make(map[string]any)
	for i := range 200 {
		m[strings.Repeat("k", i+1)] = int32(i)
	}
	p := encode(t, m)
	if p[0] != TypeCodeMap32 {
		t.Fatalf("large map encoded with 0x%02x", p[0])
	}
	got := decode(t, p).(Map)
	if len(got) != 200 {
		t.Fatalf("got %d entries", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].Key.(string) >= got[i].Key.(string) {
			t.Fatalf("keys not sorted at %d", i)
		}
	}
	syms := make([]Symbol, 100)
	for i := range syms {
		syms[i] = "sym"
	}
	if p := encode(t, syms); p[0] != TypeCodeArray32 {
		t.Fatalf("large array encoded with 0x%02x", p[0])
	}
}

func TestMapGet(t *testing.T) {
	m := Map{{Symbol("a"), 1}, {"b", 2}, {[]byte("c"), 3}, {uint64(4), 4}, {[]any{}, 5}}
	for _, tt := range []struct {
		key  any
		want any
		ok   bool
	}{
		{"a", 1, true}, {Symbol("a"), 1, true}, {Symbol("b"), 2, true}, {"b", 2, true},
		{[]byte("c"), 3, true}, {uint64(4), 4, true}, {uint32(4), nil, false}, {"z", nil, false},
		{[]any{}, nil, false},
	} {
		got, ok := m.Get(tt.key)
		if ok != tt.ok || got != tt.want {
			t.Errorf("Get(%#v) = %v, %v; want %v, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	m.Set("a", 10)
	m.Set("new", 11)
	if v, _ := m.Get(Symbol("a")); v != 10 || len(m) != 6 {
		t.Errorf("Set: %v", m)
	}
}

func TestTypedReads(t *testing.T) {
	r := NewReader(unhex(t, "50 05 60 01 00 52 07 43 53 09 80 00 00 00 00 00 00 00 0a 54 fe 61 ff ff 55 03 72 3f 80 00 00 a3 01 61 e0 06 02 a3 01 62 01 63"))
	u8, _ := r.ReadUint32()
	u16, _ := r.ReadUint32()
	u32, _ := r.ReadUint64()
	z, _ := r.ReadUint32()
	u64a, _ := r.ReadUint64()
	u64b, _ := r.ReadUint64()
	i32, _ := r.ReadInt32()
	i64a, _ := r.ReadInt64()
	i64b, _ := r.ReadInt64()
	f, _ := r.ReadFloat64()
	one, _ := r.ReadSymbols()
	arr, err := r.ReadSymbols()
	if err != nil || r.Len() != 0 {
		t.Fatalf("err %v, %d left", err, r.Len())
	}
	got := []any{u8, u16, u32, z, u64a, u64b, i32, i64a, i64b, f, one, arr}
	want := []any{uint32(5), uint32(256), uint64(7), uint32(0), uint64(9), uint64(10), int32(-2), int64(-1), int64(3), float64(1), []Symbol{"a"}, []Symbol{"b", "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}

	// A wrong type leaves the cursor on the value.
	r = NewReader(unhex(t, "a1 01 61"))
	if _, err := r.ReadUint32(); err == nil {
		t.Fatal("ReadUint32 of a string: no error")
	} else {
		var te *TypeError
		if !errors.As(err, &te) || te.Code != TypeCodeStr8 {
			t.Fatalf("error %v", err)
		}
	}
	if s, err := r.ReadString(); err != nil || s != "a" {
		t.Fatalf("ReadString after type error: %q %v", s, err)
	}
}

func TestSymbolAndStringMaps(t *testing.T) {
	p := encode(t, Map{{"str", int32(1)}, {Symbol("sym"), int32(2)}})
	sm, err := NewReader(p).ReadSymbolMap()
	if err != nil || !reflect.DeepEqual(sm, map[Symbol]any{"str": int32(1), "sym": int32(2)}) {
		t.Errorf("ReadSymbolMap = %v, %v", sm, err)
	}
	stm, err := NewReader(p).ReadStringMap()
	if err != nil || !reflect.DeepEqual(stm, map[string]any{"str": int32(1), "sym": int32(2)}) {
		t.Errorf("ReadStringMap = %v, %v", stm, err)
	}
	bad := encode(t, Map{{uint64(1), nil}})
	if _, err := NewReader(bad).ReadSymbolMap(); err == nil {
		t.Error("ReadSymbolMap with ulong key: no error")
	}
	if _, err := NewReader(bad).ReadStringMap(); err == nil {
		t.Error("ReadStringMap with ulong key: no error")
	}
	if m, err := NewReader([]byte{TypeCodeNull}).ReadSymbolMap(); m != nil || err != nil {
		t.Errorf("null map: %v %v", m, err)
	}
}

// TestDecodeErrors feeds malformed input; every case must fail cleanly.
func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want error
	}{
		{"empty", "", ErrTruncated},
		{"unknown code", "57", ErrInvalidCode},
		{"bad bool byte", "56 02", ErrInvalid},
		{"truncated uint", "70 00 00", ErrTruncated},
		{"truncated uuid", "98 00", ErrTruncated},
		{"vbin8 longer than input", "a0 05 01", ErrTruncated},
		{"vbin32 huge", "b0 ff ff ff ff 00", ErrTruncated},
		{"list8 size beyond input", "c0 10 01 41", ErrInvalidSize},
		{"list8 zero size", "c0 00 00", ErrInvalidSize},
		{"list32 size under 4", "d0 00 00 00 02 00 00 00 00", ErrInvalidSize},
		{"list count larger than size", "c0 02 05 41", ErrInvalidSize},
		{"list count smaller than content", "c0 03 01 41 41", ErrInvalidSize},
		{"list32 count huge", "d0 00 00 00 05 ff ff ff ff 41", ErrInvalidSize},
		{"map odd count", "c1 03 01 41 41", ErrInvalidSize},
		{"array zero-width bomb", "f0 00 00 00 05 7f ff ff ff 40", ErrInvalidSize},
		{"array fixed-width overrun", "e0 04 05 70 00 00", ErrInvalidSize},
		{"array constructor missing", "e0 01 01", ErrTruncated},
		{"array element code invalid", "e0 02 01 57", ErrInvalidCode},
		{"array described constructor truncated", "e0 03 01 00 53", ErrTruncated},
		{"array element beyond size", "e0 03 01 a1 05 61 62 63 64 65", ErrTruncated},
		{"described truncated", "00 53", ErrTruncated},
		{"described descriptor described", "00 00 53 01 41 41", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := unhex(t, tt.hex)
			_, err := NewReader(p).ReadAny()
			if !errors.Is(err, tt.want) {
				t.Fatalf("ReadAny(% x) error %v, want %v", p, err, tt.want)
			}
		})
	}
}

func TestDepthLimit(t *testing.T) {
	var p []byte
	for range MaxDepth + 1 {
		p = append(p, TypeCodeDescribed, TypeCodeNull)
	}
	p = append(p, TypeCodeNull)
	if _, err := NewReader(p).ReadAny(); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("deep described: %v", err)
	}
	if err := NewReader(p).Skip(); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("Skip deep described: %v", err)
	}
	// Nested lists: list8 wrapping list8 ... wrapping list0.
	inner := []byte{TypeCodeList0}
	for range MaxDepth + 1 {
		inner = append([]byte{TypeCodeList32, 0, 0, 0, 0, 0, 0, 0, 1}, inner...)
		n := len(inner) - 5
		inner[1], inner[2], inner[3], inner[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	}
	if _, err := NewReader(inner).ReadAny(); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("deep lists: %v", err)
	}
}

// TestTruncations decodes every strict prefix of valid encodings: each
// must fail without panicking.
func TestTruncations(t *testing.T) {
	for _, v := range []any{
		uint64(1 << 40), "hello", []any{uint32(1), "x", Map{{"k", []Symbol{"a"}}}},
		Described{uint64(0x70), []any{true, nil, uint32(7)}},
		Array{Descriptor: uint64(1), Code: TypeCodeList32, Elems: []any{[]any{"a"}}},
		[]UUID{{}, {}}, []time.Time{ts},
	} {
		p := encode(t, v)
		for i := range len(p) {
			if _, err := NewReader(p[:i]).ReadAny(); err == nil {
				t.Errorf("prefix % x of % x decoded without error", p[:i], p)
			}
			if err := NewReader(p[:i]).Skip(); err == nil && i > 0 && i < len(p) {
				// Skip only checks sizes, so a prefix may look complete only
				// if it ends exactly at a declared size, which a strict
				// prefix of a single value never does.
				t.Errorf("Skip of prefix % x succeeded", p[:i])
			}
		}
	}
}

func TestReaderMisc(t *testing.T) {
	p := unhex(t, "00 53 10 45 41")
	r := NewReader(p)
	code, name, err := r.PeekDescriptor()
	if err != nil || code != 0x10 || name != "" || r.Offset() != 0 {
		t.Fatalf("PeekDescriptor = %v %q %v at %d", code, name, err, r.Offset())
	}
	if _, _, err := r.ReadDescriptor(); err != nil {
		t.Fatal(err)
	}
	n, end, err := r.ReadListHeader()
	if n != 0 || err != nil || r.EndCompound(end) != nil {
		t.Fatalf("list0 header: %d %v", n, err)
	}
	if c, _ := r.PeekCode(); c != TypeCodeBoolTrue || len(r.Remaining()) != 1 || len(r.Input()) != 5 {
		t.Fatalf("PeekCode = 0x%02x", c)
	}
	if err := r.Seek(6); err == nil {
		t.Fatal("Seek past end: no error")
	}
	r.Reset(unhex(t, "00 a3 01 78 45"))
	if _, name, err := r.ReadDescriptor(); name != "x" || err != nil {
		t.Fatalf("symbolic descriptor %q %v", name, err)
	}
	if got := (UUID{0x12, 0x34, 15: 0xff}).String(); got != "12340000-0000-0000-0000-0000000000ff" {
		t.Fatalf("UUID.String = %s", got)
	}
	if CodeName(0x57) != "unknown" || CodeName(TypeCodeSym32) != "symbol" {
		t.Fatal("CodeName")
	}
}

func TestBufferNoAllocs(t *testing.T) {
	var b Buffer
	b.SetBytes(make([]byte, 0, 4096))
	ann := map[Symbol]any{"x-opt-sequence-number": int64(12), "x-opt-enqueued-time": ts, "x-opt-locked-until": ts}
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		l := b.BeginList()
		b.WriteUint(7)
		l.Next()
		b.WriteBinary([]byte("tag"))
		l.Next()
		l.Null()
		l.End()
		_ = b.WriteSymbolMap(ann)
		b.WriteSymbolArray([]Symbol{"a", "b"})
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per encode", allocs)
	}
}
