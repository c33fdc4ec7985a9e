package admin

import (
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/message"
)

// Rules in XML (§1.10):
//
//	<RuleDescription>
//	  <Filter i:type="SqlFilter">        SqlExpression, CompatibilityLevel, Parameters
//	  <Filter i:type="TrueFilter">       SqlExpression 1=1, CompatibilityLevel
//	  <Filter i:type="FalseFilter">      SqlExpression 1=0, CompatibilityLevel
//	  <Filter i:type="CorrelationFilter"> CorrelationId, MessageId, To, ReplyTo,
//	                                     Label, SessionId, ReplyToSessionId,
//	                                     ContentType, Properties
//	  <Action i:type="SqlRuleAction">    SqlExpression, CompatibilityLevel, Parameters
//	  <Action i:type="EmptyRuleAction"/>
//	  <CreatedAt/> <Name/>
//	</RuleDescription>
//
// Parameters and Properties hold typed pairs:
//
//	<KeyValueOfstringanyType><Key>@p</Key>
//	  <Value i:type="d6p1:int" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">5</Value>
//	</KeyValueOfstringanyType>

// XML namespaces of typed values.
const (
	nsXSD = "http://www.w3.org/2001/XMLSchema"
	// nsSerialization holds the .NET types XML Schema lacks: guid, char,
	// and the duration .NET reads TimeSpan values from.
	nsSerialization = "http://schemas.microsoft.com/2003/10/Serialization/"
)

// compatibilityLevel is what the service writes in CompatibilityLevel.
const compatibilityLevel = 20

// correlationFields are the correlation filter's string fields in the
// order the service writes them.
var correlationFields = []struct {
	name string
	get  func(*broker.CorrelationFilter) *string
}{
	{"CorrelationId", func(c *broker.CorrelationFilter) *string { return &c.CorrelationID }},
	{"MessageId", func(c *broker.CorrelationFilter) *string { return &c.MessageID }},
	{"To", func(c *broker.CorrelationFilter) *string { return &c.To }},
	{"ReplyTo", func(c *broker.CorrelationFilter) *string { return &c.ReplyTo }},
	{"Label", func(c *broker.CorrelationFilter) *string { return &c.Label }},
	{"SessionId", func(c *broker.CorrelationFilter) *string { return &c.SessionID }},
	{"ReplyToSessionId", func(c *broker.CorrelationFilter) *string { return &c.ReplyToSessionID }},
	{"ContentType", func(c *broker.CorrelationFilter) *string { return &c.ContentType }},
}

// decodeRule reads a RuleDescription (or a subscription's
// DefaultRuleDescription, which has the same content) into a rule. Name
// is the element's Name, "" when absent. The filter and action are
// checked for shape here; the broker compiles them and refuses bad SQL.
func decodeRule(desc *element) (broker.RuleDescription, error) {
	var r broker.RuleDescription
	seen := make(map[string]bool)
	for _, c := range desc.children {
		if c.name.Space != nsServiceBus && c.name.Space != "" {
			continue
		}
		switch c.name.Local {
		case "Filter", "Action", "Name":
		default:
			continue // CreatedAt and unknown elements
		}
		if seen[c.name.Local] {
			return broker.RuleDescription{}, badRequest("The rule's %s is given more than once.", c.name.Local)
		}
		seen[c.name.Local] = true
		var err error
		switch c.name.Local {
		case "Filter":
			r.Filter, err = decodeFilter(c)
		case "Action":
			r.Action, err = decodeAction(c)
		case "Name":
			r.Name = c.value()
		}
		if err != nil {
			return broker.RuleDescription{}, err
		}
	}
	if !seen["Filter"] {
		// Every SDK sends a filter; without one, the rule matches
		// everything, as the SDKs' own default is a TrueFilter.
		r.Filter = broker.TrueRuleFilter()
	}
	return r, nil
}

// decodeFilter reads a <Filter>. Its kind is its xsi:type; without one, a
// SqlExpression makes it a SQL filter and correlation fields a
// correlation filter.
func decodeFilter(e *element) (broker.RuleFilter, error) {
	typ := e.xsiType()
	if typ == "" {
		switch {
		case e.child("SqlExpression") != nil:
			typ = "SqlFilter"
		case hasCorrelationChild(e):
			typ = "CorrelationFilter"
		default:
			return broker.RuleFilter{}, invalidProperty("Filter", "it has no i:type (SqlFilter, CorrelationFilter, TrueFilter or FalseFilter) and no SqlExpression or correlation properties")
		}
	}
	switch typ {
	case "TrueFilter":
		return broker.TrueRuleFilter(), nil
	case "FalseFilter":
		return broker.FalseRuleFilter(), nil
	case "SqlFilter":
		expr, err := sqlExpression(e, "Filter")
		if err != nil {
			return broker.RuleFilter{}, err
		}
		params, err := decodeKeyValues(e.child("Parameters"), "Filter Parameters")
		if err != nil {
			return broker.RuleFilter{}, err
		}
		return broker.SQLRuleFilter(expr, params), nil
	case "CorrelationFilter":
		var cf broker.CorrelationFilter
		for _, f := range correlationFields {
			// Values are kept exactly (they match case- and
			// space-sensitively); an empty or blank element is unset.
			if c := e.child(f.name); c != nil && c.value() != "" {
				*f.get(&cf) = string(c.text)
			}
		}
		props, err := decodeKeyValues(e.child("Properties"), "CorrelationFilter Properties")
		if err != nil {
			return broker.RuleFilter{}, err
		}
		cf.Properties = props
		return broker.CorrelationRuleFilter(cf), nil
	}
	return broker.RuleFilter{}, invalidProperty("Filter", "the type %q is not one of SqlFilter, CorrelationFilter, TrueFilter, FalseFilter", typ)
}

func hasCorrelationChild(e *element) bool {
	if e.child("Properties") != nil {
		return true
	}
	for _, f := range correlationFields {
		if e.child(f.name) != nil {
			return true
		}
	}
	return false
}

// decodeAction reads an <Action>: nil for an EmptyRuleAction (or an empty
// element without a type).
func decodeAction(e *element) (*broker.SQLAction, error) {
	typ := e.xsiType()
	if typ == "" {
		if e.child("SqlExpression") == nil {
			return nil, nil
		}
		typ = "SqlRuleAction"
	}
	switch typ {
	case "EmptyRuleAction":
		return nil, nil
	case "SqlRuleAction":
		expr, err := sqlExpression(e, "Action")
		if err != nil {
			return nil, err
		}
		params, err := decodeKeyValues(e.child("Parameters"), "Action Parameters")
		if err != nil {
			return nil, err
		}
		return &broker.SQLAction{Expression: expr, Parameters: params}, nil
	}
	return nil, invalidProperty("Action", "the type %q is not one of SqlRuleAction, EmptyRuleAction", typ)
}

// sqlExpression returns the SqlExpression of a filter or action exactly
// as sent (the rule gives it back verbatim), refusing a missing or blank
// one.
func sqlExpression(e *element, what string) (string, error) {
	c := e.child("SqlExpression")
	if c == nil || strings.TrimSpace(string(c.text)) == "" {
		return "", invalidProperty(what, "a %s needs a SqlExpression", e.xsiTypeOr(what))
	}
	return string(c.text), nil
}

// xsiTypeOr is e's xsi:type, or def when it has none.
func (e *element) xsiTypeOr(def string) string {
	if t := e.xsiType(); t != "" {
		return t
	}
	return def
}

// decodeKeyValues reads a list of KeyValueOfstringanyType pairs; nil (or
// empty) e is no pairs. what names the list in errors.
func decodeKeyValues(e *element, what string) (map[string]any, error) {
	if e == nil {
		return nil, nil
	}
	var m map[string]any
	for _, kv := range e.children {
		if !kv.is(nsServiceBus, "KeyValueOfstringanyType") {
			continue
		}
		var key *element
		var val *element
		for _, c := range kv.children {
			switch {
			case c.name.Local == "Key":
				key = c
			case c.name.Local == "Value":
				val = c
			}
		}
		if key == nil || key.value() == "" {
			return nil, invalidProperty(what, "a KeyValueOfstringanyType has no Key")
		}
		k := key.value()
		if val == nil {
			return nil, invalidProperty(what, "%q has no Value", k)
		}
		if _, dup := m[k]; dup {
			return nil, invalidProperty(what, "%q is given more than once", k)
		}
		v, err := parseTyped(val)
		if err != nil {
			return nil, invalidProperty(what, "%q: %s", k, err.Msg)
		}
		if m == nil {
			m = make(map[string]any)
		}
		m[k] = v
	}
	return m, nil
}

// parseTyped reads a typed <Value> by its xsi:type (the prefix is not
// looked at: XML Schema and .NET's Serialization namespace share no type
// name that means different things). Long on purpose: its branches are
// the table of xsi:type names, one case each.
func parseTyped(e *element) (any, *Error) {
	if e.xsiNil() {
		return nil, badRequest("null values are not supported")
	}
	typ := e.xsiType()
	raw := string(e.text)
	v := strings.TrimSpace(raw)
	bad := func(what string) (any, *Error) {
		return nil, badRequest("%q is not %s", v, what)
	}
	integer := func(bits int, what string) (int64, *Error) {
		n, err := strconv.ParseInt(v, 10, bits)
		if err != nil {
			return 0, badRequest("%q is not %s (%d … %d)", v, what, int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
		}
		return n, nil
	}
	unsigned := func(bits int, what string) (uint64, *Error) {
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			return 0, badRequest("%q is not %s (0 … %d)", v, what, uint64(1)<<bits-1)
		}
		return n, nil
	}
	switch typ {
	case "", "string": // an untyped value is a string
		return raw, nil
	case "boolean":
		switch strings.ToLower(v) {
		case "true", "1":
			return true, nil
		case "false", "0":
			return false, nil
		}
		return bad("a boolean (true or false)")
	case "int":
		n, err := integer(32, "an int")
		return int32(n), err
	case "long":
		n, err := integer(64, "a long")
		return n, err
	case "short":
		n, err := integer(16, "a short")
		return int16(n), err
	case "byte":
		n, err := integer(8, "a byte")
		return int8(n), err
	case "unsignedByte":
		n, err := unsigned(8, "an unsignedByte")
		return uint8(n), err
	case "unsignedShort":
		n, err := unsigned(16, "an unsignedShort")
		return uint16(n), err
	case "unsignedInt":
		n, err := unsigned(32, "an unsignedInt")
		return uint32(n), err
	case "unsignedLong":
		n, err := unsigned(64, "an unsignedLong")
		return n, err
	case "double", "decimal":
		f, err := parseXSDFloat(v, 64)
		if err != nil {
			return bad("a " + typ)
		}
		return f, nil
	case "float":
		f, err := parseXSDFloat(v, 32)
		if err != nil {
			return bad("a float")
		}
		return float32(f), nil
	case "dateTime":
		t, err := parseXSDDateTime(v)
		if err != nil {
			return bad("an xs:dateTime such as 2026-01-02T03:04:05Z")
		}
		return t, nil
	case "duration":
		d, err := config.ParseISO8601(v)
		if err != nil {
			return bad("an ISO 8601 duration such as PT30S")
		}
		return d, nil
	case "guid":
		u, err := uuid.Parse(v)
		if err != nil {
			return bad("a guid")
		}
		return message.UUID(u), nil
	case "char":
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 || n > utf8.MaxRune {
			return bad("a char (a code point number)")
		}
		return message.Char(n), nil
	}
	return nil, badRequest("the type %q is not supported; use string, int, long, double, boolean, dateTime or duration", typ)
}

func parseXSDFloat(v string, bits int) (float64, error) {
	switch v {
	case "INF":
		return math.Inf(1), nil
	case "-INF":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(v, bits)
}

// parseXSDDateTime reads an xs:dateTime; one without a zone is UTC.
func parseXSDDateTime(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	return time.Parse("2006-01-02T15:04:05.999999999", v)
}

// formatTyped names v's type for a typed <Value> (its namespace and type
// name) and formats it. Types with an XML Schema name get it (int32 is
// int, int64 long, as the service writes .NET's Int32 and Int64); the rest
// use .NET's Serialization namespace. ok is false for a type rules cannot
// hold (the broker refuses those).
func formatTyped(v any) (ns, typ, text string, ok bool) {
	switch x := v.(type) {
	case string:
		return nsXSD, "string", x, true
	case message.Symbol:
		return nsXSD, "string", string(x), true
	case bool:
		return nsXSD, "boolean", strconv.FormatBool(x), true
	case int:
		if x >= math.MinInt32 && x <= math.MaxInt32 {
			return nsXSD, "int", strconv.Itoa(x), true
		}
		return nsXSD, "long", strconv.Itoa(x), true
	case int8:
		return nsXSD, "byte", strconv.FormatInt(int64(x), 10), true
	case int16:
		return nsXSD, "short", strconv.FormatInt(int64(x), 10), true
	case int32:
		return nsXSD, "int", strconv.FormatInt(int64(x), 10), true
	case int64:
		return nsXSD, "long", strconv.FormatInt(x, 10), true
	case uint8:
		return nsXSD, "unsignedByte", strconv.FormatUint(uint64(x), 10), true
	case uint16:
		return nsXSD, "unsignedShort", strconv.FormatUint(uint64(x), 10), true
	case uint32:
		return nsXSD, "unsignedInt", strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return nsXSD, "unsignedLong", strconv.FormatUint(x, 10), true
	case float32:
		return nsXSD, "float", formatXSDFloat(float64(x), 32), true
	case float64:
		return nsXSD, "double", formatXSDFloat(x, 64), true
	case time.Time:
		return nsXSD, "dateTime", x.UTC().Format(time.RFC3339Nano), true
	case time.Duration:
		return nsSerialization, "duration", config.FormatISO8601(x), true
	case message.UUID:
		return nsSerialization, "guid", formatUUID(x), true
	case message.Char:
		return nsSerialization, "char", strconv.FormatInt(int64(x), 10), true
	}
	return "", "", "", false
}

// formatXSDFloat writes a double as .NET does: plain digits from 1e-5 to
// 1e15, an exponent outside, INF, -INF and NaN.
func formatXSDFloat(f float64, bits int) string {
	switch {
	case math.IsInf(f, 1):
		return "INF"
	case math.IsInf(f, -1):
		return "-INF"
	case math.IsNaN(f):
		return "NaN"
	}
	if a := math.Abs(f); a == 0 || (a >= 1e-5 && a < 1e15) {
		return strconv.FormatFloat(f, 'f', -1, bits)
	}
	return strconv.FormatFloat(f, 'E', -1, bits)
}

func formatUUID(u message.UUID) string {
	s := hex.EncodeToString(u[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// writeKeyValues writes a typed list as the service does: pairs in key
// order, each Value with i:type="pfx:type" and its own declaration of
// pfx. pfx must be four characters (d5p1, d6p1): the JS client drops the
// first five characters of the type. An empty list is an empty element.
func writeKeyValues(w *xmlWriter, name, pfx string, m map[string]any) {
	if len(m) == 0 {
		w.empty(name)
		return
	}
	w.open(name)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ns, typ, text, ok := formatTyped(m[k])
		if !ok {
			continue // the broker stores no such value
		}
		w.open("KeyValueOfstringanyType")
		w.text("Key", k)
		w.open("Value", "i:type", pfx+":"+typ, "xmlns:"+pfx, ns)
		w.buf = appendEscaped(w.buf, text, false)
		w.close("Value")
		w.close("KeyValueOfstringanyType")
	}
	w.close(name)
}

// writeFilter writes a rule's <Filter>. SQL, true and false filters always
// carry their SqlExpression (the JS client tells SQL filters by it), a SQL
// filter's exactly as created.
func writeFilter(w *xmlWriter, f broker.RuleFilter) {
	switch f.Kind {
	case broker.FilterCorrelation:
		w.open("Filter", "i:type", "CorrelationFilter")
		var c broker.CorrelationFilter
		if f.Correlation != nil {
			c = *f.Correlation
		}
		for _, fd := range correlationFields {
			w.optText(fd.name, *fd.get(&c))
		}
		writeKeyValues(w, "Properties", "d5p1", c.Properties)
		w.close("Filter")
		return
	case broker.FilterTrue:
		w.open("Filter", "i:type", "TrueFilter")
		w.text("SqlExpression", "1=1")
	case broker.FilterFalse:
		w.open("Filter", "i:type", "FalseFilter")
		w.text("SqlExpression", "1=0")
	default:
		w.open("Filter", "i:type", "SqlFilter")
		w.text("SqlExpression", f.Expression)
	}
	w.int("CompatibilityLevel", compatibilityLevel)
	if f.Kind == broker.FilterSQL {
		writeKeyValues(w, "Parameters", "d6p1", f.Parameters)
	}
	w.close("Filter")
}

// writeAction writes a rule's <Action>, always present: Go and JS
// dereference it (§1.10).
func writeAction(w *xmlWriter, a *broker.SQLAction) {
	if a == nil {
		w.empty("Action", "i:type", "EmptyRuleAction")
		return
	}
	w.open("Action", "i:type", "SqlRuleAction")
	w.text("SqlExpression", a.Expression)
	w.int("CompatibilityLevel", compatibilityLevel)
	writeKeyValues(w, "Parameters", "d6p1", a.Parameters)
	w.close("Action")
}

// writeRuleDescription writes a rule in the service's order: Filter,
// Action, CreatedAt, Name.
func writeRuleDescription(w *xmlWriter, r broker.RuleDescription) {
	w.open("RuleDescription", "xmlns", nsServiceBus, "xmlns:i", nsXSI)
	writeFilter(w, r.Filter)
	writeAction(w, r.Action)
	w.time("CreatedAt", r.CreatedAt)
	w.text("Name", r.Name)
	w.close("RuleDescription")
}
