package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/config"
)

func TestExportLoadsBackToTheSameTopology(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "plain").ok(t)
	b.run("queue", "create", "errors", "--default-ttl", "14d", "--user-metadata", `say "hi" & <bye>`, "--forward-to", "plain").ok(t)
	b.run("queue", "create", "orders", "--lock-duration", "30s", "--max-delivery-count", "5", "--default-ttl", "1h",
		"--dead-letter-on-expiration", "--duplicate-detection", "--duplicate-window", "20s", "--max-size-mb", "2048",
		"--auto-delete-on-idle", "2h", "--forward-dlq-to", "errors").ok(t)
	// (A session-enabled queue cannot auto-forward; its dead letters can.)
	b.run("queue", "create", "sessions", "--requires-session", "--status", "ReceiveDisabled", "--forward-dlq-to", "plain").ok(t)
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

// topology is the broker's entities as the list commands print them with
// --json, without the runtime counts: queues, topics, and each topic's
// subscriptions with their rules.
func topology(t *testing.T, b *testBroker) string {
	t.Helper()
	return topologyOf(t, b, nil)
}

// topologyOf is topology with the rules passed through edit first.
func topologyOf(t *testing.T, b *testBroker, edit func([]ruleView) []ruleView) string {
	t.Helper()
	queues := decode[[]queueView](t, b.run("queue", "list", "--json").ok(t))
	for i := range queues {
		queues[i].Runtime = nil
	}
	topics := decode[[]topicView](t, b.run("topic", "list", "--json").ok(t))
	subs := map[string][]subscriptionView{}
	for i, tp := range topics {
		topics[i].Runtime = nil
		list := decode[[]subscriptionView](t, b.run("subscription", "list", tp.Name, "--json").ok(t))
		for j, s := range list {
			list[j].Runtime = nil
			list[j].Rules = decode[[]ruleView](t, b.run("rule", "list", tp.Name, s.Name, "--json").ok(t))
			if edit != nil {
				list[j].Rules = edit(list[j].Rules)
			}
		}
		subs[tp.Name] = list
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(map[string]any{"queues": queues, "topics": topics, "subscriptions": subs}); err != nil {
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

func TestExportTopicsLoadBackToTheSameTopology(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "errors", "--default-ttl", "14d").ok(t)
	b.run("topic", "create", "events", "--default-ttl", "7d", "--duplicate-detection", "--duplicate-window", "1m",
		"--max-size-mb", "2048", "--max-message-size-kb", "512", "--auto-delete-on-idle", "12h", "--user-metadata", `team "orders" & <ops>`).ok(t)
	b.run("topic", "create", "audit", "--status", "SendDisabled").ok(t)
	b.run("topic", "create", "quiet").ok(t)                           // no subscriptions
	b.run("queue", "create", "inbox", "--forward-to", "events").ok(t) // forwards to a topic, which the file declares after it

	// all: just $Default, which Config.json leaves out.
	b.run("subscription", "create", "events", "all").ok(t)
	// eu: a SQL default rule and every property.
	b.run("subscription", "create", "events", "eu", "--sql", "region = 'eu' AND sys.Label LIKE 'order-%'", "--lock-duration", "30s",
		"--max-delivery-count", "3", "--default-ttl", "1h", "--dead-letter-on-expiration", "--dead-letter-on-filter-exceptions=false",
		"--auto-delete-on-idle", "2h", "--forward-dlq-to", "errors", "--status", "ReceiveDisabled", "--user-metadata", "europe").ok(t)
	// placed: a correlation rule with an action, and a second rule.
	b.run("subscription", "create", "events", "placed", "--rule-name", "placed", "--action", "SET seen = TRUE; REMOVE tmp",
		"--correlation", "subject=order-placed,correlationId=c1,contentType=application/json,region=eu,vip=true,weight:double=1.5").ok(t)
	b.run("rule", "create", "events", "placed", "big", "--sql", "total > 100", "--action", "SET big = TRUE").ok(t)
	// mixed: $Default next to another rule; paused: only a FalseFilter.
	b.run("subscription", "create", "events", "mixed").ok(t)
	b.run("rule", "create", "events", "mixed", "ids", "--message-id", "m1", "--to", "t", "--reply-to", "r", "--session-id", "s",
		"--reply-to-session-id", "rs").ok(t)
	b.run("subscription", "create", "events", "paused").ok(t)
	b.run("rule", "create", "events", "paused", "none", "--false").ok(t)
	b.run("rule", "delete", "events", "paused", "$Default").ok(t)
	// fwd: forwards to another topic.
	b.run("subscription", "create", "events", "fwd", "--forward-to", "audit", "--sql", "1=1").ok(t)
	b.run("subscription", "create", "audit", "x", "--correlation", "to=auditor").ok(t)
	b.run("send", "events", "messages are not exported", "-p", "region=eu").ok(t)

	exported := b.run("export").ok(t)
	cfg, err := config.LoadEmulatorConfig(strings.NewReader(exported))
	if err != nil {
		t.Fatalf("export does not load: %v\n%s", err, exported)
	}
	if len(cfg.Warnings) > 0 {
		t.Errorf("warnings %v", cfg.Warnings)
	}
	ns := cfg.Namespaces[0]
	if len(ns.Queues) != 2 || len(ns.Topics) != 3 || ns.Topics[1].Name != "events" || len(ns.Topics[1].Subscriptions) != 6 {
		t.Fatalf("exported %+v", ns)
	}
	subs := map[string]config.Subscription{}
	for _, s := range ns.Topics[1].Subscriptions {
		subs[s.Name] = s
	}
	if subs["all"].Rules != nil || subs["all"].Props != (config.SubscriptionProps{}) {
		t.Errorf("all: %+v", subs["all"])
	}
	if r := subs["placed"].Rules; len(r) != 2 || r[0].Name != "big" || r[1].Name != "placed" || r[1].Action != "SET seen = TRUE; REMOVE tmp" ||
		r[1].Filter.Type != config.FilterCorrelation || *r[1].Filter.Correlation.Label != "order-placed" || r[1].Filter.Correlation.Properties["weight"] != 1.5 {
		t.Errorf("placed: %+v", r)
	}
	if r := subs["paused"].Rules; len(r) != 1 || r[0].Filter.SQL != "1=0" {
		t.Errorf("paused: %+v", r)
	}
	if r := subs["mixed"].Rules; len(r) != 2 || r[0].Name != "$Default" || r[0].Filter.SQL != "1=1" {
		t.Errorf("mixed: %+v", r)
	}
	for _, want := range []string{`"ForwardTo": "audit"`, `"ForwardTo": "events"`, `"Status": "ReceiveDisabled"`, `"DeadLetteringOnFilterEvaluationExceptions": false`,
		`"SqlExpression": "region = 'eu' AND sys.Label LIKE 'order-%'"`, `"vip": true`, `"weight": 1.5`} {
		if !strings.Contains(exported, want) {
			t.Errorf("export lacks %s:\n%s", want, exported)
		}
	}

	b2 := startBroker(t, cfg)
	// Config.json has SQL and correlation filters only: a TrueFilter or
	// FalseFilter comes back as the SQL filter 1=1 or 1=0 (except the lone
	// $Default, which is left out and recreated as it was).
	asLoaded := func(rules []ruleView) []ruleView {
		if len(rules) == 1 && rules[0].Name == "$Default" && rules[0].Filter.Type == "TrueFilter" {
			return rules
		}
		for i, r := range rules {
			switch r.Filter.Type {
			case "TrueFilter":
				rules[i].Filter = filterView{Type: "SqlFilter", SQLExpression: to.Ptr("1=1")}
			case "FalseFilter":
				rules[i].Filter = filterView{Type: "SqlFilter", SQLExpression: to.Ptr("1=0")}
			}
		}
		return rules
	}
	if got, want := topology(t, b2), topologyOf(t, b, asLoaded); got != want {
		t.Errorf("topology differs after a round trip:\ngot  %s\nwant %s", got, want)
	}
	if again := b2.run("export").ok(t); again != exported {
		t.Errorf("second export differs:\n%s\nfirst:\n%s", again, exported)
	}

	// The loaded rules route as the originals did.
	b2.run("send", "events", "e1", "--subject", "order-placed", "--correlation-id", "c1", "--content-type", "application/json",
		"-p", "region=eu", "-p", "vip=true", "-p", "weight:double=1.5", "-p", "tmp=1", "-p", "total=500").ok(t)
	placed := decode[[]jsonMessage](t, b2.run("peek", "events", "-s", "placed", "--json").ok(t))
	if len(placed) != 2 || placed[0].Properties["seen"] == placed[1].Properties["seen"] {
		t.Errorf("placed got %+v", placed)
	}
	for _, sub := range []string{"all", "eu", "fwd"} {
		if c := b2.subCounts("events", sub); c.TotalMessageCount != 1 {
			t.Errorf("%s holds %d messages, want 1", sub, c.TotalMessageCount)
		}
	}
	for _, sub := range []string{"mixed", "paused"} {
		if c := b2.subCounts("events", sub); c.TotalMessageCount != map[string]int64{"mixed": 1, "paused": 0}[sub] {
			t.Errorf("%s holds %d messages", sub, c.TotalMessageCount)
		}
	}
}

func TestExportRefusesWhatConfigCannotHold(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "t").ok(t)
	b.run("subscription", "create", "t", "empty").ok(t)
	b.run("rule", "delete", "t", "empty", "$Default").ok(t)
	b.run("subscription", "create", "t", "timed", "--correlation", "at:time=2026-01-02T03:04:05Z").ok(t)
	b.run("subscription", "create", "t", "params").ok(t)
	c := b.adminClient()
	ctx := context.Background()
	if _, err := c.CreateRule(ctx, "t", "params", &sbadmin.CreateRuleOptions{
		Name:   to.Ptr("p"),
		Filter: &sbadmin.SQLFilter{Expression: "n > @min", Parameters: map[string]any{"@min": 5}},
		Action: &sbadmin.SQLAction{Expression: "SET x = @x", Parameters: map[string]any{"@x": "y"}},
	}); err != nil {
		t.Fatal(err)
	}

	r := b.run("export")
	r.fails(t, ExitFailure, "cannot export",
		`subscription "t/Subscriptions/empty": it has no rules`, "none --false",
		`subscription "t/Subscriptions/params": rule "p": its SQL filter has parameters (@min)`,
		`subscription "t/Subscriptions/params": rule "p": its action has parameters (@x)`,
		`subscription "t/Subscriptions/timed": rule "$Default": its correlation filter property "at" is a time.Time`)
	if r.stdout != "" {
		t.Errorf("export wrote %q", r.stdout)
	}
	// The remedy the message gives works.
	b.run("rule", "create", "t", "empty", "none", "--false").ok(t)
	b.run("subscription", "delete", "t", "timed", "params").ok(t)
	b.run("export").ok(t)
}

// TestExportIntegerCorrelationProperty: an integer correlation filter
// property goes through Config.json and back.
func TestExportIntegerCorrelationProperty(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "t").ok(t)
	b.run("subscription", "create", "t", "s", "--correlation", "n=5").ok(t)
	exported := b.run("export").ok(t)
	if !strings.Contains(exported, `"n": 5`) {
		t.Fatalf("export:\n%s", exported)
	}
	cfg, err := config.LoadEmulatorConfig(strings.NewReader(exported))
	if err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, cfg)
	// The server types the file's small integers as 32-bit, which the Go
	// admin client v1.11.0 reads back (it cannot read xsd:long).
	b2.run("rule", "list", "t", "s", "--json").ok(t)
	if got, want := topology(t, b2), topology(t, b); got != want {
		t.Errorf("topology differs after a round trip:\ngot  %s\nwant %s", got, want)
	}
	if again := b2.run("export").ok(t); again != exported {
		t.Errorf("second export differs:\n%s\nfirst:\n%s", again, exported)
	}
}

// TestExportNeverLeavesPartialFile: a failed export writes nothing, to -o
// FILE (which keeps its old contents) or to standard output; a successful
// -o replaces the file whole, keeping its permissions, and leaves no
// temporary file behind.
func TestExportNeverLeavesPartialFile(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	b.run("topic", "create", "t").ok(t)
	b.run("subscription", "create", "t", "empty").ok(t)
	b.run("rule", "delete", "t", "empty", "$Default").ok(t) // cannot be exported
	dir := t.TempDir()
	file := filepath.Join(dir, "Config.json")
	if err := os.WriteFile(file, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	entries := func() []string {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		return names
	}

	b.run("export", "-o", file).fails(t, ExitFailure, "it has no rules")
	if got, _ := os.ReadFile(file); string(got) != "old" {
		t.Errorf("failed export -o changed the file to %q", got)
	}
	if got := entries(); len(got) != 1 {
		t.Errorf("directory after a failed export: %v", got)
	}

	// Standard output redirected to a file, as the shell does it: nothing
	// is written, and the error says how to keep the file.
	out := filepath.Join(dir, "stdout.json")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	root := &cobra.Command{Use: "busbar", SilenceUsage: true, SilenceErrors: true}
	env := map[string]string{EnvConnectionString: b.cs, EnvAdmin: b.admin}
	root.AddCommand(Commands(func(k string) (string, bool) { v, ok := env[k]; return v, ok })...)
	var stderr bytes.Buffer
	root.SetArgs([]string{"export"})
	root.SetOut(f)
	root.SetErr(&stderr)
	err = root.ExecuteContext(context.Background())
	_ = f.Close()
	if ExitCode(err) != ExitFailure || !strings.Contains(err.Error(), "busbar export -o FILE") {
		t.Errorf("export > file: exit %d, %v", ExitCode(err), err)
	}
	if got, _ := os.ReadFile(out); len(got) != 0 {
		t.Errorf("failed export > file wrote %q", got)
	}
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}

	// Once the topology can be exported, -o replaces the file whole.
	b.run("rule", "create", "t", "empty", "none", "--false").ok(t)
	want := b.run("export").ok(t)
	b.run("export", "-o", file).ok(t)
	got, err := os.ReadFile(file)
	if err != nil || string(got) != want {
		t.Errorf("export -o wrote %q (%v), want %q", got, err, want)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("export -o changed the file's mode: %v %v", fi.Mode(), err)
	}
	if got := entries(); len(got) != 1 {
		t.Errorf("directory after export -o: %v", got)
	}
	// A new file gets 0644; a directory that does not exist is an error.
	fresh := filepath.Join(dir, "new.json")
	b.run("export", "-o", fresh).ok(t)
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("new export file: %v %v", fi, err)
	}
	b.run("export", "-o", filepath.Join(dir, "missing", "Config.json")).fails(t, ExitFailure, "writing")
}
