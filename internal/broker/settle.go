package broker

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/store"
)

// Settlement by lock token, on a queue's or a subscription's paths alike.
// A token resolves across the whole entity path
// it was issued for (any receiver, or none: receivers may be closed), as
// Service Bus's management-link settlement needs. An unknown, expired or
// already used token is KindLockLost and changes nothing. Every
// settlement is durable when it returns.

type settleKind uint8

const (
	settleComplete settleKind = iota
	settleAbandon
	settleRelease
	settleDeadLetter
	settleDefer
)

// Complete removes the locked message. Completing a message whose TTL
// passed while it was locked succeeds.
func (b *Broker) Complete(ctx context.Context, path string, token uuid.UUID) error {
	return b.settle(ctx, path, token, settleComplete, nil, "", "")
}

// CompleteBatch completes the messages locked with toks, as Complete does
// for each, with one store commit for all of them. The result has one
// entry per token, in order: nil for a completed message, or the error
// Complete would have returned for that token alone (a lost, expired or
// already used lock fails only its own token; a token that appears twice
// completes once and the repeat reports the lock lost). An error that
// concerns the whole call (an unknown path, a deleted entity, a failed
// commit, a cancelled ctx) is the result of every token it affects. Every
// completion is durable when it returns.
func (b *Broker) CompleteBatch(ctx context.Context, path string, toks []uuid.UUID) []error {
	return b.completeBatch(ctx, path, toks, nil)
}

// completeBatch is CompleteBatch; fol, when not nil, is the committer's
// pacing (Settler).
func (b *Broker) completeBatch(ctx context.Context, path string, toks []uuid.UUID, fol *store.Follower) []error {
	errs := make([]error, len(toks))
	fill := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	if len(toks) == 0 {
		return errs
	}
	if err := ctx.Err(); err != nil {
		return fill(err)
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return fill(err)
	}
	sub := p.SubQueue
	now := b.now()
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return fill(q.mu.gone)
	}
	ts := make([]transition, 0, len(toks))
	done := make([]int, 0, len(toks)) // indexes of toks with a transition in ts
	for i, tok := range toks {
		r, err := q.lockedRecLocked(sub, tok, now)
		if err != nil {
			errs[i] = err
			continue
		}
		until, holder := r.until, q.mu.locks[tok].holder
		q.unlockRecLocked(sub, r)
		t := removeTransitionLocked(sub, r)
		t.relock, t.relockUntil, t.relockHolder = tok, until, holder
		t.why = history.Completed
		ts = append(ts, t)
		done = append(done, i)
	}
	if len(ts) == 0 {
		q.mu.Unlock()
		return errs
	}
	q.touchLocked(now)
	if err := q.commitAndUnlockAs(fol, ts, q.saveAccessedLocked(nil), true, now); err != nil {
		for _, i := range done {
			errs[i] = err
		}
		return errs
	}
	b.obs.Settled(q.name, OutcomeComplete, len(done), time.Duration(b.now()-now))
	return errs
}

// Abandon unlocks the message at once and raises its delivery count (in
// the main queue; a dead-letter queue's count is frozen). It becomes
// available again in sequence order, unless that was its last allowed
// delivery (MaxDeliveryCount: dead-lettered) or it expired meanwhile. A
// deferred message stays deferred. props, if any, are set as application
// properties.
func (b *Broker) Abandon(ctx context.Context, path string, token uuid.UUID, props map[string]any) error {
	return b.settle(ctx, path, token, settleAbandon, props, "", "")
}

// Release unlocks the message without raising its delivery count (the
// AMQP "released" outcome, used by the Go SDK for prefetched messages it
// did not hand out).
func (b *Broker) Release(ctx context.Context, path string, token uuid.UUID) error {
	return b.settle(ctx, path, token, settleRelease, nil, "", "")
}

// DeadLetter moves the locked message to its entity's dead-letter queue
// with the DeadLetterReason and DeadLetterErrorDescription application
// properties (each set when non-empty) and props. A message that is
// already in a dead-letter queue cannot be dead-lettered (KindNotAllowed).
func (b *Broker) DeadLetter(ctx context.Context, path string, token uuid.UUID, reason, description string, props map[string]any) error {
	return b.settle(ctx, path, token, settleDeadLetter, props, reason, description)
}

// Defer sets the locked message aside: it stays in its (sub-)queue,
// visible to Peek, and can only be received again with ReceiveDeferred.
// The delivery count does not change.
func (b *Broker) Defer(ctx context.Context, path string, token uuid.UUID, props map[string]any) error {
	return b.settle(ctx, path, token, settleDefer, props, "", "")
}

func (b *Broker) settle(ctx context.Context, path string, tok uuid.UUID, k settleKind, props map[string]any, reason, desc string) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return err
	}
	if err := validateProps(props); err != nil {
		return err
	}
	sub := p.SubQueue
	now := b.now()
	defer func() {
		if err == nil {
			b.obs.Settled(q.name, outcomeOf(k), 1, time.Duration(b.now()-now))
		}
	}()
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return q.mu.gone
	}
	r, err := q.lockedRecLocked(sub, tok, now)
	if err != nil {
		q.mu.Unlock()
		return err
	}
	if k == settleDeadLetter && sub != SubQueueMain {
		q.mu.Unlock()
		return errorf(KindNotAllowed, "A message in '%s' cannot be dead-lettered: it is already in a dead-letter queue.", q.path(sub))
	}
	q.touchLocked(now)
	until, holder := r.until, q.mu.locks[tok].holder
	var t transition
	switch k {
	case settleComplete:
		q.unlockRecLocked(sub, r)
		t = removeTransitionLocked(sub, r)
		t.why = history.Completed
	case settleAbandon, settleRelease:
		why := history.Released
		if k == settleAbandon {
			why = history.Abandoned
		}
		var ok bool
		t, ok = q.lockEndLocked(sub, r, now, props, k == settleAbandon)
		if !ok {
			if q.b.hist != nil {
				q.recordLockEndLocked(why, sub, r, tok, holder, now)
			}
			q.rearmLocked()
			q.mu.Unlock()
			return nil
		}
		t.why = why
	case settleDeadLetter:
		q.unlockRecLocked(sub, r)
		t = deadLetterTransitionLocked(r, reason, desc, props)
	case settleDefer:
		q.unlockRecLocked(sub, r)
		next := *r
		next.state = StateDeferred
		t = updateTransitionLocked(sub, sub, r, next, props)
		t.why = history.Deferred
	}
	t.relock, t.relockUntil, t.relockHolder = tok, until, holder // a failed commit keeps the lock
	return q.commitAndUnlock([]transition{t}, q.saveAccessedLocked(nil), true, now)
}

// RenewLock extends each lock to LockDuration from now and returns the new
// expiry times, in order. If any token is lost, none is renewed.
func (b *Broker) RenewLock(ctx context.Context, path string, tokens []uuid.UUID) ([]time.Time, error) {
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
	for _, tok := range tokens {
		r, err := q.lockedRecLocked(p.SubQueue, tok, now)
		if err != nil {
			return nil, err
		}
		if r.sess != 0 {
			return nil, errorf(KindNotAllowed, "The lock of a message of a session cannot be renewed on its own: renew the session lock (renew-session-lock) instead.")
		}
	}
	q.touchLocked(now)
	until := now + int64(q.mu.props.LockDuration)
	out := make([]time.Time, len(tokens))
	for i, tok := range tokens {
		r, _ := q.lockedRecLocked(p.SubQueue, tok, now)
		if r.until != until {
			r.until = until
			q.armRecLocked(p.SubQueue, r, 0)
		}
		if q.b.hist != nil {
			q.b.hist.Record(q.name, r.seq, "", history.Event{At: now, Kind: history.Renewed, Sub: uint8(p.SubQueue),
				ToSub: uint8(p.SubQueue), LockToken: tok, Until: until, By: q.mu.locks[tok].holder, DeliveryCount: r.dc + 1})
		}
		out[i] = time.Unix(0, until).UTC()
	}
	q.rearmLocked()
	return out, nil
}

// CheckLocks reports for each token whether it still holds the lock on a
// message of path: nil if it does, else the error a settlement with it
// would get now (lock lost, session lock lost). It changes nothing; the
// Service Bus layer uses it to forget deliveries whose locks are gone.
func (b *Broker) CheckLocks(path string, tokens []uuid.UUID) ([]error, error) {
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
	errs := make([]error, len(tokens))
	for i, tok := range tokens {
		_, errs[i] = q.lockedRecLocked(p.SubQueue, tok, now)
	}
	return errs, nil
}
