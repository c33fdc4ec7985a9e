package amqp

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// maxRefusing bounds the connections being refused at one time (each
// needs a goroutine for the handshake that carries the refusal); beyond
// it the socket is closed at once.
const maxRefusing = 64

// Server accepts AMQP 1.0 connections and runs them. Create it with
// NewServer.
type Server struct {
	cfg     Config
	handler Handler

	mu        sync.Mutex // guards the fields below and Conn.slot, Conn.prev, Conn.next
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	nActive   int // connections counted against MaxConnections
	nRefusing int // connections being refused
	closed    bool

	// The unauthenticated connections, oldest first: they count against
	// MaxUnauthenticatedConnections as well as MaxConnections.
	unauthFirst, unauthLast *Conn
	nUnauth                 int

	wg sync.WaitGroup // connection goroutines
}

// NewServer returns a server that hands connections to h.
func NewServer(h Handler, cfg Config) (*Server, error) {
	if h == nil {
		return nil, errors.New("amqp: nil Handler")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Server{
		cfg:       cfg,
		handler:   h,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
	}, nil
}

// Serve accepts connections on l until Shutdown, then returns
// ErrServerClosed. The caller may wrap l with TLS. Serve may run on
// several listeners at once.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: wait and retry.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("amqp: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.accept(nc)
	}
}

// ServeConn serves one connection the caller accepted itself, such as an
// AMQP stream tunnelled through a WebSocket: it is counted against
// MaxConnections, bounded by HandshakeTimeout and closed by Shutdown like
// the connections Serve accepts. It returns at once; the server owns nc
// from then on (after Shutdown it is closed at once).
func (s *Server) ServeConn(nc net.Conn) { s.accept(nc) }

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// connSlot is what a connection counts against; guarded by Server.mu.
type connSlot uint8

const (
	slotRefusing connSlot = iota // being refused: counts against maxRefusing
	slotUnauth                   // not authenticated yet: MaxUnauthenticatedConnections and MaxConnections
	slotAuth                     // authenticated: MaxConnections
	slotEvicted                  // closed to make room: counts against nothing
)

// accept starts the goroutine of a new connection, or refuses it. Every
// transport's connections come through here, so the limits cover them
// all. A new connection counts as unauthenticated; when the
// unauthenticated budget is full, or MaxConnections is reached while
// some connections are unauthenticated, the oldest unauthenticated
// connection is closed to make room (see
// Config.MaxUnauthenticatedConnections).
func (s *Server) accept(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	var victim *Conn
	refuse := false
	budget := s.cfg.MaxUnauthenticatedConnections
	switch {
	case budget > 0 && s.nUnauth >= budget:
		victim = s.unauthFirst
	case s.cfg.MaxConnections > 0 && s.nActive >= s.cfg.MaxConnections:
		if budget > 0 && s.nUnauth > 0 {
			victim = s.unauthFirst
		} else {
			refuse = true
		}
	}
	if victim != nil {
		s.unlinkUnauthLocked(victim)
		s.nActive--
		victim.slot = slotEvicted
	}
	c := newConn(s, nc)
	if refuse {
		if s.nRefusing >= maxRefusing {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		s.nRefusing++
		c.slot = slotRefusing
	} else {
		s.nActive++
		c.slot = slotUnauth
		s.linkUnauthLocked(c)
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()

	if victim != nil {
		victim.evict()
	}
	go func() {
		defer s.wg.Done()
		c.serve(refuse)
		s.mu.Lock()
		delete(s.conns, c)
		switch c.slot {
		case slotRefusing:
			s.nRefusing--
		case slotUnauth:
			s.unlinkUnauthLocked(c)
			s.nActive--
		case slotAuth:
			s.nActive--
		}
		s.mu.Unlock()
	}()
}

// authenticated moves c from the unauthenticated budget to the
// authenticated connections.
func (s *Server) authenticated(c *Conn) {
	s.mu.Lock()
	if c.slot == slotUnauth {
		s.unlinkUnauthLocked(c)
		c.slot = slotAuth
	}
	s.mu.Unlock()
}

func (s *Server) linkUnauthLocked(c *Conn) {
	c.prev, c.next = s.unauthLast, nil
	if s.unauthLast != nil {
		s.unauthLast.next = c
	} else {
		s.unauthFirst = c
	}
	s.unauthLast = c
	s.nUnauth++
}

func (s *Server) unlinkUnauthLocked(c *Conn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		s.unauthFirst = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		s.unauthLast = c.prev
	}
	c.prev, c.next = nil, nil
	s.nUnauth--
}

// ConnStats counts a server's connections.
type ConnStats struct {
	Active          int // counted against MaxConnections
	Unauthenticated int // of Active, not authenticated yet
	Refusing        int // being refused (beyond MaxConnections)
	// Unsettled counts the deliveries sent unsettled on outgoing links
	// and not settled yet: the state kept for each until the client or
	// the handler settles it.
	Unsettled int
}

// Stats returns the current counts. It visits every connection's links:
// for monitoring and tests, not for every request.
func (s *Server) Stats() ConnStats {
	s.mu.Lock()
	st := ConnStats{Active: s.nActive, Unauthenticated: s.nUnauth, Refusing: s.nRefusing}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		for _, l := range c.OutgoingLinks() {
			st.Unsettled += l.Unsettled()
		}
	}
	return st
}

// Shutdown stops accepting, closes every connection with
// close(amqp:connection:forced) and waits until all connection goroutines
// have returned. If ctx ends first it closes the sockets outright, waits
// for the goroutines all the same and returns ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		_ = l.Close()
	}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	for _, c := range conns {
		c.Close(&Error{Condition: CondConnectionForced, Description: "the server is shutting down"})
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	for _, c := range conns {
		_ = c.nc.Close()
	}
	<-done
	return ctx.Err()
}
