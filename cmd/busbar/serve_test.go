package main

import (
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
)

// TestAMQPConfig: busbar serve's limits reach the AMQP endpoint, with the
// flags' 0 ("off") turned into the endpoint's "off".
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
