// Package server runs Busbar: it opens the store and the broker, declares
// the configured entities, serves AMQP and HTTP, and shuts everything down
// in order.
//
// Start-up and shutdown order:
//
//	Start:    HTTP listener (health 503) -> per namespace: store (recovery)
//	          -> broker -> its Config.json entities -> its admin API -> its
//	          timers (namespaces.go) -> /metrics, web console -> tracer
//	          provider (if OTEL_* turns it on)
//	          -> [--cluster: internal listener bound, node, gateway]
//	          -> AMQP listener -> AMQP over WebSockets
//	          -> [--cluster: internal AMQP server, node joins] -> health 200
//	Shutdown: health 503 -> WebSocket upgrades refused -> AMQP (stop
//	          accepting, close connections, WebSocket ones included)
//	          -> [--cluster: gateway, hand-offs and leave, internal
//	          listener (cluster.go)] -> HTTP -> console bulk jobs -> no more namespaces opened
//	          -> broker timers -> each namespace's broker and store
//	          (sync, close)
//	          -> tracer provider (flush spans, stop exporter)
//
// The HTTP and HTTPS listeners also carry AMQP over WebSockets at
// /$servicebus/websocket (package amqpws): each upgraded request becomes
// a connection of the AMQP server, under its limits and Shutdown. The
// upgrade needs no admin authorisation; AMQP authorises through $cbs.
//
// Goroutines: one per listener (owned by Server, stopped by Shutdown), each
// namespace's broker timer loop (owned by Server, stopped by cancelling
// their context) and, with tracing on, the span batcher (owned by the tracer
// provider, stopped by its Shutdown). With --cluster the internal
// listener's loop is the Server's too; the node's renewer and poller
// belong to cluster.Node (stopped by its Stop, in Shutdown) and the relay's
// to relay.Gateway (Close). Shutdown waits for all of them.
//
// The web console (package console) is served at /$console/ on the HTTP
// and HTTPS listeners; "$" cannot appear in an entity name, so it never
// shadows an admin API path. Each namespace has its own (console.go:
// /$console/ for the Host's namespace, /$console/ns/NAME/ for any), signed
// in against that namespace's policies; with the HTTP listener on loopback
// and the well-known development key in use, loopback browsers open it
// signed in. Their bulk jobs are goroutines owned by each console, stopped
// by Shutdown or when the namespace is deleted.
//
// Metrics (package metrics) are always collected; GET /metrics on the
// HTTP and HTTPS listeners serves them, behind the admin API's token check
// unless Options.MetricsOpen.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/admin"
	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqpws"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/metrics"
	"github.com/busbarmq/busbar/internal/servicebus"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/tracing"
	"github.com/busbarmq/busbar/internal/version"
)

// Options configure a Server.
//
// The settings of busbar serve (its flags and BUSBAR_* variables, declared
// once in package config) are embedded as they are: a setting reaches the
// component that uses it from here, without a copy in between. Their zero
// values turn limits off; busbar serve starts from config.DefaultServer.
// A few settings have a different zero value here, for tests that set
// only what they need: HandshakeTimeout and MaxUnsettledPerLink 0 take
// the endpoint's defaults, Entra "" is auto and EntraDevRole "" is Data
// Owner.
type Options struct {
	config.Server

	// Entities are declared at start-up (created, or updated if present).
	// When nil, the Config.json the settings name (ConfigFile, else the
	// first ConfigSearch path that exists) is loaded, if any.
	Entities *config.EmulatorConfig

	// SegmentSize is the store's log segment size; 0 means its default.
	SegmentSize int64
	// MaxSpoolBytes bounds the large incoming messages spooled to disk at
	// once (servicebus.Config.MaxSpoolBytes); 0 means its default.
	MaxSpoolBytes int64
	// ClusterDrain is how long a cluster node's unit drains before it is
	// handed off (cluster.Options.Drain); 0 means its default (5 s).
	ClusterDrain time.Duration
	// ClusterLandPoll is how often a cluster node looks for transfers to
	// land besides the wakes (cluster.Options.LandPoll); 0 means the
	// placement poll (--cluster-poll). ClusterNoWake stops the node's
	// commits from waking the nodes that land their transfers (tests:
	// the poll alone lands them).
	ClusterLandPoll time.Duration
	ClusterNoWake   bool

	// beforeDeclare, set by tests, runs on a cluster node after it
	// joined, before it declares its Config.json entities.
	beforeDeclare func(*clusterPart)

	Logger *slog.Logger // nil discards
	Clock  clock.Clock  // nil means the wall clock
}

// Server is a running broker.
type Server struct {
	log       *slog.Logger
	store     store.Store
	broker    *broker.Broker
	health    health
	admin     lateHandler
	ws        lateHandler // AMQP over WebSockets, set once the AMQP server exists
	wsH       *amqpws.Handler
	metrics   *metrics.Metrics
	metricH   lateHandler // GET /metrics, set once the admin API's check exists
	console   lateHandler // the web console (package console) under console.Prefix
	consoles  *consoles   // the web consoles, one per namespace (console.go)
	tracing   *tracing.Provider
	faults    *faults.Set         // nil unless --faults
	testClk   *clock.Test         // the broker's clock with --test-clock, else nil
	ns        *nsRegistry         // the namespaces; the fields above are the default one's
	cluster   *clusterPart        // nil without --cluster (cluster.go)
	sbHandler *servicebus.Handler // the AMQP endpoint's handler

	httpLn  net.Listener
	httpSrv *http.Server
	amqpLn  net.Listener
	amqpsLn net.Listener
	amqp    *amqp.Server
	httpsLn net.Listener
	devCert string

	pprofLn  net.Listener
	pprofSrv *http.Server

	cancelTimers context.CancelFunc
	wg           sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error
}

// Start brings a broker up and returns once it is serving. ctx bounds
// start-up only. Its phases follow the start-up order in the package
// comment: startHTTP, openCore (store, broker, entities, admin API,
// tracing, timers), startAMQP, then ready.
func Start(ctx context.Context, o Options) (_ *Server, err error) {
	if o.Cluster && (o.Faults || o.NamespacePerKeyName || o.TestClock) {
		// --test-clock: each node would move only its own clock (the
		// /$time request reaches one node, the entity may be served by
		// another), so time would not move for most entities.
		return nil, errors.New("--cluster does not work with --faults, --namespace-per-key-name or --test-clock yet")
	}
	begin := time.Now()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{log: log}
	defer func() {
		if err != nil {
			s.close(context.Background())
		}
	}()

	entities, err := loadEntities(o, log)
	if err != nil {
		return nil, err
	}
	// Check the policies before listening; each namespace builds its own.
	if _, err := newAuthenticator(o, nil, func() *broker.Broker { return nil }); err != nil {
		return nil, err
	}
	// Several namespaces label their metrics with their names.
	if o.NamespacePerKeyName || (entities != nil && len(entities.Namespaces) > 1) {
		s.metrics = metrics.NewShared()
	} else {
		s.metrics = metrics.New()
	}
	tlsCfg, devCert, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	s.devCert = devCert

	// HTTP first, so a health probe sees 503 while the store recovers.
	if err := s.startHTTP(o, tlsCfg); err != nil {
		return nil, err
	}
	if o.PprofAddr != "" {
		if err := s.startPprof(o.PprofAddr, log); err != nil {
			return nil, err
		}
	}
	if err := s.openCore(ctx, o, entities); err != nil {
		return nil, err
	}
	if o.Cluster {
		if s.cluster, err = openCluster(o, s.ns.list()[0], log); err != nil {
			return nil, err
		}
	}
	if err := s.startAMQP(o, tlsCfg); err != nil {
		return nil, err
	}
	if s.cluster != nil {
		if err := s.cluster.serve(ctx, o, s.sbHandler, s.goServe); err != nil {
			return nil, err
		}
	}
	check := s.ns.health
	if s.cluster != nil {
		check = func() error {
			if err := s.cluster.health(); err != nil {
				return err
			}
			return s.ns.health()
		}
	}
	s.health.setCheck(check)
	s.health.ready.Store(true)
	s.logReady(o, begin)
	return s, nil
}

// startHTTP opens the HTTP listener, and the HTTPS one if set, serving
// health (503 until ready), /metrics, AMQP over WebSockets and the admin
// API, each set as it becomes available.
func (s *Server) startHTTP(o Options, tlsCfg *tls.Config) error {
	var err error
	if s.httpLn, err = net.Listen("tcp", o.HTTPAddr); err != nil {
		return fmt.Errorf("http listener: %w", err)
	}
	mux := http.NewServeMux()
	// GET /health is the probe; the admin API asks for a queue or topic
	// named "health" with its api-version parameter, so that still reaches
	// the entity.
	mux.Handle("GET /health", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("api-version") {
			s.admin.ServeHTTP(w, r)
			return
		}
		s.health.ServeHTTP(w, r)
	}))
	mux.Handle("GET /health/ready", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("api-version") {
			s.admin.ServeHTTP(w, r)
			return
		}
		s.health.serveReady(w, r)
	}))
	// GET /metrics likewise, with an entity named "metrics" reached the
	// same way.
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("api-version") {
			s.admin.ServeHTTP(w, r)
			return
		}
		s.metricH.ServeHTTP(w, r)
	}))
	mux.Handle("/", &s.admin)
	// The web console: "$" is not allowed in entity names, so its prefix
	// never collides with the admin API's paths.
	mux.Handle(console.Prefix, &s.console)
	mux.Handle("GET "+strings.TrimSuffix(console.Prefix, "/"), http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	// AMQP over WebSockets, with or without a trailing slash; not behind
	// the admin API's authorisation.
	mux.Handle(amqpws.Path, &s.ws)
	mux.Handle(amqpws.Path+"/{$}", &s.ws)
	s.httpSrv = &http.Server{Handler: keepDotSegments(mux, &s.admin), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.goServe("http", func() error { return s.httpSrv.Serve(s.httpLn) })
	if o.HTTPSAddr != "" {
		ln, err := net.Listen("tcp", o.HTTPSAddr)
		if err != nil {
			return fmt.Errorf("https listener: %w", err)
		}
		s.httpsLn = tls.NewListener(ln, tlsCfg)
		s.goServe("https", func() error { return s.httpSrv.Serve(s.httpsLn) })
	}
	return nil
}

// openCore opens each namespace (store with recovery, broker, entities,
// admin API, timers; namespaces.go), puts the admin API and /metrics
// behind the HTTP listeners and starts the tracer provider if OTEL_* asks
// for it.
func (s *Server) openCore(ctx context.Context, o Options, entities *config.EmulatorConfig) error {
	log := s.log
	max := o.MaxNamespaces
	if max <= 0 {
		max = config.DefaultMaxNamespaces
	}
	var declared []config.Namespace
	if entities != nil {
		declared = entities.Namespaces
	}
	if len(declared) > max {
		return fmt.Errorf("config: %d namespaces are declared, more than --max-namespaces (%d)", len(declared), max)
	}
	if o.Store != "" && o.NamespacePerKeyName {
		return fmt.Errorf("--namespace-per-key-name needs the file store: --store %s keeps one namespace", redactURL(o.Store))
	}
	timerCtx, cancel := context.WithCancel(context.Background())
	s.cancelTimers = cancel
	reg := &nsRegistry{o: o, log: log, root: s.metrics, perKey: o.NamespacePerKeyName, max: max,
		timerCtx: timerCtx, wg: &s.wg, byName: map[string]*namespace{}, removing: map[string]bool{},
		// Data-plane receives waiting for a message end when the HTTP
		// server shuts down, rather than holding its Shutdown for their
		// timeout.
		onAdmin: func(adm *admin.Handler) { s.httpSrv.RegisterOnShutdown(adm.StopWaiting) }}
	reg.labelled = o.NamespacePerKeyName || len(declared) > 1
	s.ns = reg
	var defEntities *config.Namespace
	if len(declared) > 0 {
		defEntities = &declared[0]
	}
	reg.template = defEntities
	def, err := reg.openDeclared(ctx, defEntities, o.DataDir)
	if err != nil {
		return err
	}
	reg.add(def)
	for i := 1; i < len(declared); i++ {
		d := &declared[i]
		dir := ""
		if !o.Memory {
			dir = filepath.Join(o.DataDir, "namespaces", strings.ToLower(d.Name))
		}
		n, err := reg.openDeclared(ctx, d, dir)
		if err != nil {
			return fmt.Errorf("namespace %s: %w", d.Name, err)
		}
		reg.add(n)
	}
	if len(declared) > 1 || o.NamespacePerKeyName {
		log.Info("serving several namespaces", "namespaces", len(declared), "perKeyName", o.NamespacePerKeyName, "max", max)
	}
	logAuth(o, def.auth, log)
	s.store, s.broker, s.faults, s.testClk = def.store, def.broker, def.faults, def.testClk
	if s.faults != nil {
		log.Warn("fault injection is on (--faults): clients with Manage rights can make this broker fail on purpose; never use it in production")
		s.health.faults.Store(true)
	}
	if s.testClk != nil {
		log.Warn("the test clock is on (--test-clock): clients with Manage rights can move this broker's time forward, expiring messages and locks; never use it in production")
		s.health.testClock.Store(s.testClk)
	}
	if reg.multi() {
		list := reg.healthList
		s.health.list.Store(&list)
	}
	s.admin.set(reg.nsHandler(func(n *namespace) http.Handler { return n.admin }))
	if o.MetricsOpen {
		s.metricH.set(s.metrics.Handler())
	} else {
		s.metricH.set(reg.nsHandler(func(n *namespace) http.Handler { return n.admin.Protect(s.metrics.Handler()) }))
	}
	s.consoles = &consoles{reg: reg, metrics: s.metrics, httpAddr: s.httpLn.Addr(), o: o, log: log,
		byNS: map[*namespace]*console.Console{}}
	if s.consoles.root, err = console.New(s.consoles.options(def, "")); err != nil {
		return err
	}
	reg.onRemove = s.consoles.drop
	s.console.set(s.consoles)
	if s.tracing, err = tracing.Start(ctx, os.LookupEnv, "", log.With("component", "tracing")); err != nil {
		return err
	}
	if s.tracing != nil {
		log.Info("exporting traces over OTLP/HTTP")
	}
	return nil
}

// startAMQP opens the AMQP listener, and the AMQPS one if set, and lets
// the HTTP listeners upgrade to AMQP over WebSockets.
func (s *Server) startAMQP(o Options, tlsCfg *tls.Config) error {
	var err error
	if s.amqpLn, err = net.Listen("tcp", o.AMQPAddr); err != nil {
		return fmt.Errorf("amqp listener: %w", err)
	}
	var router servicebus.Router
	if s.cluster != nil {
		router = s.cluster.gateway
	}
	if s.amqp, s.sbHandler, err = newAMQPServer(s.ns, s.tracing.Tracer(), o, s.log, router); err != nil {
		return err
	}
	s.goServe("amqp", func() error { return s.amqp.Serve(s.amqpLn) })
	if o.AMQPSAddr != "" {
		ln, err := net.Listen("tcp", o.AMQPSAddr)
		if err != nil {
			return fmt.Errorf("amqps listener: %w", err)
		}
		s.amqpsLn = tls.NewListener(ln, tlsCfg)
		s.goServe("amqps", func() error { return s.amqp.Serve(s.amqpsLn) })
	}
	s.wsH = amqpws.NewHandler(s.amqp.ServeConn, s.log.With("component", "amqpws"))
	s.ws.set(s.wsH)
	return nil
}

// redactURL is a store URL without its password, for logs and errors.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(the --store URL)"
	}
	return u.Redacted()
}

// logReady logs "busbar ready" with the listeners' addresses, the
// version, the data directory and how long start-up took.
func (s *Server) logReady(o Options, begin time.Time) {
	dataDir := o.DataDir
	switch {
	case o.Memory:
		dataDir = "(memory)"
	case o.Store != "":
		dataDir = redactURL(o.Store)
	}
	attrs := []any{"amqp", s.amqpLn.Addr().String(), "http", s.httpLn.Addr().String()}
	if s.amqpsLn != nil {
		attrs = append(attrs, "amqps", s.amqpsLn.Addr().String())
	}
	if s.pprofLn != nil {
		attrs = append(attrs, "pprof", s.pprofLn.Addr().String())
	}
	if s.httpsLn != nil {
		attrs = append(attrs, "https", s.httpsLn.Addr().String())
	}
	if s.devCert != "" {
		attrs = append(attrs, "dev_certificate", s.devCert)
	}
	if o.Tier != "" {
		attrs = append(attrs, "tier", o.Tier)
	}
	if s.testClk != nil {
		attrs = append(attrs, "test_clock", true)
	}
	v := version.Get()
	s.log.Info("busbar ready", append(attrs,
		"version", v.Version, "commit", v.Commit,
		"data", dataDir,
		"queues", len(s.broker.ListQueues()),
		"startup", time.Since(begin).Round(time.Millisecond).String())...)
}

// loadEntities returns o.Entities or else the Config.json the settings
// name, nil if none.
func loadEntities(o Options, log *slog.Logger) (*config.EmulatorConfig, error) {
	if o.Entities != nil {
		return o.Entities, nil
	}
	file := o.EffectiveConfigFile(func(path string) bool {
		_, err := os.Stat(path)
		return err == nil
	})
	if file == "" {
		return nil, nil
	}
	log.Info("loading entities", "config", file)
	ec, err := config.LoadEmulatorConfigFile(file)
	if err != nil {
		return nil, err
	}
	for _, w := range ec.Warnings {
		log.Warn("config: " + w.Error())
	}
	return ec, nil
}

// AMQPAddr is the address the AMQP listener is bound to.
func (s *Server) AMQPAddr() net.Addr { return s.amqpLn.Addr() }

// HTTPAddr is the address the HTTP listener is bound to.
func (s *Server) HTTPAddr() net.Addr { return s.httpLn.Addr() }

// AMQPSAddr is the address of the AMQP-over-TLS listener, nil if off.
func (s *Server) AMQPSAddr() net.Addr { return addrOf(s.amqpsLn) }

// HTTPSAddr is the address of the HTTPS listener, nil if off.
func (s *Server) HTTPSAddr() net.Addr { return addrOf(s.httpsLn) }

// DevCertificate is the path of the self-signed certificate made for
// DevTLS, "" otherwise. Clients trust it to connect over TLS.
func (s *Server) DevCertificate() string { return s.devCert }

func addrOf(ln net.Listener) net.Addr {
	if ln == nil {
		return nil
	}
	return ln.Addr()
}

// Metrics is the server's metrics (GET /metrics); SetVersion on it sets
// busbar_build_info.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// Faults is the fault injector, nil unless Options.Faults.
func (s *Server) Faults() *faults.Set { return s.faults }

// Broker is the running broker core.
func (s *Server) Broker() *broker.Broker { return s.broker }

// Shutdown stops accepting work, closes connections, and flushes and
// closes the store. It waits for every goroutine the server started, or
// until ctx is done. Calling it again returns the first result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.close(ctx) })
	return s.shutdownErr
}

func (s *Server) close(ctx context.Context) error {
	s.health.ready.Store(false)
	var errs []error
	if s.wsH != nil {
		// Upgrades in progress finish (their connections then belong to
		// the AMQP server, which closes them next); later ones get 503.
		errs = append(errs, s.wsH.Shutdown(ctx))
	}
	if s.amqp != nil {
		errs = append(errs, s.amqp.Shutdown(ctx))
	}
	// Serve may not have taken a listener yet; closing it here makes sure
	// its loop ends. An already-closed listener is fine.
	for _, ln := range []net.Listener{s.amqpLn, s.amqpsLn} {
		if ln == nil {
			continue
		}
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if s.cluster != nil {
		// Clients are gone: hand the units off, leave, close the
		// internal listener; the store closes last, with the namespaces.
		errs = append(errs, s.cluster.close(ctx))
	}
	if s.httpSrv != nil {
		errs = append(errs, s.httpSrv.Shutdown(ctx))
	}
	if s.pprofSrv != nil {
		errs = append(errs, s.pprofSrv.Shutdown(ctx))
	}
	if s.consoles != nil {
		s.consoles.close() // their bulk jobs stop between two atomic steps
	}
	if s.ns != nil {
		s.ns.shut() // no namespace opens from now on
	}
	if s.cancelTimers != nil {
		s.cancelTimers()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for server goroutines: %w", ctx.Err()))
	}
	if s.ns != nil {
		errs = append(errs, s.ns.close())
	}
	// Last, so that the spans of the work above are exported.
	errs = append(errs, s.tracing.Shutdown(ctx))
	return errors.Join(errs...)
}

// goServe runs a listener loop, logging how it ended.
func (s *Server) goServe(name string, serve func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, amqp.ErrServerClosed) {
			s.log.Error("listener stopped", "listener", name, "err", err)
		}
	}()
}

// consoleAutoSignIn is the grant the web console opens with for browsers
// on loopback: the well-known development policy's, when the HTTP listener
// is bound to loopback and that key is in use; nil otherwise.
func consoleAutoSignIn(a *auth.Authenticator, httpAddr net.Addr) *auth.Grant {
	tcp, ok := httpAddr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return nil
	}
	for _, p := range a.Policies() {
		if p.IsWellKnownDefault() {
			return &auth.Grant{KeyName: p.Name, Rights: p.Rights}
		}
	}
	return nil
}

// historyLog is the message history log --history asks for (logged), or
// nil when it is off.
func historyLog(o config.Server, log *slog.Logger) *history.Log {
	mode, _ := history.ParseMode(o.History)
	if mode == history.Off {
		return nil
	}
	h := history.New(history.Config{Mode: mode, SampleEvery: int64(o.HistorySampleEvery),
		MaxMessagesPerEntity: o.HistoryMessages, Window: o.HistoryWindow, MaxBytes: o.HistoryMaxBytes})
	c := h.Config()
	log.Info("message histories are on (--history)", "mode", mode.String(), "sampleEvery", c.SampleEvery,
		"messagesPerEntity", c.MaxMessagesPerEntity, "window", c.Window, "maxBytes", c.MaxBytes)
	return h
}
