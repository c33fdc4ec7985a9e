package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/relay"
	"github.com/busbarmq/busbar/internal/store/pgstore"
	"github.com/busbarmq/busbar/internal/version"
)

// A cluster node (--cluster, docs/cluster.md): the default namespace's
// store is pgstore in cluster mode and its broker starts with no units;
// a cluster.Node acquires and loads the units placement gives it. The
// AMQP endpoint's Router is a relay.Gateway: a link or management
// request for a queue or topic this broker does not serve goes to the
// node that owns it (looked up in the store's catalog, then in the
// node's last poll), over the internal listener (relay.Listener), which
// only admits nodes that prove they hold --cluster-secret.
//
//	Start:    … store (cluster mode), broker (no units) … -> internal
//	          listener bound -> gateway -> AMQP endpoint (Router) ->
//	          internal AMQP server -> node (register, then poll: load units)
//	Shutdown: AMQP (clients) -> gateway -> node.Stop (hand off every
//	          unit, leave) -> internal listener -> … broker, store

// clusterLookupTimeout bounds a catalog lookup made for one attach.
const clusterLookupTimeout = 5 * time.Second

// clusterPart is a node's cluster machinery; nil without --cluster.
type clusterPart struct {
	self    string
	log     *slog.Logger
	store   *pgstore.Store
	broker  *broker.Broker
	node    *cluster.Node
	gateway *relay.Gateway
	ln      net.Listener
	srv     *amqp.Server // the internal listener's, once serving

	mu      sync.Mutex
	started bool // the node started: close hands off and leaves
}

// openCluster binds the internal listener and builds the node and the
// gateway for the default namespace n (opened in cluster mode).
func openCluster(o Options, n *namespace, log *slog.Logger) (*clusterPart, error) {
	ps, ok := n.store.(*pgstore.Store)
	if !ok {
		return nil, errors.New("--cluster: the store is not PostgreSQL") // Validate prevents it
	}
	c := &clusterPart{self: o.NodeID, log: log.With("component", "cluster"), store: ps, broker: n.broker}
	var err error
	if c.ln, err = net.Listen("tcp", o.ClusterListen); err != nil {
		return nil, fmt.Errorf("cluster listener: %w", err)
	}
	addr := o.ClusterAdvertise
	if addr == "" {
		addr = c.ln.Addr().String()
	}
	c.node, err = cluster.New(cluster.Options{ID: o.NodeID, Addr: addr, Membership: ps, Leases: ps, Units: n.broker,
		Log: c.log, Heartbeat: o.ClusterHeartbeat, TTL: o.ClusterLeaseTTL, Margin: o.ClusterTrustMargin,
		Poll: o.ClusterPoll, Version: version.Get().Version, OnLapse: c.lapsed})
	if err != nil {
		c.ln.Close()
		return nil, err
	}
	c.gateway, err = relay.NewGateway(relay.GatewayConfig{Secret: []byte(o.ClusterSecret), Node: o.NodeID,
		Session: c.node.Session, OwnerOf: c.ownerOf, Logger: c.log})
	if err != nil {
		c.ln.Close()
		return nil, err
	}
	return c, nil
}

// lapsed is the node's OnLapse: its trust window ended, so it relays
// nothing either (§13.3): its clients see their relayed links end and
// fail over, as its readiness tells load balancers to do.
func (c *clusterPart) lapsed() {
	c.log.Warn("cluster node out of touch with the database: relayed links dropped", "node", c.self)
	c.gateway.Drop()
}

// ownerOf is the gateway's OwnerOf: ok false when this broker serves
// the queue or topic named unit, or no unit has that name (the local
// broker then answers, "not found"). A unit of the catalog whose owner
// is unknown, gone or this node (not loaded yet) gets an owner without
// an address: the attach fails with server-busy and the client retries;
// so does every unit while the node is outside its trust window.
func (c *clusterPart) ownerOf(unit string) (relay.Owner, bool) {
	if !c.node.Trusted() {
		return relay.Owner{Node: "(this node is out of touch with the database)"}, true
	}
	if _, ok := c.broker.EntityStoreID(unit); ok {
		return relay.Owner{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterLookupTimeout)
	defer cancel()
	e, ok, err := c.store.Lookup(ctx, unit)
	if err != nil {
		c.log.Warn("catalog lookup failed", "entity", unit, "err", err)
		return relay.Owner{Node: "(catalog unavailable)"}, true
	}
	if !ok {
		return relay.Owner{}, false
	}
	node, addr, known := c.node.OwnerOf(e.Unit)
	if !known {
		node = e.Owner // created since the last poll: its creator owns it
		addr = c.addrOf(ctx, node)
	}
	if node == "" || node == c.self {
		return relay.Owner{Node: "(moving)"}, true
	}
	return relay.Owner{Node: node, Addr: addr}, true
}

// addrOf is the internal address node registered, "" if not live.
func (c *clusterPart) addrOf(ctx context.Context, node string) string {
	nodes, err := c.store.Nodes(ctx)
	if err != nil {
		return ""
	}
	for _, n := range nodes {
		if n.ID == node && n.Live {
			return n.Addr
		}
	}
	return ""
}

// sessions is the internal listener's relay.Sessions: the live
// session of a node, read from the membership.
func (c *clusterPart) sessions(node string) (int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), clusterLookupTimeout)
	defer cancel()
	nodes, err := c.store.Nodes(ctx)
	if err != nil {
		c.log.Warn("membership unavailable for a node proof", "node", node, "err", err)
		return 0, false
	}
	for _, n := range nodes {
		if n.ID == node && n.Live {
			return n.Session, true
		}
	}
	return 0, false
}

// serve starts the internal listener, its links served by owner (the
// AMQP endpoint's handler), and then the node: it registers its session
// and starts taking units.
func (c *clusterPart) serve(ctx context.Context, o Options, owner relayOwner, goServe func(string, func() error)) error {
	l, err := relay.NewListener(relay.ListenerConfig{Secret: []byte(o.ClusterSecret), Self: o.NodeID, Clock: o.Clock,
		Sessions: c.sessions, Logger: c.log, Owner: owner})
	if err != nil {
		return err
	}
	acfg := amqpConfig(o.Server)
	acfg.SASL = l.ServerSASL()
	acfg.Logger = c.log.With("listener", "internal")
	if c.srv, err = amqp.NewServer(l, acfg); err != nil {
		return err
	}
	goServe("cluster", func() error { return c.srv.Serve(c.ln) })
	if err := c.node.Start(ctx); err != nil {
		return fmt.Errorf("--cluster: join: %w", err)
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	c.log.Info("cluster node started", "node", o.NodeID, "internal", c.ln.Addr().String())
	return nil
}

// health is the node's problem for the probes, if any: outside its
// trust window (it could not renew its session: the database is
// unreachable from here) the node serves no unit, so it is not ready;
// it is still live, because a restart would not help (§11.1).
func (c *clusterPart) health() error {
	if !c.node.Trusted() {
		return &broker.Error{Kind: broker.KindStoreUnavailable,
			Msg: "cluster node " + c.self + " cannot renew its session in the database: it serves no queue or topic until it can"}
	}
	return nil
}

type relayOwner = interface {
	ConnectRelayed(c *amqp.Conn) (amqp.ConnHandler, error)
}

// halt stops the node as a crash would (tests): no hand-off, no leave.
func (c *clusterPart) halt() { c.node.Halt() }

// close stops relaying, hands off the node's units and leaves the
// cluster, then closes the internal listener. The store and broker
// close after it.
func (c *clusterPart) close(ctx context.Context) error {
	var errs []error
	c.gateway.Close()
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if started {
		if err := c.node.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cluster: leave: %w", err))
		}
	}
	if c.srv != nil {
		errs = append(errs, c.srv.Shutdown(ctx))
	}
	if err := c.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
