package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/config"
)

// The templates are config's (written from Azure's documented resource
// schema): one as "Export template" writes it, one by hand.
const armDir = "../config/testdata/arm/"

// TestImportApplyMatchesConfig: `busbar import --apply` against a running
// broker and `busbar import -o Config.json` loaded by a new broker give the
// same topology.
func TestImportApplyMatchesConfig(t *testing.T) {
	for _, c := range []struct {
		file   string
		params []string
	}{
		{"exported.json", nil},
		{"handwritten.json", []string{"--param", "serviceBusNamespaceName=myns", "-p", "withAudit=true"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			applied := startBroker(t, nil)
			r := applied.run(append([]string{"import", armDir + c.file, "--apply"}, c.params...)...)
			out := r.ok(t)
			if !strings.Contains(out, "created queue ") || !strings.Contains(out, "created subscription ") {
				t.Errorf("--apply printed:\n%s", out)
			}

			file := filepath.Join(t.TempDir(), "Config.json")
			applied.run(append([]string{"import", armDir + c.file, "-o", file}, c.params...)...).ok(t)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.LoadEmulatorConfig(strings.NewReader(string(data)))
			if err != nil {
				t.Fatalf("the written Config.json does not load: %v\n%s", err, data)
			}
			loaded := startBroker(t, cfg)
			if got, want := topology(t, loaded), topology(t, applied); got != want {
				t.Errorf("Config.json and --apply differ:\nConfig.json %s\n--apply     %s", got, want)
			}
			// Without -o, the Config.json goes to standard output.
			if stdout := applied.run(append([]string{"import", armDir + c.file}, c.params...)...).ok(t); stdout != string(data) {
				t.Errorf("stdout differs from -o:\n%s", stdout)
			}
		})
	}
}

func TestImportExportedDetails(t *testing.T) {
	b := startBroker(t, nil)
	r := b.run("import", armDir+"exported.json", "--apply")
	out := r.ok(t)
	for _, s := range []string{"queue orders: authorization rule orders-app, primary key "} {
		if !strings.Contains(out, s) {
			t.Errorf("stdout does not mention %q:\n%s", s, out)
		}
	}
	for _, s := range []string{"--policies 'RootManageSharedAccessKey=KEY:Listen,Manage,Send'", "networkrulesets", "is Standard in the template"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not mention %q:\n%s", s, r.stderr)
		}
	}
	c := b.adminClient()
	q, err := c.GetQueue(t.Context(), "orders", nil)
	if err != nil || q == nil {
		t.Fatalf("GetQueue: %v", err)
	}
	if len(q.AuthorizationRules) != 1 || *q.AuthorizationRules[0].KeyName != "orders-app" || *q.MaxDeliveryCount != 5 || *q.ForwardDeadLetteredMessagesTo == "" {
		t.Errorf("orders: %+v", q.QueueProperties)
	}
	rules := decode[[]ruleView](t, b.run("rule", "list", "events", "eu", "--json").ok(t))
	if len(rules) != 2 || rules[0].Name != "region-eu" || rules[1].Name != "vip" {
		t.Errorf("rules of events/eu: %+v", rules)
	}
	// Applying again changes nothing and says what exists.
	b.run("import", armDir+"exported.json", "--apply").fails(t, ExitExists, "nothing was created", "queue orders", "topic events")
	// -o warns that entity rules are not written.
	r = b.run("import", armDir+"exported.json")
	if r.code != 0 || !strings.Contains(r.stderr, "Config.json cannot hold authorization rules") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

func TestImportErrors(t *testing.T) {
	b := startBroker(t, nil)
	b.run("import", armDir+"unsupported.json").fails(t, 1, "Microsoft.ServiceBus/namespaces/queues", "is not supported")
	b.run("import", armDir+"handwritten.json").fails(t, 1, "serviceBusNamespaceName", "--param")
	b.run("import", armDir+"handwritten.json", "-p", "serviceBusNamespaceName=n", "-p", "maxDeliveryCount=0").fails(t, 1, "queues 'n/dev-orders'", "MaxDeliveryCount")
	b.run("import", armDir+"exported.json", "-o", "x.json", "--apply").fails(t, ExitUsage, "exclude")
	b.run("import", armDir+"exported.json", "-p", "novalue").fails(t, ExitUsage, "NAME=VALUE")
	b.run("import", "no-such-file.json").fails(t, ExitUsage, "no-such-file.json")

	params := filepath.Join(t.TempDir(), "params.json")
	if err := os.WriteFile(params, []byte(`{"parameters": {"serviceBusNamespaceName": {"value": "fromfile"}, "environment": {"value": "prod"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := b.run("import", armDir+"handwritten.json", "--parameters", params).ok(t)
	if !strings.Contains(out, `"fromfile"`) || !strings.Contains(out, `"prod-orders"`) {
		t.Errorf("with a parameters file:\n%s", out)
	}
}
