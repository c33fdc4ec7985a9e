// Package server runs Busbar: it opens the store and the broker, declares
// the configured entities, serves AMQP and HTTP, and shuts everything down
// in order.
//
// Start-up and shutdown order:
//
//	Start:    HTTP listener (health 503) -> store (recovery) -> broker
//	          -> Config.json entities -> admin API, /metrics, web console -> tracer
//	          provider (if OTEL_* turns it on) -> broker timers
//	          -> AMQP listener -> AMQP over WebSockets -> health 200
//	Shutdown: health 503 -> WebSocket upgrades refused -> AMQP (stop
//	          accepting, close connections, WebSocket ones included)
//	          -> HTTP -> console bulk jobs -> broker timers -> broker
//	          -> store (sync, close)
//	          -> tracer provider (flush spans, stop exporter)
//
// The HTTP and HTTPS listeners also carry AMQP over WebSockets at
// /$servicebus/websocket (package amqpws): each upgraded request becomes
// a connection of the AMQP server, under its limits and Shutdown. The
// upgrade needs no admin authorisation; AMQP authorises through $cbs.
//
// Goroutines: one per listener (owned by Server, stopped by Shutdown), the
// broker's timer loop (owned by Server, stopped by cancelling its
// context) and, with tracing on, the span batcher (owned by the tracer
// provider, stopped by its Shutdown). Shutdown waits for all of them.
//
// The web console (package console) is served at /$console/ on the HTTP
// and HTTPS listeners; "$" cannot appear in an entity name, so it never
// shadows an admin API path. It signs in against the same policies; with
// the HTTP listener on loopback and the well-known development key in use,
// loopback browsers open it signed in. Its bulk jobs are goroutines owned
// by the console, stopped by Shutdown.
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
	"github.com/busbarmq/busbar/internal/metrics"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
	"github.com/busbarmq/busbar/internal/store/pgstore"
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

	Logger *slog.Logger // nil discards
	Clock  clock.Clock  // nil means the wall clock
}

// Server is a running broker.
type Server struct {
	log      *slog.Logger
	store    store.Store
	broker   *broker.Broker
	health   health
	admin    lateHandler
	ws       lateHandler // AMQP over WebSockets, set once the AMQP server exists
	wsH      *amqpws.Handler
	metrics  *metrics.Metrics
	metricH  lateHandler // GET /metrics, set once the admin API's check exists
	console  lateHandler // the web console (package console) under console.Prefix
	consoleC *console.Console
	tracing  *tracing.Provider
	faults   *faults.Set // nil unless --faults
	testClk  *clock.Test // the broker's clock with --test-clock, else nil

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

// errClusterNotServing refuses --cluster: stage 2 of the cluster (node
// sessions, unit leases, placement, fencing: package cluster) is built,
// but a node serves clients only once relaying is (stage 3).
var errClusterNotServing = errors.New("--cluster: a cluster node does not serve clients yet (stage 2 of docs/design/cluster.md); run without --cluster")

// Start brings a broker up and returns once it is serving. ctx bounds
// start-up only. Its phases follow the start-up order in the package
// comment: startHTTP, openCore (store, broker, entities, admin API,
// tracing, timers), startAMQP, then ready.
func Start(ctx context.Context, o Options) (_ *Server, err error) {
	if o.Cluster {
		return nil, errClusterNotServing
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
	authn, err := newAuthenticator(o, log, func() *broker.Broker { return s.broker })
	if err != nil {
		return nil, err
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
	if err := s.openCore(ctx, o, entities, authn); err != nil {
		return nil, err
	}
	if err := s.startAMQP(o, authn, tlsCfg); err != nil {
		return nil, err
	}
	s.health.setCheck(s.broker.Health)
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
	s.metrics = metrics.New()
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

// openStore opens the store o asks for: memory, PostgreSQL (--store) or
// the file store in the data directory, recovering it.
func (s *Server) openStore(ctx context.Context, o Options) error {
	log := s.log
	switch {
	case o.Memory:
		s.store = memstore.New()
	case o.Store != "":
		ps, err := pgstore.Open(ctx, o.Store, pgstore.Options{Log: log.With("component", "store"), SyncObserver: s.metrics})
		if err != nil {
			return fmt.Errorf("open the PostgreSQL store %s: %w", redactURL(o.Store), err)
		}
		s.store = ps
	default:
		fs, err := filestore.Open(filestore.Options{Dir: o.DataDir, Salvage: o.Salvage, Logger: log.With("component", "store"),
			MinFreeBytes: o.MinFreeBytes, MinFreePercent: o.MinFreePercent, SegmentSize: o.SegmentSize, SyncObserver: s.metrics})
		if err != nil {
			return fmt.Errorf("open data directory %s: %w", o.DataDir, err)
		}
		s.store = fs
	}
	return nil
}

// openCore opens the store (recovering it) and the broker, declares the
// entities, puts the admin API and /metrics behind the HTTP listeners,
// starts the tracer provider if OTEL_* asks for it, and runs the broker's
// timers.
func (s *Server) openCore(ctx context.Context, o Options, entities *config.EmulatorConfig, authn *auth.Authenticator) error {
	log := s.log
	if err := s.openStore(ctx, o); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	var tier *broker.Tier
	if o.Tier != "" {
		if tier, err = broker.TierProfile(o.Tier); err != nil {
			return err
		}
	}
	brokerStore := s.store
	if o.Faults {
		s.faults = faults.New(o.Clock, log.With("component", "faults"), s.metrics)
		brokerStore = faults.WrapStore(s.store, s.faults)
		log.Warn("fault injection is on (--faults): clients with Manage rights can make this broker fail on purpose; never use it in production")
		s.health.faults.Store(true)
	}
	// With --test-clock only the broker core runs on the test clock:
	// token expiry, fault rules and the console keep the wall clock, as
	// the clients' own timers do.
	brokerClock := o.Clock
	if o.TestClock {
		s.testClk = clock.NewTest(o.Clock)
		brokerClock = s.testClk
		log.Warn("the test clock is on (--test-clock): clients with Manage rights can move this broker's time forward, expiring messages and locks; never use it in production")
		s.health.testClock.Store(s.testClk)
	}
	s.broker, err = broker.Open(broker.Options{Store: brokerStore, Clock: brokerClock, Logger: log.With("component", "broker"), Observer: s.metrics, Tier: tier})
	if err != nil {
		return fmt.Errorf("recover broker state: %w", err)
	}
	s.metrics.Watch(s.broker, s.store)
	if s.testClk != nil {
		// The timer loop sleeps until the next deadline by the test
		// clock: every move wakes it to re-read the time.
		s.testClk.OnMove(s.broker.Wake)
	}
	if s.faults != nil {
		s.faults.SetResolver(s.broker.EntityStoreID)
	}
	if entities != nil {
		created, updated, err := applyEntities(s.broker, entities)
		if err != nil {
			return err
		}
		log.Info("declared entities from config", "created", created, "updated", updated)
	}
	adm, err := admin.New(admin.Options{Broker: s.broker, Auth: authn, Clock: o.Clock, Logger: log.With("component", "admin"), Observer: s.metrics, Faults: s.faults, TestClock: s.testClk})
	if err != nil {
		return err
	}
	s.admin.set(adm)
	// Data-plane receives waiting for a message end when the HTTP server
	// shuts down, rather than holding its Shutdown for their timeout.
	s.httpSrv.RegisterOnShutdown(adm.StopWaiting)
	if o.MetricsOpen {
		s.metricH.set(s.metrics.Handler())
	} else {
		s.metricH.set(adm.Protect(s.metrics.Handler()))
	}
	if s.consoleC, err = console.New(console.Options{Broker: s.broker, Auth: authn, Clock: o.Clock,
		AutoSignIn: consoleAutoSignIn(authn, s.httpLn.Addr()), Totals: consoleTotals(s.metrics),
		Logger: log.With("component", "console")}); err != nil {
		return err
	}
	s.console.set(s.consoleC)
	if s.tracing, err = tracing.Start(ctx, os.LookupEnv, "", log.With("component", "tracing")); err != nil {
		return err
	}
	if s.tracing != nil {
		log.Info("exporting traces over OTLP/HTTP")
	}

	timerCtx, cancel := context.WithCancel(context.Background())
	s.cancelTimers = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.broker.Run(timerCtx)
	}()
	return nil
}

// startAMQP opens the AMQP listener, and the AMQPS one if set, and lets
// the HTTP listeners upgrade to AMQP over WebSockets.
func (s *Server) startAMQP(o Options, authn *auth.Authenticator, tlsCfg *tls.Config) error {
	var err error
	if s.amqpLn, err = net.Listen("tcp", o.AMQPAddr); err != nil {
		return fmt.Errorf("amqp listener: %w", err)
	}
	if s.amqp, err = newAMQPServer(s.broker, authn, s.metrics, s.tracing.Tracer(), s.faults, o, s.log); err != nil {
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
	if s.httpSrv != nil {
		errs = append(errs, s.httpSrv.Shutdown(ctx))
	}
	if s.pprofSrv != nil {
		errs = append(errs, s.pprofSrv.Shutdown(ctx))
	}
	if s.consoleC != nil {
		s.consoleC.Close() // its bulk jobs stop between two atomic steps
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
	if s.broker != nil {
		errs = append(errs, s.broker.Close())
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
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
