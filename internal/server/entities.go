package server

import (
	"errors"
	"fmt"
	"math"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// applyEntities creates the entities a Config.json declares, or updates
// them if they exist already. Entities created earlier at run time and not
// named in the file are left alone.
//
// Forwarding targets may be declared after the entities that name them, so
// queues are first put in place without their forwarding settings, which a
// second pass then adds.
func applyEntities(b *broker.Broker, ec *config.EmulatorConfig) (created, updated int, err error) {
	var forwarding []config.Queue
	for ni, ns := range ec.Namespaces {
		for qi, q := range ns.Queues {
			path := fmt.Sprintf("UserConfig.Namespaces[%d].Queues[%d]", ni, qi)
			props := queueProperties(q.Props)
			if props.ForwardTo != "" || props.ForwardDeadLetteredMessagesTo != "" {
				forwarding = append(forwarding, q)
				props.ForwardTo, props.ForwardDeadLetteredMessagesTo = "", ""
			}
			if _, gerr := b.GetQueue(q.Name); gerr == nil {
				if _, err := b.UpdateQueue(q.Name, props); err != nil {
					return created, updated, fmt.Errorf("config: %s (%q): %w", path, q.Name, err)
				}
				updated++
				continue
			} else if !errors.Is(gerr, broker.ErrNotFound) {
				return created, updated, fmt.Errorf("config: %s (%q): %w", path, q.Name, gerr)
			}
			if _, err := b.CreateQueue(q.Name, props); err != nil {
				return created, updated, fmt.Errorf("config: %s (%q): %w", path, q.Name, err)
			}
			created++
		}
	}
	var subForwarding []subRef
	for ni, ns := range ec.Namespaces {
		for ti, t := range ns.Topics {
			path := fmt.Sprintf("UserConfig.Namespaces[%d].Topics[%d]", ni, ti)
			c, u, fw, err := applyTopic(b, path, t)
			created, updated = created+c, updated+u
			if err != nil {
				return created, updated, err
			}
			subForwarding = append(subForwarding, fw...)
		}
	}
	for _, q := range forwarding {
		if _, err := b.UpdateQueue(q.Name, queueProperties(q.Props)); err != nil {
			return created, updated, fmt.Errorf("config: queue %q: %w", q.Name, err)
		}
	}
	for _, f := range subForwarding {
		if _, err := b.UpdateSubscription(f.topic, f.sub.Name, subscriptionProperties(f.sub.Props)); err != nil {
			return created, updated, fmt.Errorf("config: %s (%q): %w", f.path, f.sub.Name, err)
		}
	}
	return created, updated, nil
}

// queueProperties starts from the Service Bus defaults and applies what
// the file sets.
func queueProperties(c config.QueueProps) broker.QueueProperties {
	p := broker.DefaultQueueProperties()
	set(&p.LockDuration, c.LockDuration)
	set(&p.MaxSizeInMegabytes, c.MaxSizeInMegabytes)
	set(&p.RequiresDuplicateDetection, c.RequiresDuplicateDetection)
	set(&p.DuplicateDetectionHistoryTimeWindow, c.DuplicateDetectionHistoryTimeWindow)
	set(&p.RequiresSession, c.RequiresSession)
	set(&p.DefaultMessageTimeToLive, c.DefaultMessageTimeToLive)
	set(&p.DeadLetteringOnMessageExpiration, c.DeadLetteringOnMessageExpiration)
	set(&p.MaxDeliveryCount, c.MaxDeliveryCount)
	set(&p.EnableBatchedOperations, c.EnableBatchedOperations)
	set(&p.AutoDeleteOnIdle, c.AutoDeleteOnIdle)
	if c.Status != nil {
		p.Status = broker.EntityStatus(*c.Status)
	}
	if c.ForwardTo != nil {
		p.ForwardTo = config.ForwardEntityName(*c.ForwardTo)
	}
	if c.ForwardDeadLetteredMessagesTo != nil {
		p.ForwardDeadLetteredMessagesTo = config.ForwardEntityName(*c.ForwardDeadLetteredMessagesTo)
	}
	set(&p.UserMetadata, c.UserMetadata)
	set(&p.EnablePartitioning, c.EnablePartitioning)
	set(&p.SupportOrdering, c.SupportOrdering)
	set(&p.MaxMessageSizeInKilobytes, c.MaxMessageSizeInKilobytes)
	return p
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// subRef is a subscription whose forwarding is applied in the second pass.
type subRef struct {
	path  string
	topic string
	sub   config.Subscription
}

// applyTopic creates or updates a topic, its subscriptions and their rules.
// A subscription declared with rules gets its first rule as its default
// rule (so no $Default TrueFilter lets everything through, as the file's
// author means); the rest are added, or updated when they exist.
func applyTopic(b *broker.Broker, path string, t config.Topic) (created, updated int, forwarding []subRef, err error) {
	props := topicProperties(t.Props)
	if _, gerr := b.GetTopic(t.Name); gerr == nil {
		if _, err := b.UpdateTopic(t.Name, props); err != nil {
			return created, updated, nil, fmt.Errorf("config: %s (%q): %w", path, t.Name, err)
		}
		updated++
	} else if !errors.Is(gerr, broker.ErrNotFound) {
		return created, updated, nil, fmt.Errorf("config: %s (%q): %w", path, t.Name, gerr)
	} else {
		if _, err := b.CreateTopic(t.Name, props); err != nil {
			return created, updated, nil, fmt.Errorf("config: %s (%q): %w", path, t.Name, err)
		}
		created++
	}
	for si, sub := range t.Subscriptions {
		spath := fmt.Sprintf("%s.Subscriptions[%d]", path, si)
		sprops := subscriptionProperties(sub.Props)
		if sprops.ForwardTo != "" || sprops.ForwardDeadLetteredMessagesTo != "" {
			forwarding = append(forwarding, subRef{path: spath, topic: t.Name, sub: sub})
			sprops.ForwardTo, sprops.ForwardDeadLetteredMessagesTo = "", ""
		}
		rules := make([]broker.RuleDescription, len(sub.Rules))
		for ri, r := range sub.Rules {
			rules[ri] = ruleDescription(r)
		}
		_, gerr := b.GetSubscription(t.Name, sub.Name)
		switch {
		case gerr == nil:
			if _, err := b.UpdateSubscription(t.Name, sub.Name, sprops); err != nil {
				return created, updated, nil, fmt.Errorf("config: %s (%q): %w", spath, sub.Name, err)
			}
			updated++
		case errors.Is(gerr, broker.ErrNotFound):
			var def *broker.RuleDescription
			if len(rules) > 0 {
				def = &rules[0]
			}
			if _, err := b.CreateSubscription(t.Name, sub.Name, sprops, def); err != nil {
				return created, updated, nil, fmt.Errorf("config: %s (%q): %w", spath, sub.Name, err)
			}
			created++
			if len(rules) > 0 {
				rules = rules[1:]
			}
		default:
			return created, updated, nil, fmt.Errorf("config: %s (%q): %w", spath, sub.Name, gerr)
		}
		for _, r := range rules {
			rpath := fmt.Sprintf("%s.Rules (%q)", spath, r.Name)
			if _, gerr := b.GetRule(t.Name, sub.Name, r.Name); gerr == nil {
				if _, err := b.UpdateRule(t.Name, sub.Name, r); err != nil {
					return created, updated, nil, fmt.Errorf("config: %s: %w", rpath, err)
				}
				continue
			}
			if _, err := b.CreateRule(t.Name, sub.Name, r); err != nil {
				return created, updated, nil, fmt.Errorf("config: %s: %w", rpath, err)
			}
		}
	}
	return created, updated, forwarding, nil
}

func topicProperties(c config.TopicProps) broker.TopicProperties {
	p := broker.DefaultTopicProperties()
	set(&p.DefaultMessageTimeToLive, c.DefaultMessageTimeToLive)
	set(&p.DuplicateDetectionHistoryTimeWindow, c.DuplicateDetectionHistoryTimeWindow)
	set(&p.RequiresDuplicateDetection, c.RequiresDuplicateDetection)
	set(&p.MaxSizeInMegabytes, c.MaxSizeInMegabytes)
	set(&p.AutoDeleteOnIdle, c.AutoDeleteOnIdle)
	if c.Status != nil {
		p.Status = broker.EntityStatus(*c.Status)
	}
	set(&p.UserMetadata, c.UserMetadata)
	set(&p.EnableBatchedOperations, c.EnableBatchedOperations)
	set(&p.EnablePartitioning, c.EnablePartitioning)
	set(&p.SupportOrdering, c.SupportOrdering)
	set(&p.MaxMessageSizeInKilobytes, c.MaxMessageSizeInKilobytes)
	return p
}

func subscriptionProperties(c config.SubscriptionProps) broker.SubscriptionProperties {
	p := broker.DefaultSubscriptionProperties()
	set(&p.LockDuration, c.LockDuration)
	set(&p.RequiresSession, c.RequiresSession)
	set(&p.DefaultMessageTimeToLive, c.DefaultMessageTimeToLive)
	set(&p.DeadLetteringOnMessageExpiration, c.DeadLetteringOnMessageExpiration)
	set(&p.DeadLetteringOnFilterEvaluationExceptions, c.DeadLetteringOnFilterEvaluationExceptions)
	set(&p.MaxDeliveryCount, c.MaxDeliveryCount)
	set(&p.EnableBatchedOperations, c.EnableBatchedOperations)
	set(&p.AutoDeleteOnIdle, c.AutoDeleteOnIdle)
	if c.Status != nil {
		p.Status = broker.EntityStatus(*c.Status)
	}
	if c.ForwardTo != nil {
		p.ForwardTo = config.ForwardEntityName(*c.ForwardTo)
	}
	if c.ForwardDeadLetteredMessagesTo != nil {
		p.ForwardDeadLetteredMessagesTo = config.ForwardEntityName(*c.ForwardDeadLetteredMessagesTo)
	}
	set(&p.UserMetadata, c.UserMetadata)
	return p
}

func ruleDescription(r config.Rule) broker.RuleDescription {
	d := broker.RuleDescription{Name: r.Name}
	switch r.Filter.Type {
	case config.FilterCorrelation:
		c := r.Filter.Correlation
		cf := broker.CorrelationFilter{Properties: correlationProperties(c.Properties)}
		setString(&cf.ContentType, c.ContentType)
		setString(&cf.CorrelationID, c.CorrelationID)
		setString(&cf.Label, c.Label)
		setString(&cf.MessageID, c.MessageID)
		setString(&cf.ReplyTo, c.ReplyTo)
		setString(&cf.ReplyToSessionID, c.ReplyToSessionID)
		setString(&cf.SessionID, c.SessionID)
		setString(&cf.To, c.To)
		d.Filter = broker.CorrelationRuleFilter(cf)
	default:
		d.Filter = broker.SQLRuleFilter(r.Filter.SQL, nil)
	}
	if r.Action != "" {
		d.Action = &broker.SQLAction{Expression: r.Action}
	}
	return d
}

func setString(dst *string, src *string) {
	if src != nil {
		*dst = *src
	}
}

// correlationProperties types a Config.json correlation filter's values as
// Service Bus would: a JSON whole number that fits in 32 bits is an int
// (what the SDKs send and can read back), a larger one a long.
func correlationProperties(in map[string]any) map[string]any {
	if in == nil {
		return nil
	}
	out := make(map[string]any, len(in))
	for k, v := range in {
		if n, ok := v.(int64); ok && n >= math.MinInt32 && n <= math.MaxInt32 {
			v = int32(n)
		}
		out[k] = v
	}
	return out
}
