package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Forwarding between units of different owners (a cluster,
// docs/design/cluster.md §9.3): the outbox.
//
// # Source
//
// A forward whose target this broker does not serve (forward.go) goes
// through the store's outbox when the broker runs units (Options.Units on
// a store.Outbox): the catalog names the target's unit (none: the message
// goes to the transfer dead-letter queue, MessagingEntityNotFound, as on
// one node); the target's Spec, as its owner last committed it, must
// allow sending, and each message must fit its size limit and session
// requirement (else the transfer dead-letter queue, as on one node; the
// quota is checked at landing); while that unit has more than Options.TransferBacklog
// transfers waiting, the messages stay in the source (counted as
// Transfer) and are tried again after retryDelay, logged once per episode;
// otherwise ONE synced, fenced commit of the source unit removes the
// messages from the source and inserts one transfer each (store.OpTransfer:
// the message's record with the transfer header below). A forward to a
// unit this broker serves is today's single batch, unless transfers still
// wait to land in it (it was just taken over): then it goes through the
// outbox too, behind them, so that it does not overtake them. A single
// node never builds a transfer.
//
// # Target
//
// LandTransfers is called by the node that owns the target unit with its
// pending transfers, oldest first per source. Forwarded messages are
// enqueued as a local forward is (the target's checks, sequence numbers,
// enqueued time, default TTL, a topic's fan-out; no duplicate detection),
// their store batch carrying the OpLand that deletes the claimed rows: one
// fenced commit of the target unit. A message the target refuses (Disabled,
// SendDisabled, full, too large, a session required) is bounced: one
// fenced commit of the target deletes the transfer and inserts a bounce
// (store.TransferBounce) back to the source unit, whose owner lands it in
// the source entity's transfer dead-letter queue at the sequence number it
// had there, with the reason and description a single node gives. A
// transfer whose target unit was deleted before it landed (an orphan) is
// taken back by its source's owner the same way (MessagingEntityNotFound).
// A failure to commit leaves the transfers where they are, for the next
// poll.
//
// # Transfer header (bb_transfer.meta), version 1
//
//	+---------+------+-----+---------------+------------+-----------+---------+------------+
//	| version | hops | sub | source entity | source seq | enqueued  | ttl     | delivery   |
//	| 1 byte  | 1 B  | 1 B | uvarint       | uvarint    | varint ns | uvarint | uvarint    |
//	+---------+------+-----+---------------+------------+-----------+---------+------------+
//	| source path | target name | reason | description |   each: uvarint length + UTF-8
//	+-------------+-------------+--------+-------------+
//
//	hops:    the message's hop count as it arrives (already + 1)
//	sub:     the source sub-queue (0 main, 1 dead-letter)
//	source:  entity id and the message's sequence number, enqueued time,
//	         TTL and delivery count there (a bounce restores them)
//	reason, description: empty but in a bounce
const transferHeaderVersion = 1

// DefaultTransferBacklog is how many transfers may wait for one target
// unit before sources stop forwarding into it.
const DefaultTransferBacklog = 10000

// transferHeader is the decoded bb_transfer.meta.
type transferHeader struct {
	hops      uint8
	sub       SubQueue
	srcEntity uint64
	srcSeq    int64
	enq       int64
	ttl       int64
	dc        uint32
	source    string // the source entity's path (a queue or a subscription)
	target    string // the target's name as the source had it
	reason    string
	desc      string
}

func (h *transferHeader) append(b []byte) []byte {
	b = append(b, transferHeaderVersion, h.hops, byte(h.sub))
	b = binary.AppendUvarint(b, h.srcEntity)
	b = binary.AppendUvarint(b, uint64(h.srcSeq))
	b = binary.AppendVarint(b, h.enq)
	b = binary.AppendUvarint(b, uint64(h.ttl))
	b = binary.AppendUvarint(b, uint64(h.dc))
	for _, s := range []string{h.source, h.target, h.reason, h.desc} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

var errTransferHeader = errors.New("broker: malformed transfer header")

// decodeTransferHeader parses a transfer header; anything malformed or
// trailing is an error.
func decodeTransferHeader(b []byte) (transferHeader, error) {
	var h transferHeader
	if len(b) < 3 || b[0] != transferHeaderVersion || b[2] > byte(SubQueueDeadLetter) {
		return h, errTransferHeader
	}
	h.hops, h.sub, b = b[1], SubQueue(b[2]), b[3:]
	uv := func(max uint64) (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > max {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var ok bool
	var v uint64
	if h.srcEntity, ok = uv(1<<63 - 1); !ok {
		return h, errTransferHeader
	}
	if v, ok = uv(1<<63 - 1); !ok {
		return h, errTransferHeader
	}
	h.srcSeq = int64(v)
	enq, n := binary.Varint(b)
	if n <= 0 {
		return h, errTransferHeader
	}
	h.enq, b = enq, b[n:]
	if v, ok = uv(1<<63 - 1); !ok {
		return h, errTransferHeader
	}
	h.ttl = int64(v)
	if v, ok = uv(1<<32 - 1); !ok {
		return h, errTransferHeader
	}
	h.dc = uint32(v)
	for _, s := range []*string{&h.source, &h.target, &h.reason, &h.desc} {
		l, ok := uv(1 << 31)
		if !ok || l > uint64(len(b)) {
			return h, errTransferHeader
		}
		*s, b = string(b[:l]), b[l:]
	}
	if len(b) != 0 {
		return h, errTransferHeader
	}
	return h, nil
}

// forwardsRemote reports whether a forward to target (a queue or topic
// path) goes through the outbox: the target is not served here, or it is
// but transfers still wait to land in its unit. The latter happens when
// this node has just taken the target over (a crash, a hand-off) while
// messages forwarded to its former owner wait in the outbox: a local
// forward would land after them in the store but before them in the
// target, overtaking the source's older messages. Through the outbox the
// new ones land after them, in order.
func (b *Broker) forwardsRemote(target string) (bool, error) {
	p, err := ParsePath(target)
	if err != nil {
		return true, nil // refused by the catalog lookup of sendRemote
	}
	b.mu.RLock()
	k := entityKey(p.Entity)
	var unit uint64
	if q := b.mu.queues[k]; q != nil {
		unit = q.id
	} else if t := b.mu.topics[k]; t != nil {
		unit = t.id
	}
	b.mu.RUnlock()
	if unit == 0 {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	n, err := b.outbox.TransferBacklog(ctx, unit, 0)
	if err != nil {
		return false, internal(err, "counting the transfers to %q", target)
	}
	return n > 0, nil
}

// catalogHas reports whether the catalog of a cluster node knows the
// queue or topic of path (false without a catalog).
func (b *Broker) catalogHas(path string) (bool, error) {
	p, err := ParsePath(path)
	if b.catalog == nil || err != nil || p.Subscription != "" {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	_, ok, err := b.catalog.UnitNamed(ctx, p.Entity)
	if err != nil {
		if e := storeError(err); e != nil {
			return false, e
		}
		return false, internal(err, "looking up %q in the catalog", path)
	}
	return ok, nil
}

// remoteSendCheck makes, from the target's Spec as its owner last
// committed it, the checks a local forward's enqueue makes and that do not
// need the target's memory: it exists, its status allows sending, each
// message fits its MaxMessageSizeInKilobytes and has a SessionId if it
// requires one. The quota (it needs the target's current size) and a
// status changed since are checked when the message lands.
func (b *Broker) remoteSendCheck(ctx context.Context, unit uint64, name string, pend []pendingMsg) error {
	raw, ok, err := b.outbox.UnitSpec(ctx, unit)
	if err != nil {
		return internal(err, "reading the spec of %q", name)
	}
	if !ok {
		return errEntityNotFound(name)
	}
	spec, err := decodeSpec(raw)
	if err != nil {
		return nil // left to the landing
	}
	var status EntityStatus
	var l sendLimits
	switch {
	case spec.Kind == specKindQueue && spec.Properties != nil:
		status, l = spec.Properties.Status, queueSendLimits(name, spec.Properties)
	case spec.Kind == specKindTopic && spec.Topic != nil:
		status, l = spec.Topic.Status, topicSendLimits(name, spec.Topic)
	default:
		return nil
	}
	if !status.canSend() {
		return errorf(KindEntityDisabled, "The messaging entity '%s' is %s: sending is not allowed.", name, status)
	}
	l.maxSizeMB = 1 << 40 // the quota: at landing
	return l.check(pend, 0, 0, 0)
}

// errTransferBacklog holds messages in their source while the target's
// outbox is over its bound (retried: KindInternal).
var errTransferBacklog = errorf(KindInternal, "the destination's transfer backlog is over its limit")

// sendRemote forwards pend (the messages of job, moved out of the source)
// to job.target through the outbox: one fenced commit of the source unit.
// It reports whether that commit was made, and otherwise why not (a
// retryable error leaves the messages in the source).
func (q *entity) sendRemote(job *forwardJob, pend []pendingMsg, moved []transition, now int64) (bool, error) {
	b := q.b
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	unit, ok, err := b.catalog.UnitNamed(ctx, job.target)
	if err != nil {
		return false, internal(err, "looking up %q in the catalog", job.target)
	}
	if !ok {
		return false, errEntityNotFound(job.target)
	}
	if err := b.remoteSendCheck(ctx, unit, job.target, pend); err != nil {
		return false, err
	}
	key := "transfer backlog " + job.target
	n, err := b.outbox.TransferBacklog(ctx, unit, b.transferBacklog)
	if err != nil {
		return false, internal(err, "counting the transfers to %q", job.target)
	}
	if n > b.transferBacklog {
		b.retries.failed(key, "the destination has more transfers waiting than the backlog limit; messages wait in the source", errTransferBacklog,
			"entity", q.path(job.sub), "target", job.target, "limit", b.transferBacklog)
		return false, errTransferBacklog
	}
	b.retries.succeeded(key, "the destination's transfer backlog is below its limit again", "entity", q.path(job.sub), "target", job.target)
	kind := store.TransferForward
	if job.sub == SubQueueDeadLetter {
		kind = store.TransferDeadLetterForward
	}
	ops := q.transitionOps(make([]store.Op, 0, 2*len(pend)), moved)
	for i := range pend {
		r := job.find(moved[i].seq)
		h := transferHeader{hops: pend[i].hops, sub: job.sub, srcEntity: q.id, srcSeq: r.seq, enq: r.enq, ttl: r.ttl, dc: r.dc,
			source: q.name, target: job.target}
		ops = append(ops, store.Op{Kind: store.OpTransfer, EntityID: q.id, Meta: h.append(nil), Data: pend[i].data,
			More: pend[i].more, Tail: tailReader(pend[i].tail), Transfer: &store.Transfer{TransferKey: store.TransferKey{TargetUnit: unit}, TargetEntity: unit, Kind: kind}})
	}
	var garbage []int64
	if q.topic != nil {
		garbage = q.topic.takeGarbage()
		ops = q.topic.appendGarbageOps(ops, garbage)
	}
	if err := b.store.Commit(&store.Batch{Ops: ops}, true); err != nil {
		if garbage != nil {
			q.topic.returnGarbage(garbage)
		}
		return false, internal(err, "store commit for %s", q.name)
	}
	b.wakeTargets(ops)
	if h := b.hist; h != nil {
		for i := range moved {
			h.Record(q.name, moved[i].seq, "", history.Event{At: now, Kind: history.Forwarded,
				Sub: uint8(moved[i].from), ToSub: uint8(moved[i].from), Gone: true, Peer: job.target})
		}
	}
	return true, nil
}

// LandTransfers lands xs, transfers into unit (or orphans out of it whose
// target unit is gone), in their order (see the top of this file), and
// returns how many it landed before the first failure. unit must be
// loaded here. A failure leaves the rest in the outbox for a later call.
func (b *Broker) LandTransfers(ctx context.Context, unit uint64, xs []store.Transfer) (int, error) {
	landed := 0
	known := func(x store.Transfer) bool {
		return x.Kind >= store.TransferForward && x.Kind <= store.TransferBounce
	}
	if i := slices.IndexFunc(xs, func(x store.Transfer) bool { return !known(x) }); i >= 0 {
		// A kind this binary does not land (from a newer node): it waits in the outbox, in order, until a node that
		// lands it owns the unit.
		n, err := b.LandTransfers(ctx, unit, xs[:i])
		if err != nil {
			return n, err
		}
		x := xs[i]
		err = errorf(KindInternal, "transfer %d from unit %d is of kind %d, which this node does not land", x.ID, x.SourceUnit, x.Kind)
		b.log.Error("a transfer of an unknown kind waits in the outbox", "unit", unit, "err", err)
		return n, err
	}
	for len(xs) > 0 {
		n := 1
		if landsForward(unit, xs[0]) {
			for n < len(xs) && n < forwardBatchMax && landsForward(unit, xs[n]) && xs[n].Kind == xs[0].Kind {
				n++
			}
		}
		var err error
		if landsForward(unit, xs[0]) {
			err = b.landForwards(ctx, unit, xs[:n])
		} else {
			err = b.landBack(unit, xs[0])
		}
		if err != nil {
			return landed, err
		}
		landed += n
		xs = xs[n:]
	}
	return landed, nil
}

// landsForward reports whether x is a forwarded message, or a send, into
// unit (not a bounce or an orphan going back to its source).
func landsForward(unit uint64, x store.Transfer) bool {
	return x.TargetUnit == unit && x.Kind != store.TransferBounce
}

// unitEntry is the queue or topic of unit, if served here.
func (b *Broker) unitEntry(unit uint64) (*entity, *topic) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, q := range b.mu.queues {
		if q.id == unit {
			return q, nil
		}
	}
	for _, t := range b.mu.topics {
		if t.id == unit {
			return nil, t
		}
	}
	return nil, nil
}

func landOp(entity uint64, x store.Transfer) store.Op {
	return store.Op{Kind: store.OpLand, EntityID: entity, Transfer: &store.Transfer{TransferKey: x.TransferKey}}
}

// landForwards enqueues forwarded messages into unit's queue or topic,
// bouncing those it refuses.
func (b *Broker) landForwards(ctx context.Context, unit uint64, xs []store.Transfer) error {
	d, t := b.unitEntry(unit)
	if d == nil && t == nil {
		return errorf(KindMoved, "unit %d is not served here", unit)
	}
	name := ""
	if d != nil {
		name = d.name
	} else {
		name = t.name
	}
	var (
		pend  []pendingMsg
		hs    []transferHeader
		lands []store.Op
		oks   []store.Transfer
		total int64
	)
	var release [][]pendingMsg
	defer func() {
		for _, r := range release {
			releaseSendData(r)
		}
	}()
	for _, x := range xs {
		h, pm, ok, err := b.landing(unit, name, x, &release)
		if err != nil {
			return err
		}
		if !ok {
			continue // bounced
		}
		pend = append(pend, pm)
		hs = append(hs, h)
		lands = append(lands, landOp(unit, x))
		oks = append(oks, x)
		total += pm.size()
	}
	if len(pend) == 0 {
		return nil
	}
	enqueue := func(pend []pendingMsg, hs []transferHeader, lands []store.Op, total int64) (bool, error) {
		fw := &forwardBatch{ops: lands, send: xs[0].Kind == store.TransferSendVia}
		if b.hist != nil && len(hs) > 0 {
			fw.fromName = hs[0].source
			for _, h := range hs {
				fw.from = append(fw.from, h.srcSeq)
			}
		}
		now := b.now()
		var err error
		if t != nil {
			_, err = t.enqueue(ctx, pend, total, now, nil, fw)
		} else {
			_, err = d.enqueue(ctx, pend, total, now, nil, fw)
		}
		return fw.committed, err
	}
	committed, err := enqueue(pend, hs, lands, total)
	switch {
	case committed:
		return nil
	case retryable(err) || KindOf(err) == KindMoved || KindOf(err) == KindNotFound:
		return err
	case len(pend) > 1 && perMessage(err):
		for i := range pend {
			committed, err := enqueue(pend[i:i+1], hs[i:i+1], lands[i:i+1], pend[i].size())
			switch {
			case committed:
			case retryable(err) || KindOf(err) == KindMoved || KindOf(err) == KindNotFound:
				return err
			default:
				reason, desc := forwardRefusal(err, hs[i].source, name)
				if err := b.bounce(unit, oks[i], hs[i], reason, desc); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := range oks {
		reason, desc := forwardRefusal(err, hs[i].source, name)
		if err := b.bounce(unit, oks[i], hs[i], reason, desc); err != nil {
			return err
		}
	}
	return nil
}

// landing decodes transfer x into unit (named name) as the message to
// enqueue; ok false when it was bounced instead (unreadable, or a send
// that cannot be encoded). Pooled buffers of sends go to release.
func (b *Broker) landing(unit uint64, name string, x store.Transfer, release *[][]pendingMsg) (transferHeader, pendingMsg, bool, error) {
	h, err := decodeTransferHeader(x.Meta)
	if err != nil {
		// Nothing to bounce it to: say so and leave it (never drop a
		// message silently).
		b.log.Error("a transfer's header is unreadable; it stays in the outbox", "unit", unit, "source_unit", x.SourceUnit, "id", x.ID, "err", err)
		return h, pendingMsg{}, false, internal(err, "transfer %d from unit %d", x.ID, x.SourceUnit)
	}
	m, err := message.Unmarshal(x.Data)
	if err != nil {
		err = b.bounce(unit, x, h, ReasonForwardFailed, fmt.Sprintf("The message could not be forwarded from '%s' to '%s': it could not be read (%v).", h.source, name, err))
		return h, pendingMsg{}, false, err
	}
	if x.Kind != store.TransferSendVia {
		return h, pendingMsg{m: m, data: x.Data, ttl: int64(m.TTL), hasSess: m.HasSessionID(), hops: h.hops}, true, nil
	}
	// A client's send: encoded as a send is (scheduling, duplicate-
	// detection keys).
	enc, _, err := encodeSends([]*message.Message{m}, time.Time{}, false, b.clock.Now())
	if err != nil {
		err = b.bounce(unit, x, h, ReasonForwardRefused, fmt.Sprintf("The message sent through '%s' could not be delivered to '%s': %v", h.source, name, err))
		return h, pendingMsg{}, false, err
	}
	*release = append(*release, enc)
	return h, enc[0], true, nil
}

// bounce sends x, which unit refused, back to its source unit with the
// reason: one fenced commit of unit deletes x and inserts the bounce.
func (b *Broker) bounce(unit uint64, x store.Transfer, h transferHeader, reason, desc string) error {
	h.reason, h.desc = reason, desc
	ops := []store.Op{landOp(unit, x), {Kind: store.OpTransfer, EntityID: unit, Meta: h.append(nil), Data: x.Data,
		Transfer: &store.Transfer{TransferKey: store.TransferKey{TargetUnit: x.SourceUnit}, TargetEntity: h.srcEntity, Kind: store.TransferBounce}}}
	if err := b.store.Commit(&store.Batch{Ops: ops}, true); err != nil {
		return internal(err, "bouncing a transfer back to unit %d", x.SourceUnit)
	}
	b.wakeTargets(ops)
	b.log.Info("a forwarded message was refused and sent back to its source's transfer dead-letter queue",
		"source", h.source, "unit", unit, "reason", reason)
	return nil
}

// landBack lands x in the transfer dead-letter queue of the entity it
// was forwarded from, which this broker serves: a bounce, or an orphan
// (its target unit was deleted before it landed). A bounce whose source
// entity is gone, or an orphaned bounce, is dropped with the entity it was
// going back to.
func (b *Broker) landBack(unit uint64, x store.Transfer) error {
	h, err := decodeTransferHeader(x.Meta)
	if err != nil {
		b.log.Error("a transfer's header is unreadable; it stays in the outbox", "unit", unit, "source_unit", x.SourceUnit, "id", x.ID, "err", err)
		return internal(err, "transfer %d from unit %d", x.ID, x.SourceUnit)
	}
	orphan := x.TargetUnit != unit
	entityID := x.TargetEntity
	if orphan {
		entityID = h.srcEntity
		h.reason = ReasonForwardEntityNotFound
		h.desc = fmt.Sprintf("The message could not be forwarded from '%s' to '%s': the messaging entity '%s' was deleted before the message reached it.", h.source, h.target, h.target)
	}
	q := b.entityByID(unit, entityID)
	if q == nil || (orphan && x.Kind == store.TransferBounce) {
		b.log.Warn("a message sent back to an entity that no longer exists is dropped with it", "unit", unit, "entity", entityID, "source", h.source)
		if err := b.store.Commit(&store.Batch{Ops: []store.Op{landOp(unit, x)}}, true); err != nil {
			return internal(err, "dropping a transfer to a deleted entity")
		}
		return nil
	}
	data := x.Data
	if m, err := message.Unmarshal(x.Data); err == nil {
		setDeadLetterProps(m, h.reason, h.desc)
		if enc, err := message.Marshal(m); err == nil {
			data = enc
		}
	}
	if h.srcSeq == 0 {
		// A send through this entity (a transaction's send-via) was
		// never in it: it gets a sequence number of its own here.
		path := q.name
		if q.topic != nil {
			path = q.topic.name // a subscription's numbers are its topic's
		}
		seqs, err := b.ReserveSeqs(path, 1)
		if err != nil {
			return internal(err, "numbering a refused send in %s", q.name)
		}
		h.srcSeq, h.enq = seqs[0].Seq, b.now()
	}
	r := rec{seq: h.srcSeq, enq: h.enq, ttl: h.ttl, dc: h.dc, size: int32(len(data)), state: StateActive, hops: h.hops}
	ops := []store.Op{landOp(q.id, x), {Kind: store.OpAppend, EntityID: q.id, Seq: uint64(r.seq),
		Meta: appendMeta(nil, SubQueueTransferDeadLetter, &r), Data: data}}
	q.lockAndPublish()
	if q.mu.gone != nil {
		q.mu.Unlock()
		return errorf(KindMoved, "the entity %q is not served here any more", q.name)
	}
	q.inflight.Add(1)
	q.mu.Unlock()
	defer q.inflight.Done()
	if err := b.store.Commit(&store.Batch{Ops: ops}, true); err != nil {
		return internal(err, "landing a refused forward in %s", q.name)
	}
	q.lockAndPublish()
	if q.mu.gone == nil && q.mu.subs[SubQueueTransferDeadLetter].idx.get(r.seq) == nil {
		q.insertRecLocked(SubQueueTransferDeadLetter, r)
		if b.hist != nil {
			b.hist.Record(q.name, r.seq, "", history.Event{At: b.now(), Kind: history.DeadLettered,
				Sub: uint8(SubQueueTransferDeadLetter), ToSub: uint8(SubQueueTransferDeadLetter)})
		}
	}
	q.rearmLocked()
	q.mu.Unlock()
	b.log.Info("a refused forward is in its source's transfer dead-letter queue", "entity", q.name, "seq", r.seq, "reason", h.reason)
	return nil
}

// entityByID is the queue, or the subscription of the topic, of unit
// whose entity id is id, if served here.
func (b *Broker) entityByID(unit, id uint64) *entity {
	d, t := b.unitEntry(unit)
	switch {
	case d != nil && d.id == id:
		return d
	case t != nil:
		for _, s := range t.subs.Load().list {
			if s.id == id {
				return s
			}
		}
	}
	return nil
}

// remoteUnit is, on a cluster node, the unit of the queue or topic at
// path that another node serves, for a send that did not find it here
// (lookupErr); otherwise it returns lookupErr.
func (b *Broker) remoteUnit(path string, lookupErr error) (uint64, error) {
	p, err := ParsePath(path)
	if b.outbox == nil || KindOf(lookupErr) != KindNotFound || err != nil || p.Subscription != "" || p.SubQueue != SubQueueMain {
		return 0, lookupErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	unit, ok, err := b.catalog.UnitNamed(ctx, p.Entity)
	if err != nil {
		if e := storeError(err); e != nil {
			return 0, e
		}
		return 0, internal(err, "looking up %q in the catalog", path)
	}
	if !ok || unit == 0 {
		return 0, lookupErr
	}
	return unit, nil
}

// txnTransferOps builds the transfers of a transaction's sends to queues
// and topics other nodes serve (store.TransferSendVia), fenced on the
// entity the transaction receives from (q), else on its via queue (via),
// else on its first local destination: they commit in the transaction's
// one batch, and land at their destination afterwards with its duplicate
// detection. A refusal at landing goes back to that entity's transfer
// dead-letter queue, as Service Bus does for a send-via.
func (b *Broker) txnTransferOps(ctx context.Context, q *entity, via string, dests, remote []*txnDest) ([]store.Op, error) {
	if len(remote) == 0 {
		return nil, nil
	}
	var fence uint64
	var fenceName string
	vq, vt := b.txnVia(via)
	switch {
	case q != nil:
		fence, fenceName = q.id, q.name
	case vq != nil && vt == nil:
		fence, fenceName = vq.id, vq.name
	case len(dests) > 0:
		fence, fenceName = dests[0].q.idOf(dests[0].t), dests[0].name()
	case vt != nil:
		return nil, errorf(KindNotAllowed, "Busbar sends through a topic to '%s', which another node of the cluster serves, only in a transaction that also settles messages of one of the topic's subscriptions; send through a queue instead.", remote[0].remoteName)
	default:
		return nil, errorf(KindNotAllowed, "A transaction that sends to '%s', which another node of the cluster serves, must also receive from or send to an entity this node serves.", remote[0].remoteName)
	}
	var ops []store.Op
	for _, d := range remote {
		if err := b.remoteSendCheck(ctx, d.unit, d.remoteName, d.pend); err != nil {
			return nil, err
		}
		n, err := b.outbox.TransferBacklog(ctx, d.unit, b.transferBacklog)
		if err != nil {
			return nil, internal(err, "counting the transfers to %q", d.remoteName)
		}
		if n > b.transferBacklog {
			return nil, errorf(KindStoreUnavailable, "The messaging entity '%s' has more messages on their way to it than the cluster holds back for one entity; retry later.", d.remoteName)
		}
		for i := range d.pend {
			h := transferHeader{srcEntity: fence, source: fenceName, target: d.remoteName}
			ops = append(ops, store.Op{Kind: store.OpTransfer, EntityID: fence, Meta: h.append(nil), Data: d.pend[i].data,
				More: d.pend[i].more, Tail: tailReader(d.pend[i].tail), Transfer: &store.Transfer{TransferKey: store.TransferKey{TargetUnit: d.unit}, TargetEntity: d.unit, Kind: store.TransferSendVia}})
		}
	}
	return ops, nil
}

// txnVia is the queue or topic via names, if this broker serves it (nil,
// nil otherwise or for "").
func (b *Broker) txnVia(via string) (*entity, *topic) {
	if via == "" {
		return nil, nil
	}
	q, t, _, err := b.lookupSend(via)
	if err != nil {
		return nil, nil
	}
	return q, t
}

// Transfers reports whether the broker can send to entities other nodes
// of a cluster serve (a cluster node's store has the outbox).
func (b *Broker) Transfers() bool { return b.outbox != nil }

// SendVia sends msgs to the queue or topic to through the queue via, as
// a send-via link does outside a transaction, and returns once they are
// durable: the sends of a one-operation-per-message transaction (CommitTxn
// with Via), without the transaction's limit on operations (a batch may
// hold more). On a cluster node to may be served by another node: the
// messages are then transfers through the outbox, fenced on via.
func (b *Broker) SendVia(ctx context.Context, via, to string, msgs []*message.Message) error {
	tx := &Txn{Via: via, Sends: make([]TxnSend, len(msgs))}
	for i, m := range msgs {
		tx.Sends[i] = TxnSend{To: to, Msg: m}
	}
	return b.commitTxn(ctx, tx, false)
}
