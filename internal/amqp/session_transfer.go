package amqp

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Deliveries on the session goroutine: transfers from the client and
// their settlement by the handler, transfers to the client and their
// dispositions.

func (s *Session) handleTransfer(t *frames.Transfer) {
	if !s.receiveTransfer(t) {
		// Not handed over whole: its bytes were copied or dropped.
		t.Buf.Release()
	}
}

// receiveTransfer takes one transfer frame and reports whether its frame
// buffer went to the delivery: to the handler with a whole message in one
// frame, or kept as the start of a multi-frame one (startPartial).
func (s *Session) receiveTransfer(t *frames.Transfer) (handedOver bool) {
	if s.inWindow == 0 {
		s.protocolError(Errorf(CondWindowViolation, "transfer beyond the session incoming-window"))
		return false
	}
	s.inWindow--
	s.nextIncomingID++
	if s.inWindow <= sessionWindow/2 {
		s.flowNeeded = true
	}
	l := s.links[t.Handle]
	if l == nil {
		s.protocolError(Errorf(CondUnattachedHandle, "transfer for handle %d, which is not attached", t.Handle))
		return false
	}
	if l.outgoing != nil {
		s.protocolError(Errorf(CondNotAllowed, "transfer on handle %d, where the client is the receiver", t.Handle))
		return false
	}
	if l.state != linkAttached {
		return false // in flight before the client saw our detach
	}
	in := l.incoming
	d := in.partial
	if d == nil {
		if t.DeliveryID == nil {
			s.protocolError(Errorf(CondNotAllowed, "first transfer of a delivery without delivery-id"))
			return false
		}
		if in.linkCredit == 0 {
			s.closeLink(l, Errorf(CondTransferLimitExceeded, "transfer without link credit"))
			return false
		}
		in.linkCredit--
		in.deliveryCount++
		d = &IncomingDelivery{
			Link:    in,
			ID:      *t.DeliveryID,
			Tag:     t.DeliveryTag,
			Settled: t.Settled,
			State:   t.State,
		}
		if t.MessageFormat != nil {
			d.MessageFormat = *t.MessageFormat
		}
		if !t.More && !t.Aborted && uint64(len(t.Payload)) <= in.maxSize() {
			// The common case: a whole message in one frame. The payload
			// aliases the frame's own buffer, so it is handed over as is.
			d.Payload, d.buf = t.Payload, t.Buf
			in.deliver(s, d)
			return true
		}
		in.partial = d
		in.oversize, in.refused, in.spooledBytes = false, nil, 0
		if in.startPartial(d, t) {
			return true // t's buffer is d's now, its payload taken
		}
	} else if t.DeliveryID != nil && *t.DeliveryID != d.ID {
		s.protocolError(Errorf(CondNotAllowed, "continuation transfer with delivery-id %d inside delivery %d", *t.DeliveryID, d.ID))
		return false
	}
	d.Settled = d.Settled || t.Settled
	if d.State == nil {
		d.State = t.State
	}
	if t.Aborted {
		in.partial = nil
		in.abortSpool(d)
		d.Release() // never delivered: its buffer back to the free list
		return false
	}
	if !in.oversize && in.refused == nil {
		in.take(d, t.Payload)
	}
	if t.More {
		return false
	}
	in.partial = nil
	if in.oversize || in.refused != nil {
		in.reject(s, d)
		return false
	}
	in.deliver(s, d)
	return false
}

// startPartial sets up the payload of d, a delivery whose first frame t
// does not hold it whole, and reports whether d kept t's buffer with t's
// payload in it (the caller must then neither release the buffer nor take
// the payload again); otherwise t's buffer is released by the caller.
//
// Package frames reads the first frame of a multi-frame delivery (one
// with a delivery-id and more=true) into a reassembly buffer with room
// for a second frame: d keeps it and the next frames are appended in
// place, so a two-frame message (64 KB in 65536-byte frames) is never
// copied. Only first frames get such buffers: continuation frames read
// ahead stay in buffers of their own size, which keeps a long message's
// frames in flight at what they were (TestLargeMessageMemory).
func (in *IncomingLink) startPartial(d *IncomingDelivery, t *frames.Transfer) (kept bool) {
	d.Payload = nil
	if t.More && !t.Aborted && in.gatherInPlace(t) {
		d.Payload, d.buf = t.Payload, t.Buf
		return true
	}
	if n := uint64(2 * len(t.Payload)); !t.Aborted && n > 0 {
		// Room for a second frame, so that a two-frame message is copied
		// once, not regrown; longer ones grow as append grows them.
		if c := min(n, in.maxSize()); c <= frames.ReassemblyCap {
			d.buf = frames.GetReassembly() // t's own buffer is released
			d.Payload = d.buf.Bytes()[:0]
		} else {
			d.Payload = make([]byte, 0, c)
		}
	}
	d.Tag = bytes.Clone(d.Tag) // t's buffer is released
	return false
}

// gatherInPlace reports whether the first frame t of a delivery can be
// kept as the start of its payload: it was read into a reassembly buffer
// with room after the payload, and the payload would go to memory as it
// is (within the size limit and not past any spooling threshold), just
// as take would put it there.
func (in *IncomingLink) gatherInPlace(t *frames.Transfer) bool {
	n := len(t.Payload)
	return t.Buf != nil && cap(t.Buf.Bytes()) == frames.ReassemblyCap && n > 0 && cap(t.Payload) > n &&
		uint64(n) <= in.maxSize() && (in.Spool == nil || in.SpoolFrom <= 0 || n <= in.SpoolFrom)
}

// take adds a frame's payload to the partial delivery d: in memory, or in
// its spool once it passed SpoolFrom (see IncomingLink.Spool), or nowhere
// once it passed the size limit.
func (in *IncomingLink) take(d *IncomingDelivery, p []byte) {
	size := uint64(len(d.Payload)) + in.spooledBytes + uint64(len(p))
	switch {
	case size > in.maxSize():
		in.oversize = true
		d.Payload = nil
		in.abortSpool(d)
	case d.Spooled != nil:
		in.spoolWrite(d, p)
	case in.Spool != nil && in.SpoolFrom > 0 && size > uint64(in.SpoolFrom):
		sp, err := in.Spool(d)
		switch {
		case err != nil:
			in.refused, d.Payload = err, nil
		case sp != nil:
			d.Spooled = sp
			head := d.Payload
			d.Payload = nil
			if in.spoolWrite(d, head) {
				in.spoolWrite(d, p)
			}
		default:
			d.Payload = append(d.Payload, p...)
		}
	default:
		d.Payload = append(d.Payload, p...)
	}
}

// reject answers a completed delivery that was too large or refused.
func (in *IncomingLink) reject(s *Session, d *IncomingDelivery) {
	in.oversize = false
	var rerr *Error
	if in.refused != nil {
		rerr = asError(in.refused)
		in.refused = nil
	} else {
		rerr = Errorf(CondMessageSizeExceeded, "message larger than the link's max-message-size %d", in.maxSize())
	}
	if !d.Settled {
		in.unsettled++
		s.settleIncoming(d, &frames.Rejected{Error: rerr})
	}
}

// spoolWrite writes p to d's spool; a failed write refuses the delivery
// and aborts the spool. It reports whether the write succeeded.
func (in *IncomingLink) spoolWrite(d *IncomingDelivery, p []byte) bool {
	if err := d.Spooled.Write(p); err != nil {
		in.refused = err
		in.abortSpool(d)
		return false
	}
	in.spooledBytes += uint64(len(p))
	return true
}

// abortSpool drops d's spool, if it has one.
func (in *IncomingLink) abortSpool(d *IncomingDelivery) {
	if d.Spooled != nil {
		d.Spooled.Abort()
		d.Spooled = nil
	}
}

// ---- dispositions ----

// handleDisposition passes the client's dispositions of our deliveries to
// the handler. Dispositions of the client's own deliveries (role sender)
// need nothing: we settle those when the handler does.
//
// A disposition the client leaves unsettled waits for our answer. For
// delivery ids the session does not track (the handler settled them on
// its own, to forget them) it is answered with Conn's unknown-disposition
// outcome, if the handler set one: one disposition per run of unknown ids.
func (s *Session) handleDisposition(d *frames.Disposition) {
	if d.Role != frames.RoleReceiver {
		return
	}
	first, last := d.First, d.First
	if d.Last != nil {
		last = *d.Last
	}
	span := last - first
	answer := !d.Settled && s.conn.unknownOutcome != nil
	if span >= uint32(len(s.unsettled)) && span > maxDispositionWalk {
		// A wide range (perhaps hostile): walk the map, not the range.
		known := false
		for id, od := range s.unsettled {
			if id-first <= span {
				known = true
				s.clientDisposition(id, od, d)
			}
		}
		if answer && !known {
			s.answerUnknown(first, last)
		}
		return
	}
	run := -1 // start of a run of unknown ids, as an offset from first
	for i := uint32(0); i <= span; i++ {
		if od := s.unsettled[first+i]; od != nil {
			if run >= 0 {
				s.answerUnknown(first+uint32(run), first+i-1)
				run = -1
			}
			s.clientDisposition(first+i, od, d)
		} else if answer && run < 0 {
			run = int(i)
		}
	}
	if run >= 0 {
		s.answerUnknown(first+uint32(run), last)
	}
}

// maxDispositionWalk is the widest disposition range walked id by id
// when the session tracks fewer deliveries than that.
const maxDispositionWalk = 1024

// answerUnknown settles the delivery ids first..last, which the session
// does not track, with the connection's unknown-disposition outcome.
func (s *Session) answerUnknown(first, last uint32) {
	s.disp = frames.Disposition{Role: frames.RoleSender, First: first, Settled: true, State: s.conn.unknownOutcome()}
	if last != first {
		s.u32[1] = last
		s.disp.Last = &s.u32[1]
	}
	s.writeFrame(&s.disp)
}

func (s *Session) clientDisposition(id uint32, od *OutgoingDelivery, d *frames.Disposition) {
	l := od.link
	if d.Settled {
		delete(s.unsettled, id)
		l.nUnsettled.Add(-1)
		od.done = true
	} else {
		od.asked = true
	}
	if l.OnDisposition != nil {
		l.OnDisposition(od, d.State, d.Settled)
	}
}

// settleIncoming records the handler's settlement of a client delivery.
func (s *Session) settleIncoming(d *IncomingDelivery, state frames.DeliveryState) {
	if d.done {
		return
	}
	d.done = true
	in := d.Link
	in.unsettled--
	if in.state != linkAttached {
		return
	}
	s.settlesIn = append(s.settlesIn, settleRec{d.ID, state})
	in.grant(s)
}

// settleOutgoing records the handler's final outcome for a delivery of
// ours that the client has not settled.
func (s *Session) settleOutgoing(d *OutgoingDelivery, state frames.DeliveryState) {
	if d.done || !d.sent || d.link.state != linkAttached {
		return
	}
	d.done = true
	delete(s.unsettled, d.id)
	d.link.nUnsettled.Add(-1)
	s.settlesOut = append(s.settlesOut, settleRec{d.id, state})
}

// forgetOutgoing drops a delivery the client has not settled from the
// session's state without telling the client (OutgoingDelivery.Forget).
func (s *Session) forgetOutgoing(d *OutgoingDelivery) {
	if d.done || d.asked || d.link.state != linkAttached {
		return
	}
	if !d.sent {
		d.forget = true // appendTransfer forgets it once sent
		return
	}
	d.done = true
	delete(s.unsettled, d.id)
	d.link.nUnsettled.Add(-1)
}

// flushSettles sends the settlements the handler made.
func (s *Session) flushSettles() {
	if len(s.settlesIn) > 0 {
		s.settlesIn = s.sendSettles(frames.RoleReceiver, s.settlesIn)
	}
	if len(s.settlesOut) > 0 {
		s.settlesOut = s.sendSettles(frames.RoleSender, s.settlesOut)
	}
}

// sendSettles sends settlements as dispositions, one per run of
// consecutive delivery ids with the same state, and returns recs emptied.
func (s *Session) sendSettles(role frames.Role, recs []settleRec) []settleRec {
	defer clear(recs) // drop the state references
	slices.SortFunc(recs, func(a, b settleRec) int { return cmp.Compare(a.id, b.id) })
	w := &s.conn.w
	if !w.lock() {
		return recs[:0]
	}
	for i := 0; i < len(recs); {
		j := i
		for j+1 < len(recs) && recs[j+1].id == recs[j].id+1 && sameState(recs[j+1].state, recs[i].state) {
			j++
		}
		s.disp = frames.Disposition{Role: role, First: recs[i].id, Settled: true, State: recs[i].state}
		if j > i {
			s.u32[1] = recs[j].id
			s.disp.Last = &s.u32[1]
		}
		if !s.appendLocked(&s.disp) {
			break
		}
		i = j + 1
		if w.full() {
			w.unlock()
			if !w.lock() {
				return recs[:0]
			}
		}
	}
	w.unlock()
	return recs[:0]
}

// sameState reports whether two settlements can share a disposition.
func sameState(a, b frames.DeliveryState) bool {
	if a == b {
		return true
	}
	switch a.(type) {
	case *frames.Accepted:
		_, ok := b.(*frames.Accepted)
		return ok
	case *frames.Released:
		_, ok := b.(*frames.Released)
		return ok
	}
	return false
}

// ---- transfers to the client ----

// activate puts a link with queued output on the active list.
func (s *Session) activate(l *OutgoingLink) {
	if !l.active {
		l.active = true
		s.active = append(s.active, l)
	}
}

// pump sends queued deliveries and link flows, round-robin over the
// links, as far as the client's session window allows.
func (s *Session) pump() {
	s.opsMu.Lock()
	for _, l := range s.ready {
		s.activate(l)
	}
	clear(s.ready)
	s.ready = s.ready[:0]
	s.opsMu.Unlock()
	if len(s.active) == 0 {
		return
	}
	w := &s.conn.w
	if !w.lock() {
		return
	}
	act := s.active
	s.active = s.activeSpare[:0]
	for i, l := range act {
		if s.ended {
			break
		}
		if s.pumpLink(l) {
			s.active = append(s.active, l)
		} else {
			l.active = false
		}
		if w.full() {
			w.unlock()
			if !w.lock() {
				s.active = append(s.active, act[i+1:]...)
				clear(act)
				s.activeSpare = act[:0]
				return
			}
		}
	}
	w.unlock()
	clear(act)
	s.activeSpare = act[:0]
	if len(s.active) > 0 && s.remoteIncomingWindow > 0 {
		// A link used up its fair share; come back after looking at the
		// input, which keeps a busy link from starving the others.
		s.signal()
	}
}

// pumpLink sends up to a fair share of l's queue into the locked writer
// buffer. It reports whether l still has output waiting.
func (s *Session) pumpLink(l *OutgoingLink) bool {
	if l.state != linkAttached {
		return false
	}
	w := &s.conn.w
	for budget := 32; budget > 0; {
		if w.full() {
			return true
		}
		if l.cur == nil {
			it, ok := l.peek()
			if !ok {
				return false
			}
			if it.d == nil {
				l.pop()
				s.u32[2] = l.outHandle
				s.u32[3] = it.deliveryCount
				s.u32[4] = it.credit
				f := s.sessionFlow()
				f.Handle = &s.u32[2]
				f.DeliveryCount = &s.u32[3]
				f.LinkCredit = &s.u32[4]
				f.Drain = it.drain
				if !s.appendLocked(f) {
					return false
				}
				continue
			}
			if s.remoteIncomingWindow == 0 {
				return true
			}
			l.pop()
			l.cur, l.curOff = it.d, 0
		}
		if s.remoteIncomingWindow == 0 {
			return true
		}
		if !s.appendTransfer(l) {
			return false
		}
		if l.cur == nil {
			budget--
		}
	}
	return true
}

// abortTransfer ends l.cur, whose stream failed to read, with a transfer
// aborted=true (buf is the writer's buffer without the failed frame): the
// client drops what it received of it, and the session forgets it.
func (s *Session) abortTransfer(l *OutgoingLink, buf []byte, err error) bool {
	d := l.cur
	w := &s.conn.w
	s.conn.log.Warn("aborting a delivery whose message could not be read", "link", l.Name(), "err", err)
	d.closeStream()
	l.cur = nil
	t := &s.tr
	if l.curOff == 0 {
		// Nothing went out: the aborted transfer still names the delivery.
		*t = frames.Transfer{Handle: l.outHandle, DeliveryID: &s.u32[0], DeliveryTag: d.Tag, MessageFormat: &s.u32[1], Aborted: true}
		if t.DeliveryTag == nil {
			t.DeliveryTag = []byte{}
		}
	} else {
		*t = frames.Transfer{Handle: l.outHandle, Aborted: true}
	}
	out, ferr := frames.AppendFrame(buf, s.channel, t)
	if ferr != nil {
		w.buf = buf
		s.encodeFailed(t, ferr)
		return false
	}
	w.buf = out
	s.nextOutgoingID++
	s.remoteIncomingWindow--
	if d.sent && !d.settled && !d.done {
		d.done = true
		delete(s.unsettled, d.id)
		l.nUnsettled.Add(-1)
	}
	d.Payload = nil
	return true
}

// appendTransfer writes the next frame of l.cur, splitting the payload to
// fit the client's max-frame-size with more=true.
func (s *Session) appendTransfer(l *OutgoingLink) bool {
	d := l.cur
	w := &s.conn.w
	t := &s.tr
	*t = frames.Transfer{Handle: l.outHandle, Settled: d.settled}
	if l.curOff == 0 {
		d.id = s.nextDeliveryID
		s.nextDeliveryID++
		d.sent = true
		if !d.settled {
			s.unsettled[d.id] = d
			l.nUnsettled.Add(1)
		}
		s.u32[0] = d.id
		s.u32[1] = d.MessageFormat
		t.DeliveryID = &s.u32[0]
		t.DeliveryTag = d.Tag
		if t.DeliveryTag == nil {
			t.DeliveryTag = []byte{}
		}
		t.MessageFormat = &s.u32[1]
	}
	rest := d.size() - l.curOff
	max := int(s.conn.maxOutFrame)
	start := len(w.buf)
	buf, err := frames.AppendFrame(w.buf, s.channel, t)
	if err != nil {
		s.encodeFailed(t, err)
		return false
	}
	n := int(min(rest, int64(max)))
	if len(buf)-start+n > max {
		t.More = true
		if buf, err = frames.AppendFrame(buf[:start], s.channel, t); err != nil {
			s.encodeFailed(t, err)
			return false
		}
		n = max - (len(buf) - start)
		if n <= 0 {
			w.buf = buf[:start]
			s.protocolError(Errorf(CondFrameSizeTooSmall, "max-frame-size %d cannot carry a transfer", max))
			return false
		}
	}
	if buf, err = d.appendBytes(buf, l.curOff, n); err != nil {
		return s.abortTransfer(l, buf[:start], err)
	}
	size := len(buf) - start
	buf[start], buf[start+1], buf[start+2], buf[start+3] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
	w.buf = buf
	s.nextOutgoingID++
	s.remoteIncomingWindow--
	l.curOff += int64(n)
	if !t.More {
		l.cur = nil
		d.closeStream()
		if d.settled {
			d.done = true
		} else {
			// The session keeps unsettled deliveries until they are
			// settled, but never needs their bytes again.
			d.Payload = nil
			if d.forget {
				s.forgetOutgoing(d)
			}
		}
	}
	return true
}
