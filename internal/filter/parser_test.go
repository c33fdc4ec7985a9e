package filter

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// dump prints a syntax tree as an S-expression, without positions, so two
// trees can be compared structurally.
func dump(n Node) string {
	var b strings.Builder
	dumpTo(&b, n)
	return b.String()
}

func dumpTo(b *strings.Builder, n Node) {
	list := func(head string, kids ...Node) {
		b.WriteString("(" + head)
		for _, k := range kids {
			b.WriteByte(' ')
			dumpTo(b, k)
		}
		b.WriteByte(')')
	}
	switch n := n.(type) {
	case nil:
		b.WriteString("nil")
	case *Property:
		fmt.Fprintf(b, "(prop %d %q)", n.Scope, n.Name)
	case *Param:
		b.WriteString("@" + n.Name)
	case *Literal:
		switch n.Kind {
		case INT:
			fmt.Fprintf(b, "(INT %d)", n.val.i)
		case FLOAT:
			fmt.Fprintf(b, "(FLOAT %s %v)", strconv.FormatFloat(n.val.f, 'g', -1, 64), math.Signbit(n.val.f))
		case STRING:
			fmt.Fprintf(b, "(STRING %q)", n.val.s)
		default:
			b.WriteString(n.Kind.String())
		}
	case *Call:
		kids := make([]Node, len(n.Args))
		for i, a := range n.Args {
			kids[i] = a
		}
		list(fmt.Sprintf("call%d", n.Func), kids...)
	case *UnaryExpr:
		list(n.Op.String(), n.X)
	case *BinaryExpr:
		list(n.Op.String(), n.X, n.Y)
	case *LikeExpr:
		var esc Node
		if n.Escape != nil {
			esc = n.Escape
		}
		list(fmt.Sprintf("LIKE not=%v", n.Not), n.X, n.Pattern, esc)
	case *InExpr:
		kids := []Node{n.X}
		for _, e := range n.List {
			kids = append(kids, e)
		}
		list(fmt.Sprintf("IN not=%v", n.Not), kids...)
	case *IsNullExpr:
		list(fmt.Sprintf("ISNULL not=%v", n.Not), n.X)
	case *ExistsExpr:
		list("EXISTS", n.Prop)
	case *SetStmt:
		list("SET", n.Prop, n.Value)
	case *RemoveStmt:
		list("REMOVE", n.Prop)
	default:
		fmt.Fprintf(b, "?%T", n)
	}
}

func dumpStmts(stmts []Stmt) string {
	parts := make([]string, len(stmts))
	for i, s := range stmts {
		parts[i] = dump(s)
	}
	return strings.Join(parts, " ")
}

// Inline expected errors, as in go/parser's error tests: a comment
// /*ERROR "regexp"*/ stands immediately before the character where the
// error is reported. The comments are removed before compiling (the
// language has no comments of its own).
var errorMarker = regexp.MustCompile(`/\*ERROR "((?:[^"\\]|\\.)*)"\*/`)

type expectedError struct {
	offset int
	re     *regexp.Regexp
}

func stripMarkers(t *testing.T, src string) (string, []expectedError) {
	t.Helper()
	var b strings.Builder
	var want []expectedError
	last := 0
	for _, m := range errorMarker.FindAllStringSubmatchIndex(src, -1) {
		b.WriteString(src[last:m[0]])
		pat, err := strconv.Unquote(`"` + src[m[2]:m[3]] + `"`)
		if err != nil {
			t.Fatalf("bad marker in %q: %v", src, err)
		}
		want = append(want, expectedError{offset: b.Len(), re: regexp.MustCompile(pat)})
		last = m[1]
	}
	b.WriteString(src[last:])
	return b.String(), want
}

func checkErrors(t *testing.T, marked string, compile func(string) error) {
	t.Helper()
	src, want := stripMarkers(t, marked)
	err := compile(src)
	var list ErrorList
	if err != nil && !errors.As(err, &list) {
		t.Errorf("%q: error %v is not an ErrorList", src, err)
		return
	}
	found := make([]bool, len(list))
	for _, w := range want {
		ok := false
		for i, e := range list {
			if !found[i] && e.Pos.Offset == w.offset && w.re.MatchString(e.Msg) {
				found[i], ok = true, true
				break
			}
		}
		if !ok {
			t.Errorf("%q: missing error at offset %d matching %q; got %v", src, w.offset, w.re, list)
		}
	}
	for i, e := range list {
		if !found[i] {
			t.Errorf("%q: unexpected error at offset %d: %s", src, e.Pos.Offset, e.Msg)
		}
	}
}

var testParams = map[string]any{"@p": int64(1), "@s": "x", "@g": nil}

func TestFilterErrors(t *testing.T) {
	tests := []string{
		`color = (1 + /*ERROR "^expected expression, found '\\)'$"*/)`,
		`/*ERROR "^expected condition, found value color$"*/color`,
		`/*ERROR "expected condition, found value NULL"*/NULL`,
		`/*ERROR "expected condition, found value a \\+ 1"*/a + 1`,
		`a = 1 /*ERROR "^expected end of condition, found 'b'$"*/b`,
		`a = 1 /*ERROR "expected end of condition, found 'ESCAPE'"*/ESCAPE 'x'`,
		`a = 1 /*ERROR "expected end of condition, found '\\)'"*/)`,
		`/*ERROR "^expected value, found condition a = 1$"*/a = 1 = 2`,
		`(/*ERROR "expected value, found condition a = 1"*/a = 1) = TRUE`,
		`/*ERROR "expected value, found condition EXISTS\\(a\\)"*/EXISTS(a) + 1 = 2`,
		`a = 1 AND /*ERROR "expected condition, found value b"*/b`,
		`/*ERROR "expected condition, found value 'x'"*/'x' OR a = 1`,
		`NOT /*ERROR "expected condition, found value 5"*/5`,
		`a = /*ERROR "expected expression, found 'NOT'"*/NOT b = 1`,
		`sys./*ERROR "^unknown system property sys.Foo$"*/Foo = 1`,
		`sys./*ERROR "unknown system property sys.A"*/A = 1 AND sys./*ERROR "unknown system property sys.B"*/B = 2`,
		`/*ERROR "unknown scope foo"*/foo.bar = 1`,
		`/*ERROR "unknown function now"*/now() = 1`,
		`a NOT /*ERROR "expected LIKE or IN after NOT, found '='"*/= 1`,
		`a IN /*ERROR "expected '\\(', found '1'"*/1`,
		`a IN (/*ERROR "expected expression, found '\\)'"*/)`,
		`a IN (1, /*ERROR "expected value, found condition b = 2"*/b = 2)`,
		`a IN (1 /*ERROR "expected '\\)', found end of text"*/`,
		`/*ERROR "IS NULL applies to a property, found 1"*/1 IS NULL`,
		`/*ERROR "IS NULL applies to a property, found @p"*/@p IS NULL`,
		`a IS /*ERROR "expected 'NULL', found 'TRUE'"*/TRUE`,
		`EXISTS(/*ERROR "expected property name, found '1'"*/1)`,
		`EXISTS /*ERROR "expected '\\(', found 'a'"*/a`,
		`a = /*ERROR "integer constant 9223372036854775808 overflows Int64"*/9223372036854775808`,
		`a = -/*ERROR "integer constant 9223372036854775809 overflows Int64"*/9223372036854775809`,
		`a = /*ERROR "numeric constant 1e999 out of range for Double"*/1e999`,
		`a = /*ERROR "string literal not terminated"*/'abc`,
		`a = /*ERROR "delimited identifier not terminated"*/[abc`,
		`a = 1 /*ERROR "illegal character U\\+0024 '\\$'"*/$`,
		`a = 1 AND /*ERROR "expected expression, found end of text"*/`,
		`/*ERROR "expected expression, found end of text"*/`,
		`   /*ERROR "expected expression, found end of text"*/`,
		`/*ERROR "empty property name"*/[] = 1`,
		`user./*ERROR "expected property name, found string 'x'"*/'x' = 1`,
		`p('a'/*ERROR "expected '\\)', found ','"*/, 'b') = 1`,
		`newid(/*ERROR "expected '\\)', found '1'"*/1) = @g`,
		`p(/*ERROR "expected value, found condition a = 1"*/a = 1) = 1`,
		`a = /*ERROR "no value for parameter @missing"*/@missing`,
		`a = /*ERROR "no value for parameter @x"*/@x OR b = /*ERROR "no value for parameter @y"*/@y`,
		`a LIKE /*ERROR "ESCAPE character must be a string of length 1, found 'ab'"*/'x' ESCAPE 'ab'`,
		`a LIKE /*ERROR "ESCAPE character must be a string of length 1, found ''"*/'x' ESCAPE ''`,
		`a LIKE /*ERROR "the LIKE pattern ends with the escape character"*/'x!' ESCAPE '!'`,
		`a LIKE /*ERROR "ends with the escape character"*/@s ESCAPE 'x'`,
		"a = 1 AND\n  /*ERROR \"expected condition, found value b\"*/b",
		// The service's own examples parse.
		`sys.To=[parameters('bar')] OR sys.MessageId IS NULL`,
		`"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName" = 'account'`,
		`MessageID=@p OR MessageID=@s`,
		`SomeProperty LIKE 'O%'`,
		`sys.Label LIKE '%bus%' OR user.tag IN ('queue', 'topic', 'subscription')`,
		`sys.To NOT IN ('Store1','Store2','Store3','Store4','Store5','Store6','Store7','Store8') OR StoreId NOT IN ('Store1','Store2')`,
		`TRUE`,
		`1=1`,
		`set = 1 AND remove = 2`, // SET and REMOVE are names in filters
	}
	for _, src := range tests {
		checkErrors(t, src, func(s string) error {
			_, err := CompileSQL(s, testParams)
			return err
		})
	}
}

func TestActionErrors(t *testing.T) {
	tests := []string{
		`/*ERROR "expected SET or REMOVE, found 'x'"*/x = 1`,
		`/*ERROR "expected SET or REMOVE, found end of text"*/`,
		`SET /*ERROR "cannot SET read-only system property sys.SequenceNumber"*/sys.SequenceNumber = 1`,
		`REMOVE /*ERROR "cannot REMOVE read-only system property sys.EnqueuedTimeUtc"*/sys.enqueuedtimeutc`,
		`SET sys./*ERROR "unknown system property sys.Nope"*/Nope = 1`,
		`SET a /*ERROR "expected '=', found '1'"*/1`,
		`SET a = /*ERROR "expected value, found condition b = 1"*/b = 1`,
		`SET a = 1 /*ERROR "expected SET or REMOVE, found ','"*/, SET b = 2`,
		`SET a = 1;/*ERROR "expected SET or REMOVE, found ';'"*/;`,
		`SET /*ERROR "expected property name, found '1'"*/1 = 1`,
		`SET p/*ERROR "expected '=', found '\\('"*/('x') = 1`,
		`SET a = /*ERROR "no value for parameter @nope"*/@nope`,
		`SET /*ERROR "expected property name, found 'SET'"*/SET = 1`,
		// Accepted by the service.
		`SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';`,
		`SET MessageID=@p SET MessageID=@s`,
		`SET sys.To = 'Entity'`,
		`SET Label = 'test'`,
		`SET [set] = 1; REMOVE [remove]`,
	}
	for _, src := range tests {
		checkErrors(t, src, func(s string) error {
			_, err := CompileAction(s, testParams)
			return err
		})
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := CompileSQL("color = (1 +)", nil)
	if got, want := fmt.Sprint(err), "filter: 1:13: expected expression, found ')'"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	_, err = CompileSQL("sys.A = 1 AND\nsys.B = 2 AND sys.C = 3", nil)
	if got, want := fmt.Sprint(err), "filter: 1:5: unknown system property sys.A (and 2 more errors)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 3 || list[1].Pos.String() != "2:5" {
		t.Errorf("error list %v", list)
	}
	if (ErrorList{}).Err() != nil {
		t.Errorf("empty ErrorList.Err() != nil")
	}
}

func TestLimits(t *testing.T) {
	// Text length, counted in UTF-16 units.
	ok := "a = '" + strings.Repeat("x", MaxTextLength-6) + "'"
	if _, err := CompileSQL(ok, nil); err != nil {
		t.Errorf("%d characters: %v", len(ok), err)
	}
	if _, err := CompileSQL(ok+" ", nil); err == nil || !strings.Contains(err.Error(), "1:1025: text longer than 1024 characters") {
		t.Errorf("1025 characters: %v", err)
	}
	astral := "a = '" + strings.Repeat("𝄞", 510) + "'" // 6 + 1020 units
	if _, err := CompileSQL(astral, nil); err == nil {
		t.Errorf("astral characters count twice: no error")
	}
	if _, err := CompileAction("SET a = '"+strings.Repeat("y", MaxTextLength)+"'", nil); err == nil {
		t.Errorf("long action: no error")
	}

	// Nesting depth.
	nest := func(n int) string {
		return strings.Repeat("(", n) + "a = 1" + strings.Repeat(")", n)
	}
	if _, err := CompileSQL(nest(MaxDepth), nil); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	_, err := CompileSQL(nest(MaxDepth+1), nil)
	if err == nil || !strings.Contains(err.Error(), "1:65: expression nested too deeply (limit 64)") {
		t.Errorf("depth %d: %v", MaxDepth+1, err)
	}
	if _, err := CompileSQL(strings.Repeat("NOT ", MaxDepth+1)+"a = 1", nil); err == nil {
		t.Errorf("deep NOT: no error")
	}
	if _, err := CompileSQL("a = "+strings.Repeat("-", MaxDepth+1)+"b", nil); err == nil {
		t.Errorf("deep unary minus: no error")
	}
	if _, err := CompileSQL("a = "+strings.Repeat("p(", MaxDepth+1)+"'x'"+strings.Repeat(")", MaxDepth+1), nil); err == nil {
		t.Errorf("deep calls: no error")
	}
	// A long flat chain is not nesting.
	chain := "a = 0" + strings.Repeat(" OR a = 1", 100)
	if _, err := CompileSQL(chain, nil); err != nil {
		t.Errorf("flat chain: %v", err)
	}

	// Statements per action.
	stmts := strings.Repeat("SET a = 1;", MaxStatements)
	if _, err := CompileAction(stmts, nil); err != nil {
		t.Errorf("%d statements: %v", MaxStatements, err)
	}
	_, err = CompileAction(stmts+"REMOVE b", nil)
	if err == nil || !strings.Contains(err.Error(), "too many statements (limit 32)") {
		t.Errorf("%d statements: %v", MaxStatements+1, err)
	}

	// At most maxErrors errors are collected.
	many := strings.Repeat("sys.X = 1 AND ", 20) + "a = 1"
	_, err = CompileSQL(many, nil)
	var list ErrorList
	if !errors.As(err, &list) || len(list) != maxErrors {
		t.Errorf("many errors: got %d, want %d", len(list), maxErrors)
	}

	// Invalid UTF-8.
	if _, err := CompileSQL("a = 'x\xff'", nil); err == nil || !strings.Contains(err.Error(), "1:7: invalid UTF-8") {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

// printTests are input and canonical text; the canonical text is also a
// fixed point (it prints as itself).
var printTests = []struct{ src, want string }{
	{"color='red'", "color = 'red'"},
	{"a!=1", "a <> 1"},
	{"a<>1 and b>=2 or c<=3", "a <> 1 AND b >= 2 OR c <= 3"},
	{"a=1 and (b=2 or c=3)", "a = 1 AND (b = 2 OR c = 3)"},
	{"(a=1 and b=2) or c=3", "a = 1 AND b = 2 OR c = 3"},
	{"a=1 or (b=2 or c=3)", "a = 1 OR (b = 2 OR c = 3)"},
	{"(a=1 or b=2) or c=3", "a = 1 OR b = 2 OR c = 3"},
	{"a=1 and (b=2 and c=3)", "a = 1 AND (b = 2 AND c = 3)"},
	{"not (a=1 and b=2)", "NOT (a = 1 AND b = 2)"},
	{"not a=1 and b=2", "NOT a = 1 AND b = 2"},
	{"not not a = 1", "NOT NOT a = 1"},
	{"a - (b - c) = 1", "a - (b - c) = 1"},
	{"(a - b) - c = 1", "a - b - c = 1"},
	{"a * (b + c) = 1", "a * (b + c) = 1"},
	{"(a + b) * c > 3", "(a + b) * c > 3"},
	{"a = b + c * d % e / f - g", "a = b + c * d % e / f - g"},
	{"a / (b * c) = 1", "a / (b * c) = 1"},
	{"-(a + b) = 1", "-(a + b) = 1"},
	{"- -a = 1", "- -a = 1"},
	{"-(-a) = 1", "- -a = 1"},
	{"-(-5) = a", "5 = a"},
	{"- 5 = a", "-5 = a"},
	{"+5 = a", "5 = a"},
	{"+a = 1", "+a = 1"},
	{"-+a = 1", "- +a = 1"},
	{"a - -5 = 1", "a - -5 = 1"},
	{"-9223372036854775808 = a", "-9223372036854775808 = a"},
	{"9223372036854775807 = a", "9223372036854775807 = a"},
	{"007 = a", "7 = a"},
	{"-2.50 = a", "-2.5 = a"},
	{"2.0=a", "2.0 = a"},
	{"101.5E5 = a", "10150000.0 = a"},
	{"0.5E-2 = a", "0.005 = a"},
	{"1e21 = a", "1e+21 = a"},
	{"-0.0 = a", "-0.0 = a"},
	{"'it''s' = a", "'it''s' = a"},
	{"'' = a", "'' = a"},
	{"SYS.MESSAGEID is not null", "sys.MessageId IS NOT NULL"},
	{"sys.Subject = 'x'", "sys.Label = 'x'"},
	{"sys.label = 'x'", "sys.Label = 'x'"},
	{"sys.[To] = 'x'", "sys.To = 'x'"},
	{"USER.color = 'x'", "user.color = 'x'"},
	{"user.and = 1", "user.[and] = 1"},
	{"[Property With Space] = 1", "[Property With Space] = 1"},
	{`"Contoso & Northwind" = 'account'`, "[Contoso & Northwind] = 'account'"},
	{`"a""b" = 1`, `[a"b] = 1`},
	{"[a]]b] = 1", "[a]]b] = 1"},
	{"[and] = 1", "[and] = 1"},
	{"[color] = 1", "color = 1"},
	{"[1x] = 1", "[1x] = 1"},
	{"[sys.Label] = 1", "[sys.Label] = 1"},
	{"set = 1", "[set] = 1"},
	{"sys = 1 AND user = 2", "sys = 1 AND user = 2"},
	{"Größe = 1", "Größe = 1"},
	{"x like 'a%' escape '!'", "x LIKE 'a%' ESCAPE '!'"},
	{"x not like 'a'", "x NOT LIKE 'a'"},
	{"not x like 'a'", "NOT x LIKE 'a'"},
	{"x like 'a' + b", "x LIKE 'a' + b"},
	{"x not in ('a','b')", "x NOT IN ('a', 'b')"},
	{"a IN (1 + 2, (3))", "a IN (1 + 2, 3)"},
	{"a + 1 in (2)", "a + 1 IN (2)"},
	{"exists(user.x)", "EXISTS(user.x)"},
	{"exists([a b]) and exists(sys.To)", "EXISTS([a b]) AND EXISTS(sys.To)"},
	{"p('a') = 1", "property('a') = 1"},
	{"PROPERTY('a' + 'b') is null", "property('a' + 'b') IS NULL"},
	{"NEWID() = @g", "newid() = @g"},
	{"@P = 1", "@P = 1"},
	{"true", "TRUE"},
	{"true and false", "TRUE AND FALSE"},
	{"flag = true", "flag = TRUE"},
	{"a = null", "a = NULL"},
	{"(((a))) = 1", "a = 1"},
	{"((a = 1))", "a = 1"},
	{"1=1", "1 = 1"},
	{"sys.To=[parameters('bar')] OR sys.MessageId IS NULL", "sys.To = [parameters('bar')] OR sys.MessageId IS NULL"},
	{"a = 'multi\nline'", "a = 'multi\nline'"},
}

func TestPrint(t *testing.T) {
	for _, tt := range printTests {
		f, err := CompileSQL(tt.src, testParams)
		if err != nil {
			t.Errorf("%q: %v", tt.src, err)
			continue
		}
		if got := f.String(); got != tt.want {
			t.Errorf("%q:\n got %s\nwant %s", tt.src, got, tt.want)
		}
		if f.Text() != tt.src {
			t.Errorf("Text() = %q, want %q", f.Text(), tt.src)
		}
	}
}

func TestPrintAction(t *testing.T) {
	tests := []struct{ src, want string }{
		{"SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';", "SET quantity = quantity / 2; REMOVE priority; SET sys.CorrelationId = 'low'"},
		{"SET MessageID=@p SET MessageID=@s", "SET MessageID = @p; SET MessageID = @s"},
		{"set sys.to = 'Entity'", "SET sys.To = 'Entity'"},
		{"SET Label = 'test'", "SET Label = 'test'"},
		{"remove [a b]", "REMOVE [a b]"},
		{"SET [set] = -(1)", "SET [set] = -1"},
		{"SET a = (b + c) * 2;", "SET a = (b + c) * 2"},
		{"SET a = TRUE", "SET a = TRUE"},
	}
	for _, tt := range tests {
		a, err := CompileAction(tt.src, testParams)
		if err != nil {
			t.Errorf("%q: %v", tt.src, err)
			continue
		}
		if got := a.String(); got != tt.want {
			t.Errorf("%q:\n got %s\nwant %s", tt.src, got, tt.want)
		}
		// Round trip.
		stmts, err := parseAction(a.String())
		if err != nil {
			t.Errorf("reparse %q: %v", a.String(), err)
			continue
		}
		if got, want := dumpStmts(stmts), dumpStmts(a.Statements()); got != want {
			t.Errorf("round trip %q:\n got %s\nwant %s", tt.src, got, want)
		}
	}
}

// roundTripFilter checks that printing src's tree and parsing the text
// gives the same tree, and that the canonical text is a fixed point.
func roundTripFilter(t *testing.T, src string) {
	t.Helper()
	x, err := parseFilter(src)
	if err != nil {
		return
	}
	printed := x.String()
	y, err := parseFilter(printed)
	if err != nil {
		t.Errorf("%q printed as %q, which does not parse: %v", src, printed, err)
		return
	}
	if a, b := dump(x), dump(y); a != b {
		t.Errorf("%q printed as %q:\n tree %s\nreparsed %s", src, printed, a, b)
	}
	if again := y.String(); again != printed {
		t.Errorf("%q: print not a fixed point: %q then %q", src, printed, again)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range printTests {
		roundTripFilter(t, tt.src)
		roundTripFilter(t, tt.want)
	}
	for _, src := range evalSources() {
		roundTripFilter(t, src)
	}
}

func TestParseTree(t *testing.T) {
	tests := []struct{ src, want string }{
		{"NOT a = 1 AND b = 2", `(AND (NOT (= (prop 0 "a") (INT 1))) (= (prop 0 "b") (INT 2)))`},
		{"a = 1 OR b = 2 AND c = 3", `(OR (= (prop 0 "a") (INT 1)) (AND (= (prop 0 "b") (INT 2)) (= (prop 0 "c") (INT 3))))`},
		{"a + b * c = d - e - f", `(= (+ (prop 0 "a") (* (prop 0 "b") (prop 0 "c"))) (- (- (prop 0 "d") (prop 0 "e")) (prop 0 "f")))`},
		{"-a * b = 1", `(= (* (- (prop 0 "a")) (prop 0 "b")) (INT 1))`},
		{"a NOT LIKE 'x' ESCAPE '!'", `(LIKE not=true (prop 0 "a") (STRING "x") (STRING "!"))`},
		{"NOT a IN (1, 2)", `(NOT (IN not=false (prop 0 "a") (INT 1) (INT 2)))`},
		{"sys.messageid IS NOT NULL", `(ISNULL not=true (prop 2 "MessageId"))`},
		{"user.x = -9223372036854775808", `(= (prop 1 "x") (INT -9223372036854775808))`},
		{"p('a' + 'b') = newid()", `(= (call2 (+ (STRING "a") (STRING "b"))) (call1))`},
	}
	for _, tt := range tests {
		x, err := parseFilter(tt.src)
		if err != nil {
			t.Errorf("%q: %v", tt.src, err)
			continue
		}
		if got := dump(x); got != tt.want {
			t.Errorf("%q:\n got %s\nwant %s", tt.src, got, tt.want)
		}
	}
}

func TestInspect(t *testing.T) {
	x, err := parseFilter("a LIKE @p ESCAPE 'x' AND b IN (1, c) AND EXISTS(d) AND -p(e) = 1 AND f IS NULL")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	Inspect(x, func(n Node) bool {
		if p, ok := n.(*Property); ok {
			names = append(names, p.Name)
		}
		return true
	})
	if got := strings.Join(names, ","); got != "a,b,c,d,e,f" {
		t.Errorf("properties visited: %s", got)
	}
}
