package filter

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// An ErrorHandler is called by the Scanner for each lexical error.
type ErrorHandler func(pos Pos, msg string)

// Scanner turns filter or action text into tokens. It is a hand-written
// state machine in the shape of go/scanner: Init it with the source, then
// call Scan until it returns EOF.
type Scanner struct {
	src     string
	actions bool // SET and REMOVE are keywords
	err     ErrorHandler
	off     int // reading offset (byte)

	// ErrorCount is the number of errors reported so far.
	ErrorCount int
}

// Init prepares s to scan src. When actions is true, SET and REMOVE are
// keywords (SQL rule action text); otherwise they are identifiers. err may
// be nil.
func (s *Scanner) Init(src string, actions bool, err ErrorHandler) {
	*s = Scanner{src: src, actions: actions, err: err}
}

func (s *Scanner) error(pos int, msg string) {
	if s.err != nil {
		s.err(Pos(pos), msg)
	}
	s.ErrorCount++
}

// peek returns the rune at offset i and its width, or (-1, 0) at the end.
func (s *Scanner) runeAt(i int) (rune, int) {
	if i >= len(s.src) {
		return -1, 0
	}
	if c := s.src[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s.src[i:])
}

func isIdentStart(r rune) bool { return r >= 0 && unicode.IsLetter(r) }

func isIdentPart(r rune) bool {
	return r == '_' || (r >= 0 && (unicode.IsLetter(r) || unicode.IsDigit(r)))
}

func isDigit(r rune) bool { return '0' <= r && r <= '9' }

// Scan returns the next token: its position, the token, and its literal.
// The literal is the source text for IDENT, keywords, INT and FLOAT; the
// unescaped name for DIDENT and PARAM (without '@'); the unescaped value
// for STRING; and "" for operators and EOF. A lexical error is reported to
// the error handler and returned as ILLEGAL.
//
// Long on purpose: as go/scanner's Scan is, one switch on the first
// character, a case per token class, reads as the lexical grammar.
func (s *Scanner) Scan() (pos Pos, tok Token, lit string) {
	// Skip white space.
	for {
		r, w := s.runeAt(s.off)
		if w == 0 || !unicode.IsSpace(r) {
			break
		}
		s.off += w
	}
	start := s.off
	pos = Pos(start)
	r, w := s.runeAt(start)
	if w == 0 {
		return pos, EOF, ""
	}
	if r == utf8.RuneError && w == 1 {
		s.off++
		s.error(start, "invalid UTF-8 encoding")
		return pos, ILLEGAL, s.src[start:s.off]
	}
	switch {
	case isIdentStart(r):
		s.off += w
		for {
			r, w := s.runeAt(s.off)
			if w == 0 || !isIdentPart(r) {
				break
			}
			s.off += w
		}
		lit = s.src[start:s.off]
		return pos, Lookup(lit, s.actions), lit
	case isDigit(r):
		return s.scanNumber(start)
	}
	s.off += w
	switch r {
	case '\'':
		val, ok := s.scanQuoted(start, '\'')
		if !ok {
			s.error(start, "string literal not terminated")
			return pos, ILLEGAL, ""
		}
		return pos, STRING, val
	case '"':
		val, ok := s.scanQuoted(start, '"')
		if !ok {
			s.error(start, "quoted identifier not terminated")
			return pos, ILLEGAL, ""
		}
		return pos, DIDENT, val
	case '[':
		val, ok := s.scanQuoted(start, ']')
		if !ok {
			s.error(start, "delimited identifier not terminated")
			return pos, ILLEGAL, ""
		}
		return pos, DIDENT, val
	case '@':
		for {
			r, w := s.runeAt(s.off)
			if w == 0 || !isIdentPart(r) {
				break
			}
			s.off += w
		}
		if s.off == start+1 {
			s.error(start, "parameter name expected after '@'")
			return pos, ILLEGAL, ""
		}
		return pos, PARAM, s.src[start+1 : s.off]
	case '+':
		return pos, ADD, ""
	case '-':
		return pos, SUB, ""
	case '*':
		return pos, MUL, ""
	case '/':
		return pos, QUO, ""
	case '%':
		return pos, REM, ""
	case '=':
		return pos, EQL, ""
	case '<':
		switch s.byteAt(s.off) {
		case '=':
			s.off++
			return pos, LEQ, ""
		case '>':
			s.off++
			return pos, NEQ, ""
		}
		return pos, LSS, ""
	case '>':
		if s.byteAt(s.off) == '=' {
			s.off++
			return pos, GEQ, ""
		}
		return pos, GTR, ""
	case '!':
		if s.byteAt(s.off) == '=' {
			s.off++
			return pos, NEQ, ""
		}
	case '(':
		return pos, LPAREN, ""
	case ')':
		return pos, RPAREN, ""
	case ',':
		return pos, COMMA, ""
	case '.':
		return pos, PERIOD, ""
	case ';':
		return pos, SEMICOLON, ""
	}
	s.error(start, fmt.Sprintf("illegal character %#U", r))
	return pos, ILLEGAL, s.src[start:s.off]
}

func (s *Scanner) byteAt(i int) byte {
	if i < len(s.src) {
		return s.src[i]
	}
	return 0
}

// scanNumber scans integer := Digit+, decimal := Digit+ '.' Digit+ and
// approx := Digit+ ['.' Digit+] ('E'|'e') ['+'|'-'] Digit+. A '.' or 'E'
// not followed by a digit ends the number and is scanned on its own.
func (s *Scanner) scanNumber(start int) (Pos, Token, string) {
	tok := INT
	s.skipDigits()
	if s.byteAt(s.off) == '.' && isDigit(rune(s.byteAt(s.off+1))) {
		tok = FLOAT
		s.off++
		s.skipDigits()
	}
	if c := s.byteAt(s.off); c == 'e' || c == 'E' {
		i := s.off + 1
		if c := s.byteAt(i); c == '+' || c == '-' {
			i++
		}
		if isDigit(rune(s.byteAt(i))) {
			tok = FLOAT
			s.off = i
			s.skipDigits()
		}
	}
	return Pos(start), tok, s.src[start:s.off]
}

func (s *Scanner) skipDigits() {
	for isDigit(rune(s.byteAt(s.off))) {
		s.off++
	}
}

// scanQuoted scans the rest of a literal opened at start and closed by
// quote, in which a doubled quote stands for one. It returns the unescaped
// text and whether the closing quote was found.
func (s *Scanner) scanQuoted(start int, quote byte) (string, bool) {
	body := s.off
	escaped := false
	for {
		i := strings.IndexByte(s.src[s.off:], quote)
		if i < 0 {
			s.off = len(s.src)
			return "", false
		}
		s.off += i + 1
		if s.byteAt(s.off) != quote {
			break
		}
		s.off++ // doubled quote
		escaped = true
	}
	val := s.src[body : s.off-1]
	if escaped {
		q := string(quote)
		val = strings.ReplaceAll(val, q+q, q)
	}
	return val, true
}
