package broker

import (
	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/message"
)

// RuleVerdict is what one rule of one subscription does with a message
// (TestRules).
type RuleVerdict struct {
	Subscription string
	// Accepting is false while the subscription's Status keeps new
	// messages out (Disabled, SendDisabled): its rules match in vain.
	Accepting bool
	Rule      RuleDescription
	Matched   bool
	// Err is the filter's or action's evaluation failure ("" if none);
	// DeadLetters says the message would go to the subscription's
	// dead-letter queue for it (DeadLetteringOnFilterEvaluationExceptions).
	Err         string
	DeadLetters bool
	// Result is the message's application properties after the rule's
	// action (nil without an action or a match).
	Result map[string]any
}

// TestRules evaluates every rule of every subscription of a topic against
// m with system properties sys, as a send would route it, and changes
// nothing: the rule tester of the web console.
func (b *Broker) TestRules(topicName string, m *message.Message, sys filter.SystemProps) ([]RuleVerdict, error) {
	t, err := b.topicByName(topicName)
	if err != nil {
		return nil, err
	}
	env := &filter.Env{Msg: m, Sys: sys}
	var out []RuleVerdict
	for _, s := range t.subs.Load().list {
		rt := s.route.Load()
		if rt == nil {
			continue
		}
		for _, r := range rt.rules {
			v := RuleVerdict{Subscription: s.subName, Accepting: rt.accept, Rule: cloneRule(r.desc)}
			ok, err := r.match.Match(env)
			switch {
			case err != nil:
				v.Err, v.DeadLetters = err.Error(), rt.dlqOnEvalError
			case ok && r.action != nil:
				res, err := r.action.Apply(env)
				if err != nil {
					v.Err, v.DeadLetters = err.Error(), rt.dlqOnEvalError
					break
				}
				v.Matched = true
				v.Result = res.ApplicationProperties
			default:
				v.Matched = ok
			}
			out = append(out, v)
		}
	}
	return out, nil
}
