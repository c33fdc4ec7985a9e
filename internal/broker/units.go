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

// errDraining refuses new work on an entity whose unit is being handed
// off: retriable, as a move.
func errDraining(name string) *Error {
	return errorf(KindMoved, "the messaging entity '%s' is moving to another node of the cluster; retry", name)
}

// DrainUnit prepares unit for a hand-off (cluster.Drainer;
// docs/design/cluster.md §10.3 steps 2 and 3): from now on it admits no
// new work — sends and schedules to it are refused (KindMoved, retriable),
// new receivers and session accepts are refused alike, its receivers get
// no new deliveries and its forwarder stops — while the locks already
// held may still be settled, renewed or dead-lettered. The node then
// waits out its drain budget and unloads the unit (UnloadUnit, which
// waits for the commits in flight: the flush). A unit loaded again
// starts undrained. Draining a unit that is not loaded does nothing.
func (b *Broker) DrainUnit(unit uint64) {
	b.admin.Lock() // against a subscription created meanwhile
	defer b.admin.Unlock()
	b.mu.RLock()
	var q *entity
	var t *topic
	for _, x := range b.mu.queues {
		if x.id == unit {
			q = x
			break
		}
	}
	if q == nil {
		for _, x := range b.mu.topics {
			if x.id == unit {
				t = x
				break
			}
		}
	}
	b.mu.RUnlock()
	switch {
	case q != nil:
		q.draining.Store(true)
		b.log.Info("unit draining", "unit", unit, "queue", q.name)
	case t != nil:
		t.draining.Store(true)
		for _, s := range t.subs.Load().list {
			s.draining.Store(true)
		}
		b.log.Info("unit draining", "unit", unit, "topic", t.name)
	}
}

// UnitDrained reports whether a draining unit holds nothing a client
// could still settle: no message locked, no session held
// (cluster.DrainWatcher). A unit that is not loaded or not draining is
// not drained.
func (b *Broker) UnitDrained(unit uint64) bool {
	b.mu.RLock()
	var ents []*entity
	draining := false
	for _, x := range b.mu.queues {
		if x.id == unit {
			ents, draining = []*entity{x}, x.draining.Load()
			break
		}
	}
	if ents == nil {
		for _, x := range b.mu.topics {
			if x.id == unit {
				ents, draining = x.subs.Load().list, x.draining.Load()
				break
			}
		}
	}
	b.mu.RUnlock()
	if !draining {
		return false
	}
	for _, q := range ents {
		q.lockAndPublish()
		held := len(q.mu.locks) > 0
		if q.ss != nil && !held {
			for _, s := range q.ss.byID {
				if s.owner != nil {
					held = true
					break
				}
			}
		}
		q.mu.Unlock()
		if held {
			return false
		}
	}
	return true
}

// Moving reports, for a queue or topic path, whether its unit is being
// handed off (DrainUnit): KindMoved then, nil otherwise (or unknown).
func (b *Broker) Moving(path string) error {
	p, err := ParsePath(path)
	if err != nil {
		return nil
	}
	b.mu.RLock()
	q := b.mu.queues[entityKey(p.Entity)]
	t := b.mu.topics[entityKey(p.Entity)]
	b.mu.RUnlock()
	if q != nil && q.draining.Load() || t != nil && t.draining.Load() {
		return errDraining(p.Entity)
	}
	return nil
}

// ServesUnit tells whether unit is loaded: its queue or topic is served
// here (loaded by LoadUnit, or created here).
func (b *Broker) ServesUnit(unit uint64) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, q := range b.mu.queues {
		if q.id == unit {
			return true
		}
	}
	for _, t := range b.mu.topics {
		if t.id == unit {
			return true
		}
	}
	return false
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
			b.mu.moved[k] = true
			break
		}
	}
	if q == nil {
		for k, x := range b.mu.topics {
			if x.id == unit {
				t = x
				delete(b.mu.topics, k)
				b.mu.moved[k] = true
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
