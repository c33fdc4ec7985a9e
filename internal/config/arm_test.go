package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func loadARM(t *testing.T, file string, params map[string]any) *ARMImport {
	t.Helper()
	data, err := os.ReadFile("testdata/arm/" + file)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := ParseARMTemplate(data, ARMOptions{Parameters: params})
	if err != nil {
		t.Fatalf("ParseARMTemplate(%s): %v", file, err)
	}
	return imp
}

// TestARMExported reads a template in the shape the portal's "Export
// template" writes: top-level resources with full types, names built with
// concat(parameters(…)), $Default rules, read-only and Azure-only
// properties, a network rule set.
func TestARMExported(t *testing.T) {
	imp := loadARM(t, "exported.json", nil)
	c := imp.Config
	if len(c.Namespaces) != 1 || c.Namespaces[0].Name != "contoso-orders" {
		t.Fatalf("namespaces: %+v", c.Namespaces)
	}
	if imp.SKUs["contoso-orders"] != "Standard" {
		t.Errorf("SKUs: %v", imp.SKUs)
	}
	ns := c.Namespaces[0]
	if len(ns.Queues) != 2 || ns.Queues[0].Name != "orders" || ns.Queues[1].Name != "orders-poison" {
		t.Fatalf("queues: %+v", ns.Queues)
	}
	q := ns.Queues[0].Props
	if *q.LockDuration != time.Minute || *q.MaxDeliveryCount != 5 || !*q.RequiresDuplicateDetection ||
		*q.DefaultMessageTimeToLive != 14*24*time.Hour || *q.ForwardDeadLetteredMessagesTo != "orders-poison" || *q.MaxMessageSizeInKilobytes != 256 {
		t.Errorf("orders: %+v", q)
	}
	if len(ns.Topics) != 1 || ns.Topics[0].Name != "events" || !*ns.Topics[0].Props.SupportOrdering {
		t.Fatalf("topics: %+v", ns.Topics)
	}
	subs := ns.Topics[0].Subscriptions
	if len(subs) != 2 || subs[0].Name != "eu" || subs[1].Name != "audit" {
		t.Fatalf("subscriptions: %+v", subs)
	}
	eu := subs[0]
	if !*eu.Props.DeadLetteringOnFilterEvaluationExceptions || len(eu.Rules) != 2 {
		t.Fatalf("eu: %+v", eu)
	}
	if r := eu.Rules[0]; r.Name != "region-eu" || r.Filter.Type != FilterSQL || r.Filter.SQL != "region = 'eu'" || r.Action != "SET sys.Label = 'eu'" {
		t.Errorf("region-eu: %+v", r)
	}
	if r := eu.Rules[1]; r.Name != "vip" || r.Filter.Type != FilterCorrelation || *r.Filter.Correlation.CorrelationID != "vip" ||
		*r.Filter.Correlation.Label != "new-order" || r.Filter.Correlation.Properties["tier"] != "gold" || r.Filter.Correlation.Properties["priority"] != int64(3) || r.Action != "" {
		t.Errorf("vip: %+v %+v", r, r.Filter.Correlation)
	}
	if r := subs[1].Rules; len(r) != 1 || r[0].Name != "$Default" || r[0].Filter.SQL != "1=1" {
		t.Errorf("audit's rules: %+v", r)
	}
	want := []ARMAuthRule{
		{Namespace: "contoso-orders", Name: "RootManageSharedAccessKey", Rights: []string{"Listen", "Manage", "Send"}},
		{Namespace: "contoso-orders", Entity: "orders", Name: "orders-app", Rights: []string{"Send", "Listen"}},
	}
	if got := imp.AuthRules; len(got) != 2 || got[0].Name != want[0].Name || got[0].Entity != "" || got[1].Entity != "orders" || strings.Join(got[1].Rights, ",") != "Send,Listen" {
		t.Errorf("auth rules: %+v", got)
	}
	if len(imp.Warnings) != 1 || !strings.Contains(imp.Warnings[0], "networkrulesets") {
		t.Errorf("warnings: %q", imp.Warnings)
	}
	// The result is a valid Config.json that loads back the same.
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseEmulatorConfig(b, Options{})
	if err != nil {
		t.Fatalf("the written Config.json does not load: %v\n%s", err, b)
	}
	if b2, _ := back.Marshal(); string(b2) != string(b) {
		t.Errorf("round trip differs:\n%s\n%s", b, b2)
	}
}

// TestARMHandWritten reads nested child resources with short types and
// names, variables, format/toLower/concat, a required parameter and
// defaults, a false condition, and a resource of another provider.
func TestARMHandWritten(t *testing.T) {
	imp := loadARM(t, "handwritten.json", map[string]any{"serviceBusNamespaceName": "myns", "maxDeliveryCount": "4"})
	ns := imp.Config.Namespaces[0]
	if ns.Name != "myns" || imp.SKUs["myns"] != "Premium" {
		t.Fatalf("namespace %q, SKUs %v", ns.Name, imp.SKUs)
	}
	if len(ns.Queues) != 1 || ns.Queues[0].Name != "dev-orders" {
		t.Fatalf("queues: %+v", ns.Queues)
	}
	q := ns.Queues[0].Props
	if *q.LockDuration != 45*time.Second || *q.MaxDeliveryCount != 4 || !*q.RequiresSession || *q.MaxMessageSizeInKilobytes != 1024 {
		t.Errorf("dev-orders: %+v", q)
	}
	if len(ns.Topics) != 1 || ns.Topics[0].Name != "events-dev" || *ns.Topics[0].Props.DuplicateDetectionHistoryTimeWindow != time.Hour {
		t.Fatalf("topics: %+v", ns.Topics)
	}
	subs := ns.Topics[0].Subscriptions
	if len(subs) != 2 || subs[0].Name != "all" || *subs[0].Props.ForwardTo != "dev-orders" || subs[1].Name != "big" {
		t.Fatalf("subscriptions: %+v", subs)
	}
	if r := subs[1].Rules; len(r) != 1 || r[0].Name != "large" || r[0].Filter.SQL != "size > 100" || r[0].Action != "SET bucket = 'large'" {
		t.Errorf("big's rules: %+v", r)
	}
	if len(imp.AuthRules) != 1 || imp.AuthRules[0].Name != "sender" || imp.AuthRules[0].Entity != "" {
		t.Errorf("auth rules: %+v", imp.AuthRules)
	}
	w := strings.Join(imp.Warnings, "\n")
	if !strings.Contains(w, "condition is false") || !strings.Contains(w, "Microsoft.Storage/storageAccounts 'unrelated'") {
		t.Errorf("warnings: %q", imp.Warnings)
	}
}

func TestARMErrors(t *testing.T) {
	data, err := os.ReadFile("testdata/arm/unsupported.json")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseARMTemplate(data, ARMOptions{})
	if err == nil || !strings.Contains(err.Error(), "Microsoft.ServiceBus/namespaces/queues") || !strings.Contains(err.Error(), "is not supported") {
		t.Errorf("unsupported function: %v", err)
	}
	hand, _ := os.ReadFile("testdata/arm/handwritten.json")
	for _, c := range []struct {
		params map[string]any
		want   string
	}{
		{nil, "parameter 'serviceBusNamespaceName' has no default value"},
		{map[string]any{"serviceBusNamespaceName": "n", "environment": "test"}, "allowedValues"},
		{map[string]any{"serviceBusNamespaceName": "n", "maxDeliveryCount": "many"}, "'maxDeliveryCount' is an int"},
		{map[string]any{"serviceBusNamespaceName": "n", "nope": "x"}, "no such parameter"},
		{map[string]any{"serviceBusNamespaceName": "n", "maxDeliveryCount": "0"}, "namespaces/queues 'n/dev-orders'.Properties.MaxDeliveryCount"},
	} {
		_, err := ParseARMTemplate(hand, ARMOptions{Parameters: c.params})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("params %v: %v; want %q", c.params, err, c.want)
		}
	}
	for _, c := range []struct{ tmpl, want string }{
		{`[]`, "not a JSON object"},
		{`{"resources": {}}`, "no \"resources\" array"},
		{`{"resources": []}`, "declares no Service Bus"},
		{`{"resources": [{"type": "Microsoft.ServiceBus/namespaces/queues", "name": "q"}]}`, "needs 2"},
		{`{"resources": [{"type": "Microsoft.ServiceBus/namespaces/queues", "name": "n/q", "copy": {"name": "c", "count": 2}}]}`, "copy"},
		{`{"resources": [{"type": "Microsoft.ServiceBus/namespaces/queues", "name": "[concat('n/', 'q'"}]}`, "name"},
		{`{"resources": [{"type": "Microsoft.ServiceBus/namespaces/queues", "name": "n/q", "properties": {"lockDuration": "PT1H"}}]}`, "namespaces/queues 'n/q'.Properties.LockDuration"},
		{`{"resources": [{"type": "Microsoft.ServiceBus/namespaces/topics/subscriptions/rules", "name": "n/t/s/r", "properties": {"filterType": "Magic"}}]}`, "Magic"},
		{`{"variables": {"a": "[variables('b')]", "b": "[variables('a')]"}, "resources": [{"type": "Microsoft.ServiceBus/namespaces", "name": "[variables('a')]"}]}`, "refers to itself"},
		{`{"parameters": {"x": {"type": "object", "defaultValue": {"name": "n"}}}, "resources": [{"type": "Microsoft.ServiceBus/namespaces", "name": "[parameters('x').name]"}]}`, "property and index access"},
	} {
		_, err := ParseARMTemplate([]byte(c.tmpl), ARMOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.tmpl, err, c.want)
		}
	}
}

func TestARMExpressions(t *testing.T) {
	tmpl := &armTemplate{params: map[string]map[string]any{"p": {"type": "string", "defaultValue": "Ab"}}, vars: map[string]any{"v": int64(3)},
		resolving: map[string]bool{}, cache: map[string]any{}}
	for in, want := range map[string]any{
		"plain":                "plain",
		"[[not an expression]": "[not an expression]",
		"[parameters('p')]":    "Ab",
		"[concat(parameters('p'), '-', variables('v'))]": "Ab-3",
		"[format('{0}/{1}{{x}}', 'a', 7)]":               "a/7{x}",
		"[toUpper('it''s')]":                             "IT'S",
		"[if(equals(parameters('p'), 'Ab'), 1, 2)]":      int64(1),
		"[not(empty(''))]":                               false,
		"[length(concat('ab', 'c'))]":                    int64(3),
		"[replace(' x-y ', '-', '_')]":                   " x_y ",
		"[trim(' x ')]":                                  "x",
		"[int('42')]":                                    int64(42),
		"[bool('true')]":                                 true,
		"[string(5)]":                                    "5",
	} {
		got, err := evalARMString(in, tmpl)
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"[resourceGroup().location]", "[concat('a']", "[parameters('nope')]", "['unterminated]", "[concat()]", "[format('{1}', 'a')]"} {
		if _, err := evalARMString(in, tmpl); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

// TestARMNamespaceSettingsNotRead: a namespace's own properties (TLS,
// zone redundancy, …) are not evaluated, so expressions there do not
// matter.
func TestARMNamespaceSettingsNotRead(t *testing.T) {
	tmpl := `{"resources":[{"type":"Microsoft.ServiceBus/namespaces","name":"n","properties":{"zoneRedundant":"[resourceGroup().zr]"},"resources":[{"type":"queues","name":"q"}]}]}`
	imp, err := ParseARMTemplate([]byte(tmpl), ARMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns := imp.Config.Namespaces; len(ns) != 1 || len(ns[0].Queues) != 1 || ns[0].Queues[0].Name != "q" {
		t.Errorf("%+v", ns)
	}
}
