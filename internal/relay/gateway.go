package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus"
)

// Owner is where a unit is served: the node's id and internal address.
type Owner struct {
	Node string
	Addr string
}

// GatewayConfig configures a Gateway.
type GatewayConfig struct {
	Secret []byte
	// Node is this node's id and Session its live session (asked at
	// each dial: it changes when the node registers anew). Addr, when
	// set, is this node's internal address: an attach parked for a unit
	// that this node then takes is served through it (park.go).
	Node    string
	Addr    string
	Session func() int64
	// OwnerOf answers the owner of a unit; ok false when this node
	// serves it, or no one does yet (then the local broker answers).
	OwnerOf func(unit string) (o Owner, ok bool)
	TLS     *tls.Config
	Clock   clock.Clock
	Logger  *slog.Logger
	// Timeout bounds a dial, an attach and a management request on the
	// owner. Default 30 s.
	Timeout time.Duration
	// Park bounds how long an attach for a unit that is moving is held
	// (park.go; --cluster-park). Default DefaultPark.
	Park time.Duration
	// MaxParked and MaxParkedPerConn bound the attaches held at once, in
	// all and per client connection. Defaults DefaultMaxParked and
	// DefaultMaxParkedPerConn.
	MaxParked, MaxParkedPerConn int
}

// Gateway is the gateway side of the relay: servicebus.Router over
// internal connections to the owners. A client connection gets its own
// internal connection to each owner it uses (opened at its first relayed
// link, closed when the client connection ends), so that the owner's
// grants of the relayed rights are that one client's.
type Gateway struct {
	cfg GatewayConfig
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	peers map[*amqp.Conn]map[string]*peerConn // client connection → owner node → internal connection

	parkMu     sync.Mutex
	parked     int                // attaches held (park.go)
	parkedConn map[*amqp.Conn]int // of them, by client connection
}

var _ servicebus.Router = (*Gateway)(nil)

// NewGateway returns a Gateway; Close stops it.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if len(cfg.Secret) == 0 || cfg.Node == "" || cfg.Session == nil || cfg.OwnerOf == nil {
		return nil, errors.New("relay: GatewayConfig needs Secret, Node, Session and OwnerOf")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Park <= 0 {
		cfg.Park = DefaultPark
	}
	if cfg.MaxParked <= 0 {
		cfg.MaxParked = DefaultMaxParked
	}
	if cfg.MaxParkedPerConn <= 0 {
		cfg.MaxParkedPerConn = DefaultMaxParkedPerConn
	}
	log := cfg.Logger
	if log == nil {
		log = discard()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Gateway{cfg: cfg, log: log, ctx: ctx, cancel: cancel, peers: make(map[*amqp.Conn]map[string]*peerConn),
		parkedConn: make(map[*amqp.Conn]int)}, nil
}

// Close closes every internal connection and waits for the relay's
// goroutines.
func (g *Gateway) Close() {
	g.cancel()
	g.mu.Lock()
	var all []*peerConn
	for _, m := range g.peers {
		for _, p := range m {
			all = append(all, p)
		}
	}
	g.peers = map[*amqp.Conn]map[string]*peerConn{}
	g.mu.Unlock()
	for _, p := range all {
		p.close()
	}
	g.wg.Wait()
}

// go runs f on a goroutine the Gateway waits for; false once closed.
func (g *Gateway) spawn(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		return false
	}
	g.wg.Add(1)
	go func() { defer g.wg.Done(); f() }()
	return true
}

// Remote implements servicebus.Router.
func (g *Gateway) Remote(unit string) bool {
	_, ok := g.cfg.OwnerOf(unit)
	return ok
}

// peerConn is one client connection's internal connection to one owner.
type peerConn struct {
	g     *Gateway
	owner Owner
	ready chan struct{} // closed when conn/sess/err are set
	conn  *goamqp.Conn
	sess  *goamqp.Session
	err   error

	mgmtMu sync.Mutex
	mgmt   map[string]*mgmtPair // by management node address
}

type mgmtPair struct {
	snd *goamqp.Sender
	rcv *goamqp.Receiver
}

// peer returns client connection c's internal connection to the owner
// of unit, dialling it on first use.
func (g *Gateway) peer(ctx context.Context, c *amqp.Conn, unit string) (*peerConn, error) {
	o, ok := g.cfg.OwnerOf(unit)
	if !ok {
		return nil, errMoved(unit)
	}
	return g.peerAt(ctx, c, unit, o)
}

// peerAt is peer for owner o.
func (g *Gateway) peerAt(ctx context.Context, c *amqp.Conn, unit string, o Owner) (*peerConn, error) {
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		return nil, errors.New("relay: the gateway is closed")
	}
	m := g.peers[c]
	if m == nil {
		m = make(map[string]*peerConn)
		g.peers[c] = m
		g.wg.Add(1)
		go func() { // drop the client's internal connections with it
			defer g.wg.Done()
			select {
			case <-c.Done():
			case <-g.ctx.Done():
			}
			g.mu.Lock()
			gone := g.peers[c]
			delete(g.peers, c)
			g.mu.Unlock()
			for _, p := range gone {
				p.close()
			}
		}()
	}
	p := m[o.Node]
	var stale *peerConn // the node moved to another address
	if p != nil && p.owner.Addr != o.Addr {
		delete(m, o.Node)
		stale, p = p, nil
	}
	if p == nil {
		p = &peerConn{g: g, owner: o, ready: make(chan struct{}), mgmt: make(map[string]*mgmtPair)}
		m[o.Node] = p
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer close(p.ready)
			dctx, cancel := context.WithTimeout(g.ctx, g.cfg.Timeout)
			defer cancel()
			p.conn, p.err = Dial(dctx, o.Addr, DialConfig{Secret: g.cfg.Secret, Node: g.cfg.Node, Session: g.cfg.Session(),
				Owner: o.Node, TLS: g.cfg.TLS, Clock: g.cfg.Clock})
			if p.err == nil {
				if p.sess, p.err = p.conn.NewSession(dctx, nil); p.err != nil {
					p.conn.Close()
				}
			}
			if p.err != nil {
				g.log.Warn("relay: cannot reach owner", "owner", o.Node, "addr", o.Addr, "err", p.err)
				g.mu.Lock()
				if g.peers[c][o.Node] == p {
					delete(g.peers[c], o.Node)
				}
				g.mu.Unlock()
			}
		}()
	}
	g.mu.Unlock()
	if stale != nil {
		stale.close()
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if p.err != nil {
		return nil, &amqp.Error{Condition: condServerBusy, Description: fmt.Sprintf("The node serving '%s' cannot be reached; try again.", unit)}
	}
	return p, nil
}

// forget drops p (its connection failed) so that the next link dials
// again.
func (g *Gateway) forget(c *amqp.Conn, p *peerConn) {
	g.mu.Lock()
	if g.peers[c][p.owner.Node] == p {
		delete(g.peers[c], p.owner.Node)
	}
	g.mu.Unlock()
	p.close()
}

func (p *peerConn) close() {
	<-p.ready
	if p.conn != nil {
		p.conn.Close()
	}
}

const (
	condServerBusy = "com.microsoft:server-busy"
	condLockLost   = "com.microsoft:message-lock-lost"
)

func errMoved(unit string) error {
	return &amqp.Error{Condition: frames.Symbol(condServerBusy), Description: fmt.Sprintf("'%s' is moving to another node; try again.", unit)}
}

// relayProps are the attach properties of a relayed link.
func relayProps(r servicebus.Relayed) map[string]any {
	return map[string]any{servicebus.RelayProperty: int64(r.Rights)}
}

// amqpError turns what the owner answered into the error the client
// gets: the owner's condition as it is, or server-busy for a failure
// that is not the owner's answer (the internal connection failed).
func amqpError(err error) *amqp.Error {
	var own *amqp.Error
	if errors.As(err, &own) {
		return own // the gateway's own refusal
	}
	var ae *goamqp.Error
	if errors.As(err, &ae) {
		return &amqp.Error{Condition: frames.Symbol(ae.Condition), Description: ae.Description, Info: symbolKeys(ae.Info)}
	}
	var le *goamqp.LinkError
	if errors.As(err, &le) && le.RemoteErr != nil {
		return amqpError(le.RemoteErr)
	}
	return &amqp.Error{Condition: condServerBusy, Description: "The node serving the entity could not be reached: " + err.Error() + "; try again."}
}

func frameError(err error) *frames.Error {
	e := amqpError(err)
	return &frames.Error{Condition: e.Condition, Description: e.Description, Info: e.Info}
}

func symbolKeys(m map[string]any) map[frames.Symbol]any {
	if m == nil {
		return nil
	}
	out := make(map[frames.Symbol]any, len(m))
	for k, v := range m {
		out[frames.Symbol(k)] = v
	}
	return out
}

// sessionFilter is the source filter of Service Bus session receivers.
const sessionFilter = "com.microsoft:session-filter"

// filters turns a client's source filters into go-amqp's.
func filters(src *frames.Source) []goamqp.LinkFilter {
	if src == nil {
		return nil
	}
	var out []goamqp.LinkFilter
	for name, v := range src.Filter {
		var code uint64
		if d, ok := v.(*encoding.Described); ok {
			code, _ = d.Descriptor.(uint64)
			v = d.Value
		} else if d, ok := v.(encoding.Described); ok {
			code, _ = d.Descriptor.(uint64)
			v = d.Value
		}
		if code == 0 && string(name) == sessionFilter {
			code = 0x0000_0137_0000_000c
		}
		out = append(out, goamqp.NewLinkFilter(string(name), code, v))
	}
	return out
}
