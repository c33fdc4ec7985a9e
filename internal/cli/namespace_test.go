package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

// --namespace works in one namespace of a broker serving several, for
// admin, messaging and Busbar's own endpoints alike.
func TestNamespaceFlag(t *testing.T) {
	ec, err := config.LoadEmulatorConfig(strings.NewReader(`{"UserConfig": {"Namespaces": [
	  {"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]},
	  {"Name": "other", "Queues": [{"Name": "orders"}, {"Name": "extra"}]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, ec)
	if out := b.run("queue", "list", "--namespace", "other").ok(t); !strings.Contains(out, "extra") {
		t.Errorf("queue list --namespace other:\n%s", out)
	}
	if out := b.run("queue", "list").ok(t); strings.Contains(out, "extra") {
		t.Errorf("queue list in the default namespace shows other's queue:\n%s", out)
	}
	b.run("send", "orders", "for-other", "--namespace", "other").ok(t)
	b.run("send", "orders", "for-default").ok(t)
	if out := b.run("peek", "orders", "--namespace", "other").ok(t); !strings.Contains(out, "for-other") || strings.Contains(out, "for-default") {
		t.Errorf("peek orders --namespace other:\n%s", out)
	}
	if out := b.run("peek", "orders").ok(t); strings.Contains(out, "for-other") || !strings.Contains(out, "for-default") {
		t.Errorf("peek orders:\n%s", out)
	}
	b.run("queue", "create", "made-in-other", "--namespace", "other").ok(t)
	if out := b.run("queue", "list", "--namespace", "other").ok(t); !strings.Contains(out, "made-in-other") {
		t.Errorf("queue create --namespace other did not create it there:\n%s", out)
	}
	if r := b.run("queue", "list", "--namespace", "-bad"); r.code != 2 {
		t.Errorf("--namespace -bad: exit %d, want 2 (usage)", r.code)
	}
}

// Busbar's own endpoints (/$time here) take --namespace too: each
// namespace has its own test clock.
func TestNamespaceFlagOnBusbarEndpoints(t *testing.T) {
	ec, err := config.LoadEmulatorConfig(strings.NewReader(`{"UserConfig": {"Namespaces": [{"Name": "a"}, {"Name": "other"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TestClock: true}, Entities: ec})
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
	b := &testBroker{t: t, srv: srv, cs: connString(srv.AMQPAddr().String(), "SAS_KEY_VALUE"), admin: srv.HTTPAddr().String()}
	if out := b.run("time", "advance", "3h", "--namespace", "other").ok(t); !strings.Contains(out, "(3h0m0s ahead of the wall clock)") {
		t.Fatalf("advance in other: %s", out)
	}
	if out := b.run("time", "show").ok(t); !strings.Contains(out, "(0s ahead of the wall clock)") {
		t.Errorf("the default namespace's clock moved: %s", out)
	}
	if out := b.run("time", "show", "--namespace", "other").ok(t); !strings.Contains(out, "(3h0m0s ahead of the wall clock)") {
		t.Errorf("other's clock: %s", out)
	}
}

// namespace list shows the namespaces key names made; namespace delete
// removes one (exit 2 for a Config.json namespace, 3 for an unknown one).
func TestNamespaceListAndDelete(t *testing.T) {
	ec, err := config.LoadEmulatorConfig(strings.NewReader(`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NamespacePerKeyName: true}, Entities: ec})
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
	b := &testBroker{t: t, srv: srv, cs: connString(srv.AMQPAddr().String(), "SAS_KEY_VALUE"), admin: srv.HTTPAddr().String()}
	run7 := map[string]string{EnvConnectionString: strings.Replace(b.cs, "RootManageSharedAccessKey", "run-7", 1), EnvAdmin: b.admin}
	runCLI(t, run7, "", "send", "orders", "hello").ok(t)

	out := b.run("namespace", "list").ok(t)
	for _, want := range []string{"sbemulatorns (default)", "run-7", "key-name", "(memory)"} {
		if !strings.Contains(out, want) {
			t.Errorf("namespace list lacks %q:\n%s", want, out)
		}
	}
	if out := b.run("namespace", "list", "--json").ok(t); !strings.Contains(out, `"origin": "key-name"`) {
		t.Errorf("namespace list --json:\n%s", out)
	}
	if out := b.run("namespace", "delete", "run-7").ok(t); !strings.Contains(out, "deleted namespace run-7 (1 entities)") {
		t.Errorf("namespace delete run-7: %s", out)
	}
	if out := b.run("namespace", "list").ok(t); strings.Contains(out, "run-7") {
		t.Errorf("run-7 still listed:\n%s", out)
	}
	b.run("namespace", "delete", "run-7").fails(t, ExitNotFound, "run-7")
	b.run("namespace", "delete", "sbemulatorns").fails(t, ExitUsage, "Config.json")
	// The key name makes it again, empty.
	if out := runCLI(t, run7, "", "peek", "orders").ok(t); strings.Contains(out, "hello") {
		t.Errorf("the new run-7 has the old message:\n%s", out)
	}
}
