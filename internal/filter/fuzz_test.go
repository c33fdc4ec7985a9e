package filter

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// The seed corpora live in testdata/fuzz/FuzzParse and
// testdata/fuzz/FuzzEval and are replayed by every go test run.

// FuzzParse checks that parsing never panics, and that whatever parses
// prints as text that parses back to the same tree and prints the same
// way. Action text is fuzzed the same way, from the same inputs.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, src string) {
		if x, err := parseFilter(src); err == nil {
			printed := x.String()
			y, err := parseFilter(printed)
			if err != nil {
				t.Fatalf("%q printed as %q, which does not parse: %v", src, printed, err)
			}
			if a, b := dump(x), dump(y); a != b {
				t.Fatalf("%q printed as %q:\n tree %s\nreparsed %s", src, printed, a, b)
			}
			if again := y.String(); again != printed {
				t.Fatalf("%q: print is not a fixed point: %q, then %q", src, printed, again)
			}
		} else {
			checkErrorList(t, src, err)
		}
		if stmts, err := parseAction(src); err == nil {
			a := &Action{stmts: stmts}
			printed := a.String()
			again, err := parseAction(printed)
			if err != nil {
				t.Fatalf("action %q printed as %q, which does not parse: %v", src, printed, err)
			}
			if x, y := dumpStmts(stmts), dumpStmts(again); x != y {
				t.Fatalf("action %q printed as %q:\n tree %s\nreparsed %s", src, printed, x, y)
			}
		} else {
			checkErrorList(t, src, err)
		}
	})
}

func checkErrorList(t *testing.T, src string, err error) {
	t.Helper()
	var list ErrorList
	if !errors.As(err, &list) || len(list) == 0 || len(list) > maxErrors {
		t.Fatalf("%q: error %v is not a non-empty ErrorList", src, err)
	}
	for _, e := range list {
		if e.Pos.Offset < 0 || e.Pos.Offset > len(src) || e.Pos.Line < 1 || e.Pos.Column < 1 {
			t.Fatalf("%q: bad position %+v", src, e.Pos)
		}
	}
}

// FuzzEval compiles the input as a filter and as an action and evaluates
// them against a fixed message: nothing may panic, a failure must be an
// *EvalError, and evaluation must be deterministic for filters that do
// not call newid().
func FuzzEval(f *testing.F) {
	f.Fuzz(func(t *testing.T, src string) {
		env := testEnv()
		if flt, err := CompileSQL(src, evalParams); err == nil {
			ok1, err1 := flt.Match(env)
			checkEvalError(t, src, err1)
			ok2, err2 := flt.Match(env)
			if ok1 != ok2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("%q: not deterministic: %v %v, then %v %v", src, ok1, err1, ok2, err2)
			}
		}
		if act, err := CompileAction(src, evalParams); err == nil {
			m, err := act.Apply(env)
			checkEvalError(t, src, err)
			if err == nil && m == nil {
				t.Fatalf("%q: Apply returned neither a message nor an error", src)
			}
			if env.Msg.ApplicationProperties["color"] != "red" || env.Msg.To != "orders" {
				t.Fatalf("%q: Apply modified its input", src)
			}
		}
	})
}

func checkEvalError(t *testing.T, src string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ee *EvalError
	if !errors.As(err, &ee) || ee.Type == "" || ee.Message == "" {
		t.Fatalf("%q: error %v is not a complete *EvalError", src, err)
	}
}

// TestRandomExpressions generates random well-formed filters from the
// grammar, with random spacing and case, and checks that each compiles,
// round-trips through its canonical text, and evaluates without panicking.
// It complements FuzzParse, whose byte-level mutations rarely build deep
// valid expressions.
func TestRandomExpressions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	sp := func() string { return pick(" ", "  ", "\n", "\t ") }
	kw := func(s string) string {
		if r.IntN(2) == 0 {
			return strings.ToLower(s)
		}
		return s
	}
	var value func(d int) string
	var cond func(d int) string
	prop := func() string {
		return pick("color", "Quantity", "price", "missing", "nul", "flag", "when", "[My Prop]", `"text"`, "user.uni",
			"sys.Label", "sys.messageid", "sys.SequenceNumber", "sys.EnqueuedTimeUtc", "sys.TimeToLive", "p('color')", "property('qstr')")
	}
	value = func(d int) string {
		if d <= 0 || r.IntN(3) == 0 {
			return pick(prop(), "1", "-7", "2.5", "1e3", "'red'", "'it''s'", "''", kw("TRUE"), kw("NULL"), "@t", "@span", "@d", "@s", "newid()", "9223372036854775807", "-9223372036854775808")
		}
		switch r.IntN(4) {
		case 0:
			return pick("-", "+") + value(d-1)
		case 1:
			return "(" + value(d-1) + ")"
		}
		return value(d-1) + sp() + pick("+", "-", "*", "/", "%") + sp() + value(d-1)
	}
	cond = func(d int) string {
		if d <= 0 {
			return value(0) + pick("=", "<>", "!=", "<", "<=", ">", ">=") + value(0)
		}
		switch r.IntN(9) {
		case 0:
			return cond(d-1) + sp() + kw("AND") + sp() + cond(d-1)
		case 1:
			return cond(d-1) + sp() + kw("OR") + sp() + cond(d-1)
		case 2:
			return kw("NOT") + sp() + cond(d-1)
		case 3:
			return "(" + cond(d-1) + ")"
		case 4:
			s := value(d-1) + sp() + pick("", kw("NOT")+" ") + kw("LIKE") + sp() + pick("'r%'", "'%_'", "'a!%' "+kw("ESCAPE")+" '!'", "@s", value(d-1))
			return s
		case 5:
			return value(d-1) + sp() + pick("", kw("NOT")+" ") + kw("IN") + " (" + value(d-1) + ", " + value(d-1) + ")"
		case 6:
			return prop() + sp() + kw("IS") + pick(" ", " "+kw("NOT")+" ") + kw("NULL")
		case 7:
			return kw("EXISTS") + "(" + pick("color", "missing", "sys.To", "[My Prop]") + ")"
		}
		return value(d-1) + sp() + pick("=", "<>", "<", ">=") + sp() + value(d-1)
	}
	env := testEnv()
	compiled := 0
	for i := 0; i < 3000; i++ {
		src := cond(r.IntN(6))
		f, err := CompileSQL(src, evalParams)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || utf16Len(src) <= MaxTextLength && !strings.Contains(err.Error(), "nested too deeply") {
				t.Errorf("%q: %v", src, err)
			}
			continue
		}
		compiled++
		roundTripFilter(t, src)
		_, err = f.Match(env)
		checkEvalError(t, src, err)
	}
	if compiled < 2500 {
		t.Errorf("only %d of 3000 generated filters compiled", compiled)
	}
}
