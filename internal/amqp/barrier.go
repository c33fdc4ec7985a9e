package amqp

import "context"

// Dispositions and requests on one connection: the reader hands each
// session's frames to that session's mux, and muxes of different sessions
// run concurrently, so a disposition the client sent on one session may
// reach OnDisposition after a transfer it sent later on another session
// reached OnDelivery. A handler that must see the client's dispositions in
// the order the client sent them relative to a delivery (Service Bus: a
// settlement, then at once a management request on another link) takes a
// DispositionMark when the delivery arrives and waits on it.

// DispositionMark records, for every session of a connection, how many
// disposition frames the reader had handed to it.
type DispositionMark struct {
	at []sessionMark
}

type sessionMark struct {
	s *Session
	n uint64
}

// DispositionMark returns a mark covering every disposition frame read on
// c so far. Taken in an OnDelivery callback, it covers every disposition
// the client sent before that delivery's last transfer frame.
func (c *Conn) DispositionMark() DispositionMark {
	var m DispositionMark
	c.mu.Lock()
	for s := range c.sessions {
		if n := s.dispRead.Load(); s.dispDone.Load() < n {
			m.at = append(m.at, sessionMark{s: s, n: n})
		}
	}
	c.mu.Unlock()
	return m
}

// Wait returns once every disposition the mark covers has been passed to
// its link's OnDisposition (or its session ended), or ctx is done.
func (m DispositionMark) Wait(ctx context.Context) error {
	for _, sm := range m.at {
		if err := sm.s.waitDispositions(ctx, sm.n); err != nil {
			return err
		}
	}
	return nil
}

// dispositionDone runs on the mux after a disposition frame was handled.
func (s *Session) dispositionDone() {
	s.dispDone.Add(1)
	if s.dispWaiters.Load() == 0 {
		return
	}
	s.dispMu.Lock()
	if s.dispWait != nil {
		close(s.dispWait)
		s.dispWait = nil
	}
	s.dispMu.Unlock()
}

// waitDispositions waits until the mux has handled n dispositions.
func (s *Session) waitDispositions(ctx context.Context, n uint64) error {
	s.dispWaiters.Add(1)
	defer s.dispWaiters.Add(-1)
	for {
		s.dispMu.Lock()
		if s.dispDone.Load() >= n || s.dispGone {
			s.dispMu.Unlock()
			return nil
		}
		if s.dispWait == nil {
			s.dispWait = make(chan struct{})
		}
		ch := s.dispWait
		s.dispMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
