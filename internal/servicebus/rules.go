package servicebus

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/broker"
)

// Rule management on topic/Subscriptions/sub/$management (docs/wire/amqp.md §6.3,
// docs/wire/management-plane.md §2.10): the operations of the JS and .NET rule
// managers. Each needs Manage rights (see mgmtOps).
const (
	opAddRule        = "com.microsoft:add-rule"
	opRemoveRule     = "com.microsoft:remove-rule"
	opEnumerateRules = "com.microsoft:enumerate-rules"
)

// Descriptor codes of the described types in enumerate-rules replies
// (docs/wire/amqp.md §6.3). The filter codes have one hex digit fewer than the
// others; the values are the ones the SDKs compare with.
const (
	descRuleDescription   uint64 = 0x0000013700000004 // [filter, action, name, created-at]
	descEmptyRuleAction   uint64 = 0x0000013700000005 // []
	descSQLRuleAction     uint64 = 0x0000013700000006 // [expression, compatibility-level]
	descSQLFilter         uint64 = 0x000001370000006  // [expression, compatibility-level]
	descTrueFilter        uint64 = 0x000001370000007  // []
	descFalseFilter       uint64 = 0x000001370000008  // []
	descCorrelationFilter uint64 = 0x000001370000009  // [correlation-id, message-id, to, reply-to, label, session-id, reply-to-session-id, content-type, properties]
)

// sqlCompatibilityLevel is the compatibility level Service Bus reports
// for SQL filters and actions (the .NET codecs' second field).
const sqlCompatibilityLevel int32 = 20

// subscriptionOf returns the topic and subscription a management node
// path names. Rules exist only on subscriptions (not on their sub-queues).
func subscriptionOf(path string) (topic, sub string, err error) {
	p, err := broker.ParsePath(path)
	if err != nil {
		return "", "", err
	}
	if p.Subscription == "" || p.SubQueue != broker.SubQueueMain {
		return "", "", &broker.Error{Kind: broker.KindNotAllowed,
			Msg: "Rules exist only on subscriptions: '" + path + "' is not a subscription (topic/Subscriptions/name)."}
	}
	return p.Entity, p.Subscription, nil
}

// addRule: rule-name (string); rule-description (map) with sql-filter
// {expression} or correlation-filter {correlation-id, message-id, to,
// reply-to, label, session-id, reply-to-session-id, content-type,
// properties (map)}, and an optional sql-rule-action {expression}. Values
// may be null. A SQL filter "1=1" or "1=0" is stored as the true or false
// filter (the .NET TrueRuleFilter and FalseRuleFilter are sent as SQL
// filters). → 200 without a body.
//
// Errors: the broker's. A rule of that name already there is
// KindAlreadyExists (com.microsoft:entity-already-exists, 409); an
// invalid filter or action is KindInvalidArgument (400) whose text names
// the rule and the position ("invalid SQL filter of rule 'r': filter:
// 1:13: …"); too many filters on the topic is KindQuotaExceeded.
func (c *conn) addRule(_ context.Context, path string, b body) (*response, error) {
	topic, sub, err := subscriptionOf(path)
	if err != nil {
		return nil, err
	}
	name, err := b.str("rule-name")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, badRequest("The request field 'rule-name' is missing.")
	}
	rdv, present := b.get("rule-description")
	if !present {
		return nil, badRequest("The request field 'rule-description' is missing.")
	}
	rd, err := asBody("rule-description", rdv)
	if err != nil {
		return nil, err
	}
	r, err := ruleFromRequest(name, rd)
	if err != nil {
		return nil, err
	}
	if _, err := c.ns().Broker.CreateRule(topic, sub, r); err != nil {
		return nil, c.ruleError(path, name, err)
	}
	return ok(nil), nil
}

// ruleFromRequest builds a rule from an add-rule rule-description map.
func ruleFromRequest(name string, rd body) (broker.RuleDescription, error) {
	r := broker.RuleDescription{Name: name}
	sqlv, hasSQL := rd.get("sql-filter")
	corrv, hasCorr := rd.get("correlation-filter")
	switch {
	case hasSQL && hasCorr:
		return r, badRequest("The rule description has both a sql-filter and a correlation-filter; give one.")
	case hasSQL:
		f, err := asBody("sql-filter", sqlv)
		if err != nil {
			return r, err
		}
		expr, err := f.str("expression")
		if err != nil {
			return r, err
		}
		switch strings.Join(strings.Fields(expr), "") {
		case "1=1":
			r.Filter = broker.TrueRuleFilter()
		case "1=0":
			r.Filter = broker.FalseRuleFilter()
		default:
			r.Filter = broker.SQLRuleFilter(expr, nil)
		}
	case hasCorr:
		f, err := asBody("correlation-filter", corrv)
		if err != nil {
			return r, err
		}
		var cf broker.CorrelationFilter
		for _, fld := range []struct {
			key string
			dst *string
		}{
			{"correlation-id", &cf.CorrelationID}, {"message-id", &cf.MessageID}, {"to", &cf.To},
			{"reply-to", &cf.ReplyTo}, {"label", &cf.Label}, {"session-id", &cf.SessionID},
			{"reply-to-session-id", &cf.ReplyToSessionID}, {"content-type", &cf.ContentType},
		} {
			if *fld.dst, err = f.str(fld.key); err != nil {
				return r, err
			}
		}
		if cf.Properties, err = f.props("properties"); err != nil {
			return r, err
		}
		r.Filter = broker.CorrelationRuleFilter(cf)
	default:
		return r, badRequest("The rule description has no filter: give a sql-filter or a correlation-filter.")
	}
	if av, present := rd.get("sql-rule-action"); present {
		a, err := asBody("sql-rule-action", av)
		if err != nil {
			return r, err
		}
		expr, err := a.str("expression")
		if err != nil {
			return r, err
		}
		if strings.TrimSpace(expr) != "" {
			r.Action = &broker.SQLAction{Expression: expr}
		}
	}
	return r, nil
}

// removeRule: rule-name → 200 without a body; an unknown rule is 404
// amqp:not-found with the cloud's "could not be found" wording.
func (c *conn) removeRule(_ context.Context, path string, b body) (*response, error) {
	topic, sub, err := subscriptionOf(path)
	if err != nil {
		return nil, err
	}
	name, err := b.str("rule-name")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, badRequest("The request field 'rule-name' is missing.")
	}
	if err := c.ns().Broker.DeleteRule(topic, sub, name); err != nil {
		return nil, c.ruleError(path, name, err)
	}
	return ok(nil), nil
}

// enumerateRules: top (int, default all), skip (int, default 0) → rules,
// a list of maps {rule-description: described list}, ordered by rule name;
// 204 when the page is empty. The JS rule manager asks for pages (skip =
// rules seen so far) until it gets an empty one or 204.
func (c *conn) enumerateRules(_ context.Context, path string, b body) (*response, error) {
	topic, sub, err := subscriptionOf(path)
	if err != nil {
		return nil, err
	}
	top, given, err := b.integer("top")
	if err != nil {
		return nil, err
	}
	if given && top < 1 {
		return nil, badRequest("The request field 'top' must be at least 1, not %d.", top)
	}
	skip, _, err := b.integer("skip")
	if err != nil {
		return nil, err
	}
	if skip < 0 {
		return nil, badRequest("The request field 'skip' must not be negative, not %d.", skip)
	}
	const maxInt32 = 1<<31 - 1
	rules, err := c.ns().Broker.ListRules(topic, sub, int(min(skip, maxInt32)), int(min(top, maxInt32)))
	if err != nil {
		return nil, c.ruleError(path, "", err)
	}
	if len(rules) == 0 {
		return noContent(), nil
	}
	list := make([]any, len(rules))
	for i, r := range rules {
		list[i] = encoding.Map{{Key: "rule-description", Value: encodeRuleDescription(r)}}
	}
	return ok(encoding.Map{{Key: "rules", Value: list}}), nil
}

// encodeRuleDescription is a rule as the described list of an
// enumerate-rules reply: [filter, action, name, created-at]. The JS SDK
// reads the first three; the .NET codec also reads created-at (a
// timestamp, null if unknown). SQL filter parameters have no place in
// the AMQP form and are left out.
func encodeRuleDescription(r broker.RuleDescription) encoding.Described {
	var f encoding.Described
	switch r.Filter.Kind {
	case broker.FilterTrue:
		f = encoding.Described{Descriptor: descTrueFilter, Value: []any{}}
	case broker.FilterFalse:
		f = encoding.Described{Descriptor: descFalseFilter, Value: []any{}}
	case broker.FilterCorrelation:
		cf := r.Filter.Correlation
		if cf == nil {
			cf = &broker.CorrelationFilter{}
		}
		// The properties are always a map, empty when there are none:
		// the JS SDK throws on null ("object to decode is not of Map
		// types").
		props := encoding.Map{}
		for _, k := range slices.Sorted(maps.Keys(cf.Properties)) {
			props = append(props, encoding.MapEntry{Key: k, Value: ruleValueToAMQP(cf.Properties[k])})
		}
		f = encoding.Described{Descriptor: descCorrelationFilter, Value: []any{
			nullIfEmpty(cf.CorrelationID), nullIfEmpty(cf.MessageID), nullIfEmpty(cf.To), nullIfEmpty(cf.ReplyTo),
			nullIfEmpty(cf.Label), nullIfEmpty(cf.SessionID), nullIfEmpty(cf.ReplyToSessionID), nullIfEmpty(cf.ContentType),
			props,
		}}
	default: // SQL
		f = encoding.Described{Descriptor: descSQLFilter, Value: []any{r.Filter.Expression, sqlCompatibilityLevel}}
	}
	a := encoding.Described{Descriptor: descEmptyRuleAction, Value: []any{}}
	if r.Action != nil && r.Action.Expression != "" {
		a = encoding.Described{Descriptor: descSQLRuleAction, Value: []any{r.Action.Expression, sqlCompatibilityLevel}}
	}
	var created any
	if !r.CreatedAt.IsZero() {
		created = r.CreatedAt
	}
	return encoding.Described{Descriptor: descRuleDescription, Value: []any{f, a, r.Name, created}}
}

// ruleError rewrites a broker not-found error of a rule operation in the
// cloud's wording (which the JS SDK matches to report
// MessagingEntityNotFound): the subscription when it is gone, else the
// rule (topic/Subscriptions/sub/Rules/name). Other errors pass unchanged.
func (c *conn) ruleError(path, rule string, err error) error {
	if broker.KindOf(err) != broker.KindNotFound {
		return err
	}
	if typ, _, rerr := c.ns().Broker.Resolve(path); rule == "" || rerr != nil || typ != broker.EntitySubscription {
		return notFound(c.entityURI(path))
	}
	return notFound(c.entityURI(path + "/Rules/" + rule))
}

// asBody reads a nested request map (string or symbol keys).
func asBody(key string, v any) (body, error) {
	switch x := v.(type) {
	case encoding.Map:
		return body{m: x}, nil
	case map[string]any:
		var m encoding.Map
		for k, v := range x {
			m = append(m, encoding.MapEntry{Key: k, Value: v})
		}
		return body{m: m}, nil
	}
	return body{}, badRequest("The request field '%s' must be a map, not %T.", key, v)
}

// ruleValueToAMQP converts a rule's typed value (correlation filter
// property) to the encoding package's Go mapping. A TimeSpan has no AMQP
// primitive: it goes as .NET's described com.microsoft:timespan (ticks).
func ruleValueToAMQP(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case time.Duration:
		return encoding.Described{Descriptor: encoding.Symbol("com.microsoft:timespan"), Value: int64(x / 100)}
	}
	return v
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
