package filter

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

func apply(t *testing.T, env *Env, src string) (*message.Message, error) {
	t.Helper()
	a, err := CompileAction(src, evalParams)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return a.Apply(env)
}

func TestActionUserProperties(t *testing.T) {
	tests := []struct {
		src  string
		key  string
		want any // the property's value afterwards; absent if deleted
		gone bool
	}{
		{src: "SET a = 1", key: "a", want: int64(1)},
		{src: "SET a = 'x' + 'y'", key: "a", want: "xy"},
		{src: "SET a = 2.5", key: "a", want: 2.5},
		{src: "SET a = TRUE", key: "a", want: true},
		{src: "SET a = @t", key: "a", want: t0},
		{src: "SET a = @g", key: "a", want: testUUID},
		{src: "SET a = missing", key: "a", want: nil},           // unknown stores null
		{src: "SET a = missing + 1", key: "a", want: nil},       // unknown stores null
		{src: "SET Label = 'test'", key: "Label", want: "test"}, // a user property, not sys.Label
		{src: "SET user.x = 1", key: "x", want: int64(1)},
		{src: "SET [a b] = 1", key: "a b", want: int64(1)},
		{src: "SET color = 'blue'", key: "color", want: "blue"},
		{src: "SET COLOR = 'blue'", key: "color", want: "blue"}, // case-insensitive: overwrites color
		{src: "REMOVE color", key: "color", gone: true},
		{src: "REMOVE COLOR", key: "color", gone: true},
		{src: "REMOVE user.[My Prop]", key: "My Prop", gone: true},
		{src: "REMOVE missing", key: "missing", gone: true},
		{src: "SET a = 1; SET b = a + 1; REMOVE a", key: "b", want: int64(2)},
		{src: "SET a = 1; SET b = a + 1; REMOVE a", key: "a", gone: true},
		{src: "SET color = color + '!' SET color = color + '?'", key: "color", want: "red!?"},

		// SET keeps the type of the property it overwrites when nothing
		// is lost.
		{src: "SET Quantity = Quantity / 2", key: "Quantity", want: int32(7)},
		{src: "SET Quantity = 5000000000", key: "Quantity", want: int64(5000000000)},
		{src: "SET Quantity = 1.5", key: "Quantity", want: 1.5},
		{src: "SET Quantity = 'many'", key: "Quantity", want: "many"},
		{src: "SET u8 = u8 * 2", key: "u8", want: uint8(14)},
		{src: "SET u8 = -1", key: "u8", want: int64(-1)},
		{src: "SET i8 = i8 - 1", key: "i8", want: int8(-4)},
		{src: "SET u64 = 5", key: "u64", want: uint64(5)},
		{src: "SET price = 3", key: "price", want: 3.0},
		{src: "SET f32 = 0.25", key: "f32", want: float32(0.25)},
		{src: "SET f32 = 0.1", key: "f32", want: 0.1},
		{src: "SET f32 = 2", key: "f32", want: float32(2)},
		{src: "SET color = 5", key: "color", want: int64(5)},
		{src: "SET sym = 'z'", key: "sym", want: message.Symbol("z")},
		{src: "SET nul = 1", key: "nul", want: int64(1)},
	}
	for _, tt := range tests {
		env := testEnv()
		before := maps.Clone(env.Msg.ApplicationProperties)
		m, err := apply(t, env, tt.src)
		if err != nil {
			t.Errorf("%s: %v", tt.src, err)
			continue
		}
		got, ok := m.ApplicationProperties[tt.key]
		switch {
		case tt.gone && ok:
			t.Errorf("%s: %s still present (%v)", tt.src, tt.key, got)
		case !tt.gone && !ok:
			t.Errorf("%s: %s missing", tt.src, tt.key)
		case !tt.gone && !reflect.DeepEqual(got, tt.want):
			t.Errorf("%s: %s = %#v, want %#v", tt.src, tt.key, got, tt.want)
		}
		if strings.Contains(strings.ToLower(tt.src), "set color") {
			if _, ok := m.ApplicationProperties["COLOR"]; ok {
				t.Errorf("%s: created a second key", tt.src)
			}
		}
		// The original is untouched.
		if !sameProps(env.Msg.ApplicationProperties, before) {
			t.Errorf("%s: modified the input's properties", tt.src)
		}
	}
}

func sameProps(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok {
			return false
		}
		if f, isF := v.(float64); isF && f != f { // NaN
			continue
		}
		if !reflect.DeepEqual(v, w) {
			return false
		}
	}
	return true
}

func TestActionSystemProperties(t *testing.T) {
	env := testEnv()
	annBefore := maps.Clone(env.Msg.Annotations)
	msgBefore := *env.Msg
	m, err := apply(t, env, `SET sys.To = 'Entity'; SET sys.CorrelationId = 'low'; SET sys.MessageId = 'm2';
		SET sys.ReplyTo = 'r'; SET sys.ReplyToSessionId = 'rs'; SET sys.SessionId = 's'; SET sys.ContentType = 'c';
		SET sys.Label = 'l'; SET sys.PartitionKey = 'k2'; SET sys.ViaPartitionKey = 'v2';
		SET sys.TimeToLive = @min; SET sys.ScheduledEnqueueTimeUtc = @t;
		SET label2 = sys.Label; SET sched = sys.ScheduledEnqueueTimeUtc`)
	if err != nil {
		t.Fatal(err)
	}
	if m.To != "Entity" || m.CorrelationID != "low" || m.MessageID != "m2" || m.ReplyTo != "r" ||
		m.ReplyToSessionID != "rs" || m.SessionID != "s" || m.ContentType != "c" || m.Subject != "l" ||
		m.TTL != time.Minute {
		t.Errorf("system properties not set: %+v", m)
	}
	if m.Annotations[annPartitionKey] != "k2" || m.Annotations[annViaPartitionKey] != "v2" || m.Annotations[annScheduledEnqueue] != t0 {
		t.Errorf("annotations: %v", m.Annotations)
	}
	// Later statements see earlier ones.
	if m.ApplicationProperties["label2"] != "l" || m.ApplicationProperties["sched"] != t0 {
		t.Errorf("sequential: %v", m.ApplicationProperties)
	}
	// The input is untouched.
	if !maps.Equal(env.Msg.Annotations, annBefore) || env.Msg.To != msgBefore.To || env.Msg.Subject != msgBefore.Subject ||
		env.Msg.TTL != msgBefore.TTL || env.Msg.MessageID != msgBefore.MessageID {
		t.Errorf("input modified")
	}

	// REMOVE clears.
	m, err = apply(t, env, "REMOVE sys.To; REMOVE sys.MessageId; REMOVE sys.PartitionKey; REMOVE sys.ScheduledEnqueueTimeUtc; REMOVE sys.TimeToLive; SET sys.CorrelationId = missing")
	if err != nil {
		t.Fatal(err)
	}
	if m.To != "" || m.MessageID != nil || m.CorrelationID != nil || m.TTL != 0 {
		t.Errorf("not cleared: %+v", m)
	}
	if _, ok := m.Annotations[annPartitionKey]; ok {
		t.Errorf("partition key not removed")
	}
	if _, ok := m.Annotations[annScheduledEnqueue]; ok {
		t.Errorf("scheduled time not removed")
	}
	if !maps.Equal(env.Msg.Annotations, annBefore) {
		t.Errorf("input annotations modified")
	}
	// Statements that change no annotation share the input's map.
	m, _ = apply(t, env, "SET sys.To = 'x'")
	if reflect.ValueOf(m.Annotations).Pointer() != reflect.ValueOf(env.Msg.Annotations).Pointer() {
		t.Errorf("annotations copied needlessly")
	}
}

func TestActionErrorsAtApply(t *testing.T) {
	tests := []struct{ src, typ, msg string }{
		{"SET sys.To = 1", ExcRuleAction, "A value of type 'Int64' cannot be assigned to sys.To, which is of type 'String'."},
		{"SET sys.MessageId = newid()", ExcRuleAction, "A value of type 'Guid' cannot be assigned to sys.MessageId, which is of type 'String'."},
		{"SET sys.TimeToLive = 5", ExcRuleAction, "A value of type 'Int64' cannot be assigned to sys.TimeToLive, which is of type 'TimeSpan'."},
		{"SET sys.TimeToLive = -@span", ExcArgumentOutOfRange, "sys.TimeToLive must be positive."},
		{"SET sys.ScheduledEnqueueTimeUtc = 'now'", ExcRuleAction, "A value of type 'String' cannot be assigned to sys.ScheduledEnqueueTimeUtc, which is of type 'DateTime'."},
		{"SET x = @span", ExcRuleAction, "A value of type 'TimeSpan' cannot be stored in user property 'x'."},
		{"SET x = 1 / 0", ExcDivideByZero, "Attempted to divide by zero."},
		{"SET x = 1; SET y = qstr + 1", ExcFilter, "Operator '+' cannot be applied to operands of type 'String' and 'Int64'."},
		{"SET sys.MessageId = '" + strings.Repeat("m", 129) + "'", ExcArgumentOutOfRange, "The value of sys.MessageId is 129 characters long; the limit is 128."},
	}
	for _, tt := range tests {
		env := testEnv()
		before := maps.Clone(env.Msg.ApplicationProperties)
		m, err := apply(t, env, tt.src)
		var ee *EvalError
		if m != nil || !errors.As(err, &ee) {
			t.Errorf("%s: got %v, %v", tt.src, m, err)
			continue
		}
		if ee.Type != tt.typ || ee.Message != tt.msg {
			t.Errorf("%s:\n got %s: %s\nwant %s: %s", tt.src, ee.Type, ee.Message, tt.typ, tt.msg)
		}
		if !sameProps(env.Msg.ApplicationProperties, before) {
			t.Errorf("%s: input modified", tt.src)
		}
	}
	// 128 characters is fine.
	if _, err := apply(t, testEnv(), "SET sys.SessionId = '"+strings.Repeat("s", 128)+"'"); err != nil {
		t.Errorf("128 characters: %v", err)
	}
}

func TestActionMisc(t *testing.T) {
	// A message without properties gets a map of its own.
	env := &Env{Msg: &message.Message{}}
	m, err := apply(t, env, "SET a = newid()")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.ApplicationProperties["a"].(message.UUID); !ok || env.Msg.ApplicationProperties != nil {
		t.Errorf("newid: %#v; input %v", m.ApplicationProperties["a"], env.Msg.ApplicationProperties)
	}
	m, err = apply(t, env, "REMOVE x")
	if err != nil || m.ApplicationProperties == nil {
		t.Errorf("REMOVE on empty: %v %v", m, err)
	}
	// A nil message too.
	m, err = apply(t, &Env{}, "SET a = 1; SET sys.Label = 'x'")
	if err != nil || m.ApplicationProperties["a"] != int64(1) || m.Subject != "x" {
		t.Errorf("nil message: %+v %v", m, err)
	}
	// Body and the other fields are carried over.
	env = &Env{Msg: &message.Message{Body: []byte("body"), Priority: 4, Durable: true}}
	m, _ = apply(t, env, "SET a = 1")
	if string(m.Body) != "body" || m.Priority != 4 || !m.Durable {
		t.Errorf("fields not copied: %+v", m)
	}

	a, err := CompileAction("set a = 1 remove b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Text() != "set a = 1 remove b" || len(a.Statements()) != 2 || a.String() != "SET a = 1; REMOVE b" {
		t.Errorf("Text %q, Statements %d, String %q", a.Text(), len(a.Statements()), a)
	}
	if _, ok := a.Statements()[1].(*RemoveStmt); !ok {
		t.Errorf("statement 2 is %T", a.Statements()[1])
	}
}

func TestConvertLike(t *testing.T) {
	tests := []struct {
		x, old, want any
	}{
		{int64(5), int64(1), int64(5)},
		{int64(5), int32(1), int32(5)},
		{int64(1 << 40), int32(1), int64(1 << 40)},
		{int64(5), int16(1), int16(5)},
		{int64(1 << 20), int16(1), int64(1 << 20)},
		{int64(-5), int8(1), int8(-5)},
		{int64(300), int8(1), int64(300)},
		{int64(5), uint64(1), uint64(5)},
		{int64(-5), uint64(1), int64(-5)},
		{int64(5), uint32(1), uint32(5)},
		{int64(1 << 40), uint32(1), int64(1 << 40)},
		{int64(5), uint16(1), uint16(5)},
		{int64(70000), uint16(1), int64(70000)},
		{int64(5), uint8(1), uint8(5)},
		{int64(5), float64(1), float64(5)},
		{int64(5), float32(1), float32(5)},
		{2.5, float32(1), float32(2.5)},
		{0.1, float32(1), 0.1},
		{2.5, int64(1), 2.5},
		{"s", message.Symbol("x"), message.Symbol("s")},
		{"s", int64(1), "s"},
		{true, int64(1), true},
		{int64(5), "x", int64(5)},
	}
	for _, tt := range tests {
		if got := convertLike(tt.x, tt.old); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("convertLike(%T %v, %T): got %T %v, want %T %v", tt.x, tt.x, tt.old, got, got, tt.want, tt.want)
		}
	}
}
