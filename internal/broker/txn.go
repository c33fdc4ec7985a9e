package broker

import (
	"context"
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
// of one receiving entity and sends to one queue or topic (either may be
// empty). Service Bus limits a transaction to one entity, or to sends
// through a via entity (docs/wire/transactions.md); the protocol layer
// enforces those rules, this one only that it can apply the whole as one
// store batch.
type Txn struct {
	Settlements []TxnSettlement
	SendTo      string
	Sends       []*message.Message
}

// CommitTxn applies tx atomically and durably: when it returns nil every
// settlement and send is durable and visible; on error none is, and every
// message the transaction settles is still locked under its token (a
// message whose lock was lost meanwhile fails the whole commit with
// KindLockLost).
func (b *Broker) CommitTxn(ctx context.Context, tx *Txn) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := len(tx.Settlements) + len(tx.Sends); n > MaxTxnOperations {
		return errorf(KindQuotaExceeded, "The transaction holds %d operations, over the limit of %d per transaction.", n, MaxTxnOperations)
	}
	var (
		q    *entity
		subs = make([]SubQueue, len(tx.Settlements))
	)
	for i := range tx.Settlements {
		s := &tx.Settlements[i]
		e, p, err := b.lookup(s.Path)
		if err != nil {
			return err
		}
		if q != nil && e != q {
			return errorf(KindNotAllowed, "A transaction's settlements must all be on one queue or subscription; '%s' is another one than '%s'.", s.Path, q.name)
		}
		if err := validateProps(s.Props); err != nil {
			return err
		}
		q, subs[i] = e, p.SubQueue
	}
	var (
		dq    *entity
		dt    *topic
		pend  []pendingMsg
		total int64
	)
	nowT := b.clock.Now()
	if len(tx.Sends) > 0 {
		var err error
		if dq, dt, _, err = b.lookupSend(tx.SendTo); err != nil {
			return err
		}
		if err := b.checkGrowth(); err != nil {
			return err
		}
		if pend, total, err = encodeSends(tx.Sends, time.Time{}, false, nowT); err != nil {
			releaseSendData(pend)
			return err
		}
		defer releaseSendData(pend)
	}

	// Phase 1: the settlements, planned under the receiving entity's lock.
	now := nowT.UnixNano()
	var (
		ts  []transition
		ops []store.Op
	)
	if q != nil {
		var err error
		if ts, err = q.planTxnLocked(tx.Settlements, subs, now); err != nil {
			return err
		}
		ops = q.saveAccessedLocked(nil)
		q.inflight.Add(1)
		q.mu.Unlock()
		defer q.inflight.Done()
		ops = append(q.transitionOps(nil, ts), ops...)
	}
	var garbage []int64
	if q != nil && q.topic != nil {
		garbage = q.topic.takeGarbage() // shared data freed earlier rides along
		ops = q.topic.appendGarbageOps(ops, garbage)
	}

	// Phase 2: one synced store batch.
	var (
		err       error
		committed bool
	)
	switch {
	case len(pend) > 0:
		fw := &forwardBatch{ops: ops}
		if dt != nil {
			setDedupKeys(pend)
			_, err = dt.enqueue(ctx, pend, total, now, nil, fw)
		} else {
			_, err = dq.enqueue(ctx, pend, total, now, nil, fw)
		}
		committed = fw.committed
		if committed {
			name := tx.SendTo
			b.obs.Sent(name, len(pend), b.clock.Now().Sub(nowT))
		}
	case len(ops) > 0:
		batch := store.Batch{Ops: ops}
		if err = b.store.Commit(&batch, true); err != nil {
			err = internal(err, "store commit of a transaction on %s", q.name)
		}
		committed = err == nil
	default:
		committed = true
	}
	if !committed && garbage != nil {
		q.topic.returnGarbage(garbage)
	}

	// Phase 3: applied, or every message locked again as it was.
	if q != nil {
		var aerr error
		if !committed {
			aerr = err
			if aerr == nil {
				aerr = errForwardRetry
			}
		}
		q.lockAndPublish()
		q.applyLocked(ts, aerr, now)
		q.rearmLocked()
		q.mu.Unlock()
	}
	if committed {
		if q != nil {
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
		return nil
	}
	if err == nil {
		err = internal(errForwardRetry, "transaction not committed")
	}
	return err
}

// planTxnLocked locks q and plans the transitions of a transaction's
// settlements: it returns with q.mu held, or on error released with
// nothing changed. Every token must hold its lock now; a token named
// twice is refused.
func (q *entity) planTxnLocked(ss []TxnSettlement, subs []SubQueue, now int64) ([]transition, error) {
	q.lockAt(now)
	if q.mu.gone != nil {
		err := q.mu.gone
		q.mu.Unlock()
		return nil, err
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
	return ts, nil
}
