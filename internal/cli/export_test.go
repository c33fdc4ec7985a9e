package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/config"
)

func TestExportLoadsBackToTheSameTopology(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "plain").ok(t)
	b.run("queue", "create", "errors", "--default-ttl", "14d", "--user-metadata", `say "hi" & <bye>`).ok(t)
	b.run("queue", "create", "orders", "--lock-duration", "30s", "--max-delivery-count", "5", "--default-ttl", "1h",
		"--dead-letter-on-expiration", "--duplicate-detection", "--duplicate-window", "20s", "--max-size-mb", "2048",
		"--auto-delete-on-idle", "2h", "--forward-dlq-to", "errors").ok(t)
	b.run("queue", "create", "sessions", "--requires-session", "--status", "ReceiveDisabled", "--forward-to", "plain").ok(t)
	b.run("send", "orders", "messages are not exported").ok(t)

	exported := b.run("export").ok(t)
	cfg, err := config.LoadEmulatorConfig(strings.NewReader(exported))
	if err != nil {
		t.Fatalf("export does not load: %v\n%s", err, exported)
	}
	if len(cfg.Warnings) > 0 || cfg.Logging == nil || cfg.Logging.Type != "File" {
		t.Errorf("warnings %v, logging %+v", cfg.Warnings, cfg.Logging)
	}
	// Only what differs from the defaults is written.
	ns := cfg.Namespaces[0]
	if len(ns.Queues) != 4 || ns.Queues[2].Name != "plain" || ns.Queues[2].Props != (config.QueueProps{}) {
		t.Errorf("queues: %+v", ns.Queues)
	}
	if !strings.Contains(exported, `"ForwardDeadLetteredMessagesTo": "errors"`) || strings.Contains(exported, "EnableBatchedOperations") {
		t.Errorf("export:\n%s", exported)
	}

	// -o writes the same to a file.
	file := filepath.Join(t.TempDir(), "Config.json")
	b.run("export", "-o", file).ok(t)
	if data, err := os.ReadFile(file); err != nil || string(data) != exported {
		t.Errorf("export -o wrote %q (%v)", data, err)
	}

	b2 := startBroker(t, cfg)
	if got, want := topology(t, b2), topology(t, b); got != want {
		t.Errorf("topology differs after a round trip:\ngot  %s\nwant %s", got, want)
	}
	if again := b2.run("export").ok(t); again != exported {
		t.Errorf("second export differs:\n%s\nfirst:\n%s", again, exported)
	}
}

// topology is queue list --json without the runtime counts.
func topology(t *testing.T, b *testBroker) string {
	t.Helper()
	views := decode[[]queueView](t, b.run("queue", "list", "--json").ok(t))
	for i := range views {
		views[i].Runtime = nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(views); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestExportEmpty(t *testing.T) {
	b := startBroker(t, nil)
	out := b.run("export", "--namespace", "sbemulatorns").ok(t)
	cfg, err := config.LoadEmulatorConfig(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Namespaces) != 1 || cfg.Namespaces[0].Name != "sbemulatorns" || len(cfg.Namespaces[0].Queues) != 0 {
		t.Errorf("%+v", cfg)
	}
}
