package filter

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Matcher is what a subscription rule's filter does for each message:
// *Filter (SQL, true and false filters) and *CorrelationFilter implement
// it.
type Matcher interface {
	Match(env *Env) (bool, error)
}

// Filter is a compiled SQL filter. It is immutable and safe for concurrent
// use.
type Filter struct {
	text string
	expr Expr
}

// The filters the service writes as TrueFilter and FalseFilter.
var (
	TrueFilter  = mustCompile("1=1")
	FalseFilter = mustCompile("1=0")
)

func mustCompile(text string) *Filter {
	f, err := CompileSQL(text, nil)
	if err != nil {
		panic(err)
	}
	return f
}

// CompileSQL parses a SQL filter expression and binds its @parameters from
// params (keys as the rule's Parameters hold them, with the '@'; a key
// without it is accepted too). A syntax or binding error is an ErrorList
// of positioned errors ("filter: 1:13: expected expression, found ')'").
func CompileSQL(text string, params map[string]any) (*Filter, error) {
	x, err := parseFilter(text)
	if err != nil {
		return nil, err
	}
	if err := bind(text, x, params); err != nil {
		return nil, err
	}
	return &Filter{text: text, expr: x}, nil
}

// Match evaluates the filter against one message. It reports true only
// when the condition is TRUE; FALSE and unknown do not match. An
// evaluation failure is returned as an *EvalError (and no match). A nil
// env is an empty message.
func (f *Filter) Match(env *Env) (bool, error) {
	if env == nil {
		env = &emptyEnv
	}
	t, err := env.cond(f.expr)
	return t == isTrue && err == nil, err
}

// Text returns the filter text as it was compiled.
func (f *Filter) Text() string { return f.text }

// String returns the canonical text of the filter.
func (f *Filter) String() string { return f.expr.String() }

// Expr returns the filter's syntax tree. It must not be modified.
func (f *Filter) Expr() Expr { return f.expr }

// bind resolves @parameters and precompiles constant LIKE patterns in the
// tree rooted at root.
func bind(src string, root Node, params map[string]any) error {
	var errs ErrorList
	Inspect(root, func(n Node) bool {
		if x, ok := n.(*Param); ok {
			v, ok := lookupParam(params, x.Name)
			switch {
			case !ok:
				errs.Add(position(src, x.At), "no value for parameter @"+x.Name)
			case !supportedParam(v):
				errs.Add(position(src, x.At), fmt.Sprintf("parameter @%s has unsupported type %T", x.Name, v))
			default:
				x.val, x.bound = fromAny(v), true
			}
		}
		return true
	})
	if len(errs) > 0 {
		return errs
	}
	// Patterns are compiled after every parameter is bound.
	Inspect(root, func(n Node) bool {
		if x, ok := n.(*LikeExpr); ok {
			if msg := precompileLike(x); msg != "" {
				errs.Add(position(src, x.Pattern.Pos()), msg)
			}
		}
		return true
	})
	return errs.Err()
}

func lookupParam(params map[string]any, name string) (any, bool) {
	if v, ok := params["@"+name]; ok {
		return v, true
	}
	if v, ok := params[name]; ok {
		return v, true
	}
	// Case-insensitive, as identifiers are; the smallest key wins a tie.
	var key string
	var val any
	found := false
	for k, v := range params {
		if equalFold(strings.TrimPrefix(k, "@"), name) && (!found || k < key) {
			key, val, found = k, v, true
		}
	}
	return val, found
}

// constValue returns the value of a literal or bound parameter.
func constValue(x Expr) (value, bool) {
	switch x := x.(type) {
	case *Literal:
		return x.val, true
	case *Param:
		return x.val, x.bound
	}
	return value{}, false
}

// precompileLike compiles x's pattern when the pattern and the escape are
// constant strings, and reports a constant pattern or escape that can
// never be valid.
func precompileLike(x *LikeExpr) string {
	pat, ok := constValue(x.Pattern)
	if !ok || pat.kind != kindString {
		return ""
	}
	var esc rune
	hasEsc := false
	if x.Escape != nil {
		e, ok := constValue(x.Escape)
		if !ok || e.kind != kindString {
			return ""
		}
		r, msg := escapeRune(e.s)
		if msg != "" {
			return msg
		}
		esc, hasEsc = r, true
	}
	lp, msg := compileLike(pat.s, esc, hasEsc)
	if msg != "" {
		return msg
	}
	x.pat = lp
	return ""
}

// escapeRune checks that s is exactly one character.
func escapeRune(s string) (rune, string) {
	r, w := utf8.DecodeRuneInString(s)
	if w == 0 || w != len(s) {
		return 0, "the ESCAPE character must be a string of length 1, found " + quoteString(s)
	}
	return r, ""
}
