package broker

import (
	"context"
	"fmt"
	"strings"

	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Auto-forwarding: a queue or subscription with ForwardTo moves every
// message that becomes available in its main queue to the target queue or
// topic; with ForwardDeadLetteredMessagesTo it moves every message that
// becomes available in its dead-letter queue.
//
// # When
//
// "Becomes available" is makeAvailableLocked, the one place every message
// passes when receivers could take it: a send or a subscription copy
// published, a scheduled message materialising, a lock ending (abandon,
// release, expiry), a dead-letter move, a failed settlement's revert. For
// a forwarding sub-queue it sets mu.fwdDue[sub] (forwardNow, a deadline
// already passed), which nextDeadlineLocked reports like any timer, so the
// Run shell's next Tick (or any operation's lazy check, lockAt) runs
// forwardDue. An update of the entity's properties, a recovery and a
// status change of a subscription's topic re-arm it (the backlog waiting
// meanwhile is forwarded then). A source whose status forbids receiving
// (Disabled, ReceiveDisabled, its topic Disabled) does not forward: its
// messages wait, counted as Transfer.
//
// # How: one atomic, durable step
//
// forwardDue takes up to forwardBatchMax available messages of the
// sub-queue (marking them busy, as a receive would: nobody else can touch
// them), reads and re-encodes each, and hands them to the destination's
// own enqueue (queue or topic: the same checks, sequence numbers, TTL
// defaults, fan-out and publication as a send) together with the source's
// removals (forwardBatch). The destination's batch is then ONE synced
// store commit holding both the removal from the source and the append to
// the destination (for a topic: its shared data and every subscription
// copy). A crash before the commit leaves the message in the source, to
// be forwarded again after recovery; after it, in the destination only.
// The destination assigns its own sequence number and enqueued time, and
// applies its own DefaultMessageTimeToLive to the message's own TTL, as
// for a send; the delivery count starts again. Duplicate detection of the
// destination does not apply to forwarded messages (they were accepted
// once, by the entity they were sent to).
//
// # When the destination refuses
//
// A message that cannot be forwarded goes to the source's transfer
// dead-letter queue (<entity>/$Transfer/$DeadLetterQueue) with the
// DeadLetterReason and DeadLetterErrorDescription properties naming the
// cause (the description names source and destination):
//
//	hop limit reached                    MaxTransferHopCountExceeded
//	destination deleted / never there    MessagingEntityNotFound
//	destination Disabled / SendDisabled  MessagingEntityDisabled
//	destination over MaxSizeInMegabytes  QuotaExceeded
//	message over its MaxMessageSize      MessageSizeExceeded
//	anything else it refuses (a message  ForwardingRefused
//	without SessionId to a session-
//	enabled queue)
//	message data unreadable              ForwardingFailed
//
// A store failure is not a refusal: the messages stay where they are and
// are retried after retryDelay. The transfer dead-letter queue is never
// forwarded; it is received from and peeked like any dead-letter queue.
//
// # Hop count
//
// Each message carries the number of times it was auto-forwarded (rec.hops,
// persisted as Meta's optional hop-count field, 0 = absent; subscription
// copies of a forwarded message inherit it). A message already forwarded
// MaxTransferHops times is not forwarded again: it goes to the transfer
// dead-letter queue of the entity where it stopped.
//
// # Dead-letter source
//
// A message forwarded out of a dead-letter queue carries the name of the
// entity it was dead-lettered in (a queue name or a subscription path) as
// the x-opt-deadletter-source message annotation, written into its data
// by the forward, and surfaced as Delivery.DeadLetterSource. A message
// that was never forwarded (hops 0) never reports one: a sender's own
// annotation of that name is dropped by its first forward and ignored
// until then.
//
// # Validation
//
// checkForwardingLocked (create and update of queues and subscriptions)
// refuses a target that does not exist, the entity itself, ForwardTo on a
// session-enabled entity (Service Bus does not auto-forward from session
// entities; ForwardDeadLetteredMessagesTo is allowed, a dead-letter queue
// is not session-enabled) and a ForwardTo that closes a loop: following
// ForwardTo from queue to queue, and from a topic to the ForwardTo of each
// of its subscriptions, must never come back (A → B → A, or A → T →
// T/Subscriptions/s → A). Only ForwardTo edges make loops: a dead-letter
// forward runs once per dead-lettering. A target deleted later is not an
// error of the source: its messages go to its transfer dead-letter queue.
//
// # Idleness and counts
//
// An entity with ForwardTo is never idle (AutoDeleteOnIdle: auto-forwarding
// is "equivalent to having a receiver", docs/wire/semantics.md), and every forward is a
// receive of the source and a send to the destination. The main queue's
// active messages of an entity with ForwardTo, and the dead-letter queue's
// messages of one with ForwardDeadLetteredMessagesTo, count as Transfer
// (waiting to be forwarded) rather than Active or DeadLetter. A main-queue
// receiver cannot be opened on an entity with ForwardTo (as in Service
// Bus); its dead-letter queues can be received from.

// MaxTransferHops is how many times one message may be auto-forwarded. The
// dead-letter queue article (docs/wire/semantics.md, "Dead-lettering in ForwardTo or
// SendVia scenarios") says a message that passes through more than 3
// chained queues or topics goes to the transfer dead-letter queue, and
// that is what Busbar does: in Q1 → Q2 → Q3 → Q4 → Q5 a message sent to
// Q1 is forwarded three times and stops in Q4's transfer dead-letter
// queue (MaxTransferHopCountExceeded). Other Service Bus documents (the
// quotas page, the auto-forwarding article; docs/wire/management-plane.md §4)
// say a chain of 4 hops, which would let it reach Q5. This constant is
// the only place the limit lives.
const MaxTransferHops = 3

// DeadLetterSourceAnnotation is the message annotation naming the entity
// a message was dead-lettered in, on messages forwarded out of a
// dead-letter queue.
const DeadLetterSourceAnnotation = "x-opt-deadletter-source"

// EnqueueSequenceNumberAnnotation is the message annotation (int64) an
// auto-forwarded message carries, as in Service Bus: the sequence number
// it had in the entity it was first enqueued in. Only the broker sets it
// (the AMQP layer drops a sender's).
const EnqueueSequenceNumberAnnotation = "x-opt-enqueue-sequence-number"

// Dead-letter reasons of the transfer dead-letter queue (see above).
const (
	ReasonMaxTransferHopCountExceeded = "MaxTransferHopCountExceeded"
	ReasonForwardEntityNotFound       = "MessagingEntityNotFound"
	ReasonForwardEntityDisabled       = "MessagingEntityDisabled"
	ReasonForwardQuotaExceeded        = "QuotaExceeded"
	ReasonForwardMessageSizeExceeded  = "MessageSizeExceeded"
	ReasonForwardRefused              = "ForwardingRefused"
	ReasonForwardFailed               = "ForwardingFailed"
)

const (
	// forwardNow is a forwarding deadline that has always passed.
	forwardNow int64 = 1
	// forwardBatchMax and forwardBatchBytes bound the messages one forward
	// moves in one store batch, and so the data it holds in memory (the
	// rest follow at the next tick, right away).
	forwardBatchMax   = 256
	forwardBatchBytes = 4 << 20
)

// forwardBatch is the source side of an auto-forward riding along the
// destination's enqueue: ops join the destination's store batch, and
// committed says whether that batch was committed.
type forwardBatch struct {
	ops       []store.Op
	committed bool
	// send: the messages are a client's sends landing from another node
	// (a transaction's send-via), not forwarded ones: the destination's
	// duplicate detection applies.
	send bool
	// For the message history: the source and its sequence numbers, in
	// pend order (set only when histories are on).
	fromName string
	from     []int64
}

// forwarded reports whether fw's messages are auto-forwarded ones (no
// duplicate detection at the destination); false without fw.
func (fw *forwardBatch) forwarded() bool { return fw != nil && !fw.send }

// forwardTargetLocked is where sub's messages are forwarded ("" = nowhere).
func (q *entity) forwardTargetLocked(sub SubQueue) string {
	switch sub {
	case SubQueueMain:
		return q.mu.props.ForwardTo
	case SubQueueDeadLetter:
		return q.mu.props.ForwardDeadLetteredMessagesTo
	}
	return ""
}

// noteForwardLocked arms the forwarder of sub if sub forwards (a message
// became available there).
func (q *entity) noteForwardLocked(sub SubQueue) {
	if q.forwardTargetLocked(sub) != "" {
		q.mu.fwdDue[sub] = forwardNow
	}
}

// propsChangedForwardLocked follows a change of the forwarding properties
// (create, update, recovery, a topic's status): the lock-free senders'
// flag, and the forwarder armed for whatever waits.
func (q *entity) propsChangedForwardLocked() {
	p := &q.mu.props
	q.forwarding.Store(p.ForwardTo != "" || p.ForwardDeadLetteredMessagesTo != "")
	for _, sub := range []SubQueue{SubQueueMain, SubQueueDeadLetter} {
		if q.forwardTargetLocked(sub) != "" {
			q.mu.fwdDue[sub] = forwardNow
		} else {
			q.mu.fwdDue[sub] = 0
		}
	}
}

// forwardDueLocked reports whether forwarding is due at now.
func (q *entity) forwardDueLocked(now int64) bool {
	if q.mu.forwarding {
		return false // its end re-arms
	}
	for _, at := range q.mu.fwdDue {
		if at != 0 && at <= now {
			return true
		}
	}
	return false
}

// forwardDeadlineLocked is the earliest forwarding deadline (0: none).
func (q *entity) forwardDeadlineLocked() int64 {
	if q.mu.forwarding {
		return 0 // its end re-arms
	}
	var d int64
	for _, at := range q.mu.fwdDue {
		if at != 0 && (d == 0 || at < d) {
			d = at
		}
	}
	return d
}

// transferCountsLocked moves what waits to be forwarded from Active and
// DeadLetter to Transfer.
func (q *entity) transferCountsLocked(c *Counts) {
	if q.mu.props.ForwardTo != "" {
		c.Transfer += c.Active
		c.Active = 0
	}
	if q.mu.props.ForwardDeadLetteredMessagesTo != "" {
		c.Transfer += c.DeadLetter
		c.DeadLetter = 0
	}
}

// forwardReceiveCheckLocked refuses a receiver on the main queue of an
// entity that auto-forwards it.
func (q *entity) forwardReceiveCheckLocked(sub SubQueue) error {
	if sub == SubQueueMain && q.mu.props.ForwardTo != "" {
		return errorf(KindNotAllowed, "Cannot create a message receiver on '%s': it auto-forwards its messages to '%s' (ForwardTo); receive them there.", q.name, q.mu.props.ForwardTo)
	}
	return nil
}

// deadLetterSource is the Delivery.DeadLetterSource of r (data m).
func deadLetterSource(r *rec, m *message.Message) string {
	if r.hops == 0 {
		return "" // never forwarded: an annotation of that name is the sender's
	}
	s, _ := m.Annotations[DeadLetterSourceAnnotation].(string)
	return s
}

// tick implements timerOwner: the forwarding due at now, then the timer
// work (which re-arms).
func (q *entity) tick(now int64) (idle bool) {
	q.forwardDue(now)
	return q.tickTimers(now)
}

// forwardJob is the messages of one sub-queue taken for one forward.
type forwardJob struct {
	sub    SubQueue
	target string
	recs   []rec // snapshots of the records marked busy
}

// forwardDue forwards what is due at now: it takes the available messages
// of each forwarding sub-queue (expiring those of the main queue whose TTL
// passed, as a receive would) and moves them.
func (q *entity) forwardDue(now int64) {
	q.lockAndPublish()
	if q.mu.gone != nil || !q.forwardDueLocked(now) {
		q.mu.Unlock()
		return
	}
	var (
		jobs    []forwardJob
		expired []transition
	)
	for _, sub := range []SubQueue{SubQueueMain, SubQueueDeadLetter} {
		if at := q.mu.fwdDue[sub]; at == 0 || at > now {
			continue
		}
		q.mu.fwdDue[sub] = 0
		target := q.forwardTargetLocked(sub)
		if target == "" || q.receiveCheckLocked(sub) != nil {
			continue // re-armed when its status (or its topic's) changes
		}
		job := forwardJob{sub: sub, target: target}
		var bytes int64
		for n := 0; ; n++ {
			if n == forwardBatchMax || bytes >= forwardBatchBytes {
				q.mu.fwdDue[sub] = forwardNow // the rest at the next tick
				break
			}
			r := q.peekAvailableLocked(sub)
			if r == nil {
				break
			}
			if sub == SubQueueMain && r.expired(now) {
				expired = append(expired, q.expireLocked(r, nil))
				continue
			}
			markBusyLocked(r)
			job.recs = append(job.recs, *r)
			bytes += int64(r.size)
		}
		if len(job.recs) > 0 {
			jobs = append(jobs, job)
		}
	}
	if len(jobs) == 0 && len(expired) == 0 {
		q.mu.Unlock()
		return
	}
	if len(jobs) > 0 {
		q.touchLocked(now) // forwarding is receive activity
	}
	ops := q.saveAccessedLocked(nil)
	q.inflight.Add(1)
	q.mu.forwarding = true
	q.mu.Unlock()
	defer q.inflight.Done()

	if len(expired) > 0 || len(ops) > 0 {
		err := q.persist(nil, expired, ops, false)
		q.lockAndPublish()
		q.applyLocked(expired, err, now)
		q.mu.Unlock()
	}
	for _, job := range jobs {
		q.forward(job, now)
	}
	q.lockAndPublish()
	q.mu.forwarding = false
	q.rearmLocked()
	q.mu.Unlock()
}

// forward moves one job's messages to its target, or to the transfer
// dead-letter queue when the target refuses them (phases 2 and 3; no lock
// is held on entry).
func (q *entity) forward(job forwardJob, now int64) {
	var (
		pend   []pendingMsg
		moved  []transition // the removals from the source, parallel to pend
		done   []transition // committed: to apply
		failed []transition // to the transfer dead-letter queue
		retry  []transition // left in place, retried later
	)
	for i := range job.recs {
		r := &job.recs[i]
		if r.hops >= MaxTransferHops {
			failed = append(failed, transferDeadLetterTransition(job.sub, r, ReasonMaxTransferHopCountExceeded,
				fmt.Sprintf("The message was auto-forwarded %d times, the most allowed (MaxTransferHopCount); it stopped in '%s' instead of going on to '%s'.",
					r.hops, q.name, job.target)))
			continue
		}
		data, err := q.forwardedData(job.sub, r)
		if err != nil {
			q.b.log.Error("cannot read a message to forward it; moving it to the transfer dead-letter queue", "entity", q.path(job.sub), "seq", r.seq, "err", err)
			failed = append(failed, transferDeadLetterTransition(job.sub, r, ReasonForwardFailed,
				fmt.Sprintf("The message could not be forwarded from '%s' to '%s': it could not be read (%v).", q.path(job.sub), job.target, err)))
			continue
		}
		m := data.m
		pm := pendingMsg{m: m, data: data.b, ttl: int64(m.TTL), hasSess: m.HasSessionID(), hops: r.hops + 1}
		if data.tail != nil {
			pm.tail = data.tail
			defer data.tail.Close()
		}
		pend = append(pend, pm)
		moved = append(moved, transition{seq: r.seq, from: job.sub, remove: true})
	}

	if len(pend) > 0 {
		d, r, f := q.sendJob(&job, pend, moved, now)
		done, retry, failed = append(done, d...), append(retry, r...), append(failed, f...)
	}

	var ferr error
	if len(failed) > 0 {
		ferr = q.persist(nil, failed, nil, true)
		key := "transfer dead-letter " + q.path(job.sub)
		if ferr != nil {
			q.b.retries.failed(key, "moving messages to the transfer dead-letter queue failed; retrying", ferr, "entity", q.path(job.sub))
		} else {
			q.b.retries.succeeded(key, "moving messages to the transfer dead-letter queue recovered", "entity", q.path(job.sub))
		}
	}
	q.lockAndPublish()
	q.applyLocked(done, nil, now)
	q.applyLocked(failed, ferr, now)
	if len(retry) > 0 {
		q.applyLocked(retry, errForwardRetry, now)
	}
	if len(retry) > 0 || ferr != nil {
		// Not at once (the revert armed it): after retryDelay.
		q.mu.fwdDue[job.sub] = now + retryDelay
	}
	q.mu.Unlock()
}

// sendJob moves pend (the messages of job, removed from the source by
// moved) to job.target: to a queue or topic this broker serves in one
// store batch (sendForward), to another node's through the outbox
// (sendRemote). It sorts the removals: committed (done), to try again
// later (retry), refused (failed: to the transfer dead-letter queue,
// tried one by one first when the refusal may concern only some).
func (q *entity) sendJob(job *forwardJob, pend []pendingMsg, moved []transition, now int64) (done, retry, failed []transition) {
	send := func(pend []pendingMsg, moved []transition) (bool, error) {
		var total int64
		for i := range pend {
			total += pend[i].size()
		}
		return q.sendForward(job.target, pend, moved, total, now)
	}
	again := func(err error) bool {
		// On a cluster node a target that left this node meanwhile
		// (handed off) is not gone: the next try goes through the
		// outbox, whose catalog says whether it exists.
		return retryable(err) || (KindOf(err) == KindNotFound && q.b.outbox != nil)
	}
	if q.b.outbox != nil {
		remote, err := q.b.forwardsRemote(job.target)
		if err != nil {
			return nil, moved, nil // tried again after retryDelay
		}
		if remote {
			// Another node's unit (or none), or transfers still waiting
			// for the one served here: through the outbox (transfer.go).
			send = func(pend []pendingMsg, moved []transition) (bool, error) { return q.sendRemote(job, pend, moved, now) }
			again = retryable
		}
	}
	committed, err := send(pend, moved)
	switch {
	case committed:
		return moved, nil, nil
	case again(err):
		return nil, moved, nil
	case len(pend) > 1 && perMessage(err):
		// Some may fit or pass where the whole batch did not: one by one.
		for i := range pend {
			committed, err := send(pend[i:i+1], moved[i:i+1])
			switch {
			case committed:
				done = append(done, moved[i])
			case again(err):
				retry = append(retry, moved[i])
			default:
				failed = append(failed, q.refusedTransition(*job, moved[i], err))
			}
		}
		return done, retry, failed
	}
	for i := range moved {
		failed = append(failed, q.refusedTransition(*job, moved[i], err))
	}
	return nil, nil, failed
}

var errForwardRetry = errorf(KindInternal, "forward not committed")

// retryable reports whether a forward that failed with err should be
// tried again later (a store failure, a broker closing) rather than
// dead-lettered.
func retryable(err error) bool {
	k := KindOf(err)
	return err != nil && (k == KindInternal || k == KindClosed || k == KindMoved)
}

// perMessage reports whether err may concern only some of a batch's
// messages.
func perMessage(err error) bool {
	switch KindOf(err) {
	case KindQuotaExceeded, KindMessageTooLarge, KindInvalidArgument:
		return true
	}
	return false
}

// refusedTransition moves a message the destination refused (err) to the
// transfer dead-letter queue, the reason naming the cause.
func (q *entity) refusedTransition(job forwardJob, t transition, err error) transition {
	reason, desc := forwardRefusal(err, q.path(job.sub), job.target)
	return transferDeadLetterTransition(job.sub, job.find(t.seq), reason, desc)
}

// forwardRefusal is the dead-letter reason and description of a forward
// from source to target that target refused with err.
func forwardRefusal(err error, source, target string) (reason, desc string) {
	reason = ReasonForwardRefused
	switch KindOf(err) {
	case KindNotFound:
		reason = ReasonForwardEntityNotFound
	case KindEntityDisabled:
		reason = ReasonForwardEntityDisabled
	case KindQuotaExceeded:
		reason = ReasonForwardQuotaExceeded
	case KindMessageTooLarge:
		reason = ReasonForwardMessageSizeExceeded
	}
	msg := err.Error()
	if KindOf(err) == KindNotFound {
		msg = fmt.Sprintf("the messaging entity '%s' does not exist (it was deleted, or never created)", target)
	}
	return reason, fmt.Sprintf("The message could not be forwarded from '%s' to '%s': %s", source, target, strings.TrimSuffix(msg, ".")+".")
}

func (j *forwardJob) find(seq int64) *rec {
	for i := range j.recs {
		if j.recs[i].seq == seq {
			return &j.recs[i]
		}
	}
	panic("broker: forwarded record not in its job")
}

// transferDeadLetterTransition moves r (a busy snapshot of sub) to the
// transfer dead-letter queue with reason and description.
func transferDeadLetterTransition(sub SubQueue, r *rec, reason, desc string) transition {
	next := *r
	next.state = StateActive
	next.until = 0
	next.flags &^= flagBusy | flagDead
	return transition{seq: r.seq, from: sub, to: SubQueueTransferDeadLetter, next: next,
		deadLetter: true, reason: reason, desc: desc, why: history.DeadLettered}
}

type forwarded struct {
	m *message.Message
	b []byte
	// tail, for a large message, is its body, left in the store: b is
	// the record up to it (see rewrite). The forwarder closes it.
	tail *rewriteTail
}

// forwardedData reads r (of sub) and encodes it as it is forwarded: with
// x-opt-enqueue-sequence-number (its sequence number here, on its first
// forward); out of a dead-letter queue with x-opt-deadletter-source naming
// this entity; on its first forward without a sender's annotation of
// that name.
func (q *entity) forwardedData(sub SubQueue, r *rec) (forwarded, error) {
	if int64(r.size) >= rewriteStreamFrom {
		return q.forwardedTail(sub, r)
	}
	data, err := q.readData(r)
	if err != nil {
		return forwarded{}, err
	}
	m, err := message.Unmarshal(data)
	if err != nil {
		return forwarded{}, err
	}
	if !q.forwardAnnotations(sub, r, m) {
		return forwarded{m: m, b: data}, nil
	}
	b, err := message.Marshal(m)
	if err != nil {
		return forwarded{}, err
	}
	return forwarded{m: m, b: b}, nil
}

// forwardedTail is forwardedData for a large message: only its head is
// read and encoded again; its body is copied by the store from its old
// data during the commit.
func (q *entity) forwardedTail(sub SubQueue, r *rec) (forwarded, error) {
	tail, err := q.openTail(r)
	if err != nil {
		return forwarded{}, err
	}
	m, _, _, err := message.UnmarshalHead(tail.head, tail.rd.Size())
	if err != nil {
		tail.Close()
		return forwarded{}, err
	}
	m.BodyTail = tail.body
	q.forwardAnnotations(sub, r, m)
	b, _, err := message.AppendHead(nil, m)
	if err != nil {
		tail.Close()
		return forwarded{}, err
	}
	return forwarded{m: m, b: b, tail: tail}, nil
}

// forwardAnnotations sets the annotations of m as it is forwarded and
// reports whether it changed anything.
func (q *entity) forwardAnnotations(sub SubQueue, r *rec, m *message.Message) bool {
	changed := false
	if _, ok := m.Annotations[EnqueueSequenceNumberAnnotation]; !ok {
		if m.Annotations == nil {
			m.Annotations = make(map[string]any, 2)
		}
		m.Annotations[EnqueueSequenceNumberAnnotation] = r.seq
		changed = true
	}
	switch {
	case sub == SubQueueDeadLetter:
		m.Annotations[DeadLetterSourceAnnotation] = q.name
		changed = true
	case r.hops == 0:
		if _, ok := m.Annotations[DeadLetterSourceAnnotation]; ok {
			delete(m.Annotations, DeadLetterSourceAnnotation)
			changed = true
		}
	}
	return changed
}

// sendForward enqueues pend at target with the source's removals (moved)
// in the same store batch, and reports whether that batch was committed
// (then the messages are in the destination, whatever err says: a
// destination deleted right after still had them) and otherwise why not.
func (q *entity) sendForward(target string, pend []pendingMsg, moved []transition, total, now int64) (bool, error) {
	d, t, _, err := q.b.lookupSend(target)
	if err != nil {
		return false, err
	}
	fw := &forwardBatch{ops: q.transitionOps(nil, moved)}
	if q.b.hist != nil {
		fw.fromName = q.name
		fw.from = make([]int64, len(moved))
		for i := range moved {
			fw.from[i] = moved[i].seq
		}
	}
	defer closeTails(fw.ops)
	var garbage []int64
	if q.topic != nil {
		garbage = q.topic.takeGarbage() // shared data freed earlier rides along
		fw.ops = q.topic.appendGarbageOps(fw.ops, garbage)
	}
	ctx := context.Background()
	if t != nil {
		_, err = t.enqueue(ctx, pend, total, now, nil, fw)
	} else {
		_, err = d.enqueue(ctx, pend, total, now, nil, fw)
	}
	if !fw.committed && garbage != nil {
		q.topic.returnGarbage(garbage)
	}
	if fw.committed {
		if h := q.b.hist; h != nil {
			for i := range moved {
				h.Record(q.name, moved[i].seq, "", history.Event{At: now, Kind: history.Forwarded,
					Sub: uint8(moved[i].from), ToSub: uint8(moved[i].from), Gone: true, Peer: target, PeerSeq: pend[i].seq})
			}
		}
		return true, nil
	}
	if err == nil {
		err = errForwardRetry // cannot happen: nothing committed, no error
	}
	return false, err
}

// checkForwardingLocked validates the forwarding properties of self (a
// queue name or a subscription path) for its create or update: each
// target exists and is not self; ForwardTo is not set on a session-enabled
// entity and does not close a loop. b.admin is held (so no entity's
// forwarding changes meanwhile).
func (b *Broker) checkForwardingLocked(self string, requiresSession bool, forwardTo, forwardDLQ string) error {
	for _, f := range []struct{ prop, target string }{{"ForwardTo", forwardTo}, {"ForwardDeadLetteredMessagesTo", forwardDLQ}} {
		if f.target == "" {
			continue
		}
		if entityKey(f.target) == entityKey(self) {
			return invalidProp(f.prop, "an entity cannot forward to itself")
		}
		if _, taken := b.nameTakenLocked(f.target); !taken {
			// On a cluster node, another node may serve it.
			ok, err := b.catalogHas(f.target)
			if err != nil {
				return err
			}
			if !ok {
				return invalidProp(f.prop, "the target entity '%s' does not exist", f.target)
			}
		}
	}
	if forwardTo == "" {
		return nil
	}
	if requiresSession {
		return invalidProp("ForwardTo", "'%s' requires sessions, and Service Bus does not auto-forward from session-enabled queues or subscriptions (ForwardDeadLetteredMessagesTo is allowed)", self)
	}
	if loop := b.forwardLoopLocked(self, forwardTo); loop != nil {
		return invalidProp("ForwardTo", "forwarding '%s' to '%s' would make a loop: %s", self, forwardTo, strings.Join(loop, " → "))
	}
	return nil
}

// forwardLoopLocked follows ForwardTo from target (queue to queue, topic
// to the ForwardTo of each of its subscriptions), with self forwarding to
// target, and returns the loop that comes back to self, or nil.
func (b *Broker) forwardLoopLocked(self, target string) []string {
	p, err := ParsePath(self)
	if err != nil {
		return nil
	}
	home := entityKey(p.Entity) // a subscription's loop closes at its topic
	visited := map[string]bool{}
	// path holds the entities after self; dfs reports whether a loop
	// closes from node.
	var path []string
	var dfs func(node string) bool
	dfs = func(node string) bool {
		key := entityKey(node)
		if key == home {
			return true
		}
		if visited[key] {
			return false
		}
		visited[key] = true
		for _, e := range b.forwardEdgesLocked(node, self, target) {
			n := len(path)
			if e.via != "" {
				path = append(path, e.via)
			}
			path = append(path, e.to)
			if dfs(e.to) {
				return true
			}
			path = path[:n]
		}
		return false
	}
	path = append(path, target)
	if !dfs(target) {
		return nil
	}
	loop := append([]string{self}, path...)
	if p.Subscription != "" {
		loop = append(loop, self) // its topic hands the message back to it
	}
	return loop
}

// forwardEdge is one ForwardTo edge out of a queue or topic: to the
// target, via a subscription (its path) for a topic.
type forwardEdge struct{ via, to string }

// forwardEdgesLocked lists the ForwardTo edges out of node (a queue or
// topic name), the entity self forwarding to target instead of what it
// has now. b.admin is held.
func (b *Broker) forwardEdgesLocked(node, self, target string) []forwardEdge {
	selfKey := entityKey(self)
	b.mu.RLock()
	q := b.mu.queues[entityKey(node)]
	t := b.mu.topics[entityKey(node)]
	b.mu.RUnlock()
	switch {
	case q != nil:
		if entityKey(q.name) == selfKey {
			return []forwardEdge{{to: target}}
		}
		q.lockAndPublish()
		fwd := q.mu.props.ForwardTo
		q.mu.Unlock()
		if fwd == "" {
			return nil
		}
		return []forwardEdge{{to: fwd}}
	case t != nil:
		var out []forwardEdge
		selfSeen := false
		for _, s := range t.subs.Load().list {
			fwd := ""
			if entityKey(s.name) == selfKey {
				fwd, selfSeen = target, true
			} else {
				s.lockAndPublish()
				fwd = s.mu.sprops.ForwardTo
				s.mu.Unlock()
			}
			if fwd != "" {
				out = append(out, forwardEdge{via: s.name, to: fwd})
			}
		}
		if p, err := ParsePath(self); !selfSeen && err == nil && p.Subscription != "" && entityKey(p.Entity) == entityKey(t.name) {
			// A subscription being created: not in the set yet.
			out = append(out, forwardEdge{via: self, to: target})
		}
		return out
	}
	return nil
}
