package filter

import (
	"strings"
	"unicode/utf8"
)

// likePattern is a compiled LIKE pattern: the segments between '%'
// wildcards, each a fixed-width sequence of literal runs and '_'
// wildcards. The pattern matches the whole string (it is anchored at both
// ends), case-sensitively and ordinally; '_' matches one character (rune).
type likePattern struct {
	segs []likeSeg // len(segs)-1 is the number of '%' runs
}

type likeSeg []likeTok

// likeTok is a literal run (lit != "") or a single '_' (lit == "").
type likeTok struct {
	lit string
}

// compileLike compiles pattern. If hasEsc, esc makes the character after
// it literal; a pattern ending in the escape character is invalid.
func compileLike(pattern string, esc rune, hasEsc bool) (*likePattern, string) {
	lp := &likePattern{segs: []likeSeg{nil}}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			i := len(lp.segs) - 1
			lp.segs[i] = append(lp.segs[i], likeTok{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(pattern); {
		r, w := utf8.DecodeRuneInString(pattern[i:])
		i += w
		switch {
		case hasEsc && r == esc:
			if i >= len(pattern) {
				return nil, "the LIKE pattern ends with the escape character"
			}
			_, w = utf8.DecodeRuneInString(pattern[i:])
			lit.WriteString(pattern[i : i+w])
			i += w
		case r == '%':
			flush()
			if last := lp.segs[len(lp.segs)-1]; len(lp.segs) > 1 && len(last) == 0 {
				continue // %% is %
			}
			lp.segs = append(lp.segs, nil)
		case r == '_':
			flush()
			i := len(lp.segs) - 1
			lp.segs[i] = append(lp.segs[i], likeTok{})
		default:
			lit.WriteString(pattern[i-w : i])
		}
	}
	flush()
	return lp, ""
}

// matchAt matches seg at the start of s and returns the bytes consumed.
func (seg likeSeg) matchAt(s string) (int, bool) {
	n := 0
	for _, t := range seg {
		if t.lit != "" {
			if !strings.HasPrefix(s[n:], t.lit) {
				return 0, false
			}
			n += len(t.lit)
			continue
		}
		if n >= len(s) {
			return 0, false
		}
		_, w := utf8.DecodeRuneInString(s[n:])
		n += w
	}
	return n, true
}

// runes returns the number of characters seg matches.
func (seg likeSeg) runes() int {
	n := 0
	for _, t := range seg {
		if t.lit == "" {
			n++
		} else {
			n += utf8.RuneCountInString(t.lit)
		}
	}
	return n
}

// match reports whether s matches the whole pattern. It does not allocate.
func (lp *likePattern) match(s string) bool {
	segs := lp.segs
	first, ok := segs[0].matchAt(s)
	if !ok {
		return false
	}
	if len(segs) == 1 {
		return first == len(s)
	}
	s = s[first:]

	// The last segment is anchored at the end: find where its characters
	// start, and keep the middle segments out of that tail.
	last := segs[len(segs)-1]
	k := len(s)
	for n := last.runes(); n > 0; n-- {
		if k == 0 {
			return false
		}
		_, w := utf8.DecodeLastRuneInString(s[:k])
		k -= w
	}
	if n, ok := last.matchAt(s[k:]); !ok || n != len(s)-k {
		return false
	}
	s = s[:k]

	// Middle segments: leftmost match of each, in order, is optimal.
	for _, seg := range segs[1 : len(segs)-1] {
		i, n, ok := seg.find(s)
		if !ok {
			return false
		}
		s = s[i+n:]
	}
	return true
}

// find returns the leftmost position in s where seg matches.
func (seg likeSeg) find(s string) (at, n int, ok bool) {
	for i := 0; i <= len(s); {
		if len(seg) > 0 && seg[0].lit != "" {
			j := strings.Index(s[i:], seg[0].lit)
			if j < 0 {
				return 0, 0, false
			}
			i += j
		}
		if n, ok := seg.matchAt(s[i:]); ok {
			return i, n, true
		}
		if i == len(s) {
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return 0, 0, false
}
