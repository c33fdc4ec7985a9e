package relay

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/clock"
)

// ControlAddress is the address of the control link between nodes.
const ControlAddress = "$cluster"

// Listener is the owner side of the internal connection: the handler of
// the internal listener's amqp.Server.
type Listener struct {
	secret   []byte
	self     string
	verifier *Verifier
	log      *slog.Logger
	owner    interface {
		ConnectRelayed(c *amqp.Conn) (amqp.ConnHandler, error)
	}
}

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	Secret   []byte      // the cluster's shared secret; required
	Self     string      // this node's id; required
	Clock    clock.Clock // for the proofs' time; nil is the wall clock
	Sessions Sessions    // the live sessions of the nodes; required
	Logger   *slog.Logger
	// Owner serves the relayed links of an admitted connection
	// (servicebus.Handler); nil refuses them.
	Owner interface {
		ConnectRelayed(c *amqp.Conn) (amqp.ConnHandler, error)
	}
}

// NewListener returns the internal listener's handler.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	if len(cfg.Secret) == 0 || cfg.Self == "" || cfg.Sessions == nil {
		return nil, errors.New("relay: ListenerConfig needs Secret, Self and Sessions")
	}
	log := cfg.Logger
	if log == nil {
		log = discard()
	}
	return &Listener{secret: cfg.Secret, self: cfg.Self, verifier: NewVerifier(cfg.Secret, cfg.Self, cfg.Clock, cfg.Sessions), log: log, owner: cfg.Owner}, nil
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// ServerSASL is the SASL configuration of the internal listener's
// amqp.Server: PLAIN only, required, each login a node proof.
func (l *Listener) ServerSASL() amqp.SASLConfig {
	return amqp.SASLConfig{
		RequireSASL: true,
		PlainOnly:   true,
		CheckPlain: func(user, pass string) (any, error) {
			p, err := l.verifier.Check(user, pass)
			if err != nil {
				l.log.Warn("internal connection refused", "node", user, "err", err)
				return nil, err
			}
			return p, nil
		},
	}
}

// Connect admits a connection that logged in with a node proof.
func (l *Listener) Connect(c *amqp.Conn) (amqp.ConnHandler, error) {
	p, ok := c.SASLInfo().(Proof)
	if !ok {
		return nil, amqp.Errorf(amqp.CondUnauthorizedAccess, "the internal listener admits cluster nodes only")
	}
	pr := &peer{l: l, proof: p}
	if l.owner != nil {
		h, err := l.owner.ConnectRelayed(c)
		if err != nil {
			return nil, err
		}
		pr.owner = h
	}
	return pr, nil
}

// peer serves one admitted node's connection: the control link here,
// relayed links by the owner's handler.
type peer struct {
	l     *Listener
	proof Proof
	owner amqp.ConnHandler // nil: relayed links refused
}

func (p *peer) AttachIncoming(l *amqp.IncomingLink) error {
	if p.owner == nil {
		return amqp.Errorf(amqp.CondNotImplemented, "this node does not serve relayed links")
	}
	return p.owner.AttachIncoming(l)
}

// AttachOutgoing serves the control link: its first message is the
// owner's proof.
func (p *peer) AttachOutgoing(l *amqp.OutgoingLink) error {
	if l.SourceAddress() != ControlAddress {
		if p.owner == nil {
			return amqp.Errorf(amqp.CondNotImplemented, "this node does not serve relayed links")
		}
		return p.owner.AttachOutgoing(l)
	}
	proof := frames.AppendDataSection(nil, OwnerProof(p.l.secret, p.l.self, p.proof.Nonce))
	sent := false
	l.OnFlow = func(credit uint32, drain bool) {
		if !sent && credit > 0 {
			sent = l.Send(&amqp.OutgoingDelivery{Payload: proof, Settled: true}) == nil
		}
	}
	return nil
}

func (p *peer) Disconnected(err error) {
	if p.owner != nil {
		p.owner.Disconnected(err)
	}
}

// DialConfig says who dials whom.
type DialConfig struct {
	Secret  []byte
	Node    string // this node
	Session int64  // this node's live session
	Owner   string // the node dialled
	TLS     *tls.Config
	Clock   clock.Clock
}

// Dial opens the internal connection to the owner at addr ("host:port"),
// proving this node with a node proof, and returns it once the owner
// proved itself on the control link. ctx bounds the whole exchange.
func Dial(ctx context.Context, addr string, cfg DialConfig) (*goamqp.Conn, error) {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	var nonce [nonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	user, pass := MakeProof(cfg.Secret, cfg.Node, cfg.Owner, cfg.Session, clk.Now(), nonce)
	scheme := "amqp://"
	if cfg.TLS != nil {
		scheme = "amqps://"
	}
	conn, err := goamqp.Dial(ctx, scheme+addr, &goamqp.ConnOptions{
		SASLType:    goamqp.SASLTypePlain(user, pass),
		TLSConfig:   cfg.TLS,
		ContainerID: cfg.Node,
	})
	if err != nil {
		return nil, fmt.Errorf("relay: dial %s (%s): %w", cfg.Owner, addr, err)
	}
	if err := checkOwner(ctx, conn, cfg, nonce); err != nil {
		conn.Close()
		return nil, fmt.Errorf("relay: %s (%s) did not prove itself: %w", cfg.Owner, addr, err)
	}
	return conn, nil
}

func checkOwner(ctx context.Context, conn *goamqp.Conn, cfg DialConfig, nonce [nonceLen]byte) error {
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	r, err := s.NewReceiver(ctx, ControlAddress, &goamqp.ReceiverOptions{Credit: 1, SettlementMode: goamqp.ReceiverSettleModeFirst.Ptr()})
	if err != nil {
		return err
	}
	m, err := r.Receive(ctx, nil)
	if err != nil {
		return err
	}
	if !hmac.Equal(m.GetData(), OwnerProof(cfg.Secret, cfg.Owner, nonce)) {
		return errors.New("its proof does not match")
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.Close(cctx)
	return s.Close(cctx)
}
