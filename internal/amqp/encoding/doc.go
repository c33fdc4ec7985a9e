// Package encoding is the AMQP 1.0 type system (OASIS AMQP 1.0, part 1):
// the self-describing binary encoding of primitive, described and
// composite values, and its mapping to Go types.
//
// # Wire format
//
// Every value starts with a constructor. A constructor is either a
// one-byte format code, or 0x00 followed by a descriptor value and then
// the format code of the described value:
//
//	primitive:   +------+--------------+
//	             | code |    data      |
//	             +------+--------------+
//
//	described:   +------+------------+------+--------------+
//	             | 0x00 | descriptor | code |    data      |
//	             +------+------------+------+--------------+
//	                     (usually 0x53 nn or 0x80 + 8 bytes)
//
// The upper nibble of the format code fixes the width of the data:
//
//	0x4_  zero bytes (null, true, false, uint0, ulong0, list0)
//	0x5_  one byte           0x6_  two bytes
//	0x7_  four bytes         0x8_  eight bytes         0x9_  sixteen bytes
//	0xa_  variable: size(1) data...     0xb_  variable: size(4) data...
//	0xc_  compound: size(1) count(1) items...
//	0xd_  compound: size(4) count(4) items...
//	0xe_  array:    size(1) count(1) element-constructor items...
//	0xf_  array:    size(4) count(4) element-constructor items...
//
// Sizes of compound and array values count the bytes after the size
// field, including the count field. Multi-byte numbers are big-endian.
// An array carries one constructor for all its elements; the elements
// themselves are written without one.
//
// # Go mapping
//
//	AMQP                    Go
//	null                    nil
//	boolean                 bool
//	ubyte/ushort/uint/ulong uint8/uint16/uint32/uint64
//	byte/short/int/long     int8/int16/int32/int64
//	float/double            float32/float64
//	decimal32/64/128        Decimal32/Decimal64/Decimal128 (opaque bytes)
//	char                    Char
//	timestamp               time.Time (UTC, millisecond precision)
//	uuid                    UUID (RFC 4122 byte order)
//	binary                  []byte
//	string                  string
//	symbol                  Symbol
//	list                    []any
//	map                     Map (ordered; any key type). On encode also
//	                        map[Symbol]any, map[string]any, map[any]any
//	array                   []Symbol, []string, []UUID, []int64, []int32,
//	                        []uint64, []uint32, []time.Time, []bool,
//	                        []float64, [][]byte, or Array for anything else
//	described               Described
//
// # Writing and reading
//
// Buffer appends encoded values to a byte slice that callers reuse, so
// encoding does not allocate per value. Reader walks encoded input with a
// cursor. Decoded []byte values (binary, and the raw bytes returned by
// ReadRaw) alias the input: callers that keep them past the life of the
// input must copy. Every decoder returns an error, never panics, on
// truncated or malformed input; a declared size larger than the remaining
// input is an error, and nesting is limited to MaxDepth.
//
// ListWriter and ReadListHeader are the fast paths for the described
// lists of the frames package: fields are written in order and trailing
// null fields are dropped, as the specification allows.
package encoding
