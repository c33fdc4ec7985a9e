package server

import (
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
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
		Faults:              fs,
	})
	if err != nil {
		return nil, err
	}
	cfg := o.AMQP
	cfg.Logger = log.With("component", "amqp")
	return amqp.NewServer(h, cfg)
}

// newAuthenticator builds the authenticator both listeners share. Entity
// rules are read from the broker get returns (nil until it is open).
func newAuthenticator(o Options, log *slog.Logger, get func() *broker.Broker) (*auth.Authenticator, error) {
	var clk clock.Clock = o.Clock
	a, err := auth.New(auth.Config{Policies: o.Policies, AllowAnyKey: o.AllowAnyKey, Clock: clk, Entra: o.Entra,
		EntityRules: servicebus.EntityRules(get)})
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
		log.Warn("Entra ID tokens in development mode: their signatures are not checked (--entra)", "defaultRole", o.Entra.DevDefaultRole)
	case auth.EntraOIDC:
		log.Info("Entra ID tokens verified against OpenID Connect issuers", "issuers", o.Entra.Issuers)
	}
	return a, nil
}
