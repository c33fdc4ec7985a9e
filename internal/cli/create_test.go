package cli

import (
	"strings"
	"testing"
)

// TestCreateIfNotExists: every create takes --if-not-exists, which turns
// "already exists" (exit 5) into exit 0 without changing the entity, and
// forgives nothing else.
func TestCreateIfNotExists(t *testing.T) {
	b := startBroker(t, nil)
	for _, tc := range []struct {
		args   []string
		exists string
	}{
		{[]string{"queue", "create", "q", "--max-delivery-count", "3"}, `queue "q" already exists`},
		{[]string{"topic", "create", "t"}, `topic "t" already exists`},
		{[]string{"subscription", "create", "t", "s"}, `subscription "t/Subscriptions/s" already exists`},
		{[]string{"rule", "create", "t", "s", "r", "--sql", "n = 1"}, `rule "r" of subscription "t/Subscriptions/s" already exists`},
	} {
		b.run(tc.args...).ok(t)
		b.run(tc.args...).fails(t, ExitExists, tc.exists)
		out := b.run(append(tc.args, "--if-not-exists")...).ok(t)
		if out != tc.exists+"; left as it is\n" {
			t.Errorf("%v --if-not-exists: %q", tc.args, out)
		}
	}
	// Nothing was changed, and --json prints the entity as it is.
	v := decode[queueView](t, b.run("queue", "create", "q", "--max-delivery-count", "9", "--if-not-exists", "--json").ok(t))
	if v.Name != "q" || *v.Properties.MaxDeliveryCount != 3 {
		t.Errorf("queue create --if-not-exists --json: %+v", v)
	}
	r := decode[ruleView](t, b.run("rule", "create", "t", "s", "r", "--sql", "n = 2", "--if-not-exists", "--json").ok(t))
	if r.Name != "r" || !strings.Contains(b.run("rule", "show", "t", "s", "r").ok(t), "n = 1") {
		t.Errorf("rule create --if-not-exists --json: %+v", r)
	}
	// A queue's name taken by a topic, or the reverse, is still exit 5.
	b.run("queue", "create", "t", "--if-not-exists").fails(t, ExitExists, `"t" is a topic`)
	b.run("topic", "create", "q", "--if-not-exists").fails(t, ExitExists, `"q" is a queue`)
	// Other failures are not forgiven.
	b.run("subscription", "create", "nosuch", "s", "--if-not-exists").fails(t, ExitNotFound, `topic "nosuch"`)
	b.run("rule", "create", "t", "nosuch", "r", "--true", "--if-not-exists").fails(t, ExitNotFound, "nosuch")
	b.run("queue", "create", "bad name", "--if-not-exists").fails(t, ExitUsage)
}
