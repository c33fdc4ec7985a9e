package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/server"
)

// startFaultBroker is startBroker with fault injection on.
func startFaultBroker(t *testing.T) *testBroker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Faults: true}})
	if err != nil {
		t.Fatalf("server.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &testBroker{t: t, srv: srv, cs: connString(srv.AMQPAddr().String(), "SAS_KEY_VALUE"), admin: srv.HTTPAddr().String()}
}

// TestFaultCommands: add, list and clear rules, and a send that the
// CLI's own SDK retries through two server-busy faults.
func TestFaultCommands(t *testing.T) {
	b := startFaultBroker(t)
	b.run("queue", "create", "q").ok(t)
	r := decode[faults.Rule](t, b.run("fault", "add", "server-busy", "q", "--count", "2", "--retry-after", "1s", "--json").ok(t))
	if r.ID == "" || r.Kind != faults.ServerBusy || r.Remaining != 2 {
		t.Fatalf("added %+v", r)
	}
	if out := b.run("fault", "list").ok(t); !strings.Contains(out, r.ID) || !strings.Contains(out, "server-busy") {
		t.Fatalf("list:\n%s", out)
	}
	b.run("send", "q", "hello").ok(t)
	if out := b.run("fault", "list").ok(t); !strings.Contains(out, "injected so far: server-busy 2") {
		t.Fatalf("after the send:\n%s", out)
	}
	if n := b.counts("q"); n.ActiveMessageCount != 1 {
		t.Fatalf("queue after the retried send: %+v", n)
	}

	b.run("fault", "add", "bogus", "q").fails(t, ExitUsage, "unknown fault kind")
	b.run("fault", "add", "delay", "q").fails(t, ExitUsage, "needs a delay")
	id := decode[faults.Rule](t, b.run("fault", "add", "lock-lost", "q", "--json").ok(t)).ID
	b.run("fault", "add", "drop-frame", "*", "--op", "management").ok(t)
	if out := b.run("fault", "clear", id).ok(t); !strings.Contains(out, "cleared 1 fault rule") {
		t.Fatalf("clear one: %s", out)
	}
	b.run("fault", "clear", id).fails(t, ExitNotFound, "no fault rule")
	if out := b.run("fault", "clear").ok(t); !strings.Contains(out, "cleared 1 fault rule") {
		t.Fatalf("clear all: %s", out)
	}

	off := startBroker(t, nil)
	off.run("fault", "list").fails(t, ExitNotFound, "--faults")
}

// TestRuleDryRunCommand: the verdict table and --json.
func TestRuleDryRunCommand(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "events").ok(t)
	b.run("subscription", "create", "events", "eu", "--sql", "region = 'eu'").ok(t)
	b.run("subscription", "create", "events", "vip", "--correlation", "subject=vip").ok(t)
	b.run("rule", "create", "events", "eu", "tag", "--sql", "priority > 2", "--action", "SET tier = 'gold'").ok(t)
	b.run("subscription", "create", "events", "broken", "--sql", "region / 0 = 1").ok(t)

	out := b.run("rule", "dry-run", "events", "--property", "region=eu", "--property", "priority=3", "--body", "x").ok(t)
	for _, want := range []string{"eu", "accepted ×2", "tier=gold", "vip", "no match: the message does not have Label = \"vip\"", "broken", "dead-lettered", "error:"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	v := decode[dryRunVerdict](t, b.run("rule", "dry-run", "events", "--subject", "vip", "--json").ok(t))
	if strings.Join(v.Accepted, ",") != "vip" {
		t.Fatalf("--subject vip: accepted %v", v.Accepted)
	}
	b.run("rule", "dry-run", "nope").fails(t, ExitNotFound, "nope")
	b.run("rule", "dry-run").fails(t, ExitUsage, "TOPIC")
}
