package cli

import (
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/config"
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
