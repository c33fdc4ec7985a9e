package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
)

// Mode is what a Proxy does with the bytes and connections it carries.
type Mode int

const (
	// Pass forwards everything both ways.
	Pass Mode = iota
	// BlackHole accepts connections and keeps every socket open but
	// forwards nothing, in either direction, not even a close: what a
	// network partition looks like to both ends. Bytes read before the hole opened are
	// held, not dropped; back in Pass they flow on, as TCP retransmission
	// delivers them when a real partition heals (a stale transaction may
	// then reach the database late: that is what fencing is for).
	BlackHole
	// Reset closes every connection at once and every new one as soon
	// as it is accepted (a crashed peer, a firewall sending resets).
	Reset
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case BlackHole:
		return "black-hole"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Proxy is a TCP proxy on a loopback ephemeral port in front of one
// address (a test PostgreSQL), whose Mode a test switches to cut a
// client off and heal it. Each accepted connection gets an upstream
// connection and two pumps (one per direction); the proxy owns every
// goroutine and Close stops them all.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond // signalled when mode changes or the proxy closes
	mode  Mode
	conns map[net.Conn]struct{}
	held  map[*byte][]byte // the chunks the pumps hold while a black hole, by first byte
	done  bool
	wg    sync.WaitGroup
}

// NewProxy listens on 127.0.0.1:0 and forwards to target (host:port)
// in Pass mode.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is u (a postgres:// URL) with its host and port replaced by the
// proxy's.
func (p *Proxy) URL(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	pu.Host = p.Addr()
	return pu.String(), nil
}

// SetMode switches the proxy to m: Reset closes every open connection
// now, BlackHole stops forwarding now, Pass resumes.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode = m
	var kill []net.Conn
	if m == Reset {
		for c := range p.conns {
			kill = append(kill, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range kill {
		c.Close()
	}
}

// Mode is the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Conns is the number of open sockets (client and upstream sides).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops accepting, closes every connection and waits for every
// goroutine of the proxy to end.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.done = true
	kill := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		kill = append(kill, c)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range kill {
		c.Close()
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// track registers c; false (and c closed) when the proxy is closed or
// resetting.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	ok := !p.done && p.mode != Reset
	if ok {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if !ok {
		c.Close()
	}
	return ok
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// pass waits while the proxy is a black hole; false when the
// connection must end instead (reset, closed).
func (p *Proxy) pass() bool { return p.passHolding(nil) }

// passHolding is pass for a pump holding chunk (read, not yet
// forwarded), which Holds sees while it waits.
func (p *Proxy) passHolding(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(chunk) > 0 && p.mode == BlackHole {
		if p.held == nil {
			p.held = map[*byte][]byte{}
		}
		p.held[&chunk[0]] = chunk
		defer delete(p.held, &chunk[0])
	}
	for p.mode == BlackHole && !p.done {
		p.cond.Wait()
	}
	return p.mode == Pass && !p.done
}

// Holds reports whether a chunk the proxy read while a black hole, and
// holds until it passes again, contains b: a test's way to know that a
// client's request is on its way but has not reached the server. (What
// the client wrote after that chunk waits in the socket's buffers,
// unseen.)
func (p *Proxy) Holds(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.held {
		if bytes.Contains(c, b) {
			return true
		}
	}
	return false
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects c upstream (once the proxy passes) and pumps both
// ways until either side ends.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	if !p.pass() {
		p.untrack(c)
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.untrack(c)
		return
	}
	if !p.track(up) {
		p.untrack(c)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pump(up, c)
	}()
	p.pump(c, up)
}

// pump copies src to dst, holding what it read while the proxy is a
// black hole; at the end it closes both sides (the other pump then ends
// too).
func (p *Proxy) pump(src, dst net.Conn) {
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.passHolding(buf[:n]) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF included: the side closed
			// Through a black hole the other side does not learn of it
			// (no FIN crosses a partition) until the hole heals.
			p.pass()
			return
		}
	}
}
