package encoding

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
)

// Format codes of the AMQP 1.0 primitive types (part 1, section 1.6).
const (
	TypeCodeDescribed byte = 0x00 // descriptor constructor

	TypeCodeNull      byte = 0x40
	TypeCodeBoolTrue  byte = 0x41
	TypeCodeBoolFalse byte = 0x42
	TypeCodeBool      byte = 0x56

	TypeCodeUbyte      byte = 0x50
	TypeCodeUshort     byte = 0x60
	TypeCodeUint       byte = 0x70
	TypeCodeSmallUint  byte = 0x52
	TypeCodeUint0      byte = 0x43
	TypeCodeUlong      byte = 0x80
	TypeCodeSmallUlong byte = 0x53
	TypeCodeUlong0     byte = 0x44

	TypeCodeByte      byte = 0x51
	TypeCodeShort     byte = 0x61
	TypeCodeInt       byte = 0x71
	TypeCodeSmallInt  byte = 0x54
	TypeCodeLong      byte = 0x81
	TypeCodeSmallLong byte = 0x55

	TypeCodeFloat  byte = 0x72
	TypeCodeDouble byte = 0x82

	TypeCodeDecimal32  byte = 0x74
	TypeCodeDecimal64  byte = 0x84
	TypeCodeDecimal128 byte = 0x94

	TypeCodeChar      byte = 0x73
	TypeCodeTimestamp byte = 0x83
	TypeCodeUUID      byte = 0x98

	TypeCodeVbin8  byte = 0xa0
	TypeCodeVbin32 byte = 0xb0
	TypeCodeStr8   byte = 0xa1
	TypeCodeStr32  byte = 0xb1
	TypeCodeSym8   byte = 0xa3
	TypeCodeSym32  byte = 0xb3

	TypeCodeList0  byte = 0x45
	TypeCodeList8  byte = 0xc0
	TypeCodeList32 byte = 0xd0
	TypeCodeMap8   byte = 0xc1
	TypeCodeMap32  byte = 0xd1

	TypeCodeArray8  byte = 0xe0
	TypeCodeArray32 byte = 0xf0
)

// Decoder limits.
const (
	// MaxDepth bounds the nesting of lists, maps, arrays and described
	// values that Reader accepts.
	MaxDepth = 64
	// MaxZeroWidthElements bounds the element count of an array whose
	// elements take no bytes (for example an array of null), which would
	// otherwise let a few input bytes declare billions of elements.
	MaxZeroWidthElements = 1 << 16
)

// Errors returned by Reader. Decoders wrap them with context; test with
// errors.Is.
var (
	ErrTruncated   = errors.New("encoding: truncated input")
	ErrInvalidCode = errors.New("encoding: invalid format code")
	ErrInvalidSize = errors.New("encoding: invalid size or count")
	ErrTooDeep     = errors.New("encoding: nesting too deep")
	ErrInvalid     = errors.New("encoding: invalid value")
	ErrUnsupported = errors.New("encoding: unsupported Go type")
)

// TypeError reports a value whose format code is not one the caller can
// accept.
type TypeError struct {
	Code byte   // the format code found
	Want string // what the caller wanted, e.g. "uint"
}

func (e *TypeError) Error() string {
	return fmt.Sprintf("encoding: got %s (0x%02x), want %s", CodeName(e.Code), e.Code, e.Want)
}

// Symbol is an AMQP symbol: a short ASCII name from a controlled
// vocabulary (annotation keys, capabilities, error conditions). Symbol,
// UUID and Char are also the property value types of Service Bus messages
// (package message names them as aliases).
type Symbol string

// UUID is an AMQP uuid in RFC 4122 byte order.
type UUID [16]byte

// String returns the canonical 8-4-4-4-12 hex form.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// Char is an AMQP char: a single Unicode code point, sent as UTF-32BE.
type Char rune

// Decimal32 is an IEEE 754-2008 decimal32 value kept as its encoded bytes.
type Decimal32 [4]byte

// Decimal64 is an IEEE 754-2008 decimal64 value kept as its encoded bytes.
type Decimal64 [8]byte

// Decimal128 is an IEEE 754-2008 decimal128 value kept as its encoded bytes.
type Decimal128 [16]byte

// Described is a value annotated with a descriptor, usually a ulong code
// (uint64) or a Symbol.
type Described struct {
	Descriptor any
	Value      any
}

// MapEntry is one key/value pair of a Map.
type MapEntry struct {
	Key   any
	Value any
}

// Map is an AMQP map that keeps its entries in wire order and allows keys
// of any AMQP type, including binary. Service Bus maps are small, so
// lookups are linear.
type Map []MapEntry

// Get returns the value for key. A string key also matches a Symbol key
// with the same text and vice versa, because peers disagree on which one
// they send (for example the info map of an error). Binary keys compare by
// content.
func (m Map) Get(key any) (any, bool) {
	i := m.index(key)
	if i < 0 {
		return nil, false
	}
	return m[i].Value, true
}

// Set replaces the value for key (matched as in Get) or appends a new
// entry.
func (m *Map) Set(key, value any) {
	if i := m.index(key); i >= 0 {
		(*m)[i].Value = value
		return
	}
	*m = append(*m, MapEntry{key, value})
}

func (m Map) index(key any) int {
	switch k := key.(type) {
	case string:
		return m.indexName(k)
	case Symbol:
		return m.indexName(string(k))
	case []byte:
		for i, e := range m {
			if b, ok := e.Key.([]byte); ok && bytes.Equal(b, k) {
				return i
			}
		}
		return -1
	}
	if !isComparable(key) {
		return -1
	}
	for i, e := range m {
		if isComparable(e.Key) && e.Key == key {
			return i
		}
	}
	return -1
}

func (m Map) indexName(name string) int {
	for i, e := range m {
		switch k := e.Key.(type) {
		case string:
			if k == name {
				return i
			}
		case Symbol:
			if string(k) == name {
				return i
			}
		}
	}
	return -1
}

// isComparable reports whether v can be compared with == without panicking.
func isComparable(v any) bool {
	switch v.(type) {
	case nil, bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64,
		float32, float64, string, Symbol, UUID, Char, Decimal32, Decimal64, Decimal128:
		return true
	}
	return false
}

// Array is an AMQP array whose element type has no dedicated Go slice
// type here, or whose elements are described. Code is the format code of
// the elements (for example TypeCodeList32); Descriptor is non-nil when
// the elements are described values sharing that descriptor, in which
// case Elems holds the undescribed element values.
//
// When encoding, Code may be 0 to let the encoder pick the widest code of
// the first element's type.
type Array struct {
	Descriptor any
	Code       byte
	Elems      []any
}

// Marshaler is implemented by types that encode themselves as one AMQP
// value, such as the composite types of the frames package: AppendAMQP
// appends the encoding to dst. Buffer.WriteAny uses it.
type Marshaler interface {
	AppendAMQP(dst []byte) ([]byte, error)
}

// Unmarshaler is implemented by types that decode themselves from one
// AMQP value.
type Unmarshaler interface {
	UnmarshalAMQP(r *Reader) error
}

// CodeName returns the spec name of a format code, for messages.
func CodeName(code byte) string {
	switch code {
	case TypeCodeDescribed:
		return "described"
	case TypeCodeNull:
		return "null"
	case TypeCodeBoolTrue, TypeCodeBoolFalse, TypeCodeBool:
		return "boolean"
	case TypeCodeUbyte:
		return "ubyte"
	case TypeCodeUshort:
		return "ushort"
	case TypeCodeUint, TypeCodeSmallUint, TypeCodeUint0:
		return "uint"
	case TypeCodeUlong, TypeCodeSmallUlong, TypeCodeUlong0:
		return "ulong"
	case TypeCodeByte:
		return "byte"
	case TypeCodeShort:
		return "short"
	case TypeCodeInt, TypeCodeSmallInt:
		return "int"
	case TypeCodeLong, TypeCodeSmallLong:
		return "long"
	case TypeCodeFloat:
		return "float"
	case TypeCodeDouble:
		return "double"
	case TypeCodeDecimal32:
		return "decimal32"
	case TypeCodeDecimal64:
		return "decimal64"
	case TypeCodeDecimal128:
		return "decimal128"
	case TypeCodeChar:
		return "char"
	case TypeCodeTimestamp:
		return "timestamp"
	case TypeCodeUUID:
		return "uuid"
	case TypeCodeVbin8, TypeCodeVbin32:
		return "binary"
	case TypeCodeStr8, TypeCodeStr32:
		return "string"
	case TypeCodeSym8, TypeCodeSym32:
		return "symbol"
	case TypeCodeList0, TypeCodeList8, TypeCodeList32:
		return "list"
	case TypeCodeMap8, TypeCodeMap32:
		return "map"
	case TypeCodeArray8, TypeCodeArray32:
		return "array"
	}
	return "unknown"
}

// fixedWidth returns the data width of a fixed-width format code, or -1
// for variable-width and unknown codes.
func fixedWidth(code byte) int {
	switch code {
	case TypeCodeNull, TypeCodeBoolTrue, TypeCodeBoolFalse, TypeCodeUint0, TypeCodeUlong0, TypeCodeList0:
		return 0
	case TypeCodeBool, TypeCodeUbyte, TypeCodeSmallUint, TypeCodeSmallUlong, TypeCodeByte, TypeCodeSmallInt, TypeCodeSmallLong:
		return 1
	case TypeCodeUshort, TypeCodeShort:
		return 2
	case TypeCodeUint, TypeCodeInt, TypeCodeFloat, TypeCodeDecimal32, TypeCodeChar:
		return 4
	case TypeCodeUlong, TypeCodeLong, TypeCodeDouble, TypeCodeDecimal64, TypeCodeTimestamp:
		return 8
	case TypeCodeDecimal128, TypeCodeUUID:
		return 16
	}
	return -1
}

// validCode reports whether code is a primitive format code of the spec.
func validCode(code byte) bool {
	if fixedWidth(code) >= 0 {
		return true
	}
	switch code {
	case TypeCodeVbin8, TypeCodeVbin32, TypeCodeStr8, TypeCodeStr32, TypeCodeSym8, TypeCodeSym32,
		TypeCodeList8, TypeCodeList32, TypeCodeMap8, TypeCodeMap32, TypeCodeArray8, TypeCodeArray32:
		return true
	}
	return false
}
