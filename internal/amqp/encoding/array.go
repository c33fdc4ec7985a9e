package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Arrays: one constructor shared by all elements, which are written
// without one (part 1 section 1.6.3 and 1.6.24).

func (r *Reader) readArray(c byte) (any, error) {
	code8 := TypeCodeArray8
	if c == TypeCodeArray32 {
		code8 = 0
	}
	n, end, err := r.compoundHeader(c, code8)
	if err != nil {
		return nil, err
	}
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	// The element constructor, possibly described.
	var desc any
	ec, err := r.code()
	if err != nil {
		return nil, err
	}
	if ec == TypeCodeDescribed {
		if desc, err = r.ReadAny(); err != nil {
			return nil, err
		}
		if _, ok := desc.(Described); ok {
			return nil, fmt.Errorf("%w: described descriptor", ErrInvalid)
		}
		if ec, err = r.code(); err != nil {
			return nil, err
		}
	}
	if !validCode(ec) || ec == TypeCodeDescribed {
		return nil, fmt.Errorf("%w: array element code 0x%02x", ErrInvalidCode, ec)
	}
	if r.off > end {
		return nil, fmt.Errorf("%w: array constructor overruns its size", ErrInvalidSize)
	}
	avail := end - r.off
	if w := fixedWidth(ec); w == 0 {
		if n > MaxZeroWidthElements {
			return nil, fmt.Errorf("%w: %d zero-width array elements", ErrInvalidSize, n)
		}
	} else if w > 0 {
		if n > avail/w {
			return nil, fmt.Errorf("%w: %d elements of %d bytes in %d bytes", ErrInvalidSize, n, w, avail)
		}
	} else if n > avail {
		return nil, fmt.Errorf("%w: %d elements in %d bytes", ErrInvalidSize, n, avail)
	}
	// Restrict reads to the array's declared extent.
	saved := r.b
	r.b = r.b[:end]
	v, err := r.arrayElems(desc, ec, n)
	r.b = saved
	if err != nil {
		return nil, err
	}
	return v, r.EndCompound(end)
}

// arrayElems decodes the n elements of an array whose element constructor
// is ec (described by desc, if not nil) into the typed Go slice the
// package maps it to. Long on purpose: a flat switch with a case
// per element type code, the decoding half of writeElement's table.
func (r *Reader) arrayElems(desc any, ec byte, n int) (any, error) {
	if desc == nil {
		switch ec {
		case TypeCodeSym8, TypeCodeSym32:
			out := make([]Symbol, n)
			for i := range out {
				p, err := r.variable(ec, TypeCodeSym8)
				if err != nil {
					return nil, err
				}
				out[i] = Symbol(p)
			}
			return out, nil
		case TypeCodeStr8, TypeCodeStr32:
			out := make([]string, n)
			for i := range out {
				p, err := r.variable(ec, TypeCodeStr8)
				if err != nil {
					return nil, err
				}
				out[i] = string(p)
			}
			return out, nil
		case TypeCodeVbin8, TypeCodeVbin32:
			out := make([][]byte, n)
			for i := range out {
				p, err := r.variable(ec, TypeCodeVbin8)
				if err != nil {
					return nil, err
				}
				out[i] = p
			}
			return out, nil
		case TypeCodeUUID:
			out := make([]UUID, n)
			for i := range out {
				p, err := r.next(16)
				if err != nil {
					return nil, err
				}
				copy(out[i][:], p)
			}
			return out, nil
		case TypeCodeTimestamp:
			out := make([]time.Time, n)
			for i := range out {
				v, err := r.u64()
				if err != nil {
					return nil, err
				}
				out[i] = time.UnixMilli(int64(v)).UTC()
			}
			return out, nil
		case TypeCodeLong, TypeCodeSmallLong:
			out := make([]int64, n)
			for i := range out {
				v, err := r.body(ec)
				if err != nil {
					return nil, err
				}
				out[i] = v.(int64)
			}
			return out, nil
		case TypeCodeInt, TypeCodeSmallInt:
			out := make([]int32, n)
			for i := range out {
				v, err := r.body(ec)
				if err != nil {
					return nil, err
				}
				out[i] = v.(int32)
			}
			return out, nil
		case TypeCodeUlong, TypeCodeSmallUlong, TypeCodeUlong0:
			out := make([]uint64, n)
			for i := range out {
				v, err := r.body(ec)
				if err != nil {
					return nil, err
				}
				out[i] = v.(uint64)
			}
			return out, nil
		case TypeCodeUint, TypeCodeSmallUint, TypeCodeUint0:
			out := make([]uint32, n)
			for i := range out {
				v, err := r.body(ec)
				if err != nil {
					return nil, err
				}
				out[i] = v.(uint32)
			}
			return out, nil
		case TypeCodeDouble:
			out := make([]float64, n)
			for i := range out {
				v, err := r.u64()
				if err != nil {
					return nil, err
				}
				out[i] = math.Float64frombits(v)
			}
			return out, nil
		case TypeCodeBool, TypeCodeBoolTrue, TypeCodeBoolFalse:
			out := make([]bool, n)
			for i := range out {
				v, err := r.boolBody(ec)
				if err != nil {
					return nil, err
				}
				out[i] = v
			}
			return out, nil
		}
	}
	a := Array{Descriptor: desc, Code: ec, Elems: make([]any, n)}
	for i := range a.Elems {
		v, err := r.body(ec)
		if err != nil {
			return nil, err
		}
		a.Elems[i] = v
	}
	return a, nil
}

// writeArray writes an Array. Each element is encoded with its own
// constructor into the buffer and the constructor is then removed, after
// checking that it matches the array's element code.
func (b *Buffer) writeArray(v Array) error {
	code := v.Code
	if code == 0 {
		if len(v.Elems) == 0 {
			code = TypeCodeNull
		} else {
			c, err := naturalCode(v.Elems[0])
			if err != nil {
				return err
			}
			code = c
		}
	}
	if code == TypeCodeBoolTrue || code == TypeCodeBoolFalse {
		// Zero-width boolean constructors cannot hold mixed values.
		code = TypeCodeBool
	}
	if !validCode(code) {
		return fmt.Errorf("%w: array element code 0x%02x", ErrInvalid, code)
	}
	start := len(b.b)
	err := b.writeArrayAs(v, code)
	if err != nil {
		// A compact element code (smalluint, str8, list8, ...) may not fit
		// every element; retry with the wide form of the same type.
		if wide := widerCode(code); wide != code {
			b.b = b.b[:start]
			err = b.writeArrayAs(v, wide)
		}
	}
	if err != nil {
		b.b = b.b[:start]
	}
	return err
}

func (b *Buffer) writeArrayAs(v Array, code byte) error {
	a := b.BeginArray()
	if v.Descriptor != nil {
		b.b = append(b.b, TypeCodeDescribed)
		if err := b.WriteAny(v.Descriptor); err != nil {
			return err
		}
	}
	b.b = append(b.b, code)
	for _, e := range v.Elems {
		if err := b.writeElement(code, e); err != nil {
			return err
		}
	}
	a.End(len(v.Elems))
	return nil
}

// widerCode returns the widest format code of the type of code.
func widerCode(code byte) byte {
	switch code {
	case TypeCodeUint0, TypeCodeSmallUint:
		return TypeCodeUint
	case TypeCodeUlong0, TypeCodeSmallUlong:
		return TypeCodeUlong
	case TypeCodeSmallInt:
		return TypeCodeInt
	case TypeCodeSmallLong:
		return TypeCodeLong
	case TypeCodeVbin8:
		return TypeCodeVbin32
	case TypeCodeStr8:
		return TypeCodeStr32
	case TypeCodeSym8:
		return TypeCodeSym32
	case TypeCodeList0, TypeCodeList8:
		return TypeCodeList32
	case TypeCodeMap8:
		return TypeCodeMap32
	case TypeCodeArray8:
		return TypeCodeArray32
	}
	return code
}

// naturalCode returns the element code used for an Array whose element
// type must be inferred from its first element.
func naturalCode(v any) (byte, error) {
	switch v.(type) {
	case nil:
		return TypeCodeNull, nil
	case bool:
		return TypeCodeBool, nil
	case uint8:
		return TypeCodeUbyte, nil
	case uint16:
		return TypeCodeUshort, nil
	case uint32:
		return TypeCodeUint, nil
	case uint64, uint:
		return TypeCodeUlong, nil
	case int8:
		return TypeCodeByte, nil
	case int16:
		return TypeCodeShort, nil
	case int32:
		return TypeCodeInt, nil
	case int64, int:
		return TypeCodeLong, nil
	case float32:
		return TypeCodeFloat, nil
	case float64:
		return TypeCodeDouble, nil
	case Decimal32:
		return TypeCodeDecimal32, nil
	case Decimal64:
		return TypeCodeDecimal64, nil
	case Decimal128:
		return TypeCodeDecimal128, nil
	case Char:
		return TypeCodeChar, nil
	case time.Time:
		return TypeCodeTimestamp, nil
	case UUID:
		return TypeCodeUUID, nil
	case []byte:
		return TypeCodeVbin32, nil
	case string:
		return TypeCodeStr32, nil
	case Symbol:
		return TypeCodeSym32, nil
	case []any:
		return TypeCodeList32, nil
	case Map, map[Symbol]any, map[string]any, map[any]any:
		return TypeCodeMap32, nil
	case []Symbol, []string, []UUID, []int64, []int32, []uint64, []uint32, []float64, []bool, []time.Time, [][]byte, Array:
		return TypeCodeArray32, nil
	}
	return 0, fmt.Errorf("%w in array: %T", ErrUnsupported, v)
}

// writeElement writes e as an array element of the given code: the value
// encoded with exactly that code, without its constructor byte.
//
// Long on purpose: one flat switch with a case per element type
// code, the table of the array encoding.
func (b *Buffer) writeElement(code byte, e any) error {
	start := len(b.b)
	switch code {
	case TypeCodeNull:
		if e != nil {
			return fmt.Errorf("%w: %T in array of null", ErrInvalid, e)
		}
		return nil
	case TypeCodeBool:
		v, ok := e.(bool)
		if !ok {
			break
		}
		if v {
			b.b = append(b.b, 1)
		} else {
			b.b = append(b.b, 0)
		}
		return nil
	case TypeCodeUint0, TypeCodeUlong0:
		switch v := e.(type) {
		case uint32:
			if v == 0 {
				return nil
			}
		case uint64:
			if v == 0 {
				return nil
			}
		}
	case TypeCodeSmallUint:
		if v, ok := e.(uint32); ok && v < 256 {
			b.b = append(b.b, byte(v))
			return nil
		}
	case TypeCodeSmallUlong:
		if v, ok := e.(uint64); ok && v < 256 {
			b.b = append(b.b, byte(v))
			return nil
		}
	case TypeCodeSmallInt:
		if v, ok := e.(int32); ok && v >= -128 && v < 128 {
			b.b = append(b.b, byte(v))
			return nil
		}
	case TypeCodeSmallLong:
		if v, ok := e.(int64); ok && v >= -128 && v < 128 {
			b.b = append(b.b, byte(v))
			return nil
		}
	case TypeCodeUint:
		if v, ok := e.(uint32); ok {
			b.b = binary.BigEndian.AppendUint32(b.b, v)
			return nil
		}
	case TypeCodeUlong:
		switch v := e.(type) {
		case uint64:
			b.b = binary.BigEndian.AppendUint64(b.b, v)
			return nil
		case uint:
			b.b = binary.BigEndian.AppendUint64(b.b, uint64(v))
			return nil
		}
	case TypeCodeInt:
		if v, ok := e.(int32); ok {
			b.b = binary.BigEndian.AppendUint32(b.b, uint32(v))
			return nil
		}
	case TypeCodeLong:
		switch v := e.(type) {
		case int64:
			b.b = binary.BigEndian.AppendUint64(b.b, uint64(v))
			return nil
		case int:
			b.b = binary.BigEndian.AppendUint64(b.b, uint64(v))
			return nil
		}
	case TypeCodeVbin8, TypeCodeStr8, TypeCodeSym8:
		var n int
		switch v := e.(type) {
		case []byte:
			n = len(v)
			if code == TypeCodeVbin8 && n < 256 {
				b.b = append(append(b.b, byte(n)), v...)
				return nil
			}
		case string:
			n = len(v)
			if code == TypeCodeStr8 && n < 256 {
				b.b = append(append(b.b, byte(n)), v...)
				return nil
			}
		case Symbol:
			n = len(v)
			if code == TypeCodeSym8 && n < 256 {
				b.b = append(append(b.b, byte(n)), v...)
				return nil
			}
		}
	case TypeCodeVbin32, TypeCodeStr32, TypeCodeSym32:
		switch v := e.(type) {
		case []byte:
			if code == TypeCodeVbin32 {
				b.b = append(binary.BigEndian.AppendUint32(b.b, uint32(len(v))), v...)
				return nil
			}
		case string:
			if code == TypeCodeStr32 {
				b.b = append(binary.BigEndian.AppendUint32(b.b, uint32(len(v))), v...)
				return nil
			}
		case Symbol:
			if code == TypeCodeSym32 {
				b.b = append(binary.BigEndian.AppendUint32(b.b, uint32(len(v))), v...)
				return nil
			}
		}
	case TypeCodeList0:
		if l, ok := e.([]any); ok && len(l) == 0 {
			return nil
		}
	case TypeCodeList8, TypeCodeList32, TypeCodeMap8, TypeCodeMap32, TypeCodeArray8, TypeCodeArray32:
		// Encode with the 32-bit form and strip the constructor; compact
		// forms were chosen by the encoder, so rewrite the header.
		if err := b.WriteAny(e); err != nil {
			return err
		}
		return b.widenComposite(start, code)
	default:
		// Fixed-width codes: encode normally, check the code, strip it.
		if err := b.WriteAny(e); err != nil {
			return err
		}
		if b.b[start] != code {
			got := b.b[start]
			b.b = b.b[:start]
			return &TypeError{Code: got, Want: CodeName(code) + " array element"}
		}
		copy(b.b[start:], b.b[start+1:])
		b.b = b.b[:len(b.b)-1]
		return nil
	}
	b.b = b.b[:start]
	return fmt.Errorf("%w: %T as array element of %s (0x%02x)", ErrInvalid, e, CodeName(code), code)
}

// widenComposite rewrites the composite value just written at start
// (any of list0/list8/list32, map8/map32, array8/array32) into the
// constructor-less element form of code.
func (b *Buffer) widenComposite(start int, code byte) error {
	got := b.b[start]
	body := b.b[start+1:]
	var count uint32
	var items []byte
	switch got {
	case TypeCodeList0:
		items = nil
	case TypeCodeList8, TypeCodeMap8, TypeCodeArray8:
		count = uint32(body[1])
		items = body[2:]
	case TypeCodeList32, TypeCodeMap32, TypeCodeArray32:
		count = binary.BigEndian.Uint32(body[4:])
		items = body[8:]
	}
	kind := func(c byte) byte {
		switch c {
		case TypeCodeList0, TypeCodeList8, TypeCodeList32:
			return 'l'
		case TypeCodeMap8, TypeCodeMap32:
			return 'm'
		}
		return 'a'
	}
	if kind(got) != kind(code) {
		b.b = b.b[:start]
		return &TypeError{Code: got, Want: CodeName(code) + " array element"}
	}
	tmp := append([]byte(nil), items...)
	b.b = b.b[:start]
	switch code {
	case TypeCodeList8, TypeCodeMap8, TypeCodeArray8:
		if len(tmp)+1 > 255 || count > 255 {
			return fmt.Errorf("%w: element too large for %s8 array", ErrInvalid, CodeName(code))
		}
		b.b = append(b.b, byte(len(tmp)+1), byte(count))
	default:
		b.b = binary.BigEndian.AppendUint32(b.b, uint32(len(tmp)+4))
		b.b = binary.BigEndian.AppendUint32(b.b, count)
	}
	b.b = append(b.b, tmp...)
	return nil
}
