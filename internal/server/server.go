// Package server runs Busbar: it opens the store and the broker, declares
// the configured entities, serves AMQP and HTTP, and shuts everything down
// in order.
//
// Start-up and shutdown order:
//
//	Start:    HTTP listener (health 503) -> store (recovery) -> broker
//	          -> Config.json entities -> admin API, /metrics -> tracer
//	          provider (if OTEL_* turns it on) -> broker timers
//	          -> AMQP listener -> AMQP over WebSockets -> health 200
//	Shutdown: health 503 -> WebSocket upgrades refused -> AMQP (stop
//	          accepting, close connections, WebSocket ones included)
//	          -> HTTP -> broker timers -> broker -> store (sync, close)
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
	"os"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/admin"
	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqpws"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/metrics"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
	"github.com/busbarmq/busbar/internal/tracing"
	"github.com/busbarmq/busbar/internal/version"
)

// Options configure a Server.
type Options struct {
	DataDir  string // store directory; unused with Memory
	Memory   bool   // keep nothing on disk
	AMQPAddr string // AMQP listen address ("127.0.0.1:0" picks a port)
	HTTPAddr string // HTTP listen address

	// TLS listeners, off when empty. They need TLSCert and TLSKey, or
	// DevTLS, which creates a self-signed localhost certificate in the data
	// directory.
	AMQPSAddr string
	HTTPSAddr string
	TLSCert   string
	TLSKey    string
	DevTLS    bool

	// Entities are declared at start-up (created, or updated if present).
	Entities *config.EmulatorConfig

	// Salvage opens a damaged data directory, dropping what cannot be read.
	Salvage bool

	// MinFreeBytes and MinFreePercent are the low-disk watermark below
	// which new messages and entities are refused (filestore.Options);
	// both zero: 1 GiB or 5 % of the disk, whichever is smaller; a
	// negative MinFreeBytes: none.
	MinFreeBytes   int64
	MinFreePercent float64
	// SegmentSize is the store's log segment size; 0 means its default.
	SegmentSize int64

	// Policies are the shared access policies clients sign tokens with;
	// empty means the emulator's RootManageSharedAccessKey / SAS_KEY_VALUE.
	Policies []auth.Policy
	// AllowAnyKey accepts tokens signed with any key.
	AllowAnyKey bool
	// Entra configures Entra ID (JWT) tokens; the zero value is auto
	// mode (development mode while the emulator key is in use).
	Entra auth.EntraConfig

	// AMQP tunes the AMQP endpoint (limits, time-outs); zero values take
	// the endpoint's defaults.
	AMQP amqp.Config
	// MaxUnsettledPerLink bounds the unsettled deliveries of a peek-lock
	// receiver link; 0 takes servicebus.DefaultMaxUnsettledPerLink.
	MaxUnsettledPerLink int

	// PprofAddr, when set, serves Go runtime profiles (net/http/pprof's
	// /debug/pprof/ pages, with mutex and block sampling on) on a listener
	// of their own, never on the admin port.
	PprofAddr string

	// MetricsOpen serves GET /metrics without authentication; by default
	// it needs a token granting Manage, as the admin API does.
	MetricsOpen bool

	// Faults turns fault injection on: rules added through the admin API
	// at /$faults (package faults) make the AMQP endpoint and the store
	// fail on purpose. Off, /$faults answers 404 and nothing is checked.
	Faults bool

	Logger *slog.Logger // nil discards
	Clock  clock.Clock  // nil means the wall clock
}

// Server is a running broker.
type Server struct {
	log     *slog.Logger
	store   store.Store
	broker  *broker.Broker
	health  health
	admin   lateHandler
	ws      lateHandler // AMQP over WebSockets, set once the AMQP server exists
	wsH     *amqpws.Handler
	metrics *metrics.Metrics
	metricH lateHandler // GET /metrics, set once the admin API's check exists
	tracing *tracing.Provider
	faults  *faults.Set // nil unless Options.Faults

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
// start-up only.
func Start(ctx context.Context, o Options) (_ *Server, err error) {
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
	if s.httpLn, err = net.Listen("tcp", o.HTTPAddr); err != nil {
		return nil, fmt.Errorf("http listener: %w", err)
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
	// AMQP over WebSockets, with or without a trailing slash; not behind
	// the admin API's authorisation.
	mux.Handle(amqpws.Path, &s.ws)
	mux.Handle(amqpws.Path+"/{$}", &s.ws)
	s.httpSrv = &http.Server{Handler: keepDotSegments(mux, &s.admin), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	s.goServe("http", func() error { return s.httpSrv.Serve(s.httpLn) })
	if o.HTTPSAddr != "" {
		ln, err := net.Listen("tcp", o.HTTPSAddr)
		if err != nil {
			return nil, fmt.Errorf("https listener: %w", err)
		}
		s.httpsLn = tls.NewListener(ln, tlsCfg)
		s.goServe("https", func() error { return s.httpSrv.Serve(s.httpsLn) })
	}

	if o.PprofAddr != "" {
		if err := s.startPprof(o.PprofAddr, log); err != nil {
			return nil, err
		}
	}

	if o.Memory {
		s.store = memstore.New()
	} else {
		fs, err := filestore.Open(filestore.Options{Dir: o.DataDir, Salvage: o.Salvage, Logger: log.With("component", "store"),
			MinFreeBytes: o.MinFreeBytes, MinFreePercent: o.MinFreePercent, SegmentSize: o.SegmentSize, SyncObserver: s.metrics})
		if err != nil {
			return nil, fmt.Errorf("open data directory %s: %w", o.DataDir, err)
		}
		s.store = fs
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	brokerStore := s.store
	if o.Faults {
		s.faults = faults.New(o.Clock, log.With("component", "faults"), s.metrics)
		brokerStore = faults.WrapStore(s.store, s.faults)
		log.Warn("fault injection is on (--faults): clients with Manage rights can make this broker fail on purpose; never use it in production")
		s.health.faults.Store(true)
	}
	s.broker, err = broker.Open(broker.Options{Store: brokerStore, Clock: o.Clock, Logger: log.With("component", "broker"), Observer: s.metrics})
	if err != nil {
		return nil, fmt.Errorf("recover broker state: %w", err)
	}
	s.metrics.Watch(s.broker, s.store)
	if s.faults != nil {
		s.faults.SetResolver(s.broker.EntityStoreID)
	}
	if o.Entities != nil {
		created, updated, err := applyEntities(s.broker, o.Entities)
		if err != nil {
			return nil, err
		}
		log.Info("declared entities from config", "created", created, "updated", updated)
	}
	adm, err := admin.New(admin.Options{Broker: s.broker, Auth: authn, Clock: o.Clock, Logger: log.With("component", "admin"), Observer: s.metrics, Faults: s.faults})
	if err != nil {
		return nil, err
	}
	s.admin.set(adm)
	if o.MetricsOpen {
		s.metricH.set(s.metrics.Handler())
	} else {
		s.metricH.set(adm.Protect(s.metrics.Handler()))
	}
	if s.tracing, err = tracing.Start(ctx, os.LookupEnv, "", log.With("component", "tracing")); err != nil {
		return nil, err
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

	if s.amqpLn, err = net.Listen("tcp", o.AMQPAddr); err != nil {
		return nil, fmt.Errorf("amqp listener: %w", err)
	}
	if s.amqp, err = newAMQPServer(s.broker, authn, s.metrics, s.tracing.Tracer(), s.faults, o, log); err != nil {
		return nil, err
	}
	s.goServe("amqp", func() error { return s.amqp.Serve(s.amqpLn) })
	if o.AMQPSAddr != "" {
		ln, err := net.Listen("tcp", o.AMQPSAddr)
		if err != nil {
			return nil, fmt.Errorf("amqps listener: %w", err)
		}
		s.amqpsLn = tls.NewListener(ln, tlsCfg)
		s.goServe("amqps", func() error { return s.amqp.Serve(s.amqpsLn) })
	}
	s.wsH = amqpws.NewHandler(s.amqp.ServeConn, log.With("component", "amqpws"))
	s.ws.set(s.wsH)

	s.health.setCheck(s.broker.Health)
	s.health.ready.Store(true)
	dataDir := o.DataDir
	if o.Memory {
		dataDir = "(memory)"
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
	if devCert != "" {
		attrs = append(attrs, "dev_certificate", devCert)
	}
	v := version.Get()
	log.Info("busbar ready", append(attrs,
		"version", v.Version, "commit", v.Commit,
		"data", dataDir,
		"queues", len(s.broker.ListQueues()),
		"startup", time.Since(begin).Round(time.Millisecond).String())...)
	return s, nil
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
