// Package servicebus is the Service Bus dialect of AMQP: the glue between
// the AMQP endpoint (package amqp) and the queue engine (package broker)
// that makes the official Azure Service Bus SDKs work against Busbar.
//
// Handler implements amqp.Handler. Per connection it serves
//
//   - $cbs: claims-based security. put-token validates a SAS token with
//     package auth and records the audience, rights and expiry for the
//     connection; later attaches and management operations are checked
//     against those grants (Send, Listen, Manage).
//   - sender links to a queue or a topic: each transfer (single message or
//     the 0x80013700 batch format) is decoded into message.Message and
//     sent to the broker, which fans a topic's messages out to its
//     subscriptions by their rules; the client gets accepted, or rejected
//     with a condition.
//   - receiver links on a queue, a subscription (topic/Subscriptions/name)
//     or their dead-letter sub-queues, in peek-lock or receive-and-delete
//     mode, with credit, drain, lock tokens as delivery tags and the
//     client's outcomes mapped to Complete, Abandon, Defer, DeadLetter and
//     Release.
//   - session receivers (a source filter com.microsoft:session-filter) on
//     session-enabled queues and subscriptions: a named session or the
//     next available one (a deferred attach, a long poll), the filter
//     echoed in the client's encoding, the session lock's expiry as
//     com.microsoft:locked-until-utc (session.go).
//   - <entity>/$management: the request/response operations the SDKs use
//     (renew-lock, peek, receive-by-sequence-number, schedule, cancel,
//     update-disposition, batch delete; renew-session-lock,
//     get-session-state, set-session-state, get-message-sessions) and, on
//     a subscription, the rule manager's add-rule, remove-rule and
//     enumerate-rules (rules.go).
//
// entities.go says which address may name what.
//
// The wire contract it follows is the team's amqp-wire.md (Azure Service
// Bus AMQP wire contract); section numbers in comments (§0.5 and so on)
// refer to it. Every error a client
// sees is mapped to an AMQP condition and status code in one place,
// classify in errors.go.
//
// Locks outlive links: when a receiver link detaches, messages it
// delivered and the client has not settled stay locked until they are
// settled by lock token (the SDKs fall back to $management for that) or
// their lock expires, as in Service Bus. Deliveries that were queued but
// never reached the client are released at once. A session receiver's
// link is different: closing it releases its session and the messages it
// holds (their delivery counts unchanged).
package servicebus

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
)

// Config configures a Handler.
type Config struct {
	// Broker is the queue engine. Required.
	Broker *broker.Broker
	// Auth validates CBS tokens. Required. With Auth.AllowAnyKey, links
	// and management operations need no token at all (plain AMQP clients
	// that never use $cbs work), and tokens that are put are checked only
	// for form, audience and expiry.
	Auth *auth.Authenticator
	// Clock tells the time for token expiry and error timestamps; nil is
	// the wall clock.
	Clock clock.Clock
	// Logger receives failures (each with the tracking id the client
	// sees) and link events; nil discards them.
	Logger *slog.Logger
	// Namespace names the namespace in error descriptions'
	// SystemTracker. Default "busbar".
	Namespace string
}

// Handler is the Service Bus handler for an amqp.Server.
type Handler struct {
	broker    *broker.Broker
	auth      *auth.Authenticator
	clock     clock.Clock
	log       *slog.Logger
	namespace string
}

var _ amqp.Handler = (*Handler)(nil)

// New returns a Handler for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Broker == nil {
		return nil, errors.New("servicebus: Config.Broker is required")
	}
	if cfg.Auth == nil {
		return nil, errors.New("servicebus: Config.Auth is required")
	}
	h := &Handler{broker: cfg.Broker, auth: cfg.Auth, clock: cfg.Clock, log: cfg.Logger, namespace: cfg.Namespace}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	if h.log == nil {
		h.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if h.namespace == "" {
		h.namespace = "busbar"
	}
	return h, nil
}

// Connect starts serving a connection.
func (h *Handler) Connect(c *amqp.Conn) (amqp.ConnHandler, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cn := &conn{
		h:      h,
		c:      c,
		log:    h.log.With("remote", remoteAddr(c), "container", c.ContainerID()),
		ctx:    ctx,
		cancel: cancel,
		host:   hostOnly(c.Hostname()),
	}
	cn.replies = make(map[*amqp.OutgoingLink]*replyLink)
	return cn, nil
}

func remoteAddr(c *amqp.Conn) string {
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// hostOnly strips a port from the open frame's hostname.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// conn is the state of one connection.
type conn struct {
	h    *Handler
	c    *amqp.Conn
	log  *slog.Logger
	host string // the client's hostname, for entity URIs in messages

	// ctx is cancelled when the connection is gone; every broker call and
	// goroutine of the connection uses it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	grants  []auth.Grant
	replies map[*amqp.OutgoingLink]*replyLink // $cbs and $management reply links

	// sessionLinks are the session receivers by link name (string →
	// *broker.Receiver), for management requests' associated-link-name
	// (session.go).
	sessionLinks sync.Map

	// settles orders settlements before management requests
	// (settleorder.go).
	settles settleOrder
}

// spawn runs f on a new goroutine of the connection, unless it is gone.
func (c *conn) spawn(f func()) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// Disconnected stops the connection's goroutines and waits for them.
func (c *conn) Disconnected(err error) {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.log.Info("connection closed", "reason", err)
}

// addGrant records an authorisation from a put-token, replacing an
// earlier one for the same audience.
func (c *conn) addGrant(g auth.Grant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.h.clock.Now()
	kept := c.grants[:0]
	for _, old := range c.grants {
		if strings.EqualFold(old.Audience, g.Audience) || (!old.ExpiresAt.IsZero() && !now.Before(old.ExpiresAt)) {
			continue
		}
		kept = append(kept, old)
	}
	c.grants = append(kept, g)
}

// authorize checks that the connection holds an unexpired token covering
// path (an entity path, with sub-queue or $management suffix) with the
// right want. With AllowAnyKey nothing is checked, so clients that never
// put a token (plain AMQP clients) work too.
func (c *conn) authorize(path string, want auth.Rights) error {
	if c.h.auth.AllowAnyKey() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.h.clock.Now()
	covered := false
	for _, g := range c.grants {
		if !g.ExpiresAt.IsZero() && !now.Before(g.ExpiresAt) {
			continue
		}
		if g.Covers(path) {
			covered = true
			if g.Rights.Has(want) {
				return nil
			}
		}
	}
	if covered {
		return unauthorized("Unauthorized access. '%s' claim(s) are required to perform this operation. Resource: '%s'.", want, c.entityURI(path))
	}
	return unauthorized("Unauthorized access: no valid token for '%s' was put on $cbs (or it expired). '%s' claim(s) are required.", c.entityURI(path), want)
}

// entityURI is the sb:// form of an entity path, as the cloud writes it
// in messages.
func (c *conn) entityURI(path string) string {
	host := c.host
	if host == "" {
		host = c.h.namespace
	}
	return "sb://" + host + "/" + path
}

// fail prepares err for the client (see describe).
func (c *conn) fail(op, entity string, err error) failure {
	topic := false
	if entity != "" {
		typ, _, rerr := c.h.broker.Resolve(entity)
		topic = rerr == nil && typ == broker.EntityTopic
	}
	return describe(c.log, c.h.clock.Now(), c.h.namespace, op, entity, topic, err)
}

// refuse turns err into the error an Attach callback returns to refuse a
// link.
func (c *conn) refuse(op, entity string, err error) error {
	return c.fail(op, entity, err).amqpError()
}

// AttachIncoming handles a client sender link: to $cbs, to a management
// node or to an entity.
func (c *conn) AttachIncoming(l *amqp.IncomingLink) error {
	a, err := parseAddress(l.TargetAddress())
	if err != nil {
		return c.refuse("attach", "", badRequest("The target address %q of link '%s' names no entity.", l.TargetAddress(), l.Name()))
	}
	switch a.kind {
	case nodeCBS:
		return c.attachRequests(l, a)
	case nodeManagement:
		if err := c.authorize(a.String(), 0); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		if _, err := c.checkEntity(a); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		return c.attachRequests(l, a)
	}
	return c.attachSender(l, a)
}

// AttachOutgoing handles a client receiver link: a reply link of $cbs or a
// management node, or a receiver on an entity.
func (c *conn) AttachOutgoing(l *amqp.OutgoingLink) error {
	a, err := parseAddress(l.SourceAddress())
	if err != nil {
		return c.refuse("attach", "", badRequest("The source address %q of link '%s' names no entity.", l.SourceAddress(), l.Name()))
	}
	switch a.kind {
	case nodeCBS:
		c.attachReply(l, a)
		return nil
	case nodeManagement:
		if err := c.authorize(a.String(), 0); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		if _, err := c.checkEntity(a); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		c.attachReply(l, a)
		return nil
	}
	return c.attachReceiver(l, a)
}
