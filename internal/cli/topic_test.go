package cli

import (
	"strings"
	"testing"
)

func TestTopicLifecycle(t *testing.T) {
	b := startBroker(t, nil)

	out := b.run("topic", "create", "events", "--default-ttl", "7d", "--duplicate-detection", "--duplicate-window", "30m",
		"--max-size-mb", "2048", "--max-message-size-kb", "1024", "--auto-delete-on-idle", "1h", "--user-metadata", "team=orders").ok(t)
	if out != "created topic events\n" {
		t.Errorf("create output %q", out)
	}
	created := decode[topicView](t, b.run("topic", "create", "plain", "--json").ok(t))
	if created.Name != "plain" || *created.Properties.MaxSizeInMegabytes != 1024 || *created.Properties.Status != "Active" {
		t.Errorf("create --json: %+v", created)
	}
	b.run("topic", "create", "events").fails(t, ExitExists, `topic "events" already exists`)
	b.run("subscription", "create", "events", "s").ok(t)

	v := decode[topicView](t, b.run("topic", "show", "events", "--json").ok(t))
	p := v.Properties
	if v.Name != "events" || *p.DefaultMessageTimeToLive != "P7D" || !*p.RequiresDuplicateDetection ||
		*p.DuplicateDetectionHistoryTimeWindow != "PT30M" || *p.MaxSizeInMegabytes != 2048 || *p.MaxMessageSizeInKilobytes != 1024 ||
		*p.AutoDeleteOnIdle != "PT1H" || *p.UserMetadata != "team=orders" || *p.Status != "Active" {
		t.Errorf("show: %+v", p)
	}
	if v.Runtime == nil || v.Runtime.SubscriptionCount != 1 || v.Runtime.SQLFilterCount != 1 || v.Runtime.CreatedAt.IsZero() {
		t.Errorf("runtime: %+v", v.Runtime)
	}
	text := b.run("topic", "show", "events").ok(t)
	for _, want := range []string{"Default message TTL:", "7d", "Duplicate detection:", "true (window 30m)", "Subscriptions:", "Filters:", "1 SQL, 0 correlation"} {
		if !strings.Contains(text, want) {
			t.Errorf("show text lacks %q:\n%s", want, text)
		}
	}

	b.run("topic", "update", "events", "--status", "sendDisabled", "--default-ttl", "1d", "--user-metadata", "").ok(t)
	p = decode[topicView](t, b.run("topic", "show", "events", "--json").ok(t)).Properties
	if *p.Status != "SendDisabled" || *p.DefaultMessageTimeToLive != "P1D" || p.UserMetadata != nil ||
		*p.MaxSizeInMegabytes != 2048 || !*p.RequiresDuplicateDetection {
		t.Errorf("after update: %+v", p)
	}
	b.run("send", "events", "x").fails(t, ExitFailure, "events")
	b.run("topic", "update", "events", "--status", "Active", "--json").ok(t)

	list := decode[[]topicView](t, b.run("topic", "list", "--json").ok(t))
	if len(list) != 2 || list[0].Name != "events" || list[1].Name != "plain" || list[0].Runtime == nil || list[0].Runtime.SubscriptionCount != 1 {
		t.Errorf("list: %+v", list)
	}
	text = b.run("topic", "list").ok(t)
	if !strings.Contains(text, "SUBSCRIPTIONS") || !strings.Contains(text, "events") || !strings.Contains(text, "plain") {
		t.Errorf("list text:\n%s", text)
	}

	// Queues and topics share names, and the management URL: each command
	// sticks to its kind.
	b.run("queue", "create", "q").ok(t)
	b.run("topic", "create", "Q").fails(t, ExitExists, "already exists")
	b.run("topic", "show", "q").fails(t, ExitNotFound, `topic "q" not found`, "is a queue")
	b.run("topic", "update", "q", "--default-ttl", "1h").fails(t, ExitNotFound, "is a queue")
	b.run("topic", "delete", "q").fails(t, ExitNotFound, "is a queue")
	b.run("queue", "show", "events").fails(t, ExitNotFound, `queue "events" not found`, "is a topic")
	b.run("queue", "delete", "events").fails(t, ExitNotFound, "is a topic")
	if len(decode[[]queueView](t, b.run("queue", "list", "--json").ok(t))) != 1 || len(decode[[]topicView](t, b.run("topic", "list", "--json").ok(t))) != 2 {
		t.Error("a delete of the wrong kind deleted something")
	}

	res := decode[[]deleteResult](t, b.run("topic", "delete", "events", "missing", "--if-exists", "--json").ok(t))
	if len(res) != 2 || !res[0].Deleted || res[1].Deleted {
		t.Errorf("delete --json: %+v", res)
	}
	b.run("topic", "show", "events").fails(t, ExitNotFound, `topic "events" not found`)
	b.run("topic", "delete", "events").fails(t, ExitNotFound, `topic "events" not found`)
	b.run("subscription", "list", "events").fails(t, ExitNotFound, `topic "events" not found`)
	if out := b.run("topic", "delete", "plain").ok(t); out != "deleted topic plain\n" {
		t.Errorf("delete output %q", out)
	}
	if out := b.run("topic", "list", "--json").ok(t); out != "[]\n" {
		t.Errorf("list after delete: %s", out)
	}
}

func TestSubscriptionLifecycle(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "events").ok(t)
	b.run("queue", "create", "fwd").ok(t)

	if out := b.run("subscription", "create", "events", "all").ok(t); out != "created subscription events/Subscriptions/all\n" {
		t.Errorf("create output %q", out)
	}
	b.run("subscription", "create", "events", "eu", "--sql", "region = 'eu'", "--lock-duration", "30s", "--max-delivery-count", "3",
		"--default-ttl", "1h", "--dead-letter-on-expiration", "--dead-letter-on-filter-exceptions=false", "--auto-delete-on-idle", "2h",
		"--forward-dlq-to", "fwd", "--user-metadata", "europe").ok(t)
	b.run("subscription", "create", "events", "placed", "--correlation", "subject=order-placed,user.to=x,n=5",
		"--rule-name", "placed", "--action", "SET seen = TRUE", "--status", "ReceiveDisabled", "--json").ok(t)
	b.run("subscription", "create", "events", "eu").fails(t, ExitExists, `subscription "events/Subscriptions/eu" already exists`)
	b.run("subscription", "create", "nope", "s").fails(t, ExitNotFound, `topic "nope" not found`)

	v := decode[subscriptionView](t, b.run("subscription", "show", "events", "eu", "--json").ok(t))
	p := v.Properties
	if v.Topic != "events" || v.Name != "eu" || *p.LockDuration != "PT30S" || *p.MaxDeliveryCount != 3 || *p.DefaultMessageTimeToLive != "PT1H" ||
		!*p.DeadLetteringOnMessageExpiration || *p.DeadLetteringOnFilterEvaluationExceptions || *p.AutoDeleteOnIdle != "PT2H" ||
		*p.ForwardDeadLetteredMessagesTo != "fwd" || *p.UserMetadata != "europe" || *p.Status != "Active" {
		t.Errorf("show eu: %+v", p)
	}
	if len(v.Rules) != 1 || v.Rules[0].Name != "$Default" || v.Rules[0].Filter.Type != "SqlFilter" || *v.Rules[0].Filter.SQLExpression != "region = 'eu'" {
		t.Errorf("eu rules: %+v", v.Rules)
	}
	if v.Runtime == nil || v.Runtime.ActiveMessageCount != 0 || v.Runtime.CreatedAt.IsZero() {
		t.Errorf("eu runtime: %+v", v.Runtime)
	}
	v = decode[subscriptionView](t, b.run("subscription", "show", "events", "all", "--json").ok(t))
	if len(v.Rules) != 1 || v.Rules[0].Name != "$Default" || v.Rules[0].Filter.Type != "TrueFilter" || v.Rules[0].Action != nil {
		t.Errorf("all rules: %+v", v.Rules)
	}
	v = decode[subscriptionView](t, b.run("subscription", "show", "events", "placed", "--json").ok(t))
	if r := v.Rules; len(r) != 1 || r[0].Name != "placed" || r[0].Filter.Type != "CorrelationFilter" || *r[0].Filter.Subject != "order-placed" ||
		r[0].Filter.Properties["to"] != "x" || r[0].Filter.Properties["n"] != 5.0 || r[0].Action == nil || r[0].Action.SQLExpression != "SET seen = TRUE" {
		t.Errorf("placed rules: %+v", r)
	}
	if *v.Properties.Status != "ReceiveDisabled" {
		t.Errorf("placed status: %v", *v.Properties.Status)
	}
	// An update keeps the status.
	b.run("subscription", "update", "events", "placed", "--max-delivery-count", "4").ok(t)
	if p := decode[subscriptionView](t, b.run("subscription", "show", "events", "placed", "--json").ok(t)).Properties; *p.Status != "ReceiveDisabled" || *p.MaxDeliveryCount != 4 {
		t.Errorf("placed after update: %+v", p)
	}
	text := b.run("subscription", "show", "events", "placed").ok(t)
	for _, want := range []string{"Lock duration:", "Dead-letter on filter exceptions:", "Transfer dead-letter:", "RULE", "placed", "Correlation: subject=order-placed, n=5, user.to=x", "SET seen = TRUE"} {
		if !strings.Contains(text, want) {
			t.Errorf("show text lacks %q:\n%s", want, text)
		}
	}

	b.run("subscription", "update", "events", "eu", "--max-delivery-count", "7", "--status", "ReceiveDisabled", "--forward-to", "fwd", "--forward-dlq-to", "").ok(t)
	p = decode[subscriptionView](t, b.run("subscription", "show", "events", "eu", "--json").ok(t)).Properties
	if *p.MaxDeliveryCount != 7 || *p.Status != "ReceiveDisabled" || *p.ForwardTo != "fwd" || p.ForwardDeadLetteredMessagesTo != nil || *p.LockDuration != "PT30S" {
		t.Errorf("after update: %+v", p)
	}
	b.run("subscription", "update", "events", "eu", "--forward-to", "", "--status", "Active", "--json").ok(t)
	p = decode[subscriptionView](t, b.run("subscription", "show", "events", "eu", "--json").ok(t)).Properties
	if p.ForwardTo != nil || *p.Status != "Active" {
		t.Errorf("after clearing forward-to: %+v", p)
	}
	b.run("subscription", "update", "events", "nope", "--max-delivery-count", "3").fails(t, ExitNotFound, `subscription "events/Subscriptions/nope" not found`)
	b.run("subscription", "update", "nope", "eu", "--max-delivery-count", "3").fails(t, ExitNotFound, `topic "nope" not found`)

	list := decode[[]subscriptionView](t, b.run("subscription", "list", "events", "--json").ok(t))
	if len(list) != 3 || list[0].Name != "all" || list[1].Name != "eu" || list[2].Name != "placed" || list[1].Runtime == nil || list[1].Rules != nil {
		t.Errorf("list: %+v", list)
	}
	text = b.run("subscription", "list", "events").ok(t)
	if !strings.Contains(text, "DEAD-LETTER") || !strings.Contains(text, "placed") {
		t.Errorf("list text:\n%s", text)
	}

	if out := b.run("subscription", "delete", "events", "all").ok(t); out != "deleted subscription events/Subscriptions/all\n" {
		t.Errorf("delete output %q", out)
	}
	b.run("subscription", "show", "events", "all").fails(t, ExitNotFound, `subscription "events/Subscriptions/all" not found`)
	b.run("subscription", "delete", "events", "all").fails(t, ExitNotFound, `subscription "events/Subscriptions/all" not found`)
	b.run("subscription", "delete", "events", "all", "eu", "--if-exists").ok(t)
	b.run("subscription", "delete", "nope", "eu").fails(t, ExitNotFound, `topic "nope" not found`)
	if list := decode[[]subscriptionView](t, b.run("subscription", "list", "events", "--json").ok(t)); len(list) != 1 {
		t.Errorf("list after delete: %+v", list)
	}
}

func TestRuleLifecycle(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "events").ok(t)
	b.run("subscription", "create", "events", "s").ok(t)

	if out := b.run("rule", "create", "events", "s", "eu", "--sql", "region = 'eu'", "--action", "SET routed = 'eu'").ok(t); out != "created rule eu of events/Subscriptions/s\n" {
		t.Errorf("create output %q", out)
	}
	r := decode[ruleView](t, b.run("rule", "create", "events", "s", "corr", "--correlation-id", "c1", "--message-id", "m1", "--to", "t1",
		"--reply-to", "r1", "--subject", "s1", "--session-id", "x1", "--reply-to-session-id", "y1", "--content-type", "application/json",
		"-p", "color=red", "-p", "n=5", "-p", "ok=true", "-p", "w:double=1.5", "--json").ok(t))
	f := r.Filter
	if r.Name != "corr" || f.Type != "CorrelationFilter" || *f.CorrelationID != "c1" || *f.MessageID != "m1" || *f.To != "t1" || *f.ReplyTo != "r1" ||
		*f.Subject != "s1" || *f.SessionID != "x1" || *f.ReplyToSessionID != "y1" || *f.ContentType != "application/json" ||
		f.Properties["color"] != "red" || f.Properties["n"] != 5.0 || f.Properties["ok"] != true || f.Properties["w"] != 1.5 {
		t.Errorf("correlation rule: %+v", r)
	}
	b.run("rule", "create", "events", "s", "pairs", "--correlation", "sys.Label=s2,CorrelationId=c2,size=large", "--correlation", "user.subject=x").ok(t)
	b.run("rule", "create", "events", "s", "all", "--true").ok(t)
	b.run("rule", "create", "events", "s", "none", "--false").ok(t)

	rules := decode[[]ruleView](t, b.run("rule", "list", "events", "s", "--json").ok(t))
	var names []string
	for _, r := range rules {
		names = append(names, r.Name+":"+r.Filter.Type)
	}
	if strings.Join(names, " ") != "$Default:TrueFilter all:TrueFilter corr:CorrelationFilter eu:SqlFilter none:FalseFilter pairs:CorrelationFilter" {
		t.Errorf("rules: %v", names)
	}
	if p := rules[5].Filter; *p.Subject != "s2" || *p.CorrelationID != "c2" || p.Properties["size"] != "large" || p.Properties["subject"] != "x" {
		t.Errorf("pairs: %+v", p)
	}
	text := b.run("rule", "list", "events", "s").ok(t)
	for _, want := range []string{"RULE", "FILTER", "ACTION", "SQL: region = 'eu'", "SET routed = 'eu'", "True (every message)", "False (no message)",
		"Correlation: correlationId=c2, subject=s2, size=large, user.subject=x"} {
		if !strings.Contains(text, want) {
			t.Errorf("list text lacks %q:\n%s", want, text)
		}
	}
	text = b.run("rule", "show", "events", "s", "eu").ok(t) + b.run("rule", "show", "events", "s", "corr").ok(t)
	for _, want := range []string{"Filter:", "SqlFilter", "SQL expression:", "region = 'eu'", "Action:", "SET routed = 'eu'",
		"CorrelationFilter", "replyToSessionId:", "y1", "n:", "w:", "1.5"} {
		if !strings.Contains(text, want) {
			t.Errorf("show text lacks %q:\n%s", want, text)
		}
	}

	// update: the filter alone keeps the action; --action '' drops it.
	b.run("rule", "update", "events", "s", "eu", "--sql", "region IN ('eu', 'uk')").ok(t)
	r = decode[ruleView](t, b.run("rule", "show", "events", "s", "eu", "--json").ok(t))
	if *r.Filter.SQLExpression != "region IN ('eu', 'uk')" || r.Action == nil || r.Action.SQLExpression != "SET routed = 'eu'" {
		t.Errorf("after filter update: %+v", r)
	}
	b.run("rule", "update", "events", "s", "eu", "--action", "").ok(t)
	r = decode[ruleView](t, b.run("rule", "show", "events", "s", "eu", "--json").ok(t))
	if r.Action != nil || *r.Filter.SQLExpression != "region IN ('eu', 'uk')" {
		t.Errorf("after removing the action: %+v", r)
	}
	r = decode[ruleView](t, b.run("rule", "update", "events", "s", "none", "--subject", "x", "--action", "SET y = 1", "--json").ok(t))
	if r.Filter.Type != "CorrelationFilter" || *r.Filter.Subject != "x" || r.Action.SQLExpression != "SET y = 1" {
		t.Errorf("update to a correlation filter: %+v", r)
	}

	// Errors.
	b.run("rule", "create", "events", "s", "eu", "--true").fails(t, ExitExists, `rule "eu" of subscription "events/Subscriptions/s" already exists`)
	b.run("rule", "create", "events", "s", "bad", "--sql", "a = = 1").fails(t, ExitFailure, "bad")
	b.run("rule", "create", "events", "nope", "r", "--true").fails(t, ExitNotFound, `subscription "events/Subscriptions/nope" not found`)
	b.run("rule", "create", "nope", "s", "r", "--true").fails(t, ExitNotFound, `topic "nope" not found`)
	b.run("rule", "show", "events", "s", "nope").fails(t, ExitNotFound, `rule "nope" of subscription "events/Subscriptions/s" not found`)
	b.run("rule", "list", "events", "nope").fails(t, ExitNotFound, `subscription "events/Subscriptions/nope" not found`)
	b.run("rule", "update", "events", "s", "nope", "--true").fails(t, ExitNotFound, `rule "nope"`)

	// delete.
	if out := b.run("rule", "delete", "events", "s", "$Default", "all").ok(t); out != "deleted rule $Default of events/Subscriptions/s\ndeleted rule all of events/Subscriptions/s\n" {
		t.Errorf("delete output %q", out)
	}
	b.run("rule", "delete", "events", "s", "all").fails(t, ExitNotFound, `rule "all" of subscription "events/Subscriptions/s" not found`)
	b.run("rule", "delete", "events", "s", "all", "--if-exists").ok(t)
	b.run("rule", "delete", "events", "nope", "all", "--if-exists").fails(t, ExitNotFound, `subscription "events/Subscriptions/nope" not found`)
	if rules := decode[[]ruleView](t, b.run("rule", "list", "events", "s", "--json").ok(t)); len(rules) != 4 {
		t.Errorf("rules after delete: %+v", rules)
	}
	b.run("rule", "delete", "events", "s", "corr", "eu", "none", "pairs").ok(t)
	if out := b.run("subscription", "show", "events", "s").ok(t); !strings.Contains(out, "No rules: the subscription receives no messages.") {
		t.Errorf("show without rules:\n%s", out)
	}
	if out := b.run("rule", "list", "events", "s", "--json").ok(t); out != "[]\n" {
		t.Errorf("empty list: %q", out)
	}
}

func TestTopicUsageErrors(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "events").ok(t)
	b.run("subscription", "create", "events", "s").ok(t)
	for _, args := range [][]string{
		{"topic"},
		{"topic", "frobnicate"},
		{"topic", "create"},
		{"topic", "create", "a", "b"},
		{"topic", "create", "a", "--default-ttl", "soon"},
		{"topic", "create", "a", "--status", "Paused"},
		{"topic", "create", "a", "--max-size-mb", "0"},
		{"topic", "create", "a", "--lock-duration", "1m"},
		{"topic", "update", "events"},
		{"topic", "update", "events", "--duplicate-detection"},
		{"topic", "delete"},
		{"topic", "list", "x"},
		{"subscription"},
		{"subscription", "create", "events"},
		{"subscription", "create", "events", "s2", "--max-delivery-count", "0"},
		{"subscription", "create", "events", "s2", "--sql", "a = 1", "--correlation", "subject=x"},
		{"subscription", "create", "events", "s2", "--sql", ""},
		{"subscription", "create", "events", "s2", "--correlation", "novalue"},
		{"subscription", "create", "events", "s2", "--correlation", "subject=a,label=b"},
		{"subscription", "create", "events", "s2", "--rule-name", ""},
		{"subscription", "create", "events", "s2", "--true"},
		{"subscription", "update", "events", "s"},
		{"subscription", "update", "events", "s", "--requires-session"},
		{"subscription", "list"},
		{"subscription", "delete", "events"},
		{"rule"},
		{"rule", "create", "events", "s"},
		{"rule", "create", "events", "s", "r"},
		{"rule", "create", "events", "s", "r", "--true", "--false"},
		{"rule", "create", "events", "s", "r", "--sql", "a = 1", "--subject", "x"},
		{"rule", "create", "events", "s", "r", "-p", "novalue"},
		{"rule", "create", "events", "s", "r", "-p", "n=10000000000"},
		{"rule", "create", "events", "s", "r", "-p", "w:double=0.0000001"},
		{"rule", "create", "events", "s", "r", "--subject", "x", "--correlation", "subject=y"},
		{"rule", "update", "events", "s", "$Default"},
		{"rule", "list", "events"},
		{"rule", "show", "events", "s"},
		{"rule", "delete", "events", "s"},
	} {
		if r := b.run(args...); r.code != ExitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}
	// Nothing was created by the failed commands.
	if list := decode[[]subscriptionView](t, b.run("subscription", "list", "events", "--json").ok(t)); len(list) != 1 {
		t.Errorf("subscriptions: %+v", list)
	}
}

func TestTopicHelp(t *testing.T) {
	b := startBroker(t, nil)
	for _, args := range [][]string{
		{"topic", "create", "--help"},
		{"subscription", "create", "--help"},
		{"rule", "create", "--help"},
		{"rule", "update", "--help"},
		{"peek", "--help"},
		{"dlq", "resubmit", "--help"},
		{"export", "--help"},
	} {
		out := b.run(args...).ok(t)
		for _, want := range []string{"Examples:", "Exit codes:"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v lacks %q:\n%s", args, want, out)
			}
		}
	}
}
