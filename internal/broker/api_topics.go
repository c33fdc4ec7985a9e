package broker

import (
	"slices"
	"time"

	"github.com/busbarmq/busbar/internal/names"
	"github.com/busbarmq/busbar/internal/store"
)

// TopicInfo describes a topic: its properties, times and runtime counts.
type TopicInfo struct {
	Name       string
	Properties TopicProperties
	CreatedAt  time.Time
	UpdatedAt  time.Time
	AccessedAt time.Time // zero if never accessed
	// SubscriptionCount is the number of subscriptions.
	SubscriptionCount int
	// SQLFilterCount counts the SQL, true and false filters of every
	// subscription's rules (the default rules included);
	// CorrelationFilterCount the correlation filters.
	SQLFilterCount         int
	CorrelationFilterCount int
	// Counts: Scheduled is the messages scheduled on the topic and not yet
	// fanned out; SizeInBytes is the topic's size as its quota counts it
	// (every subscription's SizeInBytes plus the scheduled messages);
	// Total is Scheduled. The other counts live in the subscriptions.
	Counts Counts
}

// SubscriptionInfo describes a subscription: its properties, times and
// runtime counts (Counts as for a queue; SizeInBytes counts each of its
// copies at full size, whether or not their data is shared).
type SubscriptionInfo struct {
	TopicName  string
	Name       string
	Properties SubscriptionProperties
	CreatedAt  time.Time
	UpdatedAt  time.Time
	AccessedAt time.Time // zero if never accessed
	Counts     Counts
}

// EntityType says what an entity path names.
type EntityType uint8

// Entity types.
const (
	EntityQueue EntityType = iota + 1
	EntityTopic
	EntitySubscription
)

func (t EntityType) String() string {
	switch t {
	case EntityQueue:
		return "queue"
	case EntityTopic:
		return "topic"
	case EntitySubscription:
		return "subscription"
	}
	return "EntityType(?)"
}

// Resolve parses path and reports what it names: a queue (or one of its
// sub-queues), a topic, or a subscription (or one of its sub-queues). A
// path naming nothing is KindNotFound. A topic has no sub-queues: a
// topic path with a dead-letter suffix is KindNotFound.
func (b *Broker) Resolve(path string) (EntityType, Path, error) {
	p, err := ParsePath(path)
	if err != nil {
		return 0, p, err
	}
	b.mu.RLock()
	closed := b.mu.closed
	q := b.mu.queues[entityKey(p.Entity)]
	t := b.mu.topics[entityKey(p.Entity)]
	b.mu.RUnlock()
	switch {
	case closed:
		return 0, p, errClosed()
	case p.Subscription != "" && t != nil:
		if t.subs.Load().byKey[entityKey(p.Subscription)] != nil {
			return EntitySubscription, p, nil
		}
	case p.Subscription != "":
	case q != nil:
		return EntityQueue, p, nil
	case t != nil && p.SubQueue == SubQueueMain:
		return EntityTopic, p, nil
	}
	return 0, p, errEntityNotFound(path)
}

// topicByName finds a topic.
func (b *Broker) topicByName(name string) (*topic, error) {
	if err := validateExistingName(names.Entity, name); err != nil {
		return nil, err
	}
	b.mu.RLock()
	closed := b.mu.closed
	t := b.mu.topics[entityKey(name)]
	b.mu.RUnlock()
	if closed {
		return nil, errClosed()
	}
	if t == nil {
		return nil, errEntityNotFound(name)
	}
	return t, nil
}

// nameTakenLocked reports whether a queue or topic has name. b.admin is held.
func (b *Broker) nameTakenLocked(name string) (closed, taken bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	k := entityKey(name)
	return b.mu.closed, b.mu.queues[k] != nil || b.mu.topics[k] != nil
}

// CreateTopic creates a topic. Queue and topic names share one namespace
// (case-insensitively): a name taken by either is KindAlreadyExists.
func (b *Broker) CreateTopic(name string, p TopicProperties) (TopicInfo, error) {
	return b.CreateTopicWithID(0, name, p)
}

// CreateTopicWithID is CreateTopic with the entity id given, as
// CreateQueueWithID.
func (b *Broker) CreateTopicWithID(id uint64, name string, p TopicProperties) (TopicInfo, error) {
	p.AuthorizationRules = slices.Clone(p.AuthorizationRules)
	valid := func() error {
		if err := p.Validate(); err != nil {
			return err
		}
		return b.tier.checkTopic(&p)
	}
	return createEntity[*topic, TopicInfo](b, id, "topic", name, valid,
		func() error { return nil },
		func(id uint64, now time.Time) *topic { return newTopic(b, id, name, p, now) },
		func(t *topic) { b.mu.topics[entityKey(name)] = t })
}

func (t *topic) armedInfo() TopicInfo {
	t.lockAndPublish()
	defer t.mu.Unlock()
	t.rearmLocked()
	return t.infoLocked()
}

// UpdateTopic replaces a topic's properties (a full replace).
// RequiresDuplicateDetection and EnablePartitioning cannot change.
func (b *Broker) UpdateTopic(name string, p TopicProperties) (TopicInfo, error) {
	if err := p.Validate(); err != nil {
		return TopicInfo{}, err
	}
	if err := b.tier.checkTopic(&p); err != nil {
		return TopicInfo{}, err
	}
	p.AuthorizationRules = slices.Clone(p.AuthorizationRules)
	b.admin.Lock()
	defer b.admin.Unlock()
	t, err := b.topicByName(name)
	if err != nil {
		return TopicInfo{}, err
	}
	t.lockAndPublish()
	old := t.mu.props
	spec := t.specLocked()
	t.mu.Unlock()
	if err := checkTopicImmutable(old, p); err != nil {
		return TopicInfo{}, err
	}
	now := b.clock.Now().UTC()
	spec.Topic = &p
	spec.Updated = now
	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: t.id, Name: t.name, Data: encodeSpec(spec)})
	if err := b.store.Commit(&batch, true); err != nil {
		return TopicInfo{}, internal(err, "updating topic %q", name)
	}
	t.lockAndPublish()
	if t.mu.gone != nil {
		defer t.mu.Unlock()
		return TopicInfo{}, t.mu.gone
	}
	t.mu.props = p
	t.mu.updated = now
	t.disabled.Store(p.Status == StatusDisabled)
	t.rearmLocked()
	info := t.infoLocked()
	t.mu.Unlock()
	// A status change may wake or fail the subscriptions' receivers, and
	// stop or restart their forwarding.
	for _, q := range t.subs.Load().list {
		q.lockAndPublish()
		q.wakeAllLocked()
		q.propsChangedForwardLocked()
		q.rearmLocked()
		q.mu.Unlock()
	}
	return info, nil
}

// forget stops topic t (gone: the error its callers get from now on)
// and its subscriptions' timers, and drops its index once in-flight
// fan-outs and commits have finished; the caller then stops the
// subscriptions themselves. Shared by deletion and a cluster unit's
// unload.
func (t *topic) forget(subs []*entity, gone *Error) {
	b := t.b
	b.timers.Lock()
	delete(b.timers.byID, t.id)
	for _, q := range subs {
		delete(b.timers.byID, q.id)
	}
	b.timers.Unlock()
	t.deleted.Store(true)
	t.fanout.Lock() // in-flight fan-outs finish first
	t.lockAndPublish()
	t.mu.gone = gone
	t.mu.idx.reset()
	t.mu.timers.Reset()
	t.mu.dedup = dedupHistory{}
	t.mu.garbage = nil
	t.mu.Unlock()
	t.fanout.Unlock()
	t.inflight.Wait()
}

// DeleteTopic deletes a topic with its subscriptions, their rules and
// messages, and its scheduled messages.
func (b *Broker) DeleteTopic(name string) error {
	b.admin.Lock()
	defer b.admin.Unlock()
	t, err := b.topicByName(name)
	if err != nil {
		return err
	}
	return b.deleteTopicLocked(t)
}

// deleteTopicLocked deletes t and its subscriptions from the store in
// one batch, then from memory (so a failed commit changes nothing), and
// waits for their in-flight work (whose ops, if they reach the store after
// the delete, are no-ops there). b.admin is held.
func (b *Broker) deleteTopicLocked(t *topic) error {
	subs := t.subs.Load().list
	var batch store.Batch
	for _, q := range subs {
		batch.Add(store.Op{Kind: store.OpDeleteEntity, EntityID: q.id})
	}
	batch.Add(store.Op{Kind: store.OpDeleteEntity, EntityID: t.id})
	if err := b.store.Commit(&batch, true); err != nil {
		return internal(err, "deleting topic %q", t.name)
	}
	b.mu.Lock()
	if b.mu.topics[entityKey(t.name)] == t {
		delete(b.mu.topics, entityKey(t.name))
	}
	b.mu.Unlock()
	t.forget(subs, errEntityNotFound(t.name))

	for _, q := range subs {
		q.deleted.Store(true)
		q.lockAndPublish()
		q.mu.gone = errEntityNotFound(q.name)
		q.wakeAllLocked()
		q.releaseLocked()
		q.mu.Unlock()
		q.inflight.Wait()
	}
	return nil
}

// GetTopic returns a topic's description and runtime counts.
func (b *Broker) GetTopic(name string) (TopicInfo, error) {
	t, err := b.topicByName(name)
	if err != nil {
		return TopicInfo{}, err
	}
	t.catchUp(b.now())
	t.drainSubscriptions()
	t.lockAndPublish()
	defer t.mu.Unlock()
	if t.mu.gone != nil {
		return TopicInfo{}, t.mu.gone
	}
	return t.infoLocked(), nil
}

// drainSubscriptions publishes the copies waiting on the subscriptions'
// lock-free stacks (so sizes are current).
func (t *topic) drainSubscriptions() {
	for _, q := range t.subs.Load().list {
		if q.pub.stack.pending() {
			q.lockAndPublish()
			q.mu.Unlock()
		}
	}
}

// ListTopics returns every topic, ordered by name (case-insensitively).
func (b *Broker) ListTopics() []TopicInfo {
	b.mu.RLock()
	keys := make([]string, 0, len(b.mu.topics))
	for k := range b.mu.topics {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ts := make([]*topic, len(keys))
	for i, k := range keys {
		ts[i] = b.mu.topics[k]
	}
	b.mu.RUnlock()
	out := make([]TopicInfo, 0, len(ts))
	for _, t := range ts {
		t.drainSubscriptions()
		t.lockAndPublish()
		if t.mu.gone == nil {
			out = append(out, t.infoLocked())
		}
		t.mu.Unlock()
	}
	return out
}

// CreateSubscription creates subscription name of topic with the rule
// defaultRule, or, when it is nil, the rule $Default (TrueFilter, no
// action). defaultRule's Name is honoured (Service Bus's
// DefaultRuleDescription); an empty one means $Default. Names are unique
// within the topic, case-insensitively (KindAlreadyExists). A topic holds
// at most MaxSubscriptionsPerTopic subscriptions (KindQuotaExceeded).
func (b *Broker) CreateSubscription(topicName, name string, p SubscriptionProperties, defaultRule *RuleDescription) (SubscriptionInfo, error) {
	if err := ValidateSubscriptionName(name); err != nil {
		return SubscriptionInfo{}, err
	}
	if err := p.Validate(); err != nil {
		return SubscriptionInfo{}, err
	}
	rd := RuleDescription{Name: DefaultRuleName, Filter: TrueRuleFilter()}
	if defaultRule != nil {
		rd = cloneRule(*defaultRule)
		if rd.Name == "" {
			rd.Name = DefaultRuleName
		}
	}
	if err := ValidateRuleName(rd.Name); err != nil {
		return SubscriptionInfo{}, err
	}
	rule, err := compileRule(rd)
	if err != nil {
		return SubscriptionInfo{}, err
	}
	if err := b.checkGrowth(); err != nil {
		return SubscriptionInfo{}, err
	}
	b.admin.Lock()
	defer b.admin.Unlock()
	t, err := b.topicByName(topicName)
	if err != nil {
		return SubscriptionInfo{}, err
	}
	set := t.subs.Load()
	if set.byKey[entityKey(name)] != nil {
		return SubscriptionInfo{}, errorf(KindAlreadyExists, "The messaging entity '%s' already exists.", SubscriptionPath(t.name, name))
	}
	if len(set.list) >= MaxSubscriptionsPerTopic {
		return SubscriptionInfo{}, errorf(KindQuotaExceeded, "The topic '%s' already has %d subscriptions; the maximum is %d.", t.name, len(set.list), MaxSubscriptionsPerTopic)
	}
	addSQL, addCorr := filterDelta(rule.desc.Filter.Kind)
	if err := checkFilterLimits(t, addSQL, addCorr); err != nil {
		return SubscriptionInfo{}, err
	}
	if err := b.checkForwardingLocked(SubscriptionPath(t.name, name), p.RequiresSession, p.ForwardTo, p.ForwardDeadLetteredMessagesTo); err != nil {
		return SubscriptionInfo{}, err
	}
	var batch store.Batch
	id, err := b.allocIDLocked(&batch)
	if err != nil {
		return SubscriptionInfo{}, err
	}
	now := b.clock.Now().UTC()
	rule.desc.CreatedAt = now
	q := newSubscription(b, id, t, name, p, now)
	q.route.Store(newRouting([]*compiledRule{rule}, p))
	batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: id, Unit: t.id, Name: q.name, Data: encodeSpec(q.specLocked())})
	batch.Add(store.Op{Kind: store.OpPutValue, EntityID: id, Key: ruleValueKey(rule.desc.Name), Data: encodeRule(rule.desc)})
	if err := b.commitCreateLocked(&batch); err != nil {
		return SubscriptionInfo{}, internal(err, "creating subscription %q", q.name)
	}
	q.draining.Store(t.draining.Load()) // a topic handed off: its new subscription too (DrainUnit)
	t.subs.Store(set.with(q))
	b.timers.Lock()
	b.timers.byID[id] = q
	b.timers.Unlock()
	q.lockAndPublish()
	defer q.mu.Unlock()
	q.touchLocked(now.UnixNano()) // a new subscription shows AccessedAt (and uses its topic)
	q.rearmLocked()
	return q.subscriptionInfoLocked(), nil
}

// newSubscription makes the receiving entity of a subscription.
func newSubscription(b *Broker, id uint64, t *topic, name string, p SubscriptionProperties, created time.Time) *entity {
	q := newEntity(b, id, SubscriptionPath(t.name, name), p.receiving(), created)
	q.topic = t
	q.subName = name
	q.mu.sprops = p
	return q
}

// UpdateSubscription replaces a subscription's properties (a full
// replace). RequiresSession cannot change. Locks held are kept; new
// values apply to new locks and new messages.
func (b *Broker) UpdateSubscription(topicName, name string, p SubscriptionProperties) (SubscriptionInfo, error) {
	if err := p.Validate(); err != nil {
		return SubscriptionInfo{}, err
	}
	b.admin.Lock()
	defer b.admin.Unlock()
	_, q, err := b.subscriptionLocked(topicName, name)
	if err != nil {
		return SubscriptionInfo{}, err
	}
	q.lockAndPublish()
	old := q.mu.sprops
	spec := q.specLocked()
	q.mu.Unlock()
	if old.RequiresSession != p.RequiresSession {
		return SubscriptionInfo{}, errorf(KindNotAllowed, "The value for the RequiresSession property of an existing Subscription cannot be changed.")
	}
	if err := b.checkForwardingLocked(q.name, p.RequiresSession, p.ForwardTo, p.ForwardDeadLetteredMessagesTo); err != nil {
		return SubscriptionInfo{}, err
	}
	now := b.clock.Now().UTC()
	spec.Subscription = &p
	spec.Updated = now
	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: q.id, Unit: q.topic.id, Name: q.name, Data: encodeSpec(spec)})
	if err := b.store.Commit(&batch, true); err != nil {
		return SubscriptionInfo{}, internal(err, "updating subscription %q", q.name)
	}
	q.route.Store(newRouting(q.route.Load().rules, p))
	q.lockAndPublish()
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return SubscriptionInfo{}, q.mu.gone
	}
	q.mu.sprops = p
	q.mu.props = p.receiving()
	q.mu.updated = now
	q.touchLocked(now.UnixNano())
	q.wakeAllLocked()
	q.propsChangedForwardLocked()
	q.rearmLocked()
	return q.subscriptionInfoLocked(), nil
}

// DeleteSubscription deletes a subscription with its rules and messages.
// Its receivers get a not-found error.
func (b *Broker) DeleteSubscription(topicName, name string) error {
	b.admin.Lock()
	defer b.admin.Unlock()
	t, q, err := b.subscriptionLocked(topicName, name)
	if err != nil {
		return err
	}
	return b.deleteSubscriptionLocked(t, q)
}

// deleteSubscriptionLocked removes q from its topic: no fan-out chooses
// it any more, every fan-out that did has published its copies, and the
// references its copies held on the topic's shared data are released
// (the data left without any is removed in the same batch as the
// subscription). b.admin is held.
func (b *Broker) deleteSubscriptionLocked(t *topic, q *entity) error {
	// The store first, so that a failed commit changes nothing. Ops of
	// fan-outs and settlements that reach the store after it are no-ops
	// there (store rules).
	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpDeleteEntity, EntityID: q.id})
	t.lockAndPublish()
	// The copies' sequence numbers survive in the topic (see recovery).
	batch.Add(store.Op{Kind: store.OpPutValue, EntityID: t.id, Key: valueLastSeq, Data: be64(t.mu.nextSeq - 1)})
	t.mu.Unlock()
	if err := b.store.Commit(&batch, true); err != nil {
		return internal(err, "deleting subscription %q", q.name)
	}

	t.fanout.Lock()
	t.subs.Store(t.subs.Load().without(q))
	t.fanout.Unlock()
	b.timers.Lock()
	delete(b.timers.byID, q.id)
	b.timers.Unlock()

	q.deleted.Store(true)
	q.lockAndPublish() // publishes the copies still on the pub stack
	var shared []int64
	for i := range q.mu.subs {
		q.mu.subs[i].idx.ascend(0, func(r *rec) bool {
			if r.flags&flagShared != 0 {
				shared = append(shared, r.seq)
			}
			return true
		})
	}
	size := q.mu.size
	q.mu.gone = errEntityNotFound(q.name)
	q.wakeAllLocked()
	q.releaseLocked()
	q.mu.Unlock()
	q.inflight.Wait()

	t.size.Add(-size)
	t.dropRefs(shared)
	// The shared data left without a reference goes in a second batch
	// (with the last sequence number as it is now); if that fails, the
	// topic's next commit takes the garbage along.
	var tail store.Batch
	t.lockAndPublish()
	tail.Add(store.Op{Kind: store.OpPutValue, EntityID: t.id, Key: valueLastSeq, Data: be64(t.mu.nextSeq - 1)})
	garbage := t.takeGarbageLocked()
	t.mu.Unlock()
	tail.Ops = t.appendGarbageOps(tail.Ops, garbage)
	if err := b.store.Commit(&tail, true); err != nil {
		t.returnGarbage(garbage)
		b.log.Warn("freeing a deleted subscription's shared data failed; retried with the topic's next commit", "subscription", q.name, "err", err)
	}
	return nil
}

// GetSubscription returns a subscription's description and runtime counts.
func (b *Broker) GetSubscription(topicName, name string) (SubscriptionInfo, error) {
	_, q, _, err := b.getRules(topicName, name)
	if err != nil {
		return SubscriptionInfo{}, err
	}
	q.lockAt(b.now())
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return SubscriptionInfo{}, q.mu.gone
	}
	return q.subscriptionInfoLocked(), nil
}

// ListSubscriptions returns the subscriptions of topic, ordered by name
// (case-insensitively).
func (b *Broker) ListSubscriptions(topicName string) ([]SubscriptionInfo, error) {
	t, err := b.topicByName(topicName)
	if err != nil {
		return nil, err
	}
	list := t.subs.Load().list
	out := make([]SubscriptionInfo, 0, len(list))
	for _, q := range list {
		q.lockAndPublish()
		if q.mu.gone == nil {
			out = append(out, q.subscriptionInfoLocked())
		}
		q.mu.Unlock()
	}
	return out, nil
}

// subscriptionInfoLocked describes a subscription.
func (q *entity) subscriptionInfoLocked() SubscriptionInfo {
	qi := q.infoLocked()
	return SubscriptionInfo{
		TopicName:  q.topic.name,
		Name:       q.subName,
		Properties: q.mu.sprops,
		CreatedAt:  qi.CreatedAt,
		UpdatedAt:  qi.UpdatedAt,
		AccessedAt: qi.AccessedAt,
		Counts:     qi.Counts,
	}
}

// CreateRule adds a rule to a subscription. The filter (and action) is
// compiled now: a syntax error is KindInvalidArgument naming the position
// ("filter: 1:13: …"); so are texts over 1,024 characters and a
// correlation filter with no field set. A name the subscription already
// has (case-insensitively) is KindAlreadyExists; the topic's
// MaxSQLFiltersPerTopic / MaxCorrelationFiltersPerTopic limits are
// KindQuotaExceeded. CreatedAt is set to now. Adding a rule counts as a
// use of the subscription (AutoDeleteOnIdle). Messages already routed are
// not affected.
func (b *Broker) CreateRule(topic, subscription string, r RuleDescription) (RuleDescription, error) {
	return b.createRule(topic, subscription, r, false)
}

// UpdateRule replaces the filter and action of an existing rule (matched
// by name, case-insensitively), keeping its name and CreatedAt. Errors as
// for CreateRule; an unknown rule is KindNotFound.
func (b *Broker) UpdateRule(topic, subscription string, r RuleDescription) (RuleDescription, error) {
	return b.createRule(topic, subscription, r, true)
}

// DeleteRule removes a rule (KindNotFound if there is none of that
// name). A subscription may be left without rules: it then receives
// nothing.
func (b *Broker) DeleteRule(topic, subscription, name string) error {
	return b.deleteRule(topic, subscription, name)
}

// GetRule returns one rule.
func (b *Broker) GetRule(topic, subscription, name string) (RuleDescription, error) {
	_, _, rt, err := b.getRules(topic, subscription)
	if err != nil {
		return RuleDescription{}, err
	}
	i, ok := rt.ruleIndex(entityKey(name))
	if !ok {
		return RuleDescription{}, ruleNotFound(topic, subscription, name)
	}
	return cloneRule(rt.rules[i].desc), nil
}

// ListRules returns a subscription's rules ordered by name
// (case-insensitively), skipping skip and returning at most top (top ≤ 0:
// all the rest).
func (b *Broker) ListRules(topic, subscription string, skip, top int) ([]RuleDescription, error) {
	_, _, rt, err := b.getRules(topic, subscription)
	if err != nil {
		return nil, err
	}
	rules := rt.rules
	skip = max(skip, 0)
	if skip >= len(rules) {
		return []RuleDescription{}, nil
	}
	rules = rules[skip:]
	if top > 0 && top < len(rules) {
		rules = rules[:top]
	}
	out := make([]RuleDescription, len(rules))
	for i, r := range rules {
		out[i] = cloneRule(r.desc)
	}
	return out, nil
}
