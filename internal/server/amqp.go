package server

import (
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/servicebus"
)

// newAMQPServer builds the AMQP endpoint speaking Service Bus's dialect.
// With several namespaces, the registry chooses each connection's
// (servicebus.Namespaces); the first one is the default.
// router, when not nil, relays the entities other nodes of a cluster serve
// (cluster.go); the handler is returned for the cluster's internal
// listener.
func newAMQPServer(reg *nsRegistry, tracer trace.Tracer, o Options, log *slog.Logger, router servicebus.Router) (*amqp.Server, *servicebus.Handler, error) {
	def := reg.list()[0]
	cfg := servicebus.Config{
		Broker:   def.broker,
		Auth:     def.auth,
		Observer: def.metrics,
		Tracer:   tracer,
		Clock:    o.Clock,
		Logger:   log.With("component", "servicebus"),

		MaxUnsettledPerLink: o.MaxUnsettledPerLink,
		StreamFrom:          o.LargeMessageThreshold,
		MaxSpoolBytes:       o.MaxSpoolBytes,
		Faults:              def.faults,
		Router:              router,
	}
	if reg.multi() {
		cfg.Namespaces = reg
	}
	h, err := servicebus.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	acfg := amqpConfig(o.Server)
	acfg.Logger = log.With("component", "amqp")
	srv, err := amqp.NewServer(h, acfg)
	return srv, h, err
}

// amqpConfig maps the AMQP limits of the settings, where 0 turns a limit
// off, to amqp.Config, where 0 selects the default and a negative value
// turns it off. HandshakeTimeout has no "off": 0 keeps the default.
func amqpConfig(s config.Server) amqp.Config {
	off := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	cfg := amqp.Config{
		MaxConnections:                s.MaxConnections,
		MaxLinks:                      s.MaxLinks,
		MaxSessions:                   off(s.MaxSessions),
		MaxUnauthenticatedConnections: off(s.MaxUnauthenticatedConnections),
		AuthTimeout:                   s.AuthTimeout,
		HandshakeTimeout:              s.HandshakeTimeout,
	}
	if s.AuthTimeout == 0 {
		cfg.AuthTimeout = -1
	}
	return cfg
}

// authConfig maps the authentication settings to auth.Config: the
// policies parsed from their text, Entra ID's mode, role and OIDC lists.
func authConfig(s config.Server) (auth.Config, error) {
	mode := auth.EntraAuto
	if s.Entra != "" {
		var err error
		if mode, err = auth.ParseEntraMode(s.Entra); err != nil {
			return auth.Config{}, err
		}
	}
	cfg := auth.Config{
		AllowAnyKey: s.AllowAnyKey,
		Entra: auth.EntraConfig{
			Mode:           mode,
			DevDefaultRole: s.EntraDevRole,
			Issuers:        config.SplitList(s.OIDCIssuers),
			Audiences:      config.SplitList(s.OIDCAudiences),
			Tenants:        config.SplitList(s.OIDCTenants),
			ClockSkew:      s.OIDCClockSkew,
		},
	}
	specs, err := s.PolicyList()
	if err != nil {
		return auth.Config{}, fmt.Errorf("policies: %w", err)
	}
	for _, p := range specs {
		rights := auth.Manage
		if len(p.Rights) > 0 {
			if rights, err = auth.ParseRights(strings.Join(p.Rights, ",")); err != nil {
				return auth.Config{}, fmt.Errorf("policies: %w", err)
			}
		}
		cfg.Policies = append(cfg.Policies, auth.Policy{Name: p.Name, PrimaryKey: p.Key, Rights: rights})
	}
	return cfg, nil
}

// newAuthenticator builds a namespace's authenticator, shared by its
// AMQP connections and its admin API: the settings' policies, or
// policies when not nil. Entity rules are read from the broker get
// returns (nil until it is open), and those of entities it does not
// serve from remote if not nil (a cluster's catalog).
func newAuthenticator(o Options, policies []auth.Policy, get func() *broker.Broker, remote ...func(string) []broker.AuthorizationRule) (*auth.Authenticator, error) {
	cfg, err := authConfig(o.Server)
	if err != nil {
		return nil, err
	}
	if policies != nil {
		cfg.Policies = policies
	}
	var clk clock.Clock = o.Clock
	cfg.Clock = clk
	cfg.EntityRules = servicebus.EntityRules(get)
	if len(remote) > 0 && remote[0] != nil {
		cfg.EntityRules = servicebus.EntityRulesOr(get, remote[0])
	}
	return auth.New(cfg)
}

// logAuth warns about the settings that leave the broker open.
func logAuth(o Options, a *auth.Authenticator, log *slog.Logger) {
	if o.AllowAnyKey {
		log.Warn("accepting any shared access key (--allow-any-key): clients are not authenticated")
	}
	for _, p := range a.Policies() {
		if p.IsWellKnownDefault() {
			log.Warn("the well-known emulator key is in use; set your own policy keys for anything but local development", "policy", p.Name)
		}
	}
	switch a.EntraMode() {
	case auth.EntraDev:
		log.Warn("Entra ID tokens in development mode: their signatures are not checked (--entra)", "defaultRole", o.EntraDevRole)
	case auth.EntraOIDC:
		log.Info("Entra ID tokens verified against OpenID Connect issuers", "issuers", config.SplitList(o.OIDCIssuers))
	}
}
