package amqp

import (
	"net"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// writer batches the frames of one connection into as few network writes
// as possible. Session goroutines append complete encoded frames to buf
// between lock and unlock; the writer goroutine swaps buf for its spare
// (the buffer it wrote last time) and writes everything in one call. A
// busy connection thus writes many frames per syscall and reuses two
// buffers instead of allocating per frame.
//
// Appenders wait while buf holds writeBufferLimit bytes or more, so a
// client that stops reading pushes back on the sessions instead of
// growing memory; the write deadline eventually disconnects it.
type writer struct {
	nc           net.Conn
	writeTimeout time.Duration
	heartbeat    time.Duration // interval of empty frames; 0 disables; set before run
	onError      func(error)   // called once by run on a write failure

	mu     sync.Mutex
	space  sync.Cond // signalled when buf was taken or the writer closed
	buf    []byte    // encoded frames waiting to be written
	closed bool      // nothing more is accepted; run exits once buf is written
	abort  bool      // run exits without writing buf

	wake chan struct{} // capacity 1: buf has data or closed changed
	done chan struct{} // closed when run returns
}

func (w *writer) init(nc net.Conn, writeTimeout time.Duration) {
	w.nc = nc
	w.writeTimeout = writeTimeout
	w.space.L = &w.mu
	w.wake = make(chan struct{}, 1)
	w.done = make(chan struct{})
}

// lock waits for room in buf and locks it for appending. It returns false,
// unlocked, if the writer accepts no more frames.
func (w *writer) lock() bool {
	w.mu.Lock()
	for len(w.buf) >= writeBufferLimit && !w.closed {
		w.space.Wait()
	}
	if w.closed {
		w.mu.Unlock()
		return false
	}
	return true
}

// full reports whether the locked buffer reached the limit; the caller
// should unlock and lock again to let the writer drain it.
func (w *writer) full() bool { return len(w.buf) >= writeBufferLimit }

// unlock releases buf and wakes the writer goroutine.
func (w *writer) unlock() {
	w.mu.Unlock()
	w.signal()
}

func (w *writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// writeFrame appends one frame. It reports an encoding error; a closed
// writer drops the frame silently.
func (w *writer) writeFrame(channel uint16, body frames.Body) error {
	if !w.lock() {
		return nil
	}
	var err error
	w.buf, err = appendFrame(w.buf, channel, body)
	w.unlock()
	return err
}

// close queues a final frame (nil for none) and stops accepting frames.
// run writes what is queued, half-closes the connection and returns.
func (w *writer) close(final frames.Body) {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		if final != nil {
			w.buf, _ = appendFrame(w.buf, 0, final)
		}
	}
	w.mu.Unlock()
	w.space.Broadcast()
	w.signal()
}

// stop discards queued frames; run returns without writing more.
func (w *writer) stop() {
	w.mu.Lock()
	w.closed = true
	w.abort = true
	w.buf = nil
	w.mu.Unlock()
	w.space.Broadcast()
	w.signal()
}

// run is the writer goroutine.
func (w *writer) run() {
	defer close(w.done)
	var tick <-chan time.Time
	if w.heartbeat > 0 {
		t := time.NewTicker(w.heartbeat)
		defer t.Stop()
		tick = t.C
	}
	var spare []byte
	var deadline time.Time // the write deadline in force
	for {
		beat := false
		select {
		case <-w.wake:
		case <-tick:
			// An empty frame on every tick with nothing else to write: at
			// most 8 bytes per interval, and the peer never waits longer
			// than one interval.
			beat = true
		}
		w.mu.Lock()
		if w.abort {
			w.mu.Unlock()
			return
		}
		out := w.buf
		w.buf = spare[:0]
		closed := w.closed
		w.mu.Unlock()
		w.space.Broadcast()

		if len(out) == 0 && beat && !closed {
			out = frames.AppendEmptyFrame(out)
		}
		if len(out) > 0 {
			// As for reads (connReader.Read): the deadline moves only when
			// less than writeTimeout is left, so every write gets between
			// writeTimeout and 1.25 writeTimeout.
			if now := time.Now(); deadline.Sub(now) < w.writeTimeout {
				deadline = now.Add(w.writeTimeout + w.writeTimeout/4)
				_ = w.nc.SetWriteDeadline(deadline)
			}
			if _, err := w.nc.Write(out); err != nil {
				w.stop()
				w.onError(err)
				return
			}
		}
		if closed {
			if cw, ok := w.nc.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return
		}
		if cap(out) > 4*writeBufferLimit {
			out = nil // do not keep a buffer a huge burst left behind
		}
		spare = out[:0]
	}
}

// appendFrame appends an encoded frame, leaving dst unchanged on error.
func appendFrame(dst []byte, channel uint16, body frames.Body) ([]byte, error) {
	out, err := frames.AppendFrame(dst, channel, body)
	if err != nil {
		return dst, err
	}
	return out, nil
}
