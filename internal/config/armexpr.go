package config

// The subset of ARM template expressions that `busbar import` evaluates
// (see arm.go). An expression is a JSON string in square brackets:
//
//	"[concat(parameters('namespaceName'), '/orders')]"
//
//	expr     = call | string | integer | "true" | "false"
//	call     = ident "(" [ expr { "," expr } ] ")"
//	string   = "'" { char | "''" } "'"
//
// Functions: parameters, variables, concat (strings or arrays), format
// ({0}-style placeholders), toLower, toUpper, string, int, bool, if,
// equals, not, empty, length, replace, trim. Anything else (resourceGroup(),
// resourceId(), property access with '.' or '[…]', …) is an error naming
// the function. A string starting with "[[" is the literal text without
// its first '['.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// armScope resolves parameters and variables for expressions.
type armScope interface {
	parameter(name string) (any, error)
	variable(name string) (any, error)
}

// maxExprDepth bounds nested calls in one expression.
const maxExprDepth = 32

// isARMExpression reports whether s is an expression (rather than a literal
// string, possibly escaped with "[[").
func isARMExpression(s string) bool {
	return len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' && !strings.HasPrefix(s, "[[")
}

// evalARMString evaluates s if it is an expression and returns it (with a
// leading "[[" unescaped) otherwise.
func evalARMString(s string, sc armScope) (any, error) {
	if strings.HasPrefix(s, "[[") {
		return s[1:], nil
	}
	if !isARMExpression(s) {
		return s, nil
	}
	p := &exprParser{src: s[1 : len(s)-1], sc: sc}
	p.skip()
	v, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	p.skip()
	if p.pos != len(p.src) {
		if p.src[p.pos] == '.' || p.src[p.pos] == '[' {
			return nil, fmt.Errorf("property and index access ('%c' at column %d) is not supported", p.src[p.pos], p.pos+2)
		}
		return nil, fmt.Errorf("unexpected %q at column %d", p.src[p.pos:], p.pos+2)
	}
	return v, nil
}

type exprParser struct {
	src string
	pos int
	sc  armScope
}

func (p *exprParser) skip() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t' || p.src[p.pos] == '\n' || p.src[p.pos] == '\r') {
		p.pos++
	}
}

func (p *exprParser) expr(depth int) (any, error) {
	if depth > maxExprDepth {
		return nil, fmt.Errorf("the expression nests deeper than %d calls", maxExprDepth)
	}
	p.skip()
	if p.pos >= len(p.src) {
		return nil, fmt.Errorf("the expression ends early")
	}
	c := p.src[p.pos]
	switch {
	case c == '\'':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.pos
		p.pos++
		for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
		}
		n, err := strconv.ParseInt(p.src[start:p.pos], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad integer %q", p.src[start:p.pos])
		}
		return n, nil
	case isIdentStart(c):
		start := p.pos
		for p.pos < len(p.src) && (isIdentStart(p.src[p.pos]) || (p.src[p.pos] >= '0' && p.src[p.pos] <= '9')) {
			p.pos++
		}
		name := p.src[start:p.pos]
		p.skip()
		if p.pos >= len(p.src) || p.src[p.pos] != '(' {
			switch strings.ToLower(name) {
			case "true":
				return true, nil
			case "false":
				return false, nil
			}
			return nil, fmt.Errorf("'%s' is not a function call", name)
		}
		p.pos++
		var args []any
		p.skip()
		if p.pos < len(p.src) && p.src[p.pos] == ')' {
			p.pos++
		} else {
			for {
				v, err := p.expr(depth + 1)
				if err != nil {
					return nil, err
				}
				args = append(args, v)
				p.skip()
				if p.pos >= len(p.src) {
					return nil, fmt.Errorf("missing ')' after the arguments of %s", name)
				}
				if p.src[p.pos] == ',' {
					p.pos++
					continue
				}
				if p.src[p.pos] == ')' {
					p.pos++
					break
				}
				return nil, fmt.Errorf("unexpected %q in the arguments of %s", p.src[p.pos:p.pos+1], name)
			}
		}
		return p.call(name, args)
	}
	return nil, fmt.Errorf("unexpected %q at column %d", p.src[p.pos:p.pos+1], p.pos+2)
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func (p *exprParser) str() (string, error) {
	p.pos++ // opening quote
	var b strings.Builder
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		p.pos++
		if c == '\'' {
			if p.pos < len(p.src) && p.src[p.pos] == '\'' {
				b.WriteByte('\'')
				p.pos++
				continue
			}
			return b.String(), nil
		}
		b.WriteByte(c)
	}
	return "", fmt.Errorf("unterminated string")
}

// maxExprString bounds a string an expression builds.
const maxExprString = 1 << 20

// armFuncs is the table of template functions call evaluates, by
// lower-case name. It is filled in by init: the parameters function
// evaluates parameters, which may call functions again.
var armFuncs map[string]func(p *exprParser, c armCall) (any, error)

func init() {
	armFuncs = map[string]func(p *exprParser, c armCall) (any, error){
		"parameters": armParamOrVar,
		"variables":  armParamOrVar,
		"concat":     armConcat,
		"format":     armFormat,
		"tolower":    armCase,
		"toupper":    armCase,
		"trim":       armCase,
		"replace":    armReplace,
		"string":     armString,
		"int":        armInt,
		"bool":       armBool,
		"if":         armIf,
		"equals":     armEquals,
		"not":        armNot,
		"empty":      armLength,
		"length":     armLength,
	}
}

// armCall is a function call being evaluated: the name as written and
// the evaluated arguments.
type armCall struct {
	name string
	args []any
}

// want checks that c has n arguments.
func (c armCall) want(n int) error {
	if len(c.args) != n {
		return fmt.Errorf("%s takes %d argument(s), not %d", c.name, n, len(c.args))
	}
	return nil
}

// str is argument i, which must be a string.
func (c armCall) str(i int) (string, error) {
	s, ok := c.args[i].(string)
	if !ok {
		return "", fmt.Errorf("argument %d of %s must be a string, not %s", i+1, c.name, armTypeName(c.args[i]))
	}
	return s, nil
}

// call evaluates the template function name on args through armFuncs.
func (p *exprParser) call(name string, args []any) (any, error) {
	f := armFuncs[strings.ToLower(name)]
	if f == nil {
		return nil, fmt.Errorf("the template function '%s' is not supported (busbar import evaluates parameters, variables, concat, format, toLower, toUpper, string, int, bool, if, equals, not, empty, length, replace and trim)", name)
	}
	return f(p, armCall{name: name, args: args})
}

func armParamOrVar(p *exprParser, c armCall) (any, error) {
	if err := c.want(1); err != nil {
		return nil, err
	}
	n, err := c.str(0)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(c.name, "parameters") {
		return p.sc.parameter(n)
	}
	return p.sc.variable(n)
}

func armConcat(_ *exprParser, c armCall) (any, error) {
	args := c.args
	if len(args) == 0 {
		return nil, fmt.Errorf("concat takes at least one argument")
	}
	if _, ok := args[0].([]any); ok {
		var out []any
		for i, a := range args {
			arr, ok := a.([]any)
			if !ok {
				return nil, fmt.Errorf("argument %d of concat must be an array like the first, not %s", i+1, armTypeName(a))
			}
			out = append(out, arr...)
		}
		return out, nil
	}
	var b strings.Builder
	for _, a := range args {
		s, err := armText(a)
		if err != nil {
			return nil, fmt.Errorf("concat: %w", err)
		}
		b.WriteString(s)
		if b.Len() > maxExprString {
			return nil, fmt.Errorf("concat builds a string over %d bytes", maxExprString)
		}
	}
	return b.String(), nil
}

func armFormat(_ *exprParser, c armCall) (any, error) {
	args := c.args
	if len(args) == 0 {
		return nil, fmt.Errorf("format takes a format string")
	}
	f, err := c.str(0)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c == '{' {
			if i+1 < len(f) && f[i+1] == '{' {
				b.WriteByte('{')
				i++
				continue
			}
			end := strings.IndexByte(f[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("format: unclosed '{'")
			}
			idx, err := strconv.Atoi(f[i+1 : i+end])
			if err != nil || idx < 0 || idx+1 >= len(args) {
				return nil, fmt.Errorf("format: placeholder {%s} names no argument", f[i+1:i+end])
			}
			s, err := armText(args[idx+1])
			if err != nil {
				return nil, fmt.Errorf("format: %w", err)
			}
			b.WriteString(s)
			i += end
			continue
		}
		if c == '}' && i+1 < len(f) && f[i+1] == '}' {
			i++
		}
		b.WriteByte(c)
		if b.Len() > maxExprString {
			return nil, fmt.Errorf("format builds a string over %d bytes", maxExprString)
		}
	}
	return b.String(), nil
}

// armCase is toLower, toUpper and trim.
func armCase(_ *exprParser, c armCall) (any, error) {
	if err := c.want(1); err != nil {
		return nil, err
	}
	s, err := c.str(0)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(c.name) {
	case "tolower":
		return strings.ToLower(s), nil
	case "toupper":
		return strings.ToUpper(s), nil
	}
	return strings.TrimSpace(s), nil
}

func armReplace(_ *exprParser, c armCall) (any, error) {
	if err := c.want(3); err != nil {
		return nil, err
	}
	var s [3]string
	for i := range s {
		v, err := c.str(i)
		if err != nil {
			return nil, err
		}
		s[i] = v
	}
	if s[1] == "" {
		return s[0], nil
	}
	if n := strings.Count(s[0], s[1]); n > 0 && len(s[0])+n*len(s[2]) > maxExprString {
		return nil, fmt.Errorf("replace builds a string over %d bytes", maxExprString)
	}
	return strings.ReplaceAll(s[0], s[1], s[2]), nil
}

func armString(_ *exprParser, c armCall) (any, error) {
	if err := c.want(1); err != nil {
		return nil, err
	}
	if s, err := armText(c.args[0]); err == nil {
		return s, nil
	}
	b, err := json.Marshal(c.args[0])
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func armInt(_ *exprParser, c armCall) (any, error) {
	if err := c.want(1); err != nil {
		return nil, err
	}
	switch v := c.args[0].(type) {
	case int64:
		return v, nil
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("int: '%s' is not an integer", v)
		}
		return n, nil
	}
	return nil, fmt.Errorf("int: cannot convert %s", armTypeName(c.args[0]))
}

func armBool(_ *exprParser, c armCall) (any, error) {
	if err := c.want(1); err != nil {
		return nil, err
	}
	switch v := c.args[0].(type) {
	case bool:
		return v, nil
	case string:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("bool: '%s' is not true or false", v)
		}
		return b, nil
	case int64:
		return v != 0, nil
	}
	return nil, fmt.Errorf("bool: cannot convert %s", armTypeName(c.args[0]))
}

func armIf(_ *exprParser, c armCall) (any, error) {
	if err := c.want(3); err != nil {
		return nil, err
	}
	cond, ok := c.args[0].(bool)
	if !ok {
		return nil, fmt.Errorf("the condition of if must be a boolean, not %s", armTypeName(c.args[0]))
	}
	if cond {
		return c.args[1], nil
	}
	return c.args[2], nil
}

func armEquals(_ *exprParser, c armCall) (any, error) {
	if err := c.want(2); err != nil {
		return nil, err
	}
	a, _ := json.Marshal(c.args[0])
	b, _ := json.Marshal(c.args[1])
	return string(a) == string(b), nil
}

func armNot(_ *exprParser, c armCall) (any, error) {
	if err := c.want(1); err != nil {
		return nil, err
	}
	b, ok := c.args[0].(bool)
	if !ok {
		return nil, fmt.Errorf("not takes a boolean, not %s", armTypeName(c.args[0]))
	}
	return !b, nil
}

// armLength is empty and length.
func armLength(_ *exprParser, c armCall) (any, error) {
	if err := c.want(1); err != nil {
		return nil, err
	}
	var n int
	switch v := c.args[0].(type) {
	case nil:
	case string:
		n = len(v)
	case []any:
		n = len(v)
	case map[string]any:
		n = len(v)
	default:
		return nil, fmt.Errorf("%s takes a string, array or object, not %s", c.name, armTypeName(c.args[0]))
	}
	if strings.EqualFold(c.name, "empty") {
		return n == 0, nil
	}
	return int64(n), nil
}

// armText is a scalar as text, for concat and format.
func armText(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", fmt.Errorf("cannot make text of %s", armTypeName(v))
}

func armTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case int64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
