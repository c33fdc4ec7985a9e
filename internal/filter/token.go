package filter

import "strconv"

// Token is a lexical token of the rule language.
type Token int

// The list of tokens.
const (
	ILLEGAL Token = iota
	EOF

	literalBeg
	IDENT  // color, sys, Label (regular identifier)
	DIDENT // [delimited identifier] or "quoted identifier"; lit is the unescaped name
	PARAM  // @name; lit is the name without '@'
	INT    // 1894
	FLOAT  // 1894.1204, 101.5E5
	STRING // 'abc'; lit is the unescaped value
	literalEnd

	operatorBeg
	ADD // +
	SUB // -
	MUL // *
	QUO // /
	REM // %

	EQL // =
	NEQ // <> or !=
	LSS // <
	LEQ // <=
	GTR // >
	GEQ // >=

	LPAREN    // (
	RPAREN    // )
	COMMA     // ,
	PERIOD    // .
	SEMICOLON // ;
	operatorEnd

	keywordBeg
	AND
	OR
	NOT
	LIKE
	ESCAPE
	IN
	IS
	NULL
	EXISTS
	TRUE
	FALSE
	SET    // actions only
	REMOVE // actions only
	keywordEnd
)

var tokens = [...]string{
	ILLEGAL: "ILLEGAL",
	EOF:     "EOF",

	IDENT:  "IDENT",
	DIDENT: "DIDENT",
	PARAM:  "PARAM",
	INT:    "INT",
	FLOAT:  "FLOAT",
	STRING: "STRING",

	ADD: "+",
	SUB: "-",
	MUL: "*",
	QUO: "/",
	REM: "%",

	EQL: "=",
	NEQ: "<>",
	LSS: "<",
	LEQ: "<=",
	GTR: ">",
	GEQ: ">=",

	LPAREN:    "(",
	RPAREN:    ")",
	COMMA:     ",",
	PERIOD:    ".",
	SEMICOLON: ";",

	AND:    "AND",
	OR:     "OR",
	NOT:    "NOT",
	LIKE:   "LIKE",
	ESCAPE: "ESCAPE",
	IN:     "IN",
	IS:     "IS",
	NULL:   "NULL",
	EXISTS: "EXISTS",
	TRUE:   "TRUE",
	FALSE:  "FALSE",
	SET:    "SET",
	REMOVE: "REMOVE",
}

// String returns the token's text for operators and keywords (in canonical
// upper case) and its name for the other tokens.
func (tok Token) String() string {
	if 0 <= tok && tok < Token(len(tokens)) && tokens[tok] != "" {
		return tokens[tok]
	}
	return "token(" + strconv.Itoa(int(tok)) + ")"
}

// Precedence levels. Binary operators bind by Token.Precedence; NOT as a
// prefix operator binds at NotPrec, between AND and the comparisons, so
// NOT a = 1 AND b = 2 is (NOT (a = 1)) AND (b = 2).
const (
	LowestPrec = 0 // non-operators
	NotPrec    = 3
	CmpPrec    = 4
	UnaryPrec  = 7
)

// Precedence returns the binding strength of tok used as a binary (infix)
// operator, or LowestPrec if it is not one. NOT is reported at CmpPrec for
// its infix uses NOT LIKE and NOT IN; IS stands for IS [NOT] NULL.
func (tok Token) Precedence() int {
	switch tok {
	case OR:
		return 1
	case AND:
		return 2
	case EQL, NEQ, LSS, LEQ, GTR, GEQ, LIKE, IN, IS, NOT:
		return CmpPrec
	case ADD, SUB:
		return 5
	case MUL, QUO, REM:
		return 6
	}
	return LowestPrec
}

// IsLiteral reports whether tok is an identifier, parameter or constant
// token.
func (tok Token) IsLiteral() bool { return literalBeg < tok && tok < literalEnd }

// IsOperator reports whether tok is an operator or delimiter.
func (tok Token) IsOperator() bool { return operatorBeg < tok && tok < operatorEnd }

// IsKeyword reports whether tok is a keyword.
func (tok Token) IsKeyword() bool { return keywordBeg < tok && tok < keywordEnd }

// Lookup maps an identifier to its keyword token, or IDENT if it is not a
// keyword. Keywords are case-insensitive (ASCII letters only). SET and
// REMOVE are keywords only when actions is true: in a filter they are
// ordinary property names.
func Lookup(ident string, actions bool) Token {
	for tok := keywordBeg + 1; tok < keywordEnd; tok++ {
		if asciiEqualFold(ident, tokens[tok]) {
			if (tok == SET || tok == REMOVE) && !actions {
				return IDENT
			}
			return tok
		}
	}
	return IDENT
}

// IsReserved reports whether name cannot be written as a bare property name
// in a filter or an action.
func IsReserved(name string) bool {
	return Lookup(name, true) != IDENT
}

// asciiEqualFold is strings.EqualFold restricted to ASCII letters, so that
// no Unicode folding (the Kelvin sign for K, for one) turns an identifier
// into a keyword or a system property name.
func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if a == b {
			continue
		}
		if 'a' <= a && a <= 'z' {
			a -= 'a' - 'A'
		}
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}
