package cli

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

// startBrokerOn is startBroker on a copy of the data directory fixture.
func startBrokerOn(t *testing.T, fixture string) *testBroker {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(fixture, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, d.Name()), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{DataDir: dir, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}})
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

// TestLegacyNames: entities an earlier Busbar created under names today's
// rule refuses (internal/names/testdata/legacy-data) can still be listed, shown, read
// over AMQP, exported and deleted with the CLI, without touching the
// entity a cleaned-up path would name ("a/../b" is not "b").
func TestLegacyNames(t *testing.T) {
	b := startBrokerOn(t, "../names/testdata/legacy-data")
	legacy := []string{"a/../b", "..", "sq/../evil2", "-lead"}

	list := b.run("queue", "list").ok(t)
	for _, q := range append([]string{"b", "sq"}, legacy...) {
		if !strings.Contains(list, q) {
			t.Errorf("queue list misses %q:\n%s", q, list)
		}
	}
	for _, q := range legacy {
		v := decode[queueView](t, b.run("queue", "show", "--json", "--", q).ok(t))
		if v.Name != q || v.Runtime == nil || v.Runtime.ActiveMessageCount != 1 {
			t.Errorf("queue show %q = %+v", q, v)
		}
		msgs := b.sdkPeek(q, 0)
		if len(msgs) != 1 || string(msgs[0].Body) != "in "+q {
			t.Errorf("peek %q: %d messages", q, len(msgs))
		} else if got := string(msgs[0].Body); got != "in "+q {
			t.Errorf("peek %q = %q", q, got)
		}
	}
	if v := decode[topicView](t, b.run("topic", "show", "t/./x", "--json").ok(t)); v.Name != "t/./x" {
		t.Errorf("topic show t/./x = %+v", v)
	}
	sub := b.run("subscription", "show", "t", "my sub").ok(t)
	if !strings.Contains(sub, "my sub") {
		t.Errorf("subscription show:\n%s", sub)
	}
	if out := b.run("rule", "show", "t", "my sub", "r 1").ok(t); !strings.Contains(out, "a = 1") {
		t.Errorf("rule show:\n%s", out)
	}
	b.run("receive", "t", "--subscription", "my sub", "--count", "1").ok(t)

	// Export writes them all, and says which names a new broker refuses.
	r := b.run("export")
	exported := r.ok(t)
	_, err := config.ParseEmulatorConfig([]byte(exported), config.Options{})
	if err == nil || !strings.Contains(err.Error(), `Queues[1].Name: The queue or topic name ".." is not valid`) {
		t.Errorf("loading the export: %v; want an error naming the entity", err)
	}
	for _, q := range legacy {
		if !strings.Contains(exported, `"Name": "`+q+`"`) {
			t.Errorf("export misses %q", q)
		}
		if !strings.Contains(r.stderr, `warning: queue "`+q+`" has a name new entities may not have (it `) {
			t.Errorf("export does not warn about %q:\n%s", q, r.stderr)
		}
	}

	// Delete them; "b" and "sq" stay, with their messages.
	for _, q := range legacy {
		b.run("queue", "delete", "--", q).ok(t)
		b.run("queue", "show", "--", q).fails(t, ExitNotFound)
	}
	b.run("rule", "delete", "t", "my sub", "r 1").ok(t)
	b.run("subscription", "delete", "t", "my sub").ok(t)
	b.run("topic", "delete", "t/./x").ok(t)
	for _, q := range []string{"b", "sq"} {
		if c := b.counts(q); c.ActiveMessageCount != 1 {
			t.Errorf("queue %q after the deletes: %+v", q, c)
		}
	}
	b.run("topic", "show", "t").ok(t)
}

// TestNameRuleCLI: create commands refuse names the rule refuses, before
// asking the broker, with a usage error that states the rule.
func TestNameRuleCLI(t *testing.T) {
	b := startBroker(t, nil)
	for _, args := range [][]string{
		{"queue", "create", "a/../b"},
		{"queue", "create", ".."},
		{"topic", "create", "x//y"},
		{"subscription", "create", "t", "my sub"},
		{"rule", "create", "t", "s", "r 1", "--sql", "1=1"},
	} {
		b.run(args...).fails(t, ExitUsage, "is not valid")
	}
	b.run("queue", "create", "ok.name/sub-path_1").ok(t)
}
