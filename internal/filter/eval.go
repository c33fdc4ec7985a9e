package filter

import (
	"crypto/rand"
	"math"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

// Three-valued logic: a condition is TRUE, FALSE or unknown.
type tri int8

const (
	unknown tri = iota
	isFalse
	isTrue
)

func triOf(b bool) tri {
	if b {
		return isTrue
	}
	return isFalse
}

func (t tri) not() tri {
	switch t {
	case isTrue:
		return isFalse
	case isFalse:
		return isTrue
	}
	return unknown
}

// asTri reads a value as a condition: a Boolean, or unknown.
func (v *value) asTri() tri {
	if v.kind != kindBool {
		return unknown
	}
	return triOf(v.i != 0)
}

// cond evaluates a condition. The parser guarantees that x is one;
// evaluation is read-only on the tree and does not allocate unless it
// builds a string (concatenation, a non-string MessageId), calls newid(),
// or matches a LIKE pattern that is not constant.
func (env *Env) cond(x Expr) (tri, error) {
	switch x := x.(type) {
	case *BinaryExpr:
		switch x.Op {
		case AND:
			// FALSE AND anything is FALSE: the right side is not evaluated.
			a, err := env.cond(x.X)
			if err != nil || a == isFalse {
				return a, err
			}
			b, err := env.cond(x.Y)
			if err != nil || b == isFalse {
				return b, err
			}
			if a == isTrue && b == isTrue {
				return isTrue, nil
			}
			return unknown, nil
		case OR:
			// TRUE OR anything is TRUE: the right side is not evaluated.
			a, err := env.cond(x.X)
			if err != nil || a == isTrue {
				return a, err
			}
			b, err := env.cond(x.Y)
			if err != nil || b == isTrue {
				return b, err
			}
			if a == isFalse && b == isFalse {
				return isFalse, nil
			}
			return unknown, nil
		}
		a, err := env.value(x.X)
		if err != nil {
			return unknown, err
		}
		b, err := env.value(x.Y)
		if err != nil {
			return unknown, err
		}
		return compare(x.Op, &a, &b)
	case *UnaryExpr:
		if x.Op == NOT {
			t, err := env.cond(x.X)
			return t.not(), err
		}
	case *LikeExpr:
		return env.evalLike(x)
	case *InExpr:
		return env.evalIn(x)
	case *IsNullExpr:
		v, err := env.value(x.X)
		if err != nil {
			return unknown, err
		}
		return triOf(v.isNull() != x.Not), nil
	case *ExistsExpr:
		if x.Prop.Scope == ScopeSys {
			v := env.sysValue(x.Prop.sys)
			return triOf(!v.isNull()), nil
		}
		_, _, ok := lookupUser(env.msg().ApplicationProperties, x.Prop.Name)
		return triOf(ok), nil
	}
	// TRUE and FALSE.
	v, err := env.value(x)
	return v.asTri(), err
}

// value evaluates a value expression.
func (env *Env) value(x Expr) (value, error) {
	switch x := x.(type) {
	case *Literal:
		return x.val, nil
	case *Param:
		return x.val, nil
	case *Property:
		if x.Scope == ScopeSys {
			return env.sysValue(x.sys), nil
		}
		_, v, ok := lookupUser(env.msg().ApplicationProperties, x.Name)
		if !ok {
			return nullValue, nil
		}
		return fromAny(v), nil
	case *Call:
		return env.evalCall(x)
	case *UnaryExpr:
		if x.Op != NOT {
			v, err := env.value(x.X)
			if err != nil {
				return nullValue, err
			}
			return unary(x.Op, &v)
		}
	case *BinaryExpr:
		if x.Op.Precedence() > CmpPrec {
			a, err := env.value(x.X)
			if err != nil {
				return nullValue, err
			}
			b, err := env.value(x.Y)
			if err != nil {
				return nullValue, err
			}
			return arith(x.Op, &a, &b)
		}
	}
	// A condition read as a value (not produced by the parser).
	t, err := env.cond(x)
	if t == unknown {
		return nullValue, err
	}
	return boolValue(t == isTrue), err
}

func (env *Env) evalCall(x *Call) (value, error) {
	if x.Func == FuncNewID {
		return guidValue(newGUID()), nil
	}
	name, err := env.value(x.Args[0])
	if err != nil || name.isNull() {
		return nullValue, err
	}
	if name.kind != kindString {
		return nullValue, evalErrorf(ExcFilter, "The argument of property() must be of type 'String', not '%s'.", name.kind)
	}
	// Only user properties: property('sys.Label') looks for a user
	// property named "sys.Label", as the service does.
	_, v, ok := lookupUser(env.msg().ApplicationProperties, name.s)
	if !ok {
		return nullValue, nil
	}
	return fromAny(v), nil
}

// newGUID returns a random (version 4) UUID, as System.Guid.NewGuid does.
func newGUID() message.UUID {
	var g message.UUID
	_, _ = rand.Read(g[:])
	g[6] = g[6]&0x0f | 0x40
	g[8] = g[8]&0x3f | 0x80
	return g
}

// typeError is the error for an operator applied to operands it is not
// defined for.
func typeError(op Token, a, b *value) *EvalError {
	return evalErrorf(ExcFilter, "Operator '%s' cannot be applied to operands of type '%s' and '%s'.", op, a.kind, b.kind)
}

// compare applies a comparison operator. An unknown operand makes the
// result unknown; operands of different types are an error (there is no
// string-number conversion), except that Int64 and Double compare as
// Double.
func compare(op Token, a, b *value) (tri, error) {
	if a.isNull() || b.isNull() {
		return unknown, nil
	}
	var c int // -1, 0, +1
	switch {
	case a.kind == kindInt && b.kind == kindInt:
		c = cmpInt(a.i, b.i)
	case a.isNumeric() && b.isNumeric():
		x, y := a.asDouble(), b.asDouble()
		if math.IsNaN(x) || math.IsNaN(y) {
			// NaN is unordered: only <> holds.
			return triOf(op == NEQ), nil
		}
		c = cmpFloat(x, y)
	case a.kind != b.kind:
		return unknown, typeError(op, a, b)
	case a.kind == kindString:
		c = strings.Compare(a.s, b.s)
	case a.kind == kindDateTime:
		if c = cmpInt(a.i, b.i); c == 0 {
			c = cmpInt(int64(a.n), int64(b.n))
		}
	case a.kind == kindTimeSpan:
		c = cmpInt(a.i, b.i)
	case a.kind == kindBool && (op == EQL || op == NEQ):
		c = cmpInt(a.i, b.i)
	case a.kind == kindGuid && (op == EQL || op == NEQ):
		if a.i != b.i || a.j != b.j {
			c = 1
		}
	default:
		return unknown, typeError(op, a, b)
	}
	switch op {
	case EQL:
		return triOf(c == 0), nil
	case NEQ:
		return triOf(c != 0), nil
	case LSS:
		return triOf(c < 0), nil
	case LEQ:
		return triOf(c <= 0), nil
	case GTR:
		return triOf(c > 0), nil
	case GEQ:
		return triOf(c >= 0), nil
	}
	return unknown, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// .NET DateTime covers years 1 to 9999.
var (
	minDateTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDateTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// arith applies + - * / %, following C#: Int64 arithmetic wraps, except
// that division and remainder by zero throw DivideByZeroException and
// MinValue / -1 throws OverflowException; Double arithmetic is IEEE (x/0
// is infinite); + concatenates two strings; DateTime and TimeSpan add and
// subtract.
//
// Long on purpose: its cyclomatic complexity is high, it is the table of
// operator × operand types, and each case mirrors one C# rule.
func arith(op Token, a, b *value) (value, error) {
	if a.isNull() || b.isNull() {
		return nullValue, nil
	}
	switch {
	case a.kind == kindInt && b.kind == kindInt:
		x, y := a.i, b.i
		switch op {
		case ADD:
			return intValue(x + y), nil
		case SUB:
			return intValue(x - y), nil
		case MUL:
			return intValue(x * y), nil
		}
		if y == 0 {
			return nullValue, errDivideByZero()
		}
		if x == math.MinInt64 && y == -1 {
			return nullValue, errOverflow()
		}
		if op == QUO {
			return intValue(x / y), nil
		}
		return intValue(x % y), nil
	case a.isNumeric() && b.isNumeric():
		x, y := a.asDouble(), b.asDouble()
		switch op {
		case ADD:
			return doubleValue(x + y), nil
		case SUB:
			return doubleValue(x - y), nil
		case MUL:
			return doubleValue(x * y), nil
		case QUO:
			return doubleValue(x / y), nil
		}
		return doubleValue(math.Mod(x, y)), nil
	case a.kind == kindString && b.kind == kindString && op == ADD:
		return stringValue(a.s + b.s), nil
	case a.kind == kindDateTime && b.kind == kindDateTime && op == SUB:
		return subTimes(a.time(), b.time())
	case a.kind == kindDateTime && b.kind == kindTimeSpan && (op == ADD || op == SUB):
		d := b.span()
		if op == SUB {
			if d == math.MinInt64 {
				return nullValue, errDateRange()
			}
			d = -d
		}
		return addTime(a.time(), d)
	case a.kind == kindTimeSpan && b.kind == kindDateTime && op == ADD:
		return addTime(b.time(), a.span())
	case a.kind == kindTimeSpan && b.kind == kindTimeSpan && (op == ADD || op == SUB):
		x, y := a.i, b.i
		var r int64
		if op == ADD {
			r = x + y
			if (x >= 0) == (y >= 0) && (r >= 0) != (x >= 0) {
				return nullValue, errTimeSpanOverflow()
			}
		} else {
			r = x - y
			if (x >= 0) != (y >= 0) && (r >= 0) != (x >= 0) {
				return nullValue, errTimeSpanOverflow()
			}
		}
		return value{kind: kindTimeSpan, i: r}, nil
	}
	return nullValue, typeError(op, a, b)
}

func addTime(t time.Time, d time.Duration) (value, error) {
	r := t.Add(d)
	if r.Before(minDateTime) || !r.Before(maxDateTime) {
		return nullValue, errDateRange()
	}
	return timeValue(r), nil
}

// subTimes returns a - b as a TimeSpan. Go durations span about ±292
// years (.NET TimeSpans about ±29,000); a larger difference is reported as
// an overflow rather than silently saturated.
func subTimes(a, b time.Time) (value, error) {
	const maxSeconds = math.MaxInt64 / int64(time.Second)
	secs := a.Unix() - b.Unix()
	if secs > maxSeconds-1 || secs < -maxSeconds+1 {
		return nullValue, errTimeSpanOverflow()
	}
	return spanValue(a.Sub(b)), nil
}

// unary applies - or + to a value.
func unary(op Token, v *value) (value, error) {
	switch v.kind {
	case kindNull:
		return nullValue, nil
	case kindInt:
		if op == SUB {
			return intValue(-v.i), nil // wraps for MinValue, as unchecked C# does
		}
		return *v, nil
	case kindDouble:
		if op == SUB {
			return doubleValue(-v.f), nil
		}
		return *v, nil
	case kindTimeSpan:
		if op == SUB {
			if v.i == math.MinInt64 {
				return nullValue, &EvalError{Type: ExcOverflow, Message: "Negating the minimum value of a twos complement number is invalid."}
			}
			return value{kind: kindTimeSpan, i: -v.i}, nil
		}
		return *v, nil
	}
	return nullValue, evalErrorf(ExcFilter, "Operator '%s' cannot be applied to operand of type '%s'.", op, v.kind)
}

// evalLike evaluates x [NOT] LIKE pattern [ESCAPE escape]. Any unknown
// operand makes the result unknown.
func (env *Env) evalLike(x *LikeExpr) (tri, error) {
	s, err := env.value(x.X)
	if err != nil {
		return unknown, err
	}
	lp := x.pat
	var pat, esc value
	if lp == nil {
		if pat, err = env.value(x.Pattern); err != nil {
			return unknown, err
		}
		if x.Escape != nil {
			if esc, err = env.value(x.Escape); err != nil {
				return unknown, err
			}
			if esc.isNull() {
				return unknown, nil
			}
		}
		if pat.isNull() {
			return unknown, nil
		}
	}
	if s.isNull() {
		return unknown, nil
	}
	if s.kind != kindString {
		return unknown, evalErrorf(ExcFilter, "Operator 'LIKE' cannot be applied to operand of type '%s'.", s.kind)
	}
	if lp == nil {
		if pat.kind != kindString {
			return unknown, evalErrorf(ExcFilter, "The LIKE pattern must be of type 'String', not '%s'.", pat.kind)
		}
		var r rune
		hasEsc := false
		if x.Escape != nil {
			if esc.kind != kindString {
				return unknown, evalErrorf(ExcFilter, "The ESCAPE character must be of type 'String', not '%s'.", esc.kind)
			}
			var msg string
			if r, msg = escapeRune(esc.s); msg != "" {
				return unknown, &EvalError{Type: ExcFilter, Message: msg}
			}
			hasEsc = true
		}
		var msg string
		if lp, msg = compileLike(pat.s, r, hasEsc); msg != "" {
			return unknown, &EvalError{Type: ExcFilter, Message: msg}
		}
	}
	return triOf(lp.match(s.s) != x.Not), nil
}

// evalIn evaluates x [NOT] IN (list): TRUE if x equals an element, unknown
// if it equals none but an element is unknown, FALSE otherwise (then
// negated for NOT IN). Elements are compared in order and the first match
// ends the evaluation.
func (env *Env) evalIn(x *InExpr) (tri, error) {
	v, err := env.value(x.X)
	if err != nil || v.isNull() {
		return unknown, err
	}
	sawNull := false
	for _, e := range x.List {
		w, err := env.value(e)
		if err != nil {
			return unknown, err
		}
		if w.isNull() {
			sawNull = true
			continue
		}
		eq, err := compare(EQL, &v, &w)
		if err != nil {
			return unknown, err
		}
		if eq == isTrue {
			return triOf(!x.Not), nil
		}
	}
	if sawNull {
		return unknown, nil
	}
	return triOf(x.Not), nil
}
