package amqp

import (
	"sync"
	"sync/atomic"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Session is one AMQP session of a connection. Its mux goroutine owns all
// session and link state: flow-control windows, handles, delivery ids,
// unsettled deliveries. Other goroutines reach it in two ways only: the
// reader hands it frames through in, and handlers queue operations
// (settle, send, close, complete) through enqueue, which never blocks.
type Session struct {
	conn     *Conn
	channel  uint16 // our channel
	remoteCh uint16 // the client's channel
	in       chan frames.Body
	wake     chan struct{} // capacity 1: ops or ready links queued

	// Dispositions the reader handed to the mux (dispRead) and the mux
	// passed to OnDisposition (dispDone), for Conn.DispositionMark.
	dispRead, dispDone atomic.Uint64
	dispWaiters        atomic.Int32
	dispMu             sync.Mutex    // guards dispWait and dispGone
	dispWait           chan struct{} // closed when dispDone moves; nil if none waits
	dispGone           bool          // the mux exited

	opsMu sync.Mutex // guards ops, ready and dead
	ops   []op
	ready []*OutgoingLink // links whose Send queued something
	dead  bool            // the mux has exited; drop further ops

	// Everything below is owned by the mux goroutine.

	links     map[uint32]*Link // by the client's (input) handle
	handleMax uint32           // the client's handle-max: bound of our handles
	handles   []bool           // our output handles in use
	ended     bool             // end exchanged or failed: the mux returns
	failure   *Error           // close the connection with it on exit

	// Incoming transfers (client to broker).
	nextIncomingID uint32 // transfer-id expected next
	inWindow       uint32 // transfers the client may still send
	flowNeeded     bool   // a session flow should go out
	linkFlows      []*IncomingLink

	// Outgoing transfers (broker to client).
	nextOutgoingID       uint32
	remoteIncomingWindow uint32
	nextDeliveryID       uint32
	unsettled            map[uint32]*OutgoingDelivery // sent unsettled, by delivery id
	active               []*OutgoingLink              // links with something to send
	activeSpare          []*OutgoingLink

	// Scratch space, reused to encode frames without allocating.
	opsSpare   []op
	settlesIn  []settleRec // the handler settled client deliveries
	settlesOut []settleRec // the handler settled our deliveries
	tr         frames.Transfer
	fl         frames.Flow
	disp       frames.Disposition
	u32        [5]uint32 // pointees for the optional fields of tr, fl, disp
}

type opKind uint8

const (
	opSettleIn       opKind = iota // IncomingDelivery.Settle
	opSettleOut                    // OutgoingDelivery.Settle
	opClose                        // Link.Close
	opCompleteAttach               // Link.CompleteAttach
	opCompleteDrain                // OutgoingLink.CompleteDrain
	opForget                       // OutgoingDelivery.Forget
)

// op is an operation a handler queued for the mux.
type op struct {
	kind  opKind
	link  *Link
	in    *IncomingDelivery
	out   *OutgoingDelivery
	state frames.DeliveryState
	err   error
}

type settleRec struct {
	id    uint32
	state frames.DeliveryState
}

func newSession(c *Conn, local, remote uint16, b *frames.Begin) *Session {
	return &Session{
		conn:                 c,
		channel:              local,
		remoteCh:             remote,
		in:                   make(chan frames.Body, 64),
		wake:                 make(chan struct{}, 1),
		links:                make(map[uint32]*Link),
		handleMax:            b.HandleMax,
		nextIncomingID:       b.NextOutgoingID,
		inWindow:             sessionWindow,
		remoteIncomingWindow: b.IncomingWindow,
		unsettled:            make(map[uint32]*OutgoingDelivery),
	}
}

// Conn returns the session's connection.
func (s *Session) Conn() *Conn { return s.conn }

// deliver hands a frame from the reader to the mux. It returns false when
// the connection is closing.
func (s *Session) deliver(b frames.Body) bool {
	select {
	case s.in <- b:
		return true
	case <-s.conn.closing:
		return false
	}
}

// enqueue queues an operation for the mux from any goroutine.
func (s *Session) enqueue(o op) {
	s.opsMu.Lock()
	if s.dead {
		s.opsMu.Unlock()
		return
	}
	s.ops = append(s.ops, o)
	s.opsMu.Unlock()
	s.signal()
}

// enqueueMany queues the ops add appends, in one step: the mux sees all
// of them or none (a group settled at once is not split by a wake-up).
func (s *Session) enqueueMany(add func([]op) []op) {
	s.opsMu.Lock()
	if s.dead {
		s.opsMu.Unlock()
		return
	}
	s.ops = add(s.ops)
	s.opsMu.Unlock()
	s.signal()
}

func (s *Session) markReady(l *OutgoingLink) {
	s.opsMu.Lock()
	if s.dead {
		s.opsMu.Unlock()
		return
	}
	s.ready = append(s.ready, l)
	s.opsMu.Unlock()
	s.signal()
}

func (s *Session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// mux is the session goroutine.
func (s *Session) mux() {
	defer s.conn.sessWG.Done()
	defer s.exit()

	s.writeFrame(&frames.Begin{
		RemoteChannel:  &s.remoteCh,
		NextOutgoingID: s.nextOutgoingID,
		IncomingWindow: s.inWindow,
		OutgoingWindow: outgoingWindow,
		HandleMax:      s.conn.handleMax,
	})
	for !s.ended {
		select {
		case b := <-s.in:
			s.handleFrame(b)
			// Take whatever else is waiting before doing the output work,
			// so that one flow or disposition answers many frames.
			for i := 0; i < 64 && !s.ended; i++ {
				select {
				case b = <-s.in:
					s.handleFrame(b)
					continue
				default:
				}
				break
			}
		case <-s.wake:
		case <-s.conn.closing:
			return
		}
		if s.ended {
			return
		}
		s.runOps()
		s.flushSettles()
		s.pump()
		s.flushFlows()
	}
}

// exit runs when the mux stops: every remaining link is gone without
// frames (the session or the connection ended).
func (s *Session) exit() {
	if s.failure != nil {
		s.conn.fail(s.failure)
	}
	var reason error = ErrSessionEnded
	select {
	case <-s.conn.closing:
		reason = s.conn.closeErr
	default:
	}
	for h, l := range s.links {
		delete(s.links, h)
		s.linkGone(l, reason)
	}
	s.dispMu.Lock()
	s.dispGone = true
	if s.dispWait != nil {
		close(s.dispWait)
		s.dispWait = nil
	}
	s.dispMu.Unlock()
	s.opsMu.Lock()
	s.dead = true
	s.ops = nil
	s.ready = nil
	s.opsMu.Unlock()
	s.conn.mu.Lock()
	delete(s.conn.sessions, s)
	s.conn.mu.Unlock()
	s.conn.releaseChannel(s.channel)
}

// protocolError ends the session and, once the mux exits, closes the
// connection with e: the client broke the protocol (or a frame could not
// be encoded). The close waits for the exit because the caller may hold
// the writer lock, which closing the connection needs.
func (s *Session) protocolError(e *Error) {
	if s.failure == nil {
		s.failure = e
	}
	s.ended = true
}

// writeFrame sends one frame on the session's channel.
func (s *Session) writeFrame(b frames.Body) {
	if err := s.conn.w.writeFrame(s.channel, b); err != nil {
		s.encodeFailed(b, err)
	}
}

func (s *Session) encodeFailed(b frames.Body, err error) {
	s.conn.log.Error("amqp: cannot encode frame", "frame", frameName(b), "err", err)
	s.protocolError(Errorf(CondInternalError, "cannot encode %s frame", frameName(b)))
}

func (s *Session) handleFrame(b frames.Body) {
	switch b := b.(type) {
	case *frames.Transfer:
		s.handleTransfer(b)
	case *frames.Disposition:
		s.handleDisposition(b)
		s.dispositionDone()
	case *frames.Flow:
		s.handleFlow(b)
	case *frames.Attach:
		s.handleAttach(b)
	case *frames.Detach:
		s.handleDetach(b)
	case *frames.End:
		s.handleEnd(b)
	default:
		s.protocolError(Errorf(CondNotAllowed, "unexpected %s frame on a session", frameName(b)))
	}
}

// handleEnd answers the client's end; the links go with the session,
// their OnDetach callbacks before the answer, as for a detach.
func (s *Session) handleEnd(e *frames.End) {
	var reason error = ErrSessionEnded
	if e.Error != nil {
		reason = e.Error
	}
	for h, l := range s.links {
		delete(s.links, h)
		s.linkGone(l, reason)
	}
	s.writeFrame(&frames.End{})
	s.ended = true
}

// ---- flow control ----

// handleFlow applies the session part of a flow and hands the link part
// to the link (part 2 section 2.5.6).
func (s *Session) handleFlow(f *frames.Flow) {
	// remote-incoming-window := next-incoming-id(flow) + incoming-window(flow)
	//                           - next-outgoing-id(endpoint); an absent
	// next-incoming-id means our initial outgoing id, which is 0.
	var base uint32
	if f.NextIncomingID != nil {
		base = *f.NextIncomingID
	}
	w := base + f.IncomingWindow - s.nextOutgoingID
	if int32(w) < 0 {
		w = 0
	}
	s.remoteIncomingWindow = w

	if f.Handle == nil {
		if f.Echo {
			s.flowNeeded = true
		}
		return
	}
	l := s.links[*f.Handle]
	if l == nil {
		s.protocolError(Errorf(CondUnattachedHandle, "flow for handle %d, which is not attached", *f.Handle))
		return
	}
	switch {
	case l.state == linkDetaching:
		// in flight before the client saw our detach
	case l.incoming != nil:
		s.incomingFlow(l.incoming, f)
	default:
		s.outgoingFlow(l.outgoing, f)
	}
}

// incomingFlow handles a flow from the client as sender. It only matters
// when the client advanced its delivery-count on its own or asks for an
// echo.
func (s *Session) incomingFlow(l *IncomingLink, f *frames.Flow) {
	if f.DeliveryCount != nil && *f.DeliveryCount != l.deliveryCount {
		// delivery-limit = delivery-count + link-credit stays where we put it.
		limit := l.deliveryCount + l.linkCredit
		l.deliveryCount = *f.DeliveryCount
		l.linkCredit = uint32(max(int32(limit-l.deliveryCount), 0))
	}
	if f.Echo && l.state == linkAttached {
		s.wantLinkFlow(l)
	}
}

// outgoingFlow handles the client's credit for a link we send on.
func (s *Session) outgoingFlow(l *OutgoingLink, f *frames.Flow) {
	credit, drain := l.applyFlow(f)
	if f.Echo {
		l.queueFlow(false)
		s.activate(l)
	}
	if l.state != linkAttached {
		return // told on attach completion
	}
	l.drainDeferred = false
	if l.OnFlow != nil {
		l.OnFlow(credit, drain)
	}
	if drain && !l.drainDeferred {
		s.finishDrain(l)
	}
}

// finishDrain ends a drain: the unused credit is consumed by advancing
// delivery-count, and flow(drain=true, link-credit=0) goes out after the
// deliveries already queued (docs/wire/amqp.md §0.11).
func (s *Session) finishDrain(l *OutgoingLink) {
	if l.endDrain() {
		s.activate(l)
	}
}

// wantLinkFlow schedules a flow for an incoming link.
func (s *Session) wantLinkFlow(l *IncomingLink) {
	if !l.flowQueued {
		l.flowQueued = true
		s.linkFlows = append(s.linkFlows, l)
	}
}

// flushFlows sends the link flows and the session flow that became due.
func (s *Session) flushFlows() {
	if len(s.linkFlows) == 0 && !s.flowNeeded {
		return
	}
	w := &s.conn.w
	if !w.lock() {
		return
	}
	for _, l := range s.linkFlows {
		l.flowQueued = false
		if l.state != linkAttached {
			continue
		}
		s.u32[2] = l.outHandle
		s.u32[3] = l.deliveryCount
		s.u32[4] = l.linkCredit
		f := s.sessionFlow()
		f.Handle = &s.u32[2]
		f.DeliveryCount = &s.u32[3]
		f.LinkCredit = &s.u32[4]
		if !s.appendLocked(f) {
			break
		}
	}
	s.linkFlows = s.linkFlows[:0]
	if s.flowNeeded {
		s.appendLocked(s.sessionFlow())
	}
	w.unlock()
}

// sessionFlow fills the scratch flow with the session state. Every flow
// we send re-opens the incoming window fully.
func (s *Session) sessionFlow() *frames.Flow {
	s.inWindow = sessionWindow
	s.flowNeeded = false
	s.u32[0] = s.nextIncomingID
	s.fl = frames.Flow{
		NextIncomingID: &s.u32[0],
		IncomingWindow: s.inWindow,
		NextOutgoingID: s.nextOutgoingID,
		OutgoingWindow: outgoingWindow,
	}
	return &s.fl
}

// appendLocked encodes a frame into the locked writer buffer.
func (s *Session) appendLocked(b frames.Body) bool {
	w := &s.conn.w
	var err error
	if w.buf, err = appendFrame(w.buf, s.channel, b); err != nil {
		s.encodeFailed(b, err)
		return false
	}
	return true
}

// ---- handler operations ----

// runOps executes the operations handlers queued.
func (s *Session) runOps() {
	s.opsMu.Lock()
	ops := s.ops
	s.ops = s.opsSpare[:0]
	s.opsMu.Unlock()
	for i := range ops {
		o := &ops[i]
		switch o.kind {
		case opSettleIn:
			s.settleIncoming(o.in, o.state)
		case opSettleOut:
			s.settleOutgoing(o.out, o.state)
		case opForget:
			s.forgetOutgoing(o.out)
		case opClose:
			s.flushSettles() // settle before detaching
			var e *Error
			if o.err != nil {
				e = asError(o.err)
			}
			s.closeLink(o.link, e)
		case opCompleteAttach:
			if o.link.state == linkPending {
				s.completeAttach(o.link, o.err)
			}
		case opCompleteDrain:
			if out := o.link.outgoing; o.link.state == linkAttached && out.drainDeferred {
				out.drainDeferred = false
				s.finishDrain(out)
			}
		}
	}
	clear(ops)
	s.opsSpare = ops[:0]
}
