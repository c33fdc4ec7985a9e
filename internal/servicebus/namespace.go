package servicebus

import (
	"errors"
	"strings"
	"sync"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/faults"
)

// A Handler serves one default namespace (Config.Broker, Auth, Observer,
// Faults) and, with Config.Namespaces, others. Each connection works in
// exactly one, chosen in this order and fixed once chosen:
//
//  1. at open, by the host name the client connected to
//     (Namespaces.ForHost): the open frame's hostname, else the TLS
//     server name (SNI) or the WebSocket upgrade's Host header
//     (amqp.Conn.ServerName);
//  2. otherwise at the first put-token on $cbs: by the host of the
//     token's audience (sb://NAME.localhost/queue), else by its key name
//     (Namespaces.ForKeyName, the namespace-per-key-name mode);
//  3. otherwise the default namespace: at the first put-token that
//     selects none, or the first link to anything but $cbs.
//
// A later token whose audience names another namespace is refused with
// amqp:unauthorized-access; so is one whose key name selects another.
// A connection is counted (Observer.ConnectionOpened) in its namespace
// once that is fixed, or in the default one when it closes undecided.
//
// A connection joins its namespace when it is fixed and leaves it when it
// ends. Namespace.Close (the namespace was deleted) closes those in it
// with the error given and refuses any that would join it later: at open
// (the host named it) with that error, at a put-token or attach likewise.

// Namespace is one namespace a Handler serves: its queue engine, its
// policies and entity rules, its metrics and its injected faults.
type Namespace struct {
	// Name is the namespace's name, for messages.
	Name     string
	Broker   *broker.Broker
	Auth     *auth.Authenticator
	Observer Observer    // nil tells no one
	Faults   *faults.Set // nil injects none

	// The connections working in the namespace, for Close.
	mu     sync.Mutex
	gone   error // set by Close: no connection may join any more
	conns  map[*conn]struct{}
	vacant chan struct{} // closed when gone and conns is empty
}

// join records c as working in n; it fails once n is closed.
func (n *Namespace) join(c *conn) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gone != nil {
		return n.gone
	}
	if n.conns == nil {
		n.conns = make(map[*conn]struct{})
	}
	n.conns[c] = struct{}{}
	return nil
}

// leave forgets c.
func (n *Namespace) leave(c *conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.conns, c)
	if n.gone != nil && len(n.conns) == 0 && n.vacant != nil {
		close(n.vacant)
		n.vacant = nil
	}
}

// Close ends the namespace for its clients: no connection joins it any
// more, and every connection working in it is closed with err's
// condition and description (classify). It returns a channel closed
// once every one of them has gone, after which no connection uses the
// namespace's broker. Closing again returns the same kind of channel.
func (n *Namespace) Close(err error) <-chan struct{} {
	n.mu.Lock()
	if n.gone == nil {
		n.gone = err
	}
	done := make(chan struct{})
	if len(n.conns) == 0 {
		close(done)
	} else if n.vacant != nil {
		done = n.vacant
	} else {
		n.vacant = done
	}
	conns := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.c.Close(c.fail("close", "", err).amqpError())
	}
	return done
}

// Namespaces chooses the namespace of a connection when a Handler serves
// several. Its methods are called on connection goroutines.
type Namespaces interface {
	// ForHost returns the namespace a host name (without a port)
	// selects, nil when it selects none.
	ForHost(host string) *Namespace
	// ForKeyName returns the namespace a SAS key name selects, creating
	// it on first use if the registry does so; nil and no error when it
	// selects none. It creates one only once verify accepted the token
	// with the new namespace's authenticator, so that only a client
	// holding its key can make it. Its errors are the client's (verify's,
	// a bound reached, a key name that cannot name a namespace).
	ForKeyName(keyName string, verify func(*auth.Authenticator) error) (*Namespace, error)
}

func (n *Namespace) observer() Observer {
	if n.Observer == nil {
		return noObserver{}
	}
	return n.Observer
}

// ns is the namespace the connection works in now.
func (c *conn) ns() *Namespace { return c.nsp.Load() }

// startNamespace chooses the namespace at Connect: the one the host
// selects, fixed; else the default, open to change until fixed.
func (c *conn) startNamespace() error {
	c.nsp.Store(c.h.def)
	if c.h.nss == nil {
		return c.fixNamespace()
	}
	for _, host := range []string{c.host, hostOnly(c.c.ServerName())} {
		if n := c.h.nss.ForHost(host); n != nil {
			c.nsp.Store(n)
			return c.fixNamespace()
		}
	}
	return nil
}

// fixNamespace fixes the connection's current namespace; it fails when
// that namespace has been closed (deleted) since it was chosen.
func (c *conn) fixNamespace() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nsFixed {
		return nil
	}
	if err := c.ns().join(c); err != nil {
		return err
	}
	c.nsFixed = true
	c.counted = true
	c.ns().observer().ConnectionOpened()
	return nil
}

// endNamespace tells the namespace's observer that the connection closed.
func (c *conn) endNamespace() {
	c.mu.Lock()
	counted, fixed := c.counted, c.nsFixed
	c.mu.Unlock()
	if fixed {
		c.ns().leave(c)
	}
	obs := c.ns().observer()
	if !counted {
		obs.ConnectionOpened()
	}
	obs.ConnectionClosed()
}

// tokenNamespace returns the namespace a put-token for audience, with
// token, is checked in, and the host to check the token's resource
// against. It does not fix it: setNamespace does once the token is valid.
func (c *conn) tokenNamespace(audience, token, typ string) (*Namespace, string, error) {
	cur, host := c.ns(), c.c.Hostname()
	if c.h.nss == nil {
		return cur, host, nil
	}
	c.mu.Lock()
	fixed := c.nsFixed
	c.mu.Unlock()
	if ah := audienceHost(audience); ah != "" {
		if n := c.h.nss.ForHost(ah); n != nil {
			if n != cur {
				if fixed {
					return nil, "", c.otherNamespace(n)
				}
				// The host the client connected to selected nothing:
				// the audience's names the namespace, and the token is
				// checked against it.
				return n, ah, nil
			}
			return cur, host, nil
		}
	}
	if fixed {
		return cur, host, nil
	}
	if t, err := auth.ParseToken(token); err == nil && t.KeyName != "" && c.unknownKey(cur, token, typ, audience, host) {
		n, err := c.h.nss.ForKeyName(t.KeyName, func(a *auth.Authenticator) error {
			_, err := a.Authenticate(c.ctx, auth.Presented{Token: token, Type: typ, Audience: audience, Host: host})
			return err
		})
		if err != nil {
			return nil, "", err
		}
		if n != nil {
			return n, host, nil
		}
	}
	return cur, host, nil
}

// unknownKey reports whether the token's key name is unknown to n: not
// one of its policies nor a rule of the entity the token is for. Only
// such key names may select a namespace of their own, so entity rules
// keep working. With AllowAnyKey every key name is known to no one.
func (c *conn) unknownKey(n *Namespace, token, typ, audience, host string) bool {
	if n.Auth.AllowAnyKey() {
		return true
	}
	_, err := n.Auth.Authenticate(c.ctx, auth.Presented{Token: token, Type: typ, Audience: audience, Host: host})
	return errors.Is(err, auth.ErrUnknownKey)
}

// setNamespace fixes the connection's namespace to n, as a valid token
// chose it; a token for another namespace than the fixed one is refused.
func (c *conn) setNamespace(n *Namespace) error {
	c.mu.Lock()
	if c.nsFixed {
		cur := c.ns()
		c.mu.Unlock()
		if cur != n {
			return c.otherNamespace(n)
		}
		return nil
	}
	prev := c.ns()
	c.nsp.Store(n)
	c.mu.Unlock()
	if err := c.fixNamespace(); err != nil {
		c.nsp.Store(prev)
		return err
	}
	return nil
}

func (c *conn) otherNamespace(n *Namespace) error {
	return unauthorized("Unauthorized access: the token is for namespace '%s', but this connection works in namespace '%s'; a connection stays in the namespace it chose first. Open another connection for '%s'.",
		nsName(n), nsName(c.ns()), nsName(n))
}

func nsName(n *Namespace) string {
	if n.Name == "" {
		return "(default)"
	}
	return n.Name
}

// audienceHost is the host (without port) of an audience URI
// ("sb://ns.localhost:5672/q" → "ns.localhost"), "" for a bare path.
func audienceHost(audience string) string {
	_, rest, ok := strings.Cut(strings.TrimSpace(audience), "://")
	if !ok {
		return ""
	}
	h, _, _ := strings.Cut(rest, "/")
	return hostOnly(h)
}

// isCBSAddress reports whether a link address is the $cbs node.
func isCBSAddress(s string) bool {
	a, err := parseAddress(s)
	return err == nil && a.kind == nodeCBS
}
