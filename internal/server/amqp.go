package server

import (
	"log/slog"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus"
)

// newAMQPServer builds the AMQP endpoint speaking Service Bus's dialect.
func newAMQPServer(b *broker.Broker, a *auth.Authenticator, o Options, log *slog.Logger) (*amqp.Server, error) {
	h, err := servicebus.New(servicebus.Config{
		Broker: b,
		Auth:   a,
		Clock:  o.Clock,
		Logger: log.With("component", "servicebus"),

		MaxUnsettledPerLink: o.MaxUnsettledPerLink,
	})
	if err != nil {
		return nil, err
	}
	cfg := o.AMQP
	cfg.Logger = log.With("component", "amqp")
	return amqp.NewServer(h, cfg)
}

// newAuthenticator builds the SAS authenticator both listeners share.
func newAuthenticator(o Options, log *slog.Logger) (*auth.Authenticator, error) {
	var clk clock.Clock = o.Clock
	a, err := auth.New(auth.Config{Policies: o.Policies, AllowAnyKey: o.AllowAnyKey, Clock: clk})
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
	return a, nil
}
