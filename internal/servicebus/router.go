package servicebus

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// Router sends the links and management requests of entities another
// node of a cluster owns to that node (docs/design/cluster.md §8). It is
// defined here and implemented by package relay, which the server wires
// in (Config.Router), so that imports flow one way.
//
// The handler keeps everything a client authenticates with: $cbs, the
// grants and their expiry. Before it hands a link or request over it has
// checked the right the attach needs (Send, Listen, or any grant for a
// management node) and passes the client's rights on the entity, for the
// owner to check each operation against.
type Router interface {
	// Remote says whether unit (a queue or topic name) is served by
	// another node.
	Remote(unit string) bool
	// AttachSender serves a client's sender link to a remote entity and
	// AttachReceiver a client's receiver link, as amqp.ConnHandler's
	// methods do. They set the link's callbacks before returning; when
	// they defer the attach and later refuse it (OnDetach then never
	// runs) they call r.Refused.
	AttachSender(l *amqp.IncomingLink, r Relayed) error
	AttachReceiver(l *amqp.OutgoingLink, r Relayed) error
	// Request sends one encoded management request to the owner of
	// r.Unit at node (an address ending in $management) and returns the
	// encoded response, whose correlation-id is the request's message-id.
	Request(ctx context.Context, c *amqp.Conn, node string, payload []byte, r Relayed) ([]byte, error)
}

// OwnerRefusal is a Router's error when the owner itself refused a
// relayed request (the internal management link's attach: an entity under
// the unit that does not exist there, for example): classify gives the
// client the owner's condition, as a local refusal would have.
type OwnerRefusal struct {
	Condition   frames.Symbol
	Description string
}

func (e *OwnerRefusal) Error() string { return string(e.Condition) + ": " + e.Description }

// Relayed says what a gateway passes on with a relayed link.
type Relayed struct {
	Unit   string      // the queue or topic
	Rights auth.Rights // the client's rights on the entity
	// Refused, when set, is called once if a deferred attach is
	// refused.
	Refused func()
}

// RelayProperty is the attach property of a relayed link: the client's
// rights on the entity (auth.Rights as a long), which the owner trusts on
// its internal listener (ConnectRelayed) and nowhere else.
const RelayProperty = "com.busbar:relay"

// ConnectRelayed serves a connection of the cluster's internal listener,
// whose peer proved it is a node of the cluster: it puts no token on
// $cbs, and each link carries the client's rights in RelayProperty.
func (h *Handler) ConnectRelayed(c *amqp.Conn) (amqp.ConnHandler, error) {
	ch, err := h.Connect(c)
	if err != nil {
		return nil, err
	}
	cn := ch.(*conn)
	cn.relayed = true
	c.Authenticated()
	return cn, nil
}

// unitOf is the unit of an address: its queue or topic.
func unitOf(a address) string {
	u, _, _ := strings.Cut(a.entity, "/")
	return u
}

// remote says whether a is served by another node through the router.
// A relayed connection never relays again: the gateway routed it here.
func (c *conn) remote(a address) bool {
	r := c.h.router
	return r != nil && !c.relayed && c.ns() == c.h.def && (a.kind == nodeEntity || a.kind == nodeManagement) && r.Remote(unitOf(a))
}

// rightsOn is the union of the client's unexpired rights covering path.
func (c *conn) rightsOn(path string) auth.Rights {
	if c.ns().Auth.AllowAnyKey() {
		return auth.Manage | auth.Send | auth.Listen
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.h.clock.Now()
	var r auth.Rights
	for _, g := range c.grants {
		if (g.ExpiresAt.IsZero() || now.Before(g.ExpiresAt)) && g.Covers(path) {
			r |= g.Rights
		}
	}
	return r
}

// trustRelay records the rights a relayed link carries as the
// connection's grant for its entity. On a relayed connection only.
func (c *conn) trustRelay(l *amqp.Link, a address) error {
	if a.kind == nodeCBS {
		return unauthorized("The internal listener takes no tokens: the gateway node checks them.")
	}
	rights, ok := l.Properties()[RelayProperty].(int64)
	if !ok {
		return unauthorized("A link on the internal listener must carry %s.", RelayProperty)
	}
	if c.h.router != nil && c.h.router.Remote(unitOf(a)) {
		return &broker.Error{Kind: broker.KindMoved, Msg: fmt.Sprintf("'%s' is not served by this node.", unitOf(a))}
	}
	return c.addGrant(auth.Grant{KeyName: "relayed", Rights: auth.Rights(rights), Resource: a.entity, Audience: a.entity})
}

// relayOut attaches a client's link to a remote entity through the
// router, under the token watch of the gateway (cbs.go).
func (c *conn) relayIncoming(l *amqp.IncomingLink, a address) error {
	if l.Properties()[propTransferDestination] != nil {
		return c.refuse("attach", a.path(), &broker.Error{Kind: broker.KindNotAllowed,
			Msg: "Send-via links to an entity another node serves are not supported yet."})
	}
	if a.sub != subNone {
		return c.refuse("attach", a.path(), &broker.Error{Kind: broker.KindNotAllowed,
			Msg: fmt.Sprintf("Cannot send messages to '%s': it is a dead-letter sub-queue.", a.path())})
	}
	if err := c.authorize(a.path(), auth.Send); err != nil {
		return c.refuse("attach", a.path(), err)
	}
	gone, refused := relayGone()
	err := c.h.router.AttachSender(l, Relayed{Unit: unitOf(a), Rights: c.rightsOn(a.path()), Refused: refused})
	c.guardRelayed(&l.Link, &l.OnDetach, gone, refused, a.path(), auth.Send, err)
	return err
}

func (c *conn) relayOutgoing(l *amqp.OutgoingLink, a address) error {
	if err := c.authorize(a.path(), auth.Listen); err != nil {
		return c.refuse("attach", a.path(), err)
	}
	gone, refused := relayGone()
	err := c.h.router.AttachReceiver(l, Relayed{Unit: unitOf(a), Rights: c.rightsOn(a.path()), Refused: refused})
	prev := l.OnDetach
	var detach func(error)
	c.guardRelayed(&l.Link, &detach, gone, refused, a.path(), auth.Listen, err)
	if detach != nil {
		l.OnDetach = func(err error, unsent []*amqp.OutgoingDelivery) {
			detach(err)
			if prev != nil {
				prev(err, unsent)
			}
		}
	}
	return err
}

// relayGone returns the channel closed when a relayed link is gone, and
// the function that closes it (once).
func relayGone() (<-chan struct{}, func()) {
	done := make(chan struct{})
	var once sync.Once
	return done, func() { once.Do(func() { close(done) }) }
}

// guardRelayed puts an accepted (or deferred) relayed link under the
// token watch: detached when the client's token expires unrenewed, and
// forgotten when it is gone or its deferred attach was refused.
func (c *conn) guardRelayed(l *amqp.Link, onDetach *func(error), gone <-chan struct{}, close func(), path string, want auth.Rights, attachErr error) {
	if attachErr != nil && attachErr != amqp.ErrAttachDeferred {
		return
	}
	prev := *onDetach
	*onDetach = func(err error) {
		close()
		if prev != nil {
			prev(err)
		}
	}
	c.guard(l, gone, path, want)
}

// relayRequest sends a management request to the owner of its entity
// and returns the owner's response as it is. The rights passed on are
// those covering the management node, which is what a local request is
// checked against (a token for "entity/$management" only, as the JS
// SDK's rule manager puts, covers it but not the entity).
func (c *conn) relayRequest(payload []byte, node address) ([]byte, error) {
	return c.h.router.Request(c.ctx, c.c, node.String(), payload, Relayed{Unit: unitOf(node), Rights: c.rightsOn(node.String())})
}

// serveRelayed relays one management request (payload, decoded as req
// by serveRequest) and routes the owner's response as serveRequest routes
// a local one. A request the owner could not be asked is answered with
// its failure.
func (c *conn) serveRelayed(payload []byte, req *frames.Message, node address, session *amqp.Session) {
	out, err := c.relayRequest(payload, node)
	if err != nil {
		resp := failed(c.fail(appProp(req, "operation"), node.path(), err))
		if out, err = resp.encode(req); err != nil {
			c.log.Error("cannot encode reply", "node", node.String(), "err", err)
			return
		}
	}
	rl := c.route(req.Properties.ReplyTo, node, session)
	if rl == nil {
		c.log.Info("no link to reply on", "node", node.String(), "replyTo", req.Properties.ReplyTo)
		return
	}
	rl.sendParts(out, nil)
}
