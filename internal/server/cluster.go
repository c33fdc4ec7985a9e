package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/admin"
	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/config"
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
// The admin API and the REST data plane do the same over HTTP: the
// admin.Handler asks clusterPart (its admin.Cluster) whether a unit is
// another node's and forwards the request with relay.HTTPForwarder to
// that node's internal listener, whose relay.Mux hands node-proven HTTP
// connections to an http.Server running the default namespace's
// admin.Handler with the forwarded principal (admin.WithPrincipal). The
// same HTTP side takes the nodes' wakes (clusterwake.go).
//
// A queue or topic created through the admin API is created by the node
// placement gives its id (admin.Cluster.Place): this node forwards the
// creating PUT there, so the unit does not move right after.
//
// Config.json entities (declareClusterEntities): every node creates the
// queues and topics missing from the catalog at start, each on the node
// placement gives it (asked on the internal listener's declarePath,
// which creates it from that node's own copy of the file; a name another
// node created first counts as existing; existing entities are not
// updated), and the node serving a topic creates its missing
// subscriptions and rules whenever it loads the unit, and at once when it
// created the topic itself (declaringUnits).
//
//	Start:    … store (cluster mode), broker (no units) … -> internal
//	          listener bound -> gateway, HTTP forwarder -> AMQP endpoint
//	          (Router) -> internal mux, AMQP and HTTP servers -> node
//	          (register, then poll: load units) -> Config.json entities
//	Shutdown: AMQP (clients) -> gateway, HTTP forwarder -> node.Stop
//	          (hand off every unit, leave) -> internal AMQP and HTTP
//	          servers -> internal listener -> … broker, store

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
	fwd     *relay.HTTPForwarder
	admin   *admin.Handler // the default namespace's
	ln      net.Listener
	mux     *relay.Mux
	srv     *amqp.Server // the internal listener's, once serving
	httpSrv *http.Server // the internal listener's HTTP side, once serving
	// entities are the default namespace's Config.json entities; nil
	// without a file.
	entities *config.Namespace
	park     time.Duration // --cluster-park

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
	c := &clusterPart{self: o.NodeID, log: log.With("component", "cluster"), store: ps, broker: n.broker, admin: n.admin, entities: n.entities, park: o.ClusterPark}
	var err error
	if c.ln, err = net.Listen("tcp", o.ClusterListen); err != nil {
		return nil, fmt.Errorf("cluster listener: %w", err)
	}
	addr := o.ClusterAdvertise
	if addr == "" {
		addr = c.ln.Addr().String()
	}
	var units cluster.Units = n.broker
	if c.entities != nil && len(c.entities.Topics) > 0 {
		units = declaringUnits{Broker: n.broker, topics: c.entities.Topics, log: c.log}
	}
	c.node, err = cluster.New(cluster.Options{ID: o.NodeID, Addr: addr, Membership: ps, Leases: ps, Units: units,
		Outbox: ps, Lander: n.broker,
		Log: c.log, Heartbeat: o.ClusterHeartbeat, TTL: o.ClusterLeaseTTL, Margin: o.ClusterTrustMargin,
		Poll: o.ClusterPoll, Drain: o.ClusterDrain, Version: version.Get().Version, OnLapse: c.lapsed,
		LandPoll: o.ClusterLandPoll, SendWake: c.sendWake})
	if err != nil {
		c.ln.Close()
		return nil, err
	}
	c.gateway, err = relay.NewGateway(relay.GatewayConfig{Secret: []byte(o.ClusterSecret), Node: o.NodeID, Addr: addr,
		Session: c.node.Session, OwnerOf: c.ownerOf, Logger: c.log, Park: o.ClusterPark})
	if err != nil {
		c.ln.Close()
		return nil, err
	}
	c.fwd, err = relay.NewHTTPForwarder(relay.HTTPConfig{Secret: []byte(o.ClusterSecret), Node: o.NodeID,
		Session: c.node.Session, Logger: c.log})
	if err != nil {
		c.gateway.Close()
		c.ln.Close()
		return nil, err
	}
	c.admin.SetCluster(c)
	if !o.ClusterNoWake {
		n.broker.SetTransferred(c.node.Transferred)
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
	ctx, cancel := context.WithTimeout(context.Background(), clusterLookupTimeout)
	defer cancel()
	o, remote, err := c.remoteOwner(ctx, unit)
	if err != nil {
		c.log.Warn("catalog lookup failed", "entity", unit, "err", err)
		return relay.Owner{Node: "(catalog unavailable)"}, true
	}
	return o, remote
}

// remoteOwner is ownerOf with the catalog's failure as an error: remote
// false when this broker serves unit or no unit has that name; an owner
// without an address while the unit moves.
func (c *clusterPart) remoteOwner(ctx context.Context, unit string) (o relay.Owner, remote bool, err error) {
	if _, ok := c.broker.EntityStoreID(unit); ok {
		return relay.Owner{}, false, nil
	}
	e, ok, err := c.store.Lookup(ctx, unit)
	if err != nil || !ok {
		return relay.Owner{}, false, err
	}
	node, addr, known := c.node.OwnerOf(e.Unit)
	if !known || node == "" || node == c.self {
		// Created or moved since the last poll: read its row.
		if node, err = c.store.UnitOwner(ctx, e.Unit); err != nil {
			return relay.Owner{}, false, err
		}
		addr = c.addrOf(ctx, node)
	}
	if node == "" || node == c.self {
		return relay.Owner{Node: "(moving)"}, true, nil
	}
	return relay.Owner{Node: node, Addr: addr}, true, nil
}

var _ admin.Cluster = (*clusterPart)(nil)

// Remote implements admin.Cluster.
func (c *clusterPart) Remote(ctx context.Context, unit string) (bool, error) {
	_, remote, err := c.remoteOwner(ctx, unit)
	return remote, err
}

// Forward implements admin.Cluster: the owner is looked up again for the
// forwarder's one retry after a not-owner answer.
func (c *clusterPart) Forward(ctx context.Context, unit string, r *http.Request, g auth.Grant) (*http.Response, error) {
	return c.fwd.Forward(ctx, func() (relay.Owner, error) {
		o, remote, err := c.remoteOwner(ctx, unit)
		if err == nil && !remote {
			err = errors.New("the unit is served by this node now")
		}
		return o, err
	}, r, g)
}

// MoveWait implements admin.Cluster: a list waits for moving units as
// long as an attach is parked.
func (c *clusterPart) MoveWait() time.Duration { return c.park }

// Units implements admin.Cluster from the catalog and the node's last
// poll.
func (c *clusterPart) Units(ctx context.Context) ([]admin.RemoteUnit, error) {
	list, _, err := c.store.CatalogList(ctx)
	if err != nil {
		return nil, err
	}
	var live map[string]bool
	var out []admin.RemoteUnit
	for _, e := range list {
		if _, ok := c.broker.EntityStoreID(e.Name); ok {
			continue
		}
		node, _, known := c.node.OwnerOf(e.Unit)
		if !known || node == "" || node == c.self {
			// Created or moved since the last poll: read its row.
			if node, err = c.store.UnitOwner(ctx, e.Unit); err != nil {
				return nil, err
			}
		}
		if node == c.self {
			node = "" // not loaded yet, or being unloaded
		}
		if node != "" {
			if live == nil {
				if live, err = c.liveNodes(ctx); err != nil {
					return nil, err
				}
			}
			if !live[node] {
				node = "" // its node is gone: the unit is being taken over
			}
		}
		out = append(out, admin.RemoteUnit{Name: e.Name, Node: node})
	}
	return out, nil
}

// liveNodes is the set of the nodes with a live session.
func (c *clusterPart) liveNodes(ctx context.Context) (map[string]bool, error) {
	nodes, err := c.store.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n.Live {
			live[n.ID] = true
		}
	}
	return live, nil
}

// ForwardNode implements admin.Cluster.
func (c *clusterPart) ForwardNode(ctx context.Context, node string, r *http.Request, g auth.Grant) (*http.Response, error) {
	return c.fwd.Forward(ctx, func() (relay.Owner, error) {
		addr := c.addrOf(ctx, node)
		if addr == "" {
			return relay.Owner{}, fmt.Errorf("node %s is not live", node)
		}
		return relay.Owner{Node: node, Addr: addr}, nil
	}, r, g)
}

// Place implements admin.Cluster: a new id from the catalog's sequence
// and its winner among the live nodes of the node's last poll ("" when
// that is this node, or no node is known yet, or its address is not).
func (c *clusterPart) Place(ctx context.Context) (uint64, string, error) {
	id, err := c.store.NewEntityID(ctx)
	if err != nil {
		return 0, "", err
	}
	node, addr := c.node.Placement(id)
	if node == c.self || addr == "" {
		node = ""
	}
	return id, node, nil
}

// catalogRules reads the shared access rules of a queue or topic another
// node serves from the shared store (its catalog entry and stored spec),
// for checking a token signed with one of them on this node; none when
// it cannot be read (the token is then refused, never admitted
// unchecked).
func catalogRules(ps *pgstore.Store, log *slog.Logger) func(entity string) []broker.AuthorizationRule {
	return func(entity string) []broker.AuthorizationRule {
		ctx, cancel := context.WithTimeout(context.Background(), clusterLookupTimeout)
		defer cancel()
		e, ok, err := ps.Lookup(ctx, entity)
		if err != nil || !ok {
			if err != nil {
				log.Warn("catalog lookup for an entity's access rules failed", "entity", entity, "err", err)
			}
			return nil
		}
		spec, ok, err := ps.UnitSpec(ctx, e.Unit)
		if err != nil || !ok {
			if err != nil {
				log.Warn("reading an entity's access rules failed", "entity", entity, "err", err)
			}
			return nil
		}
		rules, err := broker.AuthorizationRulesOf(spec)
		if err != nil {
			log.Warn("an entity's stored spec cannot be read", "entity", entity, "err", err)
		}
		return rules
	}
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
	c.mux = relay.NewMux(c.ln, l)
	adm := c.admin
	c.httpSrv = &http.Server{
		Handler: c.wakeHTTP(relay.OwnerHTTP(func(w http.ResponseWriter, r *http.Request, g auth.Grant) {
			if r.URL.Path == declarePath {
				c.serveDeclare(w, r)
				return
			}
			adm.ServeHTTP(w, r.WithContext(admin.WithPrincipal(r.Context(), g)))
		})),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute, // the forwarders close theirs after 30 s
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
	goServe("cluster", c.mux.Serve)
	goServe("cluster-amqp", func() error { return c.srv.Serve(c.mux.AMQP()) })
	goServe("cluster-http", func() error { return c.httpSrv.Serve(c.mux.HTTP()) })
	if err := c.node.Start(ctx); err != nil {
		return fmt.Errorf("--cluster: join: %w", err)
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	c.log.Info("cluster node started", "node", o.NodeID, "internal", c.ln.Addr().String())
	if c.entities != nil {
		if o.beforeDeclare != nil {
			o.beforeDeclare(c)
		}
		if err := declareClusterEntities(ctx, c); err != nil {
			return err
		}
	}
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
	c.fwd.Close()
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
	if c.httpSrv != nil {
		errs = append(errs, c.httpSrv.Shutdown(ctx))
	}
	if err := c.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
