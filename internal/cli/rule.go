package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newRuleCmd(a *app) *cobra.Command {
	return groupCmd("rule", "Create, list, show, update and delete a subscription's rules",
		`Manage the rules of a topic's subscription. A message sent to the topic is
delivered to the subscription when any of its rules' filters matches it: once if a
matching rule has no action, and once more for each matching rule with an action
(a SET/REMOVE statement applied to that copy).

A subscription created without a filter has one rule, $Default, whose filter
matches every message. To make a subscription selective, create the rules it
needs and delete $Default (or create the subscription with --sql or
--correlation in the first place).`,
		newRuleCreateCmd(a),
		newRuleListCmd(a),
		newRuleShowCmd(a),
		newRuleUpdateCmd(a),
		newRuleDeleteCmd(a),
		newRuleDryRunCmd(a),
	)
}

// ruleFlags describe a rule's filter and action.
type ruleFlags struct {
	sql              string
	correlation      []string
	correlationID    string
	messageID        string
	to               string
	replyTo          string
	subject          string
	sessionID        string
	replyToSessionID string
	contentType      string
	properties       []string
	isTrue           bool
	isFalse          bool
	action           string
}

// correlationFieldFlags are the flags for the correlation filter's system
// properties, with the field each sets.
var correlationFieldFlags = []struct {
	flag  string
	field string // as in --correlation, and in the JSON output
	help  string
	get   func(*ruleFlags) *string
	dst   func(*sbadmin.CorrelationFilter) **string
}{
	{"correlation-id", "correlationId", "match messages with this CorrelationId", func(f *ruleFlags) *string { return &f.correlationID }, func(c *sbadmin.CorrelationFilter) **string { return &c.CorrelationID }},
	{"message-id", "messageId", "match messages with this MessageId", func(f *ruleFlags) *string { return &f.messageID }, func(c *sbadmin.CorrelationFilter) **string { return &c.MessageID }},
	{"to", "to", "match messages with this To", func(f *ruleFlags) *string { return &f.to }, func(c *sbadmin.CorrelationFilter) **string { return &c.To }},
	{"reply-to", "replyTo", "match messages with this ReplyTo", func(f *ruleFlags) *string { return &f.replyTo }, func(c *sbadmin.CorrelationFilter) **string { return &c.ReplyTo }},
	{"subject", "subject", "match messages with this Subject (the Label)", func(f *ruleFlags) *string { return &f.subject }, func(c *sbadmin.CorrelationFilter) **string { return &c.Subject }},
	{"session-id", "sessionId", "match messages with this SessionId", func(f *ruleFlags) *string { return &f.sessionID }, func(c *sbadmin.CorrelationFilter) **string { return &c.SessionID }},
	{"reply-to-session-id", "replyToSessionId", "match messages with this ReplyToSessionId", func(f *ruleFlags) *string { return &f.replyToSessionID }, func(c *sbadmin.CorrelationFilter) **string { return &c.ReplyToSessionID }},
	{"content-type", "contentType", "match messages with this ContentType", func(f *ruleFlags) *string { return &f.contentType }, func(c *sbadmin.CorrelationFilter) **string { return &c.ContentType }},
}

// correlationKey maps a --correlation key to a system field (its index in
// correlationFieldFlags), or -1 for an application property: keys are
// matched case-insensitively, ignoring '-' and '_', with an optional sys.
// prefix; label is subject's other name; user.KEY is always a property.
func correlationKey(key string) (int, string) {
	lower := strings.ToLower(key)
	if strings.HasPrefix(lower, "user.") {
		return -1, key[len("user."):]
	}
	norm := strings.NewReplacer("-", "", "_", "").Replace(strings.TrimPrefix(lower, "sys."))
	if norm == "label" {
		norm = "subject"
	}
	for i, c := range correlationFieldFlags {
		if strings.ToLower(c.field) == norm {
			return i, ""
		}
	}
	return -1, key
}

const correlationHelp = "correlation filter as key=value pairs (comma-separated, repeatable): correlationId, messageId, to, replyTo, subject, sessionId, replyToSessionId, contentType, or any other key for an application property (user.KEY forces one; KEY:type=value types it as --property does)"

// registerFilter declares the filter and action flags. full adds the
// one-flag-per-field correlation flags and --true/--false (rule create and
// update); subscription create has --sql, --correlation and --action.
func (f *ruleFlags) registerFilter(fs *pflag.FlagSet, full bool) {
	fs.StringVar(&f.sql, "sql", "", "SQL filter expression, e.g. \"region = 'eu' AND total > 100\"")
	fs.StringSliceVar(&f.correlation, "correlation", nil, correlationHelp)
	if full {
		for _, c := range correlationFieldFlags {
			fs.StringVar(c.get(f), c.flag, "", c.help+" (correlation filter)")
		}
		fs.StringArrayVarP(&f.properties, "property", "p", nil, "match messages with this application property, key=value or key:type=value as for send (correlation filter; repeatable)")
		fs.BoolVar(&f.isTrue, "true", false, "match every message (TrueFilter)")
		fs.BoolVar(&f.isFalse, "false", false, "match no message (FalseFilter)")
	}
	fs.StringVar(&f.action, "action", "", "SQL action applied to the copy the rule delivers, e.g. \"SET priority = 'high'; REMOVE tmp\" ('' for none)")
}

// filter builds the filter the flags give, nil if none is given.
// Long on purpose: its branches are one check per flag that may or may not
// combine with the others.
func (f *ruleFlags) filter(fs *pflag.FlagSet) (sbadmin.RuleFilter, error) {
	given := func(name string) bool { return fs.Lookup(name) != nil && fs.Changed(name) }
	corrGiven := given("correlation") || given("property")
	for _, c := range correlationFieldFlags {
		corrGiven = corrGiven || given(c.flag)
	}
	kinds := 0
	for _, g := range []bool{given("sql"), corrGiven, given("true") && f.isTrue, given("false") && f.isFalse} {
		if g {
			kinds++
		}
	}
	if kinds > 1 {
		return nil, usageErrorf("give one filter: --sql, correlation flags, --true or --false")
	}
	switch {
	case given("sql"):
		if strings.TrimSpace(f.sql) == "" {
			return nil, usageErrorf("--sql: empty expression")
		}
		return &sbadmin.SQLFilter{Expression: f.sql}, nil
	case given("true") && f.isTrue:
		return &sbadmin.TrueFilter{}, nil
	case given("false") && f.isFalse:
		return &sbadmin.FalseFilter{}, nil
	case !corrGiven:
		return nil, nil
	}
	cf := &sbadmin.CorrelationFilter{}
	set := func(i int, v, from string) error {
		dst := correlationFieldFlags[i].dst(cf)
		if *dst != nil {
			return usageErrorf("%s: the correlation filter's %s is given twice", from, correlationFieldFlags[i].field)
		}
		if v == "" {
			return usageErrorf("%s: empty %s", from, correlationFieldFlags[i].field)
		}
		*dst = &v
		return nil
	}
	for i, c := range correlationFieldFlags {
		if given(c.flag) {
			if err := set(i, *c.get(f), "--"+c.flag); err != nil {
				return nil, err
			}
		}
	}
	addProp := func(kv, from string) error {
		k, v, err := parseProperty(kv)
		if err != nil {
			return usageErrorf("%s: %v", from, err)
		}
		if err := sendableValue(k, v); err != nil {
			return usageErrorf("%s: %v", from, err)
		}
		if _, dup := cf.ApplicationProperties[k]; dup {
			return usageErrorf("%s: property %q is given twice", from, k)
		}
		if cf.ApplicationProperties == nil {
			cf.ApplicationProperties = map[string]any{}
		}
		cf.ApplicationProperties[k] = v
		return nil
	}
	for _, kv := range f.correlation {
		key, val, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return nil, usageErrorf("--correlation: invalid pair %q (want key=value)", kv)
		}
		i, prop := correlationKey(key)
		var err error
		if i >= 0 {
			err = set(i, val, "--correlation")
		} else {
			err = addProp(prop+"="+val, "--correlation")
		}
		if err != nil {
			return nil, err
		}
	}
	for _, kv := range f.properties {
		if err := addProp(kv, "--property"); err != nil {
			return nil, err
		}
	}
	return cf, nil
}

// sendableValue checks that the Go admin client can send a typed value
// exactly: it writes every integer as a 32-bit int and every double with
// six decimals.
func sendableValue(k string, v any) error {
	switch x := v.(type) {
	case int64:
		if x < math.MinInt32 || x > math.MaxInt32 {
			return fmt.Errorf("property %q: %d does not fit in the 32-bit integer the management API client sends", k, x)
		}
	case float64:
		if back, err := strconv.ParseFloat(fmt.Sprintf("%f", x), 64); err != nil || back != x {
			return fmt.Errorf("property %q: %v cannot be sent exactly (the management API client writes doubles with six decimals)", k, x)
		}
	}
	return nil
}

// actionValue is the action the flags give: given is false without
// --action; nil with an empty one.
func (f *ruleFlags) actionValue(fs *pflag.FlagSet) (action sbadmin.RuleAction, given bool) {
	if fs.Lookup("action") == nil || !fs.Changed("action") {
		return nil, false
	}
	if strings.TrimSpace(f.action) == "" {
		return nil, true
	}
	return &sbadmin.SQLAction{Expression: f.action}, true
}

// ruleView is a rule as the rule commands print it with --json.
type ruleView struct {
	Name   string      `json:"name"`
	Filter filterView  `json:"filter"`
	Action *actionView `json:"action,omitempty"`
}

// filterView is a rule filter. Type is the management API's: SqlFilter,
// CorrelationFilter, TrueFilter or FalseFilter.
type filterView struct {
	Type             string         `json:"type"`
	SQLExpression    *string        `json:"sqlExpression,omitempty"`
	Parameters       map[string]any `json:"parameters,omitempty"`
	CorrelationID    *string        `json:"correlationId,omitempty"`
	MessageID        *string        `json:"messageId,omitempty"`
	To               *string        `json:"to,omitempty"`
	ReplyTo          *string        `json:"replyTo,omitempty"`
	Subject          *string        `json:"subject,omitempty"`
	SessionID        *string        `json:"sessionId,omitempty"`
	ReplyToSessionID *string        `json:"replyToSessionId,omitempty"`
	ContentType      *string        `json:"contentType,omitempty"`
	Properties       map[string]any `json:"properties,omitempty"`
}

type actionView struct {
	Type          string         `json:"type"`
	SQLExpression string         `json:"sqlExpression,omitempty"`
	Parameters    map[string]any `json:"parameters,omitempty"`
}

func newRuleView(r *sbadmin.RuleProperties) ruleView {
	v := ruleView{Name: r.Name}
	switch f := r.Filter.(type) {
	case *sbadmin.SQLFilter:
		v.Filter = filterView{Type: "SqlFilter", SQLExpression: &f.Expression, Parameters: f.Parameters}
	case *sbadmin.CorrelationFilter:
		v.Filter = filterView{
			Type:             "CorrelationFilter",
			CorrelationID:    f.CorrelationID,
			MessageID:        f.MessageID,
			To:               f.To,
			ReplyTo:          f.ReplyTo,
			Subject:          f.Subject,
			SessionID:        f.SessionID,
			ReplyToSessionID: f.ReplyToSessionID,
			ContentType:      f.ContentType,
			Properties:       f.ApplicationProperties,
		}
	case *sbadmin.TrueFilter:
		v.Filter = filterView{Type: "TrueFilter"}
	case *sbadmin.FalseFilter:
		v.Filter = filterView{Type: "FalseFilter"}
	case *sbadmin.UnknownRuleFilter:
		v.Filter = filterView{Type: f.Type}
	}
	switch a := r.Action.(type) {
	case *sbadmin.SQLAction:
		v.Action = &actionView{Type: "SqlRuleAction", SQLExpression: a.Expression, Parameters: a.Parameters}
	case *sbadmin.UnknownRuleAction:
		v.Action = &actionView{Type: a.Type}
	}
	return v
}

// correlationPairs lists a correlation filter's fields as key=value.
func (f filterView) correlationPairs() []string {
	var out []string
	for _, p := range []struct {
		k string
		v *string
	}{{"correlationId", f.CorrelationID}, {"messageId", f.MessageID}, {"to", f.To}, {"replyTo", f.ReplyTo},
		{"subject", f.Subject}, {"sessionId", f.SessionID}, {"replyToSessionId", f.ReplyToSessionID}, {"contentType", f.ContentType}} {
		if p.v != nil {
			out = append(out, p.k+"="+*p.v)
		}
	}
	for _, k := range sortedKeys(f.Properties) {
		name := k
		if i, _ := correlationKey(k); i >= 0 {
			name = "user." + k // not the system field of that name
		}
		out = append(out, name+"="+valueText(f.Properties[k]))
	}
	return out
}

// summary is the filter in one line: SQL: expr, Correlation: k=v, ….
func (f filterView) summary() string {
	switch f.Type {
	case "SqlFilter":
		s := "SQL: " + optStr(f.SQLExpression)
		if len(f.Parameters) > 0 {
			s += " (" + paramsText(f.Parameters) + ")"
		}
		return s
	case "CorrelationFilter":
		return "Correlation: " + strings.Join(f.correlationPairs(), ", ")
	case "TrueFilter":
		return "True (every message)"
	case "FalseFilter":
		return "False (no message)"
	}
	return f.Type
}

func (a *actionView) summary() string {
	if a == nil {
		return ""
	}
	if a.Type != "SqlRuleAction" {
		return a.Type
	}
	s := a.SQLExpression
	if len(a.Parameters) > 0 {
		s += " (" + paramsText(a.Parameters) + ")"
	}
	return s
}

func paramsText(m map[string]any) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+valueText(m[k]))
	}
	return strings.Join(parts, ", ")
}

// valueText shows a typed value: strings quoted when they would read as
// another type, times in RFC 3339.
func valueText(v any) string {
	switch x := v.(type) {
	case string:
		if _, v, err := parseProperty("k=" + x); err == nil && x != "" {
			if _, isStr := v.(string); isStr {
				return x
			}
		}
		return strconv.Quote(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

// printRule writes one rule as "Name: value" lines.
func printRule(w io.Writer, v ruleView) error {
	t := newTable(w, "Name:", cell(v.Name, 0))
	f := v.Filter
	t.row("Filter:", cell(f.Type, 0))
	switch f.Type {
	case "SqlFilter":
		t.row("  SQL expression:", cell(optStr(f.SQLExpression), 0))
		if len(f.Parameters) > 0 {
			t.row("  Parameters:", cell(paramsText(f.Parameters), 0))
		}
	case "CorrelationFilter":
		for _, p := range f.correlationPairs() {
			k, val, _ := strings.Cut(p, "=")
			t.row("  "+cell(k, 0)+":", cell(val, 0))
		}
	}
	t.row("Action:", cell(v.Action.summary(), 0))
	return t.flush()
}

// printRules writes rules as a table.
func printRules(w io.Writer, rules []ruleView) error {
	t := newTable(w, "RULE", "FILTER", "ACTION")
	for _, r := range rules {
		t.row(cell(r.Name, 0), cell(r.Filter.summary(), 80), cell(r.Action.summary(), 60))
	}
	return t.flush()
}

// listRules reads a subscription's rules, in the broker's order (by name).
func listRules(cmd *cobra.Command, c *adminClient, topic, sub string) ([]ruleView, error) {
	ctx := cmd.Context()
	views := []ruleView{}
	pager := c.NewListRulesPager(topic, sub, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			if uerr := unreadableRule(err, topic, sub); uerr != nil {
				return nil, uerr
			}
			return nil, subscriptionError(ctx, c, err, topic, sub)
		}
		for i := range page.Rules {
			views = append(views, newRuleView(&page.Rules[i]))
		}
	}
	return views, nil
}

// unreadableRule explains the admin client's failure to read a typed
// value it has no Go type for; nil for any other error.
func unreadableRule(err error, topic, sub string) error {
	if err == nil || !strings.Contains(err.Error(), "is not a handled type") {
		return nil
	}
	return &detailError{fmt.Sprintf("%s has a rule with a typed value that the Go management client (azservicebus/admin v1.11.0) cannot read: it reads string, int, double, boolean and dateTime values only (%s)",
		subscriptionName(topic, sub), firstLine(err)), err}
}
