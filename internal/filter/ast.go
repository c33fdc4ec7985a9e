package filter

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Node is a node of the syntax tree.
type Node interface {
	Pos() Pos       // position of the node's first character
	String() string // canonical text
}

// Expr is an expression: a condition (predicate) or a value. Parentheses
// leave no node of their own; printing inserts the ones precedence needs.
type Expr interface {
	Node
	exprNode()
}

// Stmt is one statement of a SQL rule action.
type Stmt interface {
	Node
	stmtNode()
}

// Scope is the scope prefix of a property reference.
type Scope uint8

// Property scopes. ScopeDefault (no prefix) means user.
const (
	ScopeDefault Scope = iota
	ScopeUser
	ScopeSys
)

type (
	// Property is a reference to a user or system property:
	// [sys. | user.] name.
	Property struct {
		NamePos Pos // position of the scope, or of the name if none
		Scope   Scope
		// Name is the unescaped property name; for ScopeSys it is the
		// canonical system property name (sys.messageid reads MessageId).
		Name string
		sys  sysProp
	}

	// Param is a reference to a rule parameter, @name. Parameters are
	// bound when the filter or action is compiled.
	Param struct {
		At    Pos
		Name  string // without '@'
		val   value
		bound bool
	}

	// Literal is a constant: Kind is INT, FLOAT, STRING, TRUE, FALSE or
	// NULL. A sign written directly before a number is folded into it.
	Literal struct {
		ValuePos Pos
		Kind     Token
		val      value
	}

	// Call is a function call: newid() or property(name). p(name) is
	// property(name).
	Call struct {
		NamePos Pos
		Func    Func
		Args    []Expr
	}

	// UnaryExpr is NOT x, -x or +x.
	UnaryExpr struct {
		OpPos Pos
		Op    Token // NOT, SUB or ADD
		X     Expr
	}

	// BinaryExpr is x op y for the logical (AND, OR), comparison and
	// arithmetic operators.
	BinaryExpr struct {
		X     Expr
		OpPos Pos
		Op    Token
		Y     Expr
	}

	// LikeExpr is x [NOT] LIKE pattern [ESCAPE escape].
	LikeExpr struct {
		X       Expr
		Not     bool
		OpPos   Pos // position of NOT or LIKE
		Pattern Expr
		Escape  Expr // or nil
		pat     *likePattern
	}

	// InExpr is x [NOT] IN (list).
	InExpr struct {
		X     Expr
		Not   bool
		OpPos Pos // position of NOT or IN
		List  []Expr
	}

	// IsNullExpr is x IS [NOT] NULL, where x is a property reference or a
	// property() call.
	IsNullExpr struct {
		X     Expr
		Not   bool
		OpPos Pos // position of IS
	}

	// ExistsExpr is EXISTS(property).
	ExistsExpr struct {
		Exists Pos
		Prop   *Property
	}
)

// Func identifies a built-in function.
type Func uint8

// Built-in functions.
const (
	FuncNewID    Func = iota + 1 // newid()
	FuncProperty                 // property(name), p(name)
)

type (
	// SetStmt is SET property = value.
	SetStmt struct {
		Set   Pos
		Prop  *Property
		Value Expr
	}

	// RemoveStmt is REMOVE property.
	RemoveStmt struct {
		Remove Pos
		Prop   *Property
	}
)

func (x *Property) Pos() Pos   { return x.NamePos }
func (x *Param) Pos() Pos      { return x.At }
func (x *Literal) Pos() Pos    { return x.ValuePos }
func (x *Call) Pos() Pos       { return x.NamePos }
func (x *UnaryExpr) Pos() Pos  { return x.OpPos }
func (x *BinaryExpr) Pos() Pos { return x.X.Pos() }
func (x *LikeExpr) Pos() Pos   { return x.X.Pos() }
func (x *InExpr) Pos() Pos     { return x.X.Pos() }
func (x *IsNullExpr) Pos() Pos { return x.X.Pos() }
func (x *ExistsExpr) Pos() Pos { return x.Exists }
func (s *SetStmt) Pos() Pos    { return s.Set }
func (s *RemoveStmt) Pos() Pos { return s.Remove }

func (*Property) exprNode()   {}
func (*Param) exprNode()      {}
func (*Literal) exprNode()    {}
func (*Call) exprNode()       {}
func (*UnaryExpr) exprNode()  {}
func (*BinaryExpr) exprNode() {}
func (*LikeExpr) exprNode()   {}
func (*InExpr) exprNode()     {}
func (*IsNullExpr) exprNode() {}
func (*ExistsExpr) exprNode() {}
func (*SetStmt) stmtNode()    {}
func (*RemoveStmt) stmtNode() {}

// Value returns the literal's Go value: int64, float64, string, bool or
// nil.
func (x *Literal) Value() any {
	v, _ := toAny(x.val)
	return v
}

// isCondition reports whether x is a condition (it yields TRUE, FALSE or
// unknown). TRUE and FALSE are both conditions and values.
func isCondition(x Expr) bool {
	switch x := x.(type) {
	case *BinaryExpr:
		return x.Op == AND || x.Op == OR || x.Op.Precedence() == CmpPrec
	case *UnaryExpr:
		return x.Op == NOT
	case *LikeExpr, *InExpr, *IsNullExpr, *ExistsExpr:
		return true
	case *Literal:
		return x.Kind == TRUE || x.Kind == FALSE
	}
	return false
}

// isValue reports whether x can be an operand of a comparison or of
// arithmetic.
func isValue(x Expr) bool {
	if l, ok := x.(*Literal); ok && (l.Kind == TRUE || l.Kind == FALSE) {
		return true
	}
	return !isCondition(x)
}

// Printing. Each node prints its canonical text: keywords in upper case,
// one space around binary operators, <> for inequality, system properties
// with their canonical names, and only the parentheses precedence needs.

const primaryPrec = UnaryPrec + 1

func exprPrec(x Expr) int {
	switch x := x.(type) {
	case *BinaryExpr:
		return x.Op.Precedence()
	case *UnaryExpr:
		if x.Op == NOT {
			return NotPrec
		}
		return UnaryPrec
	case *LikeExpr, *InExpr, *IsNullExpr:
		return CmpPrec
	}
	return primaryPrec
}

func printExpr(b *strings.Builder, x Expr, minPrec int) {
	if exprPrec(x) < minPrec {
		b.WriteByte('(')
		printExpr(b, x, LowestPrec)
		b.WriteByte(')')
		return
	}
	switch x := x.(type) {
	case *Property:
		printProperty(b, x)
	case *Param:
		b.WriteByte('@')
		b.WriteString(x.Name)
	case *Literal:
		printLiteral(b, x)
	case *Call:
		switch x.Func {
		case FuncNewID:
			b.WriteString("newid")
		default:
			b.WriteString("property")
		}
		b.WriteByte('(')
		for i, a := range x.Args {
			if i > 0 {
				b.WriteString(", ")
			}
			printExpr(b, a, LowestPrec)
		}
		b.WriteByte(')')
	case *UnaryExpr:
		if x.Op == NOT {
			b.WriteString("NOT ")
			printExpr(b, x.X, NotPrec)
			return
		}
		b.WriteString(x.Op.String())
		var ob strings.Builder
		printExpr(&ob, x.X, UnaryPrec)
		if s := ob.String(); strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			b.WriteByte(' ')
		}
		b.WriteString(ob.String())
	case *BinaryExpr:
		prec := x.Op.Precedence()
		printExpr(b, x.X, prec)
		b.WriteByte(' ')
		b.WriteString(x.Op.String())
		b.WriteByte(' ')
		printExpr(b, x.Y, prec+1)
	case *LikeExpr:
		printExpr(b, x.X, CmpPrec+1)
		if x.Not {
			b.WriteString(" NOT")
		}
		b.WriteString(" LIKE ")
		printExpr(b, x.Pattern, CmpPrec+1)
		if x.Escape != nil {
			b.WriteString(" ESCAPE ")
			printExpr(b, x.Escape, CmpPrec+1)
		}
	case *InExpr:
		printExpr(b, x.X, CmpPrec+1)
		if x.Not {
			b.WriteString(" NOT")
		}
		b.WriteString(" IN (")
		for i, e := range x.List {
			if i > 0 {
				b.WriteString(", ")
			}
			printExpr(b, e, LowestPrec)
		}
		b.WriteByte(')')
	case *IsNullExpr:
		printExpr(b, x.X, CmpPrec+1)
		if x.Not {
			b.WriteString(" IS NOT NULL")
		} else {
			b.WriteString(" IS NULL")
		}
	case *ExistsExpr:
		b.WriteString("EXISTS(")
		printProperty(b, x.Prop)
		b.WriteByte(')')
	}
}

func printProperty(b *strings.Builder, x *Property) {
	switch x.Scope {
	case ScopeSys:
		b.WriteString("sys.")
		b.WriteString(x.Name)
		return
	case ScopeUser:
		b.WriteString("user.")
	}
	printName(b, x.Name)
}

// printName writes a property name bare when it is a regular identifier
// that is not reserved, and as a [delimited identifier] otherwise.
func printName(b *strings.Builder, name string) {
	if isRegularIdent(name) && !IsReserved(name) {
		b.WriteString(name)
		return
	}
	b.WriteByte('[')
	b.WriteString(strings.ReplaceAll(name, "]", "]]"))
	b.WriteByte(']')
}

func isRegularIdent(s string) bool {
	for i, r := range s {
		if i == 0 && !isIdentStart(r) || i > 0 && !isIdentPart(r) {
			return false
		}
	}
	return s != "" && utf8.ValidString(s)
}

func printLiteral(b *strings.Builder, x *Literal) {
	switch x.Kind {
	case INT:
		b.WriteString(strconv.FormatInt(x.val.i, 10))
	case FLOAT:
		b.WriteString(formatDouble(x.val.f))
	case STRING:
		b.WriteString(quoteString(x.val.s))
	default:
		b.WriteString(x.Kind.String())
	}
}

// formatDouble prints f so that it scans back as a FLOAT token with the
// same value: the shortest round-trip form, with ".0" added when that form
// has neither a decimal point nor an exponent.
func formatDouble(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		// Not produced by the parser; printed for completeness.
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	// Fixed notation for moderate magnitudes, exponent otherwise.
	format := byte('e')
	if a := math.Abs(f); a == 0 || a >= 1e-6 && a < 1e21 {
		format = 'f'
	}
	s := strconv.FormatFloat(f, format, -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// quoteString returns s as a string constant, doubling single quotes.
func quoteString(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func nodeString(x Expr) string {
	var b strings.Builder
	printExpr(&b, x, LowestPrec)
	return b.String()
}

func (x *Property) String() string   { return nodeString(x) }
func (x *Param) String() string      { return nodeString(x) }
func (x *Literal) String() string    { return nodeString(x) }
func (x *Call) String() string       { return nodeString(x) }
func (x *UnaryExpr) String() string  { return nodeString(x) }
func (x *BinaryExpr) String() string { return nodeString(x) }
func (x *LikeExpr) String() string   { return nodeString(x) }
func (x *InExpr) String() string     { return nodeString(x) }
func (x *IsNullExpr) String() string { return nodeString(x) }
func (x *ExistsExpr) String() string { return nodeString(x) }

func (s *SetStmt) String() string {
	var b strings.Builder
	b.WriteString("SET ")
	printProperty(&b, s.Prop)
	b.WriteString(" = ")
	printExpr(&b, s.Value, LowestPrec)
	return b.String()
}

func (s *RemoveStmt) String() string {
	var b strings.Builder
	b.WriteString("REMOVE ")
	printProperty(&b, s.Prop)
	return b.String()
}

// Inspect traverses x depth-first, calling f for each node; if f returns
// false, the node's children are skipped.
func Inspect(x Node, f func(Node) bool) {
	if x == nil || !f(x) {
		return
	}
	switch x := x.(type) {
	case *Call:
		for _, a := range x.Args {
			Inspect(a, f)
		}
	case *UnaryExpr:
		Inspect(x.X, f)
	case *BinaryExpr:
		Inspect(x.X, f)
		Inspect(x.Y, f)
	case *LikeExpr:
		Inspect(x.X, f)
		Inspect(x.Pattern, f)
		if x.Escape != nil {
			Inspect(x.Escape, f)
		}
	case *InExpr:
		Inspect(x.X, f)
		for _, e := range x.List {
			Inspect(e, f)
		}
	case *IsNullExpr:
		Inspect(x.X, f)
	case *ExistsExpr:
		Inspect(x.Prop, f)
	case *SetStmt:
		Inspect(x.Prop, f)
		Inspect(x.Value, f)
	case *RemoveStmt:
		Inspect(x.Prop, f)
	}
}
