package broker

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// entity is a receiving entity: a queue or a topic's subscription, with
// its main queue and sub-queues, locks, timers and (queues only)
// duplicate-detection history. Queues and subscriptions share all of it:
// receive, settlement, locks, delivery counts, deferral, dead-lettering,
// TTL, peek, idle deletion and counts are this one implementation. What
// differs is how messages arrive (a queue's own Send; a subscription's
// copies from its topic's fan-out, see topic) and where a copy's data may
// live (flagShared: in the topic's store entity, shared by every
// subscription that received the message unchanged).
//
// Every state change follows the three phases of the package doc
// ("Structure"): under mu, decide and mark the records busy (flagBusy);
// without locks, commit; under mu, apply the outcome (or revert the busy
// marks on failure). A busy record is invisible to receives and
// settlements, so nothing else can act on a message between its decision
// and its durable outcome. The state under mu is in named parts, below.
type entity struct {
	b    *Broker
	id   uint64
	name string // as created; for a subscription its path "topic/Subscriptions/sub"

	// topic is a subscription's topic (nil for a queue); subName its
	// name within the topic.
	topic   *topic
	subName string
	// route is what a fan-out needs to know about a subscription (its
	// compiled rules and the properties routing reads), replaced whole
	// under Broker.admin when a rule or property changes, read lock-free.
	route atomic.Pointer[routing]

	// inflight counts operations between phase 1 and phase 3; delete and
	// Close wait for it so their store ops come after.
	inflight sync.WaitGroup

	armedAt int64 // deadline registered with the broker; guarded by Broker.timers

	// pub is the lock-free publication of committed sends (see
	// publication): a sender whose batch needs no timer and wakes no
	// receiver pushes it there instead of taking mu, and every holder of
	// mu publishes what is there first (lockAndPublish), so anything that
	// takes mu after a Send returned sees its messages.
	pub publication
	// deleted is set (before gone) when the queue is deleted, for senders
	// on the lock-free path.
	deleted atomic.Bool
	// moved is set (before deleted) when the entity's unit is unloaded
	// because another node owns it now: senders then get KindMoved.
	moved atomic.Bool
	// draining is set when the entity's unit is about to be handed off
	// (units.go DrainUnit): no new messages are delivered or forwarded,
	// new receivers are refused; settlements go on.
	draining atomic.Bool
	// forwarding mirrors "ForwardTo or ForwardDeadLetteredMessagesTo is
	// set" for senders on the lock-free path: they take mu after pushing,
	// so the forwarder is armed (see forward.go).
	forwarding atomic.Bool

	// ss holds the sessions of a session-enabled entity (RequiresSession,
	// which never changes); nil otherwise. See session.go.
	ss *sessionSet

	// mu guards the entity's state, in named parts.
	mu struct {
		sync.Mutex
		entityMeta
		subQueues
		lockTable
		entityTimers
		dedupState
		forwardState
	}
}

// entityMeta is what an entity is: its properties, lifetime and use.
type entityMeta struct {
	gone  error // non-nil once deleted (not found) or closed
	props QueueProperties
	// sprops are a subscription's own properties (props holds their
	// receiving view, SubscriptionProperties.receiving).
	sprops   SubscriptionProperties
	created  time.Time
	updated  time.Time
	accessed int64 // Unix ns of the last use; 0 = never
	// accessedSaved is the accessed value last written to the store.
	accessedSaved int64
	receivers     int // open receivers, any sub-queue
}

// subQueues are the entity's messages: the main queue and its dead-letter
// and transfer dead-letter queues, the sequence numbers and sizes.
type subQueues struct {
	nextSeq int64
	subs    [numSubQueues]subState
	size    int64 // bytes of all stored messages
	pending int64 // bytes of sends not yet committed
}

// lockTable is every peek-lock of the entity, by token (each sub-queue
// also maps its locked records to their tokens, subState.locked), and the
// stream lock tokens are drawn from.
type lockTable struct {
	locks map[uuid.UUID]lockRef
	rng   *rand.ChaCha8
}

// entityTimers is the entity's one timer structure (ttl, scheduled, lock
// and session deadlines) and what it last registered with the broker.
type entityTimers struct {
	timers expiry.Heap
	// armedHint is the deadline last registered with the broker (0:
	// none). A re-arm that is not earlier can skip the broker's timer
	// lock: if the broker has meanwhile popped that deadline, its Tick
	// is about to run q.tick, which re-arms from scratch.
	armedHint int64
}

// dedupState is a queue's duplicate-detection history (see dedup.go); a
// subscription's stays empty (its topic's applies).
type dedupState struct {
	dedup dedupHistory
}

// forwardState is the entity's auto-forwarding schedule (see forward.go).
type forwardState struct {
	// fwdDue is, per sub-queue, when its messages are next to be
	// auto-forwarded (0: nothing to do; forwardNow: at once).
	fwdDue [numSubQueues]int64
	// forwarding: a forward of this entity is in flight (forwardDue
	// between taking its messages and applying the outcome); no other
	// starts meanwhile, so forwards commit in the order of their
	// messages. Its end re-arms what became due.
	forwarding bool
}

// subState is one sub-queue: its index, receive cursor and waiters.
//
// Receive order is by sequence number. Records below cursor are either
// unavailable or listed in ready (they became available again: abandoned,
// released, lock expired, scheduled time reached, published late); records
// at or above cursor are found by scanning the index.
type subState struct {
	idx    index
	cursor int64
	ready  seqHeap
	locked map[int64]uuid.UUID // seq → lock token
	count  [3]int64            // by MessageState
	// waiters are receivers blocked on Ready, woken one per message that
	// becomes available (not all at once: with hundreds of idle
	// receivers a broadcast would wake them all for every send).
	waiters []*Receiver
}

type lockRef struct {
	seq int64
	sub SubQueue
	// holder says who took the lock (Receiver.SetHolder), for operators
	// (Inspect); empty if the receiver did not say. Memory only.
	holder string
}

// Timer kinds in queue.mu.timers.
const (
	timerTTL       uint8 = 1 // ID = seq in the main queue
	timerScheduled uint8 = 2 // ID = seq in the main queue
	timerLock      uint8 = 3 // + SubQueue; ID = seq
)

const (
	// tickBatch bounds the timer entries one tick handles per queue, so a
	// mass expiry is processed in store batches of bounded size.
	tickBatch = 2048
	// retryDelay postpones timer work whose store commit failed.
	retryDelay = int64(time.Second)
	// accessedSaveInterval: the last-access time is persisted with the
	// next commit once it has moved this far (and always on Close).
	accessedSaveInterval = int64(time.Minute)
)

// Service Bus dead-letter reasons and descriptions.
const (
	ReasonMaxDeliveryCountExceeded = "MaxDeliveryCountExceeded"
	ReasonTTLExpired               = "TTLExpiredException"
	DescriptionTTLExpired          = "The message expired and was dead lettered."
	ReasonHeaderSizeExceeded       = "HeaderSizeExceeded"
	DescriptionHeaderSizeExceeded  = "The size quota for this stream has been exceeded."
	// PropDeadLetterReason and PropDeadLetterErrorDescription are the
	// application properties a dead-lettered message carries.
	PropDeadLetterReason           = "DeadLetterReason"
	PropDeadLetterErrorDescription = "DeadLetterErrorDescription"
)

func newEntity(b *Broker, id uint64, name string, p QueueProperties, created time.Time) *entity {
	q := &entity{b: b, id: id, name: name}
	q.mu.props = p
	q.mu.created = created
	q.mu.updated = created
	q.mu.nextSeq = 1
	q.mu.locks = make(map[uuid.UUID]lockRef)
	for i := range q.mu.subs {
		q.mu.subs[i].locked = make(map[int64]uuid.UUID)
	}
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails on supported platforms
	q.mu.rng = rand.NewChaCha8(seed)
	q.forwarding.Store(p.ForwardTo != "" || p.ForwardDeadLetteredMessagesTo != "")
	if p.RequiresSession {
		q.ss = newSessionSet()
	}
	return q
}

func (q *entity) specLocked() entitySpec {
	if q.topic != nil {
		p := q.mu.sprops
		return entitySpec{Kind: specKindSubscription, Subscription: &p, TopicID: q.topic.id, Name: q.subName,
			Created: q.mu.created, Updated: q.mu.updated}
	}
	p := q.mu.props
	return entitySpec{Kind: specKindQueue, Properties: &p, Created: q.mu.created, Updated: q.mu.updated}
}

func (q *entity) infoLocked() QueueInfo {
	s := &q.mu.subs
	c := Counts{
		Active:      s[SubQueueMain].count[StateActive],
		Deferred:    s[SubQueueMain].count[StateDeferred],
		Scheduled:   s[SubQueueMain].count[StateScheduled],
		DeadLetter:  int64(s[SubQueueDeadLetter].idx.Len()),
		SizeInBytes: q.mu.size,
	}
	c.TransferDeadLetter = int64(s[SubQueueTransferDeadLetter].idx.Len())
	q.transferCountsLocked(&c)
	c.Total = c.Active + c.Deferred + c.Scheduled + c.DeadLetter + c.Transfer + c.TransferDeadLetter
	info := QueueInfo{
		Name:       q.name,
		Properties: q.mu.props,
		CreatedAt:  q.mu.created,
		UpdatedAt:  q.mu.updated,
		Counts:     c,
	}
	info.Properties.AuthorizationRules = append([]AuthorizationRule(nil), info.Properties.AuthorizationRules...)
	if q.mu.accessed != 0 {
		info.AccessedAt = time.Unix(0, q.mu.accessed).UTC()
	}
	return info
}

// lockAndPublish locks q.mu and publishes the committed sends waiting on
// q.pub. Every acquisition of q.mu goes through it (or lockAt).
func (q *entity) lockAndPublish() {
	q.mu.Lock()
	q.publishPendingLocked()
}

// publishPendingLocked publishes the committed sends waiting on q.pub,
// oldest first: a subscription's copies are inserted rather than found as
// placeholders, and in ascending order they append.
func (q *entity) publishPendingLocked() {
	for b := q.pub.stack.take(); b != nil; b = b.next {
		q.mu.pending -= b.v.added
		if q.mu.gone == nil {
			q.publishLocked(b.v.sub, b.v.recs, true, b.v.insert)
		}
	}
}

// lockAt locks q.mu after running the timer work due at now, so every
// operation sees the state the core would have at now even when the Run
// shell is late or absent (the "lazy check on access").
//
// For a subscription it first does the same for its topic, so a
// scheduled message whose time has come is fanned out before the
// subscription is looked at.
func (q *entity) lockAt(now int64) {
	if q.topic != nil {
		q.topic.catchUp(now)
	}
	q.lockAndPublish()
	if next, ok := q.mu.timers.Next(); (ok && next <= now || q.forwardDueLocked(now)) && q.mu.gone == nil {
		q.mu.Unlock()
		q.tick(now)
		q.lockAndPublish()
	}
}

// touchLocked records a use of the queue (sends, receives, peeks,
// settlements; for a subscription also its creation, updates and rule
// changes) for AccessedAt and AutoDeleteOnIdle. Creating or updating a
// queue or topic is not a use: its AccessedAt stays zero until messaging
// happens, as in Service Bus.
func (q *entity) touchLocked(now int64) {
	if now > q.mu.accessed {
		q.mu.accessed = now
	}
	if q.topic != nil {
		q.topic.touch(now) // any operation on a subscription uses its topic
	}
}

// armedSlot implements timerOwner.
func (q *entity) armedSlot() *int64 { return &q.armedAt }

// addSizeLocked changes the stored size of the entity, and of its topic
// for a subscription (the topic's quota counts every copy).
func (q *entity) addSizeLocked(d int64) {
	q.mu.size += d
	if q.topic != nil {
		q.topic.size.Add(d)
	}
}

// readData reads the data of r: the subscription's own, or the topic's
// shared data (flagShared).
func (q *entity) readData(r *rec) ([]byte, error) {
	ref := q.dataRef(r)
	return q.b.store.ReadData(ref.EntityID, ref.Seq)
}

// dataRef names where the data of r is stored.
func (q *entity) dataRef(r *rec) store.DataRef {
	if r.flags&flagShared != 0 {
		return store.DataRef{EntityID: q.topic.id, Seq: uint64(r.seq)}
	}
	return store.DataRef{EntityID: q.id, Seq: uint64(r.seq)}
}

// saveAccessedLocked adds the last-access time to a batch about to be
// committed anyway, when it has moved enough since last saved.
func (q *entity) saveAccessedLocked(ops []store.Op) []store.Op {
	if q.mu.accessed-q.mu.accessedSaved < accessedSaveInterval {
		return ops
	}
	q.mu.accessedSaved = q.mu.accessed
	return append(ops, store.Op{Kind: store.OpPutValue, EntityID: q.id, Key: valueAccessed, Data: be64(q.mu.accessed)})
}

func (q *entity) path(sub SubQueue) string { return Path{Entity: q.name, SubQueue: sub}.String() }

func (q *entity) sendCheckLocked() error {
	if q.mu.gone != nil {
		return q.mu.gone
	}
	if !q.mu.props.Status.canSend() {
		return errorf(KindEntityDisabled, "The messaging entity '%s' is %s: sending is not allowed.", q.name, q.mu.props.Status)
	}
	return nil
}

func (q *entity) receiveCheckLocked(sub SubQueue) error {
	if q.mu.gone != nil {
		return q.mu.gone
	}
	if !q.mu.props.Status.canReceive() {
		return errorf(KindEntityDisabled, "The messaging entity '%s' is %s: receiving is not allowed.", q.path(sub), q.mu.props.Status)
	}
	if q.topic != nil && q.topic.disabled.Load() {
		return errorf(KindEntityDisabled, "The messaging entity '%s' is Disabled: receiving from its subscriptions is not allowed.", q.topic.name)
	}
	return nil
}

// newTokenLocked returns a random (version 4) lock token from the queue's
// ChaCha8 stream, which is seeded from crypto/rand and cheap to draw from.
func (q *entity) newTokenLocked() uuid.UUID {
	var u uuid.UUID
	binary.LittleEndian.PutUint64(u[:8], q.mu.rng.Uint64())
	binary.LittleEndian.PutUint64(u[8:], q.mu.rng.Uint64())
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// ---- waking receivers ----

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// wakeOneLocked wakes the longest-waiting receiver of sub, if any.
func (q *entity) wakeOneLocked(sub SubQueue) {
	sq := &q.mu.subs[sub]
	for len(sq.waiters) > 0 {
		r := sq.waiters[0]
		sq.waiters[0] = nil
		sq.waiters = sq.waiters[1:]
		if r.waitCh != nil {
			q.unwaitLocked(r)
			return
		}
	}
	sq.waiters = nil
}

// unwaitLocked closes r's wait channel (r is or was queued as a waiter).
func (q *entity) unwaitLocked(r *Receiver) {
	close(r.waitCh)
	r.waitCh = nil
	q.pub.waiting.Add(-1)
}

// wakeAllLocked wakes every waiting receiver (the entity was deleted or
// closed, or its status changed).
func (q *entity) wakeAllLocked() {
	for i := range q.mu.subs {
		sq := &q.mu.subs[i]
		for _, r := range sq.waiters {
			if r.waitCh != nil {
				q.unwaitLocked(r)
			}
		}
		sq.waiters = nil
	}
	q.wakeSessionsLocked()
}

// passOnLocked wakes another waiter if messages are still available, so
// that a receiver woken for messages it did not take (it took fewer, or
// closed) does not leave them stranded while others sleep.
func (q *entity) passOnLocked(sub SubQueue) {
	if len(q.mu.subs[sub].waiters) > 0 && q.peekAvailableLocked(sub) != nil {
		q.wakeOneLocked(sub)
	}
}

// releaseLocked drops all state of a deleted queue.
func (q *entity) releaseLocked() {
	for i := range q.mu.subs {
		q.mu.subs[i] = subState{}
	}
	q.mu.locks = nil
	q.mu.timers.Reset()
	q.mu.dedup = dedupHistory{}
	q.mu.size = 0
	q.releaseSessionsLocked()
}

// ---- records ----

func (q *entity) countLocked(sub SubQueue, s MessageState, d int64) {
	q.mu.subs[sub].count[s] += d
}

// makeAvailableLocked publishes r (which must be available) to receivers.
func (q *entity) makeAvailableLocked(sub SubQueue, r *rec) {
	if r.sess != 0 && sub == SubQueueMain {
		// For its session's receiver. (The main queue's own ready list,
		// cursor and waiters serve only a forwarder there: its cursor
		// stays 0 and nobody waits unless the entity auto-forwards.)
		q.sessionAvailableLocked(r)
	}
	sq := &q.mu.subs[sub]
	if r.seq < sq.cursor {
		sq.ready.push(r.seq)
	}
	q.noteForwardLocked(sub)
	q.wakeOneLocked(sub)
}

// peekAvailableLocked returns the first available record of sub in
// sequence order without taking it; it drops stale ready entries and moves
// the cursor over unavailable records on the way. Taking the record (lock
// or busy mark) makes it unavailable, so the next call moves past it.
func (q *entity) peekAvailableLocked(sub SubQueue) *rec {
	if q.draining.Load() {
		return nil // nothing new is delivered while the unit drains
	}
	sq := &q.mu.subs[sub]
	for len(sq.ready) > 0 {
		if r := sq.idx.get(sq.ready.min()); r != nil && r.available() {
			return r
		}
		sq.ready.pop()
	}
	var found *rec
	sq.idx.ascend(sq.cursor, func(r *rec) bool {
		if r.available() {
			found = r
			return false
		}
		sq.cursor = r.seq + 1
		return true
	})
	return found
}

// insertRecLocked adds a record to sub (a send, a dead-letter move).
func (q *entity) insertRecLocked(sub SubQueue, r rec) {
	if sub != SubQueueMain {
		r.sess = 0 // sub-queues are not session-enabled
	}
	q.mu.subs[sub].idx.insert(r)
	q.countLocked(sub, r.state, 1)
	q.addSizeLocked(int64(r.size))
	p := q.mu.subs[sub].idx.get(r.seq)
	q.armRecLocked(sub, p, 0)
	if p.available() {
		q.makeAvailableLocked(sub, p)
	}
}

// dropRecLocked removes r from sub.
func (q *entity) dropRecLocked(sub SubQueue, r *rec) {
	if r.locked() {
		q.unlockRecLocked(sub, r)
	}
	q.countLocked(sub, r.state, -1)
	q.addSizeLocked(-int64(r.size))
	if r.sess != 0 && sub == SubQueueMain {
		q.sessionMsgGoneLocked(r)
	}
	q.mu.subs[sub].idx.remove(r.seq)
}

// armRecLocked pushes the timer r needs in its current state, not earlier
// than notBefore.
func (q *entity) armRecLocked(sub SubQueue, r *rec, notBefore int64) {
	var e expiry.Entry
	switch {
	case r.busy():
		return
	case r.locked():
		e = expiry.Entry{At: r.until, ID: r.seq, Kind: timerLock + uint8(sub)}
	case sub != SubQueueMain:
		return // no TTL in dead-letter queues
	case r.state == StateScheduled:
		e = expiry.Entry{At: r.enq, ID: r.seq, Kind: timerScheduled}
	case r.state == StateActive && r.expiresAt() != 0:
		e = expiry.Entry{At: r.expiresAt(), ID: r.seq, Kind: timerTTL}
	default:
		return
	}
	e.At = max(e.At, notBefore)
	q.mu.timers.Push(e)
}

// lockRecLocked locks r for LockDuration from now for holder and
// returns the token.
func (q *entity) lockRecLocked(sub SubQueue, r *rec, now int64, holder string) uuid.UUID {
	tok := q.newTokenLocked()
	r.until = now + int64(q.mu.props.LockDuration)
	q.mu.locks[tok] = lockRef{seq: r.seq, sub: sub, holder: holder}
	q.mu.subs[sub].locked[r.seq] = tok
	q.mu.timers.Push(expiry.Entry{At: r.until, ID: r.seq, Kind: timerLock + uint8(sub)})
	return tok
}

func (q *entity) unlockRecLocked(sub SubQueue, r *rec) {
	sq := &q.mu.subs[sub]
	if tok, ok := sq.locked[r.seq]; ok {
		delete(sq.locked, r.seq)
		delete(q.mu.locks, tok)
	}
	r.until = 0
	if r.sess != 0 && sub == SubQueueMain {
		q.sessionUnlockedLocked(r)
	}
}

// relockLocked locks r again under tok until until, after a settlement
// of it failed to commit (see transition.relock). It does nothing and
// reports false if that cannot be: r is locked again already, the token
// was reused, or r's session is no longer held.
func (q *entity) relockLocked(sub SubQueue, r *rec, tok uuid.UUID, until, now int64, holder string) bool {
	sq := &q.mu.subs[sub]
	if r.locked() || sq.locked == nil || q.mu.locks == nil {
		return false
	}
	if _, taken := q.mu.locks[tok]; taken {
		return false
	}
	if r.sess != 0 && sub == SubQueueMain {
		s := q.sessionByNumLocked(r.sess)
		if s == nil || !q.sessionHeldLocked(r.sess, now) {
			return false
		}
		s.locked[r.seq] = struct{}{}
	}
	r.until = until
	q.mu.locks[tok] = lockRef{seq: r.seq, sub: sub, holder: holder}
	sq.locked[r.seq] = tok
	q.armRecLocked(sub, r, 0) // its lock expiry
	return true
}

// lockHolderLocked is who holds the lock on seq of sub ("" if nobody
// or nobody said).
func (q *entity) lockHolderLocked(sub SubQueue, seq int64) string {
	if tok, ok := q.mu.subs[sub].locked[seq]; ok {
		return q.mu.locks[tok].holder
	}
	return ""
}

// lockedRecLocked resolves a lock token of sub to its record, or reports
// the lock lost (unknown, used, expired, or of another sub-queue).
func (q *entity) lockedRecLocked(sub SubQueue, tok uuid.UUID, now int64) (*rec, error) {
	ref, ok := q.mu.locks[tok]
	if !ok || ref.sub != sub {
		return nil, q.lockLostLocked(tok)
	}
	r := q.mu.subs[sub].idx.get(ref.seq)
	if r == nil || !r.locked() || r.busy() || r.until <= now {
		return nil, q.lockLostLocked(tok)
	}
	if r.sess != 0 && sub == SubQueueMain && !q.sessionHeldLocked(r.sess, now) {
		return nil, errSessionLockLost("")
	}
	return r, nil
}

// ---- timers ----

// nextDeadlineLocked is the earliest instant the queue has timer work.
func (q *entity) nextDeadlineLocked() int64 {
	at, _ := q.mu.timers.Next()
	pick := func(t int64) {
		if t != 0 && (at == 0 || t < at) {
			at = t
		}
	}
	pick(q.idleDeadlineLocked())
	pick(q.dedupDeadlineLocked())
	pick(q.forwardDeadlineLocked())
	return at
}

func (q *entity) rearmLocked() {
	if q.mu.gone != nil {
		return
	}
	q.compactTimersLocked()
	at := q.nextDeadlineLocked()
	if at == 0 || (q.mu.armedHint != 0 && q.mu.armedHint <= at) {
		return
	}
	q.mu.armedHint = at
	q.b.arm(q, q.id, at)
}

// compactTimersLocked drops stale timer entries when they dominate: every
// message has at most one live ttl/scheduled entry and each lock one live
// entry, so a heap much larger than that is mostly garbage.
func (q *entity) compactTimersLocked() {
	h := &q.mu.timers
	live := q.mu.subs[SubQueueMain].idx.Len() + len(q.mu.locks)
	if h.Len() < 4096 || h.Len() < 2*live {
		return
	}
	h.Filter(func(e expiry.Entry) bool {
		switch {
		case e.Kind == timerSession:
			return q.sessionTimerLiveLocked(e)
		case e.Kind >= timerLock:
			r := q.mu.subs[e.Kind-timerLock].idx.get(e.ID)
			return r != nil && r.locked() && e.At >= r.until // earlier ones: renewed
		case e.Kind == timerScheduled:
			r := q.mu.subs[SubQueueMain].idx.get(e.ID)
			return r != nil && r.state == StateScheduled
		default:
			r := q.mu.subs[SubQueueMain].idx.get(e.ID)
			return r != nil && r.state == StateActive
		}
	})
}

func (q *entity) idleDeadlineLocked() int64 {
	idle := q.mu.props.AutoDeleteOnIdle
	if idle >= Infinite {
		return 0
	}
	// An update is no use (AccessedAt stays as it was, as in Service
	// Bus) but restarts the idle clock all the same.
	base := max(q.mu.accessed, q.mu.updated.UnixNano())
	if d := base + int64(idle); d > base {
		return d
	}
	return 0
}

// idleLocked reports whether the queue has been idle for AutoDeleteOnIdle.
// Open receivers, pending scheduled messages and auto-forwarding (ForwardTo,
// "equivalent to having a receiver", docs/wire/semantics.md) keep it alive: then the idle
// clock restarts at now.
func (q *entity) idleLocked(now int64) bool {
	d := q.idleDeadlineLocked()
	if d == 0 || d > now {
		return false
	}
	if q.mu.receivers > 0 || q.mu.subs[SubQueueMain].count[StateScheduled] > 0 || q.mu.props.ForwardTo != "" {
		q.touchLocked(now)
		return false
	}
	return true
}

// tickTimers runs the timer work due at now and re-arms the queue. It
// reports whether the queue is idle and should be auto-deleted. (tick,
// in forward.go, runs the forwarding due first.)
func (q *entity) tickTimers(now int64) (idle bool) {
	q.lockAndPublish()
	if q.mu.gone != nil {
		q.mu.Unlock()
		return false
	}
	q.mu.armedHint = 0 // re-arm from scratch below
	var ts []transition
	q.mu.timers.PopDue(now, tickBatch, func(e expiry.Entry) {
		switch {
		case e.Kind == timerSession:
			ts = q.sessionTimerLocked(e, now, ts)
		case e.Kind >= timerLock:
			sub := SubQueue(e.Kind - timerLock)
			r := q.mu.subs[sub].idx.get(e.ID)
			if r == nil || !r.locked() || r.busy() || r.until > now {
				return // stale: settled, renewed or in flight
			}
			if r.sess != 0 && sub == SubQueueMain {
				return // a session's message: its session's lock ends it
			}
			var tok uuid.UUID
			var holder string
			if q.b.hist != nil {
				tok = q.mu.subs[sub].locked[r.seq]
				holder = q.mu.locks[tok].holder
			}
			if t, ok := q.lockEndLocked(sub, r, now, nil, true); ok {
				t.why, t.evTok, t.relockHolder = history.LockExpired, tok, holder
				ts = append(ts, t)
			} else if q.b.hist != nil {
				q.recordLockEndLocked(history.LockExpired, sub, r, tok, holder, now)
			}
		case e.Kind == timerScheduled:
			r := q.mu.subs[SubQueueMain].idx.get(e.ID)
			if r == nil || r.busy() || r.state != StateScheduled || r.enq > now {
				return
			}
			// Materialise: nothing to persist, Meta already says "scheduled
			// at enq" and recovery derives the state from the time.
			q.countLocked(SubQueueMain, StateScheduled, -1)
			r.state = StateActive
			q.countLocked(SubQueueMain, StateActive, 1)
			q.touchLocked(now)
			q.armRecLocked(SubQueueMain, r, 0)
			q.makeAvailableLocked(SubQueueMain, r)
		case e.Kind == timerTTL:
			r := q.mu.subs[SubQueueMain].idx.get(e.ID)
			if r != nil && r.available() && r.expired(now) {
				ts = append(ts, q.expireLocked(r, nil))
			}
		}
	})
	ops := q.purgeDedupLocked(now, nil)
	idle = q.idleLocked(now)
	if len(ts) == 0 && len(ops) == 0 {
		q.rearmLocked()
		q.mu.Unlock()
		return idle
	}
	if err := q.commitAndUnlock(ts, ops, false, now); err != nil {
		q.b.retries.failed("timer "+q.name, "timer work failed; retrying", err, "queue", q.name)
	} else {
		q.b.retries.succeeded("timer "+q.name, "timer work recovered", "queue", q.name)
	}
	return idle
}

// ---- transitions ----

// transition is one message's change decided in phase 1 and committed in
// phase 2.
type transition struct {
	seq    int64
	from   SubQueue
	remove bool
	to     SubQueue
	next   rec            // the record after the change (not removed)
	props  map[string]any // application properties to set
	// deadLetter sets the DeadLetterReason / DeadLetterErrorDescription
	// application properties (when non-empty).
	deadLetter   bool
	reason, desc string

	newSize int32 // set by persist when the data was rewritten

	// relock is the lock a settlement took off the record (with its
	// expiry, relockUntil): if the commit fails, the record is locked
	// again under the same token rather than made available, so that the
	// client's retry finds its lock and the failure reaches it as the
	// cause, not as a lost lock.
	relock       uuid.UUID
	relockUntil  int64
	relockHolder string

	// For the message history (history.go): what this transition is (0:
	// nothing to record), the lock it ended when not relock, and whether
	// a transaction commits it.
	why   history.Kind
	evTok uuid.UUID
	txn   bool
}

func (t *transition) needsData() bool { return !t.remove && (t.props != nil || t.deadLetter) }

// markBusyLocked marks r busy (its transition is in flight).
func markBusyLocked(r *rec) { r.flags |= flagBusy }

func removeTransitionLocked(sub SubQueue, r *rec) transition {
	markBusyLocked(r)
	return transition{seq: r.seq, from: sub, remove: true, why: history.Removed}
}

func updateTransitionLocked(sub, to SubQueue, r *rec, next rec, props map[string]any) transition {
	markBusyLocked(r)
	next.until = 0
	next.flags &^= flagBusy | flagDead
	return transition{seq: r.seq, from: sub, to: to, next: next, props: props}
}

// deadLetterTransitionLocked moves r (unlocked) from the main queue to the
// dead-letter queue, where it is active and never expires.
func deadLetterTransitionLocked(r *rec, reason, desc string, props map[string]any) transition {
	next := *r
	next.state = StateActive
	t := updateTransitionLocked(SubQueueMain, SubQueueDeadLetter, r, next, props)
	t.deadLetter, t.reason, t.desc = true, reason, desc
	t.why = history.DeadLettered
	return t
}

// expireLocked handles an expired message of the main queue (unlocked):
// dead-lettered with TTLExpiredException if the queue says so, else
// dropped. props are a settlement's property changes, kept if it moves.
func (q *entity) expireLocked(r *rec, props map[string]any) transition {
	var t transition
	if q.mu.props.DeadLetteringOnMessageExpiration {
		t = deadLetterTransitionLocked(r, ReasonTTLExpired, DescriptionTTLExpired, props)
	} else {
		t = removeTransitionLocked(SubQueueMain, r)
	}
	t.why = history.Expired
	return t
}

// lockEndLocked ends r's lock by abandon (count=true, props optional),
// lock expiry (count=true) or release (count=false) and decides what
// follows:
//
//   - count: the delivery count rises (main queue only: in a dead-letter
//     queue the count is frozen, as in Service Bus); reaching
//     MaxDeliveryCount dead-letters the message;
//   - an expired active message of the main queue expires now;
//   - otherwise it is available again (a deferred one stays deferred).
//
// It returns the transition to persist, or false when the change is
// in-memory only (a plain release).
func (q *entity) lockEndLocked(sub SubQueue, r *rec, now int64, props map[string]any, count bool) (transition, bool) {
	q.unlockRecLocked(sub, r)
	next := *r
	if count && sub == SubQueueMain {
		next.dc++
	}
	maxDC := uint32(q.mu.props.MaxDeliveryCount)
	switch {
	case count && sub == SubQueueMain && next.dc >= maxDC:
		t := deadLetterTransitionLocked(r, ReasonMaxDeliveryCountExceeded,
			fmt.Sprintf("Message could not be consumed after %d delivery attempts.", maxDC), props)
		t.next.dc = next.dc
		return t, true
	case sub == SubQueueMain && r.state == StateActive && r.expired(now):
		t := q.expireLocked(r, props)
		t.next.dc = next.dc
		return t, true
	case next.dc != r.dc || props != nil:
		return updateTransitionLocked(sub, sub, r, next, props), true
	}
	q.armRecLocked(sub, r, 0)
	if r.available() {
		q.makeAvailableLocked(sub, r)
	}
	return transition{}, false
}

// commitAndUnlock runs phases 2 and 3 for transitions planned under mu: it
// releases mu for the store commit (persist), then applies the outcome
// (applyLocked) and re-arms the timers under mu again. Called with mu
// held; returns with mu released and the commit's error. The entity
// counts as in flight meanwhile, so Close and Delete wait for it.
func (q *entity) commitAndUnlock(ts []transition, ops []store.Op, sync bool, now int64) error {
	return q.commitAndUnlockAs(nil, ts, ops, sync, now)
}

// commitAndUnlockAs is commitAndUnlock for a paced committer (Settler):
// fol is its follower, or nil.
func (q *entity) commitAndUnlockAs(fol *store.Follower, ts []transition, ops []store.Op, sync bool, now int64) error {
	q.inflight.Add(1)
	q.mu.Unlock()
	err := q.persist(fol, ts, ops, sync)
	q.lockAndPublish()
	q.applyLocked(ts, err, now)
	q.rearmLocked()
	q.mu.Unlock()
	q.inflight.Done()
	return err
}

// persist is phase 2: rewrite data where needed and commit the
// transitions with ops appended, as fol (may be nil). No lock is held.
func (q *entity) persist(fol *store.Follower, ts []transition, ops []store.Op, sync bool) error {
	batch := store.Batch{Ops: q.transitionOps(make([]store.Op, 0, len(ts)+len(ops)), ts), Follower: fol}
	batch.Ops = append(batch.Ops, ops...)
	var garbage []int64
	if q.topic != nil {
		// Shared data that lost its last reference rides along.
		garbage = q.topic.takeGarbage()
		batch.Ops = q.topic.appendGarbageOps(batch.Ops, garbage)
	}
	if batch.Len() == 0 {
		return nil
	}
	defer closeTails(batch.Ops)
	if err := q.b.store.Commit(&batch, sync); err != nil {
		if garbage != nil {
			q.topic.returnGarbage(garbage)
		}
		return internal(err, "store commit for %s", q.name)
	}
	return nil
}

// transitionOps appends to ops the store ops of ts, rewriting data where
// needed (phase 2, no lock held).
func (q *entity) transitionOps(ops []store.Op, ts []transition) []store.Op {
	batch := store.Batch{Ops: ops}
	for i := range ts {
		t := &ts[i]
		if t.remove {
			batch.Add(store.Op{Kind: store.OpRemove, EntityID: q.id, Seq: uint64(t.seq)})
			continue
		}
		if t.needsData() {
			data, tail, err := q.rewrite(t)
			if err == nil {
				size := int64(len(data))
				if tail != nil {
					size += tail.Size()
				}
				t.newSize = int32(size)
				t.next.flags &^= flagShared // the copy has its own data now
				op := store.Op{Kind: store.OpRewrite, EntityID: q.id, Seq: uint64(t.seq),
					Meta: q.appendRecMeta(nil, t.to, &t.next), Data: data}
				if tail != nil {
					op.Tail = tail
				}
				batch.Add(op)
				continue
			}
			// Unreadable data: keep the state change, lose the property
			// changes rather than wedge the message.
			q.b.log.Error("cannot rewrite message properties", "queue", q.name, "seq", t.seq, "err", err)
		}
		batch.Add(store.Op{Kind: store.OpSetMeta, EntityID: q.id, Seq: uint64(t.seq), Meta: q.appendRecMeta(nil, t.to, &t.next)})
	}
	return batch.Ops
}

// rewrite reads t's message, applies its property changes and dead-letter
// properties, and returns the new data. If the changes push the header
// over MaxHeaderSize they are dropped and the message is dead-lettered
// with HeaderSizeExceeded instead (t is updated to match).
//
// A large message (rewriteStreamFrom) is not read whole: only its head
// is, and its body is returned as tail, the rest of the new data, which
// the store copies from the old data during the commit. The caller closes
// tail (closeTails) once the batch is committed.
func (q *entity) rewrite(t *transition) (data []byte, tail *rewriteTail, err error) {
	src := t.next
	src.seq = t.seq
	decode := func() (*message.Message, error) {
		if tail != nil {
			m, _, _, err := message.UnmarshalHead(tail.head, tail.rd.Size())
			if err == nil {
				m.BodyTail = tail.body
			}
			return m, err
		}
		return message.Unmarshal(data)
	}
	if int64(src.size) >= rewriteStreamFrom {
		if tail, err = q.openTail(&src); err != nil {
			return nil, nil, err
		}
	} else if data, err = q.readData(&src); err != nil {
		return nil, nil, err
	}
	fail := func(err error) ([]byte, *rewriteTail, error) {
		if tail != nil {
			tail.Close()
		}
		return nil, nil, err
	}
	m, err := decode()
	if err != nil {
		return fail(err)
	}
	applyProps(m, t.props)
	if t.deadLetter {
		setDeadLetterProps(m, t.reason, t.desc)
	}
	out, hs, err := message.AppendHead(nil, m)
	if err != nil {
		return fail(err)
	}
	if hs <= MaxHeaderSize {
		return out, tail, nil
	}
	if m, err = decode(); err != nil {
		return fail(err)
	}
	setDeadLetterProps(m, ReasonHeaderSizeExceeded, DescriptionHeaderSizeExceeded)
	t.props, t.deadLetter, t.reason, t.desc = nil, true, ReasonHeaderSizeExceeded, DescriptionHeaderSizeExceeded
	if t.from == SubQueueMain {
		t.to = SubQueueDeadLetter
		t.next.state = StateActive
	}
	if out, _, err = message.AppendHead(nil, m); err != nil {
		return fail(err)
	}
	return out, tail, nil
}

// rewriteStreamFrom is the stored size from which rewrite leaves a
// message's body in the store.
const rewriteStreamFrom = 256 << 10

// rewriteTail is the body of a large message being rewritten: a
// store.Op.Tail reading it from the message's old data.
type rewriteTail struct {
	rd   store.DataReader
	head []byte
	body *io.SectionReader
}

func (t *rewriteTail) ReadAt(p []byte, off int64) (int, error) { return t.body.ReadAt(p, off) }
func (t *rewriteTail) Size() int64                             { return t.body.Size() }
func (t *rewriteTail) Close() error                            { return t.rd.Close() }

// DataSection implements store.DataSection: the body is a section of the
// old data, which the store may refer to rather than copy.
func (t *rewriteTail) DataSection() (store.DataReader, int64, int64) {
	_, off, n := t.body.Outer()
	return t.rd, off, n
}

// openTail opens the data of r for a rewrite that leaves its body where
// it is.
func (q *entity) openTail(r *rec) (*rewriteTail, error) {
	ref := q.dataRef(r)
	rd, err := store.OpenData(q.b.store, ref.EntityID, ref.Seq)
	if err != nil {
		return nil, err
	}
	head, _, off, n, err := readRecordHead(rd)
	if err != nil {
		rd.Close()
		return nil, err
	}
	return &rewriteTail{rd: rd, head: head, body: io.NewSectionReader(rd, off, n)}, nil
}

// closeTails closes the Tails of ops once their batch is committed (or
// refused).
func closeTails(ops []store.Op) {
	for i := range ops {
		if ops[i].Tail != nil {
			ops[i].Tail.Close()
		}
	}
}

func applyProps(m *message.Message, props map[string]any) {
	if len(props) == 0 {
		return
	}
	if m.ApplicationProperties == nil {
		m.ApplicationProperties = make(map[string]any, len(props))
	}
	for k, v := range props {
		m.ApplicationProperties[k] = v
	}
}

func setDeadLetterProps(m *message.Message, reason, desc string) {
	if reason == "" && desc == "" {
		return
	}
	if m.ApplicationProperties == nil {
		m.ApplicationProperties = make(map[string]any, 2)
	}
	if reason != "" {
		m.ApplicationProperties[PropDeadLetterReason] = reason
	}
	if desc != "" {
		m.ApplicationProperties[PropDeadLetterErrorDescription] = desc
	}
}

// applyLocked is phase 3: make the committed transitions visible, or on
// failure (err != nil) return the messages to where they were (a lock
// that was being settled is gone: the message is available again, its
// delivery count unchanged).
func (q *entity) applyLocked(ts []transition, err error, now int64) {
	if q.mu.gone != nil {
		return
	}
	notBefore := int64(0)
	if err != nil {
		notBefore = now + retryDelay
	}
	var unref []int64 // copies that no longer use their topic's shared data
	defer func() {
		if len(unref) > 0 {
			q.topic.dropRefs(unref)
		}
	}()
	for i := range ts {
		t := &ts[i]
		r := q.mu.subs[t.from].idx.get(t.seq)
		if r == nil {
			continue
		}
		r.flags &^= flagBusy
		if err == nil && t.why != 0 && q.b.hist != nil {
			q.recordTransitionLocked(t, now)
		}
		if err == nil && r.flags&flagShared != 0 && (t.remove || t.next.flags&flagShared == 0) {
			unref = append(unref, t.seq)
		}
		if err != nil {
			if t.relock != (uuid.UUID{}) && q.relockLocked(t.from, r, t.relock, t.relockUntil, now, t.relockHolder) {
				continue
			}
			q.armRecLocked(t.from, r, notBefore)
			if r.available() {
				q.makeAvailableLocked(t.from, r)
			}
			continue
		}
		if t.remove {
			q.dropRecLocked(t.from, r)
			continue
		}
		next := t.next
		next.seq = t.seq
		if t.newSize > 0 {
			next.size = t.newSize
		}
		if t.to == t.from {
			q.countLocked(t.from, r.state, -1)
			q.addSizeLocked(int64(next.size) - int64(r.size))
			*r = next
			q.countLocked(t.from, r.state, 1)
			q.armRecLocked(t.from, r, 0)
			if r.available() {
				q.makeAvailableLocked(t.from, r)
			}
			continue
		}
		q.dropRecLocked(t.from, r)
		q.insertRecLocked(t.to, next)
	}
}

// validateProps checks that property changes hold only storable types.
func validateProps(props map[string]any) error {
	if props == nil {
		return nil
	}
	if _, err := (&message.Message{ApplicationProperties: props}).HeaderSize(); err != nil {
		return &Error{Kind: KindInvalidArgument, Msg: "invalid properties to modify", Err: err}
	}
	return nil
}
