package broker

import (
	"context"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Send enqueues msgs on the queue or topic at path, atomically: on
// success every message is durable (the store commit is synced) and
// visible; on error none is. A message whose x-opt-scheduled-enqueue-time
// annotation (time.Time) is in the future is scheduled instead. With
// duplicate detection, a message whose MessageId was seen within the
// window is acknowledged and dropped.
//
// On a topic, each message is routed through every subscription's rules
// when it is enqueued (for a scheduled message: when its time comes) and
// its copies are committed with it, in the same batch: the copies are
// durable and visible when Send returns. A message no subscription takes
// is accepted and dropped. Sending to a subscription path is
// KindNotAllowed.
func (b *Broker) Send(ctx context.Context, path string, msgs []*message.Message) error {
	_, err := b.enqueue(ctx, path, msgs, time.Time{}, false, nil, "")
	return err
}

// Schedule enqueues msgs to appear at `at` and returns their sequence
// numbers (for CancelScheduled). A zero `at` takes each message's
// x-opt-scheduled-enqueue-time annotation. A time not in the future
// enqueues at once. The messages' TTL counts from the scheduled time. A
// duplicate (duplicate detection) gets a sequence number that names no
// message, as in Service Bus. On a topic the message is fanned out to the
// subscriptions (that exist and match) when its time comes; until then it
// counts in the topic's Scheduled count.
func (b *Broker) Schedule(ctx context.Context, path string, msgs []*message.Message, at time.Time) ([]int64, error) {
	return b.enqueue(ctx, path, msgs, at, true, nil, "")
}

// CancelScheduled removes scheduled messages of a queue or topic that have
// not been enqueued (on a topic: fanned out) yet, by the sequence numbers
// Schedule returned. Sequence numbers of messages that are not (or no
// longer) scheduled are ignored.
func (b *Broker) CancelScheduled(ctx context.Context, path string, seqs []int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q, t, _, err := b.lookupSend(path)
	if err != nil {
		if KindOf(err) == KindNotAllowed {
			return errorf(KindNotAllowed, "'%s' is not a queue or topic; scheduled messages live in the queue or topic itself", path)
		}
		return err
	}
	now := b.now()
	if t != nil {
		return t.cancelScheduled(seqs, now)
	}
	q.lockAt(now)
	if err := q.sendCheckLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	q.touchLocked(now)
	var ts []transition
	for _, seq := range seqs {
		r := q.mu.subs[SubQueueMain].idx.get(seq)
		if r == nil || r.busy() || r.state != StateScheduled {
			continue
		}
		t := removeTransitionLocked(SubQueueMain, r)
		t.why = history.Cancelled
		ts = append(ts, t)
	}
	if len(ts) == 0 {
		q.mu.Unlock()
		return nil
	}
	return q.commitAndUnlock(ts, q.saveAccessedLocked(nil), true, now)
}

// pendingMsg is one message of a send between encoding and publishing.
type pendingMsg struct {
	m    *message.Message // as sent (read-only)
	data []byte
	// more, for a message whose body is large (bodyApartMin) and in
	// memory, is that body, m.Body, where it lies: the rest of its
	// encoding after data, which then stops before the body's bytes
	// (store.Op.More). Nil otherwise.
	more []byte
	// tail, for a message whose body is not in memory (m.BodyTail: a
	// large message spooled to disk as it arrived), is the rest of its
	// encoding after data; the store reads it during the commit
	// (store.Op.Tail). Nil otherwise.
	tail     message.BodyReader
	sched    int64 // scheduled enqueue time (Unix ns), 0 = now
	ttl      int64 // requested TTL, 0 = none
	hasSess  bool
	dedupKey string
	hasKey   bool
	drop     bool // duplicate
	seq      int64
	reserved bool      // seq was reserved beforehand (ReserveSeqs), not assigned by the plan
	hops     uint8     // times auto-forwarded (forward.go); 0 for a send
	buf      *sendData // data's pooled buffer; nil for an auto-forwarded message
	by       string    // the sender (Sender.SetHolder), kept only for the message history
}

// size is the length of the message's encoding.
func (pm *pendingMsg) size() int64 {
	return int64(len(pm.data)) + int64(len(pm.more)) + tailSize(pm.tail)
}

// bodyApartMin is the smallest body in memory a send does not copy into
// its encoding: the store takes it where it lies, behind the encoded
// head (store.Op.More), which spares a 64 KB message's copy (3–4 % of
// the broker's CPU in a send profile). Below it the copy costs less than
// handling two pieces. It is the file store's smallest record hole.
const bodyApartMin = 16 << 10

func tailSize(t message.BodyReader) int64 {
	if t == nil {
		return 0
	}
	return t.Size()
}

// tailReader is t as a store.Op.Tail (nil for none). The store does not
// close it: its owner (the AMQP endpoint's spool) does, after the send.
func tailReader(t message.BodyReader) store.DataReader {
	if t == nil {
		return nil
	}
	return bodyTail{t}
}

type bodyTail struct{ message.BodyReader }

func (bodyTail) Close() error { return nil }

// DataSection implements store.DataSection for a body that is a section
// of a message's data in the store (an auto-forwarded large message's,
// see forwardedTail); r is nil for any other body (a spool).
func (t bodyTail) DataSection() (r store.DataReader, off, n int64) {
	if ds, ok := t.BodyReader.(store.DataSection); ok {
		return ds.DataSection() // a rewriteTail
	}
	sr, ok := t.BodyReader.(*io.SectionReader)
	if !ok {
		return nil, 0, 0
	}
	outer, off, n := sr.Outer()
	if rd, ok := outer.(store.DataReader); ok {
		return rd, off, n
	}
	return nil, 0, 0
}

// sendData is a pooled buffer for a message's encoding. A send takes one
// per message and gives it back once the store commit has returned: the
// store does not retain a batch's slices after Commit (store.Batch), and
// nothing else in a send keeps the encoding (the index keeps only sizes;
// Data is read back from the store; fan-out routes on the decoded
// message and gives a rule action's copy an encoding of its own).
type sendData struct{ b []byte }

var sendDataPool = sync.Pool{New: func() any { return new(sendData) }}

// maxPooledSendData bounds the buffers kept in sendDataPool, so that one
// large message does not pin a large buffer: a Standard-sized message at
// its limit (256 KB of body, up to 64 KB of header) still reuses one,
// where a 64 KB message allocated (and cleared) a buffer for every send.
const maxPooledSendData = 320 << 10

func releaseSendData(pend []pendingMsg) {
	for i := range pend {
		if sd := pend[i].buf; sd != nil {
			pend[i].buf, pend[i].data, pend[i].more = nil, nil, nil
			if cap(sd.b) <= maxPooledSendData {
				sendDataPool.Put(sd)
			}
		}
	}
}

// enqueue is Send and Schedule; fol, when not nil, is the committer's
// pacing (Sender).
func (b *Broker) enqueue(ctx context.Context, path string, msgs []*message.Message, at time.Time, schedule bool, fol *store.Follower, by string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, t, _, err := b.lookupSend(path)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	if err := b.checkGrowth(); err != nil {
		return nil, err
	}
	nowT := b.clock.Now()
	pend, total, err := encodeSends(msgs, at, schedule, nowT)
	if err != nil {
		return nil, err
	}
	if err := b.tier.checkBatch(len(msgs), total); err != nil {
		releaseSendData(pend)
		return nil, err
	}
	if b.hist != nil && by != "" {
		for i := range pend {
			pend[i].by = by // for the message history
		}
	}
	var seqs []int64
	var name string
	if t != nil {
		seqs, err = t.enqueue(ctx, pend, total, nowT.UnixNano(), fol, nil)
		name = t.name
	} else {
		seqs, err = q.enqueue(ctx, pend, total, nowT.UnixNano(), fol, nil)
		name = q.name
	}
	releaseSendData(pend)
	if err == nil {
		b.obs.Sent(name, len(msgs), b.clock.Now().Sub(nowT))
	}
	return seqs, err
}

// lookupSend resolves the target of a send: a queue or a topic.
func (b *Broker) lookupSend(path string) (*entity, *topic, Path, error) {
	p, err := ParsePath(path)
	if err != nil {
		return nil, nil, p, err
	}
	if p.Subscription != "" {
		return nil, nil, p, errorf(KindNotAllowed, "'%s' is a subscription; messages reach it through its topic '%s'", path, p.Entity)
	}
	b.mu.RLock()
	closed := b.mu.closed
	q := b.mu.queues[entityKey(p.Entity)]
	t := b.mu.topics[entityKey(p.Entity)]
	moved := b.mu.moved[entityKey(p.Entity)]
	b.mu.RUnlock()
	switch {
	case closed:
		return nil, nil, p, errClosed()
	case q == nil && t == nil && moved:
		return nil, nil, p, goneErr(p.Entity, true) // unloaded: served by another node
	case q == nil && t == nil:
		return nil, nil, p, errEntityNotFound(path)
	case p.SubQueue != SubQueueMain && t != nil:
		return nil, nil, p, errEntityNotFound(path) // a topic has no sub-queues
	case p.SubQueue != SubQueueMain:
		return nil, nil, p, errorf(KindNotAllowed, "'%s' is a sub-queue; messages can only reach it by dead-lettering", path)
	case q != nil && q.draining.Load(), t != nil && t.draining.Load():
		return nil, nil, p, errDraining(p.Entity)
	}
	return q, t, p, nil
}

// encodeSends encodes a send's messages (outside any lock) and checks
// what can be checked without the entity. The encodings go into pooled
// buffers, which the caller gives back with releaseSendData once nothing
// refers to them any more. A body of bodyApartMin bytes or more is not
// copied: the encoding stops before it and the pending message refers
// to it (pendingMsg.more), so the messages' bodies must stay unchanged
// until the store commit has returned. The MessageIds'
// duplicate-detection keys are left for setDedupKeys.
func encodeSends(msgs []*message.Message, at time.Time, schedule bool, nowT time.Time) ([]pendingMsg, int64, error) {
	pend := make([]pendingMsg, len(msgs))
	var total int64
	for i, m := range msgs {
		pm := &pend[i]
		if m == nil {
			return nil, 0, errorf(KindInvalidArgument, "message %d is nil", i)
		}
		if err := checkIDs(m); err != nil {
			return nil, 0, err
		}
		sd := sendDataPool.Get().(*sendData)
		apart := len(m.Body) >= bodyApartMin && m.BodyTail == nil
		encode := message.AppendHead
		if apart {
			encode = message.AppendBeforeBody
		}
		data, hs, err := encode(sd.b[:0], m)
		if err != nil {
			return nil, 0, &Error{Kind: KindInvalidArgument, Msg: "cannot store message", Err: err}
		}
		sd.b, pm.buf = data, sd
		if hs > MaxHeaderSize {
			return nil, 0, errorf(KindMessageTooLarge, "the message header and properties take %d bytes, over the %d-byte (64 KB) limit", hs, MaxHeaderSize)
		}
		pm.m = m
		pm.data, pm.tail = data, m.BodyTail
		if apart {
			pm.more = m.Body
		}
		total += pm.size()
		pm.ttl = int64(m.TTL)
		pm.hasSess = m.HasSessionID()
		st := at
		if st.IsZero() {
			st, _ = m.Annotations[ScheduledEnqueueTimeAnnotation].(time.Time)
		}
		if schedule && st.IsZero() {
			return nil, 0, errorf(KindInvalidArgument, "message %d has no scheduled enqueue time", i)
		}
		if st.After(nowT) {
			pm.sched = st.UnixNano()
		}
	}
	return pend, total, nil
}

// setDedupKeys sets the duplicate-detection keys of a send's messages
// (only entities with duplicate detection need them).
func setDedupKeys(pend []pendingMsg) {
	for i := range pend {
		pend[i].dedupKey, pend[i].hasKey = dedupKey(pend[i].m.MessageID)
	}
}

// enqueue is a queue's send (the shape is sendplan.go's): phase 1 under
// mu, the durable commit, the (mostly lock-free) publication. fol is the
// committer's pacing (nil for none); fw, when not nil, is an
// auto-forward's source side: its ops join the batch (forward.go).
func (q *entity) enqueue(ctx context.Context, pend []pendingMsg, total, now int64, fol *store.Follower, fw *forwardBatch) ([]int64, error) {
	sc := sendScratchPool.Get().(*sendScratch)
	defer sc.release()
	// Phase 1: checks, duplicate detection, sequence numbers, placeholders.
	q.lockAndPublish()
	s, err := q.planSendLocked(pend, total, now, fw.forwarded(), sc.ops[:0])
	if err != nil {
		q.mu.Unlock()
		return nil, err
	}
	q.inflight.Add(1)
	q.mu.Unlock()

	// Phase 2: durable. Concurrent senders share the store's group commit.
	cerr := q.commitSend(&s, pend, fol, fw, sc)

	// Phase 3: publish.
	gone := q.publishSend(&s, pend, cerr)
	if cerr == nil && q.b.hist != nil {
		q.b.recordSends(q.name, pend, now, fw, false)
	}
	q.inflight.Done()
	return s.answer(ctx, q.name, s.seqs, cerr, gone)
}

// queueSend is a queue's send between its phases.
type queueSend struct {
	sendPlan
	seqs  []int64
	recs  []rec // the placeholders, in pend order (duplicates left out)
	added int64 // their bytes
	one   *sendOne
}

// planSendLocked is phase 1 of a queue's send: the shared plan, then a
// placeholder per message in the main queue's index (invisible until
// published), its bytes counted as pending.
func (q *entity) planSendLocked(pend []pendingMsg, total, now int64, forwarded bool, ops []store.Op) (queueSend, error) {
	if err := q.sendCheckLocked(); err != nil {
		return queueSend{}, err
	}
	var s queueSend
	// A one-message send (the common case) takes its records, sequence
	// number and publication batch from one allocation.
	if len(pend) == 1 {
		s.one = new(sendOne)
		s.recs, s.seqs = s.one.recs[:0], s.one.seqs[:]
	} else {
		s.recs, s.seqs = make([]rec, 0, len(pend)), make([]int64, len(pend))
	}
	l := queueSendLimits(q.name, &q.mu.props)
	st := sendState{id: q.id, nextSeq: &q.mu.nextSeq, dedup: &q.mu.dedup, stored: q.mu.size, pending: q.mu.pending}
	var err error
	if s.sendPlan, err = l.planLocked(st, pend, total, now, forwarded, s.seqs, ops); err != nil {
		return queueSend{}, err
	}
	q.touchLocked(now)
	main := &q.mu.subs[SubQueueMain].idx
	for i := range pend {
		pm := &pend[i]
		if pm.drop {
			continue
		}
		r := rec{seq: pm.seq, enq: now, size: int32(pm.size()), state: StateActive, hops: pm.hops}
		r.ttl = effectiveTTL(pm.ttl, s.defTTL)
		if pm.sched != 0 {
			r.enq, r.state, r.flags = pm.sched, StateScheduled, flagWasScheduled
		}
		if q.ss != nil {
			r.sess = q.sessionAddMsgLocked(pm.m.SessionID)
		}
		s.recs = append(s.recs, r)
		s.added += int64(r.size)
		// Hold the place: sequence numbers are assigned in order here, so
		// this appends; publishing later only clears the flag.
		r.flags |= flagPending
		main.insert(r)
	}
	s.ops = q.saveAccessedLocked(s.ops)
	q.mu.pending += s.added
	return s, nil
}

// commitSend is phase 2 of a queue's send: one synced batch with the
// messages, the plan's ops and an auto-forward's source side.
func (q *entity) commitSend(s *queueSend, pend []pendingMsg, fol *store.Follower, fw *forwardBatch, sc *sendScratch) error {
	ops, meta := q.appendSendOps(s, pend, s.ops, sc.meta[:0])
	if fw != nil {
		ops = append(ops, fw.ops...)
	}
	sc.ops, sc.meta = ops, meta
	sc.batch.Ops, sc.batch.Follower = ops, fol
	cerr := q.b.store.Commit(&sc.batch, true)
	if fw != nil {
		fw.committed = cerr == nil
	}
	return cerr
}

// appendSendOps appends to ops (which hold the plan's, s.ops, already)
// one store op per message of a planned queue send, their Meta to meta; a
// transaction's commit (txn.go) collects several destinations' ops in one
// batch with it.
func (q *entity) appendSendOps(s *queueSend, pend []pendingMsg, ops []store.Op, meta []byte) ([]store.Op, []byte) {
	for i, j := 0, 0; i < len(pend); i++ {
		if pend[i].drop {
			continue
		}
		var mo metaOpt
		if q.ss != nil {
			mo.sessionID, mo.session = pend[i].m.SessionID, true
		}
		start := len(meta)
		meta = appendMetaOpt(meta, SubQueueMain, &s.recs[j], mo)
		ops = append(ops, store.Op{Kind: store.OpAppend, EntityID: q.id, Seq: uint64(pend[i].seq),
			Meta: meta[start:len(meta):len(meta)], Data: pend[i].data, More: pend[i].more, Tail: tailReader(pend[i].tail)})
		j++
	}
	return ops, meta
}

// publishSend is phase 3 of a queue's send. A committed send that arms no
// timer goes on the lock-free publication, taking mu only if a receiver
// waits to be woken (or the forwarder is to be armed); the next holder of
// mu publishes it. Otherwise it is published, or on failure its
// placeholders and history entries dropped, under mu. It returns the
// entity's gone error if it was deleted or closed meanwhile.
func (q *entity) publishSend(s *queueSend, pend []pendingMsg, cerr error) (gone error) {
	if cerr == nil && !needsTimer(s.recs) {
		var pb *pubBatch
		if s.one != nil {
			pb = &s.one.pb
		} else {
			pb = new(pubBatch)
		}
		pb.v.recs, pb.v.added = s.recs, s.added
		if _, waiter := q.pub.push(pb); waiter || q.forwarding.Load() {
			q.lockAndPublish()
			q.mu.Unlock()
		}
		if q.deleted.Load() {
			return goneErr(q.name, q.moved.Load())
		}
		return nil
	}
	q.lockAndPublish()
	defer q.mu.Unlock()
	q.mu.pending -= s.added
	if q.mu.gone == nil {
		q.publishLocked(SubQueueMain, s.recs, cerr == nil, false)
	}
	if cerr != nil {
		s.forgetLocked(&q.mu.dedup, pend)
	}
	return q.mu.gone
}

// sendScratch is a send's pooled scratch space: the store batch, its
// operations and Meta bytes and, for a topic, the planned copies — none of
// which outlives the commit (what does: sequence numbers, the records
// published, is allocated per send).
type sendScratch struct {
	ops    []store.Op
	meta   []byte
	copies []plannedCopy // topic sends only
	batch  store.Batch
}

var sendScratchPool = sync.Pool{New: func() any {
	return &sendScratch{ops: make([]store.Op, 0, 4), meta: make([]byte, 0, 64)}
}}

// release clears sc (dropping its references to the send's data and
// messages) and returns it to the pool unless it grew large.
func (sc *sendScratch) release() {
	clear(sc.ops)
	clear(sc.copies)
	sc.batch.Ops, sc.batch.Follower = nil, nil
	if cap(sc.ops) > 8192 || cap(sc.copies) > 8192 || cap(sc.meta) > 256<<10 {
		return
	}
	sc.ops, sc.meta, sc.copies = sc.ops[:0], sc.meta[:0], sc.copies[:0]
	sendScratchPool.Put(sc)
}

// sendOne is what a one-message queue send keeps after it returns (its
// record on the publication stack, its sequence number), in one allocation.
type sendOne struct {
	pb   pubBatch
	recs [1]rec
	seqs [1]int64
}

// publishLocked makes sent records of sub visible (ok) or drops their
// placeholders (the commit failed). With insert (a fan-out's copies for a
// subscription) the records are added rather than found as placeholders;
// their size is already counted in the topic's.
func (q *entity) publishLocked(sub SubQueue, recs []rec, ok, insert bool) {
	idx := &q.mu.subs[sub].idx
	for i := range recs {
		if !ok {
			if recs[i].sess != 0 && sub == SubQueueMain {
				q.sessionMsgGoneLocked(&recs[i])
			}
			idx.remove(recs[i].seq)
			continue
		}
		var r *rec
		if insert {
			r = idx.insert(recs[i])
		} else if r = idx.get(recs[i].seq); r == nil {
			continue
		}
		r.flags &^= flagPending
		q.countLocked(sub, r.state, 1)
		q.mu.size += int64(r.size)
		q.armRecLocked(sub, r, 0)
		if r.available() {
			q.makeAvailableLocked(sub, r)
		}
	}
	if ok {
		q.rearmLocked()
	}
}

// needsTimer reports whether publishing recs arms a timer (TTL or
// scheduled), which must reach the Run shell at once.
func needsTimer(recs []rec) bool {
	for i := range recs {
		if recs[i].ttl != 0 || recs[i].state != StateActive {
			return true
		}
	}
	return false
}

// effectiveTTL applies the entity's default TTL (0 = infinite) as default
// and ceiling to a message's TTL (0 = none given).
func effectiveTTL(ttl, def int64) int64 {
	switch {
	case ttl <= 0:
		return def
	case def != 0 && ttl > def:
		return def
	}
	return ttl
}

func checkIDs(m *message.Message) error {
	var n int
	switch id := m.MessageID.(type) {
	case string:
		n = len(id)
	case message.Symbol:
		n = len(id)
	case []byte:
		n = len(id)
	}
	if n > MaxMessageIDLength {
		return errorf(KindInvalidArgument, "the MessageId is %d characters long; the maximum is %d", n, MaxMessageIDLength)
	}
	if n := utf8.RuneCountInString(m.SessionID); n > MaxSessionIDLength {
		return errorf(KindInvalidArgument, "the SessionId is %d characters long; the maximum is %d", n, MaxSessionIDLength)
	}
	return nil
}
