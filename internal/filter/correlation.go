package filter

import (
	"errors"
	"fmt"
	"sort"
)

// CorrelationFilter matches messages by equality on system properties and
// user properties. Every set field must equal the message's value (the
// fields are ANDed); an empty string means the field is not set. It is the
// equivalent of
//
//	sys.CorrelationId = '…' AND sys.Label = '…' AND color = 'Red' …
//
// with two differences: it never fails (a type mismatch is no match), and
// a missing or null message property is no match.
//
// String comparison is exact and case-sensitive. Property values compare
// with their types: the string '2' does not match the integer 2, while
// integers of any width and doubles compare numerically (so a JavaScript
// client's 2.0 matches 2). Property names, as in SQL filters, are
// case-insensitive.
type CorrelationFilter struct {
	CorrelationID    string
	MessageID        string
	To               string
	ReplyTo          string
	Label            string // Subject
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	// Properties are the user properties to match, with values of the
	// types a rule's typed key/value pairs carry: string, the integer
	// types, float32/float64, bool, time.Time, time.Duration (and
	// message.UUID, message.Symbol, message.Char).
	Properties map[string]any
}

// Validate reports a filter that the service would refuse: one with no
// field set, or with a property of an unsupported type or a nil value.
func (c *CorrelationFilter) Validate() error {
	if c.CorrelationID == "" && c.MessageID == "" && c.To == "" && c.ReplyTo == "" &&
		c.Label == "" && c.SessionID == "" && c.ReplyToSessionID == "" &&
		c.ContentType == "" && len(c.Properties) == 0 {
		return errors.New("filter: correlation filter has no property set")
	}
	keys := make([]string, 0, len(c.Properties))
	for k := range c.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := c.Properties[k]
		switch {
		case k == "":
			return errors.New("filter: correlation filter property with an empty name")
		case v == nil:
			return fmt.Errorf("filter: correlation filter property %q has no value", k)
		case !supportedParam(v):
			return fmt.Errorf("filter: correlation filter property %q has unsupported type %T", k, v)
		}
	}
	return nil
}

// Match reports whether the message matches every set field. The error is
// always nil; it is there to implement Matcher.
func (c *CorrelationFilter) Match(env *Env) (bool, error) {
	if env == nil {
		env = &emptyEnv
	}
	m := env.msg()
	if c.CorrelationID != "" {
		if id, ok := idString(m.CorrelationID); !ok || id != c.CorrelationID {
			return false, nil
		}
	}
	if c.MessageID != "" {
		if id, ok := idString(m.MessageID); !ok || id != c.MessageID {
			return false, nil
		}
	}
	if !fieldMatches(c.To, m.To) ||
		!fieldMatches(c.ReplyTo, m.ReplyTo) ||
		!fieldMatches(c.Label, m.Subject) ||
		!fieldMatches(c.SessionID, m.SessionID) ||
		!fieldMatches(c.ReplyToSessionID, m.ReplyToSessionID) ||
		!fieldMatches(c.ContentType, m.ContentType) {
		return false, nil
	}
	for k, want := range c.Properties {
		_, got, ok := lookupUser(m.ApplicationProperties, k)
		if !ok {
			return false, nil
		}
		if !sameValue(fromAny(got), fromAny(want)) {
			return false, nil
		}
	}
	return true, nil
}

func fieldMatches(want, got string) bool {
	return want == "" || want == got
}

// sameValue is = without the errors: values of different types (other
// than Int64 against Double) are simply unequal.
func sameValue(a, b value) bool {
	if a.kind != b.kind && !(a.isNumeric() && b.isNumeric()) {
		return false
	}
	if a.kind == kindBinary || a.kind == kindOther {
		return false
	}
	t, err := compare(EQL, &a, &b)
	return err == nil && t == isTrue
}
