package filter

import (
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

func TestCorrelationFilter(t *testing.T) {
	tests := []struct {
		name string
		c    CorrelationFilter
		want bool
	}{
		{"correlation id (uuid on the wire)", CorrelationFilter{CorrelationID: "01020304-0506-0708-090a-0b0c0d0e0f10"}, true},
		{"correlation id upper case", CorrelationFilter{CorrelationID: "01020304-0506-0708-090A-0B0C0D0E0F10"}, false},
		{"message id", CorrelationFilter{MessageID: "msg-1"}, true},
		{"message id differs", CorrelationFilter{MessageID: "msg-2"}, false},
		{"to", CorrelationFilter{To: "orders"}, true},
		{"to is case-sensitive", CorrelationFilter{To: "Orders"}, false},
		{"reply to", CorrelationFilter{ReplyTo: "replies"}, true},
		{"label is the subject", CorrelationFilter{Label: "bus-label"}, true},
		{"label differs", CorrelationFilter{Label: "bus"}, false},
		{"session id", CorrelationFilter{SessionID: "s1"}, true},
		{"reply to session id", CorrelationFilter{ReplyToSessionID: "rs1"}, true},
		{"content type", CorrelationFilter{ContentType: "application/json"}, true},
		{"content type differs", CorrelationFilter{ContentType: "application/xml"}, false},
		{"all fields ANDed", CorrelationFilter{To: "orders", ReplyTo: "replies", Label: "bus-label", SessionID: "s1",
			ReplyToSessionID: "rs1", ContentType: "application/json", MessageID: "msg-1",
			CorrelationID: "01020304-0506-0708-090a-0b0c0d0e0f10", Properties: map[string]any{"color": "red"}}, true},
		{"one field wrong", CorrelationFilter{To: "orders", ReplyTo: "x", Label: "bus-label"}, false},
		{"nothing set matches everything", CorrelationFilter{}, true},

		// Properties compare with their types.
		{"string property", CorrelationFilter{Properties: map[string]any{"color": "red"}}, true},
		{"string property is case-sensitive", CorrelationFilter{Properties: map[string]any{"color": "Red"}}, false},
		{"property name is case-insensitive", CorrelationFilter{Properties: map[string]any{"COLOR": "red"}}, true},
		{"string '15' does not match integer 15", CorrelationFilter{Properties: map[string]any{"Quantity": "15"}}, false},
		{"integer 15 does not match string '15'", CorrelationFilter{Properties: map[string]any{"qstr": 15}}, false},
		{"int against int32", CorrelationFilter{Properties: map[string]any{"Quantity": 15}}, true},
		{"int64 against int32", CorrelationFilter{Properties: map[string]any{"Quantity": int64(15)}}, true},
		{"double against int32 (JavaScript)", CorrelationFilter{Properties: map[string]any{"Quantity": 15.0}}, true},
		{"double", CorrelationFilter{Properties: map[string]any{"price": 2.5}}, true},
		{"double differs", CorrelationFilter{Properties: map[string]any{"price": 2.6}}, false},
		{"bool", CorrelationFilter{Properties: map[string]any{"flag": true}}, true},
		{"bool against string", CorrelationFilter{Properties: map[string]any{"flag": "true"}}, false},
		{"dateTime", CorrelationFilter{Properties: map[string]any{"when": t0}}, true},
		{"dateTime in another zone, same instant", CorrelationFilter{Properties: map[string]any{"when": t0.In(time.FixedZone("x", 3600))}}, true},
		{"uuid", CorrelationFilter{Properties: map[string]any{"id": testUUID}}, true},
		{"missing property", CorrelationFilter{Properties: map[string]any{"missing": "x"}}, false},
		{"null property", CorrelationFilter{Properties: map[string]any{"nul": "x"}}, false},
		{"binary property", CorrelationFilter{Properties: map[string]any{"bin": "x"}}, false},
		{"NaN property", CorrelationFilter{Properties: map[string]any{"nan": 1.0}}, false},
		{"two properties", CorrelationFilter{Properties: map[string]any{"color": "red", "Quantity": 15}}, true},
		{"two properties, one wrong", CorrelationFilter{Properties: map[string]any{"color": "red", "Quantity": 16}}, false},
	}
	env := testEnv()
	for _, tt := range tests {
		if got, err := tt.c.Match(env); got != tt.want || err != nil {
			t.Errorf("%s: got %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	// Against a nil message only the empty filter matches.
	if ok, _ := (&CorrelationFilter{To: "orders"}).Match(&Env{}); ok {
		t.Errorf("nil message matched")
	}
	// Other id forms.
	m := &Env{Msg: &message.Message{MessageID: uint64(7), CorrelationID: []byte{0xab}}}
	if ok, _ := (&CorrelationFilter{MessageID: "7", CorrelationID: "ab"}).Match(m); !ok {
		t.Errorf("ulong / binary ids did not match")
	}
}

func TestCorrelationFilterEquivalentSQL(t *testing.T) {
	// A correlation filter agrees with its documented SQL equivalent
	// wherever the SQL does not fail.
	c := &CorrelationFilter{ReplyTo: "replies", Label: "bus-label", Properties: map[string]any{"color": "red"}}
	f, err := CompileSQL("sys.ReplyTo = 'replies' AND sys.Label = 'bus-label' AND color = 'red'", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []*Env{testEnv(), {}, {Msg: &message.Message{ReplyTo: "replies", Subject: "bus-label"}}} {
		a, _ := c.Match(env)
		b, _ := f.Match(env)
		if a != b {
			t.Errorf("correlation %v, SQL %v", a, b)
		}
	}
}

func TestCorrelationFilterValidate(t *testing.T) {
	tests := []struct {
		c    CorrelationFilter
		want string // error substring, "" for valid
	}{
		{CorrelationFilter{}, "no property set"},
		{CorrelationFilter{Properties: map[string]any{}}, "no property set"},
		{CorrelationFilter{To: "x"}, ""},
		{CorrelationFilter{Properties: map[string]any{"a": 1, "b": "x", "c": 1.5, "d": true, "e": t0, "f": time.Second, "g": int32(1)}}, ""},
		{CorrelationFilter{Properties: map[string]any{"a": nil}}, `property "a" has no value`},
		{CorrelationFilter{Properties: map[string]any{"a": []byte{1}}}, `property "a" has unsupported type []uint8`},
		{CorrelationFilter{Properties: map[string]any{"": "x"}}, "empty name"},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v", tt.c, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: got %v, want %q", tt.c, err, tt.want)
		}
	}
}

func TestCorrelationMatchDoesNotAllocate(t *testing.T) {
	c := &CorrelationFilter{To: "orders", Label: "bus-label", Properties: map[string]any{"color": "red", "Quantity": 15}}
	env := testEnv()
	if allocs := testing.AllocsPerRun(100, func() {
		if ok, _ := c.Match(env); !ok {
			t.Fatal("no match")
		}
	}); allocs != 0 {
		t.Errorf("%v allocations per Match", allocs)
	}
}
