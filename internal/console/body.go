package console

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// A message's body is stored as its encoded AMQP body sections:
//
//	data:           0x00 0x53 0x75 binary      (one or more; bytes)
//	amqp-value:     0x00 0x53 0x77 any value   (one)
//	amqp-sequence:  0x00 0x53 0x76 list        (one or more)
//
// decodeBody turns them into what the console shows; what it cannot read
// is shown in hex.

const (
	descData     = 0x75
	descSequence = 0x76
	descValue    = 0x77
	maxBodyShown = 1 << 20
)

type body struct {
	Kind  string // "data", "value", "sequence", "raw" (undecodable)
	Bytes []byte // the data sections' bytes; a string value's text; else the raw encoding
	Text  string // Bytes as text where valid UTF-8, for searching
	Value any    // an amqp-value or amqp-sequence's decoded value
	Guess string // the best view: json, xml, text or hex
	Err   string
	// Large says Bytes are the first previewBytes of a large message's
	// payload (large.go), whose length is Total.
	Large bool
	Total int64
}

// decodeBody decodes encoded body sections. It never fails: a body it
// cannot decode is returned raw.
func decodeBody(raw []byte) body {
	b := body{Kind: "data"}
	r := encoding.NewReader(raw)
	var data []byte
	var vals []any
	for r.Len() > 0 {
		code, _, err := r.ReadDescriptor()
		if err != nil {
			return rawBody(raw, err)
		}
		switch code {
		case descData:
			p, err := r.ReadBinary()
			if err != nil {
				return rawBody(raw, err)
			}
			data = append(data, p...)
		case descValue, descSequence:
			v, err := r.ReadAny()
			if err != nil {
				return rawBody(raw, err)
			}
			if code == descValue {
				b.Kind = "value"
			} else {
				b.Kind = "sequence"
			}
			vals = append(vals, v)
		default:
			return rawBody(raw, fmt.Errorf("unknown body section 0x%x", code))
		}
	}
	switch {
	case b.Kind == "data":
		b.Bytes = data
	case len(vals) == 1:
		if s, ok := vals[0].(string); ok {
			b.Bytes = []byte(s)
		} else {
			b.Value = vals[0]
			b.Bytes = raw
		}
	default:
		b.Value = vals
		b.Bytes = raw
	}
	if utf8.Valid(b.Bytes) && (b.Kind == "data" || b.Value == nil) {
		b.Text = string(b.Bytes)
	} else if b.Value != nil {
		b.Text = fmt.Sprint(b.Value)
	}
	b.Guess = guess(b)
	return b
}

func rawBody(raw []byte, err error) body {
	return body{Kind: "raw", Bytes: raw, Guess: "hex", Err: err.Error()}
}

func guess(b body) string {
	if b.Value != nil {
		return "text"
	}
	t := bytes.TrimSpace(b.Bytes)
	switch {
	case len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t):
		return "json"
	case len(t) > 0 && t[0] == '<':
		return "xml"
	case utf8.Valid(b.Bytes):
		return "text"
	}
	return "hex"
}

// Render shows the body as view (json, xml, text, hex).
func (b body) Render(view string) string {
	p := b.Bytes
	if len(p) > maxBodyShown {
		p = p[:maxBodyShown]
	}
	switch view {
	case "json":
		var out bytes.Buffer
		if err := json.Indent(&out, bytes.TrimSpace(p), "", "  "); err == nil {
			return out.String()
		}
	case "xml":
		if s, ok := indentXML(p); ok {
			return s
		}
	case "hex":
		return hex.Dump(p)
	}
	if b.Value != nil {
		return fmt.Sprintf("%#v", b.Value)
	}
	if utf8.Valid(p) {
		return string(p)
	}
	return hex.Dump(p)
}

func indentXML(p []byte) (string, bool) {
	d := xml.NewDecoder(bytes.NewReader(p))
	var out bytes.Buffer
	e := xml.NewEncoder(&out)
	e.Indent("", "  ")
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", false
		}
		if cd, ok := tok.(xml.CharData); ok && len(bytes.TrimSpace(cd)) == 0 {
			continue
		}
		if err := e.EncodeToken(xml.CopyToken(tok)); err != nil {
			return "", false
		}
	}
	if err := e.Flush(); err != nil {
		return "", false
	}
	return out.String(), true
}

// encodeDataBody is p as one data section.
func encodeDataBody(p []byte) []byte {
	b := encoding.NewBuffer(nil)
	b.WriteDescriptor(descData)
	b.WriteBinary(p)
	return b.Bytes()
}

// jsonPath evaluates a simple JSON path ($.a.b[0].c, the "$." optional)
// on a JSON body; the result as text (a string unquoted, anything else
// as JSON).
func jsonPath(doc []byte, path string) (string, bool) {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return "", false
	}
	path = strings.TrimPrefix(strings.TrimPrefix(path, "$"), ".")
	for path != "" {
		var key string
		switch {
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return "", false
			}
			i, err := strconv.Atoi(path[1:end])
			arr, ok := v.([]any)
			if err != nil || !ok || i < 0 || i >= len(arr) {
				return "", false
			}
			v, path = arr[i], strings.TrimPrefix(path[end+1:], ".")
			continue
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			key, path = path[:end], strings.TrimPrefix(path[end:], ".")
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[key]; !ok {
			return "", false
		}
	}
	if s, ok := v.(string); ok {
		return s, true
	}
	out, _ := json.Marshal(v)
	return string(out), true
}
