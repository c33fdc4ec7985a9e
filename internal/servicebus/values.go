package servicebus

import (
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/message"
)

// Readers for the loosely typed bodies and application properties of
// management and CBS requests. The SDKs disagree on details (string or
// symbol keys, array or list, int or long), so each reader accepts every
// reasonable encoding of its value.

// body is a request body map; keys match as strings or symbols.
type body struct{ m encoding.Map }

// requestBody decodes the amqp-value map body of a request. A request
// without a body is an empty map.
func requestBody(m *frames.Message) (body, error) {
	if len(m.RawBody) == 0 {
		return body{}, nil
	}
	v, err := frames.BodyValue(m.RawBody)
	if err != nil {
		return body{}, badRequest("The request body is not an AMQP value: %v", err)
	}
	switch x := v.(type) {
	case nil:
		return body{}, nil
	case encoding.Map:
		return body{m: x}, nil
	case map[string]any:
		var mm encoding.Map
		for k, v := range x {
			mm = append(mm, encoding.MapEntry{Key: k, Value: v})
		}
		return body{m: mm}, nil
	}
	return body{}, badRequest("The request body is a %T, not a map.", v)
}

func (b body) get(key string) (any, bool) {
	v, ok := b.m.Get(key)
	if ok && v == nil {
		return nil, false
	}
	return v, ok
}

// str returns a string (or symbol) value; absent or null is "".
func (b body) str(key string) (string, error) {
	v, ok := b.get(key)
	if !ok {
		return "", nil
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case encoding.Symbol:
		return string(x), nil
	}
	return "", badRequest("The request field '%s' must be a string, not %T.", key, v)
}

// boolean returns a boolean value; absent or null is false.
func (b body) boolean(key string) (bool, error) {
	v, ok := b.get(key)
	if !ok {
		return false, nil
	}
	x, isBool := v.(bool)
	if !isBool {
		return false, badRequest("The request field '%s' must be a boolean, not %T.", key, v)
	}
	return x, nil
}

// integer returns an integer value of any AMQP integer type; ok is false
// when absent.
func (b body) integer(key string) (n int64, ok bool, err error) {
	v, ok := b.get(key)
	if !ok {
		return 0, false, nil
	}
	n, err = toInt64(v)
	if err != nil {
		return 0, false, badRequest("The request field '%s': %v", key, err)
	}
	return n, true, nil
}

// timestamp returns a timestamp value; ok is false when absent.
func (b body) timestamp(key string) (time.Time, bool, error) {
	v, ok := b.get(key)
	if !ok {
		return time.Time{}, false, nil
	}
	t, isTime := v.(time.Time)
	if !isTime {
		return time.Time{}, false, badRequest("The request field '%s' must be a timestamp, not %T.", key, v)
	}
	return t, true, nil
}

// int64s returns an array or list of integers.
func (b body) int64s(key string) ([]int64, error) {
	v, ok := b.get(key)
	if !ok {
		return nil, badRequest("The request field '%s' is missing.", key)
	}
	var items []any
	switch x := v.(type) {
	case []int64:
		return x, nil
	case []any:
		items = x
	case encoding.Array:
		items = x.Elems
	case []int32:
		items = anySlice(x)
	case []uint32:
		items = anySlice(x)
	case []uint64:
		items = anySlice(x)
	default:
		n, err := toInt64(v) // a single number
		if err != nil {
			return nil, badRequest("The request field '%s' must be an array of long, not %T.", key, v)
		}
		return []int64{n}, nil
	}
	out := make([]int64, len(items))
	for i, it := range items {
		n, err := toInt64(it)
		if err != nil {
			return nil, badRequest("The request field '%s'[%d]: %v", key, i, err)
		}
		out[i] = n
	}
	return out, nil
}

// uuids returns an array or list of uuids (lock tokens, RFC byte order).
// Strings in canonical form are accepted too.
func (b body) uuids(key string) ([]uuid.UUID, error) {
	v, ok := b.get(key)
	if !ok {
		return nil, badRequest("The request field '%s' is missing.", key)
	}
	var items []any
	switch x := v.(type) {
	case []encoding.UUID:
		out := make([]uuid.UUID, len(x))
		for i, u := range x {
			out[i] = uuid.UUID(u)
		}
		return out, nil
	case []any:
		items = x
	case encoding.Array:
		items = x.Elems
	case []string:
		items = anySlice(x)
	default:
		items = []any{v}
	}
	out := make([]uuid.UUID, len(items))
	for i, it := range items {
		switch u := it.(type) {
		case encoding.UUID:
			out[i] = uuid.UUID(u)
		case string:
			p, err := uuid.Parse(u)
			if err != nil {
				return nil, badRequest("The request field '%s'[%d] is not a uuid.", key, i)
			}
			out[i] = p
		default:
			return nil, badRequest("The request field '%s'[%d] must be a uuid, not %T.", key, i, it)
		}
	}
	return out, nil
}

// list returns a list (or array) value.
func (b body) list(key string) ([]any, error) {
	v, ok := b.get(key)
	if !ok {
		return nil, badRequest("The request field '%s' is missing.", key)
	}
	switch x := v.(type) {
	case []any:
		return x, nil
	case encoding.Array:
		return x.Elems, nil
	}
	return nil, badRequest("The request field '%s' must be a list, not %T.", key, v)
}

// props returns a map of properties to modify, converted to the types
// message.Message allows; absent is nil.
func (b body) props(key string) (map[string]any, error) {
	v, ok := b.get(key)
	if !ok {
		return nil, nil
	}
	return propsMap(v)
}

// propsMap converts a decoded AMQP map with string or symbol keys to a
// property map.
func propsMap(v any) (map[string]any, error) {
	var entries encoding.Map
	switch x := v.(type) {
	case nil:
		return nil, nil
	case encoding.Map:
		entries = x
	case map[string]any:
		for k, v := range x {
			entries = append(entries, encoding.MapEntry{Key: k, Value: v})
		}
	case map[frames.Symbol]any:
		for k, v := range x {
			entries = append(entries, encoding.MapEntry{Key: k, Value: v})
		}
	default:
		return nil, badRequest("The properties to modify must be a map, not %T.", v)
	}
	out := make(map[string]any, len(entries))
	for _, e := range entries {
		var k string
		switch kk := e.Key.(type) {
		case string:
			k = kk
		case encoding.Symbol:
			k = string(kk)
		default:
			return nil, badRequest("A property name must be a string, not %T.", e.Key)
		}
		mv, err := message.SimpleValue(e.Value)
		if err != nil {
			return nil, badRequest("The property '%s': %v", k, err)
		}
		out[k] = mv
	}
	return out, nil
}

func anySlice[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("%d is out of range", x)
		}
		return int64(x), nil
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

// appProp reads an application property of a request as a string.
func appProp(m *frames.Message, key string) string {
	switch v := m.ApplicationProperties[key].(type) {
	case string:
		return v
	case encoding.Symbol:
		return string(v)
	}
	return ""
}
