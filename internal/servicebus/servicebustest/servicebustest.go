// Package servicebustest starts a complete Busbar AMQP endpoint on
// loopback for tests: an in-memory broker, the Service Bus handler and an
// amqp.Server on 127.0.0.1:0, with the emulator-style connection string
// the official SDKs use. Everything is stopped by t.Cleanup.
package servicebustest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// Options configure Start. The zero value is the emulator's setup: the
// well-known RootManageSharedAccessKey / SAS_KEY_VALUE policy, signatures
// checked, the wall clock.
type Options struct {
	// Policies replace the default policy.
	Policies []auth.Policy
	// AllowAnyKey skips key and signature checks.
	AllowAnyKey bool
	// Clock drives the broker (TTL, locks, scheduling). nil is the wall
	// clock. With a clock.Fake, call Server.Advance to move time.
	Clock clock.Clock
	// Queues are created before Start returns, with
	// broker.DefaultQueueProperties unless QueueProps names them.
	Queues     []string
	QueueProps map[string]broker.QueueProperties
	// Topics are created after the queues, with
	// broker.DefaultTopicProperties unless TopicProps names them.
	Topics     []string
	TopicProps map[string]broker.TopicProperties
	// Subscriptions are created after the topics, in order, each with
	// its rules.
	Subscriptions []Subscription
	// AMQP adjusts the endpoint configuration (limits, timeouts).
	AMQP amqp.Config
	// TokenClock tells token validation and the handler's token-expiry
	// checks the time; nil is the wall clock (SDKs sign tokens with it).
	TokenClock clock.Clock
	// TokenCheckInterval is servicebus.Config.TokenCheckInterval.
	TokenCheckInterval time.Duration
	// Entra configures Entra ID tokens (auth.Config.Entra).
	Entra auth.EntraConfig
	// MaxUnsettledPerLink is servicebus.Config.MaxUnsettledPerLink.
	MaxUnsettledPerLink int
	// Logger receives broker, endpoint and handler logs; nil discards
	// them.
	Logger *slog.Logger
	// Store persists the broker; nil is a fresh memstore. A given store
	// belongs to the caller, who closes it after the server stopped
	// (Close, or the test's end); with it a test can start a second
	// server on the same data (a restart).
	Store store.Store
	// Router is servicebus.Config.Router: entities other nodes serve.
	Router servicebus.Router
}

// Server is a running endpoint.
type Server struct {
	// Addr is the listener's address, "127.0.0.1:port".
	Addr string
	// ConnectionString is the emulator-style connection string for Addr
	// with the first policy's key:
	// Endpoint=sb://127.0.0.1:PORT;SharedAccessKeyName=…;SharedAccessKey=…;UseDevelopmentEmulator=true;
	ConnectionString string
	Broker           *broker.Broker
	Handler          *servicebus.Handler
	Auth             *auth.Authenticator
	AMQP             *amqp.Server

	clock clock.Clock
	stop  func()
	once  sync.Once
}

// Start starts a server and registers its shutdown with t.Cleanup.
func Start(t testing.TB, opts *Options) *Server {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	var st store.Store = memstore.New()
	ownStore := true
	if opts.Store != nil {
		st, ownStore = opts.Store, false
	}
	b, err := broker.Open(broker.Options{Store: st, Clock: clk, Logger: log})
	if err != nil {
		t.Fatalf("servicebustest: broker.Open: %v", err)
	}
	a, err := auth.New(auth.Config{Policies: opts.Policies, AllowAnyKey: opts.AllowAnyKey, Clock: opts.TokenClock, Entra: opts.Entra,
		EntityRules: servicebus.EntityRules(func() *broker.Broker { return b })})
	if err != nil {
		t.Fatalf("servicebustest: auth.New: %v", err)
	}
	h, err := servicebus.New(servicebus.Config{Broker: b, Auth: a, Logger: log, Clock: opts.TokenClock, TokenCheckInterval: opts.TokenCheckInterval, MaxUnsettledPerLink: opts.MaxUnsettledPerLink, Router: opts.Router})
	if err != nil {
		t.Fatalf("servicebustest: servicebus.New: %v", err)
	}
	cfg := opts.AMQP
	if cfg.Logger == nil {
		cfg.Logger = log
	}
	srv, err := amqp.NewServer(h, cfg)
	if err != nil {
		t.Fatalf("servicebustest: amqp.NewServer: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servicebustest: listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = b.Run(ctx)
	}()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()

	pol := a.Policies()[0]
	s := &Server{
		Addr: ln.Addr().String(),
		ConnectionString: fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true;",
			ln.Addr().String(), pol.Name, pol.PrimaryKey),
		Broker:  b,
		Handler: h,
		Auth:    a,
		AMQP:    srv,
		clock:   clk,
	}
	s.stop = func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("servicebustest: shutdown: %v", err)
		}
		if err := <-serveDone; err != nil && !errors.Is(err, amqp.ErrServerClosed) {
			t.Errorf("servicebustest: serve: %v", err)
		}
		cancel()
		<-runDone
		if err := b.Close(); err != nil {
			t.Errorf("servicebustest: broker close: %v", err)
		}
		if !ownStore {
			return
		}
		if err := st.Close(); err != nil {
			t.Errorf("servicebustest: store close: %v", err)
		}
	}
	t.Cleanup(s.Close)
	s.declare(t, opts)
	return s
}

// declare creates the queues, topics and subscriptions opts lists.
func (s *Server) declare(t testing.TB, opts *Options) {
	t.Helper()
	for _, q := range opts.Queues {
		p, ok := opts.QueueProps[q]
		if !ok {
			p = broker.DefaultQueueProperties()
		}
		s.CreateQueue(t, q, p)
	}
	for _, name := range opts.Topics {
		p, ok := opts.TopicProps[name]
		if !ok {
			p = broker.DefaultTopicProperties()
		}
		s.CreateTopic(t, name, p)
	}
	for _, sub := range opts.Subscriptions {
		s.CreateSubscription(t, sub)
	}
}

// Subscription describes a subscription for Options.Subscriptions and
// Server.CreateSubscription.
type Subscription struct {
	Topic, Name string
	// Properties are broker.DefaultSubscriptionProperties when nil.
	Properties *broker.SubscriptionProperties
	// DefaultRule replaces $Default (TrueFilter) when set (Service Bus's
	// DefaultRuleDescription).
	DefaultRule *broker.RuleDescription
	// Rules are added after the subscription is created, in order.
	Rules []broker.RuleDescription
}

// CreateTopic creates a topic or fails the test.
func (s *Server) CreateTopic(t testing.TB, name string, p broker.TopicProperties) broker.TopicInfo {
	t.Helper()
	ti, err := s.Broker.CreateTopic(name, p)
	if err != nil {
		t.Fatalf("servicebustest: CreateTopic(%q): %v", name, err)
	}
	return ti
}

// CreateSubscription creates a subscription with its rules or fails the
// test.
func (s *Server) CreateSubscription(t testing.TB, sub Subscription) broker.SubscriptionInfo {
	t.Helper()
	p := broker.DefaultSubscriptionProperties()
	if sub.Properties != nil {
		p = *sub.Properties
	}
	si, err := s.Broker.CreateSubscription(sub.Topic, sub.Name, p, sub.DefaultRule)
	if err != nil {
		t.Fatalf("servicebustest: CreateSubscription(%q, %q): %v", sub.Topic, sub.Name, err)
	}
	for _, r := range sub.Rules {
		s.CreateRule(t, sub.Topic, sub.Name, r)
	}
	return si
}

// CreateRule adds a rule to a subscription or fails the test.
func (s *Server) CreateRule(t testing.TB, topic, sub string, r broker.RuleDescription) broker.RuleDescription {
	t.Helper()
	rd, err := s.Broker.CreateRule(topic, sub, r)
	if err != nil {
		t.Fatalf("servicebustest: CreateRule(%q, %q, %q): %v", topic, sub, r.Name, err)
	}
	return rd
}

// CreateQueue creates a queue or fails the test.
func (s *Server) CreateQueue(t testing.TB, name string, p broker.QueueProperties) broker.QueueInfo {
	t.Helper()
	qi, err := s.Broker.CreateQueue(name, p)
	if err != nil {
		t.Fatalf("servicebustest: CreateQueue(%q): %v", name, err)
	}
	return qi
}

// Close stops the server (as the test's end would): the listener, every
// connection, the broker and (unless given in Options.Store) its store.
// Calling it again does nothing.
func (s *Server) Close() { s.once.Do(s.stop) }

// Advance moves a fake clock forward and lets the broker act on it. It
// fails the test if the server runs on another clock.
func (s *Server) Advance(t testing.TB, d time.Duration) {
	t.Helper()
	f, ok := s.clock.(*clock.Fake)
	if !ok {
		t.Fatalf("servicebustest: Advance needs Options.Clock to be a *clock.Fake")
	}
	f.Advance(d)
	s.Broker.Wake()
}

// ConnectionStringWith is the connection string for Addr with another key
// name and key.
func (s *Server) ConnectionStringWith(keyName, key string) string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true;", s.Addr, keyName, key)
}
