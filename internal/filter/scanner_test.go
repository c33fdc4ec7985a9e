package filter

import (
	"fmt"
	"strings"
	"testing"
)

// scanAll returns the tokens of src as "TOK" or "TOK:lit" strings (lit is
// shown for literal tokens only), and the errors as "off: msg".
func scanAll(src string, actions bool) (toks, errs []string) {
	var s Scanner
	s.Init(src, actions, func(pos Pos, msg string) {
		errs = append(errs, fmt.Sprintf("%d: %s", pos, msg))
	})
	for {
		_, tok, lit := s.Scan()
		if tok == EOF {
			return toks, errs
		}
		if tok.IsLiteral() || tok == ILLEGAL {
			toks = append(toks, tok.String()+":"+lit)
		} else {
			toks = append(toks, tok.String())
		}
	}
}

func TestScan(t *testing.T) {
	tests := []struct {
		src     string
		actions bool
		want    string // tokens joined by spaces
	}{
		{src: "", want: ""},
		{src: " \t\r\n ", want: ""},
		{src: "color = 'red'", want: "IDENT:color = STRING:red"},
		{src: "a<>b!=c<d<=e>f>=g", want: "IDENT:a <> IDENT:b <> IDENT:c < IDENT:d <= IDENT:e > IDENT:f >= IDENT:g"},
		{src: "+-*/%(),.;", want: "+ - * / % ( ) , . ;"},
		// Keywords are case-insensitive; SET and REMOVE only in actions.
		{src: "and Or NOT like Escape in IS null Exists true FALSE", want: "AND OR NOT LIKE ESCAPE IN IS NULL EXISTS TRUE FALSE"},
		{src: "set remove", want: "IDENT:set IDENT:remove"},
		{src: "set remove", actions: true, want: "SET REMOVE"},
		{src: "ANDY notx", want: "IDENT:ANDY IDENT:notx"},
		// Identifiers: Unicode letters and digits, underscores after the first.
		{src: "a_1 Größe 名前 x٣", want: "IDENT:a_1 IDENT:Größe IDENT:名前 IDENT:x٣"},
		{src: "sys.Label user.x", want: "IDENT:sys . IDENT:Label IDENT:user . IDENT:x"},
		// Delimited and quoted identifiers, with doubled closers.
		{src: "[Property With Space] [HR-EmployeeID] [a]]b] []", want: "DIDENT:Property With Space DIDENT:HR-EmployeeID DIDENT:a]b DIDENT:"},
		{src: `"Contoso & Northwind" "a""b"`, want: `DIDENT:Contoso & Northwind DIDENT:a"b`},
		// Strings.
		{src: "'' 'it''s' 'a''''b' 'x\ny'", want: "STRING: STRING:it's STRING:a''b STRING:x\ny"},
		// Numbers.
		{src: "0 1894 007", want: "INT:0 INT:1894 INT:007"},
		{src: "1894.1204 2.0 101.5E5 0.5E-2 1e+3 1E3", want: "FLOAT:1894.1204 FLOAT:2.0 FLOAT:101.5E5 FLOAT:0.5E-2 FLOAT:1e+3 FLOAT:1E3"},
		{src: "1. .5 1e 1e+ 1.e5", want: "INT:1 . . INT:5 INT:1 IDENT:e INT:1 IDENT:e + INT:1 . IDENT:e5"},
		{src: "12abc", want: "INT:12 IDENT:abc"},
		// Parameters.
		{src: "@p @stringVar @_x @1", want: "PARAM:p PARAM:stringVar PARAM:_x PARAM:1"},
	}
	for _, tt := range tests {
		toks, errs := scanAll(tt.src, tt.actions)
		if got := strings.Join(toks, " "); got != tt.want {
			t.Errorf("scan %q:\n got %s\nwant %s", tt.src, got, tt.want)
		}
		if len(errs) > 0 {
			t.Errorf("scan %q: unexpected errors %v", tt.src, errs)
		}
	}
}

func TestScanPositions(t *testing.T) {
	src := "sys.Label\n  = 'x''y' AND [a b] <> @p"
	type tp struct {
		pos Pos
		tok Token
	}
	want := []tp{{0, IDENT}, {3, PERIOD}, {4, IDENT}, {12, EQL}, {14, STRING}, {21, AND}, {25, DIDENT}, {31, NEQ}, {34, PARAM}, {36, EOF}}
	var s Scanner
	s.Init(src, false, nil)
	for i, w := range want {
		pos, tok, _ := s.Scan()
		if pos != w.pos || tok != w.tok {
			t.Errorf("token %d: got %d %s, want %d %s", i, pos, tok, w.pos, w.tok)
		}
	}
	if got := position(src, 12); got.Line != 2 || got.Column != 3 {
		t.Errorf("position(12) = %v, want 2:3", got)
	}
	if got := position("é = ä", 5); got.Column != 5 {
		t.Errorf("columns count characters: got %v, want 1:5", got)
	}
}

func TestScanErrors(t *testing.T) {
	tests := []struct {
		src  string
		want string // first error
	}{
		{"a = 'abc", "4: string literal not terminated"},
		{"[abc", "0: delimited identifier not terminated"},
		{"x = [a]]", "4: delimited identifier not terminated"},
		{`"abc`, "0: quoted identifier not terminated"},
		{"a $ b", "2: illegal character U+0024 '$'"},
		{"a ! b", "2: illegal character U+0021 '!'"},
		{"a = _x", "4: illegal character U+005F '_'"},
		{"@ x", "0: parameter name expected after '@'"},
		{"a = '\xff'", ""}, // scanned as a string; CompileSQL rejects invalid UTF-8
		{"a \xff", "2: invalid UTF-8 encoding"},
	}
	for _, tt := range tests {
		_, errs := scanAll(tt.src, false)
		got := ""
		if len(errs) > 0 {
			got = errs[0]
		}
		if got != tt.want {
			t.Errorf("scan %q: got error %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestTokenPrecedence(t *testing.T) {
	order := [][]Token{{OR}, {AND}, {EQL, NEQ, LSS, LEQ, GTR, GEQ, LIKE, IN, IS, NOT}, {ADD, SUB}, {MUL, QUO, REM}}
	prec := []int{1, 2, CmpPrec, 5, 6} // NotPrec (3) is the prefix NOT's
	for i, level := range order {
		for _, tok := range level {
			if got := tok.Precedence(); got != prec[i] {
				t.Errorf("%s.Precedence() = %d, want %d", tok, got, prec[i])
			}
		}
	}
	if NotPrec <= AND.Precedence() || NotPrec >= EQL.Precedence() {
		t.Errorf("NOT must bind between AND and the comparisons")
	}
	for _, tok := range []Token{IDENT, INT, LPAREN, RPAREN, ESCAPE, NULL, EOF} {
		if tok.Precedence() != LowestPrec {
			t.Errorf("%s is not a binary operator", tok)
		}
	}
	if Lookup("KND", false) != IDENT { // Kelvin sign: no Unicode folding into keywords
		t.Errorf("Unicode folding produced a keyword")
	}
}
