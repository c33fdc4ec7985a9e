package broker

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/store"
)

// Open recovers the broker's state from opts.Store: entities with their
// properties and times, every message's index entry (from Meta alone; the
// data stays in the store), sequence numbers (the store's lastSeq, so none
// is ever reused), delivery counts, deferred/scheduled/dead-letter states
// and the duplicate-detection history. Locks are not recovered: every
// message locked before is available again, its delivery count unchanged.
func Open(opts Options) (*Broker, error) {
	if opts.Store == nil {
		return nil, errorf(KindInvalidArgument, "broker: Options.Store is required")
	}
	b := newBroker(opts)
	now := b.now()
	rc := recovery{b: b, now: now, byID: make(map[uint64]*recovering)}
	err := b.store.Recover(store.Visitor{
		Entity:  rc.entity,
		Message: rc.message,
		Value:   rc.value,
	})
	if err != nil {
		return nil, internal(err, "recovering broker state")
	}
	b.nextID = max(b.nextID, rc.maxID+1)
	for _, r := range rc.order {
		q := r.q
		q.mu.timers.Init(r.timers)
		d := &q.mu.dedup
		slices.SortFunc(d.fifo, func(a, b dedupItem) int { return cmp.Compare(a.at, b.at) })
		b.mu.queues[entityKey(q.name)] = q
		b.timers.byID[q.id] = q
	}
	for _, r := range rc.order {
		r.q.lock()
		r.q.rearmLocked()
		r.q.mu.Unlock()
	}
	if len(rc.drop) > 0 {
		if err := b.store.Commit(&store.Batch{Ops: rc.drop}, false); err != nil {
			return nil, internal(err, "dropping expired duplicate-detection history")
		}
	}
	b.log.Info("broker recovered", "queues", len(rc.order), "messages", rc.messages)
	return b, nil
}

// recovery is the visitor state of Open. It runs before the broker is
// shared, so it touches queue fields without their locks.
type recovery struct {
	b        *Broker
	now      int64
	byID     map[uint64]*recovering
	order    []*recovering
	cur      *recovering
	maxID    uint64
	messages int
	drop     []store.Op // expired dedup values to delete
}

type recovering struct {
	q      *queue
	timers []expiry.Entry
}

func (rc *recovery) entity(e store.Entity) error {
	rc.maxID = max(rc.maxID, e.ID)
	spec, err := decodeSpec(e.Spec)
	if err != nil {
		return fmt.Errorf("entity %d (%q): bad spec: %w", e.ID, e.Name, err)
	}
	switch spec.Kind {
	case specKindNamespace:
		rc.b.nsID = e.ID
	case specKindQueue:
		if spec.Properties == nil {
			return fmt.Errorf("entity %d (%q): spec without properties", e.ID, e.Name)
		}
		q := newQueue(rc.b, e.ID, e.Name, *spec.Properties, spec.Created)
		q.mu.updated = spec.Updated
		q.mu.nextSeq = int64(e.LastSeq) + 1
		r := &recovering{q: q}
		rc.byID[e.ID] = r
		rc.order = append(rc.order, r)
	default:
		return fmt.Errorf("entity %d (%q): unknown kind %q", e.ID, e.Name, spec.Kind)
	}
	return nil
}

// message is the hot path of recovery: decode a few varints, append to a
// block, count, maybe note a timer.
func (rc *recovery) message(m store.Message) error {
	cur := rc.cur
	if cur == nil || cur.q.id != m.EntityID {
		cur = rc.byID[m.EntityID]
		if cur == nil {
			return fmt.Errorf("message %d of unknown entity %d", m.Seq, m.EntityID)
		}
		rc.cur = cur
	}
	q := cur.q
	var r rec
	sub, err := decodeMeta(m.Meta, &r)
	if err != nil {
		return fmt.Errorf("message %d of %q: %w", m.Seq, q.name, err)
	}
	r.seq = int64(m.Seq)
	r.size = int32(m.Size)
	q.mu.subs[sub].idx.insert(r)
	q.mu.subs[sub].count[r.state]++
	q.mu.size += int64(m.Size)
	if r.seq >= q.mu.nextSeq {
		q.mu.nextSeq = r.seq + 1
	}
	if sub == SubQueueMain {
		switch {
		case r.state == StateScheduled:
			cur.timers = append(cur.timers, expiry.Entry{At: r.enq, ID: r.seq, Kind: timerScheduled})
		case r.state == StateActive && r.expiresAt() != 0:
			cur.timers = append(cur.timers, expiry.Entry{At: r.expiresAt(), ID: r.seq, Kind: timerTTL})
		}
	}
	rc.messages++
	return nil
}

func (rc *recovery) value(v store.Value) error {
	if v.EntityID == rc.b.nsID {
		if v.Key == valueNextEntityID {
			n, ok := readBE64(v.Value)
			if !ok {
				return errors.New("bad next-entity-id value")
			}
			rc.b.nextID = uint64(n)
		}
		return nil
	}
	r := rc.byID[v.EntityID]
	if r == nil {
		return nil // values of an entity we do not know: ignore
	}
	q := r.q
	switch {
	case v.Key == valueAccessed:
		if at, ok := readBE64(v.Value); ok {
			q.mu.accessed, q.mu.accessedSaved = at, at
		}
	case strings.HasPrefix(v.Key, valueDedupPrefix):
		at, ok := readBE64(v.Value)
		window := int64(q.mu.props.DuplicateDetectionHistoryTimeWindow)
		if !ok || !q.mu.props.RequiresDuplicateDetection || at+window <= rc.now {
			rc.drop = append(rc.drop, store.Op{Kind: store.OpDeleteValue, EntityID: v.EntityID, Key: v.Key})
			return nil
		}
		q.mu.dedup.add(strings.TrimPrefix(v.Key, valueDedupPrefix), at, nil)
	}
	return nil
}
