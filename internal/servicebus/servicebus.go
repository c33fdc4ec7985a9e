// Package servicebus is the Service Bus dialect of AMQP: the glue between
// the AMQP endpoint (package amqp) and the queue engine (package broker)
// that makes the official Azure Service Bus SDKs work against Busbar.
//
// Handler implements amqp.Handler. Per connection it serves
//
//   - $cbs: claims-based security (cbs.go). put-token validates a SAS
//     token or an Entra ID JWT with package auth and records the
//     audience, rights and expiry for the connection (at most maxGrants
//     audiences); later attaches and management operations are checked
//     against those grants (Send, Listen, Manage), and open links whose
//     token expired unrenewed are detached. One $cbs link pair per
//     connection.
//   - sender links to a queue or a topic: each transfer (single message or
//     the 0x80013700 batch format) is decoded into message.Message
//     (message.DecodeAMQP; deliveries are encoded by message.AppendAMQP) and
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
//   - the transaction coordinator (a sender link with a coordinator
//     target): declare, discharge, transfers and dispositions carrying
//     transactional-state, send-via links (txn.go,
//     docs/wire/transactions.md).
//
// namespace.go chooses the namespace a connection works in when the
// Handler serves several (Config.Namespaces): by the host name it
// connected to, else its first token's audience or key name; each
// namespace has its own broker, authenticator, observer and faults.
//
// router.go is the cluster's seam (Config.Router, implemented by package
// relay): links and management requests for an entity another node owns
// are handed to the router after the attach's right was checked here;
// ConnectRelayed serves the owner side, trusting the rights a relayed
// link carries (com.busbar:relay) on the internal listener only.
//
// faults.go applies injected faults (Config.Faults, package faults) at
// attach, send, delivery, settlement and management requests.
//
// entities.go says which address may name what. observe.go has the
// hooks for metrics (Config.Observer: connections, failed requests) and
// the spans made when Config.Tracer is set (send, deliver, settle,
// management), which join the trace a message carries.
//
// The wire contract it follows is docs/wire/amqp.md in this
// repository; section numbers in comments (§0.5 and so on)
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
//
// A peek-lock receiver link holds at most Config.MaxUnsettledPerLink
// deliveries the client has not settled; a message redelivered on the
// same link replaces its earlier delivery, and deliveries whose locks are
// gone are forgotten when the link is at its bound (receiver.go). A
// connection leaves the endpoint's budget of unauthenticated connections
// at its first valid put-token (cbs.go), or at once with AllowAnyKey.
package servicebus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/faults"
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
	// TokenCheckInterval is how often a connection with open links looks
	// for links whose token expired (see cbs.go); zero means a second.
	TokenCheckInterval time.Duration
	// Observer is told of connections and failed requests (metrics); nil
	// tells no one.
	Observer Observer
	// Tracer makes the spans of sends, deliveries, settlements and
	// management operations (observe.go); nil makes none.
	Tracer trace.Tracer
	// MaxUnsettledPerLink bounds the deliveries a peek-lock receiver link
	// has sent that the client has not settled; at the bound the link
	// sends nothing more until the client settles or locks expire.
	// Default DefaultMaxUnsettledPerLink (5000).
	MaxUnsettledPerLink int
	// Faults are the fault rules to apply (faults.go); nil injects none.
	Faults *faults.Set
	// Namespaces, when set, lets connections work in other namespaces
	// than the default one Broker, Auth, Observer and Faults make
	// (namespace.go); nil serves the default namespace only.
	Namespaces Namespaces
	// StreamFrom is the stored size from which a message is sent to a
	// receiver straight from the store, a frame at a time, rather than
	// read whole into memory first (broker.Receiver.StreamBodies). 0 is
	// DefaultStreamFrom (256 KiB); negative never.
	StreamFrom int64
	// MaxSpoolsPerConnection bounds the large messages (past StreamFrom)
	// one connection may be sending at once, each spooled to a file;
	// default DefaultMaxSpoolsPerConnection (16). MaxSpoolBytes bounds the
	// bytes spooled by every connection together; default
	// DefaultMaxSpoolBytes (4 GiB). Past either a transfer is rejected
	// with amqp:resource-limit-exceeded.
	MaxSpoolsPerConnection int
	MaxSpoolBytes          int64
	// Router, when set, relays the links and management requests of
	// entities another node of a cluster serves (router.go); nil serves
	// every entity from Broker.
	Router Router
}

// DefaultStreamFrom is Config.StreamFrom's default.
const DefaultStreamFrom = 256 << 10

// Handler is the Service Bus handler for an amqp.Server.
type Handler struct {
	def        *Namespace // the default namespace
	nss        Namespaces // nil: the default namespace only
	clock      clock.Clock
	log        *slog.Logger
	namespace  string
	tokenCheck time.Duration
	tracer     trace.Tracer // nil: tracing off
	router     Router       // nil: no cluster

	maxUnsettled int
	streamFrom   int64       // Config.StreamFrom; 0: never
	spool        spoolLimits // spool.go
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
	h := &Handler{clock: cfg.Clock, log: cfg.Logger, namespace: cfg.Namespace, tokenCheck: cfg.TokenCheckInterval, tracer: cfg.Tracer, nss: cfg.Namespaces, router: cfg.Router}
	h.def = &Namespace{Broker: cfg.Broker, Auth: cfg.Auth, Observer: cfg.Observer, Faults: cfg.Faults}
	if h.tokenCheck <= 0 {
		h.tokenCheck = time.Second
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	if h.log == nil {
		h.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if h.namespace == "" {
		h.namespace = "busbar"
	}
	switch h.streamFrom = cfg.StreamFrom; {
	case h.streamFrom == 0:
		h.streamFrom = DefaultStreamFrom
	case h.streamFrom < 0:
		h.streamFrom = 0
	}
	h.spool.perConn, h.spool.maxBytes = int64(cfg.MaxSpoolsPerConnection), cfg.MaxSpoolBytes
	if h.spool.perConn <= 0 {
		h.spool.perConn = DefaultMaxSpoolsPerConnection
	}
	if h.spool.maxBytes <= 0 {
		h.spool.maxBytes = DefaultMaxSpoolBytes
	}
	h.maxUnsettled = cfg.MaxUnsettledPerLink
	if h.maxUnsettled <= 0 {
		h.maxUnsettled = DefaultMaxUnsettledPerLink
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
	if err := cn.startNamespace(); err != nil { // namespace.go
		cancel()
		return nil, cn.refuse("open", "", err)
	}
	// A delivery forgotten because its lock is gone (receiver.go) may
	// still be disposed of by the client: its lock is lost.
	c.AnswerUnknownDispositions(func() frames.DeliveryState { return cn.lost("", errLockGone) })
	if h.def.Auth.AllowAnyKey() {
		// Nothing to authenticate: links work without a token, so the
		// connection must not wait for one (amqp.Config.AuthTimeout).
		c.Authenticated()
	}
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

	// relayed: the connection came from another node of the cluster on
	// the internal listener (router.go); its links carry the rights.
	relayed bool

	mu      sync.Mutex
	closed  bool
	grants  []auth.Grant
	replies map[*amqp.OutgoingLink]*replyLink // $cbs and $management reply links

	cbsIn, cbsOut *amqp.Link    // the $cbs request and reply links (cbs.go)
	guarded       []guardedLink // entity links attached under a token (cbs.go)
	watching      bool          // the token watcher runs

	// spools counts the large messages the connection is sending, each
	// spooled to a file (spool.go).
	spools atomic.Int64

	// sessionLinks are the session receivers by link name (string →
	// *broker.Receiver), for management requests' associated-link-name
	// (session.go).
	sessionLinks sync.Map

	// settles orders settlements before management requests
	// (settleorder.go).
	settles settleOrder

	// txns are the connection's open transactions (txn.go).
	txns txnTable

	// nsp is the namespace the connection works in (namespace.go):
	// chosen at open by the host name, else at the first token, else
	// the default one. nsFixed and counted are guarded by mu.
	nsp     atomic.Pointer[Namespace]
	nsFixed bool
	counted bool // the namespace's observer was told of the connection
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
	c.endNamespace() // namespace.go
	c.log.Debug("connection closed", "reason", err)
}

// maxGrants bounds the tokens one connection holds (one per audience).
const maxGrants = 1024

// addGrant records an authorisation from a put-token, replacing an
// earlier one for the same audience and dropping expired ones. A
// connection holding maxGrants tokens for other audiences is refused.
func (c *conn) addGrant(g auth.Grant) error {
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
	clear(c.grants[len(kept):])
	c.grants = kept
	if len(kept) >= maxGrants {
		return &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
			"The connection already holds tokens for %d audiences, the most one connection may; open another connection.", maxGrants)}
	}
	c.grants = append(kept, g)
	return nil
}

// authorize checks that the connection holds an unexpired token covering
// path (an entity path, with sub-queue or $management suffix) with the
// right want. With AllowAnyKey nothing is checked, so clients that never
// put a token (plain AMQP clients) work too.
func (c *conn) authorize(path string, want auth.Rights) error {
	if c.ns().Auth.AllowAnyKey() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.authorizeLocked(path, want)
}

// authorizeLocked is authorize with c.mu held.
func (c *conn) authorizeLocked(path string, want auth.Rights) error {
	if c.ns().Auth.AllowAnyKey() {
		return nil
	}
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
	err = c.movedAway(op, entity, err)
	topic := false
	if entity != "" {
		typ, _, rerr := c.ns().Broker.Resolve(entity)
		topic = rerr == nil && typ == broker.EntityTopic
	}
	f := describe(c.log, c.h.clock.Now(), c.h.namespace, op, entity, topic, err)
	c.ns().observer().RequestFailed(entity, string(f.cond), f.status)
	return f
}

// movedAway turns a not-found for an entity this node no longer serves
// but another node of the cluster does (its unit moved while the client's
// link or lock was here) into what the move means for op: a settlement or
// lock renewal is lock-lost (the locks did not move with the unit), any
// other operation the retriable moved error (server-busy), never "the
// entity could not be found". The catalog is asked only on that failure.
func (c *conn) movedAway(op, entity string, err error) error {
	if entity == "" || c.h.router == nil || broker.KindOf(err) != broker.KindNotFound {
		return err
	}
	unit, _, _ := strings.Cut(entity, "/")
	if !c.h.router.Remote(unit) {
		return err
	}
	switch op {
	case "settle", opRenewLock, opUpdateDisposition:
		return &broker.Error{Kind: broker.KindLockLost,
			Msg: "The lock supplied is invalid: the entity moved to another node of the cluster, and its locks with it."}
	case opRenewSessionLock, opGetSessionState, opSetSessionState:
		return &broker.Error{Kind: broker.KindSessionLockLost,
			Msg: "The session lock was lost: the entity moved to another node of the cluster."}
	}
	return &broker.Error{Kind: broker.KindMoved,
		Msg: fmt.Sprintf("The messaging entity '%s' moved to another node of the cluster; retry.", entity)}
}

// errLockGone is the reason of a delivery forgotten by its link because
// its lock is gone.
var errLockGone = &broker.Error{Kind: broker.KindLockLost,
	Msg: "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."}

// lost is the outcome that settles a delivery whose lock is gone (err
// says why), without a log line: locks expiring is the normal course of
// events.
func (c *conn) lost(entity string, err error) *frames.Rejected {
	f := prepare(c.h.clock.Now(), c.h.namespace, entity, false, err)
	return &frames.Rejected{Error: f.amqpError()}
}

// refuse turns err into the error an Attach callback returns to refuse a
// link.
func (c *conn) refuse(op, entity string, err error) error {
	return c.fail(op, entity, err).amqpError()
}

// AttachIncoming handles a client sender link: to $cbs, to a management
// node or to an entity.
func (c *conn) AttachIncoming(l *amqp.IncomingLink) error {
	if !isCBSAddress(l.TargetAddress()) {
		if err := c.fixNamespace(); err != nil {
			return c.refuse("attach", "", err)
		}
	}
	if l.PeerAttach().Coordinator != nil {
		return c.attachCoordinator(l) // txn.go
	}
	a, err := parseAddress(l.TargetAddress())
	if err != nil {
		return c.refuse("attach", "", badRequest("The target address %q of link '%s' names no entity.", l.TargetAddress(), l.Name()))
	}
	if c.relayed {
		if err := c.trustRelay(&l.Link, a); err != nil {
			return c.refuse("attach", a.path(), err)
		}
	}
	if c.remote(a) && a.kind == nodeEntity {
		return c.relayIncoming(l, a) // router.go
	}
	switch a.kind {
	case nodeCBS:
		if err := c.claimCBS(true, &l.Link); err != nil {
			return c.refuse("attach", "", err)
		}
		l.OnDetach = func(error) { c.releaseCBS(&l.Link) }
		return c.attachRequests(l, a)
	case nodeManagement:
		if err := c.authorize(a.String(), 0); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		if c.remote(a) { // requests go to the owner (router.go)
		} else if _, err := c.checkEntity(a); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		return c.attachRequests(l, a)
	}
	if err := c.attachFault(a.path(), l.Name()); err != nil {
		return err
	}
	return c.attachSender(l, a)
}

// AttachOutgoing handles a client receiver link: a reply link of $cbs or a
// management node, or a receiver on an entity.
func (c *conn) AttachOutgoing(l *amqp.OutgoingLink) error {
	if !isCBSAddress(l.SourceAddress()) {
		if err := c.fixNamespace(); err != nil {
			return c.refuse("attach", "", err)
		}
	}
	a, err := parseAddress(l.SourceAddress())
	if err != nil {
		return c.refuse("attach", "", badRequest("The source address %q of link '%s' names no entity.", l.SourceAddress(), l.Name()))
	}
	if c.relayed {
		if err := c.trustRelay(&l.Link, a); err != nil {
			return c.refuse("attach", a.path(), err)
		}
	}
	if c.remote(a) && a.kind == nodeEntity {
		return c.relayOutgoing(l, a) // router.go
	}
	switch a.kind {
	case nodeCBS:
		if err := c.claimCBS(false, &l.Link); err != nil {
			return c.refuse("attach", "", err)
		}
		c.attachReply(l, a)
		detached := l.OnDetach
		l.OnDetach = func(err error, unsent []*amqp.OutgoingDelivery) {
			c.releaseCBS(&l.Link)
			detached(err, unsent)
		}
		return nil
	case nodeManagement:
		if err := c.authorize(a.String(), 0); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		if c.remote(a) { // requests go to the owner (router.go)
		} else if _, err := c.checkEntity(a); err != nil {
			return c.refuse("attach", a.path(), err)
		}
		c.attachReply(l, a)
		return nil
	}
	if err := c.attachFault(a.path(), l.Name()); err != nil {
		return err
	}
	return c.attachReceiver(l, a)
}
