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
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/servicebus"
)

// newAMQPServer builds the AMQP endpoint speaking Service Bus's dialect.
func newAMQPServer(b *broker.Broker, a *auth.Authenticator, obs servicebus.Observer, tracer trace.Tracer, fs *faults.Set, o Options, log *slog.Logger) (*amqp.Server, error) {
	h, err := servicebus.New(servicebus.Config{
		Broker:   b,
		Auth:     a,
		Observer: obs,
		Tracer:   tracer,
		Clock:    o.Clock,
		Logger:   log.With("component", "servicebus"),

		MaxUnsettledPerLink: o.MaxUnsettledPerLink,
		StreamFrom:          o.LargeMessageThreshold,
		MaxSpoolBytes:       o.MaxSpoolBytes,
		Faults:              fs,
	})
	if err != nil {
		return nil, err
	}
	cfg := amqpConfig(o.Server)
	cfg.Logger = log.With("component", "amqp")
	return amqp.NewServer(h, cfg)
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

// newAuthenticator builds the authenticator both listeners share. Entity
// rules are read from the broker get returns (nil until it is open).
func newAuthenticator(o Options, log *slog.Logger, get func() *broker.Broker) (*auth.Authenticator, error) {
	cfg, err := authConfig(o.Server)
	if err != nil {
		return nil, err
	}
	var clk clock.Clock = o.Clock
	cfg.Clock = clk
	cfg.EntityRules = servicebus.EntityRules(get)
	a, err := auth.New(cfg)
	if err != nil {
		return nil, err
	}
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
		log.Warn("Entra ID tokens in development mode: their signatures are not checked (--entra)", "defaultRole", cfg.Entra.DevDefaultRole)
	case auth.EntraOIDC:
		log.Info("Entra ID tokens verified against OpenID Connect issuers", "issuers", cfg.Entra.Issuers)
	}
	return a, nil
}
