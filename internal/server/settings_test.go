package server

import (
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/config"
)

// TestAMQPConfig: busbar serve's limits reach the AMQP endpoint, with the
// settings' 0 ("off") turned into the endpoint's "off".
func TestAMQPConfig(t *testing.T) {
	s := config.DefaultServer()
	c := amqpConfig(s)
	if c.MaxConnections != 10000 || c.MaxLinks != 4096 || c.MaxSessions != 256 || c.MaxUnauthenticatedConnections != 64 ||
		c.AuthTimeout != time.Minute || c.HandshakeTimeout != 10*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	s.MaxSessions, s.MaxUnauthenticatedConnections, s.AuthTimeout = 0, 0, 0
	c = amqpConfig(s)
	if c.MaxSessions >= 0 || c.MaxUnauthenticatedConnections >= 0 || c.AuthTimeout >= 0 {
		t.Errorf("0 must turn the limits off: %+v", c)
	}
}

// TestAuthConfig: the authentication settings, as text, become the
// authenticator's policies and Entra ID configuration.
func TestAuthConfig(t *testing.T) {
	s := config.DefaultServer()
	for name, v := range map[string]string{
		"policies": "app=secret:Send,Listen; admin=other", "allow-any-key": "on", "entra": "OIDC",
		"entra-dev-role": "sender", "oidc-issuer": "https://a.example/v2.0, https://b.example/v2.0",
		"oidc-audience": "api://x", "oidc-tenant": "t1", "oidc-clock-skew": "30s",
	} {
		if err := s.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	c, err := authConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) != 2 || c.Policies[0] != (auth.Policy{Name: "app", PrimaryKey: "secret", Rights: auth.Send | auth.Listen}) ||
		c.Policies[1] != (auth.Policy{Name: "admin", PrimaryKey: "other", Rights: auth.Manage}) {
		t.Errorf("policies = %+v", c.Policies)
	}
	e := c.Entra
	if !c.AllowAnyKey || e.Mode != auth.EntraOIDC || e.DevDefaultRole != "sender" || len(e.Issuers) != 2 || e.Issuers[1] != "https://b.example/v2.0" ||
		len(e.Audiences) != 1 || len(e.Tenants) != 1 || e.ClockSkew != 30*time.Second {
		t.Errorf("config = %+v", c)
	}
	// Options without settings (as tests write them) are auto mode and
	// the default policy.
	if c, err := authConfig(config.Server{}); err != nil || c.Entra.Mode != auth.EntraAuto || len(c.Policies) != 0 {
		t.Errorf("zero settings: %+v, %v", c, err)
	}
	if _, err := authConfig(config.Server{Entra: "sometimes"}); err == nil {
		t.Error("a bad Entra mode is accepted")
	}
}
