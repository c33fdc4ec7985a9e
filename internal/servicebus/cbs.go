package servicebus

import (
	"fmt"
	"time"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// cbsRequest serves a $cbs request (docs/wire/amqp.md §2.2-§2.4). put-token
// validates the token — a shared access signature
// (servicebus.windows.net:sastoken) or an Entra ID JWT (jwt) — for the
// audience in "name" and the host the client named in its open: 401 for a
// bad token, 404 with the cloud's "could not be found" text when the
// audience names an entity that does not exist (the only way the Go SDK
// reports CodeNotFound, §0.13), else 202 and the grant is recorded for the
// connection. The optional "expiration" property is ignored: the token's
// own expiry is authoritative.
func (c *conn) cbsRequest(req *frames.Message) *response {
	op := appProp(req, "operation")
	if op != "put-token" {
		return failed(c.fail("cbs", "", badRequest("The $cbs operation '%s' is not supported; only put-token is.", op)))
	}
	audience := appProp(req, "name")
	token, err := frames.BodyValue(req.RawBody)
	if err != nil {
		return failed(c.fail("put-token", audience, unauthorized("The put-token request carries no token: %v", err)))
	}
	var tok string
	switch t := token.(type) {
	case string:
		tok = t
	case []byte:
		tok = string(t)
	default:
		return failed(c.fail("put-token", audience, unauthorized("The put-token request's token is a %T, not a string.", token)))
	}
	ns, host, err := c.tokenNamespace(audience, tok, appProp(req, "type")) // namespace.go
	if err != nil {
		return failed(c.fail("put-token", audience, err))
	}
	g, err := ns.Auth.Authenticate(c.ctx, auth.Presented{Token: tok, Type: appProp(req, "type"), Audience: audience, Host: host})
	if err != nil {
		return failed(c.fail("put-token", audience, err))
	}
	if err := c.setNamespace(ns); err != nil {
		return failed(c.fail("put-token", audience, err))
	}
	if g.Audience != "" {
		a, err := parseAddress(g.Audience)
		if err == nil && a.kind != nodeCBS && !c.remote(a) { // the owner checks a relayed one
			if _, err := c.checkEntity(a); err != nil {
				return failed(c.fail("put-token", a.path(), err))
			}
		}
	}
	if err := c.addGrant(g); err != nil {
		return failed(c.fail("put-token", g.Audience, err))
	}
	c.c.Authenticated() // leaves the unauthenticated budget, stops the token deadline
	return &response{status: statusAccepted, desc: "Accepted"}
}

// The $cbs node takes one sender and one receiver link per connection, as
// in Service Bus: a second one while the first is attached is refused with
// amqp:not-allowed (the Go SDK answers that by opening a new connection).
// The slots free when the links detach.

// claimCBS takes the connection's $cbs sender (in) or receiver slot for l.
func (c *conn) claimCBS(incoming bool, l *amqp.Link) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	slot, kind := &c.cbsOut, "receiver"
	if incoming {
		slot, kind = &c.cbsIn, "sender"
	}
	if *slot != nil {
		return &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf(
			"A %s link to $cbs is already open on this connection (link '%s'); only one $cbs sender and one receiver are allowed per connection.", kind, (*slot).Name())}
	}
	*slot = l
	return nil
}

// releaseCBS frees the slot l holds.
func (c *conn) releaseCBS(l *amqp.Link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cbsIn == l {
		c.cbsIn = nil
	}
	if c.cbsOut == l {
		c.cbsOut = nil
	}
}

// Tokens expire on open links: every sender and receiver link on an entity
// is recorded with the right it needs; while any are open, a watcher
// checks once per Config.TokenCheckInterval (by the injected clock's
// time) that the connection still holds an unexpired token for each, and
// detaches those it no longer covers with amqp:unauthorized-access. A new
// put-token for the audience (what the SDKs do before expiry) replaces the
// old grant and keeps the link.

// guardedLink is a link attached under a token.
type guardedLink struct {
	l    *amqp.Link
	gone <-chan struct{} // closed when the link detached
	path string
	want auth.Rights
}

// guard records l (attached to path with right want); the watcher starts
// with the first one. Without authentication (AllowAnyKey) nothing is
// recorded.
func (c *conn) guard(l *amqp.Link, gone <-chan struct{}, path string, want auth.Rights) {
	if c.ns().Auth.AllowAnyKey() {
		return
	}
	c.mu.Lock()
	kept := c.guarded[:0]
	for _, g := range c.guarded {
		if !isClosed(g.gone) {
			kept = append(kept, g)
		}
	}
	c.guarded = append(kept, guardedLink{l: l, gone: gone, path: path, want: want})
	start := !c.watching
	c.watching = true
	c.mu.Unlock()
	if start && !c.spawn(c.watchTokens) {
		c.mu.Lock()
		c.watching = false
		c.mu.Unlock()
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// watchTokens runs until the connection ends, detaching links whose token
// expired.
func (c *conn) watchTokens() {
	t := time.NewTicker(c.h.tokenCheck)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.expireLinks()
	}
}

// expireLinks detaches every guarded link the connection's grants no
// longer cover.
func (c *conn) expireLinks() {
	var expired []guardedLink
	c.mu.Lock()
	kept := c.guarded[:0]
	for _, g := range c.guarded {
		switch {
		case isClosed(g.gone):
		case c.authorizeLocked(g.path, g.want) != nil:
			expired = append(expired, g)
		default:
			kept = append(kept, g)
		}
	}
	clear(c.guarded[len(kept):])
	c.guarded = kept
	c.mu.Unlock()
	for _, g := range expired {
		err := unauthorized("The token for '%s' expired and was not renewed by a new put-token on $cbs; the link '%s' is detached. %s claim(s) are required.",
			c.entityURI(g.path), g.l.Name(), rightName(g.want))
		g.l.Close(c.fail("detach", g.path, err).amqpError())
	}
}

func rightName(r auth.Rights) string {
	if r == 0 {
		return "Listen, Send or Manage"
	}
	return r.String()
}
