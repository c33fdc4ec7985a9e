package broker

import (
	"github.com/busbarmq/busbar/internal/message"

	"github.com/busbarmq/busbar/internal/history"
)

// Message histories (package history). The broker records into
// Options.History at the few places a message's life changes, each once
// the change is durable:
//
//	a send's or forward's publication   Enqueued (q.enqueue, t.enqueue)
//	a topic's fan-out                   Routed on the topic, Enqueued on each copy
//	a receive                           Delivered / ReceivedAndDeleted (deliverAndUnlock)
//	every transition applied            its transition.why (applyLocked): completed,
//	                                    abandoned, deferred, dead-lettered, lock
//	                                    expired, expired, cancelled, removed
//	a lock end without a store write    Released, LockExpired in a sub-queue
//	RenewLock                           Renewed
//	a forward                           Forwarded (sendForward)
//
// Off, b.hist is nil: each place tests that one pointer and allocates
// nothing.

// History is the broker's message history log, nil when off.
func (b *Broker) History() *history.Log { return b.hist }

// recordSends records the committed messages of a send (or forward: fw)
// to entity name.
func (b *Broker) recordSends(name string, pend []pendingMsg, now int64, fw *forwardBatch, txn bool) {
	h := b.hist
	for i := range pend {
		pm := &pend[i]
		if pm.drop || !h.Keeps(pm.seq) {
			continue
		}
		ev := history.Event{At: now, Kind: history.Enqueued, By: pm.by, Until: pm.sched, Txn: txn}
		if fw != nil && i < len(fw.from) {
			ev.Peer, ev.PeerSeq = fw.fromName, fw.from[i]
		}
		h.Record(name, pm.seq, message.IDText(pm.m.MessageID), ev)
	}
}

// recordTransitionLocked records t, applied to r (phase 3, committed).
func (q *entity) recordTransitionLocked(t *transition, now int64) {
	h := q.b.hist
	if !h.Keeps(t.seq) {
		return
	}
	ev := history.Event{At: now, Kind: t.why, Sub: uint8(t.from), ToSub: uint8(t.from), Gone: t.remove,
		By: t.relockHolder, Txn: t.txn}
	if !t.remove {
		ev.ToSub = uint8(t.to)
		ev.DeliveryCount = t.next.dc + 1
	}
	if t.deadLetter {
		ev.Reason, ev.Description = t.reason, t.desc
	}
	switch {
	case t.relock != [16]byte{}:
		ev.LockToken = t.relock
	case t.evTok != [16]byte{}:
		ev.LockToken = t.evTok
	}
	h.Record(q.name, t.seq, "", ev)
}

// recordLockEndLocked records a lock end that wrote nothing (a release,
// a lock expiry in a dead-letter queue).
func (q *entity) recordLockEndLocked(k history.Kind, sub SubQueue, r *rec, tok [16]byte, by string, now int64) {
	q.b.hist.Record(q.name, r.seq, "", history.Event{At: now, Kind: k, Sub: uint8(sub), ToSub: uint8(sub),
		LockToken: tok, By: by, DeliveryCount: r.dc + 1})
}

// recordDeliveries records a receive's deliveries.
func (q *entity) recordDeliveries(sub SubQueue, mode ReceiveMode, out []taken, ds []*Delivery, now int64) {
	h := q.b.hist
	j := 0 // ds is out in order, less what could not be read
	for _, d := range ds {
		for j < len(out) && out[j].r.seq != d.SequenceNumber {
			j++
		}
		if j == len(out) || !h.Keeps(d.SequenceNumber) {
			continue
		}
		ev := history.Event{At: now, Kind: history.Delivered, Sub: uint8(sub), ToSub: uint8(sub),
			DeliveryCount: d.DeliveryCount, By: out[j].holder}
		if mode == ReceiveAndDelete {
			ev.Kind, ev.Gone = history.ReceivedAndDeleted, true
		} else {
			ev.LockToken = d.LockToken
			if !d.LockedUntil.IsZero() {
				ev.Until = d.LockedUntil.UnixNano()
			}
		}
		h.Record(q.name, d.SequenceNumber, message.IDText(d.Message.MessageID), ev)
	}
}

// recordRoutes records a committed fan-out: on the topic, each copy it
// routed; on each subscription, the copy's enqueue (in its dead-letter
// queue with the reason when a rule failed).
func (f *fanOut) recordRoutes(now int64, txn bool) {
	h := f.t.b.hist
	for i := range f.copies {
		c := &f.copies[i]
		q := f.subs.list[c.sub]
		if h.Keeps(c.src) {
			h.Record(f.t.name, c.src, "", history.Event{At: now, Kind: history.Routed, Peer: q.name, PeerSeq: c.r.seq, Txn: txn})
		}
		ev := history.Event{At: now, Kind: history.Enqueued, Peer: f.t.name, PeerSeq: c.src, Txn: txn}
		if c.dlq {
			ev.Sub, ev.ToSub = uint8(SubQueueDeadLetter), uint8(SubQueueDeadLetter)
			ev.Reason, ev.Description = c.reason, c.desc
		}
		h.Record(q.name, c.r.seq, message.IDText(c.mid), ev)
	}
}
