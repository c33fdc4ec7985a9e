package filter

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits.
const (
	// MaxTextLength is the longest filter or action text, in UTF-16 code
	// units (the .NET string length the service counts).
	MaxTextLength = 1024
	// MaxStatements is the most statements one action may hold.
	MaxStatements = 32
	// MaxDepth is the deepest nesting of parentheses, unary operators and
	// function calls.
	MaxDepth = 64
	// maxErrors stops compilation after this many errors.
	maxErrors = 10
)

type tokenInfo struct {
	pos Pos
	end int
	tok Token
	lit string
}

type parser struct {
	src     string
	actions bool
	errors  ErrorList

	toks []tokenInfo
	i    int // index of the current token in toks

	// Current token.
	pos Pos
	tok Token
	lit string

	depth int
}

// bailout is panicked to abandon parsing after a syntax error.
type bailout struct{}

func (p *parser) init(src string, actions bool) {
	p.src = src
	p.actions = actions
	var s Scanner
	s.Init(src, actions, func(pos Pos, msg string) { p.errorAt(pos, msg) })
	for {
		pos, tok, lit := s.Scan()
		p.toks = append(p.toks, tokenInfo{pos: pos, end: s.off, tok: tok, lit: lit})
		if tok == EOF {
			break
		}
	}
	p.i = -1
	p.next()
}

func (p *parser) next() {
	if p.i < len(p.toks)-1 {
		p.i++
	}
	t := p.toks[p.i]
	p.pos, p.tok, p.lit = t.pos, t.tok, t.lit
	if p.tok == ILLEGAL {
		// The scanner has reported it.
		panic(bailout{})
	}
}

// peek returns the token after the current one.
func (p *parser) peek() Token {
	if p.i+1 < len(p.toks) {
		return p.toks[p.i+1].tok
	}
	return EOF
}

func (p *parser) errorAt(pos Pos, msg string) {
	if len(p.errors) >= maxErrors {
		panic(bailout{})
	}
	p.errors.Add(position(p.src, pos), msg)
}

// tokDesc describes the current token for an error message.
func (p *parser) tokDesc() string {
	t := p.toks[p.i]
	switch t.tok {
	case EOF:
		return "end of text"
	case STRING:
		return "string " + abbrev(quoteString(t.lit))
	}
	return "'" + abbrev(p.src[t.pos:t.end]) + "'"
}

// abbrev shortens s for an error message.
func abbrev(s string) string {
	const max = 40
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return string([]rune(s)[:max]) + "…"
}

// errorExpected reports a syntax error at the current token and abandons
// parsing.
func (p *parser) errorExpected(what string) {
	p.errorAt(p.pos, "expected "+what+", found "+p.tokDesc())
	panic(bailout{})
}

func (p *parser) expect(tok Token) Pos {
	pos := p.pos
	if p.tok != tok {
		p.errorExpected("'" + tok.String() + "'")
	}
	p.next()
	return pos
}

// enter notes one more level of nesting, opened at pos.
func (p *parser) enter(pos Pos) {
	p.depth++
	if p.depth > MaxDepth {
		p.errorAt(pos, fmt.Sprintf("expression nested too deeply (limit %d)", MaxDepth))
		panic(bailout{})
	}
}

func (p *parser) leave() { p.depth-- }

// checkCondition reports an error unless x is a condition.
func (p *parser) checkCondition(x Expr) {
	if !isCondition(x) {
		p.errorAt(x.Pos(), "expected condition, found value "+abbrev(x.String()))
	}
}

// checkValue reports an error unless x is a value.
func (p *parser) checkValue(x Expr) {
	if !isValue(x) {
		p.errorAt(x.Pos(), "expected value, found condition "+abbrev(x.String()))
	}
}

// checkLength reports text longer than MaxTextLength UTF-16 units.
func (p *parser) checkLength() bool {
	n := 0
	for i, r := range p.src {
		n += utf16.RuneLen(r)
		if n > MaxTextLength {
			p.errorAt(Pos(i), fmt.Sprintf("text longer than %d characters", MaxTextLength))
			return false
		}
	}
	return true
}

// ----------------------------------------------------------------------------
// Expressions

// parseExpr parses a full expression (condition or value).
func (p *parser) parseExpr() Expr {
	return p.parseBinaryExpr(LowestPrec + 1)
}

// parseBinaryExpr parses an expression whose operators bind at least as
// tightly as prec1, by precedence climbing.
func (p *parser) parseBinaryExpr(prec1 int) Expr {
	var x Expr
	if p.tok == NOT && prec1 <= NotPrec {
		pos := p.pos
		p.next()
		p.enter(pos)
		operand := p.parseBinaryExpr(NotPrec)
		p.leave()
		p.checkCondition(operand)
		x = &UnaryExpr{OpPos: pos, Op: NOT, X: operand}
	} else {
		x = p.parseUnaryExpr()
	}
	for {
		op, oprec := p.tok, p.tok.Precedence()
		if oprec < prec1 {
			return x
		}
		opPos := p.pos
		switch op {
		case AND, OR:
			p.next()
			y := p.parseBinaryExpr(oprec + 1)
			p.checkCondition(x)
			p.checkCondition(y)
			x = &BinaryExpr{X: x, OpPos: opPos, Op: op, Y: y}
		case NOT:
			switch p.peek() {
			case LIKE:
				p.next()
				x = p.parseLike(x, true, opPos)
			case IN:
				p.next()
				x = p.parseIn(x, true, opPos)
			default:
				p.next()
				p.errorExpected("LIKE or IN after NOT")
			}
		case LIKE:
			x = p.parseLike(x, false, opPos)
		case IN:
			x = p.parseIn(x, false, opPos)
		case IS:
			p.next()
			not := false
			if p.tok == NOT {
				not = true
				p.next()
			}
			p.expect(NULL)
			if !isPropertyRef(x) {
				p.errorAt(x.Pos(), "IS NULL applies to a property, found "+abbrev(x.String()))
			}
			x = &IsNullExpr{X: x, Not: not, OpPos: opPos}
		default: // comparison and arithmetic operators
			p.next()
			y := p.parseBinaryExpr(oprec + 1)
			p.checkValue(x)
			p.checkValue(y)
			x = &BinaryExpr{X: x, OpPos: opPos, Op: op, Y: y}
		}
	}
}

// isPropertyRef reports whether x names a property: a property reference
// or a property() call.
func isPropertyRef(x Expr) bool {
	switch x := x.(type) {
	case *Property:
		return true
	case *Call:
		return x.Func == FuncProperty
	}
	return false
}

// parseLike parses the rest of x [NOT] LIKE pattern [ESCAPE escape]; the
// current token is LIKE.
func (p *parser) parseLike(x Expr, not bool, opPos Pos) Expr {
	p.expect(LIKE)
	pat := p.parseBinaryExpr(CmpPrec + 1)
	var esc Expr
	if p.tok == ESCAPE {
		p.next()
		esc = p.parseBinaryExpr(CmpPrec + 1)
		p.checkValue(esc)
	}
	p.checkValue(x)
	p.checkValue(pat)
	return &LikeExpr{X: x, Not: not, OpPos: opPos, Pattern: pat, Escape: esc}
}

// parseIn parses the rest of x [NOT] IN (e1, e2, ...); the current token
// is IN.
func (p *parser) parseIn(x Expr, not bool, opPos Pos) Expr {
	p.expect(IN)
	lparen := p.expect(LPAREN)
	p.enter(lparen)
	var list []Expr
	for {
		e := p.parseExpr()
		p.checkValue(e)
		list = append(list, e)
		if p.tok != COMMA {
			break
		}
		p.next()
	}
	p.leave()
	p.expect(RPAREN)
	p.checkValue(x)
	return &InExpr{X: x, Not: not, OpPos: opPos, List: list}
}

// parseUnaryExpr parses [+|-] operand. A sign directly before a number is
// folded into the literal; -9223372036854775808 is the one integer that
// exists only that way.
func (p *parser) parseUnaryExpr() Expr {
	if p.tok != ADD && p.tok != SUB {
		return p.parsePrimaryExpr()
	}
	pos, op := p.pos, p.tok
	p.next()
	if op == SUB && p.tok == INT {
		if u, err := strconv.ParseUint(p.lit, 10, 64); err == nil && u == 1<<63 {
			p.next()
			return &Literal{ValuePos: pos, Kind: INT, val: intValue(math.MinInt64)}
		}
	}
	p.enter(pos)
	x := p.parseUnaryExpr()
	p.leave()
	if lit, ok := x.(*Literal); ok && (lit.Kind == INT || lit.Kind == FLOAT) {
		lit.ValuePos = pos
		if op == SUB {
			if lit.Kind == INT {
				lit.val.i = -lit.val.i // wraps for MinInt64, as unchecked C# does
			} else {
				lit.val.f = -lit.val.f
			}
		}
		return lit
	}
	return &UnaryExpr{OpPos: pos, Op: op, X: x}
}

func (p *parser) parsePrimaryExpr() Expr {
	pos := p.pos
	switch p.tok {
	case INT:
		n, err := strconv.ParseInt(p.lit, 10, 64)
		if err != nil {
			p.errorAt(pos, "integer constant "+p.lit+" overflows Int64")
		}
		p.next()
		return &Literal{ValuePos: pos, Kind: INT, val: intValue(n)}
	case FLOAT:
		f, err := strconv.ParseFloat(p.lit, 64)
		if err != nil {
			p.errorAt(pos, "numeric constant "+p.lit+" out of range for Double")
			f = 0
		}
		p.next()
		return &Literal{ValuePos: pos, Kind: FLOAT, val: doubleValue(f)}
	case STRING:
		s := p.lit
		p.next()
		return &Literal{ValuePos: pos, Kind: STRING, val: stringValue(s)}
	case TRUE, FALSE:
		tok := p.tok
		p.next()
		return &Literal{ValuePos: pos, Kind: tok, val: boolValue(tok == TRUE)}
	case NULL:
		p.next()
		return &Literal{ValuePos: pos, Kind: NULL}
	case PARAM:
		name := p.lit
		p.next()
		return &Param{At: pos, Name: name}
	case LPAREN:
		p.enter(pos)
		p.next()
		x := p.parseExpr()
		p.leave()
		p.expect(RPAREN)
		return x
	case EXISTS:
		p.next()
		p.expect(LPAREN)
		prop := p.parseProperty()
		p.expect(RPAREN)
		return &ExistsExpr{Exists: pos, Prop: prop}
	case IDENT:
		if p.peek() == LPAREN {
			return p.parseCall()
		}
		return p.parseProperty()
	case DIDENT:
		return p.parseProperty()
	}
	p.errorExpected("expression")
	return nil // not reached
}

// parseCall parses newid() or property(name) / p(name).
func (p *parser) parseCall() Expr {
	pos, name := p.pos, p.lit
	var fn Func
	switch {
	case asciiEqualFold(name, "newid"):
		fn = FuncNewID
	case asciiEqualFold(name, "property"), asciiEqualFold(name, "p"):
		fn = FuncProperty
	default:
		p.errorAt(pos, "unknown function "+name)
		panic(bailout{})
	}
	p.enter(pos)
	p.next()
	p.expect(LPAREN)
	call := &Call{NamePos: pos, Func: fn}
	if fn == FuncProperty {
		arg := p.parseExpr()
		p.checkValue(arg)
		call.Args = []Expr{arg}
	}
	p.leave()
	p.expect(RPAREN)
	return call
}

// parseProperty parses [sys. | user.] name.
func (p *parser) parseProperty() *Property {
	pos := p.pos
	scope := ScopeDefault
	if p.tok == IDENT && p.peek() == PERIOD {
		switch {
		case asciiEqualFold(p.lit, "sys"):
			scope = ScopeSys
		case asciiEqualFold(p.lit, "user"):
			scope = ScopeUser
		default:
			p.errorAt(pos, "unknown scope "+p.lit+" (want sys or user)")
			panic(bailout{})
		}
		p.next() // scope
		p.next() // '.'
	}
	var name string
	switch {
	case p.tok == IDENT || p.tok == DIDENT:
		name = p.lit
	case scope != ScopeDefault && p.tok.IsKeyword():
		name = p.lit // user.in: after a scope, a keyword is a name
	default:
		p.errorExpected("property name")
	}
	namePos := p.pos
	p.next()
	if name == "" {
		p.errorAt(namePos, "empty property name")
	}
	x := &Property{NamePos: pos, Scope: scope, Name: name}
	if scope == ScopeSys {
		x.sys = lookupSys(name)
		if x.sys == sysInvalid {
			p.errorAt(namePos, "unknown system property sys."+name)
		} else {
			x.Name = sysProps[x.sys].name
		}
	}
	return x
}

// ----------------------------------------------------------------------------
// Entry points

// parseFilter parses filter text into a condition.
func parseFilter(src string) (x Expr, err error) {
	var p parser
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(bailout); !ok {
				panic(r)
			}
			x = nil
		}
		p.errors.Sort()
		err = p.errors.Err()
	}()
	if !utf8.ValidString(src) {
		p.errors.Add(position(src, firstInvalidUTF8(src)), "invalid UTF-8 encoding")
		return nil, nil
	}
	p.src = src
	if !p.checkLength() {
		return nil, nil
	}
	p.init(src, false)
	x = p.parseExpr()
	if p.tok != EOF {
		p.errorExpected("end of condition")
	}
	p.checkCondition(x)
	return x, nil
}

// parseAction parses action text into statements.
func parseAction(src string) (stmts []Stmt, err error) {
	var p parser
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(bailout); !ok {
				panic(r)
			}
			stmts = nil
		}
		p.errors.Sort()
		err = p.errors.Err()
	}()
	if !utf8.ValidString(src) {
		p.errors.Add(position(src, firstInvalidUTF8(src)), "invalid UTF-8 encoding")
		return nil, nil
	}
	p.src = src
	if !p.checkLength() {
		return nil, nil
	}
	p.init(src, true)
	for {
		var s Stmt
		switch p.tok {
		case SET:
			s = p.parseSet()
		case REMOVE:
			pos := p.pos
			p.next()
			prop := p.parseProperty()
			p.checkTarget(prop, "REMOVE")
			s = &RemoveStmt{Remove: pos, Prop: prop}
		default:
			p.errorExpected("SET or REMOVE")
		}
		stmts = append(stmts, s)
		if len(stmts) > MaxStatements {
			p.errorAt(s.Pos(), fmt.Sprintf("too many statements (limit %d)", MaxStatements))
			panic(bailout{})
		}
		if p.tok == SEMICOLON {
			p.next()
		}
		if p.tok == EOF {
			return stmts, nil
		}
	}
}

func (p *parser) parseSet() Stmt {
	pos := p.pos
	p.expect(SET)
	prop := p.parseProperty()
	p.checkTarget(prop, "SET")
	p.expect(EQL)
	x := p.parseExpr()
	p.checkValue(x)
	return &SetStmt{Set: pos, Prop: prop, Value: x}
}

// checkTarget reports a system property that an action may not change.
func (p *parser) checkTarget(prop *Property, verb string) {
	if prop.Scope == ScopeSys && prop.sys != sysInvalid && !sysProps[prop.sys].settable {
		p.errorAt(prop.Pos(), "cannot "+verb+" read-only system property sys."+prop.Name)
	}
}

func firstInvalidUTF8(s string) Pos {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, w := utf8.DecodeRuneInString(s[i:]); w == 1 {
				return Pos(i)
			}
		}
	}
	return Pos(len(s))
}
