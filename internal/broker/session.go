package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/store"
)

// Message sessions.
//
// A queue or subscription created with RequiresSession (immutable) is
// session-enabled: every message of its main queue belongs to a session,
// named by the message's SessionId (AMQP group-id, at most 128
// characters). A queue refuses a send without one (KindInvalidArgument,
// "The SessionId was not set on a message …"); a subscription sends a
// session-less copy to its dead-letter queue with ReasonSessionIDNull and
// DescriptionSessionIDNull. Its sub-queues ($DeadLetterQueue,
// $Transfer/$DeadLetterQueue) are NOT session-enabled: normal receivers
// read them, and a message keeps its SessionId there.
//
// Receiving. Only session receivers read the main queue (OpenReceiver
// refuses with KindNotAllowed and Service Bus's text). AcceptSession locks
// a named session (one that has no message yet included);
// AcceptNextSession waits until an unlocked session with an available
// message exists and locks it, taking sessions in the order they became
// available (oldest first: fair). A session is locked by one receiver at a
// time; accepting a locked one is KindSessionCannotBeLocked. A session
// receiver gets its session's messages only, in sequence order: an
// abandoned or released message, having the lowest number, comes back
// first.
//
// The session lock. It lasts LockDuration from the accept and from every
// RenewSessionLock. The messages a session receiver locks are locked with
// the session: their LockedUntil is the session's, it moves with every
// renewal, and their own locks cannot be renewed (KindNotAllowed). When
// the session lock
//
//   - expires (Tick, or any operation of the entity after the instant):
//     every message it holds is unlocked with its delivery count raised
//     (as a lock expiry: MaxDeliveryCount dead-letters), the receiver's
//     SessionLost channel closes and its TryReceive reports
//     KindSessionLockLost; the session goes to the next receiver;
//   - is released by the receiver's Close: its messages are unlocked
//     WITHOUT raising their delivery counts (Service Bus raises them only
//     when the session lock expires).
//
// Settlement resolves lock tokens entity-wide (any path, any receiver or
// none), but a session message's token is good only while its session's
// lock is held; the tokens of a lock that ended are remembered for
// lostTokenMemory so that settling with them is KindSessionLockLost rather
// than KindLockLost.
//
// Deferral: a deferred session message is received again with
// ReceiveDeferredInSession (or Receiver.ReceiveDeferred), which needs the
// session's lock; plain ReceiveDeferred refuses a session-enabled main
// queue. Scheduled messages join their session when their time comes; TTL
// and dead-lettering work as without sessions.
//
// Session state. Get/SetSessionState need the session's lock. The state is
// opaque bytes up to the entity's MaxMessageSizeInKilobytes (Service Bus:
// "the size of one message", 256 KB by default); empty or nil clears it.
// It is durable: store value "session/<id>" = 8 bytes big-endian Unix ns of
// the last change + the state. ListSessions lists the sessions with
// messages or state, or those whose state changed after a given time.
//
// Memory. A session costs one small struct (id, counters, a heap of its
// available sequence numbers, the lock) while it has messages, state or a
// receiver, and nothing after. Each message record names its session by an
// entity-local number in rec.sess (no extra bytes per message besides the
// heap entry); Meta stores the session id (opt bit 0) so recovery rebuilds
// sessions from Meta alone.

// Timer kind of a session lock (ID = session number).
const timerSession uint8 = 16

const (
	// valueSessionPrefix + session id: a session's state.
	valueSessionPrefix = "session/"
	// lostTokenMemory: how long the message lock tokens of an ended
	// session lock are remembered (see sessionSet.lost), at most
	// maxLostTokens of them per entity.
	lostTokenMemory = int64(10 * time.Minute)
	maxLostTokens   = 1 << 16
)

// session is one session of a session-enabled entity. Guarded by the
// entity's mu (stateMu aside).
type session struct {
	id  string
	num uint32 // rec.sess of its messages; never 0
	// n counts its messages in the main queue, in any state (sends not
	// yet durable included).
	n int
	// ready holds the sequence numbers of its available messages; entries
	// are checked when met (a message may since have been locked or
	// removed), so it may hold stale ones and duplicates.
	ready seqHeap
	// owner is the session receiver holding the lock (nil: unlocked);
	// until is the lock's expiry, Unix ns.
	owner *Receiver
	until int64
	// locked are its messages locked under the current session lock.
	locked map[int64]struct{}
	// state is the session state (nil: none); updated is the Unix ns of
	// its last change (0: never).
	state   []byte
	updated int64
	queued  bool // on sessionSet.readyq
	gone    bool // dropped from its set
	// stateMu serialises state writes across their store commit (it is
	// taken before the entity's mu).
	stateMu sync.Mutex
}

// sessionSet is a session-enabled entity's sessions.
type sessionSet struct {
	byID map[string]*session // guarded by entity.mu
	// names maps session numbers to sessions. Written under entity.mu and
	// names' lock; read under either (persist, in phase 2, holds only
	// names').
	names struct {
		sync.RWMutex
		byNum []*session // index 0 unused
	}
	free []uint32 // numbers of dropped sessions, for reuse
	// readyq lists sessions that became acceptable (unlocked, with an
	// available message) in that order; checked when taken.
	readyq []*session
	// waiters are AcceptNextSession calls waiting for a session.
	waiters []*sessionWaiter
	// lost remembers the lock tokens of ended session locks (token → Unix
	// ns it ended), lostFIFO the same in order, for pruning.
	lost     map[uuid.UUID]int64
	lostFIFO []lostToken
}

type sessionWaiter struct {
	ch    chan struct{}
	woken bool // ch is closed (and the waiter counted out of entity.waiting)
}

type lostToken struct {
	tok uuid.UUID
	at  int64
}

func newSessionSet() *sessionSet {
	ss := &sessionSet{byID: make(map[string]*session), lost: make(map[uuid.UUID]int64)}
	ss.names.byNum = []*session{nil}
	return ss
}

// ---- the session table ----

// getSessionLocked returns session id, creating it.
func (q *entity) getSessionLocked(id string) *session {
	ss := q.ss
	if s := ss.byID[id]; s != nil {
		return s
	}
	s := &session{id: id}
	ss.names.Lock()
	if n := len(ss.free); n > 0 {
		s.num = ss.free[n-1]
		ss.free = ss.free[:n-1]
		ss.names.byNum[s.num] = s
	} else {
		s.num = uint32(len(ss.names.byNum))
		ss.names.byNum = append(ss.names.byNum, s)
	}
	ss.names.Unlock()
	ss.byID[id] = s
	return s
}

// sessionByNumLocked returns the session numbered num, or nil.
func (q *entity) sessionByNumLocked(num uint32) *session {
	if q.ss == nil || int(num) >= len(q.ss.names.byNum) {
		return nil
	}
	return q.ss.names.byNum[num]
}

// maybeDropSessionLocked forgets s once it has no message, no state and
// no receiver.
func (q *entity) maybeDropSessionLocked(s *session) {
	if s.gone || s.n > 0 || s.owner != nil || s.state != nil {
		return
	}
	ss := q.ss
	s.gone = true
	s.ready = nil
	delete(ss.byID, s.id)
	ss.names.Lock()
	ss.names.byNum[s.num] = nil
	ss.names.Unlock()
	ss.free = append(ss.free, s.num)
}

// appendRecMeta is appendMeta with r's session id (a session-enabled
// entity's main queue). It runs in phase 2 (persist), without entity.mu:
// r's session cannot be dropped meanwhile, since r (busy) is one of its
// messages.
func (q *entity) appendRecMeta(b []byte, sub SubQueue, r *rec) []byte {
	if r.sess == 0 || sub != SubQueueMain || q.ss == nil {
		return appendMeta(b, sub, r)
	}
	var mo metaOpt
	q.ss.names.RLock()
	if int(r.sess) < len(q.ss.names.byNum) {
		if s := q.ss.names.byNum[r.sess]; s != nil {
			mo.sessionID, mo.session = s.id, true
		}
	}
	q.ss.names.RUnlock()
	return appendMetaOpt(b, sub, r, mo)
}

// ---- hooks of the receiving entity (queue.go, send.go, fanout.go) ----

// sessionAddMsgLocked counts a new message of session id (being sent) and
// returns the session's number for its record.
func (q *entity) sessionAddMsgLocked(id string) uint32 {
	s := q.getSessionLocked(id)
	s.n++
	return s.num
}

// assignSessionsLocked gives a fan-out's copies for a session-enabled
// subscription their session numbers before they are published.
func (q *entity) assignSessionsLocked(recs []rec, sids []string) {
	for i := range recs {
		recs[i].sess = q.sessionAddMsgLocked(sids[i])
	}
}

// sessionMsgGoneLocked uncounts r, which leaves the main queue.
func (q *entity) sessionMsgGoneLocked(r *rec) {
	s := q.sessionByNumLocked(r.sess)
	if s == nil {
		return
	}
	s.n--
	delete(s.locked, r.seq)
	q.maybeDropSessionLocked(s)
}

// sessionUnlockedLocked notes that r's lock ended.
func (q *entity) sessionUnlockedLocked(r *rec) {
	if s := q.sessionByNumLocked(r.sess); s != nil {
		delete(s.locked, r.seq)
	}
}

// sessionAvailableLocked publishes r (available) to its session: its
// receiver is woken, or, when the session is unlocked, it becomes
// acceptable.
func (q *entity) sessionAvailableLocked(r *rec) {
	s := q.sessionByNumLocked(r.sess)
	if s == nil {
		return
	}
	s.ready.push(r.seq)
	if s.owner != nil {
		if s.owner.waitCh != nil {
			q.unwaitLocked(s.owner)
		}
		return
	}
	q.sessionReadyLocked(s)
}

// sessionReadyLocked queues s (unlocked, with an available message) for
// AcceptNextSession and wakes one waiting call.
func (q *entity) sessionReadyLocked(s *session) {
	ss := q.ss
	if !s.queued {
		s.queued = true
		ss.readyq = append(ss.readyq, s)
	}
	q.wakeSessionWaiterLocked()
}

func (q *entity) wakeSessionWaiterLocked() {
	ss := q.ss
	for len(ss.waiters) > 0 {
		w := ss.waiters[0]
		ss.waiters[0] = nil
		ss.waiters = ss.waiters[1:]
		if !w.woken {
			w.woken = true
			close(w.ch)
			q.pub.waiting.Add(-1)
			return
		}
	}
	ss.waiters = nil
}

// wakeSessionsLocked wakes every session receiver and AcceptNextSession
// call waiting (the entity was deleted, closed or updated).
func (q *entity) wakeSessionsLocked() {
	ss := q.ss
	if ss == nil {
		return
	}
	for _, s := range ss.byID {
		if s.owner != nil && s.owner.waitCh != nil {
			q.unwaitLocked(s.owner)
		}
	}
	for _, w := range ss.waiters {
		if !w.woken {
			w.woken = true
			close(w.ch)
			q.pub.waiting.Add(-1)
		}
	}
	ss.waiters = nil
}

// releaseSessionsLocked drops the sessions of a deleted entity.
func (q *entity) releaseSessionsLocked() {
	ss := q.ss
	if ss == nil {
		return
	}
	q.wakeSessionsLocked()
	for _, s := range ss.byID {
		s.gone = true
	}
	ss.byID = make(map[string]*session)
	ss.names.Lock()
	ss.names.byNum = []*session{nil}
	ss.names.Unlock()
	ss.free, ss.readyq = nil, nil
	ss.lost, ss.lostFIFO = make(map[uuid.UUID]int64), nil
}

// sessionPeekAvailableLocked returns s's first available message in
// sequence order without taking it, dropping stale entries on the way.
func (q *entity) sessionPeekAvailableLocked(s *session) *rec {
	if q.draining.Load() {
		return nil // nothing new is delivered while the unit drains
	}
	idx := &q.mu.subs[SubQueueMain].idx
	for len(s.ready) > 0 {
		if r := idx.get(s.ready.min()); r != nil && r.sess == s.num && r.available() {
			return r
		}
		s.ready.pop()
	}
	return nil
}

// popReadySessionLocked takes the first acceptable session off the ready
// queue, or returns nil.
func (q *entity) popReadySessionLocked() *session {
	ss := q.ss
	for len(ss.readyq) > 0 {
		s := ss.readyq[0]
		ss.readyq[0] = nil
		ss.readyq = ss.readyq[1:]
		s.queued = false
		if !s.gone && s.owner == nil && q.sessionPeekAvailableLocked(s) != nil {
			return s
		}
	}
	ss.readyq = nil
	return nil
}

// sessionHeldLocked reports whether session num is locked at now.
func (q *entity) sessionHeldLocked(num uint32, now int64) bool {
	s := q.sessionByNumLocked(num)
	return s != nil && s.owner != nil && s.until > now
}

// lockLostLocked is the error for a lock token that resolves to no lock:
// the session lock was lost if it belonged to one that ended.
func (q *entity) lockLostLocked(tok uuid.UUID) error {
	if q.ss != nil {
		if _, ok := q.ss.lost[tok]; ok {
			return errSessionLockLost("")
		}
	}
	return errLockLost()
}

func (ss *sessionSet) rememberLost(tok uuid.UUID, now int64) {
	for len(ss.lostFIFO) > 0 && (ss.lostFIFO[0].at+lostTokenMemory <= now || len(ss.lostFIFO) >= maxLostTokens) {
		delete(ss.lost, ss.lostFIFO[0].tok)
		ss.lostFIFO = ss.lostFIFO[1:]
	}
	ss.lost[tok] = now
	ss.lostFIFO = append(ss.lostFIFO, lostToken{tok: tok, at: now})
}

// sessionTimerLocked handles a session lock timer: an expired lock ends,
// raising its messages' delivery counts. The transitions to persist are
// appended to ts.
func (q *entity) sessionTimerLocked(e expiry.Entry, now int64, ts []transition) []transition {
	s := q.sessionByNumLocked(uint32(e.ID))
	if s == nil || s.owner == nil || s.until > now {
		return ts // stale: renewed, released or dropped
	}
	return q.endSessionLocked(s, now, true, ts)
}

// sessionTimerLiveLocked reports whether a session timer entry still
// applies (compaction).
func (q *entity) sessionTimerLiveLocked(e expiry.Entry) bool {
	s := q.sessionByNumLocked(uint32(e.ID))
	return s != nil && s.owner != nil && e.At >= s.until
}

// endSessionLocked ends s's lock: by expiry (expired: the messages it
// holds are unlocked with their delivery counts raised, the receiver
// learns the lock is lost) or by its receiver's Close (released without
// raising). The session is then acceptable again if it has available
// messages. Transitions to persist are appended to ts.
func (q *entity) endSessionLocked(s *session, now int64, expired bool, ts []transition) []transition {
	owner := s.owner
	s.owner, s.until = nil, 0
	if owner != nil {
		if owner.waitCh != nil {
			q.unwaitLocked(owner)
		}
		if expired && owner.lostCh != nil {
			close(owner.lostCh)
			owner.lostCh = nil
		}
	}
	sq := &q.mu.subs[SubQueueMain]
	seqs := make([]int64, 0, len(s.locked))
	for seq := range s.locked {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		r := sq.idx.get(seq)
		if r == nil || !r.locked() || r.busy() || r.sess != s.num {
			delete(s.locked, seq)
			continue
		}
		tok, locked := sq.locked[seq]
		if locked {
			q.ss.rememberLost(tok, now)
		}
		var holder string
		why := history.Released
		if expired {
			why = history.LockExpired
		}
		if q.b.hist != nil && locked {
			holder = q.mu.locks[tok].holder
		}
		if t, ok := q.lockEndLocked(SubQueueMain, r, now, nil, expired); ok {
			t.why, t.evTok, t.relockHolder = why, tok, holder
			ts = append(ts, t)
		} else if q.b.hist != nil {
			q.recordLockEndLocked(why, SubQueueMain, r, tok, holder, now)
		}
	}
	clear(s.locked)
	if !s.queued && q.sessionPeekAvailableLocked(s) != nil {
		q.sessionReadyLocked(s)
	}
	q.maybeDropSessionLocked(s)
	return ts
}

func errSessionLockLost(id string) *Error {
	msg := "The session lock has expired on the MessageSession. Accept a new MessageSession."
	if id != "" {
		msg = fmt.Sprintf("The session lock of session '%s' has expired or was released. Accept the session again.", id)
	}
	return &Error{Kind: KindSessionLockLost, Msg: msg}
}

// checkSessionID validates a session id named by a receiver or an
// operation. "" is a session id of its own, as in Service Bus.
func checkSessionID(id string) error {
	switch {
	case utf8.RuneCountInString(id) > MaxSessionIDLength:
		return errorf(KindInvalidArgument, "the session id is %d characters long; the maximum is %d", utf8.RuneCountInString(id), MaxSessionIDLength)
	}
	return nil
}

// ---- accepting sessions ----

// sessionEntity resolves path for a session operation: the main queue of
// a session-enabled queue or subscription.
func (b *Broker) sessionEntity(path string) (*entity, error) {
	q, p, err := b.lookup(path)
	if err != nil {
		return nil, err
	}
	if p.SubQueue != SubQueueMain {
		return nil, errorf(KindNotAllowed, "'%s' is a sub-queue, which is never session-enabled: read it with a receiver that is not a session receiver.", path)
	}
	if q.ss == nil {
		return nil, errorf(KindNotAllowed, "It is not possible for an entity that does not require sessions to create a sessionful message receiver: '%s' was created without RequiresSession.", q.name)
	}
	return q, nil
}

// AcceptSession opens a session receiver on path (a session-enabled queue
// or subscription) holding the lock of session sessionID, which need not
// have messages yet. A session locked by another receiver is
// KindSessionCannotBeLocked; an entity without RequiresSession (or a
// sub-queue) is KindNotAllowed.
func (b *Broker) AcceptSession(path, sessionID string, mode ReceiveMode) (*Receiver, error) {
	if mode != PeekLock && mode != ReceiveAndDelete {
		return nil, errorf(KindInvalidArgument, "unknown receive mode %d", mode)
	}
	if err := checkSessionID(sessionID); err != nil {
		return nil, err
	}
	q, err := b.sessionEntity(path)
	if err != nil {
		return nil, err
	}
	if q.draining.Load() {
		return nil, errDraining(q.name)
	}
	now := b.now()
	q.lockAt(now)
	defer q.mu.Unlock()
	if err := q.sessionReceiveCheckLocked(); err != nil {
		return nil, err
	}
	s := q.getSessionLocked(sessionID)
	if s.owner != nil {
		return nil, errorf(KindSessionCannotBeLocked, "The requested session '%s' cannot be accepted. It may be locked by another receiver.", sessionID)
	}
	return q.acceptLocked(s, mode, now), nil
}

// AcceptNextSession opens a session receiver on path holding the lock of
// the next session that is unlocked and has an available message (the one
// that became so first), waiting for one until ctx is done; then the
// error wraps ctx.Err() (context.DeadlineExceeded for a timeout).
func (b *Broker) AcceptNextSession(ctx context.Context, path string, mode ReceiveMode) (*Receiver, error) {
	if mode != PeekLock && mode != ReceiveAndDelete {
		return nil, errorf(KindInvalidArgument, "unknown receive mode %d", mode)
	}
	q, err := b.sessionEntity(path)
	if err != nil {
		return nil, err
	}
	for {
		if q.draining.Load() {
			return nil, errDraining(q.name)
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("no session of '%s' could be accepted in time: %w", q.name, err)
		}
		now := b.now()
		q.lockAt(now)
		if err := q.sessionReceiveCheckLocked(); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		if s := q.popReadySessionLocked(); s != nil {
			r := q.acceptLocked(s, mode, now)
			q.mu.Unlock()
			return r, nil
		}
		// Count this waiter before the last look at pub (see entity.waiting).
		w := &sessionWaiter{ch: make(chan struct{})}
		q.pub.waiting.Add(1)
		q.publishPendingLocked()
		if s := q.popReadySessionLocked(); s != nil {
			q.pub.waiting.Add(-1)
			r := q.acceptLocked(s, mode, now)
			q.mu.Unlock()
			return r, nil
		}
		q.ss.waiters = append(q.ss.waiters, w)
		q.mu.Unlock()
		select {
		case <-w.ch:
		case <-ctx.Done():
			q.lockAndPublish()
			if !w.woken {
				w.woken = true
				q.pub.waiting.Add(-1)
				if i := slices.Index(q.ss.waiters, w); i >= 0 {
					q.ss.waiters = slices.Delete(q.ss.waiters, i, i+1)
				}
			} else if q.mu.gone == nil && len(q.ss.readyq) > 0 {
				q.wakeSessionWaiterLocked() // pass the wake-up on
			}
			q.mu.Unlock()
			return nil, fmt.Errorf("no session of '%s' could be accepted in time: %w", q.name, ctx.Err())
		}
	}
}

// sessionReceiveCheckLocked is receiveCheckLocked for a session receiver
// of the main queue, which an entity that auto-forwards (ForwardTo) does
// not allow either.
func (q *entity) sessionReceiveCheckLocked() error {
	if err := q.receiveCheckLocked(SubQueueMain); err != nil {
		return err
	}
	return q.forwardReceiveCheckLocked(SubQueueMain)
}

// acceptLocked locks s for a new session receiver.
func (q *entity) acceptLocked(s *session, mode ReceiveMode, now int64) *Receiver {
	r := &Receiver{q: q, sub: SubQueueMain, mode: mode, path: q.path(SubQueueMain), sess: s, lostCh: make(chan struct{})}
	s.owner = r
	s.until = now + int64(q.mu.props.LockDuration)
	if s.locked == nil {
		s.locked = make(map[int64]struct{})
	}
	q.mu.timers.Push(expiry.Entry{At: s.until, ID: int64(s.num), Kind: timerSession})
	q.mu.receivers++
	q.touchLocked(now)
	q.rearmLocked()
	return r
}

// SessionID is the session a session receiver holds, "" for other
// receivers.
func (r *Receiver) SessionID() string {
	if r.sess == nil {
		return ""
	}
	return r.sess.id
}

// SessionLockedUntil is when the session lock of a session receiver
// expires (zero once it is lost or released, and for other receivers).
func (r *Receiver) SessionLockedUntil() time.Time {
	if r.sess == nil {
		return time.Time{}
	}
	q := r.q
	q.lockAt(q.b.now())
	defer q.mu.Unlock()
	if r.sess.owner != r {
		return time.Time{}
	}
	return time.Unix(0, r.sess.until).UTC()
}

// SessionLost returns a channel that is closed when a session receiver's
// session lock expires (its TryReceive then fails with
// KindSessionLockLost); nil for other receivers. Closing the receiver does
// not close it.
func (r *Receiver) SessionLost() <-chan struct{} {
	if r.sess == nil {
		return nil
	}
	q := r.q
	q.lockAt(q.b.now())
	defer q.mu.Unlock()
	if r.lostCh == nil { // already lost
		return closedChan
	}
	return r.lostCh
}

// ---- a session receiver ----

func (r *Receiver) tryReceiveSession(max int) ([]*Delivery, error) {
	q := r.q
	now := q.b.now()
	q.lockAt(now)
	if r.closed {
		q.mu.Unlock()
		return nil, errorf(KindClosed, "the receiver for '%s' is closed", r.path)
	}
	if err := q.receiveCheckLocked(SubQueueMain); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	s := r.sess
	if s.owner != r {
		q.mu.Unlock()
		return nil, errSessionLockLost(s.id)
	}
	if max <= 0 {
		q.mu.Unlock()
		return nil, nil
	}
	q.touchLocked(now)
	var (
		out []taken
		ts  []transition
	)
	expired := 0
	for len(out) < max && expired < maxExpirePerReceive {
		rc := q.sessionPeekAvailableLocked(s)
		if rc == nil {
			break
		}
		s.ready.pop() // taken, or expired, either way no longer available
		if rc.expired(now) {
			ts = append(ts, q.expireLocked(rc, nil))
			expired++
			continue
		}
		out = append(out, q.takeSessionLocked(s, rc, r.mode, &ts, r.holder))
	}
	return q.deliverAndUnlock(SubQueueMain, r.mode, out, ts, now, r.stream)
}

// takeSessionLocked locks rc under s's lock (PeekLock) or marks it for
// removal (ReceiveAndDelete).
func (q *entity) takeSessionLocked(s *session, rc *rec, mode ReceiveMode, ts *[]transition, holder string) taken {
	if mode != PeekLock {
		t := removeTransitionLocked(SubQueueMain, rc)
		t.why = 0 // recorded as the delivery (ReceivedAndDeleted)
		*ts = append(*ts, t)
		return taken{r: *rc, tok: q.newTokenLocked(), holder: holder}
	}
	tok := q.newTokenLocked()
	rc.until = s.until // no timer of its own: the session's ends it
	q.mu.locks[tok] = lockRef{seq: rc.seq, sub: SubQueueMain, holder: holder}
	q.mu.subs[SubQueueMain].locked[rc.seq] = tok
	s.locked[rc.seq] = struct{}{}
	return taken{r: *rc, tok: tok, holder: holder}
}

func (r *Receiver) readySession() <-chan struct{} {
	q := r.q
	q.lockAt(q.b.now())
	defer q.mu.Unlock()
	s := r.sess
	if r.closed || q.receiveCheckLocked(SubQueueMain) != nil || s.owner != r || q.sessionPeekAvailableLocked(s) != nil {
		return closedChan
	}
	if r.waitCh != nil {
		return r.waitCh
	}
	q.pub.waiting.Add(1)
	q.publishPendingLocked()
	if s.owner != r || q.sessionPeekAvailableLocked(s) != nil {
		q.pub.waiting.Add(-1)
		return closedChan
	}
	r.waitCh = make(chan struct{})
	return r.waitCh
}

// closeSession closes a session receiver: if it still holds its session,
// the session and the messages it locked are released without raising
// their delivery counts.
func (r *Receiver) closeSession() error {
	q := r.q
	now := q.b.now()
	q.lockAt(now)
	if r.closed {
		q.mu.Unlock()
		return nil
	}
	r.closed = true
	q.mu.receivers--
	if r.waitCh != nil {
		q.unwaitLocked(r)
	}
	var ts []transition
	if s := r.sess; q.mu.gone == nil && s.owner == r {
		ts = q.endSessionLocked(s, now, false, nil)
	}
	if len(ts) == 0 {
		if q.mu.gone == nil {
			q.rearmLocked()
		}
		q.mu.Unlock()
		return nil
	}
	if err := q.commitAndUnlock(ts, nil, false, now); err != nil {
		q.b.log.Error("releasing a session failed", "entity", q.name, "session", r.sess.id, "err", err)
	}
	return nil
}

// heldSessionLocked resolves the session an operation names and checks
// that its lock is held: by holder when it is given (then id, if given,
// must be holder's), else by any receiver.
func (q *entity) heldSessionLocked(id string, holder *Receiver, now int64) (*session, error) {
	if holder != nil {
		s := holder.sess
		if s == nil || holder.q != q {
			return nil, errorf(KindInvalidArgument, "the receiver is not a session receiver of '%s'", q.name)
		}
		if id != "" && id != s.id {
			return nil, errorf(KindInvalidArgument, "the receiver holds session '%s', not '%s'", s.id, id)
		}
		if holder.closed || s.owner != holder || s.until <= now {
			return nil, errSessionLockLost(s.id)
		}
		return s, nil
	}
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	s := q.ss.byID[id]
	if s == nil || s.owner == nil || s.until <= now {
		return nil, errSessionLockLost(id)
	}
	return s, nil
}

// ---- session lock renewal ----

// RenewSessionLock extends the lock of session sessionID of path, held by
// any receiver, to LockDuration from now, with the locks of the messages
// it holds, and returns the new expiry. KindSessionLockLost if it is not
// locked.
func (b *Broker) RenewSessionLock(ctx context.Context, path, sessionID string) (time.Time, error) {
	return b.renewSession(ctx, path, sessionID, nil)
}

// RenewSessionLock renews the session lock a session receiver holds (see
// Broker.RenewSessionLock).
func (r *Receiver) RenewSessionLock(ctx context.Context) (time.Time, error) {
	return r.q.b.renewSession(ctx, r.path, "", r)
}

func (b *Broker) renewSession(ctx context.Context, path, id string, holder *Receiver) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	q, err := b.sessionEntity(path)
	if err != nil {
		return time.Time{}, err
	}
	now := b.now()
	q.lockAt(now)
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return time.Time{}, q.mu.gone
	}
	s, err := q.heldSessionLocked(id, holder, now)
	if err != nil {
		return time.Time{}, err
	}
	s.until = now + int64(q.mu.props.LockDuration)
	q.mu.timers.Push(expiry.Entry{At: s.until, ID: int64(s.num), Kind: timerSession})
	idx := &q.mu.subs[SubQueueMain].idx
	for seq := range s.locked {
		if r := idx.get(seq); r != nil && r.locked() {
			r.until = s.until
		}
	}
	q.touchLocked(now)
	q.rearmLocked()
	return time.Unix(0, s.until).UTC(), nil
}

// ---- session state ----

// GetSessionState returns the state of session sessionID of path (nil if
// none), whose lock must be held (by any receiver).
func (b *Broker) GetSessionState(ctx context.Context, path, sessionID string) ([]byte, error) {
	return b.getSessionState(ctx, path, sessionID, nil)
}

// SessionState returns the state of the session a session receiver holds.
func (r *Receiver) SessionState(ctx context.Context) ([]byte, error) {
	return r.q.b.getSessionState(ctx, r.path, "", r)
}

func (b *Broker) getSessionState(ctx context.Context, path, id string, holder *Receiver) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, err := b.sessionEntity(path)
	if err != nil {
		return nil, err
	}
	now := b.now()
	q.lockAt(now)
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return nil, q.mu.gone
	}
	s, err := q.heldSessionLocked(id, holder, now)
	if err != nil {
		return nil, err
	}
	q.touchLocked(now)
	return slices.Clone(s.state), nil
}

// SetSessionState sets the state of session sessionID of path, whose lock
// must be held (by any receiver); empty or nil clears it. The state is
// durable when it returns. A state larger than the entity's
// MaxMessageSizeInKilobytes is KindMessageTooLarge.
func (b *Broker) SetSessionState(ctx context.Context, path, sessionID string, state []byte) error {
	return b.setSessionState(ctx, path, sessionID, nil, state)
}

// SetSessionState sets the state of the session a session receiver holds.
func (r *Receiver) SetSessionState(ctx context.Context, state []byte) error {
	return r.q.b.setSessionState(ctx, r.path, "", r, state)
}

func (b *Broker) setSessionState(ctx context.Context, path, id string, holder *Receiver, state []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q, err := b.sessionEntity(path)
	if err != nil {
		return err
	}
	// Find the session, then take its state mutex (before entity.mu) and
	// check again.
	now := b.now()
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return q.mu.gone
	}
	s, err := q.heldSessionLocked(id, holder, now)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	now = b.now()
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return q.mu.gone
	}
	if s2, err := q.heldSessionLocked(s.id, holder, now); err != nil || s2 != s {
		q.mu.Unlock()
		if err == nil {
			err = errSessionLockLost(s.id)
		}
		return err
	}
	if limit := q.mu.props.MaxMessageSizeInKilobytes * 1024; int64(len(state)) > limit {
		q.mu.Unlock()
		return errorf(KindMessageTooLarge, "the session state is %d bytes, over the %d-byte limit (the entity's MaxMessageSizeInKilobytes)", len(state), limit)
	}
	q.touchLocked(now)
	key := valueSessionPrefix + s.id
	var ops []store.Op
	if len(state) == 0 {
		state = nil
		ops = append(ops, store.Op{Kind: store.OpDeleteValue, EntityID: q.id, Key: key})
	} else {
		v := append(be64(now), state...)
		ops = append(ops, store.Op{Kind: store.OpPutValue, EntityID: q.id, Key: key, Data: v})
		state = slices.Clone(state)
	}
	ops = q.saveAccessedLocked(ops)
	q.inflight.Add(1)
	q.mu.Unlock()
	cerr := b.store.Commit(&store.Batch{Ops: ops}, true)
	q.lockAndPublish()
	if cerr == nil && q.mu.gone == nil {
		cur := s
		if cur.gone { // dropped meanwhile (its lock ended): the state revives it
			cur = q.getSessionLocked(s.id)
		}
		cur.state, cur.updated = state, now
		q.maybeDropSessionLocked(cur)
	}
	q.mu.Unlock()
	q.inflight.Done()
	if cerr != nil {
		return internal(cerr, "storing the state of session %q of %s", s.id, q.name)
	}
	return nil
}

// CheckSessionState checks what SetSessionState would check before it
// writes, for a transaction that sets the state on commit
// (TxnSessionState): that the session (sessionID, or the one holder
// holds) of path is locked, and that state fits the entity's limit.
func (b *Broker) CheckSessionState(path, sessionID string, holder *Receiver, state []byte) error {
	q, err := b.sessionEntity(path)
	if err != nil {
		return err
	}
	now := b.now()
	q.lockAt(now)
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return q.mu.gone
	}
	if _, err := q.heldSessionLocked(sessionID, holder, now); err != nil {
		return err
	}
	if limit := q.mu.props.MaxMessageSizeInKilobytes * 1024; int64(len(state)) > limit {
		return errorf(KindMessageTooLarge, "the session state is %d bytes, over the %d-byte limit (the entity's MaxMessageSizeInKilobytes)", len(state), limit)
	}
	return nil
}

// recoverSessionState restores a session's state from its store value
// during recovery.
func (q *entity) recoverSessionState(v store.Value, drop *[]store.Op) error {
	id := strings.TrimPrefix(v.Key, valueSessionPrefix)
	at, ok := int64(0), len(v.Value) > 8
	if ok {
		at, _ = readBE64(v.Value[:8])
	}
	if q.ss == nil || !ok || id == "" {
		*drop = append(*drop, store.Op{Kind: store.OpDeleteValue, EntityID: v.EntityID, Key: v.Key})
		return nil
	}
	s := q.getSessionLocked(id)
	s.state = slices.Clone(v.Value[8:])
	s.updated = at
	return nil
}

// recoverSessionMsg attaches a recovered main-queue message to its
// session (r is unlocked and about to be inserted).
func (q *entity) recoverSessionMsg(r *rec, mo metaOpt) {
	id := mo.sessionID
	if !mo.session {
		q.b.log.Error("a message of a session-enabled entity has no session id; it cannot be received", "entity", q.name, "seq", r.seq)
		return
	}
	s := q.getSessionLocked(id)
	s.n++
	r.sess = s.num
	if r.state == StateActive {
		s.ready.push(r.seq)
	}
}

// finishSessionsLocked queues the recovered sessions that have available
// messages for AcceptNextSession, oldest message first.
func (q *entity) finishSessionsLocked() {
	if q.ss == nil {
		return
	}
	type first struct {
		s   *session
		seq int64
	}
	var fs []first
	for _, s := range q.ss.byID {
		if r := q.sessionPeekAvailableLocked(s); r != nil {
			fs = append(fs, first{s, r.seq})
		}
	}
	slices.SortFunc(fs, func(a, b first) int { return cmp.Compare(a.seq, b.seq) })
	for _, f := range fs {
		f.s.queued = true
		q.ss.readyq = append(q.ss.readyq, f.s)
	}
}

// ---- listing sessions ----

// ListSessions lists the ids of path's sessions, sorted, skipping skip and
// returning at most top (top <= 0: all): with a zero updatedAfter the
// sessions that have messages (in any state) or state, else those whose
// state changed after updatedAfter. An entity without sessions has none.
func (b *Broker) ListSessions(ctx context.Context, path string, updatedAfter time.Time, skip, top int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return nil, err
	}
	now := b.now()
	q.lockAt(now)
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return nil, q.mu.gone
	}
	if q.ss == nil || p.SubQueue != SubQueueMain {
		return nil, nil
	}
	q.touchLocked(now)
	after := updatedAfter.UnixNano()
	var ids []string
	for id, s := range q.ss.byID {
		if updatedAfter.IsZero() && (s.n > 0 || s.state != nil) || !updatedAfter.IsZero() && s.updated > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if skip > 0 {
		ids = ids[min(skip, len(ids)):]
	}
	if top > 0 && len(ids) > top {
		ids = ids[:top]
	}
	return ids, nil
}

// SessionHolder says who holds session sessionID of path: the holder
// its receiver named (Receiver.SetHolder, "" if none) and when the lock
// expires; held is false if no receiver holds it. For operators: it does
// not count as use of the entity.
func (b *Broker) SessionHolder(path, sessionID string) (holder string, until time.Time, held bool, err error) {
	q, err := b.sessionEntity(path)
	if err != nil {
		return "", time.Time{}, false, err
	}
	now := b.now()
	q.lockAt(now)
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return "", time.Time{}, false, q.mu.gone
	}
	s := q.ss.byID[sessionID]
	if s == nil || !q.sessionHeldLocked(s.num, now) {
		return "", time.Time{}, false, nil
	}
	return s.owner.holder, time.Unix(0, s.until).UTC(), true, nil
}

// ---- peek and deferral within a session ----

// PeekSession is Peek restricted to the messages of session sessionID of
// path (no lock needed): up to max of them from fromSeq on, in order,
// whatever their state.
func (b *Broker) PeekSession(ctx context.Context, path, sessionID string, fromSeq int64, max int) ([]*Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkSessionID(sessionID); err != nil {
		return nil, err
	}
	q, err := b.sessionEntity(path)
	if err != nil {
		return nil, err
	}
	if err := q.lockForPeek(b.now()); err != nil {
		return nil, err
	}
	var snap []rec
	stream, nstreamed := peekStream(ctx), 0
	if s := q.ss.byID[sessionID]; s != nil && s.n > 0 && max > 0 {
		seen := 0
		q.mu.subs[SubQueueMain].idx.ascend(fromSeq, func(r *rec) bool {
			if r.sess != s.num || r.flags&flagPending != 0 {
				return true
			}
			snap = append(snap, *r)
			snap[len(snap)-1].until = 0 // a peek shows no lock
			seen++
			return peekMore(snap, max, stream, &nstreamed) && seen < s.n
		})
	}
	q.mu.Unlock()
	return q.peekDeliveries(snap, path, stream)
}

// ReceiveDeferredInSession is ReceiveDeferred for session sessionID of
// path, whose lock must be held (by any receiver): every number must name
// a deferred, unlocked message of that session; locked ones are locked
// with the session.
func (b *Broker) ReceiveDeferredInSession(ctx context.Context, path, sessionID string, seqs []int64, mode ReceiveMode) ([]*Delivery, error) {
	return b.receiveDeferredSession(ctx, path, sessionID, nil, seqs, mode)
}

// ReceiveDeferred receives deferred messages of the session a session
// receiver holds (see Broker.ReceiveDeferredInSession).
func (r *Receiver) ReceiveDeferred(ctx context.Context, seqs []int64, mode ReceiveMode) ([]*Delivery, error) {
	if r.sess == nil {
		return r.q.b.ReceiveDeferred(ctx, r.path, seqs, mode)
	}
	return r.q.b.receiveDeferredSession(ctx, r.path, "", r, seqs, mode)
}

func (b *Broker) receiveDeferredSession(ctx context.Context, path, id string, holder *Receiver, seqs []int64, mode ReceiveMode) ([]*Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if mode != PeekLock && mode != ReceiveAndDelete {
		return nil, errorf(KindInvalidArgument, "unknown receive mode %d", mode)
	}
	q, err := b.sessionEntity(path)
	if err != nil {
		return nil, err
	}
	now := b.now()
	q.lockAt(now)
	if err := q.receiveCheckLocked(SubQueueMain); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	s, err := q.heldSessionLocked(id, holder, now)
	if err != nil {
		q.mu.Unlock()
		return nil, err
	}
	sq := &q.mu.subs[SubQueueMain]
	seen := make(map[int64]bool, len(seqs))
	for _, seq := range seqs {
		r := sq.idx.get(seq)
		if r == nil || r.sess != s.num || r.state != StateDeferred || r.busy() || r.locked() {
			q.mu.Unlock()
			return nil, errorf(KindMessageNotFound, "Failed to lock one or more specified messages. Either the message is already locked or it does not exist in session '%s' (sequence number %d, entity '%s').", s.id, seq, q.name)
		}
		seen[seq] = false
	}
	q.touchLocked(now)
	var (
		out []taken
		ts  []transition
	)
	for _, seq := range seqs {
		if seen[seq] {
			continue
		}
		seen[seq] = true
		r := sq.idx.get(seq)
		if r.expired(now) {
			ts = append(ts, q.expireLocked(r, nil))
			continue
		}
		who := lockHolderOf(ctx)
		if holder != nil {
			who = holder.holder
		}
		out = append(out, q.takeSessionLocked(s, r, mode, &ts, who))
	}
	return q.deliverAndUnlock(SubQueueMain, mode, out, ts, now, peekStream(ctx))
}
