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

	mu        sync.Mutex // guards the fields below
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	nActive   int // connections counted against MaxConnections
	nRefusing int // connections being refused
	closed    bool

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

// accept starts the goroutine of a new connection, or refuses it.
func (s *Server) accept(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	refuse := s.cfg.MaxConnections > 0 && s.nActive >= s.cfg.MaxConnections
	if refuse {
		if s.nRefusing >= maxRefusing {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		s.nRefusing++
	} else {
		s.nActive++
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		c.serve(refuse)
		s.mu.Lock()
		delete(s.conns, c)
		if refuse {
			s.nRefusing--
		} else {
			s.nActive--
		}
		s.mu.Unlock()
	}()
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
