package server

import (
	"context"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/config"
)

// TestClusterRefusesSingleNodeFlags: the flags whose machinery lives in one
// process (fault injection, a namespace per key name, the test clock,
// which each node would move on its own) are refused with --cluster with a
// clear error, before anything starts.
func TestClusterRefusesSingleNodeFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*config.Server)
	}{
		{"faults", func(s *config.Server) { s.Faults = true }},
		{"namespace-per-key-name", func(s *config.Server) { s.NamespacePerKeyName = true }},
		{"test-clock", func(s *config.Server) { s.TestClock = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settings := config.DefaultServer()
			settings.Cluster = true
			tc.set(&settings)
			srv, err := Start(context.Background(), Options{Server: settings})
			if err == nil {
				_ = srv.Shutdown(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), "--"+tc.name) {
				t.Fatalf("error %q does not name --%s", err, tc.name)
			}
		})
	}
}
