package cli

import (
	"strings"
	"testing"
)

func TestQueueLifecycle(t *testing.T) {
	b := startBroker(t, nil)

	out := b.run("queue", "create", "orders", "--lock-duration", "30s", "--max-delivery-count", "5",
		"--default-ttl", "1h", "--dead-letter-on-expiration", "--duplicate-detection", "--duplicate-window", "10m",
		"--max-size-mb", "2048", "--user-metadata", "team=payments").ok(t)
	if !strings.Contains(out, "created queue orders") {
		t.Errorf("create output: %q", out)
	}
	b.run("queue", "create", "plain", "--json").ok(t)
	b.run("queue", "create", "orders").fails(t, ExitExists, `queue "orders" already exists`)

	v := decode[queueView](t, b.run("queue", "show", "orders", "--json").ok(t))
	p := v.Properties
	if v.Name != "orders" || *p.LockDuration != "PT30S" || *p.MaxDeliveryCount != 5 || *p.DefaultMessageTimeToLive != "PT1H" ||
		!*p.DeadLetteringOnMessageExpiration || !*p.RequiresDuplicateDetection || *p.DuplicateDetectionHistoryTimeWindow != "PT10M" ||
		*p.MaxSizeInMegabytes != 2048 || *p.UserMetadata != "team=payments" || *p.Status != "Active" {
		t.Errorf("show: %+v", v)
	}
	if v.Runtime == nil || v.Runtime.ActiveMessageCount != 0 || v.Runtime.CreatedAt.IsZero() {
		t.Errorf("runtime: %+v", v.Runtime)
	}

	text := b.run("queue", "show", "orders").ok(t)
	for _, want := range []string{"Lock duration:", "30s", "Max delivery count:", "Dead-letter:", "Transfer dead-letter:", "Size:"} {
		if !strings.Contains(text, want) {
			t.Errorf("show text lacks %q:\n%s", want, text)
		}
	}

	b.run("queue", "update", "orders", "--max-delivery-count", "3", "--status", "sendDisabled", "--forward-to", "plain").ok(t)
	v = decode[queueView](t, b.run("queue", "show", "orders", "--json").ok(t))
	if *v.Properties.MaxDeliveryCount != 3 || *v.Properties.Status != "SendDisabled" || *v.Properties.LockDuration != "PT30S" ||
		v.Properties.ForwardTo == nil || *v.Properties.ForwardTo != "plain" {
		t.Errorf("after update: %+v", v.Properties)
	}
	b.run("queue", "update", "orders", "--forward-to", "", "--status", "Active").ok(t)
	v = decode[queueView](t, b.run("queue", "show", "orders", "--json").ok(t))
	if v.Properties.ForwardTo != nil || *v.Properties.Status != "Active" {
		t.Errorf("after clearing forward-to: %+v", v.Properties)
	}

	list := decode[[]queueView](t, b.run("queue", "list", "--json").ok(t))
	if len(list) != 2 || list[0].Name != "orders" || list[1].Name != "plain" || list[0].Runtime == nil {
		t.Errorf("list: %+v", list)
	}
	text = b.run("queue", "list").ok(t)
	if !strings.Contains(text, "NAME") || !strings.Contains(text, "orders") || !strings.Contains(text, "plain") {
		t.Errorf("list text:\n%s", text)
	}

	b.run("queue", "delete", "orders").ok(t)
	b.run("queue", "show", "orders").fails(t, ExitNotFound, `queue "orders" not found`)
	b.run("queue", "delete", "orders").fails(t, ExitNotFound, `queue "orders" not found`)
	b.run("queue", "delete", "orders", "--if-exists").ok(t)
	b.run("queue", "update", "orders", "--max-delivery-count", "3").fails(t, ExitNotFound, "not found")
	list = decode[[]queueView](t, b.run("queue", "list", "--json").ok(t))
	if len(list) != 1 {
		t.Errorf("list after delete: %+v", list)
	}
}

func TestQueueUsageErrors(t *testing.T) {
	b := startBroker(t, nil)
	for _, args := range [][]string{
		{"queue"},
		{"queue", "frobnicate"},
		{"queue", "create"},
		{"queue", "create", "a", "b"},
		{"queue", "create", "a", "--no-such-flag"},
		{"queue", "create", "a", "--lock-duration", "soon"},
		{"queue", "create", "a", "--status", "Paused"},
		{"queue", "create", "a", "--max-delivery-count", "0"},
		{"queue", "update", "a"},
		{"queue", "delete"},
		{"queue", "list", "extra"},
	} {
		r := b.run(args...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}
	// The broker's own validation is a failure, not a usage error.
	b.run("queue", "create", "a", "--lock-duration", "10m").fails(t, ExitFailure, "LockDuration")
}
