package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/admin"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/metrics"
	"github.com/busbarmq/busbar/internal/servicebus"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
	"github.com/busbarmq/busbar/internal/store/pgstore"
)

// Namespaces. Every namespace of Config.json is its own: a store, a
// broker, policies (Config.json's Policies, else --policies), metrics,
// faults and test clock, an admin API. The first one is the default: it
// keeps the data directory itself, so data directories from before
// namespaces open unchanged; the others live in
// DATA/namespaces/<lower-case name>/:
//
//	DATA/                     the default namespace's store
//	DATA/namespaces/orders/   namespace "Orders"
//	DATA/namespaces/run-42/   made for the key name run-42 (--namespace-per-key-name)
//
// Which namespace a request works in: an AMQP connection's is chosen by
// package servicebus through nsRegistry (ForHost, ForKeyName); an HTTP
// request's by its Host header, else (per key name) by its SAS token's key
// name, else the default one (forRequest). Host names select a namespace
// when they are one of its Config.json Hosts, or NAME.localhost, or NAME
// under a Service Bus domain (NAME.servicebus.windows.net).
//
// The registry holds at most MaxNamespaces; each namespace's broker
// timers run on a goroutine owned by the Server (its wait group),
// stopped by cancelling the timers' context at Shutdown (or its own, when
// it is deleted: nslifecycle.go), after which every broker and store is
// closed.

// namespace is one namespace the server runs.
type namespace struct {
	name    string // as Config.json spells it; "" for the default without one
	store   store.Store
	broker  *broker.Broker
	auth    *auth.Authenticator
	metrics *metrics.Metrics
	faults  *faults.Set // nil unless --faults
	testClk *clock.Test // nil unless --test-clock
	admin   *admin.Handler
	// entities are a cluster node's Config.json entities, declared by
	// the cluster part once the node joined; nil otherwise.
	entities  *config.Namespace
	sb        *servicebus.Namespace
	hosts     []string // lower-case
	keyName   bool     // made for a key name (--namespace-per-key-name)
	dir       string   // its data directory, "" in memory
	noConsole bool     // deleted: no console is made for it (guarded by consoles.mu)

	stopTimers context.CancelFunc
	timersDone chan struct{} // closed when its broker's timers stopped
}

// origin is where the namespace comes from: "config" (Config.json, or
// the default one) or "key-name".
func (n *namespace) origin() string {
	if n.keyName {
		return "key-name"
	}
	return "config"
}

// nsRegistry holds the server's namespaces.
type nsRegistry struct {
	o        Options
	log      *slog.Logger
	root     *metrics.Metrics // the server's: shared when labelled
	labelled bool             // each namespace has its own metrics, labelled
	perKey   bool
	max      int
	template *config.Namespace // the default's Config.json entities
	timerCtx context.Context
	wg       *sync.WaitGroup
	onAdmin  func(*admin.Handler)
	onRemove func(*namespace) // a namespace is being deleted, its broker still open

	mu       sync.Mutex
	closed   bool // shut: no namespace opens any more
	def      *namespace
	all      []*namespace
	byName   map[string]*namespace // lower-case name
	removing map[string]bool       // lower-case names being deleted
}

var _ servicebus.Namespaces = (*nsRegistry)(nil)

// multi reports whether connections may work in other namespaces than
// the default one.
func (r *nsRegistry) multi() bool { return r.perKey || len(r.all) > 1 }

// list returns the namespaces, the default first.
func (r *nsRegistry) list() []*namespace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// openStore opens namespace name's store (recovering it): memory,
// PostgreSQL (--store, the default namespace only) or the file store in
// dir.
func (r *nsRegistry) openStore(ctx context.Context, name, dir string, log *slog.Logger, obs store.SyncObserver) (store.Store, error) {
	o := r.o
	switch {
	case o.Memory:
		return memstore.New(), nil
	case o.Store != "" && r.def != nil:
		// One database holds one namespace's entities (its tables have no
		// namespace column yet).
		return nil, fmt.Errorf("--store %s keeps one namespace, the default; namespace %q needs the file store (or its own Busbar)", redactURL(o.Store), name)
	case o.Store != "":
		po := pgstore.Options{Log: log.With("component", "store"), SyncObserver: obs, Cluster: o.Cluster, NodeID: o.NodeID}
		if o.Cluster {
			// The node registers with these; the store bounds its lock
			// waits by the TTL.
			po.SessionTTL, po.Heartbeat = o.ClusterLeaseTTL, o.ClusterHeartbeat
		}
		ps, err := pgstore.Open(ctx, o.Store, po)
		if err != nil {
			return nil, fmt.Errorf("open the PostgreSQL store %s: %w", redactURL(o.Store), err)
		}
		return ps, nil
	default:
		fs, err := filestore.Open(filestore.Options{Dir: dir, Salvage: o.Salvage, Logger: log.With("component", "store"),
			MinFreeBytes: o.MinFreeBytes, MinFreePercent: o.MinFreePercent, SegmentSize: o.SegmentSize, SyncObserver: obs,
			BlobThreshold: int(o.LargeMessageThreshold)})
		if err != nil {
			return nil, fmt.Errorf("open data directory %s: %w", dir, err)
		}
		return fs, nil
	}
}

// open opens a namespace's store and broker, declares its entities and
// builds its admin API; policies nil means the server's. Its timers run
// until the registry's timer context is cancelled.
func (r *nsRegistry) open(ctx context.Context, name, dir string, entities *config.Namespace, policies []auth.Policy, hosts []string) (_ *namespace, err error) {
	o, log := r.o, r.log
	if name != "" && r.def != nil {
		log = log.With("namespace", name)
	}
	n := &namespace{name: name, dir: dir}
	if o.Memory {
		n.dir = ""
	}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	for _, h := range hosts {
		n.hosts = append(n.hosts, strings.ToLower(h))
	}
	n.metrics = r.root
	if r.labelled {
		n.metrics = r.root.ForNamespace(nsLabel(name))
	}
	if n.store, err = r.openStore(ctx, name, dir, log, n.metrics); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var tier *broker.Tier
	if o.Tier != "" {
		if tier, err = broker.TierProfile(o.Tier); err != nil {
			return nil, err
		}
	}
	brokerStore := n.store
	if o.Faults {
		n.faults = faults.New(o.Clock, log.With("component", "faults"), n.metrics)
		brokerStore = faults.WrapStore(n.store, n.faults)
	}
	// With --test-clock only the broker core runs on the test clock:
	// token expiry, fault rules and the console keep the wall clock, as
	// the clients' own timers do.
	brokerClock := o.Clock
	clockDir := n.dir // the file store's directory keeps the test clock's offset
	if o.Store != "" {
		clockDir = ""
	}
	if o.TestClock {
		if n.testClk, err = openTestClock(o.Clock, clockDir, log); err != nil {
			return nil, err
		}
		brokerClock = n.testClk
	} else {
		noteIgnoredTestClock(clockDir, log)
	}
	n.broker, err = broker.Open(broker.Options{Store: brokerStore, Clock: brokerClock, Logger: log.With("component", "broker"), Observer: n.metrics, Tier: tier, History: historyLog(o.Server, log), Units: o.Cluster})
	if err != nil {
		return nil, fmt.Errorf("recover broker state: %w", err)
	}
	n.metrics.Watch(n.broker, n.store)
	if n.testClk != nil {
		// The timer loop sleeps until the next deadline by the test
		// clock: every move wakes it to re-read the time.
		n.testClk.OnMove(n.broker.Wake)
	}
	if n.faults != nil {
		n.faults.SetResolver(n.broker.EntityStoreID)
	}
	if entities != nil && o.Cluster {
		n.entities = entities // declared once the node joined (cluster.go)
	} else if entities != nil {
		created, updated, err := applyEntities(n.broker, &config.EmulatorConfig{Namespaces: []config.Namespace{*entities}})
		if err != nil {
			return nil, err
		}
		log.Info("declared entities from config", "created", created, "updated", updated)
	}
	b := n.broker
	var remote func(string) []broker.AuthorizationRule
	if ps, ok := n.store.(*pgstore.Store); ok && o.Cluster {
		remote = catalogRules(ps, log) // cluster.go
	}
	if n.auth, err = newAuthenticator(o, policies, func() *broker.Broker { return b }, remote); err != nil {
		return nil, err
	}
	adminName := name // the default namespace keeps the admin API's own name
	if r.def == nil {
		adminName = ""
	}
	adm, err := admin.New(admin.Options{Namespaces: r.manager(), Broker: n.broker, Auth: n.auth, Namespace: adminName, Clock: o.Clock, Logger: log.With("component", "admin"), Observer: n.metrics, Faults: n.faults, TestClock: n.testClk})
	if err != nil {
		return nil, err
	}
	n.admin = adm
	if r.onAdmin != nil {
		r.onAdmin(adm)
	}
	n.sb = &servicebus.Namespace{Name: name, Broker: n.broker, Auth: n.auth, Observer: n.metrics, Faults: n.faults}
	r.startTimers(n)
	return n, nil
}

// startTimers runs n's broker timers on a goroutine of the server's wait
// group until the registry's timer context ends or n.stopTimers.
func (r *nsRegistry) startTimers(n *namespace) {
	tctx, stop := context.WithCancel(r.timerCtx)
	n.stopTimers, n.timersDone = stop, make(chan struct{})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(n.timersDone)
		_ = n.broker.Run(tctx)
	}()
}

// manager is what the admin API of the namespace being opened manages:
// all of them for the default one (the first opened), else nothing.
func (r *nsRegistry) manager() admin.NamespaceManager {
	if r.def == nil {
		return r
	}
	return nil
}

// openDeclared opens a namespace Config.json declares (nil: the default
// namespace without a Config.json) with its policies and hosts.
func (r *nsRegistry) openDeclared(ctx context.Context, d *config.Namespace, dir string) (*namespace, error) {
	if d == nil {
		return r.open(ctx, "", dir, nil, nil, nil)
	}
	var policies []auth.Policy
	if d.Policies != nil {
		s := r.o.Server
		s.Policies = *d.Policies
		cfg, err := authConfig(s)
		if err != nil {
			return nil, err
		}
		policies = cfg.Policies
	}
	return r.open(ctx, d.Name, dir, d, policies, d.Hosts)
}

// nsLabel is the value of a namespace's metrics label.
func nsLabel(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// add records an opened namespace.
func (r *nsRegistry) add(n *namespace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.def == nil {
		r.def = n
	}
	r.all = append(r.all, n)
	if n.name != "" {
		r.byName[strings.ToLower(n.name)] = n
	}
}

// shut stops the opening of namespaces, before the timers stop.
func (r *nsRegistry) shut() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// healthList is /health's "namespaces": each one's name and, with the
// test clock, its time.
func (r *nsRegistry) healthList() []nsHealth {
	var out []nsHealth
	for _, n := range r.list() {
		e := nsHealth{Name: nsLabel(n.name), Default: n == r.def, Origin: n.origin()}
		if n.testClk != nil {
			e.TestTime = n.testClk.Now().UTC().Format(time.RFC3339Nano)
		}
		out = append(out, e)
	}
	return out
}

// close closes every namespace; their timers must have stopped.
func (r *nsRegistry) close() error {
	var errs []error
	for _, n := range r.list() {
		errs = append(errs, n.close())
	}
	return errors.Join(errs...)
}

// health is the first namespace's store problem, if any (health.state).
func (r *nsRegistry) health() error {
	for _, n := range r.list() {
		if err := n.broker.Health(); err != nil {
			if n.name != "" && n != r.def {
				return fmt.Errorf("namespace %s: %w", n.name, err)
			}
			return err
		}
	}
	return nil
}

// close closes the namespace's broker and store; its timers must have
// stopped.
func (n *namespace) close() error {
	var errs []error
	if n.admin != nil {
		n.admin.StopWaiting()
	}
	if n.broker != nil {
		errs = append(errs, n.broker.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	return errors.Join(errs...)
}

// The DNS suffixes under which the first label names a namespace.
var nsHostSuffixes = []string{".localhost", ".servicebus.windows.net", ".servicebus.chinacloudapi.cn", ".servicebus.usgovcloudapi.net", ".servicebus.cloudapi.de"}

// byHost is the namespace a host name (a port is ignored) selects, nil
// for none.
func (r *nsRegistry) byHost(host string) *namespace {
	h := strings.ToLower(strings.TrimSuffix(hostOnly(host), "."))
	if h == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.all {
		if slices.Contains(n.hosts, h) {
			return n
		}
	}
	for _, sfx := range nsHostSuffixes {
		if name, ok := strings.CutSuffix(h, sfx); ok && name != "" {
			return r.byName[name]
		}
	}
	return nil
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// ForHost implements servicebus.Namespaces.
func (r *nsRegistry) ForHost(host string) *servicebus.Namespace {
	if n := r.byHost(host); n != nil {
		return n.sb
	}
	return nil
}

// ForKeyName implements servicebus.Namespaces.
func (r *nsRegistry) ForKeyName(keyName string, verify func(*auth.Authenticator) error) (*servicebus.Namespace, error) {
	n, err := r.byKeyName(keyName, verify)
	if n == nil || err != nil {
		return nil, err
	}
	return n.sb, nil
}

// byKeyName is the namespace a SAS key name selects with
// --namespace-per-key-name, opened on first use: nil for a policy of the
// default namespace (or with the mode off). A new one is opened only once
// verify accepted the request's token with its authenticator: a client
// without the key makes nothing.
func (r *nsRegistry) byKeyName(keyName string, verify func(*auth.Authenticator) error) (*namespace, error) {
	if !r.perKey {
		return nil, nil
	}
	for _, p := range r.def.auth.Policies() {
		if strings.EqualFold(p.Name, keyName) {
			return nil, nil
		}
	}
	key := strings.ToLower(keyName)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.byName[key]; n != nil {
		return n, nil
	}
	if err := config.CheckNamespaceName(keyName); err != nil {
		return nil, &broker.Error{Kind: broker.KindInvalidArgument, Msg: fmt.Sprintf(
			"The key name selects a namespace of its name (--namespace-per-key-name), and it cannot name one: %v.", err)}
	}
	if r.closed {
		return nil, &broker.Error{Kind: broker.KindClosed, Msg: "The broker is shutting down."}
	}
	pols := r.keyPolicies(keyName)
	a, err := newAuthenticator(r.o, pols, func() *broker.Broker { return nil })
	if err != nil {
		return nil, err
	}
	if err := verify(a); err != nil {
		return nil, err
	}
	if r.removing[key] {
		return nil, &broker.Error{Kind: broker.KindClosed, Msg: fmt.Sprintf(
			"The namespace %q is being deleted; connect again once it is gone to make a new one.", keyName)}
	}
	if len(r.all)+len(r.removing) >= r.max {
		return nil, &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
			"The key name %q would make a new namespace, but this broker has %d namespaces already, the most it allows (--max-namespaces).", keyName, len(r.all))}
	}
	dir := ""
	if !r.o.Memory {
		dir = filepath.Join(r.o.DataDir, "namespaces", key)
	}
	n, err := r.open(context.Background(), keyName, dir, r.template, pols, nil)
	if n != nil {
		n.keyName = true
	}
	if err != nil {
		r.log.Error("opening a namespace for a key name", "namespace", keyName, "err", err)
		return nil, &broker.Error{Kind: broker.KindInternal, Msg: fmt.Sprintf("The namespace %q could not be opened.", keyName)}
	}
	r.log.Info("namespace made for a key name", "namespace", keyName, "namespaces", len(r.all)+1)
	r.all = append(r.all, n)
	r.byName[key] = n
	return n, nil
}

// keyPolicies is the one policy of a namespace made for a key name: that
// name, with the key and rights of the default namespace's first policy
// granting Manage (else its first).
func (r *nsRegistry) keyPolicies(keyName string) []auth.Policy {
	pols := r.def.auth.Policies()
	p := pols[0]
	for _, q := range pols {
		if q.Rights.Has(auth.Manage) {
			p = q
			break
		}
	}
	p.Name = keyName
	return []auth.Policy{p}
}

// forRequest is the namespace an HTTP request works in: the one its Host
// header selects, else the one its SAS token's key name selects (per key
// name), else the default one.
func (r *nsRegistry) forRequest(req *http.Request) (*namespace, error) {
	if n := r.byHost(req.Host); n != nil {
		return n, nil
	}
	if r.perKey {
		h := strings.TrimSpace(req.Header.Get("Authorization"))
		if t, err := auth.ParseToken(h); err == nil && t.KeyName != "" && r.unknownKey(req, h) {
			n, err := r.byKeyName(t.KeyName, func(a *auth.Authenticator) error {
				_, err := a.AuthenticateHeader(req.Context(), h, strings.Trim(req.URL.Path, "/"), req.Host)
				return err
			})
			if n != nil || err != nil {
				return n, err
			}
		}
	}
	return r.def, nil
}

// unknownKey reports whether the default namespace knows the key name of
// the request's SAS token neither as a policy nor as a rule of the entity
// the request is for (see servicebus's unknownKey).
func (r *nsRegistry) unknownKey(req *http.Request, header string) bool {
	a := r.def.auth
	if a.AllowAnyKey() {
		return true
	}
	_, err := a.AuthenticateHeader(req.Context(), header, strings.Trim(req.URL.Path, "/"), req.Host)
	return errors.Is(err, auth.ErrUnknownKey)
}

// nsHandler serves an HTTP request with the handler of the namespace it
// works in; a failure to choose one is answered by the default
// namespace's admin API.
func (r *nsRegistry) nsHandler(h func(*namespace) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, err := r.forRequest(req)
		if err != nil {
			r.def.admin.WriteError(w, req, err)
			return
		}
		h(n).ServeHTTP(w, req)
	})
}
