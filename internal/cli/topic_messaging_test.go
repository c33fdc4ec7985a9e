package cli

import (
	"fmt"
	"strings"
	"testing"
)

// subCounts is subscription show's runtime counts.
func (b *testBroker) subCounts(topic, sub string) subscriptionRuntime {
	b.t.Helper()
	v := decode[subscriptionView](b.t, b.run("subscription", "show", topic, sub, "--json").ok(b.t))
	return *v.Runtime
}

func bodies(msgs []jsonMessage) string {
	var out []string
	for _, m := range msgs {
		out = append(out, bodyText(m))
	}
	return strings.Join(out, ",")
}

func TestTopicFanOut(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "events").ok(t)
	b.run("subscription", "create", "events", "eu", "--sql", "region = 'eu'").ok(t)
	b.run("subscription", "create", "events", "placed", "--correlation", "subject=order-placed").ok(t)
	b.run("subscription", "create", "events", "all").ok(t)
	// A second rule with an action: messages of big orders reach "placed"
	// twice, once marked.
	b.run("rule", "create", "events", "placed", "big", "--sql", "total > 100", "--action", "SET big = TRUE").ok(t)

	if out := b.run("send", "events", "m1", "--subject", "order-placed", "-p", "region=eu", "-p", "total=50").ok(t); out != "sent 1 message to events\n" {
		t.Errorf("send output %q", out)
	}
	b.run("send", "events", "m2", "--subject", "order-shipped", "-p", "region=us").ok(t)
	jsonl := `{"body": "m3", "subject": "order-placed", "properties": {"region": "us", "total": 500}}
{"body": "m4", "properties": {"region": "eu"}}
`
	res := decode[sendResult](t, b.runIn(jsonl, "send", "events", "--jsonl", "-", "--json").ok(t))
	if res.Sent != 2 || res.Entity != "events" {
		t.Errorf("send --jsonl: %+v", res)
	}

	eu := decode[[]jsonMessage](t, b.run("peek", "events", "--subscription", "eu", "--json").ok(t))
	if bodies(eu) != "m1,m4" {
		t.Errorf("eu holds %s, want m1,m4", bodies(eu))
	}
	placed := decode[[]jsonMessage](t, b.run("peek", "events/Subscriptions/placed", "--json").ok(t))
	if bodies(placed) != "m1,m3,m3" {
		t.Errorf("placed holds %s, want m1,m3,m3", bodies(placed))
	}
	marked := 0
	for _, m := range placed {
		if m.Properties["big"] == true {
			marked++
			if bodyText(m) != "m3" || m.Properties["RuleName"] != "big" {
				t.Errorf("marked copy: %+v", m)
			}
		}
	}
	if marked != 1 {
		t.Errorf("%d marked copies, want 1", marked)
	}
	if all := decode[[]jsonMessage](t, b.run("peek", "events", "-s", "all", "--json").ok(t)); bodies(all) != "m1,m2,m3,m4" {
		t.Errorf("all holds %s", bodies(all))
	}
	if text := b.run("peek", "events", "--subscription", "eu").ok(t); !strings.Contains(text, "m4") || !strings.Contains(text, "region=eu") {
		t.Errorf("peek table:\n%s", text)
	}

	// Receiving from one subscription leaves the others alone.
	got := decode[[]jsonMessage](t, b.run("receive", "events", "--subscription", "eu", "--count", "5", "--wait", "300ms", "--json").ok(t))
	if bodies(got) != "m1,m4" || got[0].Settled != "completed" {
		t.Errorf("receive eu: %+v", got)
	}
	if c := b.subCounts("events", "eu"); c.ActiveMessageCount != 0 {
		t.Errorf("eu after receive: %+v", c)
	}
	if c := b.subCounts("events", "placed"); c.ActiveMessageCount != 3 {
		t.Errorf("placed after receiving from eu: %+v", c)
	}
	// Settlements work on subscriptions: dead-letter, defer, then receive
	// the deferred message by sequence number.
	got = decode[[]jsonMessage](t, b.run("receive", "events/Subscriptions/placed", "--settle", "deadletter", "--reason", "Poison", "--json").ok(t))
	if bodies(got) != "m1" {
		t.Errorf("dead-lettered %s", bodies(got))
	}
	got = decode[[]jsonMessage](t, b.run("receive", "events", "-s", "placed", "--settle", "defer", "--json").ok(t))
	if len(got) != 1 {
		t.Fatalf("deferred %+v", got)
	}
	seq := fmt.Sprint(*got[0].SequenceNumber)
	got = decode[[]jsonMessage](t, b.run("receive", "events", "-s", "placed", "--deferred", seq, "--json").ok(t))
	if len(got) != 1 || bodyText(got[0]) != "m3" || got[0].Settled != "completed" {
		t.Errorf("receive --deferred: %+v", got)
	}
	dlq := decode[[]jsonMessage](t, b.run("peek", "events", "-s", "placed", "--dlq", "--json").ok(t))
	if len(dlq) != 1 || bodyText(dlq[0]) != "m1" || *dlq[0].DeadLetterReason != "Poison" {
		t.Errorf("placed DLQ: %+v", dlq)
	}

	// purge: one subscription only.
	if out := b.run("purge", "events", "--subscription", "all").ok(t); out != "purged 4 messages from events/Subscriptions/all\n" {
		t.Errorf("purge: %q", out)
	}
	pres := decode[map[string]any](t, b.run("purge", "events/Subscriptions/placed", "--dlq", "--json").ok(t))
	if pres["purged"] != 1.0 || pres["entity"] != "events/Subscriptions/placed/$DeadLetterQueue" {
		t.Errorf("purge --dlq: %v", pres)
	}
	if c := b.subCounts("events", "placed"); c.ActiveMessageCount != 1 || c.DeadLetterMessageCount != 0 {
		t.Errorf("placed after purging all: %+v", c)
	}

	// The entity argument, and what is not there.
	b.run("receive", "events", "--wait", "300ms").fails(t, ExitFailure, "is a topic", "--subscription")
	b.run("peek", "events").fails(t, ExitFailure, "is a topic")
	b.run("peek", "events", "-s", "nope").fails(t, ExitNotFound, `subscription "events/Subscriptions/nope" not found`)
	b.run("receive", "nope/Subscriptions/x", "--wait", "300ms").fails(t, ExitNotFound, `subscription "nope/Subscriptions/x" not found`)
	b.run("purge", "events", "-s", "nope").fails(t, ExitNotFound, "not found")
	for _, args := range [][]string{
		{"peek", "events/Subscriptions/eu", "--subscription", "eu"},
		{"peek", "events", "--subscription", ""},
		{"peek", "events/Subscriptions/"},
		{"peek", "events/Subscriptions/eu/x"},
		{"peek", "Subscriptions/eu"},
		{"receive", "events/Subscriptions/eu/$DeadLetterQueue"},
		{"purge", "q/$DeadLetterQueue"},
		{"send", "events", "x", "--subscription", "eu"},
	} {
		if r := b.run(args...); r.code != ExitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}
}

func TestSubscriptionDLQResubmit(t *testing.T) {
	b := startBroker(t, nil)
	b.run("topic", "create", "events").ok(t)
	b.run("subscription", "create", "events", "a").ok(t)
	b.run("subscription", "create", "events", "b").ok(t)
	b.run("queue", "create", "retry").ok(t)
	for i := 1; i <= 4; i++ {
		b.run("send", "events", fmt.Sprintf("m%d", i), "-p", fmt.Sprintf("n=%d", i)).ok(t)
	}
	b.run("receive", "events", "-s", "a", "--count", "4", "--settle", "deadletter", "--reason", "Poison").ok(t)
	b.run("receive", "events", "-s", "b", "--count", "4").ok(t) // b processed them all
	if c := b.subCounts("events", "a"); c.DeadLetterMessageCount != 4 {
		t.Fatalf("a: %+v", c)
	}

	// Without --to: refused, with the reason.
	b.run("dlq", "resubmit", "events", "--subscription", "a").fails(t, ExitUsage, "needs --to", "every subscription", "--to events")
	b.run("dlq", "resubmit", "events", "-s", "a", "--to", "events/Subscriptions/a").fails(t, ExitUsage, "cannot be sent to")

	// To a queue: only the selected messages, and b is untouched.
	res := decode[resubmitResult](t, b.run("dlq", "resubmit", "events", "-s", "a", "--to", "retry", "--filter", "n <= 2", "--wait", "300ms", "--json").ok(t))
	if res.Resubmitted != 2 || res.Skipped != 2 || res.From != "events/Subscriptions/a/$DeadLetterQueue" || res.To != "retry" {
		t.Errorf("to retry: %+v", res)
	}
	if got := decode[[]jsonMessage](t, b.run("peek", "retry", "--json").ok(t)); bodies(got) != "m1,m2" || got[0].DeadLetterReason != nil {
		t.Errorf("retry holds %+v", got)
	}
	if c := b.subCounts("events", "b"); c.TotalMessageCount != 0 {
		t.Errorf("b got messages: %+v", c)
	}

	// To the topic, explicitly: every subscription gets them again.
	out := b.run("dlq", "resubmit", "events/Subscriptions/a", "--to", "events", "--wait", "300ms").ok(t)
	if out != "resubmitted 2 messages from events/Subscriptions/a/$DeadLetterQueue to events\n" {
		t.Errorf("to the topic: %q", out)
	}
	if got := decode[[]jsonMessage](t, b.run("peek", "events", "-s", "a", "--json").ok(t)); bodies(got) != "m3,m4" {
		t.Errorf("a holds %s", bodies(got))
	}
	if got := decode[[]jsonMessage](t, b.run("peek", "events", "-s", "b", "--json").ok(t)); bodies(got) != "m3,m4" {
		t.Errorf("b holds %s", bodies(got))
	}
	if c := b.subCounts("events", "a"); c.DeadLetterMessageCount != 0 {
		t.Errorf("a after resubmit: %+v", c)
	}

	// A topic target's duplicate detection holds back what it would drop.
	b.run("topic", "create", "dedup", "--duplicate-detection").ok(t)
	b.run("subscription", "create", "dedup", "s").ok(t)
	b.run("send", "dedup", "d1", "--message-id", "d1").ok(t)
	b.run("receive", "dedup", "-s", "s", "--settle", "deadletter").ok(t)
	res = decode[resubmitResult](t, b.run("dlq", "resubmit", "dedup", "-s", "s", "--to", "dedup", "--wait", "300ms", "--json").ok(t))
	if res.Resubmitted != 0 || res.HeldBack != 1 {
		t.Errorf("dedup: %+v", res)
	}

	b.run("dlq", "resubmit", "events", "-s", "nope", "--to", "retry", "--wait", "300ms").fails(t, ExitNotFound, `subscription "events/Subscriptions/nope" not found`)
	b.run("dlq", "resubmit", "events", "-s", "a", "--to", "nope").fails(t, ExitNotFound, `queue or topic "nope" not found`)
	b.run("dlq", "resubmit", "events").fails(t, ExitNotFound, `queue "events" not found`, "is a topic")
}
