package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

// TestQuickstart runs the README's quickstart against a broker on loopback,
// and checks that the README shows this file's code as it is.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if _, err := s.Broker().CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", s.AMQPAddr())
	if err := run(ctx, cs, "orders"); err != nil {
		t.Fatalf("quickstart: %v", err)
	}
	q, err := s.Broker().GetQueue("orders")
	if err != nil {
		t.Fatal(err)
	}
	if q.Counts.Active != 0 {
		t.Fatalf("message not completed: %+v", q.Counts)
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(code)
	body = body[strings.Index(body, "func run("):]
	if !strings.Contains(string(readme), body) {
		t.Fatal("README.md does not show examples/quickstart/main.go's run function as it is")
	}
}
