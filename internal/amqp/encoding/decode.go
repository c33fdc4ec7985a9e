package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Reader decodes AMQP values from a byte slice with a cursor. The zero
// value reads nothing; call Reset. Decoded []byte values alias the input.
type Reader struct {
	b     []byte
	off   int
	depth int
}

// NewReader returns a Reader over data.
func NewReader(data []byte) *Reader { return &Reader{b: data} }

// Reset makes the Reader read data from the start.
func (r *Reader) Reset(data []byte) {
	r.b = data
	r.off = 0
	r.depth = 0
}

// Len returns the number of unread bytes.
func (r *Reader) Len() int { return len(r.b) - r.off }

// Offset returns the cursor position within the input.
func (r *Reader) Offset() int { return r.off }

// Remaining returns the unread input.
func (r *Reader) Remaining() []byte { return r.b[r.off:] }

// Input returns the whole input given to Reset.
func (r *Reader) Input() []byte { return r.b }

// Seek moves the cursor to off, which must lie within the input.
func (r *Reader) Seek(off int) error {
	if off < 0 || off > len(r.b) {
		return ErrInvalidSize
	}
	r.off = off
	return nil
}

// PeekCode returns the next format code without consuming it. For a
// described value it returns TypeCodeDescribed.
func (r *Reader) PeekCode() (byte, error) {
	if r.off >= len(r.b) {
		return 0, ErrTruncated
	}
	return r.b[r.off], nil
}

// ReadNull consumes a null and reports true if the next value is null;
// otherwise it consumes nothing and reports false.
func (r *Reader) ReadNull() bool {
	if r.off < len(r.b) && r.b[r.off] == TypeCodeNull {
		r.off++
		return true
	}
	return false
}

func (r *Reader) next(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, ErrTruncated
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p, nil
}

func (r *Reader) code() (byte, error) {
	if r.off >= len(r.b) {
		return 0, ErrTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *Reader) u8() (uint8, error) {
	p, err := r.next(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

func (r *Reader) u16() (uint16, error) {
	p, err := r.next(2)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint16(p), nil
}

func (r *Reader) u32() (uint32, error) {
	p, err := r.next(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(p), nil
}

func (r *Reader) u64() (uint64, error) {
	p, err := r.next(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(p), nil
}

// typeErr un-reads the constructor and returns a TypeError.
func (r *Reader) typeErr(code byte, want string) error {
	r.off--
	return &TypeError{Code: code, Want: want}
}

// ReadBool reads a boolean.
func (r *Reader) ReadBool() (bool, error) {
	c, err := r.code()
	if err != nil {
		return false, err
	}
	return r.boolBody(c)
}

func (r *Reader) boolBody(c byte) (bool, error) {
	switch c {
	case TypeCodeBoolTrue:
		return true, nil
	case TypeCodeBoolFalse:
		return false, nil
	case TypeCodeBool:
		v, err := r.u8()
		if err != nil {
			return false, err
		}
		switch v {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
		return false, fmt.Errorf("%w: boolean byte 0x%02x", ErrInvalid, v)
	}
	return false, r.typeErr(c, "boolean")
}

// ReadUint64 reads any unsigned integer (ubyte, ushort, uint, ulong in all
// their forms) as a uint64.
func (r *Reader) ReadUint64() (uint64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch c {
	case TypeCodeUlong0, TypeCodeUint0:
		return 0, nil
	case TypeCodeSmallUlong, TypeCodeSmallUint, TypeCodeUbyte:
		v, err := r.u8()
		return uint64(v), err
	case TypeCodeUshort:
		v, err := r.u16()
		return uint64(v), err
	case TypeCodeUint:
		v, err := r.u32()
		return uint64(v), err
	case TypeCodeUlong:
		return r.u64()
	}
	return 0, r.typeErr(c, "ulong")
}

// ReadUint32 reads a uint, or a narrower unsigned integer (ubyte, ushort),
// as a uint32.
func (r *Reader) ReadUint32() (uint32, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch c {
	case TypeCodeUint0:
		return 0, nil
	case TypeCodeSmallUint, TypeCodeUbyte:
		v, err := r.u8()
		return uint32(v), err
	case TypeCodeUshort:
		v, err := r.u16()
		return uint32(v), err
	case TypeCodeUint:
		return r.u32()
	}
	return 0, r.typeErr(c, "uint")
}

// ReadUint16 reads a ushort or ubyte.
func (r *Reader) ReadUint16() (uint16, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch c {
	case TypeCodeUbyte:
		v, err := r.u8()
		return uint16(v), err
	case TypeCodeUshort:
		return r.u16()
	}
	return 0, r.typeErr(c, "ushort")
}

// ReadUint8 reads a ubyte.
func (r *Reader) ReadUint8() (uint8, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	if c != TypeCodeUbyte {
		return 0, r.typeErr(c, "ubyte")
	}
	return r.u8()
}

// ReadInt64 reads any signed integer (byte, short, int, long in all their
// forms) as an int64.
func (r *Reader) ReadInt64() (int64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch c {
	case TypeCodeByte, TypeCodeSmallInt, TypeCodeSmallLong:
		v, err := r.u8()
		return int64(int8(v)), err
	case TypeCodeShort:
		v, err := r.u16()
		return int64(int16(v)), err
	case TypeCodeInt:
		v, err := r.u32()
		return int64(int32(v)), err
	case TypeCodeLong:
		v, err := r.u64()
		return int64(v), err
	}
	return 0, r.typeErr(c, "long")
}

// ReadInt32 reads an int, or a narrower signed integer, as an int32.
func (r *Reader) ReadInt32() (int32, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch c {
	case TypeCodeByte, TypeCodeSmallInt:
		v, err := r.u8()
		return int32(int8(v)), err
	case TypeCodeShort:
		v, err := r.u16()
		return int32(int16(v)), err
	case TypeCodeInt:
		v, err := r.u32()
		return int32(v), err
	}
	return 0, r.typeErr(c, "int")
}

// ReadFloat64 reads a double, or a float widened to float64.
func (r *Reader) ReadFloat64() (float64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch c {
	case TypeCodeFloat:
		v, err := r.u32()
		return float64(math.Float32frombits(v)), err
	case TypeCodeDouble:
		v, err := r.u64()
		return math.Float64frombits(v), err
	}
	return 0, r.typeErr(c, "double")
}

// ReadTimestamp reads a timestamp as a UTC time.Time.
func (r *Reader) ReadTimestamp() (time.Time, error) {
	c, err := r.code()
	if err != nil {
		return time.Time{}, err
	}
	if c != TypeCodeTimestamp {
		return time.Time{}, r.typeErr(c, "timestamp")
	}
	v, err := r.u64()
	return time.UnixMilli(int64(v)).UTC(), err
}

// ReadUUID reads a uuid.
func (r *Reader) ReadUUID() (UUID, error) {
	var u UUID
	c, err := r.code()
	if err != nil {
		return u, err
	}
	if c != TypeCodeUUID {
		return u, r.typeErr(c, "uuid")
	}
	p, err := r.next(16)
	if err != nil {
		return u, err
	}
	copy(u[:], p)
	return u, nil
}

// variable reads the size of a variable-width value and returns its data.
func (r *Reader) variable(c, code8 byte) ([]byte, error) {
	var n int
	if c == code8 {
		v, err := r.u8()
		if err != nil {
			return nil, err
		}
		n = int(v)
	} else {
		v, err := r.u32()
		if err != nil {
			return nil, err
		}
		if uint64(v) > uint64(r.Len()) {
			return nil, fmt.Errorf("%w: %s of %d bytes, %d left", ErrTruncated, CodeName(c), v, r.Len())
		}
		n = int(v)
	}
	return r.next(n)
}

// ReadBinary reads binary data. The result aliases the input.
func (r *Reader) ReadBinary() ([]byte, error) {
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	if c != TypeCodeVbin8 && c != TypeCodeVbin32 {
		return nil, r.typeErr(c, "binary")
	}
	return r.variable(c, TypeCodeVbin8)
}

// ReadString reads a string.
func (r *Reader) ReadString() (string, error) {
	c, err := r.code()
	if err != nil {
		return "", err
	}
	if c != TypeCodeStr8 && c != TypeCodeStr32 {
		return "", r.typeErr(c, "string")
	}
	p, err := r.variable(c, TypeCodeStr8)
	return string(p), err
}

// ReadSymbol reads a symbol.
func (r *Reader) ReadSymbol() (Symbol, error) {
	c, err := r.code()
	if err != nil {
		return "", err
	}
	if c != TypeCodeSym8 && c != TypeCodeSym32 {
		return "", r.typeErr(c, "symbol")
	}
	p, err := r.variable(c, TypeCodeSym8)
	return Symbol(p), err
}

// ReadSymbols reads a field declared multiple="true" of type symbol: an
// array of symbols, or a single symbol, as the spec allows for a
// one-element value.
func (r *Reader) ReadSymbols() ([]Symbol, error) {
	c, err := r.PeekCode()
	if err != nil {
		return nil, err
	}
	if c == TypeCodeSym8 || c == TypeCodeSym32 {
		s, err := r.ReadSymbol()
		if err != nil {
			return nil, err
		}
		return []Symbol{s}, nil
	}
	if c != TypeCodeArray8 && c != TypeCodeArray32 {
		r.off++
		return nil, r.typeErr(c, "symbol array")
	}
	v, err := r.ReadAny()
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case []Symbol:
		return v, nil
	case Array:
		if len(v.Elems) == 0 && v.Descriptor == nil {
			return []Symbol{}, nil
		}
	}
	return nil, fmt.Errorf("%w: array of %T, want symbols", ErrInvalid, v)
}

// ReadDescriptor reads the descriptor of a described value: 0x00 and a
// ulong code or a symbol name. Exactly one of code and name is set. The
// described value itself follows.
func (r *Reader) ReadDescriptor() (code uint64, name Symbol, err error) {
	c, err := r.code()
	if err != nil {
		return 0, "", err
	}
	if c != TypeCodeDescribed {
		return 0, "", r.typeErr(c, "described value")
	}
	c, err = r.PeekCode()
	if err != nil {
		return 0, "", err
	}
	if c == TypeCodeSym8 || c == TypeCodeSym32 {
		name, err = r.ReadSymbol()
		return 0, name, err
	}
	code, err = r.ReadUint64()
	return code, "", err
}

// PeekDescriptor is ReadDescriptor without consuming anything.
func (r *Reader) PeekDescriptor() (code uint64, name Symbol, err error) {
	off := r.off
	code, name, err = r.ReadDescriptor()
	r.off = off
	return code, name, err
}

// compoundHeader reads the size and count of a list, map or array whose
// constructor c was consumed, and returns the offset at which it ends.
func (r *Reader) compoundHeader(c, code8 byte) (count, end int, err error) {
	if c == code8 {
		p, err := r.next(2)
		if err != nil {
			return 0, 0, err
		}
		size, n := int(p[0]), int(p[1])
		if size < 1 || size-1 > r.Len() {
			return 0, 0, fmt.Errorf("%w: %s size %d, %d bytes left", ErrInvalidSize, CodeName(c), size, r.Len()+1)
		}
		return n, r.off + size - 1, nil
	}
	p, err := r.next(8)
	if err != nil {
		return 0, 0, err
	}
	size, n := binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])
	if size < 4 || uint64(size-4) > uint64(r.Len()) {
		return 0, 0, fmt.Errorf("%w: %s size %d, %d bytes left", ErrInvalidSize, CodeName(c), size, r.Len()+4)
	}
	return int(n), r.off + int(size) - 4, nil
}

// ReadListHeader reads the constructor, size and count of a list and
// returns the element count and the offset at which the list ends. Read
// exactly count values, then call EndCompound(end).
func (r *Reader) ReadListHeader() (count, end int, err error) {
	c, err := r.code()
	if err != nil {
		return 0, 0, err
	}
	switch c {
	case TypeCodeList0:
		return 0, r.off, nil
	case TypeCodeList8, TypeCodeList32:
		return r.listHeader(c)
	}
	return 0, 0, r.typeErr(c, "list")
}

func (r *Reader) listHeader(c byte) (count, end int, err error) {
	count, end, err = r.compoundHeader(c, TypeCodeList8)
	if err == nil && count > end-r.off {
		err = fmt.Errorf("%w: list of %d elements in %d bytes", ErrInvalidSize, count, end-r.off)
	}
	return count, end, err
}

// ReadMapHeader reads the constructor, size and count of a map and
// returns the number of key/value pairs and the offset at which the map
// ends. Read 2*pairs values, then call EndCompound(end).
func (r *Reader) ReadMapHeader() (pairs, end int, err error) {
	c, err := r.code()
	if err != nil {
		return 0, 0, err
	}
	if c != TypeCodeMap8 && c != TypeCodeMap32 {
		return 0, 0, r.typeErr(c, "map")
	}
	return r.mapHeader(c)
}

func (r *Reader) mapHeader(c byte) (pairs, end int, err error) {
	count, end, err := r.compoundHeader(c, TypeCodeMap8)
	if err != nil {
		return 0, 0, err
	}
	if count%2 != 0 || count > end-r.off {
		return 0, 0, fmt.Errorf("%w: map with %d elements in %d bytes", ErrInvalidSize, count, end-r.off)
	}
	return count / 2, end, nil
}

// EndCompound checks that the values of a list or map ended exactly at
// end, as its declared size said.
func (r *Reader) EndCompound(end int) error {
	if r.off != end {
		return fmt.Errorf("%w: compound value ends at %d, size says %d", ErrInvalidSize, r.off, end)
	}
	return nil
}

// Skip consumes one value without decoding it.
func (r *Reader) Skip() error {
	_, err := r.ReadRaw()
	return err
}

// ReadRaw consumes one value (constructor included, described values
// included) and returns its encoded bytes, aliasing the input. Compound
// values are checked only for their declared size, not their contents.
func (r *Reader) ReadRaw() ([]byte, error) {
	start := r.off
	if err := r.skip(); err != nil {
		r.off = start
		return nil, err
	}
	return r.b[start:r.off:r.off], nil
}

func (r *Reader) skip() error {
	c, err := r.code()
	if err != nil {
		return err
	}
	if c == TypeCodeDescribed {
		if r.depth >= MaxDepth {
			return ErrTooDeep
		}
		r.depth++
		defer func() { r.depth-- }()
		if err := r.skip(); err != nil {
			return err
		}
		return r.skip()
	}
	if w := fixedWidth(c); w >= 0 {
		_, err := r.next(w)
		return err
	}
	switch c {
	case TypeCodeVbin8, TypeCodeStr8, TypeCodeSym8:
		_, err = r.variable(c, c)
		return err
	case TypeCodeVbin32, TypeCodeStr32, TypeCodeSym32:
		_, err = r.variable(c, 0)
		return err
	case TypeCodeList8, TypeCodeMap8, TypeCodeArray8:
		_, end, err := r.compoundHeader(c, c)
		if err != nil {
			return err
		}
		r.off = end
		return nil
	case TypeCodeList32, TypeCodeMap32, TypeCodeArray32:
		_, end, err := r.compoundHeader(c, 0)
		if err != nil {
			return err
		}
		r.off = end
		return nil
	}
	r.off--
	return fmt.Errorf("%w: 0x%02x at offset %d", ErrInvalidCode, c, r.off)
}

// ReadAny decodes one value into the Go mapping of the package
// documentation.
func (r *Reader) ReadAny() (any, error) {
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	return r.body(c)
}

// body decodes the data of a value whose constructor c was consumed.
// Long on purpose: a flat switch with a case per type code, the
// decoding half of WriteAny's table.
func (r *Reader) body(c byte) (any, error) {
	switch c {
	case TypeCodeDescribed:
		if r.depth >= MaxDepth {
			return nil, ErrTooDeep
		}
		r.depth++
		defer func() { r.depth-- }()
		d, err := r.ReadAny()
		if err != nil {
			return nil, err
		}
		if _, ok := d.(Described); ok {
			return nil, fmt.Errorf("%w: described descriptor", ErrInvalid)
		}
		v, err := r.ReadAny()
		if err != nil {
			return nil, err
		}
		return Described{Descriptor: d, Value: v}, nil
	case TypeCodeNull:
		return nil, nil
	case TypeCodeBoolTrue, TypeCodeBoolFalse, TypeCodeBool:
		return r.boolBody(c)
	case TypeCodeUbyte:
		return r.u8()
	case TypeCodeUshort:
		return r.u16()
	case TypeCodeUint0:
		return uint32(0), nil
	case TypeCodeSmallUint:
		v, err := r.u8()
		return uint32(v), err
	case TypeCodeUint:
		return r.u32()
	case TypeCodeUlong0:
		return uint64(0), nil
	case TypeCodeSmallUlong:
		v, err := r.u8()
		return uint64(v), err
	case TypeCodeUlong:
		return r.u64()
	case TypeCodeByte:
		v, err := r.u8()
		return int8(v), err
	case TypeCodeShort:
		v, err := r.u16()
		return int16(v), err
	case TypeCodeSmallInt:
		v, err := r.u8()
		return int32(int8(v)), err
	case TypeCodeInt:
		v, err := r.u32()
		return int32(v), err
	case TypeCodeSmallLong:
		v, err := r.u8()
		return int64(int8(v)), err
	case TypeCodeLong:
		v, err := r.u64()
		return int64(v), err
	case TypeCodeFloat:
		v, err := r.u32()
		return math.Float32frombits(v), err
	case TypeCodeDouble:
		v, err := r.u64()
		return math.Float64frombits(v), err
	case TypeCodeDecimal32:
		var d Decimal32
		p, err := r.next(4)
		copy(d[:], p)
		return d, err
	case TypeCodeDecimal64:
		var d Decimal64
		p, err := r.next(8)
		copy(d[:], p)
		return d, err
	case TypeCodeDecimal128:
		var d Decimal128
		p, err := r.next(16)
		copy(d[:], p)
		return d, err
	case TypeCodeChar:
		v, err := r.u32()
		return Char(v), err
	case TypeCodeTimestamp:
		v, err := r.u64()
		return time.UnixMilli(int64(v)).UTC(), err
	case TypeCodeUUID:
		var u UUID
		p, err := r.next(16)
		copy(u[:], p)
		return u, err
	case TypeCodeVbin8:
		return r.variable(c, TypeCodeVbin8)
	case TypeCodeVbin32:
		return r.variable(c, TypeCodeVbin8)
	case TypeCodeStr8, TypeCodeStr32:
		p, err := r.variable(c, TypeCodeStr8)
		return string(p), err
	case TypeCodeSym8, TypeCodeSym32:
		p, err := r.variable(c, TypeCodeSym8)
		return Symbol(p), err
	case TypeCodeList0:
		return []any(nil), nil
	case TypeCodeList8, TypeCodeList32:
		return r.readList(c)
	case TypeCodeMap8, TypeCodeMap32:
		return r.readMap(c)
	case TypeCodeArray8, TypeCodeArray32:
		return r.readArray(c)
	}
	r.off--
	return nil, fmt.Errorf("%w: 0x%02x at offset %d", ErrInvalidCode, c, r.off)
}

func (r *Reader) enter() error {
	if r.depth >= MaxDepth {
		return ErrTooDeep
	}
	r.depth++
	return nil
}

func (r *Reader) readList(c byte) (any, error) {
	n, end, err := r.listHeader(c)
	if err != nil {
		return nil, err
	}
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	l := make([]any, n)
	for i := range l {
		if l[i], err = r.ReadAny(); err != nil {
			return nil, err
		}
	}
	return l, r.EndCompound(end)
}

func (r *Reader) readMap(c byte) (any, error) {
	n, end, err := r.mapHeader(c)
	if err != nil {
		return nil, err
	}
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	m := make(Map, n)
	for i := range m {
		if m[i].Key, err = r.ReadAny(); err != nil {
			return nil, err
		}
		if m[i].Value, err = r.ReadAny(); err != nil {
			return nil, err
		}
	}
	return m, r.EndCompound(end)
}

// ReadSymbolMap reads a map whose keys are symbols (annotations, fields,
// filter-set). String keys are accepted and converted, since some peers
// send them; any other key type is an error. Null reads as a nil map.
//
// Not inlined: a caller in another package would then call the generic
// readTextKeyMap itself, and escape analysis, which cannot see through that
// call, would move the caller's Reader to the heap (one allocation per
// frame for the frame parser).
//
//go:noinline
func (r *Reader) ReadSymbolMap() (map[Symbol]any, error) {
	return readTextKeyMap[Symbol](r, "symbol map key")
}

// ReadAnnotations reads a map whose keys are symbols, as ReadSymbolMap
// does, into a map with string keys (for a caller that keeps annotations
// by name). Not inlined, as ReadSymbolMap.
//
//go:noinline
func (r *Reader) ReadAnnotations() (map[string]any, error) {
	return readTextKeyMap[string](r, "symbol map key")
}

// ReadStringMap reads a map whose keys are strings
// (application-properties). Symbol keys are accepted and converted; any
// other key type is an error. Null reads as a nil map. Not inlined, as
// ReadSymbolMap.
//
//go:noinline
func (r *Reader) ReadStringMap() (map[string]any, error) {
	return readTextKeyMap[string](r, "string map key")
}

// readTextKeyMap reads a map whose keys are text, symbols or strings
// alike, into a map keyed by K. want names the expected key in errors.
func readTextKeyMap[K ~string](r *Reader, want string) (map[K]any, error) {
	if r.ReadNull() {
		return nil, nil
	}
	n, end, err := r.ReadMapHeader()
	if err != nil {
		return nil, err
	}
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	m := make(map[K]any, n)
	for range n {
		c, err := r.PeekCode()
		if err != nil {
			return nil, err
		}
		var k string
		switch c {
		case TypeCodeStr8, TypeCodeStr32:
			k, err = r.ReadString()
		case TypeCodeSym8, TypeCodeSym32:
			var s Symbol
			s, err = r.ReadSymbol()
			k = string(s)
		default:
			return nil, &TypeError{Code: c, Want: want}
		}
		if err != nil {
			return nil, err
		}
		if m[K(k)], err = r.ReadAny(); err != nil {
			return nil, err
		}
	}
	return m, r.EndCompound(end)
}

// ReadMap reads a map into an ordered Map. Null reads as nil.
func (r *Reader) ReadMap() (Map, error) {
	if r.ReadNull() {
		return nil, nil
	}
	c, err := r.PeekCode()
	if err != nil {
		return nil, err
	}
	if c != TypeCodeMap8 && c != TypeCodeMap32 {
		return nil, &TypeError{Code: c, Want: "map"}
	}
	r.off++
	v, err := r.readMap(c)
	if err != nil {
		return nil, err
	}
	return v.(Map), nil
}
