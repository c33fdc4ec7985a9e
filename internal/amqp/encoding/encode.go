package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

// Buffer accumulates encoded AMQP values. The zero value is an empty
// buffer ready to use. Reuse one Buffer (Reset, or SetBytes with a slice
// kept by the caller) so that encoding does not allocate.
type Buffer struct {
	b []byte
}

// NewBuffer returns a Buffer that appends to b.
func NewBuffer(b []byte) *Buffer { return &Buffer{b: b} }

// Bytes returns the encoded bytes. The slice aliases the buffer.
func (b *Buffer) Bytes() []byte { return b.b }

// Len returns the number of encoded bytes.
func (b *Buffer) Len() int { return len(b.b) }

// Reset empties the buffer, keeping its capacity.
func (b *Buffer) Reset() { b.b = b.b[:0] }

// SetBytes makes the buffer append to p.
func (b *Buffer) SetBytes(p []byte) { b.b = p }

// Truncate discards all but the first n encoded bytes.
func (b *Buffer) Truncate(n int) { b.b = b.b[:n] }

// Write appends p verbatim (io.Writer).
func (b *Buffer) Write(p []byte) (int, error) {
	b.b = append(b.b, p...)
	return len(p), nil
}

// WriteRaw appends already-encoded bytes verbatim.
func (b *Buffer) WriteRaw(p []byte) { b.b = append(b.b, p...) }

// WriteNull writes null.
func (b *Buffer) WriteNull() { b.b = append(b.b, TypeCodeNull) }

// WriteBool writes a boolean as true (0x41) or false (0x42).
func (b *Buffer) WriteBool(v bool) {
	if v {
		b.b = append(b.b, TypeCodeBoolTrue)
	} else {
		b.b = append(b.b, TypeCodeBoolFalse)
	}
}

// WriteUbyte writes a ubyte.
func (b *Buffer) WriteUbyte(v uint8) { b.b = append(b.b, TypeCodeUbyte, v) }

// WriteUshort writes a ushort.
func (b *Buffer) WriteUshort(v uint16) {
	b.b = binary.BigEndian.AppendUint16(append(b.b, TypeCodeUshort), v)
}

// WriteUint writes a uint in its smallest form (uint0, smalluint or uint).
func (b *Buffer) WriteUint(v uint32) {
	switch {
	case v == 0:
		b.b = append(b.b, TypeCodeUint0)
	case v < 256:
		b.b = append(b.b, TypeCodeSmallUint, byte(v))
	default:
		b.b = binary.BigEndian.AppendUint32(append(b.b, TypeCodeUint), v)
	}
}

// WriteUlong writes a ulong in its smallest form (ulong0, smallulong or
// ulong).
func (b *Buffer) WriteUlong(v uint64) {
	switch {
	case v == 0:
		b.b = append(b.b, TypeCodeUlong0)
	case v < 256:
		b.b = append(b.b, TypeCodeSmallUlong, byte(v))
	default:
		b.b = binary.BigEndian.AppendUint64(append(b.b, TypeCodeUlong), v)
	}
}

// WriteByte8 writes an AMQP byte (a signed 8-bit integer).
func (b *Buffer) WriteByte8(v int8) { b.b = append(b.b, TypeCodeByte, byte(v)) }

// WriteShort writes a short.
func (b *Buffer) WriteShort(v int16) {
	b.b = binary.BigEndian.AppendUint16(append(b.b, TypeCodeShort), uint16(v))
}

// WriteInt writes an int in its smallest form (smallint or int).
func (b *Buffer) WriteInt(v int32) {
	if v >= -128 && v <= 127 {
		b.b = append(b.b, TypeCodeSmallInt, byte(v))
		return
	}
	b.b = binary.BigEndian.AppendUint32(append(b.b, TypeCodeInt), uint32(v))
}

// WriteLong writes a long in its smallest form (smalllong or long).
func (b *Buffer) WriteLong(v int64) {
	if v >= -128 && v <= 127 {
		b.b = append(b.b, TypeCodeSmallLong, byte(v))
		return
	}
	b.b = binary.BigEndian.AppendUint64(append(b.b, TypeCodeLong), uint64(v))
}

// WriteFloat writes a float (IEEE 754 binary32).
func (b *Buffer) WriteFloat(v float32) {
	b.b = binary.BigEndian.AppendUint32(append(b.b, TypeCodeFloat), math.Float32bits(v))
}

// WriteDouble writes a double (IEEE 754 binary64).
func (b *Buffer) WriteDouble(v float64) {
	b.b = binary.BigEndian.AppendUint64(append(b.b, TypeCodeDouble), math.Float64bits(v))
}

// WriteChar writes a char as UTF-32BE.
func (b *Buffer) WriteChar(v Char) {
	b.b = binary.BigEndian.AppendUint32(append(b.b, TypeCodeChar), uint32(v))
}

// WriteTimestamp writes a timestamp: milliseconds since the Unix epoch.
func (b *Buffer) WriteTimestamp(t time.Time) {
	b.b = binary.BigEndian.AppendUint64(append(b.b, TypeCodeTimestamp), uint64(t.UnixMilli()))
}

// WriteUUID writes a uuid.
func (b *Buffer) WriteUUID(u UUID) {
	b.b = append(append(b.b, TypeCodeUUID), u[:]...)
}

// WriteBinary writes binary data as vbin8 or vbin32.
func (b *Buffer) WriteBinary(p []byte) {
	b.writeVariable(TypeCodeVbin8, TypeCodeVbin32, len(p))
	b.b = append(b.b, p...)
}

// WriteString writes a UTF-8 string as str8 or str32.
func (b *Buffer) WriteString(s string) {
	b.writeVariable(TypeCodeStr8, TypeCodeStr32, len(s))
	b.b = append(b.b, s...)
}

// WriteSymbol writes a symbol as sym8 or sym32.
func (b *Buffer) WriteSymbol(s Symbol) {
	b.writeVariable(TypeCodeSym8, TypeCodeSym32, len(s))
	b.b = append(b.b, s...)
}

func (b *Buffer) writeVariable(code8, code32 byte, n int) {
	if n < 256 {
		b.b = append(b.b, code8, byte(n))
		return
	}
	b.b = binary.BigEndian.AppendUint32(append(b.b, code32), uint32(n))
}

// WriteDescriptor writes the descriptor constructor (0x00) and a ulong
// descriptor code. The described value must follow.
func (b *Buffer) WriteDescriptor(code uint64) {
	b.b = append(b.b, TypeCodeDescribed)
	b.WriteUlong(code)
}

// WriteDescribed writes a described value.
func (b *Buffer) WriteDescribed(d Described) error {
	b.b = append(b.b, TypeCodeDescribed)
	if err := b.WriteAny(d.Descriptor); err != nil {
		return err
	}
	return b.WriteAny(d.Value)
}

// WriteSymbolArray writes an array of symbols (sym8 elements when every
// symbol is shorter than 256 bytes, else sym32).
func (b *Buffer) WriteSymbolArray(v []Symbol) {
	writeVarArray(b, v, TypeCodeSym8, TypeCodeSym32)
}

// writeVarArray writes an array of strings or binaries, with 8-bit sizes
// when every element is shorter than 256 bytes.
func writeVarArray[T ~string | ~[]byte](b *Buffer, v []T, code8, code32 byte) {
	code := code8
	for _, e := range v {
		if len(e) > 255 {
			code = code32
			break
		}
	}
	a := b.BeginArray()
	b.b = append(b.b, code)
	for _, e := range v {
		if code == code8 {
			b.b = append(b.b, byte(len(e)))
		} else {
			b.b = binary.BigEndian.AppendUint32(b.b, uint32(len(e)))
		}
		b.b = append(b.b, e...)
	}
	a.End(len(v))
}

// WriteSymbolMap writes a symbol-keyed map (annotations, fields,
// filter-set). Entries are written in key order, so the encoding is
// deterministic; maps of up to 16 entries are sorted without allocating.
func (b *Buffer) WriteSymbolMap(m map[Symbol]any) error {
	var arr [16]Symbol
	keys := sortedKeys(arr[:0], m)
	w := b.BeginMap()
	for _, k := range keys {
		b.WriteSymbol(k)
		if err := b.WriteAny(m[k]); err != nil {
			return err
		}
	}
	w.End(len(m))
	return nil
}

// WriteStringMap writes a string-keyed map (application-properties), in
// key order like WriteSymbolMap.
func (b *Buffer) WriteStringMap(m map[string]any) error {
	var arr [16]string
	keys := sortedKeys(arr[:0], m)
	w := b.BeginMap()
	for _, k := range keys {
		b.WriteString(k)
		if err := b.WriteAny(m[k]); err != nil {
			return err
		}
	}
	w.End(len(m))
	return nil
}

// sortedKeys appends the keys of m to keys and sorts them (insertion sort:
// the maps here are small).
func sortedKeys[K ~string](keys []K, m map[K]any) []K {
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) > 16 {
		slices.Sort(keys)
		return keys
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// WriteMap writes an ordered Map.
func (b *Buffer) WriteMap(m Map) error {
	w := b.BeginMap()
	for _, e := range m {
		if err := b.WriteAny(e.Key); err != nil {
			return err
		}
		if err := b.WriteAny(e.Value); err != nil {
			return err
		}
	}
	w.End(len(m))
	return nil
}

// WriteList writes a list of values (list0, list8 or list32).
func (b *Buffer) WriteList(v []any) error {
	l := b.BeginList()
	for _, e := range v {
		if err := b.WriteAny(e); err != nil {
			return err
		}
		l.Next()
	}
	l.End()
	return nil
}

// WriteAny writes v using the Go mapping of the package documentation.
// int and uint are written as long and ulong. Values implementing
// Marshaler encode themselves.
//
// Long on purpose: one flat type switch, a case per Go type of the
// mapping, reads as the mapping's table; splitting it would scatter it.
func (b *Buffer) WriteAny(v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteNull()
	case bool:
		b.WriteBool(v)
	case uint8:
		b.WriteUbyte(v)
	case uint16:
		b.WriteUshort(v)
	case uint32:
		b.WriteUint(v)
	case uint64:
		b.WriteUlong(v)
	case uint:
		b.WriteUlong(uint64(v))
	case int8:
		b.WriteByte8(v)
	case int16:
		b.WriteShort(v)
	case int32:
		b.WriteInt(v)
	case int64:
		b.WriteLong(v)
	case int:
		b.WriteLong(int64(v))
	case float32:
		b.WriteFloat(v)
	case float64:
		b.WriteDouble(v)
	case Decimal32:
		b.b = append(append(b.b, TypeCodeDecimal32), v[:]...)
	case Decimal64:
		b.b = append(append(b.b, TypeCodeDecimal64), v[:]...)
	case Decimal128:
		b.b = append(append(b.b, TypeCodeDecimal128), v[:]...)
	case Char:
		b.WriteChar(v)
	case time.Time:
		b.WriteTimestamp(v)
	case UUID:
		b.WriteUUID(v)
	case []byte:
		b.WriteBinary(v)
	case string:
		b.WriteString(v)
	case Symbol:
		b.WriteSymbol(v)
	case []any:
		return b.WriteList(v)
	case Map:
		return b.WriteMap(v)
	case map[Symbol]any:
		return b.WriteSymbolMap(v)
	case map[string]any:
		return b.WriteStringMap(v)
	case map[any]any:
		// Written in Go map order: not deterministic.
		w := b.BeginMap()
		for k, e := range v {
			if err := b.WriteAny(k); err != nil {
				return err
			}
			if err := b.WriteAny(e); err != nil {
				return err
			}
		}
		w.End(len(v))
	case Described:
		return b.WriteDescribed(v)
	case *Described:
		if v == nil {
			b.WriteNull()
			return nil
		}
		return b.WriteDescribed(*v)
	case []Symbol:
		b.WriteSymbolArray(v)
	case []string:
		writeVarArray(b, v, TypeCodeStr8, TypeCodeStr32)
	case [][]byte:
		writeVarArray(b, v, TypeCodeVbin8, TypeCodeVbin32)
	case []UUID:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeUUID)
		for _, u := range v {
			b.b = append(b.b, u[:]...)
		}
		a.End(len(v))
	case []int64:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeLong)
		for _, n := range v {
			b.b = binary.BigEndian.AppendUint64(b.b, uint64(n))
		}
		a.End(len(v))
	case []int32:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeInt)
		for _, n := range v {
			b.b = binary.BigEndian.AppendUint32(b.b, uint32(n))
		}
		a.End(len(v))
	case []uint64:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeUlong)
		for _, n := range v {
			b.b = binary.BigEndian.AppendUint64(b.b, n)
		}
		a.End(len(v))
	case []uint32:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeUint)
		for _, n := range v {
			b.b = binary.BigEndian.AppendUint32(b.b, n)
		}
		a.End(len(v))
	case []float64:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeDouble)
		for _, n := range v {
			b.b = binary.BigEndian.AppendUint64(b.b, math.Float64bits(n))
		}
		a.End(len(v))
	case []bool:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeBool)
		for _, t := range v {
			if t {
				b.b = append(b.b, 1)
			} else {
				b.b = append(b.b, 0)
			}
		}
		a.End(len(v))
	case []time.Time:
		a := b.BeginArray()
		b.b = append(b.b, TypeCodeTimestamp)
		for _, t := range v {
			b.b = binary.BigEndian.AppendUint64(b.b, uint64(t.UnixMilli()))
		}
		a.End(len(v))
	case Array:
		return b.writeArray(v)
	case *Array:
		if v == nil {
			b.WriteNull()
			return nil
		}
		return b.writeArray(*v)
	case Marshaler:
		p, err := v.AppendAMQP(b.b)
		if err != nil {
			return err
		}
		b.b = p
	default:
		return fmt.Errorf("%w: %T", ErrUnsupported, v)
	}
	return nil
}

// ListWriter writes a list field by field, for the described lists of
// performatives and message sections. Write each present field with the
// Buffer's Write methods and call Next after it; call Null for an absent
// field. End drops trailing absent fields and picks list0, list8 or
// list32. A ListWriter lives on the caller's stack; it does not allocate.
//
//	l := b.BeginList()
//	b.WriteUint(handle); l.Next()
//	l.Null()                 // dropped if nothing present follows
//	l.End()
type ListWriter struct {
	b         *Buffer
	start     int // offset of the list constructor
	count     int // fields written so far
	lastEnd   int // buffer length after the last present field
	lastCount int // field count up to the last present field
}

// listHeader32 is the reserved list32 header: code, size(4), count(4).
const listHeader32 = 9

// BeginList starts a list at the end of the buffer.
func (b *Buffer) BeginList() ListWriter {
	start := len(b.b)
	b.b = append(b.b, TypeCodeList32, 0, 0, 0, 0, 0, 0, 0, 0)
	return ListWriter{b: b, start: start, lastEnd: start + listHeader32}
}

// Next records that a present field was just written.
func (l *ListWriter) Next() {
	l.count++
	l.lastEnd = len(l.b.b)
	l.lastCount = l.count
}

// Null writes an absent field. Trailing absent fields are dropped by End.
func (l *ListWriter) Null() {
	l.b.b = append(l.b.b, TypeCodeNull)
	l.count++
}

// ExplicitNull writes a null field that End keeps even when it is last.
func (l *ListWriter) ExplicitNull() {
	l.b.b = append(l.b.b, TypeCodeNull)
	l.Next()
}

// End finishes the list.
func (l *ListWriter) End() {
	b := l.b
	b.b = b.b[:l.lastEnd]
	n := l.lastCount
	body := l.lastEnd - (l.start + listHeader32)
	switch {
	case n == 0:
		b.b = append(b.b[:l.start], TypeCodeList0)
	case body+1 <= 255 && n <= 255:
		s := l.start
		b.b[s] = TypeCodeList8
		b.b[s+1] = byte(body + 1)
		b.b[s+2] = byte(n)
		copy(b.b[s+3:], b.b[s+listHeader32:])
		b.b = b.b[:len(b.b)-(listHeader32-3)]
	default:
		binary.BigEndian.PutUint32(b.b[l.start+1:], uint32(body+4))
		binary.BigEndian.PutUint32(b.b[l.start+5:], uint32(n))
	}
}

// CompoundWriter finishes a map or array whose items the caller writes
// after BeginMap or BeginArray. It picks the 8-bit form when it fits.
type CompoundWriter struct {
	b     *Buffer
	start int
	code8 byte
}

// BeginMap starts a map; write alternating keys and values, then call End
// with the number of key/value pairs.
func (b *Buffer) BeginMap() CompoundWriter {
	start := len(b.b)
	b.b = append(b.b, TypeCodeMap32, 0, 0, 0, 0, 0, 0, 0, 0)
	return CompoundWriter{b: b, start: start, code8: TypeCodeMap8}
}

// BeginArray starts an array; write the element constructor and the
// constructor-less elements, then call End with the element count.
func (b *Buffer) BeginArray() CompoundWriter {
	start := len(b.b)
	b.b = append(b.b, TypeCodeArray32, 0, 0, 0, 0, 0, 0, 0, 0)
	return CompoundWriter{b: b, start: start, code8: TypeCodeArray8}
}

// End finishes the map (n = pairs) or array (n = elements).
func (c CompoundWriter) End(n int) {
	b := c.b
	if c.code8 == TypeCodeMap8 {
		n *= 2
	}
	body := len(b.b) - (c.start + listHeader32)
	if body+1 <= 255 && n <= 255 {
		s := c.start
		b.b[s] = c.code8
		b.b[s+1] = byte(body + 1)
		b.b[s+2] = byte(n)
		copy(b.b[s+3:], b.b[s+listHeader32:])
		b.b = b.b[:len(b.b)-(listHeader32-3)]
		return
	}
	binary.BigEndian.PutUint32(b.b[c.start+1:], uint32(body+4))
	binary.BigEndian.PutUint32(b.b[c.start+5:], uint32(n))
}
