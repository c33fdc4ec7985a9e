package servicebus

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
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
	// DeclareTxn declares a transaction on the owner of r.Unit for
	// client connection c (at the transaction's first operation on a
	// remote entity) and DischargeTxn commits (fail false) or rolls it
	// back there. DischargeTxn fails, without committing, when the unit's
	// owner is no longer the one the transaction was declared on.
	DeclareTxn(ctx context.Context, c *amqp.Conn, r Relayed) (RemoteTxn, error)
	DischargeTxn(ctx context.Context, c *amqp.Conn, t RemoteTxn, fail bool) error
}

// RemoteError is an owner's refusal passed on by the router as the owner
// answered it: its condition (classify keeps it) and description.
type RemoteError struct {
	Condition frames.Symbol
	Status    int32 // the management status, 0 on a link
	Desc      string
}

func (e *RemoteError) Error() string {
	text, _, _ := strings.Cut(e.Desc, " TrackingId:") // the owner's tracking suffix; ours is added
	return text
}

// RemoteTxn is a client transaction declared on the owner of its entity:
// the owner's txn-id, valid on one internal connection (Peer, the
// router's own handle, compared to tell an owner change).
type RemoteTxn struct {
	Unit string
	ID   []byte
	Peer any
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
	// Dest and DestRights are a send-via link's destination (an entity
	// path) and the client's rights on it.
	Dest       string
	DestRights auth.Rights
	// Txn binds the client's transaction id to Unit at a transactional
	// transfer or disposition on a relayed link whose internal
	// connection is peer: it declares the transaction on the owner at its
	// first operation and returns it. A refusal (an unknown or finished
	// transaction, another entity, another internal connection than the
	// one it was declared on) makes the transaction rollback-only.
	Txn func(id []byte, peer any) (RemoteTxn, *frames.Error)
	// InTxn is the transaction a relayed management request was sent in
	// (nil: none).
	InTxn *RemoteTxn
	// RefuseOutcome, set for a relayed receiver link, is the error a
	// disposition whose state is no outcome a message is settled with
	// (SettleReply false) is refused with, as the owner refuses it.
	RefuseOutcome func(state frames.DeliveryState) *frames.Error
}

// RelayProperty is the attach property of a relayed link: the client's
// rights on the entity (auth.Rights as a long), which the owner trusts on
// its internal listener (ConnectRelayed) and nowhere else.
const RelayProperty = "com.busbar:relay"

// Relay-only markers of transactions (internal listener only; go-amqp,
// the gateway's client, has no transaction frames):
//
//   - RelayDestProperty, an attach property of a relayed send-via link:
//     the client's rights on the destination (a long);
//   - RelayTxnProperty, an attach property of a relayed sender link: the
//     owner's txn-id (binary); every transfer on the link is a send in
//     that transaction, answered accepted or rejected;
//   - RelayTxnProperty, a message annotation of a modified outcome on a
//     relayed receiver link: the encoded transactional-state(txn-id,
//     outcome) the client's disposition carried, the owner's txn-id in
//     it; answered with the plain outcome;
//   - RelayTxnProperty, an application property of a relayed management
//     request: the owner's txn-id it was sent in;
//   - the management operations opRelayTxnDeclare (answers txn-id) and
//     opRelayTxnDischarge (txn-id, fail).
const (
	RelayDestProperty = "com.busbar:relay-dest"
	RelayTxnProperty  = "com.busbar:txn"
)

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
	if err := c.addGrant(auth.Grant{KeyName: "relayed", Rights: auth.Rights(rights), Resource: a.entity, Audience: a.entity}); err != nil {
		return err
	}
	if dr, ok := l.Properties()[RelayDestProperty].(int64); ok {
		if d, err := parseAddress(destOf(l)); err == nil && d.kind == nodeEntity {
			return c.addGrant(auth.Grant{KeyName: "relayed", Rights: auth.Rights(dr), Resource: d.entity, Audience: d.entity})
		}
	}
	return nil
}

// relayOut attaches a client's link to a remote entity through the
// router, under the token watch of the gateway (cbs.go).
func (c *conn) relayIncoming(l *amqp.IncomingLink, a address) error {
	r := Relayed{Unit: unitOf(a)}
	if dest := destOf(&l.Link); dest != "" {
		d, err := parseAddress(dest)
		if err != nil || d.kind != nodeEntity {
			return c.refuse("attach", a.path(), badRequest("The transfer destination %q names no entity.", dest))
		}
		if err := c.authorize(d.path(), auth.Send); err != nil {
			return c.refuse("attach", d.path(), err)
		}
		r.Dest, r.DestRights = d.path(), c.rightsOn(d.path())
	}
	if a.sub != subNone {
		return c.refuse("attach", a.path(), &broker.Error{Kind: broker.KindNotAllowed,
			Msg: fmt.Sprintf("Cannot send messages to '%s': it is a dead-letter sub-queue.", a.path())})
	}
	if err := c.authorize(a.path(), auth.Send); err != nil {
		return c.refuse("attach", a.path(), err)
	}
	gone, refused := relayGone()
	r.Rights, r.Refused = c.rightsOn(a.path()), refused
	r.Txn = func(id []byte, peer any) (RemoteTxn, *frames.Error) { return c.bindRemoteTxn(id, r, peer) }
	err := c.h.router.AttachSender(l, r)
	c.guardRelayed(&l.Link, &l.OnDetach, gone, refused, a.path(), auth.Send, err)
	return err
}

func (c *conn) relayOutgoing(l *amqp.OutgoingLink, a address) error {
	if err := c.authorize(a.path(), auth.Listen); err != nil {
		return c.refuse("attach", a.path(), err)
	}
	gone, refused := relayGone()
	r := Relayed{Unit: unitOf(a), Rights: c.rightsOn(a.path()), Refused: refused}
	r.Txn = func(id []byte, peer any) (RemoteTxn, *frames.Error) { return c.bindRemoteTxn(id, r, peer) }
	r.RefuseOutcome = func(state frames.DeliveryState) *frames.Error {
		return c.fail("settle", a.path(), unsupportedOutcome(state)).amqpError()
	}
	err := c.h.router.AttachReceiver(l, r)
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

// destOf is a sender link's send-via destination ("" for none).
func destOf(l *amqp.Link) string {
	switch v := l.Properties()[propTransferDestination].(type) {
	case string:
		return v
	case encoding.Symbol:
		return string(v)
	}
	return ""
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
// and returns the owner's response as it is.
// txnID is the client's transaction it was sent in (nil: none). The rights
// passed on are those covering the management node, which is what a local
// request is checked against (a token for "entity/$management" only, as
// the JS SDK's rule manager puts, covers it but not the entity).
func (c *conn) relayRequest(payload []byte, node address, txnID []byte) ([]byte, error) {
	r := Relayed{Unit: unitOf(node), Rights: c.rightsOn(node.String())}
	if txnID != nil {
		rt, err := c.remoteTxn(txnID, r, nil)
		if err != nil {
			return nil, err
		}
		r.InTxn = &rt
	}
	out, err := c.h.router.Request(c.ctx, c.c, node.String(), payload, r)
	if err != nil && txnID != nil {
		c.txnFail(txnID, err)
	}
	return out, err
}

// serveRelayed relays one management request (payload, decoded as req
// by serveRequest) and routes the owner's response as serveRequest routes
// a local one. A request the owner could not be asked is answered with
// its failure.
func (c *conn) serveRelayed(payload []byte, req *frames.Message, node address, session *amqp.Session, txnID []byte) {
	out, err := c.relayRequest(payload, node, txnID)
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
