package broker

import (
	"context"
	"time"

	"github.com/busbarmq/busbar/internal/store"
)

// Send planning shared by a queue's send (send.go) and a topic's
// (fanout.go). Every send has the same shape:
//
//  1. check and plan under the entity's mutex (sendPlan, here: status,
//     sizes, session ids, quota, duplicate detection, default TTL,
//     sequence numbers; then the kind's own records);
//  2. commit without locks (one synced store batch);
//  3. apply: publish the records (mostly lock-free, see publication), or
//     on failure undo the plan (sendPlan.forgetLocked);
//
// and then answers (sendPlan.answer): a duplicate is acknowledged only
// once its original is durable. What differs by kind lives in the kind's
// enqueue: a queue holds placeholders in its own index; a topic routes
// each message through its subscriptions and commits their copies with
// it.

// sendLimits are what a send is checked against: a queue's or a topic's
// properties, in one shape.
type sendLimits struct {
	kind            string // "queue" or "topic", for errors
	name            string
	maxMessageKB    int64
	maxSizeMB       int64
	requiresSession bool
	dedup           bool
	window          int64 // duplicate-detection window (ns)
	defTTL          int64 // DefaultMessageTimeToLive (ns), 0 = none
}

func queueSendLimits(name string, p *QueueProperties) sendLimits {
	return sendLimits{kind: "queue", name: name, maxMessageKB: p.MaxMessageSizeInKilobytes, maxSizeMB: p.MaxSizeInMegabytes,
		requiresSession: p.RequiresSession, dedup: p.RequiresDuplicateDetection,
		window: int64(p.DuplicateDetectionHistoryTimeWindow), defTTL: finiteTTL(p.DefaultMessageTimeToLive)}
}

func topicSendLimits(name string, p *TopicProperties) sendLimits {
	return sendLimits{kind: "topic", name: name, maxMessageKB: p.MaxMessageSizeInKilobytes, maxSizeMB: p.MaxSizeInMegabytes,
		dedup:  p.RequiresDuplicateDetection,
		window: int64(p.DuplicateDetectionHistoryTimeWindow), defTTL: finiteTTL(p.DefaultMessageTimeToLive)}
}

// sendState is the entity state a send plans against, held under the
// entity's mutex: a queue's or a topic's.
type sendState struct {
	id      uint64
	nextSeq *int64
	dedup   *dedupHistory
	stored  int64 // bytes stored
	pending int64 // bytes of sends not yet committed
}

// sendPlan is what phase 1 of a send decided, for phases 2 and 3.
type sendPlan struct {
	defTTL int64
	// w is this send's duplicate-detection wait: duplicates of its
	// messages sent meanwhile wait on it (nil without duplicate
	// detection); waits are the in-flight originals of this send's own
	// duplicates.
	w     *sendWait
	waits []*sendWait
	// ops are the store ops planned so far (history purges and
	// additions); the kind appends its own.
	ops []store.Op
}

// planLocked checks a send of pend (total bytes) against l and s and
// plans it: duplicate detection (not for auto-forwarded messages,
// forwarded) and a sequence number per message into seqs. ops is where
// the plan's store ops start. Nothing changes when it fails.
func (l *sendLimits) planLocked(s sendState, pend []pendingMsg, total, now int64, forwarded bool, seqs []int64, ops []store.Op) (sendPlan, error) {
	if err := l.check(pend, total, s.stored, s.pending); err != nil {
		return sendPlan{}, err
	}
	p := sendPlan{defTTL: l.defTTL}
	p.ops = s.dedup.purge(s.id, l.window, now, ops)
	if l.dedup {
		if !forwarded {
			setDedupKeys(pend)
		}
		p.w = &sendWait{done: make(chan struct{})}
		p.waits, p.ops = s.dedup.check(s.id, pend, now, l.window, p.w, p.ops)
	}
	for i := range pend {
		if pend[i].reserved { // ReserveSeqs gave it out earlier
			*s.nextSeq = max(*s.nextSeq, pend[i].seq+1)
		} else {
			pend[i].seq = *s.nextSeq
			*s.nextSeq++
		}
		seqs[i] = pend[i].seq
	}
	return p, nil
}

// check refuses a send whose messages are too large, lack a required
// session id, or would take the entity over its quota.
func (l *sendLimits) check(pend []pendingMsg, total, stored, pending int64) error {
	maxMsg := l.maxMessageKB * 1024
	for i := range pend {
		if n := pend[i].size(); n > maxMsg {
			return errorf(KindMessageTooLarge, "the message is %d bytes, over the %s's MaxMessageSizeInKilobytes limit of %d KB", n, l.kind, l.maxMessageKB)
		}
		if l.requiresSession && !pend[i].hasSess {
			return errorf(KindInvalidArgument, "The SessionId was not set on a message, and it cannot be sent to the entity '%s'. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.", l.name)
		}
	}
	if quota := l.maxSizeMB << 20; stored+pending+total > quota {
		return errorf(KindQuotaExceeded, "The messaging entity '%s' has reached its MaxSizeInMegabytes quota of %d MB (%d bytes stored); the message was not accepted.", l.name, l.maxSizeMB, stored)
	}
	return nil
}

// forgetLocked undoes the plan's duplicate-detection history additions
// (the commit failed), under the entity's mutex.
func (p *sendPlan) forgetLocked(d *dedupHistory, pend []pendingMsg) {
	if p.w == nil {
		return
	}
	for i := range pend {
		if pend[i].hasKey && !pend[i].drop {
			d.forget(pend[i].dedupKey, p.w)
		}
	}
}

// answer ends a send after phase 3: it releases the duplicates waiting on
// this send, and returns the send's result: the commit's error, gone
// when the entity was deleted meanwhile (the messages went with it; a
// close is no failure: the messages are durable), else seqs once every
// original this send's duplicates wait for is durable.
func (p *sendPlan) answer(ctx context.Context, name string, seqs []int64, cerr, gone error) ([]int64, error) {
	if p.w != nil {
		p.w.err = cerr
		close(p.w.done)
	}
	if cerr != nil {
		return nil, internal(cerr, "storing messages for %s", name)
	}
	if gone != nil && KindOf(gone) == KindNotFound {
		return nil, gone
	}
	for _, dw := range p.waits {
		select {
		case <-dw.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if dw.err != nil {
			return nil, internal(dw.err, "the original of a duplicate message failed to store")
		}
	}
	return seqs, nil
}

// finiteTTL is a DefaultMessageTimeToLive in ns, 0 for Infinite.
func finiteTTL(d time.Duration) int64 {
	if d >= Infinite {
		return 0
	}
	return int64(d)
}
