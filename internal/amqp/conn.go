package amqp

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Conn is one client connection. Its reader goroutine (the one Serve
// started for it) performs the handshake, reads and routes frames, and at
// the end tears everything down; the writer goroutine and one goroutine
// per session run beside it.
type Conn struct {
	srv *Server
	cfg *Config
	nc  net.Conn
	log *slog.Logger
	rd  connReader
	br  *bufio.Reader
	w   writer

	// Set by the handshake, read-only afterwards.
	peerOpen      *frames.Open
	saslMechanism frames.Symbol
	saslUser      string
	saslInfo      any    // SASLConfig.CheckPlain's answer
	maxOutFrame   uint32 // largest frame we send: min(peer's max, ours)
	channelMax    uint16 // highest channel the client may use
	handleMax     uint32 // highest handle the client may use per session
	handler       ConnHandler
	writerStarted bool
	openSent      atomic.Bool // our open frame went out: close frames are allowed
	// unknownOutcome answers dispositions of untracked deliveries; set
	// by the handler in Connect (AnswerUnknownDispositions).
	unknownOutcome func() frames.DeliveryState

	stopRead  atomic.Bool   // the reader must stop: see connReader.Read
	closing   chan struct{} // closed by shutdown: sessions stop
	done      chan struct{} // closed when the connection is fully gone
	closeOnce sync.Once
	closeErr  error // why the connection ended; set in closeOnce
	linger    bool  // read until the peer closes after our close frame

	sessWG sync.WaitGroup // session goroutines

	// Guarded by srv.mu: which budget the connection counts against and
	// its place in the server's list of unauthenticated connections.
	slot       connSlot
	prev, next *Conn

	authed atomic.Bool // Authenticated was called

	mu        sync.Mutex  // guards the fields below
	authTimer *time.Timer // closes the connection at AuthTimeout; nil once authenticated or gone
	channels  []bool      // local channels in use
	nSess     int
	nLinks    int
	outLinks  map[string]*OutgoingLink // attached outgoing links by name
	sessions  map[*Session]struct{}    // running session muxes
}

// connReader wraps the net.Conn under the bufio.Reader. It sets the read
// deadline before every read from the network and notices shutdown.
type connReader struct {
	c        *Conn
	idle     time.Duration // per-read deadline; 0 uses deadline
	deadline time.Time     // absolute deadline (handshake, linger)
	linger   bool          // ignore stopRead (teardown drains the socket)
	err      error         // the last transport error
	idleSet  time.Time     // the idle deadline in force on the socket; zero if none
	// fillMax, if not 0, caps the next read (peekHeader's fill).
	fillMax int
	// large counts down the frames since the last large one (peekHeader).
	large int
}

var errStopped = errors.New("amqp: reader stopped")

func (r *connReader) Read(p []byte) (int, error) {
	if r.idle > 0 {
		// The idle deadline moves only when less than idle is left, to
		// now + 1.25 idle: every read still waits at least idle (so the
		// connection is closed after between idle and 1.25 idle without
		// input), and a busy connection updates the deadline a few times
		// per idle period instead of before every read.
		if now := time.Now(); r.idleSet.Sub(now) < r.idle {
			r.idleSet = now.Add(r.idle + r.idle/4)
			_ = r.c.nc.SetReadDeadline(r.idleSet)
		}
	} else {
		r.idleSet = time.Time{}
		_ = r.c.nc.SetReadDeadline(r.deadline)
	}
	// Checked after setting the deadline: shutdown stores the flag before
	// it moves the deadline to now, so either we see the flag here or
	// the read below is interrupted.
	if !r.linger && r.c.stopRead.Load() {
		r.err = errStopped
		return 0, errStopped
	}
	if r.fillMax > 0 && len(p) > r.fillMax {
		p = p[:r.fillMax]
	}
	n, err := r.c.nc.Read(p)
	if err != nil {
		r.err = err
		r.idleSet = time.Time{} // shutdown may have moved the deadline
	}
	return n, err
}

func newConn(s *Server, nc net.Conn) *Conn {
	c := &Conn{
		srv:      s,
		cfg:      &s.cfg,
		nc:       nc,
		log:      s.cfg.Logger.With("remote", nc.RemoteAddr().String()),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		outLinks: make(map[string]*OutgoingLink),
	}
	c.rd.c = c
	c.br = bufio.NewReaderSize(&c.rd, readBufferSize)
	c.w.init(nc, s.cfg.WriteTimeout)
	c.w.onError = func(err error) {
		c.log.Debug("amqp: write failed", "err", err)
		c.shutdown(ErrConnLost, closeSilent)
	}
	return c
}

// ContainerID returns the client's container id.
func (c *Conn) ContainerID() string { return c.peerOpen.ContainerID }

// Hostname returns the hostname of the client's open frame (Go includes a
// port when the endpoint had one).
func (c *Conn) Hostname() string { return c.peerOpen.Hostname }

// Properties returns the client's connection properties.
func (c *Conn) Properties() map[frames.Symbol]any { return c.peerOpen.Properties }

// RemoteAddr returns the client's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// ServerName is the host name the client reached the server by below
// AMQP, "" when nothing says: the TLS server name (SNI) of a TLS
// connection, or what a transport that knows one reports by a
// ServerName method (the Host header of a WebSocket upgrade).
func (c *Conn) ServerName() string {
	switch nc := c.nc.(type) {
	case *tls.Conn:
		return nc.ConnectionState().ServerName
	case interface{ ServerName() string }:
		return nc.ServerName()
	}
	return ""
}

// SASLMechanism returns the SASL mechanism the client chose, or "" if it
// skipped SASL.
func (c *Conn) SASLMechanism() frames.Symbol { return c.saslMechanism }

// SASLInfo returns what SASLConfig.CheckPlain answered for the
// connection's PLAIN login, or nil.
func (c *Conn) SASLInfo() any { return c.saslInfo }

// SASLUser returns the PLAIN authentication identity, or "".
func (c *Conn) SASLUser() string { return c.saslUser }

// Logger returns the connection's logger.
func (c *Conn) Logger() *slog.Logger { return c.log }

// Done is closed when the connection is gone and Disconnected has run.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close closes the connection with a close frame carrying err (nil for
// none). It does not wait; use Done.
func (c *Conn) Close(err *Error) {
	if err == nil {
		c.shutdown(ErrConnClosed, closeError)
		return
	}
	c.shutdown(err, closeError)
}

// Authenticated tells the server that the client proved who it is (for
// Service Bus, its first valid $cbs put-token): the connection leaves the
// budget of unauthenticated connections
// (Config.MaxUnauthenticatedConnections) and the AuthTimeout no longer
// applies. A SASL PLAIN login checked by SASLConfig.ValidatePlain counts
// too. It may be called from any goroutine, any number of times,
// including from Handler.Connect.
func (c *Conn) Authenticated() {
	if c.authed.Swap(true) {
		return
	}
	c.srv.authenticated(c)
	c.mu.Lock()
	if c.authTimer != nil {
		c.authTimer.Stop()
		c.authTimer = nil
	}
	c.mu.Unlock()
}

// AnswerUnknownDispositions makes the sessions answer a client's
// unsettled disposition of a delivery id they do not track — one the
// handler forgot (OutgoingDelivery.Forget) — with a settled disposition
// carrying the state outcome returns (called on the session goroutine for
// each answer). Without it such a disposition is ignored, and a client
// in rcv-settle-mode second waits in vain for the answer. Call it from
// Handler.Connect.
func (c *Conn) AnswerUnknownDispositions(outcome func() frames.DeliveryState) {
	c.unknownOutcome = outcome
}

// IsAuthenticated reports whether Authenticated was called.
func (c *Conn) IsAuthenticated() bool { return c.authed.Load() }

// startAuthTimer arms AuthTimeout once the open exchange is done.
func (c *Conn) startAuthTimer() {
	d := c.cfg.AuthTimeout
	if d <= 0 || c.authed.Load() {
		return
	}
	c.mu.Lock()
	if !c.authed.Load() {
		c.authTimer = time.AfterFunc(d, func() {
			if !c.authed.Load() {
				c.fail(Errorf(CondUnauthorizedAccess, "no valid token was presented within %v of open (put one on $cbs)", d))
			}
		})
	}
	c.mu.Unlock()
}

func (c *Conn) stopAuthTimer() {
	c.mu.Lock()
	if c.authTimer != nil {
		c.authTimer.Stop()
		c.authTimer = nil
	}
	c.mu.Unlock()
}

// evict closes an unauthenticated connection to make room for a newer
// one. It sends close(amqp:resource-limit-exceeded) if the handshake got
// as far as open, and does not linger for the peer's answer, so that an
// attacker's evicted connections cannot pile up.
func (c *Conn) evict() {
	c.log.Debug("amqp: closing the oldest unauthenticated connection to make room")
	c.shutdown(Errorf(CondResourceLimitExceeded, "too many unauthenticated connections: the oldest is closed to make room"), closeNoLinger)
}

// OutgoingLink returns the attached outgoing link (client receiver) with
// the given name, or nil.
func (c *Conn) OutgoingLink(name string) *OutgoingLink {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outLinks[name]
}

// OutgoingLinkByTarget returns an attached outgoing link whose target
// address equals addr, or nil. Request/response replies are routed by
// reply-to this way (docs/wire/amqp.md §0.5); when several links match, which
// one is returned is unspecified.
func (c *Conn) OutgoingLinkByTarget(addr string) *OutgoingLink {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.outLinks {
		if t := l.attach.Target; t != nil && t.Address == addr {
			return l
		}
	}
	return nil
}

// OutgoingLinks returns a snapshot of the attached outgoing links.
func (c *Conn) OutgoingLinks() []*OutgoingLink {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls := make([]*OutgoingLink, 0, len(c.outLinks))
	for _, l := range c.outLinks {
		ls = append(ls, l)
	}
	return ls
}

// closeMode says how shutdown ends the connection.
type closeMode int

const (
	closeSilent   closeMode = iota // transport lost: send nothing
	closeReply                     // the client sent close: answer it
	closeError                     // we close: send close(error), then linger
	closeNoLinger                  // we close: send close(error), do not linger
)

// shutdown starts closing the connection; only the first call counts.
// It may be called from any goroutine. reason is reported to the handler;
// with closeError an *Error reason goes into the close frame.
func (c *Conn) shutdown(reason error, mode closeMode) {
	c.closeOnce.Do(func() {
		c.closeErr = reason
		switch {
		case mode == closeSilent || !c.openSent.Load():
			c.w.stop()
		case mode == closeReply:
			c.w.close(&frames.Close{})
		default:
			var e *Error
			errors.As(reason, &e)
			c.w.close(&frames.Close{Error: e})
			c.linger = mode == closeError
		}
		close(c.closing)
		c.stopRead.Store(true)
		_ = c.nc.SetReadDeadline(time.Now())
	})
}

// fail closes the connection because of a protocol violation or a local
// decision, sending close with e.
func (c *Conn) fail(e *Error) {
	c.log.Debug("amqp: closing connection", "condition", e.Condition, "description", e.Description)
	c.shutdown(e, closeError)
}

// serve runs the connection to its end on the calling goroutine.
func (c *Conn) serve(refuse bool) {
	if err := c.handshake(refuse); err != nil {
		c.log.Debug("amqp: handshake failed", "err", err)
		c.shutdown(fmt.Errorf("%w: handshake: %v", ErrConnLost, err), closeSilent)
	} else {
		c.readLoop()
	}
	c.teardown()
}

// teardown waits for every goroutine of the connection, closes the socket
// and tells the handler.
func (c *Conn) teardown() {
	c.shutdown(ErrConnClosed, closeSilent) // no-op unless nothing closed yet
	c.stopAuthTimer()
	c.sessWG.Wait()
	if c.writerStarted {
		<-c.w.done
	}
	if c.linger {
		c.drain()
	}
	_ = c.nc.Close()
	if c.handler != nil {
		c.handler.Disconnected(c.closeErr)
	}
	close(c.done)
}

// drain reads and discards input for a short while after our close frame,
// until the peer closes: closing a socket with unread input makes TCP send
// a reset that can destroy the close frame before the peer reads it.
func (c *Conn) drain() {
	if c.rd.err != nil && !errors.Is(c.rd.err, errStopped) && !isTimeout(c.rd.err) {
		return // the transport already failed
	}
	c.rd.linger = true
	c.rd.idle = 0
	c.rd.deadline = time.Now().Add(closeLinger)
	_, _ = io.Copy(io.Discard, c.br)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readBufferSize is the size of a connection's read buffer: a read from
// the network brings in some 30 frames of a stream of 1 KB messages.
const readBufferSize = 32 << 10

// Reading large frames. The read buffer fills as far as the network
// allows, and the bytes of a frame body it holds are copied out of it;
// the rest of a body larger than the buffer is read straight into the
// frame's own buffer (frames.ReadFrameDirect). Filled whole for each
// header of a stream of 64 KB frames, the buffer held half of every
// frame, which was then copied (≈ 4 % of the broker's CPU on a stream of
// 64 KB messages). So while the stream carries large frames (one of
// readBufferSize or more among the last largeFrames frames), the fill
// that reads a frame's header reads at most largeFill bytes: the header,
// the start of the body, and the small frames that may follow (a
// message's last frame, a flow, a disposition). Streams of small frames
// keep the full buffer.
const (
	largeFrames = 16
	largeFill   = 4 << 10
)

// peekHeader makes sure the next frame's header is in the read buffer,
// with a fill of at most largeFill bytes while the stream carries large
// frames, and notes whether this frame is large.
func (c *Conn) peekHeader() error {
	if c.rd.large > 0 && c.br.Buffered() < frames.HeaderSize {
		c.rd.fillMax = largeFill
		defer func() { c.rd.fillMax = 0 }()
	}
	hb, err := c.br.Peek(frames.HeaderSize)
	if err != nil {
		if len(hb) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if binary.BigEndian.Uint32(hb) >= readBufferSize {
		c.rd.large = largeFrames
	} else if c.rd.large > 0 {
		c.rd.large--
	}
	return nil
}

// readLoop reads frames until the connection ends, handling connection
// frames itself and passing the others to their session.
func (c *Conn) readLoop() {
	sessions := make(map[uint16]*Session)
	for {
		if err := c.peekHeader(); err != nil {
			c.readFailed(err)
			return
		}
		fr, err := frames.ReadFrameDirect(c.br, &c.rd, c.cfg.MaxFrameSize)
		if err != nil {
			c.readFailed(err)
			return
		}
		if fr.Body == nil {
			continue // heartbeat
		}
		if fr.Type != frames.FrameTypeAMQP {
			c.fail(Errorf(CondFramingError, "unexpected SASL frame %s", fr.Body))
			return
		}
		switch b := fr.Body.(type) {
		case *frames.Close:
			if b.Error != nil {
				c.shutdown(b.Error, closeReply)
			} else {
				c.shutdown(ErrConnClosed, closeReply)
			}
			return
		case *frames.Begin:
			if _, dup := sessions[fr.Channel]; dup {
				c.fail(Errorf(CondNotAllowed, "begin on channel %d, which is in use", fr.Channel))
				return
			}
			s, e := c.newSession(fr.Channel, b)
			if e != nil {
				c.fail(e)
				return
			}
			sessions[fr.Channel] = s
		case *frames.End:
			s := sessions[fr.Channel]
			if s == nil {
				// go-amqp (the Go SDK's client) ends the sessions whose
				// begin it gave up waiting for, also when that begin was
				// never sent: nothing to end, and no reason to close every
				// other link of the connection.
				continue
			}
			delete(sessions, fr.Channel)
			if !s.deliver(b) {
				return
			}
		case *frames.Open:
			c.fail(Errorf(CondNotAllowed, "second open frame"))
			return
		default:
			s := sessions[fr.Channel]
			if s == nil {
				c.fail(Errorf(CondNotAllowed, "%s on channel %d, which has no session", frameName(b), fr.Channel))
				return
			}
			if _, isDisp := b.(*frames.Disposition); isDisp {
				s.dispRead.Add(1) // before the mux can see it
			}
			if !s.deliver(b) {
				return
			}
		}
	}
}

// readFailed maps a ReadFrame error to the way the connection ends.
func (c *Conn) readFailed(err error) {
	switch {
	case c.stopRead.Load():
		// shutdown already ran
	case c.rd.err != nil:
		if isTimeout(c.rd.err) {
			c.fail(Errorf(CondResourceLimitExceeded, "idle timeout: no frame received for %v", 2*c.cfg.IdleTimeout))
			return
		}
		c.log.Debug("amqp: connection lost", "err", c.rd.err)
		c.shutdown(ErrConnLost, closeSilent)
	case errors.Is(err, frames.ErrInvalidHeader) || errors.Is(err, frames.ErrFrameTooLarge):
		c.fail(Errorf(CondFramingError, "%v", err))
	default:
		c.fail(Errorf(CondDecodeError, "%v", err))
	}
}

// newSession starts the session the client began on channel ch.
func (c *Conn) newSession(ch uint16, b *frames.Begin) (*Session, *Error) {
	if b.RemoteChannel != nil {
		return nil, Errorf(CondNotAllowed, "begin with remote-channel set: the server does not begin sessions")
	}
	if ch > c.channelMax {
		return nil, Errorf(CondNotAllowed, "channel %d exceeds channel-max %d", ch, c.channelMax)
	}
	local, ok := c.allocChannel()
	if !ok {
		if !c.authed.Load() {
			return nil, Errorf(CondResourceLimitExceeded, "at most %d sessions before the connection authenticates (put a token on $cbs first)", maxSessionsBeforeAuth)
		}
		return nil, Errorf(CondResourceLimitExceeded, "too many sessions")
	}
	s := newSession(c, local, ch, b)
	c.mu.Lock()
	if c.sessions == nil {
		c.sessions = make(map[*Session]struct{})
	}
	c.sessions[s] = struct{}{}
	c.mu.Unlock()
	c.sessWG.Add(1)
	go s.mux()
	return s, nil
}

// allocChannel returns the lowest free local channel.
func (c *Conn) allocChannel() (uint16, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.MaxSessions > 0 && c.nSess >= c.cfg.MaxSessions {
		return 0, false
	}
	if c.nSess >= maxSessionsBeforeAuth && !c.authed.Load() {
		return 0, false
	}
	limit := int(c.peerOpen.ChannelMax)
	for i, used := range c.channels {
		if !used && i <= limit {
			c.channels[i] = true
			c.nSess++
			return uint16(i), true
		}
	}
	if len(c.channels) > limit {
		return 0, false
	}
	c.channels = append(c.channels, true)
	c.nSess++
	return uint16(len(c.channels) - 1), true
}

func (c *Conn) releaseChannel(ch uint16) {
	c.mu.Lock()
	c.channels[ch] = false
	c.nSess--
	c.mu.Unlock()
}

// acquireLink reserves room for one more attached link.
func (c *Conn) acquireLink() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.MaxLinks > 0 && c.nLinks >= c.cfg.MaxLinks {
		return false
	}
	if c.nLinks >= maxLinksBeforeAuth && !c.authed.Load() {
		return false
	}
	c.nLinks++
	return true
}

func (c *Conn) releaseLink() {
	c.mu.Lock()
	c.nLinks--
	c.mu.Unlock()
}

// registerOutgoing makes l findable by name; a newer link with the same
// name replaces an older one.
func (c *Conn) registerOutgoing(l *OutgoingLink) {
	c.mu.Lock()
	c.outLinks[l.attach.Name] = l
	c.mu.Unlock()
}

func (c *Conn) unregisterOutgoing(l *OutgoingLink) {
	c.mu.Lock()
	if c.outLinks[l.attach.Name] == l {
		delete(c.outLinks, l.attach.Name)
	}
	c.mu.Unlock()
}

// frameName names a performative for messages.
func frameName(b frames.Body) string {
	switch b.(type) {
	case *frames.Open:
		return "open"
	case *frames.Begin:
		return "begin"
	case *frames.Attach:
		return "attach"
	case *frames.Flow:
		return "flow"
	case *frames.Transfer:
		return "transfer"
	case *frames.Disposition:
		return "disposition"
	case *frames.Detach:
		return "detach"
	case *frames.End:
		return "end"
	case *frames.Close:
		return "close"
	}
	return "SASL frame"
}
