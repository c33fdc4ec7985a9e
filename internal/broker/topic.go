package broker

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/store"
)

// topic is a topic entity: it accepts sends (duplicate detection, TTL
// default, size limits, status), assigns the sequence numbers, fans each
// message out to its subscriptions by their rules, keeps the data copies
// share, and holds scheduled messages until their fan-out.
//
// The topic's store entity holds two kinds of messages, keyed by the
// topic's sequence number:
//
//   - shared data (Meta state active): the data of a message that at least
//     one subscription received unchanged; its index record's dc field is
//     the number of subscription copies referring to it (flagShared);
//   - scheduled messages (Meta state scheduled): not yet fanned out.
//
// Each subscription is a receiving entity (entity) of its own, with its
// own store entity, whose copies are store messages of the same sequence
// number: Meta only for a shared copy, Meta and Data for a copy that needs
// bytes of its own (an action's result, a dead-lettered copy, a copy whose
// properties a settlement changed).
type topic struct {
	b    *Broker
	id   uint64
	name string

	armedAt int64 // deadline registered with the broker; guarded by Broker.timers

	// subs is the topic's subscriptions, replaced whole under
	// Broker.admin (copy-on-write) and read lock-free.
	subs atomic.Pointer[subscriptionSet]
	// fanout is held shared by every fan-out (a send, a scheduled
	// message's materialisation) from before it reads subs until its
	// copies are published, and exclusively by the removal of a
	// subscription or of the topic: so a removal sees every copy of every
	// fan-out that chose the subscription. Never taken while holding a
	// topic or entity mutex, never taken twice by one goroutine.
	fanout sync.RWMutex
	// inflight counts operations between their decision and their
	// outcome (as entity.inflight); delete and Close wait for it.
	inflight sync.WaitGroup

	// pub is a lock-free stack of committed sends whose shared data
	// records (and pending bytes) wait to be applied: every holder of mu
	// applies them first (lockAndPublish), as entity.pub does for a queue.
	pub pubStack[topicPub]
	// timersNext mirrors the earliest entry of mu.timers (0: none), so a
	// send can see without the mutex that no scheduled fan-out is due.
	timersNext atomic.Int64

	size     atomic.Int64 // the quota's count: every subscription's size + scheduled bytes
	accessed atomic.Int64 // last use, Unix ns (its subscriptions' uses count)
	deleted  atomic.Bool
	moved    atomic.Bool  // set before deleted when the unit is unloaded
	draining atomic.Bool  // the unit is about to be handed off: sends refused (DrainUnit)
	disabled atomic.Bool  // Status Disabled: the subscriptions refuse receives too
	garbageN atomic.Int32 // len(mu.garbage), read without the lock

	mu struct {
		sync.Mutex
		gone          error
		props         TopicProperties
		created       time.Time
		updated       time.Time
		accessedSaved int64
		nextSeq       int64
		// idx holds the shared data (StateActive, dc = references) and the
		// scheduled messages (StateScheduled) by sequence number.
		idx       index
		scheduled int64       // scheduled messages in idx
		timers    expiry.Heap // scheduled fan-outs (ID = seq)
		pending   int64       // bytes of sends not yet committed
		dedup     dedupHistory
		// garbage is shared data whose last reference is gone, to be
		// removed from the store with the next commit of the topic or of
		// one of its subscriptions (or Close; recovery removes any left).
		garbage   []int64
		armedHint int64
	}
}

// subscriptionSet is an immutable view of a topic's subscriptions.
type subscriptionSet struct {
	byKey map[string]*entity // by entityKey(name)
	list  []*entity          // ordered by key
}

var emptySubscriptions = &subscriptionSet{byKey: map[string]*entity{}}

func (s *subscriptionSet) with(q *entity) *subscriptionSet {
	n := &subscriptionSet{byKey: make(map[string]*entity, len(s.byKey)+1)}
	for k, v := range s.byKey {
		n.byKey[k] = v
	}
	n.byKey[entityKey(q.subName)] = q
	n.list = append(slices.Clone(s.list), q)
	slices.SortFunc(n.list, func(a, b *entity) int { return compareKeys(a.subName, b.subName) })
	return n
}

func (s *subscriptionSet) without(q *entity) *subscriptionSet {
	n := &subscriptionSet{byKey: make(map[string]*entity, len(s.byKey))}
	for k, v := range s.byKey {
		if v != q {
			n.byKey[k] = v
		}
	}
	n.list = slices.DeleteFunc(slices.Clone(s.list), func(e *entity) bool { return e == q })
	return n
}

// compareKeys orders entity names as their keys (case-insensitively).
func compareKeys(a, b string) int {
	return strings.Compare(entityKey(a), entityKey(b))
}

// Timer kind in topic.mu.timers.
const timerFanout uint8 = 1 // ID = seq of a scheduled message

// Store values of a topic.
const valueLastSeq = "last-seq" // 8 bytes BE: a sequence number no copy reached the topic's own messages with

func newTopic(b *Broker, id uint64, name string, p TopicProperties, created time.Time) *topic {
	t := &topic{b: b, id: id, name: name}
	t.mu.props = p
	t.mu.created = created
	t.mu.updated = created
	t.mu.nextSeq = 1
	t.subs.Store(emptySubscriptions)
	t.disabled.Store(p.Status == StatusDisabled)
	return t
}

// armedSlot implements timerOwner.
func (t *topic) armedSlot() *int64 { return &t.armedAt }

// lockAndPublish locks t.mu and applies the committed sends waiting on
// t.pub. Every acquisition of t.mu goes through it.
func (t *topic) lockAndPublish() {
	t.mu.Lock()
	for p := t.pub.take(); p != nil; p = p.next { // oldest first, so the records append
		t.mu.pending -= p.v.added
		if t.mu.gone == nil {
			for i := range p.v.shared {
				t.mu.idx.insert(p.v.shared[i])
			}
		}
	}
}

// touch records a use of the topic (AutoDeleteOnIdle, AccessedAt).
func (t *topic) touch(now int64) {
	for {
		old := t.accessed.Load()
		if now <= old || t.accessed.CompareAndSwap(old, now) {
			return
		}
	}
}

func (t *topic) saveAccessedLocked(ops []store.Op) []store.Op {
	acc := t.accessed.Load()
	if acc-t.mu.accessedSaved < accessedSaveInterval {
		return ops
	}
	t.mu.accessedSaved = acc
	return append(ops, store.Op{Kind: store.OpPutValue, EntityID: t.id, Key: valueAccessed, Data: be64(acc)})
}

func (t *topic) specLocked() entitySpec {
	p := t.mu.props
	return entitySpec{Kind: specKindTopic, Topic: &p, Created: t.mu.created, Updated: t.mu.updated}
}

func (t *topic) sendCheckLocked() error {
	if t.mu.gone != nil {
		return t.mu.gone
	}
	if !t.mu.props.Status.canSend() {
		return errorf(KindEntityDisabled, "The messaging entity '%s' is %s: sending is not allowed.", t.name, t.mu.props.Status)
	}
	return nil
}

// infoLocked builds the topic's description; the subscription counts
// come from the (lock-free) subscription set.
func (t *topic) infoLocked() TopicInfo {
	info := TopicInfo{
		Name:       t.name,
		Properties: t.mu.props,
		CreatedAt:  t.mu.created,
		UpdatedAt:  t.mu.updated,
	}
	info.Properties.AuthorizationRules = slices.Clone(info.Properties.AuthorizationRules)
	if acc := t.accessed.Load(); acc != 0 {
		info.AccessedAt = time.Unix(0, acc).UTC()
	}
	set := t.subs.Load()
	info.SubscriptionCount = len(set.list)
	info.SQLFilterCount, info.CorrelationFilterCount = topicFilterCounts(t)
	info.Counts = Counts{Scheduled: t.mu.scheduled, Total: t.mu.scheduled, SizeInBytes: t.size.Load()}
	return info
}

// ---- shared data references ----

// dropRefs releases one reference to the shared data of each seq (a copy
// was removed or got data of its own, durably). Data left without
// references becomes garbage. Called with the copy's entity mutex held
// (lock order: entity.mu → topic.mu).
func (t *topic) dropRefs(seqs []int64) {
	t.lockAndPublish()
	defer t.mu.Unlock()
	if t.mu.gone != nil {
		return
	}
	for _, seq := range seqs {
		r := t.mu.idx.get(seq)
		if r == nil || r.state != StateActive || r.dc == 0 {
			continue
		}
		r.dc--
		if r.dc == 0 {
			t.mu.idx.remove(seq)
			t.mu.garbage = append(t.mu.garbage, seq)
		}
	}
	t.garbageN.Store(int32(len(t.mu.garbage)))
}

// takeGarbage returns the shared data to remove with the caller's next
// commit (nil if none), which must return it on failure.
func (t *topic) takeGarbage() []int64 {
	if t.garbageN.Load() == 0 {
		return nil
	}
	t.lockAndPublish()
	defer t.mu.Unlock()
	return t.takeGarbageLocked()
}

func (t *topic) takeGarbageLocked() []int64 {
	g := t.mu.garbage
	t.mu.garbage = nil
	t.garbageN.Store(0)
	return g
}

// returnGarbage gives back what takeGarbage returned (its commit failed).
func (t *topic) returnGarbage(g []int64) {
	t.lockAndPublish()
	defer t.mu.Unlock()
	t.returnGarbageLocked(g)
}

func (t *topic) returnGarbageLocked(g []int64) {
	t.mu.garbage = append(t.mu.garbage, g...)
	t.garbageN.Store(int32(len(t.mu.garbage)))
}

func (t *topic) appendGarbageOps(ops []store.Op, g []int64) []store.Op {
	for _, seq := range g {
		ops = append(ops, store.Op{Kind: store.OpRemove, EntityID: t.id, Seq: uint64(seq)})
	}
	return ops
}

// ---- timers ----

func (t *topic) nextDeadlineLocked() int64 {
	at, _ := t.mu.timers.Next()
	pick := func(v int64) {
		if v != 0 && (at == 0 || v < at) {
			at = v
		}
	}
	pick(t.idleDeadlineLocked())
	pick(t.mu.dedup.deadline(int64(t.mu.props.DuplicateDetectionHistoryTimeWindow)))
	return at
}

func (t *topic) rearmLocked() {
	next, _ := t.mu.timers.Next()
	t.timersNext.Store(next)
	if t.mu.gone != nil {
		return
	}
	at := t.nextDeadlineLocked()
	if at == 0 || (t.mu.armedHint != 0 && t.mu.armedHint <= at) {
		return
	}
	t.mu.armedHint = at
	t.b.arm(t, t.id, at)
}

func (t *topic) idleDeadlineLocked() int64 {
	idle := t.mu.props.AutoDeleteOnIdle
	if idle >= Infinite {
		return 0
	}
	// An update is no use (AccessedAt stays as it was, as in Service
	// Bus) but restarts the idle clock all the same.
	base := max(t.accessed.Load(), t.mu.updated.UnixNano())
	if d := base + int64(idle); d > base {
		return d
	}
	return 0
}

// idleLocked reports whether the topic has been idle for
// AutoDeleteOnIdle: no sends, updates, scheduled messages or operations
// on its subscriptions (docs/wire/semantics.md). Pending scheduled messages keep it
// alive; so do open receivers of its subscriptions (checked by idle).
func (t *topic) idleLocked(now int64) bool {
	d := t.idleDeadlineLocked()
	if d == 0 || d > now {
		return false
	}
	if t.mu.scheduled > 0 {
		t.touch(now)
		return false
	}
	return true
}

// idle completes idleLocked without the topic's mutex: a subscription
// with an open receiver, or one that auto-forwards (ForwardTo: "equivalent
// to having a receiver", docs/wire/semantics.md), is in use.
func (t *topic) idle(now int64) bool {
	for _, q := range t.subs.Load().list {
		q.lockAndPublish()
		busy := q.mu.receivers > 0 || q.mu.props.ForwardTo != ""
		q.mu.Unlock()
		if busy {
			t.touch(now)
			t.lockAndPublish()
			t.rearmLocked()
			t.mu.Unlock()
			return false
		}
	}
	return true
}

// catchUp runs the topic's timer work that is due at now (the lazy check
// on access). It takes no lock on entry and holds none on return.
func (t *topic) catchUp(now int64) {
	if next := t.timersNext.Load(); next == 0 || next > now {
		return
	}
	t.lockAndPublish()
	next, ok := t.mu.timers.Next()
	due := ok && next <= now && t.mu.gone == nil
	t.mu.Unlock()
	if due {
		t.tick(now)
	}
}

// tick fans out the scheduled messages due at now, purges the duplicate
// history, flushes garbage and re-arms. It reports whether the topic is
// idle and should be auto-deleted.
func (t *topic) tick(now int64) (idle bool) {
	t.lockAndPublish()
	if t.mu.gone != nil {
		t.mu.Unlock()
		return false
	}
	t.mu.armedHint = 0
	var due []rec
	t.mu.timers.PopDue(now, tickBatch, func(e expiry.Entry) {
		r := t.mu.idx.get(e.ID)
		if r == nil || r.busy() || r.state != StateScheduled || r.enq > now {
			return
		}
		markBusyLocked(r)
		due = append(due, *r)
	})
	ops := t.mu.dedup.purge(t.id, int64(t.mu.props.DuplicateDetectionHistoryTimeWindow), now, nil)
	garbage := t.takeGarbageLocked()
	ops = t.appendGarbageOps(ops, garbage)
	idle = t.idleLocked(now)
	if len(due) == 0 && len(ops) == 0 {
		t.rearmLocked()
		t.mu.Unlock()
		return idle && t.idle(now)
	}
	ops = t.saveAccessedLocked(ops)
	t.inflight.Add(1)
	t.mu.Unlock()
	defer t.inflight.Done()

	if len(due) > 0 {
		t.fanOutScheduled(due, ops, garbage, now)
		return idle && t.idle(now)
	}
	err := t.b.store.Commit(&store.Batch{Ops: ops}, false)
	t.lockAndPublish()
	if err != nil {
		t.b.retries.failed("topic timer "+t.name, "topic timer work failed; retrying", err, "topic", t.name)
		t.returnGarbageLocked(garbage)
	} else {
		t.b.retries.succeeded("topic timer "+t.name, "topic timer work recovered", "topic", t.name)
	}
	t.rearmLocked()
	t.mu.Unlock()
	return idle && t.idle(now)
}
