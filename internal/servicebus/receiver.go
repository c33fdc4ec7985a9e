package servicebus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/message"
)

// maxReceiveBatch bounds one TryReceive of a receiver link.
const maxReceiveBatch = 100

// maxCompleteBatch bounds one broker.CompleteBatch of a receiver link.
const maxCompleteBatch = 512

// DefaultMaxUnsettledPerLink bounds the deliveries a peek-lock receiver
// link holds that the client has not settled (Config.MaxUnsettledPerLink).
const DefaultMaxUnsettledPerLink = 5000

// sweepInterval spaces out the lock checks of a link at its bound (on
// the broker's clock), so that a client sending flows cannot make the
// broker check thousands of locks per frame.
const sweepInterval = time.Second

// receiverLink is a client receiver link on an entity: one goroutine moves
// messages from a broker.Receiver to the link while it has credit.
type receiverLink struct {
	c        *conn
	l        *amqp.OutgoingLink
	r        *broker.Receiver
	path     string
	peekLock bool
	wake     chan struct{} // flow changed
	done     chan struct{} // link gone
	// held is r once the link holds it, for onDetach to close: r itself
	// is set by the goroutine of a deferred attach (AcceptNextSession),
	// which may race a detach.
	held atomic.Pointer[broker.Receiver]

	// Completes (accepted outcomes) waiting for the link's settler:
	// those that arrive while one batch is being committed become the
	// next batch, one broker.CompleteBatch and one store commit.
	settleMu  sync.Mutex
	completes []pendingComplete
	spare     []pendingComplete // the settler's previous batch, for reuse
	settling  bool              // a settler goroutine is running
	// settler is the settler's broker handle: a closed-loop committer
	// whose completions are paced, as a sender link's sends are.
	settler *broker.Settler

	// The peek-lock deliveries sent and not yet disposed of by the client,
	// by lock token, and their tokens by sequence number: at most
	// maxUnsettled. A message redelivered on the link (its lock expired)
	// replaces its earlier delivery, and at the bound the link sends
	// nothing until room is freed: by the client's dispositions, or by a
	// sweep that forgets deliveries whose locks are gone. The endpoint
	// forgets them too (OutgoingDelivery.Forget), without telling the
	// client; if the client disposes of one later, it is answered with
	// message-lock-lost (Conn.AnswerUnknownDispositions in Connect).
	outMu     sync.Mutex
	out       map[uuid.UUID]sentRef
	outSeq    map[int64]uuid.UUID
	atBound   bool      // the pump waits for room: untrack wakes it
	lastSweep time.Time // broker clock
}

// sentRef is a delivery sent on a peek-lock link.
type sentRef struct {
	d   *amqp.OutgoingDelivery
	seq int64
}

// pendingComplete is a client's accepted outcome not yet applied, with
// its settleOrder ticket.
type pendingComplete struct {
	d      *amqp.OutgoingDelivery
	tok    uuid.UUID
	ticket uint64
}

// attachReceiver accepts a receiver link. rcv-settle-mode second means
// peek-lock; snd-settle-mode settled means receive-and-delete (docs/wire/amqp.md
// §4.1). The endpoint echoes both modes.
func (c *conn) attachReceiver(l *amqp.OutgoingLink, a address) error {
	if err := c.authorize(a.path(), auth.Listen); err != nil {
		return c.refuse("attach", a.path(), err)
	}
	if _, err := c.checkEntity(a); err != nil {
		return c.refuse("attach", a.path(), err)
	}
	mode := broker.PeekLock
	if l.SenderSettleMode() == frames.SenderSettleModeSettled {
		mode = broker.ReceiveAndDelete
	}
	if f, isSession, err := sessionFilterOf(l); err != nil {
		return c.refuse("attach", a.path(), err)
	} else if isSession {
		return c.attachSessionReceiver(l, a, f, mode) // session.go
	}
	r, err := c.ns().Broker.OpenReceiver(a.path(), mode)
	if err != nil {
		if broker.KindOf(err) == broker.KindNotFound {
			err = notFound(c.entityURI(a.path()))
		}
		return c.refuse("attach", a.path(), err)
	}
	r.SetHolder(c.lockHolder(l))
	r.StreamBodies(c.h.streamFrom)
	rl := c.newReceiverLink(l, r.Path(), mode)
	rl.r = r
	rl.held.Store(r)
	l.OnFlow = rl.onFlow
	l.OnDisposition = rl.onDisposition
	l.OnDetach = rl.onDetach
	if !c.spawn(rl.pump) {
		r.Close()
		return c.refuse("attach", a.path(), &broker.Error{Kind: broker.KindClosed, Msg: "The connection is closing."})
	}
	c.guard(&l.Link, rl.done, a.path(), auth.Listen)
	return nil
}

// lockHolder names a receiver link for the locks it takes, as operators
// see them (broker.Receiver.SetHolder): the link name and the client's
// container id, or its address if it sent none.
func (c *conn) lockHolder(l *amqp.OutgoingLink) string {
	return "link " + l.Name() + " on connection " + c.containerOrAddr()
}

// containerOrAddr names the connection: the client's container id, or its
// address if it sent none.
func (c *conn) containerOrAddr() string {
	if who := c.c.ContainerID(); who != "" {
		return who
	}
	return remoteAddr(c.c)
}

func (c *conn) newReceiverLink(l *amqp.OutgoingLink, path string, mode broker.ReceiveMode) *receiverLink {
	rl := &receiverLink{
		c: c, l: l, path: path, peekLock: mode == broker.PeekLock,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if rl.peekLock {
		rl.out = make(map[uuid.UUID]sentRef)
		rl.outSeq = make(map[int64]uuid.UUID)
	}
	rl.settler = c.ns().Broker.NewSettler(path)
	return rl
}

func (rl *receiverLink) signal() {
	select {
	case rl.wake <- struct{}{}:
	default:
	}
}

// onFlow runs on the session goroutine. A drain is kept open until the
// pump has sent what is available (§0.11).
func (rl *receiverLink) onFlow(credit uint32, drain bool) {
	if drain {
		rl.l.DeferDrain()
	}
	rl.signal()
}

// pump delivers messages while the link has credit, waiting on the
// receiver's Ready channel when the entity is empty, and completes
// drains once nothing more is available.
func (rl *receiverLink) pump() {
	defer rl.r.Close()
	defer rl.settler.Close()   // no store waits for this link's completions any more
	lost := rl.r.SessionLost() // nil unless a session receiver
	for {
		select {
		case <-rl.done:
			return
		case <-rl.c.ctx.Done():
			return
		default:
		}
		credit := rl.l.Credit()
		room := rl.room()
		if credit > 0 && room == 0 {
			room = rl.sweep()
			if room == 0 {
				// Pass on a wake the broker may have given this receiver.
				if _, err := rl.r.TryReceive(0); err != nil {
					rl.failUnlessGone(err)
					return
				}
			}
		}
		if credit > 0 && room > 0 {
			n := min(int(credit), maxReceiveBatch, room)
			ds, err := rl.r.TryReceive(n)
			if err != nil {
				rl.failUnlessGone(err)
				return
			}
			if len(ds) > 0 {
				if !rl.send(ds) {
					return
				}
				continue
			}
		}
		if rl.l.Draining() {
			rl.l.CompleteDrain()
		}
		var ready <-chan struct{}
		if credit > 0 && room > 0 {
			ready = rl.r.Ready()
		}
		select {
		case <-rl.done:
			return
		case <-rl.c.ctx.Done():
			return
		case <-rl.wake:
		case <-ready:
		case <-lost:
			// The session lock expired: detach with session-lock-lost.
			if _, err := rl.r.TryReceive(0); err != nil {
				rl.failUnlessGone(err)
				return
			}
			lost = nil
		}
	}
}

// send hands deliveries to the link. It reports false when the link is
// gone; messages that could not be sent are released (peek-lock).
func (rl *receiverLink) send(ds []*broker.Delivery) bool {
	for i, d := range ds {
		if rl.c.ns().Faults.Armed(faults.OpReceive) && rl.peekLock {
			if f := rl.c.inject(faults.Point{Op: faults.OpReceive, Entity: rl.path, Link: rl.l.Name(), Props: propsOf([]*message.Message{d.Message})}); f != nil {
				switch f.Kind {
				case faults.DropFrame:
					// Never sent: the message stays locked until its
					// lock expires, as if the transfer were lost.
					closeBody(d)
					continue
				case faults.Detach:
					rl.unsent(ds[i:])
					rl.l.Close(rl.c.faultError("receive", rl.path, f))
					return false
				case faults.CloseConnection:
					rl.unsent(ds[i:])
					rl.c.faultClose("receive", rl.path, f)
					return false
				}
			}
		}
		payload, trailer, err := encodeDeliveryHead(d, deliveryOpts{locked: rl.peekLock, lockTokenAnnotation: rl.peekLock})
		if err == nil {
			od := new(struct { // the delivery and its tag in one allocation
				d   amqp.OutgoingDelivery
				tag [16]byte
			})
			putDotNetGUID(&od.tag, [16]byte(d.LockToken))
			od.d = amqp.OutgoingDelivery{Tag: od.tag[:], Payload: payload, Settled: !rl.peekLock}
			if d.Body != nil {
				// Sent from the store a frame at a time; the endpoint
				// closes it.
				od.d.Parts = []amqp.Part{{Stream: d.Body, Len: d.Body.Len()}, {Bytes: trailer}}
				d.Body = nil
			}
			if rl.peekLock {
				// Tracked before Send: the client may dispose of it at once.
				if stale := rl.track(&od.d, d); stale != nil {
					stale.Forget()
				}
			}
			err = rl.l.Send(&od.d)
			if err != nil {
				for _, p := range od.d.Parts {
					if p.Stream != nil {
						p.Stream.Close()
					}
				}
				if rl.peekLock {
					rl.untrack(&od.d)
				}
			}
		}
		rl.c.h.traceDeliver(rl.path, d, err)
		if err == nil {
			continue
		}
		rl.unsent(ds[i:])
		if errors.Is(err, amqp.ErrLinkClosed) {
			return false
		}
		rl.fail(err)
		return false
	}
	return true
}

// unsent gives back messages that never reached the client. In
// receive-and-delete mode they are already gone from the entity.
func (rl *receiverLink) unsent(ds []*broker.Delivery) {
	for _, d := range ds {
		closeBody(d)
		if !rl.peekLock {
			rl.c.log.Warn("receive-and-delete message lost: the link closed before it was sent",
				"entity", rl.path, "seq", d.SequenceNumber)
			continue
		}
		if err := rl.c.ns().Broker.Release(rl.c.ctx, rl.path, d.LockToken); err != nil && broker.KindOf(err) != broker.KindLockLost && broker.KindOf(err) != broker.KindSessionLockLost {
			rl.c.log.Warn("releasing unsent message failed; it is redelivered when its lock expires", "entity", rl.path, "seq", d.SequenceNumber, "err", err)
		}
	}
}

// fail detaches the link with err mapped to a condition (for example the
// entity was deleted or disabled).
func (rl *receiverLink) fail(err error) {
	if broker.KindOf(err) == broker.KindNotFound {
		err = notFound(rl.c.entityURI(rl.path))
	}
	rl.l.Close(detached(rl.c.fail("receive", rl.path, err)).amqpError())
}

// failUnlessGone is fail, unless the link is gone already: then onDetach
// closed the receiver, which is why err (KindClosed) came.
func (rl *receiverLink) failUnlessGone(err error) {
	select {
	case <-rl.done:
	default:
		rl.fail(err)
	}
}

// onDetach runs on the session goroutine when the link is gone. Locks of
// delivered messages are kept (see the package comment); queued but
// unsent ones are released.
//
// It closes the broker receiver itself rather than leave that to the
// pump: the endpoint answers a client's detach only after OnDetach
// returned, and a client that saw its session receiver's detach answered
// may accept the same session again at once (the Go SDK's Close waits for
// the answer; Service Bus frees the session lock with the detach). The
// session lock is released in memory under the entity's lock; when the
// session held locked messages, their release is one store commit
// without sync, which this waits for (the store's writer takes the
// batch; no fsync is asked for). The pump, which may still be running,
// closes the receiver again on its way out: Close is idempotent (it
// checks r.closed under the entity's lock), and the pump's receive calls
// on the closed receiver end it quietly (failUnlessGone).
func (rl *receiverLink) onDetach(err error, unsent []*amqp.OutgoingDelivery) {
	close(rl.done)
	if r := rl.held.Swap(nil); r != nil {
		r.Close()
	}
	if rl.peekLock {
		// The endpoint forgot the link's deliveries; so does the link.
		rl.outMu.Lock()
		clear(rl.out)
		clear(rl.outSeq)
		rl.outMu.Unlock()
	}
	if !rl.peekLock || len(unsent) == 0 {
		return
	}
	var toks []uuid.UUID
	for _, d := range unsent {
		if t, ok := uuidFromDotNetBytes(d.Tag); ok {
			toks = append(toks, uuid.UUID(t))
		}
	}
	c := rl.c
	c.spawn(func() {
		for _, t := range toks {
			// The connection may be going: release with a context that
			// outlives it, so the messages come back at once.
			_ = c.ns().Broker.Release(context.WithoutCancel(c.ctx), rl.path, t)
		}
	})
}

// onDisposition maps a client outcome to a settlement by lock token (§5)
// and answers with a settled disposition (§0.10) once it is durable. It
// runs on the session goroutine. Completes go to the link's settler,
// which applies those that arrive together with one broker call; every
// other outcome runs on its own goroutine.
func (rl *receiverLink) onDisposition(d *amqp.OutgoingDelivery, state frames.DeliveryState, settled bool) {
	if !rl.peekLock {
		return // receive-and-delete: nothing to settle (§5)
	}
	rl.untrack(d)
	tok, ok := uuidFromDotNetBytes(d.Tag)
	if !ok {
		return
	}
	if ts, ok := state.(*frames.TransactionalState); ok {
		rl.txnSettle(d, uuid.UUID(tok), ts, false) // txn.go: recorded, applied on commit
		return
	}
	if rl.c.relayed {
		if ts, marked := relayedTxnState(state); marked { // relaytxn.go
			if ts == nil {
				d.Settle(&frames.Rejected{Error: rl.c.fail("settle", rl.path, badRequest("The relayed transactional state does not decode.")).amqpError()})
				return
			}
			rl.txnSettle(d, uuid.UUID(tok), ts, true)
			return
		}
	}
	if f := rl.c.inject(faults.Point{Op: faults.OpSettle, Entity: rl.path, Link: rl.l.Name()}); f != nil {
		switch f.Kind {
		case faults.Detach:
			rl.l.Close(rl.c.faultError("settle", rl.path, f))
		case faults.CloseConnection:
			rl.c.faultClose("settle", rl.path, f)
		case faults.Delay:
			ticket := rl.c.settles.begin()
			if !rl.c.spawn(func() {
				defer rl.c.settles.end(ticket)
				if faultWait(rl.c.ctx, f.Delay) == nil {
					rl.disposition(d, uuid.UUID(tok), state)
				}
			}) {
				rl.c.settles.end(ticket)
			}
		case faults.LockLost:
			// The lock is gone for real, as if it had expired: the
			// message is available again, its delivery count raised.
			ticket := rl.c.settles.begin()
			if !rl.c.spawn(func() {
				defer rl.c.settles.end(ticket)
				_ = rl.c.ns().Broker.Abandon(context.WithoutCancel(rl.c.ctx), rl.path, uuid.UUID(tok), nil)
				d.Settle(&frames.Rejected{Error: rl.c.fail("settle", rl.path, f.Err()).amqpError()})
			}) {
				rl.c.settles.end(ticket)
			}
		default: // server-busy: the message keeps its lock
			d.Settle(&frames.Rejected{Error: rl.c.fail("settle", rl.path, f.Err()).amqpError()})
		}
		return
	}
	rl.disposition(d, uuid.UUID(tok), state)
}

// disposition settles the message locked with tok as the client's state
// says and answers d.
func (rl *receiverLink) disposition(d *amqp.OutgoingDelivery, tok uuid.UUID, state frames.DeliveryState) {
	if _, ok := state.(*frames.Accepted); ok {
		rl.queueComplete(d, tok)
		return
	}
	ticket := rl.c.settles.begin()
	if !rl.c.spawn(func() {
		defer rl.c.settles.end(ticket)
		reply, err := rl.c.settle(rl.path, tok, state)
		if err != nil {
			reply = &frames.Rejected{Error: rl.c.fail("settle", rl.path, err).amqpError()}
		}
		d.Settle(reply)
	}) {
		rl.c.settles.end(ticket)
	}
}

// track records a delivery about to be sent on a peek-lock link. It
// returns the earlier delivery of the same message on this link, if any:
// its lock is gone (the message was locked again), and the caller
// forgets it.
func (rl *receiverLink) track(od *amqp.OutgoingDelivery, d *broker.Delivery) (stale *amqp.OutgoingDelivery) {
	rl.outMu.Lock()
	defer rl.outMu.Unlock()
	if old, ok := rl.outSeq[d.SequenceNumber]; ok {
		stale = rl.out[old].d
		delete(rl.out, old)
	}
	rl.out[d.LockToken] = sentRef{d: od, seq: d.SequenceNumber}
	rl.outSeq[d.SequenceNumber] = d.LockToken
	return stale
}

// untrack forgets a delivery the client disposed of (or that was never
// sent) and wakes the pump if it waited for room.
func (rl *receiverLink) untrack(od *amqp.OutgoingDelivery) {
	tok, ok := uuidFromDotNetBytes(od.Tag)
	if !ok {
		return
	}
	rl.outMu.Lock()
	ref, ok := rl.out[uuid.UUID(tok)]
	if !ok || ref.d != od {
		rl.outMu.Unlock()
		return
	}
	delete(rl.out, uuid.UUID(tok))
	if rl.outSeq[ref.seq] == uuid.UUID(tok) {
		delete(rl.outSeq, ref.seq)
	}
	wake := rl.atBound
	rl.atBound = false
	rl.outMu.Unlock()
	if wake {
		rl.signal()
	}
}

// room is how many more deliveries the link may send before the client
// settles some.
func (rl *receiverLink) room() int {
	if !rl.peekLock {
		return maxReceiveBatch
	}
	rl.outMu.Lock()
	defer rl.outMu.Unlock()
	n := max(rl.c.h.maxUnsettled-len(rl.out), 0)
	rl.atBound = n == 0
	return n
}

// sweep forgets the link's deliveries whose locks are gone (expired,
// or settled by lock token through $management) and returns the room
// there is then. It runs at most
// once per sweepInterval of the broker's clock.
func (rl *receiverLink) sweep() int {
	b := rl.c.ns().Broker
	rl.outMu.Lock()
	now := b.Now()
	if !rl.lastSweep.IsZero() && now.Sub(rl.lastSweep) < sweepInterval {
		rl.outMu.Unlock()
		return 0
	}
	rl.lastSweep = now
	toks := make([]uuid.UUID, 0, len(rl.out))
	for t := range rl.out {
		toks = append(toks, t)
	}
	rl.outMu.Unlock()
	errs, err := b.CheckLocks(rl.path, toks)
	if err != nil {
		return 0 // the entity is gone or closed: TryReceive reports it
	}
	var lost []*amqp.OutgoingDelivery
	rl.outMu.Lock()
	for i, t := range toks {
		ref, ok := rl.out[t]
		if errs[i] == nil || !ok {
			continue
		}
		delete(rl.out, t)
		if rl.outSeq[ref.seq] == t {
			delete(rl.outSeq, ref.seq)
		}
		lost = append(lost, ref.d)
	}
	n := max(rl.c.h.maxUnsettled-len(rl.out), 0)
	rl.atBound = n == 0
	rl.outMu.Unlock()
	if len(lost) > 0 {
		rl.l.ForgetAll(lost)
	}
	return n
}

// queueComplete hands a complete to the link's settler, starting one if
// none is running. The settler is a goroutine of the connection (so
// Disconnected waits for it) that lives while completes are waiting: it
// ends when it finds none, and with the connection (its broker calls then
// fail with the connection's context, as they would on their own
// goroutines). Completes still queued when the link detaches are
// applied all the same: the client decided them, and locks outlive links.
func (rl *receiverLink) queueComplete(d *amqp.OutgoingDelivery, tok uuid.UUID) {
	ticket := rl.c.settles.begin()
	rl.settleMu.Lock()
	rl.completes = append(rl.completes, pendingComplete{d: d, tok: tok, ticket: ticket})
	start := !rl.settling
	rl.settling = true
	rl.settleMu.Unlock()
	if start && !rl.c.spawn(rl.settleCompletes) {
		// The connection is gone: nothing can be settled any more.
		rl.settleMu.Lock()
		rl.settling = false
		for _, p := range rl.completes {
			rl.c.settles.end(p.ticket)
		}
		clear(rl.completes)
		rl.completes = rl.completes[:0]
		rl.settleMu.Unlock()
	}
}

// settleCompletes is the link's settler: it completes the waiting
// messages in batches of up to maxCompleteBatch, each with one broker call
// (one store commit), and answers each delivery with accepted, or rejected
// with its own error (a lost lock fails only its own message).
func (rl *receiverLink) settleCompletes() {
	var (
		toks   []uuid.UUID
		ds     []*amqp.OutgoingDelivery
		states []frames.DeliveryState
	)
	accepted := &frames.Accepted{}
	for {
		rl.settleMu.Lock()
		batch := rl.completes
		if len(batch) == 0 {
			rl.settling = false
			rl.settleMu.Unlock()
			return
		}
		if len(batch) > maxCompleteBatch {
			rest := batch[maxCompleteBatch:]
			batch = batch[:maxCompleteBatch:maxCompleteBatch]
			rl.completes = append(rl.spare[:0], rest...)
			rl.spare = nil
		} else {
			rl.completes = rl.spare[:0]
			rl.spare = nil
		}
		rl.settleMu.Unlock()

		toks = toks[:0]
		for _, p := range batch {
			toks = append(toks, p.tok)
		}
		rl.settler.Pace(len(batch))
		span := rl.c.h.traceSettle(rl.path, "completed", len(toks))
		errs := rl.settler.CompleteBatch(rl.c.ctx, toks)
		if span != nil {
			endSpan(span, errors.Join(errs...))
		}
		ds, states = ds[:0], states[:0]
		for i, p := range batch {
			ds = append(ds, p.d)
			if err := errs[i]; err != nil {
				states = append(states, &frames.Rejected{Error: rl.c.fail("settle", rl.path, err).amqpError()})
			} else {
				states = append(states, accepted)
			}
		}
		for _, p := range batch {
			rl.c.settles.end(p.ticket)
		}
		// One step, so that the batch's answers leave together.
		rl.l.SettleAll(ds, states)
		clear(ds)
		clear(states)
		clear(batch)
		rl.settleMu.Lock()
		if rl.spare == nil && cap(batch) >= maxReceiveBatch {
			rl.spare = batch[:0]
		}
		rl.settleMu.Unlock()
	}
}

// settle applies an AMQP outcome to the message locked with tok and
// returns the outcome to answer with on success (SettleReply):
//
//	accepted                                  Complete
//	modified, undeliverable-here              Defer (annotations → properties)
//	modified                                  Abandon (annotations → properties)
//	rejected com.microsoft:dead-letter        DeadLetter (reason, description, info → properties)
//	rejected (other condition)                DeadLetter (condition, description)
//	released, or no outcome                   Release
//
// Any other state settles nothing (unsupportedOutcome).
func (c *conn) settle(path string, tok uuid.UUID, state frames.DeliveryState) (_ frames.DeliveryState, err error) {
	span := c.h.traceSettle(path, outcomeName(state), 1)
	defer func() { endSpan(span, err) }()
	reply, ok := SettleReply(state)
	if !ok {
		return nil, unsupportedOutcome(state)
	}
	b := c.ns().Broker
	switch s := state.(type) {
	case *frames.Accepted:
		return reply, b.Complete(c.ctx, path, tok)
	case *frames.Modified:
		props, err := propsMap(s.MessageAnnotations)
		if err != nil {
			return nil, err
		}
		if s.UndeliverableHere {
			return reply, b.Defer(c.ctx, path, tok, props)
		}
		return reply, b.Abandon(c.ctx, path, tok, props)
	case *frames.Rejected:
		reason, desc, props, err := deadLetterInfo(s.Error)
		if err != nil {
			return nil, err
		}
		return reply, b.DeadLetter(c.ctx, path, tok, reason, desc, props)
	}
	return reply, b.Release(c.ctx, path, tok)
}

// SettleReply is the outcome a node answers a client's disposition of a
// peek-locked message with (outside a transaction) once the settlement
// the disposition's state asks for is applied, and false for a state
// that asks for none (refused with unsupportedOutcome, the lock kept).
// Every other answer is rejected with an error: the settlement failed.
// A successful dead-letter is answered with rejected without an error:
// go-amqp treats a rejected with an error as a failed settlement.
//
// A gateway node, whose go-amqp client learns of the owner's answer only
// whether it was rejected with an error, answers the client with this
// (package relay); so it must stay a function of the state alone.
func SettleReply(state frames.DeliveryState) (frames.DeliveryState, bool) {
	switch s := state.(type) {
	case *frames.Accepted:
		return &frames.Accepted{}, true
	case *frames.Modified:
		if s.UndeliverableHere {
			return &frames.Modified{UndeliverableHere: true}, true
		}
		return &frames.Modified{DeliveryFailed: s.DeliveryFailed}, true
	case *frames.Rejected:
		return &frames.Rejected{}, true
	case *frames.Released, nil:
		return &frames.Released{}, true
	}
	return nil, false
}

// unsupportedOutcome refuses a disposition whose state is no outcome a
// message is settled with.
func unsupportedOutcome(state frames.DeliveryState) error {
	return badRequest("The outcome %v is not supported.", state)
}

// deadLetterInfo reads the reason, description and properties to modify
// from a rejected outcome's error: condition com.microsoft:dead-letter with
// the info keys DeadLetterReason and DeadLetterErrorDescription (strings,
// possibly null) and any other keys as properties (§5). Another condition
// becomes the reason, its description the description.
func deadLetterInfo(e *frames.Error) (reason, desc string, props map[string]any, err error) {
	if e == nil {
		return "", "", nil, nil
	}
	if e.Condition != condDeadLetter {
		return string(e.Condition), e.Description, nil, nil
	}
	props, err = propsMap(e.Info)
	if err != nil {
		return "", "", nil, err
	}
	for _, k := range []string{broker.PropDeadLetterReason, broker.PropDeadLetterErrorDescription} {
		v, ok := props[k]
		if !ok {
			continue
		}
		delete(props, k)
		var s string
		switch x := v.(type) {
		case nil:
		case string:
			s = x
		default:
			s = fmt.Sprint(x)
		}
		if k == broker.PropDeadLetterReason {
			reason = s
		} else {
			desc = s
		}
	}
	if len(props) == 0 {
		props = nil
	}
	return reason, desc, props, nil
}

// outcomeName names an AMQP outcome as the settlement span records it.
func outcomeName(state frames.DeliveryState) string {
	switch s := state.(type) {
	case *frames.Accepted:
		return "completed"
	case *frames.Modified:
		if s.UndeliverableHere {
			return "deferred"
		}
		return "abandoned"
	case *frames.Rejected:
		return "dead_lettered"
	}
	return "released"
}
