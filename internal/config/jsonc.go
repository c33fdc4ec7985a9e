package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxDepth bounds the nesting of a configuration document. The real shape
// is eight levels deep; the bound only protects the recursive reader.
const maxDepth = 64

// stripJSONC turns JSON with comments into plain JSON of the same length:
// comments, a trailing comma before } or ], and a leading UTF-8 byte order
// mark become spaces, so byte offsets, lines and columns still match the
// original text. Comment markers inside strings are left alone.
func stripJSONC(src []byte) ([]byte, error) {
	out := bytes.Clone(src)
	i := 0
	if bytes.HasPrefix(out, []byte("\xef\xbb\xbf")) {
		out[0], out[1], out[2] = ' ', ' ', ' '
		i = 3
	}
	blank := func(from, to int) {
		for k := from; k < to; k++ {
			if out[k] != '\n' && out[k] != '\r' {
				out[k] = ' '
			}
		}
	}
	for i < len(out) {
		switch c := out[i]; {
		case c == '"':
			i = skipString(out, i)
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			end := bytes.IndexByte(out[i:], '\n')
			if end < 0 {
				end = len(out)
			} else {
				end += i
			}
			blank(i, end)
			i = end
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				line, col := position(src, i)
				return nil, fmt.Errorf("line %d, column %d: unterminated /* comment", line, col)
			}
			end += i + 4
			blank(i, end)
			i = end
		default:
			i++
		}
	}
	// Trailing commas: a comma followed only by white space before } or ].
	for i := 0; i < len(out); {
		switch out[i] {
		case '"':
			i = skipString(out, i)
		case ',':
			j := i + 1
			for j < len(out) && isSpace(out[j]) {
				j++
			}
			if j < len(out) && (out[j] == '}' || out[j] == ']') {
				out[i] = ' '
			}
			i++
		default:
			i++
		}
	}
	return out, nil
}

// skipString returns the index just past the string starting at b[i] == '"'
// (or len(b) when it is unterminated; the JSON reader reports that).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		case '\n':
			// JSON strings cannot span lines; stop here so that a stray
			// quote does not swallow the rest of the file's comments.
			return i
		}
	}
	return len(b)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// position returns the 1-based line and column (in bytes) of offset off.
func position(src []byte, off int) (line, col int) {
	if off > len(src) {
		off = len(src)
	}
	line = 1 + bytes.Count(src[:off], []byte{'\n'})
	col = off - bytes.LastIndexByte(src[:off], '\n')
	return line, col
}

type kind int

const (
	kNull kind = iota
	kBool
	kNumber
	kString
	kArray
	kObject
)

func (k kind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// node is a parsed JSON value that keeps object keys in order and
// duplicates, which encoding/json's maps would lose.
type node struct {
	kind  kind
	b     bool
	num   json.Number
	str   string
	keys  []string // kObject
	elems []*node  // kObject: values, in the order of keys; kArray: elements
}

// parseTree parses plain JSON (the output of stripJSONC) into a tree.
func parseTree(src []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	n, err := readValue(dec, 0)
	if err == nil {
		off := int(dec.InputOffset())
		for off < len(src) && isSpace(src[off]) {
			off++
		}
		if off == len(src) {
			return n, nil
		}
		err = &json.SyntaxError{Offset: int64(off)}
		return nil, syntaxError(src, err, "unexpected data after the top-level value")
	}
	return nil, syntaxError(src, err, "")
}

var errTooDeep = fmt.Errorf("nesting deeper than %d levels", maxDepth)

// syntaxError turns a decoder error into a message with a line and column.
func syntaxError(src []byte, err error, msg string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		line, col := position(src, len(src))
		return fmt.Errorf("line %d, column %d: unexpected end of input", line, col)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(src, int(se.Offset))
		if msg == "" {
			msg = se.Error()
		}
		return fmt.Errorf("line %d, column %d: %s", line, col, msg)
	}
	return err
}

func readValue(dec *json.Decoder, depth int) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kNull}, nil
	case bool:
		return &node{kind: kBool, b: t}, nil
	case json.Number:
		return &node{kind: kNumber, num: t}, nil
	case string:
		return &node{kind: kString, str: t}, nil
	case json.Delim:
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		n := &node{kind: kArray}
		if t == '{' {
			n.kind = kObject
		}
		for dec.More() {
			if n.kind == kObject {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k.(string)) // the decoder only yields string keys
			}
			v, err := readValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			n.elems = append(n.elems, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}
