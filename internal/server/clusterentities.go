package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// declareClusterEntities declares a cluster node's Config.json entities
// once it joined (docs/cluster.md, "Config.json on a cluster"): each
// queue and topic the catalog lacks is created here (the node takes its
// unit at once; placement may hand it on); one that exists, on any node,
// is left as it is, so nodes starting together each create some and
// find the rest. It goes in three passes, so that every forwarding
// target exists, on whatever node, before anything forwards to it:
//
//  1. the queues without forwarding settings, and the topics;
//  2. the queues with ForwardTo or ForwardDeadLetteredMessagesTo,
//     created with them (the broker accepts a target another node
//     serves: it is in the catalog), in rounds so that a queue whose
//     target is itself a forwarding queue comes after it;
//  3. the subscriptions and rules of the topics this node serves that
//     lack them; those of other nodes' topics are created by those nodes
//     (declaringUnits).
//
// Every entity of the file exists in the catalog after pass 1 (created
// here, or found there), so pass 2 and 3 find their targets unless the
// file names one it does not declare (config checks that it exists).
func declareClusterEntities(ctx context.Context, b *broker.Broker, ns *config.Namespace, log *slog.Logger) error {
	created := 0
	var forwarding []int
	for qi, q := range ns.Queues {
		props := queueProperties(q.Props)
		if props.ForwardTo != "" || props.ForwardDeadLetteredMessagesTo != "" {
			forwarding = append(forwarding, qi)
			continue
		}
		switch err := createRacing(ctx, func() error { _, err := b.CreateQueue(q.Name, props); return err }); {
		case err == nil:
			created++
		case errors.Is(err, broker.ErrAlreadyExists):
		default:
			return fmt.Errorf("config: UserConfig.Namespaces[0].Queues[%d] (%q): %w", qi, q.Name, err)
		}
	}
	for ti, t := range ns.Topics {
		switch err := createRacing(ctx, func() error { _, err := b.CreateTopic(t.Name, topicProperties(t.Props)); return err }); {
		case err == nil:
			created++
		case errors.Is(err, broker.ErrAlreadyExists):
		default:
			return fmt.Errorf("config: UserConfig.Namespaces[0].Topics[%d] (%q): %w", ti, t.Name, err)
		}
	}
	// Pass 2: rounds while some queue is created; what is left is
	// refused whatever the order (a loop, or a target missing).
	for len(forwarding) > 0 {
		var left []int
		errs := map[int]error{}
		for _, qi := range forwarding {
			q := ns.Queues[qi]
			props := queueProperties(q.Props)
			switch err := createRacing(ctx, func() error { _, err := b.CreateQueue(q.Name, props); return err }); {
			case err == nil:
				created++
			case errors.Is(err, broker.ErrAlreadyExists):
			case broker.KindOf(err) == broker.KindInvalidArgument:
				left = append(left, qi)
				errs[qi] = err
			default:
				return fmt.Errorf("config: UserConfig.Namespaces[0].Queues[%d] (%q): %w", qi, q.Name, err)
			}
		}
		if len(left) == len(forwarding) {
			for _, qi := range left {
				q := ns.Queues[qi]
				log.Warn("config: queue declared without its forwarding", "queue", q.Name, "err", errs[qi])
				props := queueProperties(q.Props)
				props.ForwardTo, props.ForwardDeadLetteredMessagesTo = "", ""
				switch err := createRacing(ctx, func() error { _, err := b.CreateQueue(q.Name, props); return err }); {
				case err == nil:
					created++
				case errors.Is(err, broker.ErrAlreadyExists):
				default:
					return fmt.Errorf("config: UserConfig.Namespaces[0].Queues[%d] (%q): %w", qi, q.Name, err)
				}
			}
			break
		}
		forwarding = left
	}
	for _, t := range ns.Topics {
		if _, ok := b.EntityStoreID(t.Name); ok {
			created += declareSubscriptions(b, t, log)
		}
	}
	log.Info("declared entities from config", "created", created)
	return ctx.Err()
}

// createRacing runs create, a queue's or topic's creation, again after a
// failure: two nodes creating the same name at once both pass the
// catalog check, and the database's unique name key refuses the second
// commit as a failed one (not as "exists"); run again, the creation
// finds the name in the catalog and is refused with ErrAlreadyExists.
// A failure that persists is returned.
func createRacing(ctx context.Context, create func() error) error {
	var err error
	for attempt := range 4 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		if err = create(); err == nil || errors.Is(err, broker.ErrAlreadyExists) {
			return err
		}
	}
	return err
}

// declareSubscriptions creates the subscriptions of t, and their rules,
// that the topic lacks; it returns how many it created. Failures are
// logged: the next node to load the topic tries again.
func declareSubscriptions(b *broker.Broker, t config.Topic, log *slog.Logger) int {
	created := 0
	for _, sub := range t.Subscriptions {
		props := subscriptionProperties(sub.Props)
		rules := make([]broker.RuleDescription, len(sub.Rules))
		for ri, r := range sub.Rules {
			rules[ri] = ruleDescription(r)
		}
		_, err := b.GetSubscription(t.Name, sub.Name)
		if errors.Is(err, broker.ErrNotFound) {
			var def *broker.RuleDescription
			if len(rules) > 0 {
				def = &rules[0]
			}
			_, err = b.CreateSubscription(t.Name, sub.Name, props, def)
			if err != nil && !errors.Is(err, broker.ErrAlreadyExists) && (props.ForwardTo != "" || props.ForwardDeadLetteredMessagesTo != "") {
				// Its forwarding target may be another node's.
				log.Warn("config: subscription declared without its forwarding", "topic", t.Name, "subscription", sub.Name, "err", err)
				props.ForwardTo, props.ForwardDeadLetteredMessagesTo = "", ""
				_, err = b.CreateSubscription(t.Name, sub.Name, props, def)
			}
			if err == nil || errors.Is(err, broker.ErrAlreadyExists) {
				created++
				if len(rules) > 0 {
					rules = rules[1:]
				}
				err = nil
			}
		}
		if err != nil {
			log.Warn("config: cannot declare the subscription", "topic", t.Name, "subscription", sub.Name, "err", err)
			continue
		}
		for _, r := range rules {
			if _, err := b.GetRule(t.Name, sub.Name, r.Name); err == nil {
				continue
			}
			if _, err := b.CreateRule(t.Name, sub.Name, r); err != nil && !errors.Is(err, broker.ErrAlreadyExists) {
				log.Warn("config: cannot declare the rule", "topic", t.Name, "subscription", sub.Name, "rule", r.Name, "err", err)
			}
		}
	}
	return created
}

// declaringUnits is the broker as a cluster node drives it, declaring the
// Config.json subscriptions and rules of each topic it loads.
type declaringUnits struct {
	*broker.Broker
	topics []config.Topic
	log    *slog.Logger
}

// LoadUnit loads the unit, then declares what Config.json gives its
// topic.
func (u declaringUnits) LoadUnit(ctx context.Context, unit uint64) error {
	if err := u.Broker.LoadUnit(ctx, unit); err != nil {
		return err
	}
	for _, t := range u.topics {
		if id, ok := u.EntityStoreID(t.Name); ok && id == unit {
			if n := declareSubscriptions(u.Broker, t, u.log); n > 0 {
				u.log.Info("declared subscriptions from config", "topic", t.Name, "created", n)
			}
		}
	}
	return nil
}
