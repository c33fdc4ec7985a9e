package filter

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

// valueKind is the type of a value during evaluation. Its names are the
// .NET types the Service Bus rule engine works with, because they appear
// in evaluation error messages.
type valueKind uint8

// Value kinds. kindNull stands for both SQL NULL and "unknown" (a missing
// user property); the engine does not need to tell them apart.
const (
	kindNull     valueKind = iota
	kindBool               // System.Boolean
	kindInt                // System.Int64: integer literals and every integer property
	kindDouble             // System.Double: decimal and approximate literals, float properties
	kindString             // System.String
	kindDateTime           // System.DateTime
	kindTimeSpan           // System.TimeSpan
	kindGuid               // System.Guid
	kindBinary             // System.Byte[]: only IS NULL and EXISTS apply
	kindOther              // a Go type outside message.Message's list
)

var kindNames = [...]string{
	kindNull:     "Null",
	kindBool:     "Boolean",
	kindInt:      "Int64",
	kindDouble:   "Double",
	kindString:   "String",
	kindDateTime: "DateTime",
	kindTimeSpan: "TimeSpan",
	kindGuid:     "Guid",
	kindBinary:   "Byte[]",
	kindOther:    "Object",
}

// String returns the .NET name of the kind.
func (k valueKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Object"
}

// value is one evaluated value. It is passed by value, so it is kept
// small: a DateTime is held as Unix seconds and nanoseconds (in UTC), a
// Guid as two 64-bit halves, and a Byte[] or other value as the property's
// own interface value.
type value struct {
	kind valueKind
	n    int32   // kindDateTime: nanoseconds
	i    int64   // kindBool (0 or 1), kindInt, kindTimeSpan (ns), kindDateTime (Unix s), kindGuid (bytes 0-7)
	j    uint64  // kindGuid (bytes 8-15)
	f    float64 // kindDouble
	s    string  // kindString
	x    any     // kindBinary, kindOther
}

var (
	nullValue  = value{}
	trueValue  = value{kind: kindBool, i: 1}
	falseValue = value{kind: kindBool}
)

func boolValue(b bool) value {
	if b {
		return trueValue
	}
	return falseValue
}

func intValue(i int64) value          { return value{kind: kindInt, i: i} }
func doubleValue(f float64) value     { return value{kind: kindDouble, f: f} }
func stringValue(s string) value      { return value{kind: kindString, s: s} }
func spanValue(d time.Duration) value { return value{kind: kindTimeSpan, i: int64(d)} }
func (v *value) isNull() bool         { return v.kind == kindNull }
func (v *value) isNumeric() bool      { return v.kind == kindInt || v.kind == kindDouble }
func (v *value) span() time.Duration  { return time.Duration(v.i) }

func timeValue(t time.Time) value {
	return value{kind: kindDateTime, i: t.Unix(), n: int32(t.Nanosecond())}
}

func guidValue(g message.UUID) value {
	return value{kind: kindGuid, i: int64(binary.BigEndian.Uint64(g[:8])), j: binary.BigEndian.Uint64(g[8:])}
}

// time returns a DateTime value as a UTC time.Time.
func (v *value) time() time.Time { return time.Unix(v.i, int64(v.n)).UTC() }

// guid returns a Guid value as a UUID.
func (v *value) guid() message.UUID {
	var g message.UUID
	binary.BigEndian.PutUint64(g[:8], uint64(v.i))
	binary.BigEndian.PutUint64(g[8:], v.j)
	return g
}

// asDouble returns a numeric value as a Double (C# implicit conversion).
func (v *value) asDouble() float64 {
	if v.kind == kindInt {
		return float64(v.i)
	}
	return v.f
}

// fromAny converts a property or parameter value to a value. Integers of
// every width widen to Int64 (an unsigned 64-bit value above MaxInt64
// becomes a Double, the nearest C# promotion has); float32 widens to
// Double; Symbol and Char read as strings. It does not allocate, except
// that a Char outside ASCII becomes a new string.
func fromAny(x any) value {
	switch v := x.(type) {
	case nil:
		return nullValue
	case bool:
		return boolValue(v)
	case string:
		return stringValue(v)
	case int64:
		return intValue(v)
	case int32:
		return intValue(int64(v))
	case int:
		return intValue(int64(v))
	case int16:
		return intValue(int64(v))
	case int8:
		return intValue(int64(v))
	case uint8:
		return intValue(int64(v))
	case uint16:
		return intValue(int64(v))
	case uint32:
		return intValue(int64(v))
	case uint64:
		if v > math.MaxInt64 {
			return doubleValue(float64(v))
		}
		return intValue(int64(v))
	case uint:
		if uint64(v) > math.MaxInt64 {
			return doubleValue(float64(v))
		}
		return intValue(int64(v))
	case float64:
		return doubleValue(v)
	case float32:
		return doubleValue(float64(v))
	case message.Symbol:
		return stringValue(string(v))
	case message.Char:
		return stringValue(string(rune(v)))
	case time.Time:
		return timeValue(v)
	case time.Duration:
		return spanValue(v)
	case message.UUID:
		return guidValue(v)
	case []byte:
		if v == nil {
			return nullValue
		}
		return value{kind: kindBinary, x: x}
	}
	return value{kind: kindOther, x: x}
}

// supportedParam reports whether x is a type a rule parameter or a
// correlation-filter property may have.
func supportedParam(x any) bool {
	switch x.(type) {
	case nil, bool, string, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
		float32, float64, message.Symbol, message.Char, time.Time, time.Duration, message.UUID:
		return true
	}
	return false
}

// toAny converts a value to the Go type stored in a message property: nil,
// bool, int64, float64, string, time.Time (UTC), message.UUID, or the
// original value of a Byte[] or other property. TimeSpan has no message
// property type and reports ok = false.
func toAny(v value) (x any, ok bool) {
	switch v.kind {
	case kindNull:
		return nil, true
	case kindBool:
		return v.i != 0, true
	case kindInt:
		return v.i, true
	case kindDouble:
		return v.f, true
	case kindString:
		return v.s, true
	case kindDateTime:
		return v.time(), true
	case kindGuid:
		return v.guid(), true
	case kindBinary, kindOther:
		return v.x, true
	}
	return nil, false
}
