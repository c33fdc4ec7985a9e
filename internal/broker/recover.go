package broker

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/store"
)

// Open recovers the broker's state from opts.Store: entities with their
// properties and times, every message's index entry (from Meta alone; the
// data stays in the store), sequence numbers (the store's lastSeq, so none
// is ever reused), delivery counts, deferred/scheduled/dead-letter states
// and the duplicate-detection history; topics with their scheduled
// messages and shared data, subscriptions with their copies and rules
// (compiled again), and the shared data's reference counts (counted from
// the copies: data no copy refers to any more is removed). Locks are not
// recovered: every message locked before is available again, its delivery
// count unchanged.
func Open(opts Options) (*Broker, error) {
	if opts.Store == nil {
		return nil, errorf(KindInvalidArgument, "broker: Options.Store is required")
	}
	b := newBroker(opts)
	if opts.Units {
		if _, ok := opts.Store.(store.UnitStore); !ok {
			return nil, errorf(KindInvalidArgument, "broker: Options.Units needs a store that loads units one by one")
		}
		b.log.Info("broker started with no entities; a cluster node loads them")
		return b, nil
	}
	now := b.now()
	rc := recovery{b: b, now: now, byID: make(map[uint64]*recovering)}
	err := b.store.Recover(store.Visitor{
		Entity:  rc.entity,
		Message: rc.message,
		Value:   rc.value,
	})
	if err != nil {
		return nil, internal(err, "recovering broker state")
	}
	b.nextID = max(b.nextID, rc.maxID+1)
	if err := b.install(&rc); err != nil {
		return nil, err
	}
	b.log.Info("broker recovered", "entities", len(rc.order), "topics", len(rc.topics), "messages", rc.messages)
	return b, nil
}

// install completes the recovered entities of rc and makes them the
// broker's: topics finished, timers and duplicate histories in order,
// names and timers registered, what recovery found to drop committed.
// Open and LoadUnit share it.
func (b *Broker) install(rc *recovery) error {
	for _, r := range rc.topics {
		rc.finishTopic(r)
	}
	for _, r := range rc.order {
		q := r.q
		q.mu.timers.Init(r.timers)
		d := &q.mu.dedup
		slices.SortFunc(d.fifo, func(a, b dedupItem) int { return cmp.Compare(a.at, b.at) })
	}
	b.mu.Lock()
	for _, r := range rc.topics {
		b.mu.topics[entityKey(r.t.name)] = r.t
	}
	for _, r := range rc.order {
		if r.q.topic == nil {
			b.mu.queues[entityKey(r.q.name)] = r.q
		}
	}
	b.mu.Unlock()
	b.timers.Lock()
	for _, r := range rc.topics {
		b.timers.byID[r.t.id] = r.t
	}
	for _, r := range rc.order {
		b.timers.byID[r.q.id] = r.q
	}
	b.timers.Unlock()
	for _, r := range rc.order {
		r.q.lockAndPublish()
		r.q.finishSessionsLocked()
		r.q.propsChangedForwardLocked() // what waited to be forwarded
		r.q.rearmLocked()
		r.q.mu.Unlock()
	}
	for _, r := range rc.topics {
		r.t.lockAndPublish()
		r.t.rearmLocked()
		r.t.mu.Unlock()
	}
	if len(rc.drop) > 0 {
		if err := b.store.Commit(&store.Batch{Ops: rc.drop}, false); err != nil {
			if !errors.Is(err, store.ErrNoSpace) {
				return internal(err, "dropping expired duplicate-detection history")
			}
			// Housekeeping only (the next start drops them again): a
			// full disk must not keep the broker from starting.
			b.log.Warn("no space to drop expired duplicate-detection history and orphaned data", "err", err)
		}
	}
	return nil
}

// recovery is the visitor state of Open. It runs before the broker is
// shared, so it touches queue fields without their locks.
type recovery struct {
	b        *Broker
	now      int64
	byID     map[uint64]*recovering
	order    []*recovering // queues and subscriptions
	topics   []*recovering
	cur      *recovering
	maxID    uint64
	messages int
	drop     []store.Op // expired dedup values, orphaned shared data to delete
}

// recovering is one entity being recovered: a receiving entity (q) or a
// topic (t).
type recovering struct {
	id      uint64
	q       *entity
	t       *topic
	timers  []expiry.Entry
	rules   []*compiledRule // a subscription's
	lastSeq int64           // the store's lastSeq, and for a topic the highest of its subscriptions'
	subs    []*recovering   // a topic's subscriptions
}

func (rc *recovery) entity(e store.Entity) error {
	rc.maxID = max(rc.maxID, e.ID)
	spec, err := decodeSpec(e.Spec)
	if err != nil {
		return fmt.Errorf("entity %d (%q): bad spec: %w", e.ID, e.Name, err)
	}
	switch spec.Kind {
	case specKindNamespace:
		rc.b.nsID = e.ID
	case specKindQueue:
		if spec.Properties == nil {
			return fmt.Errorf("entity %d (%q): spec without properties", e.ID, e.Name)
		}
		q := newEntity(rc.b, e.ID, e.Name, *spec.Properties, spec.Created)
		q.mu.updated = spec.Updated
		q.mu.nextSeq = int64(e.LastSeq) + 1
		r := &recovering{id: e.ID, q: q}
		rc.byID[e.ID] = r
		rc.order = append(rc.order, r)
	case specKindTopic:
		if spec.Topic == nil {
			return fmt.Errorf("entity %d (%q): topic spec without properties", e.ID, e.Name)
		}
		t := newTopic(rc.b, e.ID, e.Name, *spec.Topic, spec.Created)
		t.mu.updated = spec.Updated
		r := &recovering{id: e.ID, t: t, lastSeq: int64(e.LastSeq)}
		rc.byID[e.ID] = r
		rc.topics = append(rc.topics, r)
	case specKindSubscription:
		tr := rc.byID[spec.TopicID]
		if spec.Subscription == nil || tr == nil || tr.t == nil {
			return fmt.Errorf("entity %d (%q): subscription spec without properties or topic", e.ID, e.Name)
		}
		q := newSubscription(rc.b, e.ID, tr.t, spec.Name, *spec.Subscription, spec.Created)
		q.mu.updated = spec.Updated
		r := &recovering{id: e.ID, q: q, lastSeq: int64(e.LastSeq)}
		rc.byID[e.ID] = r
		rc.order = append(rc.order, r)
		tr.subs = append(tr.subs, r)
	default:
		return fmt.Errorf("entity %d (%q): unknown kind %q", e.ID, e.Name, spec.Kind)
	}
	return nil
}

// message is the hot path of recovery: decode a few varints, append to a
// block, count, maybe note a timer.
func (rc *recovery) message(m store.Message) error {
	cur := rc.cur
	if cur == nil || cur.id != m.EntityID {
		cur = rc.byID[m.EntityID]
		if cur == nil {
			return fmt.Errorf("message %d of unknown entity %d", m.Seq, m.EntityID)
		}
		rc.cur = cur
	}
	if cur.t != nil {
		return rc.topicMessage(cur, m)
	}
	q := cur.q
	var r rec
	var mo metaOpt
	sub, err := decodeMetaOpt(m.Meta, &r, &mo)
	if err != nil {
		return fmt.Errorf("message %d of %q: %w", m.Seq, q.name, err)
	}
	r.seq = int64(m.Seq)
	r.size = int32(m.Size)
	if r.flags&flagShared != 0 {
		// A copy of its topic's shared data: count the reference, take
		// the size. (The topic's messages were visited first.)
		var shared *rec
		if q.topic != nil {
			shared = q.topic.mu.idx.get(r.seq)
		}
		if shared == nil || shared.state != StateActive {
			rc.b.log.Error("dropping a subscription copy whose shared data is missing", "subscription", q.name, "seq", r.seq)
			rc.drop = append(rc.drop, store.Op{Kind: store.OpRemove, EntityID: q.id, Seq: m.Seq})
			return nil
		}
		shared.dc++
		r.size = shared.size
	}
	if sub == SubQueueMain && q.ss != nil {
		q.recoverSessionMsg(&r, mo)
	}
	q.mu.subs[sub].idx.insert(r)
	q.mu.subs[sub].count[r.state]++
	q.mu.size += int64(r.size)
	if r.seq >= q.mu.nextSeq {
		q.mu.nextSeq = r.seq + 1
	}
	if sub == SubQueueMain {
		switch {
		case r.state == StateScheduled:
			cur.timers = append(cur.timers, expiry.Entry{At: r.enq, ID: r.seq, Kind: timerScheduled})
		case r.state == StateActive && r.expiresAt() != 0:
			cur.timers = append(cur.timers, expiry.Entry{At: r.expiresAt(), ID: r.seq, Kind: timerTTL})
		}
	}
	rc.messages++
	return nil
}

func (rc *recovery) value(v store.Value) error {
	if v.EntityID == rc.b.nsID {
		if v.Key == valueNextEntityID {
			n, ok := readBE64(v.Value)
			if !ok {
				return errors.New("bad next-entity-id value")
			}
			rc.b.nextID = uint64(n)
		}
		return nil
	}
	r := rc.byID[v.EntityID]
	if r == nil {
		return nil // values of an entity we do not know: ignore
	}
	if r.t != nil {
		return rc.topicValue(r, v)
	}
	q := r.q
	if strings.HasPrefix(v.Key, valueRulePrefix) {
		return rc.rule(r, v)
	}
	if strings.HasPrefix(v.Key, valueSessionPrefix) {
		return q.recoverSessionState(v, &rc.drop)
	}
	switch {
	case v.Key == valueAccessed:
		if at, ok := readBE64(v.Value); ok {
			q.mu.accessed, q.mu.accessedSaved = at, at
		}
	case strings.HasPrefix(v.Key, valueDedupPrefix):
		at, ok := readBE64(v.Value)
		window := int64(q.mu.props.DuplicateDetectionHistoryTimeWindow)
		if !ok || !q.mu.props.RequiresDuplicateDetection || at+window <= rc.now {
			rc.drop = append(rc.drop, store.Op{Kind: store.OpDeleteValue, EntityID: v.EntityID, Key: v.Key})
			return nil
		}
		q.mu.dedup.add(strings.TrimPrefix(v.Key, valueDedupPrefix), at, nil)
	}
	return nil
}

// topicMessage recovers one message of a topic: shared data (its
// references are counted as the copies are visited) or a scheduled
// message.
func (rc *recovery) topicMessage(cur *recovering, m store.Message) error {
	t := cur.t
	var r rec
	if _, err := decodeMeta(m.Meta, &r); err != nil {
		return fmt.Errorf("message %d of topic %q: %w", m.Seq, t.name, err)
	}
	r.seq = int64(m.Seq)
	r.size = int32(m.Size)
	r.dc = 0
	switch r.state {
	case StateScheduled:
		t.mu.scheduled++
		t.size.Add(int64(r.size))
		cur.timers = append(cur.timers, expiry.Entry{At: r.enq, ID: r.seq, Kind: timerFanout})
	case StateActive:
	default:
		return fmt.Errorf("message %d of topic %q: bad state %v", m.Seq, t.name, r.state)
	}
	t.mu.idx.insert(r)
	rc.messages++
	return nil
}

func (rc *recovery) topicValue(r *recovering, v store.Value) error {
	t := r.t
	switch {
	case v.Key == valueAccessed:
		if at, ok := readBE64(v.Value); ok {
			t.accessed.Store(at)
			t.mu.accessedSaved = at
		}
	case v.Key == valueLastSeq:
		if n, ok := readBE64(v.Value); ok {
			r.lastSeq = max(r.lastSeq, n)
		}
	case strings.HasPrefix(v.Key, valueDedupPrefix):
		at, ok := readBE64(v.Value)
		window := int64(t.mu.props.DuplicateDetectionHistoryTimeWindow)
		if !ok || !t.mu.props.RequiresDuplicateDetection || at+window <= rc.now {
			rc.drop = append(rc.drop, store.Op{Kind: store.OpDeleteValue, EntityID: v.EntityID, Key: v.Key})
			return nil
		}
		t.mu.dedup.add(strings.TrimPrefix(v.Key, valueDedupPrefix), at, nil)
	}
	return nil
}

// rule recovers one rule of a subscription, compiling it again. A rule
// that no longer compiles (it did when created) is kept, as stored, but
// matches nothing, and the error is logged.
func (rc *recovery) rule(r *recovering, v store.Value) error {
	d, err := decodeRule(v.Value)
	if err != nil {
		return fmt.Errorf("rule %q of %q: %w", v.Key, r.q.name, err)
	}
	c, err := compileRule(d)
	if err != nil {
		rc.b.log.Error("a stored rule no longer compiles; it matches nothing", "subscription", r.q.name, "rule", d.Name, "err", err)
		c = &compiledRule{desc: d, key: entityKey(d.Name), match: filter.FalseFilter}
	}
	c.desc.CreatedAt = d.CreatedAt
	r.rules = append(r.rules, c)
	return nil
}

// finishTopic completes a topic after the visit: its subscriptions, their
// routing, its sequence numbers, sizes and the shared data no copy refers
// to (left by a crash between a copy's removal and the data's).
func (rc *recovery) finishTopic(r *recovering) {
	t := r.t
	set := emptySubscriptions
	size := t.size.Load()
	for _, sr := range r.subs {
		q := sr.q
		slices.SortFunc(sr.rules, func(a, b *compiledRule) int { return cmp.Compare(a.key, b.key) })
		q.route.Store(newRouting(sr.rules, q.mu.sprops))
		set = set.with(q)
		size += q.mu.size
		t.touch(q.mu.accessed) // its subscriptions' uses count for the topic
		r.lastSeq = max(r.lastSeq, sr.lastSeq, q.mu.nextSeq-1)
	}
	t.subs.Store(set)
	t.size.Store(size)
	var orphans []int64
	t.mu.idx.ascend(0, func(x *rec) bool {
		r.lastSeq = max(r.lastSeq, x.seq)
		if x.state == StateActive && x.dc == 0 {
			orphans = append(orphans, x.seq)
		}
		return true
	})
	for _, seq := range orphans {
		t.mu.idx.remove(seq)
		rc.drop = append(rc.drop, store.Op{Kind: store.OpRemove, EntityID: t.id, Seq: uint64(seq)})
	}
	t.mu.nextSeq = r.lastSeq + 1
	t.mu.timers.Init(r.timers)
	slices.SortFunc(t.mu.dedup.fifo, func(a, b dedupItem) int { return cmp.Compare(a.at, b.at) })
}
