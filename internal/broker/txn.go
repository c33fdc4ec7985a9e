package broker

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Transactions: the broker side of an AMQP transaction's commit
// (docs/wire/transactions.md). The protocol layer collects a
// transaction's settlements and sends while it is open, changing
// nothing; on commit it hands them to CommitTxn, which applies all of
// them with ONE synced store batch or none of them:
//
//	phase 1  under the receiving entity's lock: every lock token is
//	         checked (all must hold their lock now), the settlements'
//	         transitions are planned and their records marked busy
//	phase 2  the sends go through the destination's own enqueue (checks,
//	         sequence numbers, duplicate detection, fan-out), with the
//	         settlements' store ops riding in the same batch (as an
//	         auto-forward's removals do, forward.go); without sends the
//	         settlements are committed alone
//	phase 3  the settlements are applied, or on failure every message
//	         is locked again under its token, as before the commit
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
// of one receiving entity and sends to any number of queues and topics
// (either may be empty). Service Bus limits a transaction to one entity,
// or to sends through a via entity (docs/wire/transactions.md); the
// protocol layer enforces those rules, this one only that it can apply
// the whole as one store batch.
type Txn struct {
	Settlements []TxnSettlement
	Sends       []TxnSend
	// Cancels are sequence numbers of scheduled messages of the queue
	// CancelOn to cancel, as CancelScheduled does (numbers of messages
	// not, or no longer, scheduled are ignored). CancelOn must be the
	// queue the settlements are on, if any; a topic's scheduled
	// messages are cancelled outside transactions only.
	CancelOn string
	Cancels  []int64
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
// settlement and send is durable and visible; on error none is, and every
// message the transaction settles is still locked under its token (a
// message whose lock was lost meanwhile fails the whole commit with
// KindLockLost).
//
// Several destinations are planned one after the other, each under its
// own lock, in the order of their entity keys (doc.go's lock order: a
// topic's fanout lock is held shared from its planning until its copies
// are published, so every transaction takes those in one order); their
// ops then go into the one batch with the settlements', and each is
// published (or its plan undone) when it returns.
func (b *Broker) CommitTxn(ctx context.Context, tx *Txn) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := len(tx.Settlements) + len(tx.Sends) + len(tx.Cancels); n > MaxTxnOperations {
		return errorf(KindQuotaExceeded, "The transaction holds %d operations, over the limit of %d per transaction.", n, MaxTxnOperations)
	}
	q, subs, err := b.txnSettleTarget(tx)
	if err != nil {
		return err
	}
	nowT := b.clock.Now()
	dests, err := b.txnDests(tx.Sends, nowT)
	defer func() {
		for _, d := range dests {
			releaseSendData(d.pend)
		}
	}()
	if err != nil {
		return err
	}

	// Phase 1: the settlements, planned under the receiving entity's lock.
	now := nowT.UnixNano()
	var (
		ts  []transition
		ops []store.Op
	)
	if q != nil {
		if ts, err = q.planTxnLocked(tx.Settlements, subs, tx.Cancels, now); err != nil {
			return err
		}
		ops = q.saveAccessedLocked(nil)
		q.inflight.Add(1)
		q.mu.Unlock()
		defer q.inflight.Done()
		ops = append(q.transitionOps(nil, ts), ops...)
		defer closeTails(ops)
	}
	var garbage []int64
	if q != nil && q.topic != nil {
		garbage = q.topic.takeGarbage() // shared data freed earlier rides along
		ops = q.topic.appendGarbageOps(ops, garbage)
	}

	// Then the sends, each destination planned under its own lock.
	perr := b.planTxnDests(dests, now)

	// Phase 2: one synced store batch.
	committed := false
	if perr == nil {
		err = b.commitTxnOps(ops, dests, now)
		committed = err == nil
	} else {
		err = perr
	}
	if !committed && garbage != nil {
		q.topic.returnGarbage(garbage)
	}
	// The destinations: published, or their plans undone.
	var cerr error
	if !committed {
		cerr = err
		if cerr == nil {
			cerr = errForwardRetry
		}
	}
	for _, d := range dests {
		if aerr := d.finish(ctx, cerr); aerr != nil && committed && err == nil {
			// Durable and applied; a destination deleted meanwhile took
			// its messages with it, as a plain send reports.
			err = aerr
		}
	}

	// Phase 3: applied, or every message locked again as it was.
	if q != nil {
		var aerr error
		if !committed {
			aerr = cerr
		}
		q.lockAndPublish()
		q.applyLocked(ts, aerr, now)
		q.rearmLocked()
		q.mu.Unlock()
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

// txnSettleTarget resolves the entity a transaction settles on (nil when
// it settles nothing) and each settlement's sub-queue; all must be on one
// queue or subscription.
func (b *Broker) txnSettleTarget(tx *Txn) (*entity, []SubQueue, error) {
	var q *entity
	subs := make([]SubQueue, len(tx.Settlements))
	for i := range tx.Settlements {
		s := &tx.Settlements[i]
		e, p, err := b.lookup(s.Path)
		if err != nil {
			return nil, nil, err
		}
		if q != nil && e != q {
			return nil, nil, errorf(KindNotAllowed, "A transaction's settlements must all be on one queue or subscription; '%s' is another one than '%s'.", s.Path, q.name)
		}
		if err := validateProps(s.Props); err != nil {
			return nil, nil, err
		}
		q, subs[i] = e, p.SubQueue
	}
	if len(tx.Cancels) > 0 {
		cq, ct, _, err := b.lookupSend(tx.CancelOn)
		if err != nil {
			return nil, nil, err
		}
		if ct != nil {
			return nil, nil, errorf(KindNotAllowed, "Busbar cancels a topic's scheduled messages only outside a transaction; '%s' is a topic.", tx.CancelOn)
		}
		if q != nil && cq != q {
			return nil, nil, errorf(KindNotAllowed, "A transaction cancels scheduled messages only of the queue it settles on ('%s'), not of '%s'.", q.name, tx.CancelOn)
		}
		q = cq
	}
	return q, subs, nil
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
func (b *Broker) txnDests(sends []TxnSend, nowT time.Time) ([]*txnDest, error) {
	if len(sends) == 0 {
		return nil, nil
	}
	byKey := map[string]*txnDest{}
	var dests []*txnDest
	for _, s := range sends {
		p, err := ParsePath(s.To)
		if err != nil {
			return dests, err
		}
		k := entityKey(p.Entity)
		d := byKey[k]
		if d == nil {
			d = &txnDest{key: k}
			if d.q, d.t, _, err = b.lookupSend(s.To); err != nil {
				return dests, err
			}
			byKey[k] = d
			dests = append(dests, d)
		}
		d.msgs = append(d.msgs, s.Msg)
		d.seqs = append(d.seqs, s.Seq)
	}
	slices.SortFunc(dests, func(x, y *txnDest) int { return strings.Compare(x.key, y.key) })
	if err := b.checkGrowth(); err != nil {
		return dests, err
	}
	for _, d := range dests {
		var err error
		if d.pend, d.total, err = encodeSends(d.msgs, time.Time{}, false, nowT); err != nil {
			return dests, err
		}
		id := d.q.idOf(d.t)
		for i, r := range d.seqs {
			if r.Seq == 0 {
				continue
			}
			if r.Entity != id {
				return dests, errorf(KindNotFound, "The entity '%s' was deleted and created again since the transaction scheduled messages on it.", d.name())
			}
			d.pend[i].seq, d.pend[i].reserved = r.Seq, true
		}
	}
	return dests, nil
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
		t.fanout.RUnlock()
		t.inflight.Done()
		_, err := d.ts.answer(ctx, t.name, d.ts.seqs, cerr, gone)
		return err
	}
	q := d.q
	gone := q.publishSend(&d.qs, d.pend, cerr)
	q.inflight.Done()
	_, err := d.qs.answer(ctx, q.name, d.qs.seqs, cerr, gone)
	return err
}

// planTxnLocked locks q and plans the transitions of a transaction's
// settlements and of its cancellations of scheduled messages (cancels,
// sequence numbers): it returns with q.mu held, or on error released with
// nothing changed. Every token must hold its lock now; a token named
// twice is refused.
func (q *entity) planTxnLocked(ss []TxnSettlement, subs []SubQueue, cancels []int64, now int64) ([]transition, error) {
	q.lockAt(now)
	if q.mu.gone != nil {
		err := q.mu.gone
		q.mu.Unlock()
		return nil, err
	}
	if len(cancels) > 0 {
		if err := q.sendCheckLocked(); err != nil {
			q.mu.Unlock()
			return nil, err
		}
	}
	seen := make(map[uuid.UUID]bool, len(ss))
	for i := range ss {
		s := &ss[i]
		if seen[s.Token] {
			q.mu.Unlock()
			return nil, errorf(KindLockLost, "The lock token %s is settled twice in the transaction.", s.Token)
		}
		seen[s.Token] = true
		if _, err := q.lockedRecLocked(subs[i], s.Token, now); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		if s.Kind == TxnDeadLetter && subs[i] != SubQueueMain {
			q.mu.Unlock()
			return nil, errorf(KindNotAllowed, "A message in '%s' cannot be dead-lettered: it is already in a dead-letter queue.", q.path(subs[i]))
		}
		if s.Kind < TxnComplete || s.Kind > TxnDefer {
			q.mu.Unlock()
			return nil, errorf(KindInvalidArgument, "unknown transactional settlement %d", s.Kind)
		}
	}
	q.touchLocked(now)
	ts := make([]transition, 0, len(ss))
	for i := range ss {
		s, sub := &ss[i], subs[i]
		r, _ := q.lockedRecLocked(sub, s.Token, now)
		until, holder := r.until, q.mu.locks[s.Token].holder
		var t transition
		switch s.Kind {
		case TxnComplete:
			q.unlockRecLocked(sub, r)
			t = removeTransitionLocked(sub, r)
		case TxnAbandon:
			if sub != SubQueueMain && s.Props == nil {
				// Nothing durable changes (a dead-letter queue's count is
				// frozen), but the lock must stay until the commit: an
				// unchanged record, made available when applied.
				q.unlockRecLocked(sub, r)
				t = updateTransitionLocked(sub, sub, r, *r, nil)
				break
			}
			var ok bool
			if t, ok = q.lockEndLocked(sub, r, now, s.Props, true); !ok {
				continue // (not reached: the main queue's count rises)
			}
		case TxnDeadLetter:
			q.unlockRecLocked(sub, r)
			t = deadLetterTransitionLocked(r, s.Reason, s.Desc, s.Props)
		case TxnDefer:
			q.unlockRecLocked(sub, r)
			next := *r
			next.state = StateDeferred
			t = updateTransitionLocked(sub, sub, r, next, s.Props)
		}
		t.relock, t.relockUntil, t.relockHolder = s.Token, until, holder // a failed commit keeps the lock
		ts = append(ts, t)
	}
	for _, seq := range cancels { // as CancelScheduled
		r := q.mu.subs[SubQueueMain].idx.get(seq)
		if r == nil || r.busy() || r.state != StateScheduled {
			continue
		}
		ts = append(ts, removeTransitionLocked(SubQueueMain, r))
	}
	return ts, nil
}
