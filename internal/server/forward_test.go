package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/message"
)

// A Config.json whose entities forward to entities declared after them:
// the second pass sets the forwarding, and messages flow.
const forwardConfig = `{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [
          { "Name": "front", "Properties": { "ForwardTo": "back", "ForwardDeadLetteredMessagesTo": "parking", "MaxDeliveryCount": 1 } },
          { "Name": "back" },
          { "Name": "parking" }
        ],
        "Topics": [
          { "Name": "events", "Subscriptions": [ { "Name": "to-back", "Properties": { "ForwardTo": "back" } } ] }
        ]
      }
    ],
    "Logging": { "Type": "Console" }
  }
}`

// waitCounts polls q's counts until ok or a few seconds passed (the
// server's Run goroutine forwards).
func waitCounts(t *testing.T, b *broker.Broker, q string, ok func(broker.Counts) bool) broker.Counts {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := b.GetQueue(q)
		if err != nil {
			t.Fatal(err)
		}
		if ok(info.Counts) {
			return info.Counts
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s counts %+v", q, info.Counts)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConfigForwardingToEntitiesDeclaredLater(t *testing.T) {
	dir := t.TempDir()
	ec, err := config.LoadEmulatorConfig(strings.NewReader(forwardConfig))
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{Server: config.Server{DataDir: dir}, Entities: ec})
	b := s.Broker()
	info, err := b.GetQueue("front")
	if err != nil || info.Properties.ForwardTo != "back" || info.Properties.ForwardDeadLetteredMessagesTo != "parking" {
		t.Fatalf("front %+v %v", info.Properties, err)
	}
	ctx := context.Background()
	if err := b.Send(ctx, "front", []*message.Message{{Body: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, "events", []*message.Message{{Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, b, "back", func(c broker.Counts) bool { return c.Active == 2 })
	waitCounts(t, b, "front", func(c broker.Counts) bool { return c.Total == 0 })
	stop(t, s)

	// Applied again on a restart (the entities exist): still forwarding.
	s = start(t, Options{Server: config.Server{DataDir: dir}, Entities: ec})
	defer stop(t, s)
	b = s.Broker()
	if err := b.Send(ctx, "front", []*message.Message{{Body: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, b, "back", func(c broker.Counts) bool { return c.Active == 3 })
}

func TestConfigForwardingLoopFailsStart(t *testing.T) {
	ec, err := config.LoadEmulatorConfig(strings.NewReader(`{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[
		{"Name":"a","Properties":{"ForwardTo":"b"}},{"Name":"b","Properties":{"ForwardTo":"a"}}]}],"Logging":{"Type":"Console"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, Entities: ec})
	if err == nil || !strings.Contains(err.Error(), "loop") || !strings.Contains(err.Error(), "b → a → b") {
		t.Fatalf("Start with a forwarding loop: %v", err)
	}
}
