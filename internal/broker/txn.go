package broker

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Transactions: the broker side of an AMQP transaction's commit
// (docs/wire/transactions.md). The protocol layer collects a
// transaction's settlements and sends while it is open, changing
// nothing; on commit it hands them to CommitTxn, which applies all of
// them with ONE synced store batch or none of them:
//
//	phase 0  the stateMu of every session whose state it sets, in the
//	         order of their ids (doc.go's lock order)
//	phase 1  under the receiving entity's lock: every lock token and
//	         session lock is checked (all must be held now), the
//	         settlements' transitions (and a queue's cancellations of
//	         scheduled messages) are planned and their records marked
//	         busy, the session states' store values made; then, under
//	         the topic's lock, a topic's cancellations; then each
//	         destination's send (checks, sequence numbers, duplicate
//	         detection, fan-out), each under its own lock
//	phase 2  all of their store ops in ONE synced batch (as an
//	         auto-forward's removals ride with its send, forward.go)
//	phase 3  everything applied, or on failure every message locked
//	         again under its token, every cancelled message scheduled
//	         again and every session state left as it was
//
// A crash before the batch is durable leaves every message as it was
// (locked messages come back unlocked after a restart, as always); after
// it, every operation is visible. A rollback never reaches the broker.

// MaxTxnOperations is the most operations (sends and settlements) one
// transaction may hold: Service Bus's quota of 100 messages per
// transaction.
const MaxTxnOperations = 100

// TxnSettleKind is what a transactional settlement does.
type TxnSettleKind uint8

// The settlements a transaction may hold.
const (
	TxnComplete TxnSettleKind = iota + 1
	TxnAbandon
	TxnDeadLetter
	TxnDefer
)

// TxnSettlement is one settlement of a transaction: of the message locked
// with Token on Path (a queue, a subscription or one of their
// sub-queues), as Complete, Abandon, DeadLetter or Defer would do it.
type TxnSettlement struct {
	Kind   TxnSettleKind
	Path   string
	Token  uuid.UUID
	Props  map[string]any // Abandon, DeadLetter, Defer
	Reason string         // DeadLetter
	Desc   string         // DeadLetter
}

// Txn is what a committing transaction applies: settlements of messages
// and session states of one receiving entity, cancellations of scheduled
// messages of one queue or topic, and sends to any number of queues and
// topics (any of them may be empty). Service Bus limits a transaction to one entity,
// or to sends through a via entity (docs/wire/transactions.md); the
// protocol layer enforces those rules, this one only that it can apply
// the whole as one store batch.
type Txn struct {
	Settlements []TxnSettlement
	Sends       []TxnSend
	// Cancels are sequence numbers of scheduled messages of CancelOn to
	// cancel, as CancelScheduled does (numbers of messages not, or no
	// longer, scheduled are ignored). CancelOn is a topic, or a queue:
	// the one the settlements are on, if any.
	CancelOn string
	Cancels  []int64
	// States are session states to set, as SetSessionState does: of
	// sessions of the queue or subscription the settlements are on, if
	// any. A session named twice gets the last state.
	States []TxnSessionState
	// Via is the queue the sends go through (a send-via link's via
	// entity; "" for none). On a cluster node, the transfers of sends to
	// entities other nodes serve are fenced on it when the transaction
	// settles nothing, and a refusal at landing goes to its transfer
	// dead-letter queue.
	Via string
}

// TxnSessionState sets the state of session SessionID of the
// session-enabled queue or subscription Path on commit (empty or nil
// clears it). The session's lock must be held at commit: by Holder when
// it is not nil (SessionID may then be ""), else by any receiver.
type TxnSessionState struct {
	Path      string
	SessionID string
	Holder    *Receiver
	State     []byte
}

// TxnSend is one message a transaction sends, to the queue or topic To.
// Messages to one destination keep their order. A scheduled message
// (x-opt-scheduled-enqueue-time in the future) is scheduled. Seq, when
// not zero, is the sequence number ReserveSeqs reserved for it on To (a
// schedule-message request inside a transaction answers with its
// sequence numbers before the commit).
type TxnSend struct {
	To  string
	Msg *message.Message
	Seq SeqReservation
}

// SeqReservation is a sequence number reserved on one queue or topic.
// Entity identifies the entity's incarnation, so that a number reserved
// on an entity deleted and created again meanwhile is never used.
type SeqReservation struct {
	Entity uint64
	Seq    int64
}

// ReserveSeqs hands out n sequence numbers of the queue or topic at path
// for messages a transaction will send on commit. Numbers a rollback
// leaves unused are gaps, as in Service Bus. n is at most
// MaxTxnOperations.
func (b *Broker) ReserveSeqs(path string, n int) ([]SeqReservation, error) {
	if n < 0 || n > MaxTxnOperations {
		return nil, errorf(KindQuotaExceeded, "%d sequence numbers cannot be reserved at once; at most %d.", n, MaxTxnOperations)
	}
	q, t, _, err := b.lookupSend(path)
	if err != nil {
		return nil, err
	}
	var (
		id   uint64
		next *int64
	)
	if t != nil {
		t.lockAndPublish()
		defer t.mu.Unlock()
		if err := t.sendCheckLocked(); err != nil {
			return nil, err
		}
		id, next = t.id, &t.mu.nextSeq
	} else {
		q.lockAndPublish()
		defer q.mu.Unlock()
		if err := q.sendCheckLocked(); err != nil {
			return nil, err
		}
		id, next = q.id, &q.mu.nextSeq
	}
	r := make([]SeqReservation, n)
	for i := range r {
		r[i] = SeqReservation{Entity: id, Seq: *next}
		*next++
	}
	return r, nil
}

// txnDest is one destination of a committing transaction, between the
// phases of its send.
type txnDest struct {
	key   string // entityKey: the order destinations are locked in
	q     *entity
	t     *topic
	msgs  []*message.Message
	seqs  []SeqReservation // per message; zero: assigned at commit
	pend  []pendingMsg
	total int64
	qs    queueSend
	ts    topicSend
	f     fanOut
	plan  bool // planned (phase 1 succeeded)
	// unit, for a queue or topic another node serves (q and t nil): its
	// unit, and its name as the catalog has it (remoteName).
	unit       uint64
	remoteName string
}

// idOf is the id of the destination: topic t's, or else queue q's.
func (q *entity) idOf(t *topic) uint64 {
	if t != nil {
		return t.id
	}
	return q.id
}

func (d *txnDest) name() string {
	if d.t != nil {
		return d.t.name
	}
	return d.q.name
}

// CommitTxn applies tx atomically and durably: when it returns nil every
// settlement, send, cancellation and session state is durable and
// visible; on error none is, and every message the transaction settles
// is still locked under its token (a message whose lock was lost
// meanwhile fails the whole commit with KindLockLost, a session whose
// lock was lost with KindSessionLockLost).
//
// Several destinations are planned one after the other, each under its
// own lock, in the order of their entity keys (doc.go's lock order: a
// topic's fanout lock is held shared from its planning until its copies
// are published, so every transaction takes those in one order); their
// ops then go into the one batch with the settlements', and each is
// published (or its plan undone) when it returns.
func (b *Broker) CommitTxn(ctx context.Context, tx *Txn) error {
	return b.commitTxn(ctx, tx, true)
}

// commitTxn is CommitTxn; limit false skips the limit on operations
// (SendVia).
func (b *Broker) commitTxn(ctx context.Context, tx *Txn, limit bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := len(tx.Settlements) + len(tx.Sends) + len(tx.Cancels) + len(tx.States); limit && n > MaxTxnOperations {
		return errorf(KindQuotaExceeded, "The transaction holds %d operations, over the limit of %d per transaction.", n, MaxTxnOperations)
	}
	q, subs, ct, err := b.txnSettleTarget(tx)
	if err != nil {
		return err
	}
	nowT := b.clock.Now()
	dests, xops, release, err := b.txnSends(ctx, q, tx.Via, tx.Sends, nowT)
	defer release()
	if err != nil {
		return err
	}
	now := nowT.UnixNano()

	// Phase 0: the session states' stateMu, held until they are applied.
	sess, err := q.lockTxnSessions(tx.States, now)
	if err != nil {
		return err
	}
	defer unlockSessions(sess)

	// Phase 1: the receiving entity's part, under its lock.
	var (
		plan txnPlan
		ops  []store.Op
	)
	if q != nil {
		cancels := tx.Cancels
		if ct != nil {
			cancels = nil // the topic's, planned below
		}
		if plan, err = q.planTxnLocked(tx, subs, cancels, sess, now); err != nil {
			return err
		}
		ops = q.saveAccessedLocked(nil)
		q.inflight.Add(1)
		q.mu.Unlock()
		defer q.inflight.Done()
		ops = append(append(q.transitionOps(nil, plan.ts), plan.ops...), ops...)
		defer closeTails(ops)
	}
	var garbage []int64
	if q != nil && q.topic != nil {
		garbage = q.topic.takeGarbage() // shared data freed earlier rides along
		ops = q.topic.appendGarbageOps(ops, garbage)
	}

	// Then a topic's cancellations and the sends, each under its lock.
	var tc topicCancel
	ops = append(ops, xops...)
	ops, perr := b.planTxnRest(ct, tx.Cancels, &tc, dests, ops, now)

	// Phase 2: one synced store batch.
	committed := false
	if perr == nil {
		err = b.commitTxnOps(ops, dests, now)
		committed = err == nil
		if committed {
			b.wakeTargets(xops)
		}
	} else {
		err = perr
	}
	if !committed && garbage != nil {
		q.topic.returnGarbage(garbage)
	}
	// Phase 3: the topic's cancellations and the destinations.
	var cerr error
	if !committed {
		cerr = err
		if cerr == nil {
			cerr = errForwardRetry
		}
	}
	if aerr := finishTxnRest(ctx, ct, &tc, dests, cerr); committed && err == nil {
		err = aerr
	}
	// And the receiving entity: applied, or every message locked again.
	if q != nil {
		q.finishTxn(&plan, cerr, now)
	}
	if committed {
		b.observeTxn(q, tx, dests, nowT)
		return err
	}
	if err == nil {
		err = internal(errForwardRetry, "transaction not committed")
	}
	return err
}

// txnSends resolves and encodes a transaction's sends (txnDests): the
// destinations this broker serves, and the transfer ops of those other
// nodes serve (txnTransferOps, transfer.go), to commit in the same batch.
// release gives back their encodings.
func (b *Broker) txnSends(ctx context.Context, q *entity, via string, sends []TxnSend, nowT time.Time) ([]*txnDest, []store.Op, func(), error) {
	dests, remote, err := b.txnDests(sends, nowT)
	release := func() {
		for _, d := range dests {
			releaseSendData(d.pend)
		}
		for _, d := range remote {
			releaseSendData(d.pend)
		}
	}
	if err != nil {
		return dests, nil, release, err
	}
	xops, err := b.txnTransferOps(ctx, q, via, dests, remote)
	return dests, xops, release, err
}

// planTxnRest plans what a transaction does besides the receiving
// entity's part: the cancellations of topic ct's scheduled messages
// (cancels, into tc) and then the sends (dests); their ops are added to
// ops. On error what was planned stays planned, for phase 3 to undo.
func (b *Broker) planTxnRest(ct *topic, cancels []int64, tc *topicCancel, dests []*txnDest, ops []store.Op, now int64) ([]store.Op, error) {
	if ct != nil {
		var err error
		if *tc, err = ct.planTxnCancel(cancels, now); err != nil {
			return ops, err
		}
		ops = append(ops, tc.ops...)
	}
	return ops, b.planTxnDests(dests, now)
}

// finishTxnRest is phase 3 of what planTxnRest planned: applied (cerr
// nil: committed) or undone. It returns the first error a send's answer
// has: durable and applied, a destination deleted meanwhile took its
// messages with it, as a plain send reports.
func finishTxnRest(ctx context.Context, ct *topic, tc *topicCancel, dests []*txnDest, cerr error) error {
	if ct != nil {
		ct.finishCancel(tc, cerr)
	}
	var err error
	for _, d := range dests {
		if aerr := d.finish(ctx, cerr); aerr != nil && err == nil {
			err = aerr
		}
	}
	return err
}

// finishTxn is phase 3 on a transaction's receiving entity: its plan
// applied (cerr nil: committed) or undone.
func (q *entity) finishTxn(plan *txnPlan, cerr error, now int64) {
	q.lockAndPublish()
	q.applyLocked(plan.ts, cerr, now)
	if cerr == nil {
		q.applyTxnStatesLocked(plan.states, now)
	}
	q.rearmLocked()
	q.mu.Unlock()
}

// txnSettleTarget resolves the entity a transaction settles on, sets
// session states of or cancels scheduled messages of (a queue; nil when
// none), each settlement's sub-queue, and the topic whose scheduled
// messages it cancels (nil when none). The settlements and session
// states must all be on one queue or subscription, a queue's
// cancellations on that queue too.
func (b *Broker) txnSettleTarget(tx *Txn) (*entity, []SubQueue, *topic, error) {
	var q *entity
	subs := make([]SubQueue, len(tx.Settlements))
	for i := range tx.Settlements {
		s := &tx.Settlements[i]
		e, p, err := b.lookup(s.Path)
		if err != nil {
			return nil, nil, nil, err
		}
		if q != nil && e != q {
			return nil, nil, nil, errorf(KindNotAllowed, "A transaction's settlements must all be on one queue or subscription; '%s' is another one than '%s'.", s.Path, q.name)
		}
		if err := validateProps(s.Props); err != nil {
			return nil, nil, nil, err
		}
		q, subs[i] = e, p.SubQueue
	}
	q, err := b.txnStatesTarget(q, tx.States)
	if err != nil || len(tx.Cancels) == 0 {
		return q, subs, nil, err
	}
	cq, ct, _, err := b.lookupSend(tx.CancelOn)
	if err != nil {
		return nil, nil, nil, err
	}
	if ct != nil {
		return q, subs, ct, nil
	}
	if q != nil && cq != q {
		return nil, nil, nil, errorf(KindNotAllowed, "A transaction cancels scheduled messages only of the queue it settles on ('%s'), not of '%s'.", q.name, tx.CancelOn)
	}
	return cq, subs, nil, nil
}

// txnStatesTarget checks that a transaction's session states are all of
// sessions of q (the entity its settlements are on; nil: none), a
// session-enabled queue or subscription, and returns that entity.
func (b *Broker) txnStatesTarget(q *entity, states []TxnSessionState) (*entity, error) {
	for i := range states {
		e, err := b.sessionEntity(states[i].Path)
		if err != nil {
			return nil, err
		}
		if q != nil && e != q {
			return nil, errorf(KindNotAllowed, "A transaction sets session state only on the queue or subscription it settles on ('%s'), not on '%s'.", q.name, states[i].Path)
		}
		q = e
	}
	return q, nil
}

// commitTxnOps adds the planned destinations' send ops to ops (the
// settlements') and commits them in one synced store batch.
func (b *Broker) commitTxnOps(ops []store.Op, dests []*txnDest, now int64) error {
	for _, d := range dests {
		if d.t != nil {
			ops = d.t.appendSendOps(&d.ts, &d.f, d.pend, now, append(ops, d.ts.ops...))
		} else {
			ops, _ = d.q.appendSendOps(&d.qs, d.pend, append(ops, d.qs.ops...), nil)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	batch := store.Batch{Ops: ops}
	if err := b.store.Commit(&batch, true); err != nil {
		return internal(err, "store commit of a transaction")
	}
	return nil
}

// observeTxn reports a committed transaction's sends and settlements to
// the observer (metrics), as plain sends and settlements are.
func (b *Broker) observeTxn(q *entity, tx *Txn, dests []*txnDest, nowT time.Time) {
	for _, d := range dests {
		b.obs.Sent(d.name(), len(d.pend), b.clock.Now().Sub(nowT))
	}
	if q == nil {
		return
	}
	var n [TxnDefer + 1]int
	for i := range tx.Settlements {
		n[tx.Settlements[i].Kind]++
	}
	d := b.clock.Now().Sub(nowT)
	for k, o := range map[TxnSettleKind]Outcome{TxnComplete: OutcomeComplete, TxnAbandon: OutcomeAbandon, TxnDeadLetter: OutcomeDeadLetter, TxnDefer: OutcomeDefer} {
		if n[k] > 0 {
			b.obs.Settled(q.name, o, n[k], d)
		}
	}
}

// txnDests resolves and encodes a transaction's sends, one txnDest per
// destination in entity-key order. The caller releases their pend.
func (b *Broker) txnDests(sends []TxnSend, nowT time.Time) (dests, remote []*txnDest, err error) {
	if len(sends) == 0 {
		return nil, nil, nil
	}
	byKey := map[string]*txnDest{}
	for _, s := range sends {
		p, err := ParsePath(s.To)
		if err != nil {
			return dests, remote, err
		}
		k := entityKey(p.Entity)
		d := byKey[k]
		if d == nil {
			d = &txnDest{key: k}
			if d.q, d.t, _, err = b.lookupSend(s.To); err != nil {
				if d.unit, err = b.remoteUnit(s.To, err); err != nil {
					return dests, remote, err
				}
				d.remoteName = p.Entity
				remote = append(remote, d)
			} else {
				dests = append(dests, d)
			}
			byKey[k] = d
		}
		if d.unit != 0 && s.Seq.Seq != 0 {
			return dests, remote, errorf(KindNotAllowed, "Messages cannot be scheduled inside a transaction on '%s', which another node of the cluster serves.", s.To)
		}
		d.msgs = append(d.msgs, s.Msg)
		d.seqs = append(d.seqs, s.Seq)
	}
	slices.SortFunc(dests, func(x, y *txnDest) int { return strings.Compare(x.key, y.key) })
	if err := b.checkGrowth(); err != nil {
		return dests, remote, err
	}
	for _, d := range remote {
		var err error
		if d.pend, d.total, err = encodeSends(d.msgs, time.Time{}, false, nowT); err != nil {
			return dests, remote, err
		}
	}
	for _, d := range dests {
		var err error
		if d.pend, d.total, err = encodeSends(d.msgs, time.Time{}, false, nowT); err != nil {
			return dests, remote, err
		}
		id := d.q.idOf(d.t)
		for i, r := range d.seqs {
			if r.Seq == 0 {
				continue
			}
			if r.Entity != id {
				return dests, remote, errorf(KindNotFound, "The entity '%s' was deleted and created again since the transaction scheduled messages on it.", d.name())
			}
			d.pend[i].seq, d.pend[i].reserved = r.Seq, true
		}
	}
	return dests, remote, nil
}

// planTxnDests is phase 1 of every destination's send, in dests' order
// (entity keys): a topic's fanout lock is taken shared and kept until
// finish. On error the destinations planned so far stay planned, for
// finish to undo.
func (b *Broker) planTxnDests(dests []*txnDest, now int64) error {
	for _, d := range dests {
		if t := d.t; t != nil {
			t.catchUp(now)
			t.fanout.RLock()
			d.f = fanOut{t: t, subs: t.subs.Load()}
			t.lockAndPublish()
			s, err := t.planSendLocked(d.pend, d.total, now, false, nil)
			if err != nil {
				t.mu.Unlock()
				t.fanout.RUnlock()
				return err
			}
			d.ts, d.plan = s, true
			t.inflight.Add(1)
			t.mu.Unlock()
			continue
		}
		q := d.q
		q.lockAndPublish()
		s, err := q.planSendLocked(d.pend, d.total, now, false, nil)
		if err != nil {
			q.mu.Unlock()
			return err
		}
		d.qs, d.plan = s, true
		q.inflight.Add(1)
		q.mu.Unlock()
	}
	return nil
}

// finish is phase 3 of a planned destination's send: published (cerr
// nil) or undone. It returns the send's answer's error.
func (d *txnDest) finish(ctx context.Context, cerr error) error {
	if !d.plan {
		return nil
	}
	d.plan = false
	if t := d.t; t != nil {
		gone := t.publishSend(&d.ts, d.pend, d.total, cerr)
		if cerr == nil && t.b.hist != nil {
			t.b.recordSends(t.name, d.pend, t.b.now(), nil, true)
			d.f.recordRoutes(t.b.now(), true)
		}
		t.fanout.RUnlock()
		t.inflight.Done()
		_, err := d.ts.answer(ctx, t.name, d.ts.seqs, cerr, gone)
		return err
	}
	q := d.q
	gone := q.publishSend(&d.qs, d.pend, cerr)
	if cerr == nil && q.b.hist != nil {
		q.b.recordSends(q.name, d.pend, q.b.now(), nil, true)
	}
	q.inflight.Done()
	_, err := d.qs.answer(ctx, q.name, d.qs.seqs, cerr, gone)
	return err
}

// txnPlan is phase 1's result on a transaction's receiving entity: the
// transitions of its settlements and cancellations, and its session
// states with their store ops.
type txnPlan struct {
	ts     []transition
	states []txnStatePlan
	ops    []store.Op
}

// txnStatePlan is a session state a committing transaction sets.
type txnStatePlan struct {
	s     *session
	state []byte // nil: cleared
}

// planTxnLocked locks q and plans the transitions of a transaction's
// settlements (subs: their sub-queues), of its cancellations of q's
// scheduled messages (cancels) and its session states (sess: their sessions,
// whose stateMu the caller holds): it returns with q.mu held, or on error
// released with nothing changed. Every token must hold its lock now, and
// every session its lock; a token named twice is refused.
func (q *entity) planTxnLocked(tx *Txn, subs []SubQueue, cancels []int64, sess []*session, now int64) (txnPlan, error) {
	ss := tx.Settlements
	q.lockAt(now)
	if q.mu.gone != nil {
		err := q.mu.gone
		q.mu.Unlock()
		return txnPlan{}, err
	}
	if err := q.checkTxnLocked(ss, subs, len(cancels) > 0, now); err != nil {
		q.mu.Unlock()
		return txnPlan{}, err
	}
	plan, err := q.planTxnStatesLocked(tx.States, sess, now)
	if err != nil {
		q.mu.Unlock()
		return txnPlan{}, err
	}
	q.touchLocked(now)
	plan.ts = make([]transition, 0, len(ss)+len(cancels))
	for i := range ss {
		s, sub := &ss[i], subs[i]
		r, _ := q.lockedRecLocked(sub, s.Token, now)
		until, holder := r.until, q.mu.locks[s.Token].holder
		var t transition
		switch s.Kind {
		case TxnComplete:
			q.unlockRecLocked(sub, r)
			t = removeTransitionLocked(sub, r)
			t.why = history.Completed
		case TxnAbandon:
			if sub != SubQueueMain && s.Props == nil {
				// Nothing durable changes (a dead-letter queue's count is
				// frozen), but the lock must stay until the commit: an
				// unchanged record, made available when applied.
				q.unlockRecLocked(sub, r)
				t = updateTransitionLocked(sub, sub, r, *r, nil)
				t.why = history.Abandoned
				break
			}
			var ok bool
			if t, ok = q.lockEndLocked(sub, r, now, s.Props, true); !ok {
				continue // (not reached: the main queue's count rises)
			}
			t.why = history.Abandoned
		case TxnDeadLetter:
			q.unlockRecLocked(sub, r)
			t = deadLetterTransitionLocked(r, s.Reason, s.Desc, s.Props)
		case TxnDefer:
			q.unlockRecLocked(sub, r)
			next := *r
			next.state = StateDeferred
			t = updateTransitionLocked(sub, sub, r, next, s.Props)
			t.why = history.Deferred
		}
		t.relock, t.relockUntil, t.relockHolder = s.Token, until, holder // a failed commit keeps the lock
		t.txn = true
		plan.ts = append(plan.ts, t)
	}
	for _, seq := range cancels { // as CancelScheduled
		r := q.mu.subs[SubQueueMain].idx.get(seq)
		if r == nil || r.busy() || r.state != StateScheduled {
			continue
		}
		t := removeTransitionLocked(SubQueueMain, r)
		t.why, t.txn = history.Cancelled, true
		plan.ts = append(plan.ts, t)
	}
	return plan, nil
}

// checkTxnLocked checks a transaction's settlements on q (subs: their
// sub-queues) and, when it cancels scheduled messages of q, that q takes
// sends.
func (q *entity) checkTxnLocked(ss []TxnSettlement, subs []SubQueue, cancels bool, now int64) error {
	if cancels {
		if err := q.sendCheckLocked(); err != nil {
			return err
		}
	}
	seen := make(map[uuid.UUID]bool, len(ss))
	for i := range ss {
		s := &ss[i]
		if seen[s.Token] {
			return errorf(KindLockLost, "The lock token %s is settled twice in the transaction.", s.Token)
		}
		seen[s.Token] = true
		if _, err := q.lockedRecLocked(subs[i], s.Token, now); err != nil {
			return err
		}
		if s.Kind == TxnDeadLetter && subs[i] != SubQueueMain {
			return errorf(KindNotAllowed, "A message in '%s' cannot be dead-lettered: it is already in a dead-letter queue.", q.path(subs[i]))
		}
		if s.Kind < TxnComplete || s.Kind > TxnDefer {
			return errorf(KindInvalidArgument, "unknown transactional settlement %d", s.Kind)
		}
	}
	return nil
}

// lockTxnSessions resolves the sessions of q whose state a transaction
// sets (states; each must hold its lock now) and takes their stateMu, in
// the order of their ids; unlockSessions releases them. planTxnLocked
// checks the locks again under q.mu.
func (q *entity) lockTxnSessions(states []TxnSessionState, now int64) ([]*session, error) {
	if len(states) == 0 {
		return nil, nil
	}
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return nil, q.mu.gone
	}
	var sess []*session
	for i := range states {
		s, err := q.heldSessionLocked(states[i].SessionID, states[i].Holder, now)
		if err != nil {
			q.mu.Unlock()
			return nil, err
		}
		if !slices.Contains(sess, s) {
			sess = append(sess, s)
		}
	}
	q.mu.Unlock()
	slices.SortFunc(sess, func(a, b *session) int { return strings.Compare(a.id, b.id) })
	for _, s := range sess {
		s.stateMu.Lock()
	}
	return sess, nil
}

func unlockSessions(sess []*session) {
	for _, s := range sess {
		s.stateMu.Unlock()
	}
}

// planTxnStatesLocked checks a transaction's session states again (each
// session still locked, and the one lockTxnSessions locked; each state
// within the entity's size limit) and makes their store values: the last
// state per session, as SetSessionState stores it.
func (q *entity) planTxnStatesLocked(states []TxnSessionState, sess []*session, now int64) (txnPlan, error) {
	var plan txnPlan
	last := make(map[*session]int, len(sess))
	limit := q.mu.props.MaxMessageSizeInKilobytes * 1024
	for i := range states {
		st := &states[i]
		s, err := q.heldSessionLocked(st.SessionID, st.Holder, now)
		if err != nil {
			return plan, err
		}
		if !slices.Contains(sess, s) {
			return plan, errSessionLockLost(s.id)
		}
		if int64(len(st.State)) > limit {
			return plan, errorf(KindMessageTooLarge, "the session state is %d bytes, over the %d-byte limit (the entity's MaxMessageSizeInKilobytes)", len(st.State), limit)
		}
		last[s] = i
	}
	for _, s := range sess {
		i, ok := last[s]
		if !ok {
			continue
		}
		state := states[i].State
		key := valueSessionPrefix + s.id
		if len(state) == 0 {
			plan.states = append(plan.states, txnStatePlan{s: s})
			plan.ops = append(plan.ops, store.Op{Kind: store.OpDeleteValue, EntityID: q.id, Key: key})
			continue
		}
		plan.states = append(plan.states, txnStatePlan{s: s, state: slices.Clone(state)})
		plan.ops = append(plan.ops, store.Op{Kind: store.OpPutValue, EntityID: q.id, Key: key, Data: append(be64(now), state...)})
	}
	return plan, nil
}

// applyTxnStatesLocked applies a committed transaction's session states,
// as SetSessionState does once its commit is durable.
func (q *entity) applyTxnStatesLocked(states []txnStatePlan, now int64) {
	if q.mu.gone != nil {
		return
	}
	for _, st := range states {
		cur := st.s
		if cur.gone { // dropped meanwhile (its lock ended): the state revives it
			cur = q.getSessionLocked(st.s.id)
		}
		cur.state, cur.updated = st.state, now
		q.maybeDropSessionLocked(cur)
	}
}
