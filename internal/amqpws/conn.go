package amqpws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

const (
	// chunkSize is the most the pump reads ahead of Read.
	chunkSize = 32 << 10

	// closeTimeout bounds the closing handshake: a peer that does not
	// answer our close frame in time loses the socket.
	closeTimeout = 2 * time.Second
)

var errTextMessage = errors.New("amqpws: text message received; AMQP travels in binary messages")

// Conn is a WebSocket carrying a byte stream in binary messages, as a
// net.Conn. Unlike websocket.NetConn, a Read deadline that passes leaves
// the connection usable (the AMQP endpoint moves its read deadline to
// interrupt the reader and then reads on). A Write deadline is taken when
// the Write starts; a Write that times out ends the WebSocket, since a
// message cannot be left half-written. All methods are safe for
// concurrent use.
type Conn struct {
	ws   *websocket.Conn
	raw  net.Conn // the hijacked HTTP connection: addresses, and the bound on Close
	host string   // the upgrade request's Host header, for ServerName

	readCtx   context.Context // the pump's reads
	readStop  context.CancelFunc
	writeCtx  context.Context // Writes; cancelled by Close
	writeStop context.CancelFunc

	rdl, wdl deadline

	chunks   chan []byte   // pump -> Read: the next bytes of the stream
	consumed chan struct{} // Read -> pump, capacity 1: the last chunk is used up
	pumpDone chan struct{} // closed when the pump returns; pumpErr is set before
	pumpErr  error
	text     atomic.Bool // the peer sent a text message

	closed    chan struct{} // closed when Close starts
	closeOnce sync.Once
	closeDone chan struct{} // closed when Close has finished

	rmu     sync.Mutex // serialises Read; guards pending
	pending []byte     // the unread rest of the current chunk

	wmu sync.Mutex // serialises Write (one message per call, in order)
}

// ServerName is the host name of the upgrade request's Host header,
// without a port ("" when it had none): the name the client reached the
// server by (amqp.Conn.ServerName).
func (c *Conn) ServerName() string {
	if h, _, err := net.SplitHostPort(c.host); err == nil {
		return h
	}
	return c.host
}

// NewConn wraps an accepted WebSocket whose underlying connection is raw
// and starts its pump. The caller must call Close.
func NewConn(ws *websocket.Conn, raw net.Conn) *Conn {
	ws.SetReadLimit(-1) // messages are streamed, never held whole
	c := &Conn{
		ws:        ws,
		raw:       raw,
		chunks:    make(chan []byte),
		consumed:  make(chan struct{}, 1),
		pumpDone:  make(chan struct{}),
		closed:    make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	c.rdl.ch = make(chan struct{})
	c.wdl.ch = make(chan struct{})
	c.readCtx, c.readStop = context.WithCancel(context.Background())
	c.writeCtx, c.writeStop = context.WithCancel(context.Background())
	go c.pump()
	return c
}

// pump reads messages and hands their bytes to Read, one chunk at a time:
// it reads the next chunk only after Read used up the last one.
func (c *Conn) pump() {
	defer close(c.pumpDone)
	buf := make([]byte, chunkSize)
	for {
		typ, r, err := c.ws.Reader(c.readCtx)
		if err != nil {
			c.pumpErr = readError(err)
			return
		}
		if typ != websocket.MessageBinary {
			c.text.Store(true)
			c.pumpErr = errTextMessage
			return
		}
		for {
			n, err := r.Read(buf)
			if n > 0 {
				select {
				case c.chunks <- buf[:n]:
				case <-c.closed:
					return
				}
				select {
				case <-c.consumed:
				case <-c.closed:
					return
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				c.pumpErr = readError(err)
				return
			}
		}
	}
}

// readError maps the end of the WebSocket to what a net.Conn reports: a
// normal close by the peer is io.EOF.
func readError(err error) error {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return io.EOF
	case -1:
		if errors.Is(err, net.ErrClosed) {
			return net.ErrClosed
		}
		return err
	default:
		return fmt.Errorf("amqpws: closed by the peer: %w", err)
	}
}

// Read reads the next bytes of the stream, whatever message they came in.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.pending) == 0 {
		// A deadline already past fails at once, even with data waiting.
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.rdl.wait():
			return 0, os.ErrDeadlineExceeded
		default:
		}
		select {
		case b := <-c.chunks:
			c.pending = b
		case <-c.pumpDone:
			return 0, c.pumpErr
		case <-c.rdl.wait():
			return 0, os.ErrDeadlineExceeded
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		c.consumed <- struct{}{} // never blocks: one chunk is out at a time
	}
	return n, nil
}

// Write sends p as one binary message (nothing for an empty p).
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	case <-c.wdl.wait():
		return 0, os.ErrDeadlineExceeded
	default:
	}
	ctx := c.writeCtx
	if t := c.wdl.when(); !t.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, t)
		defer cancel()
	}
	if err := c.ws.Write(ctx, websocket.MessageBinary, p); err != nil {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		default:
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("%w: %v", os.ErrDeadlineExceeded, err)
		}
		return 0, err
	}
	return len(p), nil
}

// Close ends the WebSocket with a closing handshake (status 1000, or 1003
// after a text message), bounded by closeTimeout, and waits for the pump.
// Reads and Writes in progress return net.ErrClosed. It returns nil;
// later calls wait for the first and return net.ErrClosed.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		close(c.closed)
	})
	if !first {
		<-c.closeDone
		return net.ErrClosed
	}
	defer close(c.closeDone)
	c.writeStop() // a Write stuck on a peer that does not read gives up
	code, reason := websocket.StatusNormalClosure, ""
	if c.text.Load() {
		code, reason = websocket.StatusUnsupportedData, "AMQP travels in binary messages"
	}
	bound := time.AfterFunc(closeTimeout, func() { _ = c.raw.Close() })
	_ = c.ws.Close(code, reason)
	bound.Stop()
	c.readStop()
	<-c.pumpDone
	c.rdl.set(time.Time{})
	c.wdl.set(time.Time{})
	return nil
}

// LocalAddr is the listener's address.
func (c *Conn) LocalAddr() net.Addr { return c.raw.LocalAddr() }

// RemoteAddr is the client's address (of the TCP connection; a proxy in
// between is not looked through).
func (c *Conn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

// SetReadDeadline sets the read deadline; it also interrupts a Read in
// progress.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the deadline of the Writes that start after it.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.set(t)
	return nil
}

// deadline is a settable point in time with a channel that is closed once
// it has passed (the scheme of net.Pipe's deadlines).
type deadline struct {
	mu    sync.Mutex
	t     time.Time
	timer *time.Timer
	ch    chan struct{} // closed once t has passed
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.ch // the timer fired: wait until it has closed ch
	}
	d.timer = nil
	d.t = t
	expired := isClosed(d.ch)
	if t.IsZero() {
		if expired {
			d.ch = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if expired {
			d.ch = make(chan struct{})
		}
		ch := d.ch
		d.timer = time.AfterFunc(dur, func() { close(ch) })
		return
	}
	if !expired {
		close(d.ch)
	}
}

// wait returns a channel that is closed when the deadline passes.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

// when returns the deadline, zero for none.
func (d *deadline) when() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.t
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
