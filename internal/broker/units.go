package broker

import (
	"context"
	"errors"

	"github.com/busbarmq/busbar/internal/store"
)

// Units of a cluster (docs/design/cluster.md §7): a unit is a queue, or a
// topic with its subscriptions, and its id is the queue's or topic's
// entity id. A broker opened with Options.Units starts with none; the
// cluster node that acquired a unit loads it here, and unloads it when
// another node owns it or it is handed off.

// goneErr is what a sender learns when its entity went away meanwhile:
// moved to another node, or deleted.
func goneErr(name string, moved bool) *Error {
	if moved {
		return errorf(KindMoved, "the messaging entity '%s' moved to another node of the cluster; retry", name)
	}
	return errEntityNotFound(name)
}

// LoadUnit rebuilds one unit from the store, as Open does for all of
// them, and serves it: its entities, messages (every one available, none
// locked), timers, sessions, duplicate-detection history and rules. What
// the broker held of the unit before is dropped first (a node that takes
// a unit again never serves it from its old memory). The store must be a
// store.UnitStore that has acquired the unit.
func (b *Broker) LoadUnit(ctx context.Context, unit uint64) error {
	us, ok := b.store.(store.UnitStore)
	if !ok {
		return errorf(KindInvalidArgument, "broker: the store does not load units one by one")
	}
	b.admin.Lock()
	defer b.admin.Unlock()
	b.mu.RLock()
	closed := b.mu.closed
	b.mu.RUnlock()
	if closed {
		return errClosed()
	}
	b.unloadLocked(unit, errors.New("the unit is loaded again"))()
	rc := recovery{b: b, now: b.now(), byID: make(map[uint64]*recovering)}
	err := us.RecoverUnit(ctx, unit, store.Visitor{Entity: rc.entity, Message: rc.message, Value: rc.value})
	if err != nil {
		return internal(err, "loading unit %d", unit)
	}
	b.nextID = max(b.nextID, rc.maxID+1)
	if err := b.install(&rc); err != nil {
		return err
	}
	b.log.Info("unit loaded", "unit", unit, "entities", len(rc.order)+len(rc.topics), "messages", rc.messages)
	return nil
}

// UnloadUnit stops serving unit: its queue, or its topic and
// subscriptions, leave the broker's maps; receivers waiting on them and
// operations that reach them fail with KindMoved (cause is kept for the
// log), message and session locks are forgotten (settling one later is
// lock-lost), and commits in flight are waited for (the store answers
// them: committed before a takeover, or fenced off). Nothing is written.
// Unloading a unit that is not loaded does nothing. The unit stops being
// served at once; only the wait for its commits runs without the broker's
// admin lock, so units unloaded concurrently all stop at once even while
// the database holds their commits (a node cut off from it).
func (b *Broker) UnloadUnit(unit uint64, cause error) {
	b.admin.Lock()
	wait := b.unloadLocked(unit, cause)
	b.admin.Unlock()
	wait()
}

// unloadLocked is UnloadUnit with b.admin held, but for the wait for
// the commits in flight, which it returns.
func (b *Broker) unloadLocked(unit uint64, cause error) (wait func()) {
	var q *entity
	var t *topic
	b.mu.Lock()
	for k, x := range b.mu.queues {
		if x.id == unit {
			q = x
			delete(b.mu.queues, k)
			break
		}
	}
	if q == nil {
		for k, x := range b.mu.topics {
			if x.id == unit {
				t = x
				delete(b.mu.topics, k)
				break
			}
		}
	}
	b.mu.Unlock()
	var gone []*entity
	switch {
	case q != nil:
		b.log.Info("unit unloaded", "unit", unit, "queue", q.name, "cause", cause)
		b.timers.Lock()
		delete(b.timers.byID, q.id)
		b.timers.Unlock()
		unloadEntity(q, cause)
		gone = append(gone, q)
	case t != nil:
		b.log.Info("unit unloaded", "unit", unit, "topic", t.name, "cause", cause)
		subs := t.subs.Load().list
		t.moved.Store(true)
		t.forget(subs, &Error{Kind: KindMoved, Msg: goneErr(t.name, true).Msg, Err: cause})
		for _, q := range subs {
			unloadEntity(q, cause)
		}
		gone = subs
	}
	return func() {
		for _, q := range gone {
			q.inflight.Wait()
		}
	}
}

// unloadEntity fails q's waiters and forgets its state (locks included);
// its commits in flight may still be running (q.inflight).
func unloadEntity(q *entity, cause error) {
	q.moved.Store(true)
	q.deleted.Store(true)
	q.lockAndPublish()
	q.mu.gone = &Error{Kind: KindMoved, Msg: goneErr(q.name, true).Msg, Err: cause}
	q.wakeAllLocked()
	q.releaseLocked()
	q.mu.Unlock()
}
