package amqp

import "github.com/busbarmq/busbar/internal/amqp/frames"

// Link lifecycle on the session goroutine: attach, the reply, detach from
// either side, and forgetting a link when it or its session ends.

func (s *Session) allocHandle() (uint32, bool) {
	for i, used := range s.handles {
		if !used {
			s.handles[i] = true
			return uint32(i), true
		}
	}
	h := uint32(len(s.handles))
	if h > s.handleMax {
		return 0, false
	}
	s.handles = append(s.handles, true)
	return h, true
}

func (s *Session) freeHandle(h uint32) { s.handles[h] = false }

func (s *Session) handleAttach(a *frames.Attach) {
	if a.Handle > s.conn.handleMax {
		s.protocolError(Errorf(CondNotAllowed, "handle %d exceeds handle-max %d", a.Handle, s.conn.handleMax))
		return
	}
	if s.links[a.Handle] != nil {
		s.protocolError(Errorf(CondHandleInUse, "attach on handle %d, which is in use", a.Handle))
		return
	}
	out, ok := s.allocHandle()
	if !ok {
		s.protocolError(Errorf(CondResourceLimitExceeded, "no handle left under the client's handle-max %d", s.handleMax))
		return
	}
	l := newLink(s, a, out)
	s.links[a.Handle] = l

	var err error
	switch {
	case a.Coordinator != nil && a.Role != frames.RoleSender:
		err = Errorf(CondNotAllowed, "only a sender link may attach to the transaction coordinator")
	case !s.conn.acquireLink():
		if !s.conn.authed.Load() {
			err = Errorf(CondResourceLimitExceeded, "at most %d links before the connection authenticates (put a token on $cbs first)", maxLinksBeforeAuth)
		} else {
			err = Errorf(CondResourceLimitExceeded, "link limit of %d per connection reached", s.conn.cfg.MaxLinks)
		}
	default:
		l.counted = true
		if l.incoming != nil {
			err = s.conn.handler.AttachIncoming(l.incoming)
		} else {
			err = s.conn.handler.AttachOutgoing(l.outgoing)
		}
	}
	if err == ErrAttachDeferred {
		l.state = linkPending
		return
	}
	s.completeAttach(l, err)
}

// completeAttach sends the attach reply: the link's terminus on success,
// a null terminus and a closing detach on refusal.
func (s *Session) completeAttach(l *Link, err error) {
	if err == nil && l.incoming != nil && l.incoming.OnDelivery == nil {
		err = Errorf(CondInternalError, "the handler accepted the link without OnDelivery")
	}
	reply := l.reply(err == nil)
	if err == nil {
		if _, encErr := reply.AppendAMQP(nil); encErr != nil {
			err = Errorf(CondInternalError, "cannot encode the attach reply: %v", encErr)
			reply = l.reply(false)
		}
	}
	if err == nil && l.outgoing != nil {
		// Findable before the client can see the attach answered.
		s.conn.registerOutgoing(l.outgoing)
	}
	s.writeFrame(reply)
	if err != nil {
		s.writeFrame(&frames.Detach{Handle: l.outHandle, Closed: true, Error: asError(err)})
		l.state = linkDetaching
		l.release()
		if l.outgoing != nil {
			l.outgoing.closeQueue() // Send fails from now on
		}
		return
	}
	l.state = linkAttached
	if in := l.incoming; in != nil {
		in.linkCredit = 0
		in.grant(s)
		return
	}
	out := l.outgoing
	s.activate(out) // in case Send queued while the attach was pending
	out.mu.Lock()
	credit, drain := out.credit, out.draining
	out.mu.Unlock()
	if credit > 0 || drain {
		if out.OnFlow != nil {
			out.OnFlow(credit, drain)
		}
		if drain && !out.drainDeferred {
			s.finishDrain(out)
		}
	}
}

// handleDetach handles the client's detach: the answer to ours, or the
// client closing the link. In the latter case the link's OnDetach runs
// before the answer is written (see the package comment, Link lifecycle).
func (s *Session) handleDetach(d *frames.Detach) {
	l := s.links[d.Handle]
	if l == nil {
		s.protocolError(Errorf(CondUnattachedHandle, "detach for handle %d, which is not attached", d.Handle))
		return
	}
	delete(s.links, d.Handle)
	if l.state == linkDetaching {
		s.freeHandle(l.outHandle)
		return
	}
	pending := l.state == linkPending
	// OnDetach runs before the answer: a client that sees its detach
	// answered finds what the link held (a session lock, a $cbs slot)
	// released, and may take it again at once.
	var reason error
	if d.Error != nil {
		reason = d.Error
	}
	s.linkGone(l, reason)
	if pending {
		// Detached before we answered the attach: answer, then detach.
		s.writeFrame(l.reply(false))
	}
	s.writeFrame(&frames.Detach{Handle: l.outHandle, Closed: true})
	s.freeHandle(l.outHandle)
}

// closeLink detaches a link on the handler's request.
func (s *Session) closeLink(l *Link, e *Error) {
	switch l.state {
	case linkPending:
		if e == nil {
			e = Errorf(CondDetachForced, "the link was closed before it was attached")
		}
		s.completeAttach(l, e)
	case linkAttached:
		s.writeFrame(&frames.Detach{Handle: l.outHandle, Closed: true, Error: e})
		var reason error = ErrLinkClosed
		if e != nil {
			reason = e
		}
		s.linkGone(l, reason)
		l.state = linkDetaching // the handle stays until the client answers
		s.links[l.inHandle] = l
	}
}

// linkGone forgets a link that was accepted or deferred and runs its
// OnDetach callback. The caller removed it from s.links and dealt with
// the frames.
func (s *Session) linkGone(l *Link, reason error) {
	prev := l.state
	l.state = linkGone
	if prev == linkDetaching {
		return // refused or already gone
	}
	l.release()
	if in := l.incoming; in != nil {
		if in.partial != nil {
			in.abortSpool(in.partial)
			in.partial = nil
		}
		if in.OnDetach != nil {
			in.OnDetach(reason)
		}
		return
	}
	out := l.outgoing
	s.conn.unregisterOutgoing(out)
	unsent := out.closeQueue()
	if out.nUnsettled.Load() > 0 {
		for id, d := range s.unsettled {
			if d.link == out {
				delete(s.unsettled, id)
			}
		}
		out.nUnsettled.Store(0)
	}
	if out.OnDetach != nil {
		out.OnDetach(reason, unsent)
	}
}
