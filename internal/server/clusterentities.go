package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// declareClusterEntities declares a cluster node's Config.json entities
// once it joined (docs/cluster.md, "Config.json on a cluster"): each
// queue and topic the catalog lacks is created on the node placement
// gives it, as one created through the admin API (declarePlaced), so
// that it does not move right after; one that exists, on any node, is
// left as it is, so nodes starting together each create some and find
// the rest. It goes in three passes, so that every forwarding target
// exists, on whatever node, before anything forwards to it:
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
// Every entity of the file exists in the catalog after pass 1 (created,
// here or on its winner, or found there), so pass 2 and 3 find their
// targets unless the file names one it does not declare (config checks
// that one exists).
func declareClusterEntities(ctx context.Context, c *clusterPart) error {
	b, ns, log := c.broker, c.entities, c.log
	created := 0
	var forwarding []int
	for qi, q := range ns.Queues {
		props := queueProperties(q.Props)
		if props.ForwardTo != "" || props.ForwardDeadLetteredMessagesTo != "" {
			forwarding = append(forwarding, qi)
			continue
		}
		switch err := createRacing(ctx, func() error { return c.declarePlaced(ctx, declQueue, q.Name) }); {
		case err == nil:
			created++
		case errors.Is(err, broker.ErrAlreadyExists):
		default:
			return fmt.Errorf("config: UserConfig.Namespaces[0].Queues[%d] (%q): %w", qi, q.Name, err)
		}
	}
	for ti, t := range ns.Topics {
		switch err := createRacing(ctx, func() error { return c.declarePlaced(ctx, declTopic, t.Name) }); {
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
			switch err := createRacing(ctx, func() error { return c.declarePlaced(ctx, declQueue, q.Name) }); {
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
				switch err := createRacing(ctx, func() error { return c.declarePlaced(ctx, declQueuePlain, q.Name) }); {
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
// A failure that persists is returned, and one of the settings
// (KindInvalidArgument) at once.
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
		if err = create(); err == nil || errors.Is(err, broker.ErrAlreadyExists) || broker.KindOf(err) == broker.KindInvalidArgument {
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

// How declarePlaced creates a Config.json entity: a queue as the file
// gives it, one without its forwarding settings, a topic.
const (
	declQueue      = "queue"
	declQueuePlain = "queue-plain"
	declTopic      = "topic"
)

// declarePath is the internal listener's path on which a node asks the
// node placement chose to create one of the Config.json entities with
// the id it allocated (?kind=…&name=…&id=…). The chosen node creates it
// from its own copy of the file (every node has the same one): 201
// created, 409 the name exists, 404 its file does not declare it, 422
// the broker refused its settings (a forwarding target missing), 503
// any other failure. Topics get their subscriptions from that node's own
// declaration (its third pass, after the entity exists here).
const declarePath = "/$cluster/declare"

// declarePlaced creates the Config.json entity name of kind on the node
// placement gives a new id (admin.Cluster.Place): here, or on that node
// through declarePath; here, with that id, when that node cannot be
// reached or does not declare it. The errors are the broker's, so that
// ErrAlreadyExists (a racing creation) and KindInvalidArgument tell what
// they tell for a creation here.
func (c *clusterPart) declarePlaced(ctx context.Context, kind, name string) error {
	id, node, err := c.Place(ctx)
	if err != nil {
		return &broker.Error{Kind: broker.KindStoreUnavailable, Msg: "allocating an entity id: " + err.Error()}
	}
	if node != "" {
		q := url.Values{"kind": {kind}, "name": {name}, "id": {strconv.FormatUint(id, 10)}}
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://node"+declarePath+"?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		resp, err := c.ForwardNode(ctx, node, r, auth.Grant{KeyName: "cluster:" + c.self, Rights: auth.Manage})
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			msg := strings.TrimSpace(string(body))
			switch resp.StatusCode {
			case http.StatusCreated:
				return nil
			case http.StatusConflict:
				return &broker.Error{Kind: broker.KindAlreadyExists, Msg: msg}
			case http.StatusUnprocessableEntity:
				return &broker.Error{Kind: broker.KindInvalidArgument, Msg: msg}
			case http.StatusNotFound:
				err = fmt.Errorf("its Config.json does not declare %s %q", kind, name)
			default:
				err = fmt.Errorf("node %s answered %s: %s", node, resp.Status, msg)
			}
		}
		c.log.Warn("config: the node placement chose for an entity did not create it; creating it here",
			"entity", name, "node", node, "err", err)
	}
	return c.declareHere(kind, name, id)
}

// declareHere creates the Config.json entity name of kind here with id;
// KindNotFound when the file does not declare it.
func (c *clusterPart) declareHere(kind, name string, id uint64) error {
	if c.entities != nil {
		switch kind {
		case declQueue, declQueuePlain:
			for _, q := range c.entities.Queues {
				if strings.EqualFold(q.Name, name) {
					props := queueProperties(q.Props)
					if kind == declQueuePlain {
						props.ForwardTo, props.ForwardDeadLetteredMessagesTo = "", ""
					}
					_, err := c.broker.CreateQueueWithID(id, q.Name, props)
					return err
				}
			}
		case declTopic:
			for _, t := range c.entities.Topics {
				if strings.EqualFold(t.Name, name) {
					_, err := c.broker.CreateTopicWithID(id, t.Name, topicProperties(t.Props))
					return err
				}
			}
		}
	}
	return &broker.Error{Kind: broker.KindNotFound, Msg: fmt.Sprintf("Config.json declares no %s %q", kind, name)}
}

// serveDeclare answers declarePath (see there) on the internal listener.
func (c *clusterPart) serveDeclare(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, err := strconv.ParseUint(q.Get("id"), 10, 64)
	if r.Method != http.MethodPost || err != nil || id == 0 {
		http.Error(w, "a declaration is a POST with kind, name and a non-zero id", http.StatusBadRequest)
		return
	}
	err = c.declareHere(q.Get("kind"), q.Get("name"), id)
	status := http.StatusCreated
	switch {
	case err == nil:
	case errors.Is(err, broker.ErrAlreadyExists):
		status = http.StatusConflict
	case broker.KindOf(err) == broker.KindNotFound:
		status = http.StatusNotFound
	case broker.KindOf(err) == broker.KindInvalidArgument:
		status = http.StatusUnprocessableEntity
	default:
		status = http.StatusServiceUnavailable
	}
	msg := "created"
	if err != nil {
		msg = err.Error()
	}
	http.Error(w, msg, status)
}
