package broker

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/names"
	"github.com/busbarmq/busbar/internal/store"
)

// compiledRule is a rule ready for evaluation: its description as created
// (returned by GetRule and ListRules) and the compiled filter and action.
type compiledRule struct {
	desc   RuleDescription
	key    string // entityKey(desc.Name)
	match  filter.Matcher
	action *filter.Action // nil: no action
}

// routing is what a fan-out reads about one subscription, lock-free: its
// rules (ordered by key) and the properties routing needs. It is
// immutable; a rule or property change replaces it whole.
type routing struct {
	rules      []*compiledRule
	sqlFilters int // SQL, true and false filters
	corrFilter int // correlation filters
	// accept is false while the subscription's Status keeps new messages
	// out (Disabled, SendDisabled).
	accept bool
	// dlqOnEvalError is DeadLetteringOnFilterEvaluationExceptions.
	dlqOnEvalError bool
	defTTL         int64 // the subscription's DefaultMessageTimeToLive, 0 = infinite
	// sessions is RequiresSession: every copy needs a session id, and a
	// copy without one goes to the dead-letter queue (ReasonSessionIDNull).
	sessions bool
}

func newRouting(rules []*compiledRule, p SubscriptionProperties) *routing {
	rt := &routing{rules: rules, accept: p.Status == StatusActive || p.Status == StatusReceiveDisabled,
		dlqOnEvalError: p.DeadLetteringOnFilterEvaluationExceptions, sessions: p.RequiresSession,
		defTTL: finiteTTL(p.DefaultMessageTimeToLive)}
	for _, r := range rules {
		if r.desc.Filter.Kind == FilterCorrelation {
			rt.corrFilter++
		} else {
			rt.sqlFilters++
		}
	}
	return rt
}

// withRules returns a copy of rt with other rules.
func (rt *routing) withRules(rules []*compiledRule) *routing {
	n := *rt
	n.rules, n.sqlFilters, n.corrFilter = rules, 0, 0
	for _, r := range rules {
		if r.desc.Filter.Kind == FilterCorrelation {
			n.corrFilter++
		} else {
			n.sqlFilters++
		}
	}
	return &n
}

// ruleIndex returns the position of the rule with key, and whether it is there.
func (rt *routing) ruleIndex(key string) (int, bool) {
	return slices.BinarySearchFunc(rt.rules, key, func(r *compiledRule, k string) int {
		switch {
		case r.key < k:
			return -1
		case r.key > k:
			return 1
		}
		return 0
	})
}

// ruleCopy is one copy of a message a matching rule with an action
// delivers: the action's result, carrying PropRuleName.
type ruleCopy struct {
	rule string
	msg  *message.Message
}

// evaluation is the outcome of evaluating a subscription's rules against
// one message.
type evaluation struct {
	plain   bool              // a rule without an action matched: one unchanged copy
	actions []ruleCopy        // one copy per matching rule with an action
	failed  *filter.EvalError // set when the message is to be dead-lettered instead
}

// evaluate runs every rule against env (rule evaluation model,
// docs/wire/management-plane.md §2.1):
//
//   - matching rules without an action are OR-ed: one unchanged copy;
//   - each matching rule with an action delivers its own copy, the action
//     applied to that copy only, with application property RuleName;
//   - a filter or action that fails to evaluate: with dlqOnEvalError
//     (DeadLetteringOnFilterEvaluationExceptions) the subscription gets
//     the unchanged message in its dead-letter queue and nothing else,
//     reason and description from the first failure in rule-name order;
//     without, that rule counts as not matching.
//
// Every rule is evaluated, so the outcome does not depend on rule order.
func (rt *routing) evaluate(env *filter.Env, ev *evaluation) {
	*ev = evaluation{}
	for _, r := range rt.rules {
		ok, err := r.match.Match(env)
		if err != nil {
			ev.fail(err, filter.ExcFilter)
			continue
		}
		if !ok {
			continue
		}
		if r.action == nil {
			ev.plain = true
			continue
		}
		m, err := r.action.Apply(env)
		if err != nil {
			ev.fail(err, filter.ExcRuleAction)
			continue
		}
		if m.ApplicationProperties == nil {
			m.ApplicationProperties = make(map[string]any, 1)
		}
		m.ApplicationProperties[PropRuleName] = r.desc.Name
		ev.actions = append(ev.actions, ruleCopy{rule: r.desc.Name, msg: m})
	}
	if ev.failed != nil && !rt.dlqOnEvalError {
		ev.failed = nil
	}
	if ev.failed != nil {
		ev.plain, ev.actions = false, nil
	}
}

func (ev *evaluation) fail(err error, typ string) {
	if ev.failed != nil {
		return
	}
	var ee *filter.EvalError
	if !errors.As(err, &ee) {
		ee = &filter.EvalError{Type: typ, Message: err.Error()}
	}
	ev.failed = ee
}

// copies is how many copies the evaluation delivers.
//
//lint:ignore U1000 unused since fan-out planning moved; the broker's send-path rework decides its fate
func (ev *evaluation) copies() int {
	if ev.failed != nil {
		return 1
	}
	n := len(ev.actions)
	if ev.plain {
		n++
	}
	return n
}

// compileRule validates and compiles r. Its errors are KindInvalidArgument
// and name what is wrong (with the position, for a syntax error). The name
// is checked as an existing rule's (names.CheckExisting): a rule created
// under the older rule still compiles; new rules are checked by their
// creators with ValidateRuleName.
func compileRule(r RuleDescription) (*compiledRule, error) {
	if err := validateExistingName(names.Rule, r.Name); err != nil {
		return nil, err
	}
	c := &compiledRule{key: entityKey(r.Name)}
	f := &r.Filter
	switch f.Kind {
	case FilterTrue:
		c.match, f.Expression, f.Parameters, f.Correlation = filter.TrueFilter, "1=1", nil, nil
	case FilterFalse:
		c.match, f.Expression, f.Parameters, f.Correlation = filter.FalseFilter, "1=0", nil, nil
	case FilterSQL:
		if err := checkTyped("filter parameter", f.Parameters); err != nil {
			return nil, err
		}
		sf, err := filter.CompileSQL(f.Expression, f.Parameters)
		if err != nil {
			return nil, &Error{Kind: KindInvalidArgument, Msg: fmt.Sprintf("invalid SQL filter of rule '%s'", r.Name), Err: err}
		}
		c.match, f.Parameters, f.Correlation = sf, maps.Clone(f.Parameters), nil
	case FilterCorrelation:
		if f.Correlation == nil {
			return nil, errorf(KindInvalidArgument, "invalid correlation filter of rule '%s': no fields given", r.Name)
		}
		cf := *f.Correlation
		cf.Properties = maps.Clone(cf.Properties)
		if err := cf.Validate(); err != nil {
			return nil, &Error{Kind: KindInvalidArgument, Msg: fmt.Sprintf("invalid correlation filter of rule '%s'", r.Name), Err: err}
		}
		if err := checkTyped("correlation filter property", cf.Properties); err != nil {
			return nil, err
		}
		c.match, f.Correlation, f.Expression, f.Parameters = &cf, &cf, "", nil
	default:
		return nil, errorf(KindInvalidArgument, "rule '%s' has no filter (unknown filter kind %d)", r.Name, f.Kind)
	}
	if r.Action != nil && r.Action.Expression == "" && len(r.Action.Parameters) == 0 {
		r.Action = nil // an EmptyRuleAction
	}
	if r.Action != nil {
		if err := checkTyped("action parameter", r.Action.Parameters); err != nil {
			return nil, err
		}
		a, err := filter.CompileAction(r.Action.Expression, r.Action.Parameters)
		if err != nil {
			return nil, &Error{Kind: KindInvalidArgument, Msg: fmt.Sprintf("invalid SQL action of rule '%s'", r.Name), Err: err}
		}
		c.action = a
		r.Action = &SQLAction{Expression: r.Action.Expression, Parameters: maps.Clone(r.Action.Parameters)}
	}
	c.desc = r
	return c, nil
}

// cloneRule returns a copy of d that shares no map with it.
func cloneRule(d RuleDescription) RuleDescription {
	d.Filter.Parameters = maps.Clone(d.Filter.Parameters)
	if d.Filter.Correlation != nil {
		c := *d.Filter.Correlation
		c.Properties = maps.Clone(c.Properties)
		d.Filter.Correlation = &c
	}
	if d.Action != nil {
		a := *d.Action
		a.Parameters = maps.Clone(a.Parameters)
		d.Action = &a
	}
	return d
}

// ---- persistence ----

// ruleSpec is a rule as stored: the store value "rule/<key>" of its
// subscription's entity, JSON. Parameter and property values keep their
// types (typedValue).
type ruleSpec struct {
	Name       string       `json:"name"`
	Filter     string       `json:"filter"` // FilterKind.String()
	Expression string       `json:"expr,omitempty"`
	Parameters []typedValue `json:"params,omitempty"`
	Corr       *corrSpec    `json:"corr,omitempty"`
	Action     *actionSpec  `json:"action,omitempty"`
	Created    time.Time    `json:"created"`
}

type corrSpec struct {
	CorrelationID    string       `json:"correlationId,omitempty"`
	MessageID        string       `json:"messageId,omitempty"`
	To               string       `json:"to,omitempty"`
	ReplyTo          string       `json:"replyTo,omitempty"`
	Label            string       `json:"label,omitempty"`
	SessionID        string       `json:"sessionId,omitempty"`
	ReplyToSessionID string       `json:"replyToSessionId,omitempty"`
	ContentType      string       `json:"contentType,omitempty"`
	Properties       []typedValue `json:"properties,omitempty"`
}

type actionSpec struct {
	Expression string       `json:"expr"`
	Parameters []typedValue `json:"params,omitempty"`
}

// typedValue is one key/value pair with its Go type named, so a value
// reads back with the type it was created with (an int32 stays int32).
type typedValue struct {
	Key   string `json:"k"`
	Type  string `json:"t"`
	Value string `json:"v"`
}

const valueRulePrefix = "rule/" // "rule/<entityKey(name)>" → ruleSpec JSON

func ruleValueKey(name string) string { return valueRulePrefix + entityKey(name) }

func encodeRule(d RuleDescription) []byte {
	s := ruleSpec{Name: d.Name, Filter: d.Filter.Kind.String(), Created: d.CreatedAt}
	switch d.Filter.Kind {
	case FilterSQL:
		s.Expression = d.Filter.Expression
		s.Parameters = encodeTypedMap(d.Filter.Parameters)
	case FilterCorrelation:
		c := d.Filter.Correlation
		s.Corr = &corrSpec{CorrelationID: c.CorrelationID, MessageID: c.MessageID, To: c.To, ReplyTo: c.ReplyTo,
			Label: c.Label, SessionID: c.SessionID, ReplyToSessionID: c.ReplyToSessionID, ContentType: c.ContentType,
			Properties: encodeTypedMap(c.Properties)}
	}
	if d.Action != nil {
		s.Action = &actionSpec{Expression: d.Action.Expression, Parameters: encodeTypedMap(d.Action.Parameters)}
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic("broker: encoding rule: " + err.Error()) // plain data; cannot fail
	}
	return b
}

func decodeRule(b []byte) (RuleDescription, error) {
	var s ruleSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return RuleDescription{}, err
	}
	d := RuleDescription{Name: s.Name, CreatedAt: s.Created}
	var err error
	switch s.Filter {
	case FilterTrue.String():
		d.Filter = TrueRuleFilter()
	case FilterFalse.String():
		d.Filter = FalseRuleFilter()
	case FilterSQL.String():
		d.Filter = RuleFilter{Kind: FilterSQL, Expression: s.Expression}
		if d.Filter.Parameters, err = decodeTypedMap(s.Parameters); err != nil {
			return d, err
		}
	case FilterCorrelation.String():
		if s.Corr == nil {
			return d, errors.New("correlation filter without fields")
		}
		c := CorrelationFilter{CorrelationID: s.Corr.CorrelationID, MessageID: s.Corr.MessageID, To: s.Corr.To,
			ReplyTo: s.Corr.ReplyTo, Label: s.Corr.Label, SessionID: s.Corr.SessionID,
			ReplyToSessionID: s.Corr.ReplyToSessionID, ContentType: s.Corr.ContentType}
		if c.Properties, err = decodeTypedMap(s.Corr.Properties); err != nil {
			return d, err
		}
		d.Filter = RuleFilter{Kind: FilterCorrelation, Correlation: &c}
	default:
		return d, fmt.Errorf("unknown filter kind %q", s.Filter)
	}
	if s.Action != nil {
		d.Action = &SQLAction{Expression: s.Action.Expression}
		if d.Action.Parameters, err = decodeTypedMap(s.Action.Parameters); err != nil {
			return d, err
		}
	}
	return d, nil
}

// checkTyped refuses values that cannot be stored with their type.
func checkTyped(what string, m map[string]any) error {
	for k, v := range m {
		if _, _, ok := encodeTyped(v); !ok {
			return errorf(KindInvalidArgument, "%s %q has a value of unsupported type %T", what, k, v)
		}
	}
	return nil
}

func encodeTypedMap(m map[string]any) []typedValue {
	if len(m) == 0 {
		return nil
	}
	out := make([]typedValue, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		t, v, _ := encodeTyped(m[k])
		out = append(out, typedValue{Key: k, Type: t, Value: v})
	}
	return out
}

func decodeTypedMap(vs []typedValue) (map[string]any, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	m := make(map[string]any, len(vs))
	for _, tv := range vs {
		v, err := decodeTyped(tv.Type, tv.Value)
		if err != nil {
			return nil, fmt.Errorf("value %q: %w", tv.Key, err)
		}
		m[tv.Key] = v
	}
	return m, nil
}

// encodeTyped names v's type and formats it; ok is false for a type
// rule values cannot hold.
func encodeTyped(v any) (typ, s string, ok bool) {
	switch x := v.(type) {
	case string:
		return "string", x, true
	case bool:
		return "bool", strconv.FormatBool(x), true
	case int:
		return "int", strconv.FormatInt(int64(x), 10), true
	case int8:
		return "int8", strconv.FormatInt(int64(x), 10), true
	case int16:
		return "int16", strconv.FormatInt(int64(x), 10), true
	case int32:
		return "int32", strconv.FormatInt(int64(x), 10), true
	case int64:
		return "int64", strconv.FormatInt(x, 10), true
	case uint8:
		return "uint8", strconv.FormatUint(uint64(x), 10), true
	case uint16:
		return "uint16", strconv.FormatUint(uint64(x), 10), true
	case uint32:
		return "uint32", strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return "uint64", strconv.FormatUint(x, 10), true
	case float32:
		return "float32", strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case float64:
		return "float64", strconv.FormatFloat(x, 'g', -1, 64), true
	case time.Time:
		return "time", x.Format(time.RFC3339Nano), true
	case time.Duration:
		return "duration", strconv.FormatInt(int64(x), 10), true
	case message.UUID:
		return "uuid", hex.EncodeToString(x[:]), true
	case message.Symbol:
		return "symbol", string(x), true
	case message.Char:
		return "char", strconv.FormatInt(int64(x), 10), true
	}
	return "", "", false
}

func decodeTyped(typ, s string) (any, error) {
	bits := map[string]int{"int": 64, "int8": 8, "int16": 16, "int32": 32, "int64": 64,
		"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64, "char": 32}
	switch typ {
	case "string":
		return s, nil
	case "symbol":
		return message.Symbol(s), nil
	case "bool":
		return strconv.ParseBool(s)
	case "int", "int8", "int16", "int32", "int64", "char":
		n, err := strconv.ParseInt(s, 10, bits[typ])
		if err != nil {
			return nil, err
		}
		switch typ {
		case "int":
			return int(n), nil
		case "int8":
			return int8(n), nil
		case "int16":
			return int16(n), nil
		case "int32":
			return int32(n), nil
		case "char":
			return message.Char(n), nil
		}
		return n, nil
	case "uint8", "uint16", "uint32", "uint64":
		n, err := strconv.ParseUint(s, 10, bits[typ])
		if err != nil {
			return nil, err
		}
		switch typ {
		case "uint8":
			return uint8(n), nil
		case "uint16":
			return uint16(n), nil
		case "uint32":
			return uint32(n), nil
		}
		return n, nil
	case "float32":
		f, err := strconv.ParseFloat(s, 32)
		return float32(f), err
	case "float64":
		return strconv.ParseFloat(s, 64)
	case "time":
		return time.Parse(time.RFC3339Nano, s)
	case "duration":
		n, err := strconv.ParseInt(s, 10, 64)
		return time.Duration(n), err
	case "uuid":
		var u message.UUID
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != len(u) {
			return nil, fmt.Errorf("bad uuid %q", s)
		}
		copy(u[:], b)
		return u, nil
	}
	return nil, fmt.Errorf("unknown type %q", typ)
}

// ---- rule management ----

// subscriptionLocked finds a subscription of a topic. b.admin is held.
func (b *Broker) subscriptionLocked(topicName, name string) (*topic, *entity, error) {
	t, err := b.topicByName(topicName)
	if err != nil {
		return nil, nil, err
	}
	q := t.subs.Load().byKey[entityKey(name)]
	if q == nil {
		return nil, nil, errEntityNotFound(SubscriptionPath(topicName, name))
	}
	return t, q, nil
}

// topicFilterCounts returns the SQL and correlation filters of every
// subscription of t.
func topicFilterCounts(t *topic) (sqlN, corrN int) {
	for _, q := range t.subs.Load().list {
		rt := q.route.Load()
		sqlN += rt.sqlFilters
		corrN += rt.corrFilter
	}
	return sqlN, corrN
}

// checkFilterLimits refuses a change that would take t over its filter
// limits: addSQL and addCorr are the filters the change adds (negative:
// removes).
func checkFilterLimits(t *topic, addSQL, addCorr int) error {
	sqlN, corrN := topicFilterCounts(t)
	if addSQL > 0 && sqlN+addSQL > MaxSQLFiltersPerTopic {
		return errorf(KindQuotaExceeded, "The topic '%s' already has %d SQL filters (true and false filters included); the maximum is %d.", t.name, sqlN, MaxSQLFiltersPerTopic)
	}
	if addCorr > 0 && corrN+addCorr > MaxCorrelationFiltersPerTopic {
		return errorf(KindQuotaExceeded, "The topic '%s' already has %d correlation filters; the maximum is %d.", t.name, corrN, MaxCorrelationFiltersPerTopic)
	}
	return nil
}

func filterDelta(k FilterKind) (sqlN, corrN int) {
	if k == FilterCorrelation {
		return 0, 1
	}
	return 1, 0
}

func ruleNotFound(topic, sub, name string) *Error {
	return errorf(KindNotFound, "The messaging entity '%s/Rules/%s' could not be found.", SubscriptionPath(topic, sub), name)
}

// createRule is CreateRule, or UpdateRule with replace: the rule is
// compiled before anything is locked, then stored, then swapped into the
// subscription's routing (fan-outs already under way keep the old rules).
func (b *Broker) createRule(topicName, subName string, r RuleDescription, replace bool) (RuleDescription, error) {
	r = cloneRule(r)
	if !replace {
		if err := ValidateRuleName(r.Name); err != nil {
			return RuleDescription{}, err
		}
	}
	c, err := compileRule(r)
	if err != nil {
		return RuleDescription{}, err
	}
	b.admin.Lock()
	defer b.admin.Unlock()
	t, q, err := b.subscriptionLocked(topicName, subName)
	if err != nil {
		return RuleDescription{}, err
	}
	rt := q.route.Load()
	i, found := rt.ruleIndex(c.key)
	addSQL, addCorr := filterDelta(c.desc.Filter.Kind)
	switch {
	case found && !replace:
		return RuleDescription{}, errorf(KindAlreadyExists, "The messaging entity '%s/Rules/%s' already exists.", q.name, rt.rules[i].desc.Name)
	case !found && replace:
		return RuleDescription{}, ruleNotFound(t.name, q.subName, r.Name)
	case found:
		s, k := filterDelta(rt.rules[i].desc.Filter.Kind)
		addSQL, addCorr = addSQL-s, addCorr-k
		c.desc.CreatedAt = rt.rules[i].desc.CreatedAt
		c.desc.Name = rt.rules[i].desc.Name
	default:
		c.desc.CreatedAt = b.clock.Now().UTC()
	}
	if err := checkFilterLimits(t, addSQL, addCorr); err != nil {
		return RuleDescription{}, err
	}
	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpPutValue, EntityID: q.id, Key: ruleValueKey(c.desc.Name), Data: encodeRule(c.desc)})
	if err := b.store.Commit(&batch, true); err != nil {
		return RuleDescription{}, internal(err, "storing rule %q of %s", r.Name, q.name)
	}
	rules := slices.Clone(rt.rules)
	if found {
		rules[i] = c
	} else {
		rules = slices.Insert(rules, i, c)
	}
	q.route.Store(rt.withRules(rules))
	q.lockAndPublish()
	q.touchLocked(b.now()) // a new rule is a use of the subscription
	q.mu.Unlock()
	return cloneRule(c.desc), nil
}

func (b *Broker) deleteRule(topicName, subName, name string) error {
	b.admin.Lock()
	defer b.admin.Unlock()
	t, q, err := b.subscriptionLocked(topicName, subName)
	if err != nil {
		return err
	}
	rt := q.route.Load()
	i, found := rt.ruleIndex(entityKey(name))
	if !found {
		return ruleNotFound(t.name, q.subName, name)
	}
	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpDeleteValue, EntityID: q.id, Key: ruleValueKey(name)})
	if err := b.store.Commit(&batch, true); err != nil {
		return internal(err, "deleting rule %q of %s", name, q.name)
	}
	q.route.Store(rt.withRules(slices.Delete(slices.Clone(rt.rules), i, i+1)))
	q.lockAndPublish()
	q.touchLocked(b.now())
	q.mu.Unlock()
	return nil
}

func (b *Broker) getRules(topicName, subName string) (*topic, *entity, *routing, error) {
	t, err := b.topicByName(topicName)
	if err != nil {
		return nil, nil, nil, err
	}
	q := t.subs.Load().byKey[entityKey(subName)]
	if q == nil {
		return nil, nil, nil, errEntityNotFound(SubscriptionPath(topicName, subName))
	}
	return t, q, q.route.Load(), nil
}
