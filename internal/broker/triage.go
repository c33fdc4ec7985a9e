package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Operator operations: what the web console (package console) does to
// chosen messages, by sequence number, without a client receive.
//
// Resubmit moves dead letters back to a queue or topic the way
// auto-forwarding moves messages (forward.go): the removal from the
// dead-letter queue and the destination's own enqueue are ONE synced
// store batch, so a crash leaves each message in exactly one of the two,
// never both and never neither. Inspect is Peek with the locks shown.
// RemoveMessages deletes chosen messages durably, DeadLetterMessages
// dead-letters them, AbandonMessages counts a delivery of each.
//
// Each takes at most MaxTriageBatch sequence numbers per call; a message
// that is locked, being settled or gone is skipped and counted, never
// waited for.

// MaxTriageBatch is the most sequence numbers one Resubmit or
// RemoveMessages call takes.
const MaxTriageBatch = 1024

// TriageResult says what a Resubmit or RemoveMessages did.
type TriageResult struct {
	Done    int     // moved (Resubmit), removed (RemoveMessages), dead-lettered or abandoned
	Skipped []int64 // not there, locked or busy: left as they were
	// DeadLettered is, for AbandonMessages, how many of Done reached
	// MaxDeliveryCount and went to the dead-letter queue.
	DeadLettered int
}

// Inspect is Peek for an operator: up to max messages of path (any
// sub-queue) from fromSeq on, every state, with each lock's expiry in
// LockedUntil and its holder in LockHolder. Unlike Peek it does not count as use of the entity (idle
// deletion). On a topic it shows the scheduled messages not yet fanned
// out (the only messages a topic holds). With a ctx of
// WithStreamedBodies it streams large bodies as Peek does (a topic's
// scheduled messages are read whole).
func (b *Broker) Inspect(ctx context.Context, path string, fromSeq int64, max int) ([]*Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t, err := b.topicByName(path); err == nil {
		return t.inspectScheduled(path, fromSeq, max)
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return nil, err
	}
	q.lockAt(b.now())
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return nil, q.mu.gone
	}
	var snap []rec
	var holders map[int64]string // seq → lock holder, of locked ones that named one
	stream, nstreamed := peekStream(ctx), 0
	if max > 0 {
		q.mu.subs[p.SubQueue].idx.ascend(fromSeq, func(r *rec) bool {
			if r.flags&flagPending != 0 {
				return true
			}
			snap = append(snap, *r)
			if r.locked() {
				if h := q.lockHolderLocked(p.SubQueue, r.seq); h != "" {
					if holders == nil {
						holders = make(map[int64]string)
					}
					holders[r.seq] = h
				}
			}
			return peekMore(snap, max, stream, &nstreamed)
		})
	}
	q.mu.Unlock()
	ds, err := q.peekDeliveries(snap, path, stream)
	for _, d := range ds {
		d.LockHolder = holders[d.SequenceNumber]
	}
	return ds, err
}

// takeLocked marks the records of seqs in sub busy and returns snapshots
// of them, and the sequence numbers it skipped (absent, locked, busy).
func (q *entity) triageTakeLocked(sub SubQueue, seqs []int64) (taken []rec, skipped []int64) {
	for _, s := range seqs {
		r := q.mu.subs[sub].idx.get(s)
		if r == nil || r.busy() || r.locked() {
			skipped = append(skipped, s)
			continue
		}
		markBusyLocked(r)
		taken = append(taken, *r)
	}
	return taken, skipped
}

func checkTriageBatch(seqs []int64) ([]int64, error) {
	if len(seqs) > MaxTriageBatch {
		return nil, errorf(KindInvalidArgument, "At most %d messages can be handled in one request; %d were given.", MaxTriageBatch, len(seqs))
	}
	seqs = slices.Clone(seqs)
	slices.Sort(seqs)
	return slices.Compact(seqs), nil
}

// Resubmit moves the messages seqs of path, a dead-letter queue or
// transfer dead-letter queue, to target (a queue or topic, which may be
// the entity they were dead-lettered in), removing their
// DeadLetterReason and DeadLetterErrorDescription properties and, if
// edit is not nil, changing each with edit first (it may change the body
// and properties; an error refuses the whole call). The destination
// enqueues them as a send (its sequence numbers, enqueued time, TTL
// defaults, checks, fan-out for a topic); duplicate detection does not
// drop them. Each group of up to forwardBatchMax messages (forwardBatchBytes)
// is one synced store batch with their removal: a failure leaves the
// group where it was, and Done counts the groups already moved.
func (b *Broker) Resubmit(ctx context.Context, path string, seqs []int64, target string, edit func(*message.Message) error) (TriageResult, error) {
	var res TriageResult
	seqs, err := checkTriageBatch(seqs)
	if err != nil {
		return res, err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return res, err
	}
	if p.SubQueue == SubQueueMain {
		return res, errorf(KindInvalidArgument, "Only dead-lettered messages can be resubmitted; '%s' is not a dead-letter queue.", path)
	}
	if _, _, _, err := b.lookupSend(target); err != nil {
		return res, err
	}
	now := b.now()
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return res, q.mu.gone
	}
	taken, skipped := q.triageTakeLocked(p.SubQueue, seqs)
	res.Skipped = skipped
	q.inflight.Add(1)
	q.mu.Unlock()
	defer q.inflight.Done()

	for len(taken) > 0 {
		var (
			pend  []pendingMsg
			moved []transition
			total int64
			n     int
		)
		for n < len(taken) && n < forwardBatchMax && total < forwardBatchBytes {
			r := &taken[n]
			m, data, err := q.resubmitData(r, edit)
			if err != nil {
				q.release(p.SubQueue, taken, now)
				return res, err
			}
			pend = append(pend, pendingMsg{m: m, data: data, ttl: int64(m.TTL), hasSess: m.HasSessionID()})
			moved = append(moved, transition{seq: r.seq, from: p.SubQueue, remove: true})
			total += int64(len(data))
			n++
		}
		if err := ctx.Err(); err != nil {
			q.release(p.SubQueue, taken, now)
			return res, err
		}
		committed, err := q.sendForward(target, pend, moved, total, now)
		q.lockAndPublish()
		if committed {
			q.applyLocked(moved, nil, now)
		}
		q.mu.Unlock()
		if !committed {
			q.release(p.SubQueue, taken, now)
			return res, err
		}
		res.Done += n
		taken = taken[n:]
	}
	return res, nil
}

// release gives back records taken by triageTakeLocked, unchanged.
func (q *entity) release(sub SubQueue, taken []rec, now int64) {
	ts := make([]transition, len(taken))
	for i := range taken {
		ts[i] = transition{seq: taken[i].seq, from: sub, remove: true}
	}
	q.lockAndPublish()
	q.applyLocked(ts, errTriageReleased, now)
	q.mu.Unlock()
}

var errTriageReleased = errorf(KindInternal, "released")

// resubmitData reads r and encodes it as it is resubmitted.
func (q *entity) resubmitData(r *rec, edit func(*message.Message) error) (*message.Message, []byte, error) {
	data, err := q.readData(r)
	if err != nil {
		return nil, nil, internal(err, "reading message %d of %s", r.seq, q.name)
	}
	m, err := message.Unmarshal(data)
	if err != nil {
		return nil, nil, internal(err, "decoding message %d of %s", r.seq, q.name)
	}
	delete(m.ApplicationProperties, PropDeadLetterReason)
	delete(m.ApplicationProperties, PropDeadLetterErrorDescription)
	delete(m.Annotations, DeadLetterSourceAnnotation)
	if edit != nil {
		if err := edit(m); err != nil {
			return nil, nil, &Error{Kind: KindInvalidArgument, Msg: fmt.Sprintf("message %d cannot be edited: %v", r.seq, err), Err: err}
		}
	}
	b, err := message.Marshal(m)
	if err != nil {
		return nil, nil, &Error{Kind: KindInvalidArgument, Msg: fmt.Sprintf("message %d cannot be encoded after the edit: %v", r.seq, err), Err: err}
	}
	return m, b, nil
}

// RemoveMessages deletes the messages seqs of path (any sub-queue) in one
// synced store batch. Locked, busy or absent ones are skipped. A
// scheduled message of a topic is cancelled with CancelScheduled instead.
func (b *Broker) RemoveMessages(ctx context.Context, path string, seqs []int64) (TriageResult, error) {
	var res TriageResult
	seqs, err := checkTriageBatch(seqs)
	if err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return res, err
	}
	now := b.now()
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return res, q.mu.gone
	}
	taken, skipped := q.triageTakeLocked(p.SubQueue, seqs)
	res.Skipped = skipped
	q.inflight.Add(1)
	q.mu.Unlock()
	defer q.inflight.Done()
	if len(taken) == 0 {
		return res, nil
	}
	ts := make([]transition, len(taken))
	for i := range taken {
		ts[i] = transition{seq: taken[i].seq, from: p.SubQueue, remove: true}
	}
	err = q.persist(nil, ts, nil, true)
	q.lockAndPublish()
	q.applyLocked(ts, err, now)
	q.mu.Unlock()
	if err != nil {
		return res, err
	}
	res.Done = len(ts)
	return res, nil
}

// inspectScheduled lists up to max of the topic's scheduled messages from
// fromSeq on.
func (t *topic) inspectScheduled(path string, fromSeq int64, max int) ([]*Delivery, error) {
	t.lockAndPublish()
	if t.mu.gone != nil {
		defer t.mu.Unlock()
		return nil, t.mu.gone
	}
	var snap []rec
	if max > 0 {
		t.mu.idx.ascend(fromSeq, func(r *rec) bool {
			if r.state != StateScheduled || r.flags&flagPending != 0 {
				return true
			}
			snap = append(snap, *r)
			return len(snap) < max
		})
	}
	t.mu.Unlock()
	refs := make([]store.DataRef, len(snap))
	for i := range snap {
		refs[i] = store.DataRef{EntityID: t.id, Seq: uint64(snap[i].seq)}
	}
	datas, errs := t.b.store.ReadDataBatch(refs)
	ds := make([]*Delivery, 0, len(snap))
	for i := range snap {
		err := errs[i]
		var d *Delivery
		if err == nil {
			d, err = decodeDelivery(datas[i], &snap[i], uuid.UUID{})
		}
		if errors.Is(err, store.ErrNotFound) {
			continue // fanned out or cancelled meanwhile
		}
		if err != nil {
			return nil, internal(err, "reading message %d of %s", snap[i].seq, path)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// mainTriage is the shape DeadLetterMessages and AbandonMessages share:
// check the batch, resolve path's main queue (a dead-letter queue is
// refused with dlqMsg), plan the transitions under the entity's lock
// (plan appends what it skips to res.Skipped), then commit them in one
// synced store batch and apply them.
func (b *Broker) mainTriage(ctx context.Context, path string, seqs []int64, dlqMsg string,
	plan func(q *entity, seqs []int64, now int64, res *TriageResult) []transition) (TriageResult, error) {
	var res TriageResult
	seqs, err := checkTriageBatch(seqs)
	if err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return res, err
	}
	if p.SubQueue != SubQueueMain {
		return res, errorf(KindInvalidArgument, dlqMsg, path)
	}
	now := b.now()
	q.lockAt(now)
	if q.mu.gone != nil {
		defer q.mu.Unlock()
		return res, q.mu.gone
	}
	ts := plan(q, seqs, now, &res)
	if len(ts) == 0 {
		q.mu.Unlock()
		return res, nil
	}
	// Synced: the change is durable before it is reported.
	if err := q.commitAndUnlock(ts, nil, true, now); err != nil {
		return res, err
	}
	res.Done = len(ts)
	return res, nil
}

// DeadLetterMessages moves the messages seqs of path's main queue (a
// queue or subscription) to its dead-letter queue with reason and
// description, as a receiver's dead-lettering would, in one synced store
// batch. Locked, busy, scheduled or absent ones are skipped.
func (b *Broker) DeadLetterMessages(ctx context.Context, path string, seqs []int64, reason, desc string) (TriageResult, error) {
	return b.mainTriage(ctx, path, seqs, "'%s' is a dead-letter queue already; only messages of a queue or subscription can be dead-lettered.",
		func(q *entity, seqs []int64, _ int64, res *TriageResult) []transition {
			var ts []transition
			for _, s := range seqs {
				r := q.mu.subs[SubQueueMain].idx.get(s)
				if r == nil || r.busy() || r.locked() || r.state == StateScheduled {
					res.Skipped = append(res.Skipped, s)
					continue
				}
				ts = append(ts, deadLetterTransitionLocked(r, reason, desc, nil))
			}
			return ts
		})
}

// AbandonMessages does to the messages seqs of path (a queue or
// subscription, not a dead-letter queue) what a client's receive and
// abandon would: each one's delivery count rises by one, durably, and one
// that reaches MaxDeliveryCount is dead-lettered with
// MaxDeliveryCountExceeded (counted in DeadLettered); an expired one
// expires. Active and deferred messages qualify (a deferred one stays
// deferred); locked, scheduled, busy and missing ones, and those of a
// session a receiver holds, are skipped.
func (b *Broker) AbandonMessages(ctx context.Context, path string, seqs []int64) (TriageResult, error) {
	return b.mainTriage(ctx, path, seqs, "'%s' is a dead-letter queue: the delivery count of a dead letter does not change, so there is nothing to abandon.",
		func(q *entity, seqs []int64, now int64, res *TriageResult) []transition {
			maxDC := uint32(q.mu.props.MaxDeliveryCount)
			var ts []transition
			for _, s := range seqs {
				r := q.mu.subs[SubQueueMain].idx.get(s)
				if r == nil || r.busy() || r.locked() || r.state == StateScheduled ||
					(r.sess != 0 && q.sessionHeldLocked(r.sess, now)) {
					res.Skipped = append(res.Skipped, s)
					continue
				}
				next := *r
				next.dc++
				var t transition
				switch {
				case next.dc >= maxDC:
					t = deadLetterTransitionLocked(r, ReasonMaxDeliveryCountExceeded,
						fmt.Sprintf("Message could not be consumed after %d delivery attempts.", maxDC), nil)
					t.next.dc = next.dc
					res.DeadLettered++
				case r.state == StateActive && r.expired(now):
					t = q.expireLocked(r, nil)
					t.next.dc = next.dc
				default:
					t = updateTransitionLocked(SubQueueMain, SubQueueMain, r, next, nil)
				}
				t.why = history.Abandoned
				ts = append(ts, t)
			}
			return ts
		})
}
