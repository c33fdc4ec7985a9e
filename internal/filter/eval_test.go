package filter

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

var (
	t0        = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	testUUID  = message.UUID{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10}
	lockToken = message.UUID{0xff, 1}
)

// testEnv is the message every evaluation test runs against.
func testEnv() *Env {
	return &Env{
		Msg: &message.Message{
			MessageID:        "msg-1",
			CorrelationID:    testUUID,
			To:               "orders",
			ReplyTo:          "replies",
			Subject:          "bus-label",
			ContentType:      "application/json",
			SessionID:        "s1",
			ReplyToSessionID: "rs1",
			TTL:              time.Hour,
			Annotations: map[string]any{
				annPartitionKey:     "pk",
				annScheduledEnqueue: t0.Add(time.Minute),
			},
			ApplicationProperties: map[string]any{
				"color":     "red",
				"Quantity":  int32(15),
				"qstr":      "15",
				"big":       int64(1 << 40),
				"u8":        uint8(7),
				"u64":       uint64(math.MaxUint64),
				"i8":        int8(-3),
				"price":     2.5,
				"f32":       float32(0.5),
				"flag":      true,
				"off":       false,
				"when":      t0,
				"nul":       nil,
				"bin":       []byte{1, 2},
				"id":        testUUID,
				"sym":       message.Symbol("sym"),
				"ch":        message.Char('x'),
				"zero":      int64(0),
				"min":       int64(math.MinInt64),
				"nan":       math.NaN(),
				"text":      "ABC%",
				"uni":       "héllo",
				"pat":       "r%",
				"badpat":    "r!",
				"two":       "ab",
				"sys.Label": "user-label",
				"My Prop":   "spaced",
				"odd":       struct{}{},
			},
		},
		Sys: SystemProps{
			SequenceNumber:         42,
			EnqueuedSequenceNumber: 41,
			EnqueuedTime:           t0,
			ExpiresAt:              t0.Add(time.Hour),
			DeliveryCount:          1,
			Size:                   321,
			State:                  StateActive,
		},
	}
}

var evalParams = map[string]any{
	"@t":    t0,
	"@span": time.Hour,
	"@min":  time.Minute,
	"@i":    15,          // Go sends integers as int
	"@d":    float64(15), // JavaScript sends every number as double
	"@s":    "x",
	"@n":    nil,
	"@g":    testUUID,
	"q":     int64(15), // a key without '@'
}

// evalTri evaluates a filter and returns "T", "F", "U" (unknown), "E:Type"
// for an evaluation error or "C:..." for a compile error.
func evalTri(env *Env, src string) string {
	f, err := CompileSQL(src, evalParams)
	if err != nil {
		return "C:" + err.Error()
	}
	v, err := env.cond(f.expr)
	if err != nil {
		var ee *EvalError
		if !errors.As(err, &ee) {
			return "not an EvalError: " + err.Error()
		}
		return "E:" + ee.Type
	}
	switch v {
	case unknown:
		return "U"
	case isTrue:
		return "T"
	}
	return "F"
}

const (
	T         = "T"
	F         = "F"
	U         = "U"
	eFilter   = "E:" + ExcFilter
	eDivZero  = "E:" + ExcDivideByZero
	eOverflow = "E:" + ExcOverflow
	eRange    = "E:" + ExcArgumentOutOfRange
)

var evalTests = []struct {
	src, want string
}{
	// Comparisons, integers of every width against Int64 literals.
	{"Quantity = 15", T},
	{"Quantity <> 15", F},
	{"Quantity != 14", T},
	{"Quantity < 16", T},
	{"Quantity <= 15", T},
	{"Quantity > 15", F},
	{"Quantity >= 16", F},
	{"u8 = 7", T},
	{"i8 = -3", T},
	{"big = 1099511627776", T},
	{"1 = 1", T},
	{"1 = 0", F},

	// Numeric promotion: Int64 and Double mix as Double.
	{"Quantity = 15.0", T},
	{"price > 2", T},
	{"price = 2.5", T},
	{"f32 = 0.5", T},
	{"price * 2 = 5", T},
	{"u64 > 9223372036854775807", T}, // above Int64: read as Double
	{"Quantity = @d", T},
	{"Quantity = @i", T},
	{"Quantity = @q", T},
	{"1e2 = 100", T},

	// Arithmetic.
	{"Quantity + 5 = 20", T},
	{"Quantity - 20 = -5", T},
	{"big * 2 = 2199023255552", T},
	{"7 / 2 = 3", T}, // Int64 division truncates
	{"-7 / 2 = -3", T},
	{"7 % 3 = 1", T},
	{"-7 % 3 = -1", T},
	{"7.0 / 2 = 3.5", T},
	{"7 / 2.0 = 3.5", T},
	{"7.5 % 2 = 1.5", T},
	{"-Quantity = -15", T},
	{"+Quantity = 15", T},
	{"- -Quantity = 15", T},
	{"(Quantity + 5) * 2 = 40", T},
	{"2 + 3 * 4 = 14", T},
	{"(2 + 3) * 4 = 20", T},
	{"10 - 4 - 3 = 3", T},
	{"100 / 10 / 5 = 2", T},

	// Division by zero and overflow.
	{"Quantity / zero = 1", eDivZero},
	{"Quantity / 0 = 1", eDivZero},
	{"Quantity % 0 = 1", eDivZero},
	{"1.0 / 0 > 1000000", T}, // Double: +Infinity
	{"-1 / 0.0 < 0", T},
	{"0.0 / 0 = 0.0 / 0", F}, // NaN
	{"nan <> nan", T},
	{"nan = nan", F},
	{"nan < 1", F},
	{"nan >= 1", F},
	{"min / -1 = 0", eOverflow},
	{"min % -1 = 0", eOverflow},
	{"min - 1 > 0", T}, // Int64 wraps (unchecked C#)
	{"-min = min", T},
	{"9223372036854775807 + 1 < 0", T},
	{"-9223372036854775808 = min", T},

	// Strings: ordinal, case-sensitive.
	{"color = 'red'", T},
	{"color = 'RED'", F},
	{"color <> 'blue'", T},
	{"color < 's'", T},
	{"color > 'red '", F},
	{"color >= 'red'", T},
	{"color + 'dish' = 'reddish'", T},
	{"'a' + 'b' + 'c' = 'abc'", T},
	{"sym = 'sym'", T},
	{"ch = 'x'", T},
	{"'' = ''", T},

	// No conversion between strings and numbers (azure-docs #56144).
	{"qstr > 10", eFilter},
	{"qstr = 15", eFilter},
	{"Quantity = '15'", eFilter},
	{"color + 1 = 'red1'", eFilter},
	{"1 + color = 'red1'", eFilter},
	{"color - 'd' = 're'", eFilter},
	{"-color = 'red'", eFilter},
	{"+color = 'red'", eFilter},

	// Booleans: = and <> only.
	{"flag = TRUE", T},
	{"flag = FALSE", F},
	{"flag <> off", T},
	{"off = FALSE", T},
	{"TRUE = TRUE", T},
	{"flag > off", eFilter},
	{"flag = 1", eFilter},
	{"flag + 1 = 2", eFilter},
	{"-flag = 1", eFilter},
	{"TRUE", T},
	{"FALSE", F},

	// DateTime and TimeSpan.
	{"when = @t", T},
	{"when < sys.ExpiresAtUtc", T},
	{"sys.ExpiresAtUtc - when = @span", T},
	{"when + @span = sys.ExpiresAtUtc", T},
	{"@span + when = sys.ExpiresAtUtc", T},
	{"sys.ExpiresAtUtc - @span = when", T},
	{"sys.TimeToLive = @span", T},
	{"@span + @span > @span", T},
	{"@span - @min < @span", T},
	{"-@span < @min", T},
	{"+@span = @span", T},
	{"when - 1 = when", eFilter},
	{"when = 'x'", eFilter},
	{"when + when = when", eFilter},
	{"@span * 2 = @span", eFilter},
	{"@span = 3600", eFilter},

	// Guid: = and <> only.
	{"id = @g", T},
	{"id <> newid()", T},
	{"newid() = newid()", F},
	{"newid() <> @g", T},
	{"id < @g", eFilter},
	{"id = 'x'", eFilter},

	// Values of other types: only IS NULL and EXISTS.
	{"bin IS NOT NULL", T},
	{"EXISTS(bin)", T},
	{"bin = bin", eFilter},
	{"odd IS NOT NULL", T},
	{"odd = 1", eFilter},

	// Unknown (missing user property) and NULL.
	{"missing = 1", U},
	{"missing <> 1", U},
	{"missing = missing", U},
	{"nul = 1", U},
	{"nul = nul", U},
	{"color = NULL", U},
	{"NULL = NULL", U},
	{"color = @n", U},
	{"missing + 1 = 1", U},
	{"-missing = 1", U},
	{"color + missing = 'red'", U},
	{"missing / 0 = 1", U}, // unknown before the division is attempted
	{"missing = 'x' + 1", eFilter},
	{"NOT missing = 1", U},
	{"NOT nul = 1", U},
	{"missing > 'a' OR missing < 'a'", U},

	// IS NULL and EXISTS.
	{"missing IS NULL", T},
	{"missing IS NOT NULL", F},
	{"nul IS NULL", T},
	{"nul IS NOT NULL", F},
	{"color IS NULL", F},
	{"color IS NOT NULL", T},
	{"EXISTS(missing)", F},
	{"EXISTS(nul)", T},
	{"EXISTS(color)", T},
	{"EXISTS(COLOR)", T},
	{"NOT EXISTS(missing)", T},
	{"p('color') IS NOT NULL", T},
	{"p('missing') IS NULL", T},
	{"p(missing) IS NULL", T},
	{"sys.To IS NOT NULL", T},
	{"sys.ViaPartitionKey IS NULL", T},
	{"EXISTS(sys.To)", T},
	{"EXISTS(sys.DeadLetterSource)", F},

	// LIKE.
	{"color LIKE 'r%'", T},
	{"color LIKE 'R%'", F},
	{"color LIKE '_ed'", T},
	{"color LIKE '__'", F},
	{"color LIKE '____'", F},
	{"color LIKE 'red'", T},
	{"color LIKE 're'", F},
	{"color LIKE '%'", T},
	{"color LIKE '%%'", T},
	{"color LIKE '%e%'", T},
	{"color LIKE '%x%'", F},
	{"color LIKE 'r%d'", T},
	{"color LIKE 'r%e'", F},
	{"color LIKE '%d'", T},
	{"color NOT LIKE 'b%'", T},
	{"color NOT LIKE 'r%'", F},
	{"text LIKE 'ABC%'", T},
	{`text LIKE 'ABC\%' ESCAPE '\'`, T},
	{`color LIKE 'ABC\%' ESCAPE '\'`, F},
	{"text LIKE 'ABC!%' ESCAPE '!'", T},
	{"text LIKE 'AB!%' ESCAPE '!'", F},
	{"'A_C' LIKE 'A!_C' ESCAPE '!'", T},
	{"'ABC' LIKE 'A!_C' ESCAPE '!'", F},
	{"'a!b' LIKE 'a!!b' ESCAPE '!'", T},
	{"'a%b' LIKE 'a%%%b' ESCAPE '%'", T}, // a, escaped %, escaped b
	{"'a%xb' LIKE 'a%%%b' ESCAPE '%'", F},
	{"'a%b' LIKE 'a%%b' ESCAPE '%'", T},
	{"'ax' LIKE 'a!x' ESCAPE '!'", T},
	{"uni LIKE 'h_llo'", T},
	{"uni LIKE '%llo'", T},
	{"uni LIKE 'hé%'", T},
	{"'' LIKE ''", T},
	{"'' LIKE '%'", T},
	{"'' LIKE '_'", F},
	{"'aaa' LIKE 'a%a%a'", T},
	{"'aa' LIKE 'a%a%a'", F},
	{"'abcabc' LIKE '%bc%bc'", T},
	{"'abc' LIKE '%b_%'", T},
	{"'abxbc' LIKE 'a%bc'", T},
	{"'ab' LIKE 'a%_b'", F},
	{"'axyb' LIKE 'a_%_b'", T},
	{"'a%b' LIKE 'a%%b'", T},
	{"'xyz' LIKE '%_%_%_%'", T},
	{"'xy' LIKE '%_%_%_%'", F},
	{"color LIKE p('pat')", T},
	{"color LIKE 'r' + '%'", T},
	{"color LIKE @s", F},
	{"color LIKE sys.Label", F},
	{"sys.Label LIKE '%bus%'", T},
	{"missing LIKE 'x'", U},
	{"missing NOT LIKE 'x'", U},
	{"color LIKE missing", U},
	{"color LIKE 'x' ESCAPE missing", U},
	{"Quantity LIKE '1%'", eFilter},
	{"color LIKE 5", eFilter},
	{"color LIKE 'x' ESCAPE p('two')", eFilter},
	{"color LIKE 'x' ESCAPE 1", eFilter},
	{"color LIKE p('badpat') ESCAPE '!'", eFilter},

	// IN.
	{"color IN ('blue', 'red')", T},
	{"color IN ('blue')", F},
	{"color NOT IN ('blue')", T},
	{"color NOT IN ('red', 'blue')", F},
	{"missing IN ('a')", U},
	{"missing NOT IN ('a')", U},
	{"color IN ('blue', missing)", U},
	{"color IN ('red', missing)", T},
	{"color NOT IN ('blue', missing)", U},
	{"color IN (missing, 'red')", T},
	{"Quantity IN (1, 15.0)", T},
	{"Quantity IN (@i, @d)", T},
	{"Quantity IN (10 + 5)", T},
	{"color IN (1)", eFilter},
	{"color IN ('red', 1)", T}, // the first match ends the evaluation
	{"color IN ('blue', 1)", eFilter},
	{"sys.To IN ('Store5', 'orders')", T},

	// Property names are case-insensitive.
	{"COLOR = 'red'", T},
	{"quantity = 15", T},
	{"user.Color = 'red'", T},
	{"[My Prop] = 'spaced'", T},
	{"\"My Prop\" = 'spaced'", T},
	{"[my prop] = 'spaced'", T},

	// System properties (legacy names, case-insensitive).
	{"sys.MessageId = 'msg-1'", T},
	{"sys.messageid = 'msg-1'", T},
	{"sys.CorrelationId = '01020304-0506-0708-090a-0b0c0d0e0f10'", T},
	{"sys.To = 'orders'", T},
	{"sys.ReplyTo = 'replies'", T},
	{"sys.ReplyToSessionId = 'rs1'", T},
	{"sys.SessionId = 's1'", T},
	{"sys.Label = 'bus-label'", T},
	{"sys.ContentType = 'application/json'", T},
	{"sys.PartitionKey = 'pk'", T},
	{"sys.ViaPartitionKey = 'x'", U},
	{"sys.SequenceNumber = 42", T},
	{"sys.EnqueuedSequenceNumber = 41", T},
	{"sys.EnqueuedTimeUtc = @t", T},
	{"sys.ScheduledEnqueueTimeUtc - sys.EnqueuedTimeUtc = @min", T},
	{"sys.ExpiresAtUtc > sys.EnqueuedTimeUtc", T},
	{"sys.TimeToLive = @span", T},
	{"sys.DeliveryCount = 1", T},
	{"sys.LockedUntilUtc IS NULL", T},
	{"sys.LockToken IS NULL", T},
	{"sys.DeadLetterSource IS NULL", T},
	{"sys.Size = 321", T},
	{"sys.State = 'Active'", T},
	{"sys.ForcePersistence = FALSE", T},
	{"sys.SequenceNumber = '42'", eFilter},

	// Functions.
	{"p('My Prop') = 'spaced'", T},
	{"property('col' + 'or') = 'red'", T},
	{"p(1) = 1", eFilter},
	{"p(nul) IS NULL", T},
	{"p(NULL) = 1", U},

	// Larger conditions.
	{"(Quantity + 5) * 2 = 40 AND color IN ('red') AND NOT flag = FALSE", T},
	{"sys.Label LIKE '%bus%' OR user.tag IN ('queue', 'topic', 'subscription')", T},
	{"color = 'blue' OR Quantity > 10 AND price < 3", T},
	{"(color = 'blue' OR Quantity > 10) AND price > 3", F},
}

// evalSources returns every filter the evaluation tests use.
func evalSources() []string {
	var srcs []string
	for _, tt := range evalTests {
		srcs = append(srcs, tt.src)
	}
	return srcs
}

func TestEval(t *testing.T) {
	env := testEnv()
	for _, tt := range evalTests {
		if got := evalTri(env, tt.src); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.src, got, tt.want)
		}
	}
}

// TestTruthTables checks AND, OR and NOT over TRUE, FALSE and unknown,
// with the operands written both as comparisons and as constants.
func TestTruthTables(t *testing.T) {
	operand := map[string][]string{
		T: {"1 = 1", "TRUE"},
		F: {"1 = 0", "FALSE"},
		U: {"missing = 1", "nul <> 1"},
	}
	and := map[[2]string]string{
		{T, T}: T, {T, F}: F, {T, U}: U,
		{F, T}: F, {F, F}: F, {F, U}: F,
		{U, T}: U, {U, F}: F, {U, U}: U,
	}
	or := map[[2]string]string{
		{T, T}: T, {T, F}: T, {T, U}: T,
		{F, T}: T, {F, F}: F, {F, U}: U,
		{U, T}: T, {U, F}: U, {U, U}: U,
	}
	not := map[string]string{T: F, F: T, U: U}
	env := testEnv()
	for in, out := range not {
		for _, x := range operand[in] {
			if got := evalTri(env, "NOT "+x); got != out {
				t.Errorf("NOT %s (%s): got %s, want %s", in, x, got, out)
			}
		}
	}
	for _, tbl := range []struct {
		op    string
		table map[[2]string]string
	}{{"AND", and}, {"OR", or}} {
		for in, out := range tbl.table {
			for _, x := range operand[in[0]] {
				for _, y := range operand[in[1]] {
					src := x + " " + tbl.op + " " + y
					if got := evalTri(env, src); got != out {
						t.Errorf("%s %s %s (%s): got %s, want %s", in[0], tbl.op, in[1], src, got, out)
					}
				}
			}
		}
	}
	// Only TRUE matches.
	for in, want := range map[string]bool{T: true, F: false, U: false} {
		f, err := CompileSQL(operand[in][0], nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := f.Match(env); got != want || err != nil {
			t.Errorf("Match(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestShortCircuit(t *testing.T) {
	env := testEnv()
	tests := []struct{ src, want string }{
		{"1 = 0 AND 1 / 0 = 1", F},
		{"FALSE AND 1 / 0 = 1", F},
		{"1 = 1 OR 1 / 0 = 1", T},
		{"missing = 1 AND 1 / 0 = 1", eDivZero},
		{"missing = 1 OR 1 / 0 = 1", eDivZero},
		{"1 / 0 = 1 AND 1 = 0", eDivZero}, // left to right
		{"1 = 1 AND 1 / 0 = 1", eDivZero},
	}
	for _, tt := range tests {
		if got := evalTri(env, tt.src); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.src, got, tt.want)
		}
	}
}

func TestEvalErrorMessages(t *testing.T) {
	env := testEnv()
	tests := []struct{ src, typ, msg string }{
		{"Quantity / 0 = 1", "DivideByZeroException", "Attempted to divide by zero."},
		{"min / -1 = 0", "OverflowException", "Arithmetic operation resulted in an overflow."},
		{"qstr > 10", "FilterException", "Operator '>' cannot be applied to operands of type 'String' and 'Int64'."},
		{"Quantity != '15'", "FilterException", "Operator '<>' cannot be applied to operands of type 'Int64' and 'String'."},
		{"flag < off", "FilterException", "Operator '<' cannot be applied to operands of type 'Boolean' and 'Boolean'."},
		{"-color = 1", "FilterException", "Operator '-' cannot be applied to operand of type 'String'."},
		{"Quantity LIKE 'x'", "FilterException", "Operator 'LIKE' cannot be applied to operand of type 'Int64'."},
		{"p(1) = 1", "FilterException", "The argument of property() must be of type 'String', not 'Int64'."},
		{"color LIKE 'x' ESCAPE p('two')", "FilterException", "the ESCAPE character must be a string of length 1, found 'ab'"},
		{"when + @span * 0 = when", "FilterException", "Operator '*' cannot be applied to operands of type 'TimeSpan' and 'Int64'."},
	}
	for _, tt := range tests {
		f, err := CompileSQL(tt.src, evalParams)
		if err != nil {
			t.Errorf("%s: %v", tt.src, err)
			continue
		}
		ok, err := f.Match(env)
		var ee *EvalError
		if ok || !errors.As(err, &ee) {
			t.Errorf("%s: got %v, %v; want an EvalError", tt.src, ok, err)
			continue
		}
		if ee.Type != tt.typ || ee.Message != tt.msg {
			t.Errorf("%s: got %s: %s\nwant %s: %s", tt.src, ee.Type, ee.Message, tt.typ, tt.msg)
		}
		if want := "filter: " + tt.typ + ": " + tt.msg; err.Error() != want {
			t.Errorf("%s: Error() = %q, want %q", tt.src, err.Error(), want)
		}
	}
}

func TestDateTimeLimits(t *testing.T) {
	env := &Env{Msg: &message.Message{ApplicationProperties: map[string]any{
		"late":  time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC),
		"early": time.Date(1, 1, 1, 0, 30, 0, 0, time.UTC),
		"maxd":  time.Duration(math.MaxInt64),
		"mind":  time.Duration(math.MinInt64),
	}}}
	tests := []struct{ src, want string }{
		{"late + @span > late", eRange},
		{"late + @min > late", T},
		{"early - @span < early", eRange},
		{"late - early > @span", eOverflow}, // beyond a Go Duration
		{"maxd + @span > maxd", eOverflow},
		{"mind - @span < mind", eOverflow},
		{"-mind > maxd", eOverflow},
		{"late - mind > late", eRange},
	}
	for _, tt := range tests {
		if got := evalTri(env, tt.src); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.src, got, tt.want)
		}
	}
}

func TestIDForms(t *testing.T) {
	tests := []struct {
		id   any
		want string // sys.MessageId, or "" for NULL
	}{
		{"abc", "abc"},
		{"", ""},
		{nil, ""},
		{message.Symbol("sym"), "sym"},
		{testUUID, "01020304-0506-0708-090a-0b0c0d0e0f10"},
		{uint64(18446744073709551615), "18446744073709551615"},
		{[]byte{0xca, 0xfe}, "cafe"},
		{[]byte{}, ""},
		{3.5, ""}, // not an AMQP message-id type
	}
	for _, tt := range tests {
		env := &Env{Msg: &message.Message{MessageID: tt.id, CorrelationID: tt.id}}
		for _, name := range []string{"sys.MessageId", "sys.CorrelationId"} {
			want := "T"
			src := name + " = '" + tt.want + "'"
			if tt.want == "" {
				src = name + " IS NULL"
			}
			if got := evalTri(env, src); got != want {
				t.Errorf("%T %v: %s: got %s", tt.id, tt.id, src, got)
			}
		}
	}
}

func TestSystemPropsFallbacks(t *testing.T) {
	// A nil message reads as an empty one.
	env := &Env{}
	for _, src := range []string{
		"missing IS NULL", "sys.To IS NULL", "sys.MessageId IS NULL", "sys.TimeToLive IS NULL",
		"sys.ScheduledEnqueueTimeUtc IS NULL", "sys.PartitionKey IS NULL", "NOT EXISTS(x)",
		"sys.SequenceNumber = 0", "sys.State = 'Active'",
	} {
		if got := evalTri(env, src); got != T {
			t.Errorf("nil message: %s: got %s", src, got)
		}
	}
	// Broker values take precedence over the message's own.
	env = &Env{
		Msg: &message.Message{TTL: time.Hour, Annotations: map[string]any{annScheduledEnqueue: t0, annViaPartitionKey: message.Symbol("v")}},
		Sys: SystemProps{TimeToLive: time.Minute, ScheduledEnqueueTime: t0.Add(time.Hour), LockToken: lockToken,
			LockedUntil: t0, DeadLetterSource: "topic/Subscriptions/s", State: StateDeferred, ForcePersistence: true},
	}
	for _, src := range []string{
		"sys.TimeToLive = @min", "sys.ScheduledEnqueueTimeUtc = @t + @span", "sys.ViaPartitionKey = 'v'",
		"sys.LockToken IS NOT NULL", "sys.LockedUntilUtc = @t", "sys.DeadLetterSource = 'topic/Subscriptions/s'",
		"sys.State = 'Deferred'", "sys.ForcePersistence = TRUE",
	} {
		if got := evalTri(env, src); got != T {
			t.Errorf("%s: got %s", src, got)
		}
	}
	if StateScheduled.String() != "Scheduled" || MessageState(9).String() != "9" {
		t.Errorf("MessageState names")
	}
	names := SystemPropertyNames()
	if len(names) != int(numSysProps)-1 || names[0] != "MessageId" {
		t.Errorf("SystemPropertyNames() = %v", names)
	}
	for _, n := range names {
		if _, err := CompileSQL("sys."+n+" IS NULL", nil); err != nil {
			t.Errorf("sys.%s: %v", n, err)
		}
	}
}

// TestCaseInsensitiveLookup checks that an exact match wins and that a
// case-insensitive tie is broken deterministically.
func TestCaseInsensitiveLookup(t *testing.T) {
	env := &Env{Msg: &message.Message{ApplicationProperties: map[string]any{"Color": "b", "COLOR": "a", "color": "c"}}}
	for src, want := range map[string]string{
		"color = 'c'": T, "Color = 'b'": T, "COLOR = 'a'": T, "cOLOR = 'a'": T, // "COLOR" < "Color" < "color"
	} {
		for i := 0; i < 20; i++ { // map order varies between runs
			if got := evalTri(env, src); got != want {
				t.Fatalf("%s: got %s", src, got)
			}
		}
	}
}

// TestQuirks covers the §2.9 items that concern the rule language itself.
func TestQuirks(t *testing.T) {
	env := testEnv()

	// 2. JavaScript sends every numeric parameter as a double, Go sends
	// integers as int and floats as double: all compare numerically.
	for _, p := range []any{15, int32(15), int64(15), float64(15), float32(15)} {
		f, err := CompileSQL("Quantity = @q", map[string]any{"@q": p})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := f.Match(env); !ok || err != nil {
			t.Errorf("@q = %T %v: got %v, %v", p, p, ok, err)
		}
	}
	f, err := CompileSQL("price = @p", map[string]any{"@p": 2.500000})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.Match(env); !ok {
		t.Errorf("double parameter did not match")
	}

	// 3. sys.Label is the documented name of the Subject; sys.Subject is
	// accepted as an alias and printed as sys.Label.
	for src, want := range map[string]string{
		"sys.Label = 'bus-label'": T, "sys.Subject = 'bus-label'": T, "sys.Subject = sys.Label": T,
		"Label = 'bus-label'": U, // a user property named Label
	} {
		if got := evalTri(env, src); got != want {
			t.Errorf("%s: got %s, want %s", src, got, want)
		}
	}

	// 4. property('sys.X') does not reach system properties: it reads the
	// user property named "sys.X".
	for src, want := range map[string]string{
		"property('sys.Label') = 'user-label'": T,
		"property('sys.Label') = sys.Label":    F,
		"p('sys.To') IS NULL":                  T,
		"[sys.Label] = 'user-label'":           T,
	} {
		if got := evalTri(env, src); got != want {
			t.Errorf("%s: got %s, want %s", src, got, want)
		}
	}

	// 6. The $Default rule's TrueFilter matches everything, FalseFilter
	// nothing, whatever the message; their text is the service's.
	for _, e := range []*Env{env, {}, {Msg: &message.Message{}}, nil} {
		if ok, err := TrueFilter.Match(e); !ok || err != nil {
			t.Errorf("TrueFilter: %v, %v", ok, err)
		}
		if ok, err := FalseFilter.Match(e); ok || err != nil {
			t.Errorf("FalseFilter: %v, %v", ok, err)
		}
	}
	if TrueFilter.Text() != "1=1" || FalseFilter.Text() != "1=0" || TrueFilter.String() != "1 = 1" {
		t.Errorf("TrueFilter %q %q, FalseFilter %q", TrueFilter.Text(), TrueFilter, FalseFilter.Text())
	}

	// 7. Each matching rule with an action gets its own copy: applying
	// actions never changes the message they are given.
	a1, _ := CompileAction("SET color = 'blue'; REMOVE Quantity", nil)
	a2, _ := CompileAction("SET color = color + '!'", nil)
	m1, err1 := a1.Apply(env)
	m2, err2 := a2.Apply(env)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if m1.ApplicationProperties["color"] != "blue" || m2.ApplicationProperties["color"] != "red!" ||
		env.Msg.ApplicationProperties["color"] != "red" || env.Msg.ApplicationProperties["Quantity"] != int32(15) {
		t.Errorf("copies: %v %v original %v", m1.ApplicationProperties["color"], m2.ApplicationProperties["color"], env.Msg.ApplicationProperties["color"])
	}

	// 9. Evaluation failures are typed, so the broker can dead-letter with
	// the exception type as the reason.
	f, _ = CompileSQL("qstr > 10", nil)
	_, err = f.Match(env)
	var ee *EvalError
	if !errors.As(err, &ee) || ee.Type != "FilterException" {
		t.Errorf("evaluation error %v", err)
	}
}

func TestMatcher(t *testing.T) {
	var ms []Matcher = []Matcher{TrueFilter, &CorrelationFilter{To: "orders"}}
	for _, m := range ms {
		if ok, err := m.Match(testEnv()); !ok || err != nil {
			t.Errorf("%T: %v %v", m, ok, err)
		}
	}
	f, _ := CompileSQL("a = 1", nil)
	if _, ok := f.Expr().(*BinaryExpr); !ok {
		t.Errorf("Expr() = %T", f.Expr())
	}
	if v := f.Expr().(*BinaryExpr).Y.(*Literal).Value(); v != int64(1) {
		t.Errorf("Literal.Value() = %#v", v)
	}
}

func TestParams(t *testing.T) {
	env := testEnv()
	tests := []struct {
		params map[string]any
		src    string
		want   string
	}{
		{map[string]any{"@stringVar": "red"}, "color = @stringVar", T},
		{map[string]any{"stringVar": "red"}, "color = @stringVar", T},
		{map[string]any{"@STRINGVAR": "red"}, "color = @stringVar", T},
		{map[string]any{"@a": "red", "a": "blue"}, "color = @a", T}, // the '@' key wins
		{map[string]any{"@u": testUUID}, "id = @u", T},
		{map[string]any{"@c": message.Char('r'), "@y": message.Symbol("red")}, "color = @y AND @c = 'r'", T},
		{map[string]any{"@x": uint64(math.MaxUint64)}, "@x > 1e19", T},
		{map[string]any{"@x": []int{1}}, "a = @x", "C:filter: 1:5: parameter @x has unsupported type []int"},
		{map[string]any{"@x": map[string]any{}}, "a = @x", "C:filter: 1:5: parameter @x has unsupported type map[string]interface {}"},
	}
	for _, tt := range tests {
		f, err := CompileSQL(tt.src, tt.params)
		got := ""
		if err != nil {
			got = "C:" + err.Error()
		} else {
			v, err := env.cond(f.expr)
			switch {
			case err != nil:
				got = "E:" + err.Error()
			case v == isTrue:
				got = T
			default:
				got = "not true"
			}
		}
		if got != tt.want {
			t.Errorf("%s %v: got %s, want %s", tt.src, tt.params, got, tt.want)
		}
	}
}

// TestConcurrentMatch runs one compiled filter from many goroutines (run
// with -race).
func TestConcurrentMatch(t *testing.T) {
	f, err := CompileSQL("color LIKE 'r%' AND Quantity IN (1, 15) AND p('col' + 'or') LIKE p('pat') AND sys.Size > 0", nil)
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if ok, err := f.Match(env); !ok || err != nil {
					t.Errorf("Match: %v %v", ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestMatchDoesNotAllocate(t *testing.T) {
	env := testEnv()
	for _, src := range []string{
		"color = 'red'",
		"Quantity > 10 AND price < 3.5 AND color LIKE 'r%' AND sys.Label LIKE '%bus%'",
		"color IN ('blue', 'green', 'red') AND NOT missing IS NOT NULL AND EXISTS(flag)",
		"sys.To = 'orders' AND sys.SequenceNumber > 0 AND when < @t + @span",
		"MISSING = 'x' OR COLOR IS NOT NULL", // case-insensitive fallback
	} {
		f, err := CompileSQL(src, evalParams)
		if err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if ok, err := f.Match(env); !ok || err != nil {
				t.Fatalf("%s: %v %v", src, ok, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Match", src, allocs)
		}
	}
}

func TestLikePatternCompile(t *testing.T) {
	// Constant patterns are compiled once, at CompileSQL.
	f, err := CompileSQL("a LIKE 'x%' AND b LIKE @s ESCAPE '!' AND c LIKE d", evalParams)
	if err != nil {
		t.Fatal(err)
	}
	var compiled []bool
	Inspect(f.Expr(), func(n Node) bool {
		if l, ok := n.(*LikeExpr); ok {
			compiled = append(compiled, l.pat != nil)
		}
		return true
	})
	if got := strings.Trim(strings.Join(strings.Fields(strings.Trim(fmtBools(compiled), "[]")), ","), ","); got != "true,true,false" {
		t.Errorf("compiled patterns: %s", got)
	}
}

func fmtBools(bs []bool) string {
	var parts []string
	for _, b := range bs {
		if b {
			parts = append(parts, "true")
		} else {
			parts = append(parts, "false")
		}
	}
	return strings.Join(parts, " ")
}

func TestEqualFold(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"", "", true},
		{"color", "COLOR", true},
		{"Color", "cOLOr", true},
		{"color", "colour", false},
		{"a", "ab", false},
		{"ab", "a", false},
		{"a_1", "A_1", true},
		{"a[", "A{", false}, // '[' and '{' differ by the case bit but are not letters
		{"é", "É", true},
		{"größe", "GRÖßE", true},
		{"größe", "GRÖSSE", false}, // no multi-character mappings, as in .NET
		{"k", "\u212a", false},     // Kelvin sign: upper case of itself
		{"ſ", "s", true},           // long s upper-cases to S
		{"xé", "XÉ", true},
		{"xé", "XÈ", false},
	}
	for _, tt := range tests {
		if got := equalFold(tt.a, tt.b); got != tt.want {
			t.Errorf("equalFold(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
