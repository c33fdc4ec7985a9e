package server

import (
	"context"
	"errors"
	"testing"

	"github.com/busbarmq/busbar/internal/config"
)

// TestClusterRefused: --cluster is accepted by the settings but a node
// does not serve clients yet (stage 2): Start refuses it, saying so,
// before it listens on anything.
func TestClusterRefused(t *testing.T) {
	s := config.DefaultServer()
	s.Cluster, s.Store, s.NodeID = true, "postgres://u@127.0.0.1:1/db", "n1"
	s.ClusterListen, s.ClusterSecret = "127.0.0.1:0", "0123456789abcdef0123456789abcdef"
	s.AMQPAddr, s.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := Start(context.Background(), Options{Server: s})
	if !errors.Is(err, errClusterNotServing) || srv != nil {
		t.Fatalf("Start with --cluster: %v, want the not-serving refusal", err)
	}
}
