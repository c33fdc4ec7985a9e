package broker

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/message"
)

// DryRun is what sending a message to a topic would do, subscription by
// subscription, without storing anything (Broker.DryRun).
type DryRun struct {
	Topic         string
	Subscriptions []SubscriptionDryRun // ordered by name
}

// SubscriptionDryRun is one subscription's verdict on a message.
type SubscriptionDryRun struct {
	Name string
	// Accepted: the subscription gets at least one copy in its main
	// queue (Copies of them: one for the rules without an action, one
	// per matching rule with an action).
	Accepted bool
	Copies   int
	// DeadLettered: the subscription gets the message in its dead-letter
	// queue instead (a filter or action failed to evaluate and the
	// subscription dead-letters on filter evaluation exceptions, or it
	// requires sessions and the message has no session id), with this
	// reason and description.
	DeadLettered          bool
	DeadLetterReason      string
	DeadLetterDescription string
	// Inactive: the subscription's status keeps new messages out
	// (Disabled, SendDisabled); its rules are still evaluated below.
	Inactive bool
	// Reason says in one sentence why the subscription does or does not
	// take the message.
	Reason string
	Rules  []RuleDryRun // ordered by name
}

// RuleDryRun is one rule's verdict.
type RuleDryRun struct {
	Name   string
	Filter string // "SqlFilter: <expression>", "CorrelationFilter: …", "TrueFilter", "FalseFilter"
	Action string // the SQL action, "" for none
	// Matched: the filter matched (and the action, if any, ran).
	Matched bool
	// Why, for a rule that did not match: the correlation fields that
	// differ, or that the SQL filter was false or unknown.
	Why string
	// Error is a filter or action evaluation failure ("<.NET exception
	// type>: <message>"); the rule then counts as not matching, or the
	// message is dead-lettered (see SubscriptionDryRun.DeadLettered).
	Error string
	// Sets is what the action would change on the copy it delivers:
	// application properties set (and system properties, by their
	// sys. names), and Removes the properties it would remove.
	Sets    map[string]any
	Removes []string
}

// DryRun evaluates every subscription of topic against m as a send would
// (the rule evaluation of fan-out: SQL and correlation filters, actions,
// dead-lettering on evaluation errors and on missing session ids) and
// stores nothing. System values the broker would assign read as a send
// now would make them: sequence number 0, enqueued now, state Active.
func (b *Broker) DryRun(topicName string, m *message.Message) (DryRun, error) {
	t, err := b.topicByName(topicName)
	if err != nil {
		return DryRun{}, err
	}
	if m == nil {
		m = &message.Message{}
	}
	data, _, err := message.AppendWithHeaderSize(nil, m)
	if err != nil {
		return DryRun{}, errorf(KindInvalidArgument, "the message cannot be encoded: %v", err)
	}
	now := b.clock.Now().UTC()
	sys := filter.SystemProps{EnqueuedTime: now, Size: int64(len(data)), State: filter.StateActive}
	out := DryRun{Topic: t.name}
	for _, q := range t.subs.Load().list {
		rt := q.route.Load()
		env := filter.Env{Msg: m, Sys: sys}
		if ttl := effectiveTTL(int64(m.TTL), rt.defTTL); ttl > 0 {
			env.Sys.TimeToLive = time.Duration(ttl)
			env.Sys.ExpiresAt = now.Add(time.Duration(ttl))
		}
		out.Subscriptions = append(out.Subscriptions, dryRunSubscription(q.subName, rt, &env, m))
	}
	slices.SortFunc(out.Subscriptions, func(a, b SubscriptionDryRun) int {
		return compareKeys(a.Name, b.Name)
	})
	return out, nil
}

// dryRunSubscription mirrors routing.evaluate and fanOut.route, keeping
// each rule's verdict.
func dryRunSubscription(name string, rt *routing, env *filter.Env, m *message.Message) SubscriptionDryRun {
	s := SubscriptionDryRun{Name: name, Inactive: !rt.accept}
	var firstErr *filter.EvalError
	plain := false
	actions := 0
	for _, r := range rt.rules {
		v := RuleDryRun{Name: r.desc.Name, Filter: filterText(r.desc.Filter)}
		if r.desc.Action != nil {
			v.Action = r.desc.Action.Expression
		}
		ok, err := r.match.Match(env)
		switch {
		case err != nil:
			ee := evalError(err, filter.ExcFilter)
			v.Error = ee.Type + ": " + ee.Message
			if firstErr == nil {
				firstErr = ee
			}
		case !ok:
			v.Why = whyNot(r, env)
		case r.action == nil:
			v.Matched = true
			plain = true
		default:
			res, err := r.action.Apply(env)
			if err != nil {
				ee := evalError(err, filter.ExcRuleAction)
				v.Error = ee.Type + ": " + ee.Message
				if firstErr == nil {
					firstErr = ee
				}
				break
			}
			v.Matched = true
			v.Sets, v.Removes = actionEffect(m, res)
			actions++
		}
		s.Rules = append(s.Rules, v)
	}
	switch {
	case len(rt.rules) == 0:
		s.Reason = "the subscription has no rules, so it takes no message"
	case firstErr != nil && rt.dlqOnEvalError:
		s.DeadLettered = true
		s.DeadLetterReason, s.DeadLetterDescription = firstErr.Type, firstErr.Message
		s.Reason = "a rule failed to evaluate and the subscription dead-letters on filter evaluation exceptions"
	case plain && rt.sessions && !m.HasSessionID():
		s.DeadLettered = true
		s.DeadLetterReason, s.DeadLetterDescription = ReasonSessionIDNull, DescriptionSessionIDNull
		s.Copies = actions
		s.Accepted = actions > 0
		s.Reason = "the subscription requires sessions and the message has no session id"
	case plain || actions > 0:
		s.Accepted = true
		s.Copies = actions
		if plain {
			s.Copies++
		}
		s.Reason = "a rule matched"
	case firstErr != nil:
		s.Reason = "no rule matched; a rule failed to evaluate, which counts as no match because the subscription does not dead-letter on filter evaluation exceptions"
	default:
		s.Reason = "no rule matched"
	}
	if s.Inactive && (s.Accepted || s.DeadLettered) {
		s.Accepted, s.DeadLettered, s.Copies = false, false, 0
		s.DeadLetterReason, s.DeadLetterDescription = "", ""
		s.Reason = "the subscription's status keeps new messages out (its rules would take this one)"
	}
	return s
}

func evalError(err error, typ string) *filter.EvalError {
	var ee *filter.EvalError
	if !errors.As(err, &ee) {
		ee = &filter.EvalError{Type: typ, Message: err.Error()}
	}
	return ee
}

func filterText(f RuleFilter) string {
	switch f.Kind {
	case FilterSQL:
		return "SqlFilter: " + f.Expression
	case FilterCorrelation:
		return "CorrelationFilter: " + correlationText(f.Correlation)
	}
	return f.Kind.String()
}

// correlationFields lists a correlation filter's set fields: name, and
// the filter with only that field set.
func correlationFields(c *CorrelationFilter) (names []string, single []*CorrelationFilter) {
	if c == nil {
		return nil, nil
	}
	add := func(name, v string, set func(*CorrelationFilter)) {
		if v == "" {
			return
		}
		one := &CorrelationFilter{}
		set(one)
		names = append(names, fmt.Sprintf("%s = %q", name, v))
		single = append(single, one)
	}
	add("CorrelationId", c.CorrelationID, func(f *CorrelationFilter) { f.CorrelationID = c.CorrelationID })
	add("MessageId", c.MessageID, func(f *CorrelationFilter) { f.MessageID = c.MessageID })
	add("To", c.To, func(f *CorrelationFilter) { f.To = c.To })
	add("ReplyTo", c.ReplyTo, func(f *CorrelationFilter) { f.ReplyTo = c.ReplyTo })
	add("Label", c.Label, func(f *CorrelationFilter) { f.Label = c.Label })
	add("SessionId", c.SessionID, func(f *CorrelationFilter) { f.SessionID = c.SessionID })
	add("ReplyToSessionId", c.ReplyToSessionID, func(f *CorrelationFilter) { f.ReplyToSessionID = c.ReplyToSessionID })
	add("ContentType", c.ContentType, func(f *CorrelationFilter) { f.ContentType = c.ContentType })
	for _, k := range slices.Sorted(maps.Keys(c.Properties)) {
		v := c.Properties[k]
		names = append(names, fmt.Sprintf("%s = %#v", k, v))
		single = append(single, &CorrelationFilter{Properties: map[string]any{k: v}})
	}
	return names, single
}

func correlationText(c *CorrelationFilter) string {
	names, _ := correlationFields(c)
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

// whyNot explains a filter that did not match.
func whyNot(r *compiledRule, env *filter.Env) string {
	switch r.desc.Filter.Kind {
	case FilterFalse:
		return "the FalseFilter matches no message"
	case FilterSQL:
		return "the SQL filter is false (or unknown: a property it reads is missing) for this message"
	case FilterCorrelation:
		names, single := correlationFields(r.desc.Filter.Correlation)
		var differ []string
		for i, f := range single {
			if ok, err := f.Match(env); err == nil && !ok {
				differ = append(differ, names[i])
			}
		}
		if len(differ) == 0 {
			return "the correlation filter does not match"
		}
		out := "the message does not have "
		for i, d := range differ {
			if i > 0 {
				out += ", "
			}
			out += d
		}
		return out
	}
	return "the filter does not match"
}

// actionEffect compares the message before and after an action: the
// application properties (and system properties, as sys.<name>) it sets,
// and the application properties it removes.
func actionEffect(before, after *message.Message) (sets map[string]any, removes []string) {
	sets = map[string]any{}
	for k, v := range after.ApplicationProperties {
		if old, ok := before.ApplicationProperties[k]; !ok || fmt.Sprintf("%T %v", old, old) != fmt.Sprintf("%T %v", v, v) {
			sets[k] = v
		}
	}
	for k := range before.ApplicationProperties {
		if _, ok := after.ApplicationProperties[k]; !ok {
			removes = append(removes, k)
		}
	}
	slices.Sort(removes)
	sys := func(name string, a, b any) {
		if fmt.Sprintf("%T %v", a, a) != fmt.Sprintf("%T %v", b, b) {
			sets["sys."+name] = b
		}
	}
	sys("MessageId", before.MessageID, after.MessageID)
	sys("CorrelationId", before.CorrelationID, after.CorrelationID)
	sys("To", before.To, after.To)
	sys("Label", before.Subject, after.Subject)
	sys("ReplyTo", before.ReplyTo, after.ReplyTo)
	sys("ContentType", before.ContentType, after.ContentType)
	sys("SessionId", before.SessionID, after.SessionID)
	sys("ReplyToSessionId", before.ReplyToSessionID, after.ReplyToSessionID)
	sys("TimeToLive", before.TTL, after.TTL)
	if len(sets) == 0 {
		sets = nil
	}
	return sets, removes
}

// EntityStoreID is the store's id of the queue, topic or subscription at
// path (its messages' EntityID in store operations), for tools that watch
// the store's writes (fault injection); false if there is none.
func (b *Broker) EntityStoreID(path string) (uint64, bool) {
	p, err := ParsePath(path)
	if err != nil {
		return 0, false
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if p.Subscription == "" {
		if q := b.mu.queues[entityKey(p.Entity)]; q != nil {
			return q.id, true
		}
		if t := b.mu.topics[entityKey(p.Entity)]; t != nil {
			return t.id, true
		}
		return 0, false
	}
	if t := b.mu.topics[entityKey(p.Entity)]; t != nil {
		if q := t.subs.Load().byKey[entityKey(p.Subscription)]; q != nil {
			return q.id, true
		}
	}
	return 0, false
}
