package admin

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// Limits on request bodies.
const (
	maxBodyBytes = 1 << 20 // a description with 12 authorization rules is a few KB
	maxDepth     = 32
)

// element is a parsed XML element. Names carry the namespace URI the
// decoder resolved, never the prefix the client happened to use.
type element struct {
	name     xml.Name
	attrs    []xml.Attr // namespace declarations included, names resolved
	children []*element
	text     []byte // character data directly inside, concatenated
}

// value is the element's text without surrounding white space.
func (e *element) value() string { return strings.TrimSpace(string(e.text)) }

// isEmpty reports whether the element carries nothing: empty elements
// count as absent (Go always sends <AuthorizationRules></AuthorizationRules>,
// .NET <Parameters/>, §1.7).
func (e *element) isEmpty() bool { return len(e.children) == 0 && e.value() == "" }

// is reports whether e is named local in namespace ns, or in no namespace
// at all (hand-written bodies often declare none).
func (e *element) is(ns, local string) bool {
	return e.name.Local == local && (e.name.Space == ns || e.name.Space == "")
}

// child returns e's first child named local in the Service Bus namespace
// (or in none), nil if there is none.
func (e *element) child(local string) *element {
	for _, c := range e.children {
		if c.is(nsServiceBus, local) {
			return c
		}
	}
	return nil
}

// xsiType returns the local part of e's xsi:type attribute ("SqlFilter"
// for i:type="SqlFilter", "string" for i:type="d6p1:string"), "" if it has
// none. The attribute is known by its namespace, whatever its prefix (Go
// writes _XMLSchema-instance:type, JS p4:type); an undeclared prefix
// (i:type without xmlns:i) is accepted too.
func (e *element) xsiType() string {
	for _, a := range e.attrs {
		if a.Name.Local == "type" && a.Name.Space != "" && a.Name.Space != "xmlns" {
			v := strings.TrimSpace(a.Value)
			if i := strings.LastIndexByte(v, ':'); i >= 0 {
				v = v[i+1:]
			}
			return v
		}
	}
	return ""
}

// xsiNil reports whether e carries xsi:nil="true".
func (e *element) xsiNil() bool {
	for _, a := range e.attrs {
		if a.Name.Local == "nil" && a.Name.Space != "" && a.Name.Space != "xmlns" {
			v := strings.TrimSpace(a.Value)
			return v == "true" || v == "1"
		}
	}
	return false
}

// parseXML reads a whole document into an element tree. It reads the
// <?xml?> declaration the JS and Java clients send (UTF-8 only), resolves
// prefixes to namespaces, and refuses malformed or too deeply nested XML.
func parseXML(r io.Reader) (*element, error) {
	d := xml.NewDecoder(r)
	var root *element
	var stack []*element
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errorf(http.StatusRequestEntityTooLarge, "The request body exceeds %d bytes.", tooLarge.Limit)
		}
		if err != nil {
			return nil, badRequest("The request body is not well-formed XML: %v.", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if len(stack) == maxDepth {
				return nil, badRequest("The request body nests elements more than %d deep.", maxDepth)
			}
			e := &element{name: t.Name, attrs: t.Attr}
			if len(stack) == 0 {
				if root != nil {
					return nil, badRequest("The request body has more than one root element.")
				}
				root = e
			} else {
				parent := stack[len(stack)-1]
				parent.children = append(parent.children, e)
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				top := stack[len(stack)-1]
				top.text = append(top.text, t...)
			}
		}
	}
	if root == nil {
		return nil, badRequest("The request body is empty; it must be an Atom entry whose content is an entity description.")
	}
	return root, nil
}

// description returns the entity description a request body carries:
// entry › content › XxxDescription (§1.6). Other children of the entry (JS
// sends <updated>) are ignored. A bare description without the envelope is
// accepted too.
func description(root *element) (*element, error) {
	if root.name.Space == nsServiceBus || (root.name.Space == "" && strings.HasSuffix(root.name.Local, "Description")) {
		return root, nil
	}
	if !root.is(nsAtom, "entry") {
		return nil, badRequest("The request body's root element is <%s>; expected an Atom <entry>.", root.name.Local)
	}
	for _, c := range root.children {
		if !c.is(nsAtom, "content") {
			continue
		}
		for _, d := range c.children {
			if d.name.Space == nsServiceBus || d.name.Space == "" {
				return d, nil
			}
		}
		return nil, badRequest("The entry's <content> holds no entity description.")
	}
	return nil, badRequest("The entry has no <content> element.")
}

// field reads one property element into *P (a broker properties struct).
type field[P any] func(p *P, e *element) error

// decodeFields applies the fields table to the children of desc in
// whatever order they come. Children in a foreign namespace, unknown and
// read-only ones are ignored; empty ones count as absent, leaving *p's
// value (the default) alone. A property given twice is refused.
func decodeFields[P any](desc *element, fields map[string]field[P], p *P) error {
	seen := make(map[string]bool)
	for _, c := range desc.children {
		if c.name.Space != nsServiceBus && c.name.Space != "" {
			continue
		}
		f, ok := fields[c.name.Local]
		if !ok {
			continue
		}
		if seen[c.name.Local] {
			return badRequest("The property %s is given more than once.", c.name.Local)
		}
		seen[c.name.Local] = true
		if c.isEmpty() {
			continue
		}
		if err := f(p, c); err != nil {
			return err
		}
	}
	return nil
}

func durationField[P any](get func(*P) *time.Duration) field[P] {
	return func(p *P, e *element) error {
		d, err := parseDuration(e.name.Local, e.value())
		*get(p) = d
		return err
	}
}

func boolField[P any](get func(*P) *bool) field[P] {
	return func(p *P, e *element) error {
		b, err := parseBool(e.name.Local, e.value())
		*get(p) = b
		return err
	}
}

func int32Field[P any](get func(*P) *int32) field[P] {
	return func(p *P, e *element) error {
		n, err := parseInt(e.name.Local, e.value(), math.MinInt32, math.MaxInt32)
		*get(p) = int32(n)
		return err
	}
}

func int64Field[P any](get func(*P) *int64) field[P] {
	return func(p *P, e *element) error {
		n, err := parseInt(e.name.Local, e.value(), math.MinInt64, math.MaxInt64)
		*get(p) = n
		return err
	}
}

func stringField[P any](get func(*P) *string) field[P] {
	return func(p *P, e *element) error {
		*get(p) = e.value()
		return nil
	}
}

// forwardField reads ForwardTo / ForwardDeadLetteredMessagesTo: a bare
// entity name or an absolute URI (sb://host/name as Go and JS send it,
// http(s) from .NET and Java), stored as the entity name (§1.13) and, when
// it is an http(s) URI, also as written (addr), to be echoed back
// unchanged as Service Bus does.
func forwardField[P any](get func(*P) (name, addr *string)) field[P] {
	return func(p *P, e *element) error {
		v := e.value()
		name, addr := get(p)
		*name = config.ForwardEntityName(v)
		*addr = ""
		if strings.Contains(v, "://") && !strings.HasPrefix(strings.ToLower(v), "sb://") {
			*addr = v // sb:// forms are written back as sb://<host>/<name> anyway
		}
		return nil
	}
}

// parseDuration reads an ISO 8601 duration with config.ParseISO8601.
// Values beyond time.Duration's range, such as the service's "never"
// P10675199DT2H48M5.4775807S or Java's truncated P10675199DT2H48M5.477S,
// saturate to broker.Infinite.
func parseDuration(name, v string) (time.Duration, error) {
	d, err := config.ParseISO8601(v)
	if err != nil {
		return 0, invalidProperty(name, "%q is not an ISO 8601 duration such as PT30S, PT1M or P14D", v)
	}
	return d, nil
}

// parseBool reads xs:boolean: true, false, 1 or 0 (case-insensitively).
func parseBool(name, v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, invalidProperty(name, "%q is not a boolean (true or false)", v)
}

func parseInt(name, v string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, invalidProperty(name, "%q is not a whole number", v)
	}
	if err != nil || n < lo || n > hi {
		return 0, invalidProperty(name, "%s is out of range (%d … %d)", v, lo, hi)
	}
	return n, nil
}

// entityStatuses are the writeable values of Status.
var entityStatuses = []broker.EntityStatus{broker.StatusActive, broker.StatusDisabled, broker.StatusSendDisabled, broker.StatusReceiveDisabled}

// statusField reads Status case-insensitively into its canonical spelling.
// Anything else (including the read-only Creating, Deleting, …) is kept as
// sent, for the broker's validation to refuse with the allowed values.
func statusField[P any](get func(*P) *broker.EntityStatus) field[P] {
	return func(p *P, e *element) error {
		v := e.value()
		*get(p) = broker.EntityStatus(v)
		for _, s := range entityStatuses {
			if strings.EqualFold(string(s), v) {
				*get(p) = s
			}
		}
		return nil
	}
}
