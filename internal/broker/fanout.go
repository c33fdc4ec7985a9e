package broker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// fanOut collects the copies one send (or one batch of scheduled
// materialisations) delivers to a topic's subscriptions, so that they are
// committed in ONE store batch with the topic's own ops.
type fanOut struct {
	t    *topic
	subs *subscriptionSet
	// planned copies, in routing order; seq 0 = needs an extra sequence
	// number (a second copy of one message in one subscription).
	copies []plannedCopy
	extra  int
	ev     evaluation
	env    filter.Env
	// metas holds the copies' Meta (the store keeps none of it); a
	// topic send lends it from its scratch.
	metas []byte
}

type plannedCopy struct {
	sub  int // index into subs.list
	dlq  bool
	r    rec
	data []byte             // own data; nil: the topic's shared data (r has flagShared)
	tail message.BodyReader // the rest of own data, not in memory (see pendingMsg.tail)
	sid  string             // session id (session-enabled subscriptions only)
	// For the message history: the topic's sequence number of the
	// message, its id (histories on only) and a dead-lettered copy's
	// reason and description.
	src          int64
	mid          any
	reason, desc string
}

// route evaluates every subscription's rules against one message (m,
// encoded as data, topic sequence number seq, enqueued at enq) and plans
// its copies. It returns how many copies share the topic's data.
func (f *fanOut) route(m *message.Message, size int64, seq, enq int64, scheduled bool, topicTTL int64) (refs int) {
	enqT := time.Unix(0, enq).UTC()
	sys := filter.SystemProps{SequenceNumber: seq, EnqueuedSequenceNumber: seq, EnqueuedTime: enqT,
		Size: size, State: filter.StateActive}
	base := rec{enq: enq, state: StateActive}
	if scheduled {
		sys.ScheduledEnqueueTime = enqT
		base.flags |= flagWasScheduled
	}
	f.env.Msg = m
	first := len(f.copies)
	for i, q := range f.subs.list {
		rt := q.route.Load()
		if !rt.accept || len(rt.rules) == 0 {
			continue
		}
		ttl := effectiveTTL(effectiveTTL(int64(m.TTL), topicTTL), rt.defTTL)
		f.env.Sys = sys
		f.env.Sys.TimeToLive = time.Duration(ttl)
		if e := (&rec{enq: enq, ttl: ttl}).expiresAt(); e != 0 {
			f.env.Sys.ExpiresAt = time.Unix(0, e).UTC()
		}
		ev := &f.ev
		rt.evaluate(&f.env, ev)
		if ev.failed != nil {
			f.planDeadLetter(i, base, seq, ttl, m, ev.failed.Type, ev.failed.Message)
			continue
		}
		n := 0
		if ev.plain && rt.sessions && !m.HasSessionID() {
			// A session-enabled subscription takes no session-less message.
			f.planDeadLetter(i, base, seq, ttl, m, ReasonSessionIDNull, DescriptionSessionIDNull)
			n++
		} else if ev.plain {
			r := base
			r.seq, r.ttl, r.size = seq, ttl, int32(size)
			r.flags |= flagShared
			c := plannedCopy{sub: i, r: r}
			if rt.sessions {
				c.sid = m.SessionID
			}
			f.copies = append(f.copies, c)
			refs++
			n++
		}
		for _, a := range ev.actions {
			if rt.sessions && !a.msg.HasSessionID() {
				f.planDeadLetter(i, base, seqOrExtra(seq, n), ttl, a.msg, ReasonSessionIDNull, DescriptionSessionIDNull)
				f.countExtra(n)
				n++
				continue
			}
			own, hs, err := message.AppendHead(nil, a.msg)
			if err != nil || hs > MaxHeaderSize {
				// The action made the message unstorable: dead-letter the
				// original instead of losing it.
				f.planDeadLetter(i, base, seqOrExtra(seq, n), ttl, m, ReasonHeaderSizeExceeded, DescriptionHeaderSizeExceeded)
				f.countExtra(n)
				n++
				continue
			}
			r := base
			r.seq = seqOrExtra(seq, n)
			r.ttl = effectiveTTL(effectiveTTL(int64(a.msg.TTL), topicTTL), rt.defTTL)
			r.size = int32(int64(len(own)) + tailSize(a.msg.BodyTail))
			c := plannedCopy{sub: i, r: r, data: own, tail: a.msg.BodyTail}
			if rt.sessions {
				c.sid = a.msg.SessionID
			}
			f.copies = append(f.copies, c)
			f.countExtra(n)
			n++
		}
	}
	f.env.Msg = nil
	for j := first; j < len(f.copies); j++ {
		f.copies[j].src = seq
		if f.t.b.hist != nil {
			f.copies[j].mid = m.MessageID
		}
	}
	return refs
}

func seqOrExtra(seq int64, n int) int64 {
	if n == 0 {
		return seq
	}
	return 0
}

func (f *fanOut) countExtra(n int) {
	if n > 0 {
		f.extra++
	}
}

// planDeadLetter plans the copy of m that goes to subscription i's
// dead-letter queue with reason and description (a rule evaluation
// failure): data of its own, the reason and description set as the
// dead-letter application properties.
func (f *fanOut) planDeadLetter(i int, base rec, seq, ttl int64, m *message.Message, reason, desc string) {
	c := *m
	c.ApplicationProperties = maps.Clone(m.ApplicationProperties)
	setDeadLetterProps(&c, reason, desc)
	own, _, err := message.AppendHead(nil, &c)
	if err != nil {
		f.t.b.log.Error("cannot dead-letter a copy", "topic", f.t.name, "seq", seq, "err", err)
		return
	}
	r := base
	r.seq, r.ttl, r.size = seq, ttl, int32(int64(len(own))+tailSize(c.BodyTail))
	f.copies = append(f.copies, plannedCopy{sub: i, dlq: true, r: r, data: own, tail: c.BodyTail, reason: reason, desc: desc})
}

// finish gives the extra copies their sequence numbers (allocated from
// the topic's, so every message in a subscription has its own number and
// none is ever reused), appends the copies' store ops to ops, and returns
// the records to publish per subscription and the bytes they add.
func (f *fanOut) finish(ops []store.Op) ([]store.Op, []subCopies, int64) {
	if f.extra > 0 {
		t := f.t
		t.lockAndPublish()
		next := t.mu.nextSeq
		t.mu.nextSeq += int64(f.extra)
		t.mu.Unlock()
		for i := range f.copies {
			if f.copies[i].r.seq == 0 {
				f.copies[i].r.seq = next
				next++
			}
		}
	}
	if len(f.copies) == 0 {
		return ops, nil, 0
	}
	per := make([]subCopies, len(f.subs.list))
	// Carve every subscription's records out of one array.
	for i := range f.copies {
		if c := &f.copies[i]; c.dlq {
			per[c.sub].ndlq++
		} else {
			per[c.sub].nmain++
		}
	}
	recs := make([]rec, 0, len(f.copies))
	for i := range per {
		pc := &per[i]
		pc.main = recs[len(recs) : len(recs) : len(recs)+pc.nmain]
		recs = recs[:len(recs)+pc.nmain]
		pc.dlq = recs[len(recs) : len(recs) : len(recs)+pc.ndlq]
		recs = recs[:len(recs)+pc.ndlq]
	}
	var bytes int64
	// One buffer for every copy's Meta, grown at most once here.
	metas := slices.Grow(f.metas, len(f.copies)*maxMetaLen)
	for i := range f.copies {
		c := &f.copies[i]
		q := f.subs.list[c.sub]
		sq := SubQueueMain
		if c.dlq {
			sq = SubQueueDeadLetter
		}
		at := len(metas)
		metas = appendMetaOpt(metas, sq, &c.r, metaOpt{sessionID: c.sid, session: q.ss != nil && !c.dlq})
		ops = append(ops, store.Op{Kind: store.OpAppend, EntityID: q.id, Seq: uint64(c.r.seq),
			Meta: metas[at:len(metas):len(metas)], Data: c.data, Tail: tailReader(c.tail)})
		bytes += int64(c.r.size)
		pc := &per[c.sub]
		pc.q = q
		if c.dlq {
			pc.dlq = append(pc.dlq, c.r)
		} else {
			pc.main = append(pc.main, c.r)
			if q.ss != nil {
				pc.sids = append(pc.sids, c.sid) // every main copy has one ("" is one)
			}
		}
	}
	f.metas = metas
	return ops, per, bytes
}

// maxPubDepth bounds a subscription's pub stack (see publishCopies).
const maxPubDepth = 64

// maxMetaLen is an upper bound of appendMeta's output.
const maxMetaLen = 2 + 5 + 10 + 10 + 1 + 2 // + a hop count (a session id exceeds it)

// subCopies are the records one fan-out adds to one subscription.
type subCopies struct {
	q           *entity
	main, dlq   []rec
	nmain, ndlq int
	pub         pubBatch
	// sids are the session ids of main's copies, in order (a
	// session-enabled subscription), else nil.
	sids []string
}

// publishCopies makes committed copies visible in their subscriptions:
// like a queue's send, lock-free on the common path (no timer to arm, no
// dead-letter copy).
func publishCopies(per []subCopies) {
	for i := range per {
		pc := &per[i]
		q := pc.q
		if q == nil {
			continue
		}
		if len(pc.dlq) == 0 && !needsTimer(pc.main) && pc.sids == nil {
			// A subscription nobody receives from would pile up batches:
			// past maxPubDepth the sender publishes them itself.
			pc.pub = pubBatch{v: sendPub{recs: pc.main, insert: true}}
			if depth, waiter := q.pub.push(&pc.pub); waiter || depth >= maxPubDepth || q.forwarding.Load() {
				q.lockAndPublish()
				q.mu.Unlock()
			}
			continue
		}
		q.lockAndPublish()
		if q.mu.gone == nil {
			if pc.sids != nil {
				q.assignSessionsLocked(pc.main, pc.sids)
			}
			if len(pc.main) > 0 {
				q.publishLocked(SubQueueMain, pc.main, true, true)
			}
			if len(pc.dlq) > 0 {
				q.publishLocked(SubQueueDeadLetter, pc.dlq, true, true)
			}
		}
		q.mu.Unlock()
	}
}

// enqueue is a topic's send (the shape is sendplan.go's):
//
//  1. under t.mu: status, sizes, quota, duplicate detection, sequence
//     numbers, placeholders for scheduled messages;
//  2. without locks: route every message through every subscription's
//     rules, then commit the topic's ops (the shared data, once, and
//     scheduled messages) and every copy in one synced batch;
//  3. publish: the shared data's references, the copies in their
//     subscriptions.
//
// Phases 1 to 3 hold t.fanout shared, so a subscription removed meanwhile
// sees all of its copies. fol is the committer's pacing (nil for none);
// fw, when not nil, is an auto-forward's source side: its ops join the
// batch (forward.go).
func (t *topic) enqueue(ctx context.Context, pend []pendingMsg, total, now int64, fol *store.Follower, fw *forwardBatch) ([]int64, error) {
	t.catchUp(now)
	sc := sendScratchPool.Get().(*sendScratch)
	defer sc.release()
	t.fanout.RLock()
	// The subscriptions to route to: those that exist now (one created
	// meanwhile may or may not get these messages; one being removed waits
	// for this send, see fanout).
	f := fanOut{t: t, subs: t.subs.Load()}

	// Phase 1.
	t.lockAndPublish()
	s, err := t.planSendLocked(pend, total, now, fw.forwarded(), slices.Grow(sc.ops[:0], len(pend)*(len(f.subs.list)+1)+2))
	if err != nil {
		t.mu.Unlock()
		t.fanout.RUnlock()
		return nil, err
	}
	t.inflight.Add(1)
	t.mu.Unlock()

	// Phase 2: route, then one durable commit.
	cerr := t.commitSend(&s, &f, pend, now, fol, fw, sc)

	// Phase 3.
	gone := t.publishSend(&s, pend, total, cerr)
	if cerr == nil && t.b.hist != nil {
		t.b.recordSends(t.name, pend, now, fw, false)
		f.recordRoutes(now, false)
	}
	t.fanout.RUnlock()
	t.inflight.Done()
	return s.answer(ctx, t.name, s.seqs, cerr, gone)
}

// topicSend is a topic's send between its phases.
type topicSend struct {
	sendPlan
	seqs    []int64
	sched   []rec   // placeholders of the scheduled messages
	garbage []int64 // freed shared data removed with this send's commit
	// Planned in phase 2: the shared data's records and each
	// subscription's copies, with the bytes they add.
	shared    []rec
	per       []subCopies
	copyBytes int64
}

// planSendLocked is phase 1 of a topic's send: the shared plan, then a
// placeholder per scheduled message in the topic's index; the garbage to
// remove rides along.
func (t *topic) planSendLocked(pend []pendingMsg, total, now int64, forwarded bool, ops []store.Op) (topicSend, error) {
	if err := t.sendCheckLocked(); err != nil {
		return topicSend{}, err
	}
	s := topicSend{seqs: make([]int64, len(pend))}
	l := topicSendLimits(t.name, &t.mu.props)
	st := sendState{id: t.id, nextSeq: &t.mu.nextSeq, dedup: &t.mu.dedup, stored: t.size.Load(), pending: t.mu.pending}
	var err error
	if s.sendPlan, err = l.planLocked(st, pend, total, now, forwarded, s.seqs, ops); err != nil {
		return topicSend{}, err
	}
	t.touch(now)
	for i := range pend {
		pm := &pend[i]
		if pm.drop || pm.sched == 0 {
			continue
		}
		r := rec{seq: pm.seq, enq: pm.sched, size: int32(pm.size()), state: StateScheduled, flags: flagWasScheduled}
		s.sched = append(s.sched, r)
		r.flags |= flagPending
		t.mu.idx.insert(r)
	}
	s.garbage = t.takeGarbageLocked()
	s.ops = t.appendGarbageOps(s.ops, s.garbage)
	s.ops = t.saveAccessedLocked(s.ops)
	t.mu.pending += total
	return s, nil
}

// commitSend is phase 2 of a topic's send: it routes each message that
// is not scheduled (f) and commits, in one synced batch, the plan's ops,
// the topic's own (shared data once, scheduled messages), every copy and
// an auto-forward's source side.
func (t *topic) commitSend(s *topicSend, f *fanOut, pend []pendingMsg, now int64, fol *store.Follower, fw *forwardBatch, sc *sendScratch) error {
	f.copies = slices.Grow(sc.copies[:0], len(pend)*len(f.subs.list))
	f.metas = sc.meta[:0]
	ops := t.appendSendOps(s, f, pend, now, s.ops)
	if fw != nil {
		ops = append(ops, fw.ops...)
	}
	sc.ops, sc.copies, sc.meta = ops, f.copies, f.metas
	sc.batch.Ops, sc.batch.Follower = ops, fol
	cerr := t.b.store.Commit(&sc.batch, true)
	if fw != nil {
		fw.committed = cerr == nil
	}
	return cerr
}

// appendSendOps routes each message of a planned topic send that is not
// scheduled (f) and appends to ops (which hold the plan's, s.ops,
// already) the topic's own store ops (shared data once, scheduled
// messages) and every copy's; a
// transaction's commit (txn.go) collects several destinations' ops in one
// batch with it.
func (t *topic) appendSendOps(s *topicSend, f *fanOut, pend []pendingMsg, now int64, ops []store.Op) []store.Op {
	for i := range pend {
		pm := &pend[i]
		if pm.drop {
			continue
		}
		if pm.sched != 0 {
			ops = append(ops, store.Op{Kind: store.OpAppend, EntityID: t.id, Seq: uint64(pm.seq),
				Meta: f.appendMeta(&rec{enq: pm.sched, state: StateScheduled, flags: flagWasScheduled}), Data: pm.data, More: pm.more, Tail: tailReader(pm.tail)})
			continue
		}
		first := len(f.copies)
		refs := f.route(pm.m, pm.size(), pm.seq, now, false, s.defTTL)
		for j := first; j < len(f.copies); j++ {
			f.copies[j].r.hops = pm.hops
		}
		if refs == 0 {
			continue // nobody shares it: the topic keeps no copy
		}
		r := rec{seq: pm.seq, enq: now, size: int32(pm.size()), dc: uint32(refs), state: StateActive}
		s.shared = append(s.shared, r)
		ops = append(ops, store.Op{Kind: store.OpAppend, EntityID: t.id, Seq: uint64(pm.seq),
			Meta: f.appendMeta(&rec{enq: now, state: StateActive}), Data: pm.data, More: pm.more, Tail: tailReader(pm.tail)})
	}
	ops, s.per, s.copyBytes = f.finish(ops)
	return ops
}

// publishSend is phase 3 of a topic's send. A committed send that
// scheduled nothing applies its shared data records through the
// lock-free publication; otherwise they and the scheduled messages are
// applied, or on failure the placeholders, history entries and garbage
// given back, under t.mu. The copies are published in their
// subscriptions unless the topic is gone, which it returns.
func (t *topic) publishSend(s *topicSend, pend []pendingMsg, total int64, cerr error) (gone error) {
	if cerr == nil && len(s.sched) == 0 {
		t.pub.push(&pubNode[topicPub]{v: topicPub{shared: s.shared, added: total}})
		t.size.Add(s.copyBytes)
		if t.deleted.Load() {
			return goneErr(t.name, t.moved.Load())
		}
		publishCopies(s.per)
		return nil
	}
	t.lockAndPublish()
	t.mu.pending -= total
	gone = t.mu.gone
	switch {
	case cerr == nil && gone == nil:
		for i := range s.shared {
			t.mu.idx.insert(s.shared[i])
		}
		for i := range s.sched {
			if r := t.mu.idx.get(s.sched[i].seq); r != nil {
				r.flags &^= flagPending
				t.mu.scheduled++
				t.size.Add(int64(r.size))
				t.mu.timers.Push(expiry.Entry{At: r.enq, ID: r.seq, Kind: timerFanout})
			}
		}
		t.size.Add(s.copyBytes)
		t.rearmLocked()
	case gone == nil:
		for i := range s.sched {
			t.mu.idx.remove(s.sched[i].seq)
		}
		s.forgetLocked(&t.mu.dedup, pend)
		t.returnGarbageLocked(s.garbage)
	}
	t.mu.Unlock()
	if cerr == nil && gone == nil {
		publishCopies(s.per)
	}
	return gone
}

// appendMeta appends the Meta of a topic's own record r (main queue) to
// f.metas and returns it.
func (f *fanOut) appendMeta(r *rec) []byte {
	at := len(f.metas)
	f.metas = appendMeta(f.metas, SubQueueMain, r)
	return f.metas[at:len(f.metas):len(f.metas)]
}

// fanOutScheduled materialises scheduled messages whose time has come
// (marked busy by tick, phase 1): routes each to the subscriptions that
// exist now, turns its topic message into shared data (or removes it when
// no copy shares it) and commits that with the copies in one batch
// (phase 2), then applies the outcome (phase 3, applyFanOutLocked). The
// batch is not synced: it becomes durable with the next synced commit,
// which every settlement of a copy is; a crash before that leaves the
// message scheduled with its time passed, and it is fanned out again on
// the first tick after recovery. ops and garbage ride along.
func (t *topic) fanOutScheduled(due []rec, ops []store.Op, garbage []int64, now int64) {
	t.fanout.RLock()
	defer t.fanout.RUnlock()
	if t.deleted.Load() {
		return // the topic is going away with its scheduled messages
	}
	fo := t.routeScheduled(due, ops)
	cerr := t.b.store.Commit(&store.Batch{Ops: fo.ops}, false)
	if cerr != nil {
		t.b.retries.failed("fan out scheduled "+t.name, "fanning out scheduled messages failed; retrying", cerr, "topic", t.name)
	} else {
		t.b.retries.succeeded("fan out scheduled "+t.name, "fanning out scheduled messages recovered", "topic", t.name)
		if !slices.Contains(fo.failed, true) {
			t.b.retries.succeeded("read scheduled "+t.name, "reading scheduled messages recovered", "topic", t.name)
		}
	}
	t.lockAndPublish()
	applied := t.applyFanOutLocked(due, &fo, garbage, cerr, now)
	t.mu.Unlock()
	if applied {
		publishCopies(fo.per)
		if t.b.hist != nil {
			fo.routed.recordRoutes(now, false)
		}
	}
}

// scheduledFanOut is a fan-out of due scheduled messages between its
// phases: per message the references its shared data gets (0: no copy
// shares it) or whether it could not be read; the store ops, the copies
// per subscription and the bytes they add; the routing itself.
type scheduledFanOut struct {
	routed    *fanOut // the routing, for message histories
	refs      []int
	failed    []bool
	ops       []store.Op
	per       []subCopies
	copyBytes int64
}

// routeScheduled routes each due scheduled message through the topic's
// subscriptions and plans its store ops (added to ops), without locks.
func (t *topic) routeScheduled(due []rec, ops []store.Op) scheduledFanOut {
	t.lockAndPublish()
	topicTTL := finiteTTL(t.mu.props.DefaultMessageTimeToLive)
	t.mu.Unlock()
	f := fanOut{t: t, subs: t.subs.Load()}
	fo := scheduledFanOut{routed: &f, refs: make([]int, len(due)), failed: make([]bool, len(due))}
	for i := range due {
		r := &due[i]
		data, err := t.b.store.ReadData(t.id, uint64(r.seq))
		var m *message.Message
		if err == nil {
			m, err = message.Unmarshal(data)
		}
		if err != nil {
			t.b.retries.failed("read scheduled "+t.name, "cannot read a scheduled message; retrying", err, "topic", t.name, "seq", r.seq)
			fo.failed[i] = true
			continue
		}
		fo.refs[i] = f.route(m, int64(len(data)), r.seq, r.enq, true, topicTTL)
		if fo.refs[i] == 0 {
			ops = append(ops, store.Op{Kind: store.OpRemove, EntityID: t.id, Seq: uint64(r.seq)})
			continue
		}
		ops = append(ops, store.Op{Kind: store.OpSetMeta, EntityID: t.id, Seq: uint64(r.seq),
			Meta: appendMeta(nil, SubQueueMain, &rec{enq: r.enq, state: StateActive, flags: flagWasScheduled})})
	}
	fo.ops, fo.per, fo.copyBytes = f.finish(ops)
	return fo
}

// applyFanOutLocked is phase 3 of a scheduled fan-out whose commit
// returned cerr: each message shared data (or gone), or, when the commit
// failed or it could not be read, scheduled again for a retry; garbage
// is given back on failure. It reports whether the copies are to be
// published (committed, and the topic still there). Called with t.mu
// held.
func (t *topic) applyFanOutLocked(due []rec, fo *scheduledFanOut, garbage []int64, cerr error, now int64) bool {
	if t.mu.gone != nil {
		return false
	}
	for i := range due {
		r := t.mu.idx.get(due[i].seq)
		if r == nil {
			continue
		}
		r.flags &^= flagBusy
		if cerr != nil || fo.failed[i] {
			t.mu.timers.Push(expiry.Entry{At: now + retryDelay, ID: r.seq, Kind: timerFanout})
			continue
		}
		t.mu.scheduled--
		t.size.Add(-int64(r.size))
		if fo.refs[i] == 0 {
			t.mu.idx.remove(r.seq)
			continue
		}
		r.state, r.dc = StateActive, uint32(fo.refs[i])
	}
	if cerr == nil {
		t.size.Add(fo.copyBytes)
	} else {
		t.returnGarbageLocked(garbage)
	}
	t.rearmLocked()
	return cerr == nil
}

// topicCancel is a cancellation of a topic's scheduled messages between
// its phases: the sequence numbers planned (their records busy until
// phase 3) and the store ops removing them. planned says whether it is
// registered in the topic's inflight.
type topicCancel struct {
	seqs    []int64
	ops     []store.Op
	planned bool
	now     int64 // when it was planned, for message histories
	txn     bool  // part of a transaction, for message histories
}

// planCancelLocked is phase 1 of a cancellation of scheduled messages
// (seqs; numbers of messages not, or no longer, scheduled are ignored):
// it marks their records busy and plans their removal. Called with t.mu
// held.
func (t *topic) planCancelLocked(seqs []int64, now int64) (topicCancel, error) {
	if err := t.sendCheckLocked(); err != nil {
		return topicCancel{}, err
	}
	t.touch(now)
	c := topicCancel{now: now}
	for _, seq := range seqs {
		r := t.mu.idx.get(seq)
		if r == nil || r.busy() || r.state != StateScheduled {
			continue
		}
		markBusyLocked(r)
		c.seqs = append(c.seqs, seq)
		c.ops = append(c.ops, store.Op{Kind: store.OpRemove, EntityID: t.id, Seq: uint64(seq)})
	}
	return c, nil
}

// applyCancelLocked is phase 3 of a cancellation: the messages removed
// (err nil: its commit is durable) or scheduled again as they were.
// Called with t.mu held.
func (t *topic) applyCancelLocked(c *topicCancel, err error) {
	if t.mu.gone != nil {
		return
	}
	for _, seq := range c.seqs {
		r := t.mu.idx.get(seq)
		if r == nil {
			continue
		}
		r.flags &^= flagBusy
		if err != nil {
			t.mu.timers.Push(expiry.Entry{At: r.enq, ID: r.seq, Kind: timerFanout})
			continue
		}
		t.mu.scheduled--
		t.size.Add(-int64(r.size))
		t.mu.idx.remove(seq)
		if t.b.hist != nil {
			t.b.hist.Record(t.name, seq, "", history.Event{At: c.now, Kind: history.Cancelled, Gone: true, Txn: c.txn})
		}
	}
	t.rearmLocked()
}

// cancelScheduled removes scheduled messages of the topic that have not
// been fanned out yet; other sequence numbers are ignored. Its phases
// are planCancelLocked, one synced commit and applyCancelLocked.
func (t *topic) cancelScheduled(seqs []int64, now int64) error {
	t.catchUp(now)
	t.lockAndPublish()
	c, err := t.planCancelLocked(seqs, now)
	if err != nil || len(c.seqs) == 0 {
		t.mu.Unlock()
		return err
	}
	garbage := t.takeGarbageLocked()
	ops := t.saveAccessedLocked(t.appendGarbageOps(c.ops, garbage))
	t.inflight.Add(1)
	t.mu.Unlock()
	defer t.inflight.Done()

	err = t.b.store.Commit(&store.Batch{Ops: ops}, true)
	t.lockAndPublish()
	t.applyCancelLocked(&c, err)
	if err != nil && t.mu.gone == nil {
		t.returnGarbageLocked(garbage)
	}
	t.mu.Unlock()
	if err != nil {
		return internal(err, "cancelling scheduled messages of %s", t.name)
	}
	return nil
}

// planTxnCancel is phase 1 of a transaction's cancellation of scheduled
// messages of the topic (txn.go): planned under t.mu, its ops to join
// the transaction's batch. finishCancel is its phase 3.
func (t *topic) planTxnCancel(seqs []int64, now int64) (topicCancel, error) {
	t.catchUp(now)
	t.lockAndPublish()
	defer t.mu.Unlock()
	c, err := t.planCancelLocked(seqs, now)
	if err != nil {
		return topicCancel{}, err
	}
	c.planned, c.txn = true, true
	t.inflight.Add(1)
	return c, nil
}

// finishCancel is phase 3 of a planned transactional cancellation:
// applied (err nil) or undone.
func (t *topic) finishCancel(c *topicCancel, err error) {
	if !c.planned {
		return
	}
	c.planned = false
	t.lockAndPublish()
	t.applyCancelLocked(c, err)
	t.mu.Unlock()
	t.inflight.Done()
}
