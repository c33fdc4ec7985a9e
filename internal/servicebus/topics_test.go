package servicebus_test

// Topics, subscriptions and rules with the official Go SDK (azservicebus
// v1.11.0): sends to a topic, receives from its subscriptions and their
// dead-letter queues. Subscriptions and rules are created through the
// broker API (the Go SDK has no rule manager; rules over AMQP are tested
// on the wire in rules_wire_test.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

func newSubReceiver(t *testing.T, c *azservicebus.Client, topic, sub string, opts *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	r, err := c.NewReceiverForSubscription(topic, sub, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

// subCounts returns a subscription's counts; sends fan out synchronously,
// so they are final once SendMessage returned.
func subCounts(t *testing.T, s *servicebustest.Server, topic, sub string) broker.Counts {
	t.Helper()
	si, err := s.Broker.GetSubscription(topic, sub)
	if err != nil {
		t.Fatalf("GetSubscription(%s, %s): %v", topic, sub, err)
	}
	return si.Counts
}

// drainSub receives every active message of a subscription (its count
// says how many) in receive-and-delete mode and returns them.
func drainSub(t *testing.T, ctx context.Context, s *servicebustest.Server, c *azservicebus.Client, topic, sub string) []*azservicebus.ReceivedMessage {
	t.Helper()
	n := subCounts(t, s, topic, sub).Active
	if n == 0 {
		return nil
	}
	r := newSubReceiver(t, c, topic, sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	return receiveN(t, ctx, r, int(n))
}

func bodies(ms []*azservicebus.ReceivedMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	slices.Sort(out)
	return out
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func sqlRule(name, expr string) *broker.RuleDescription {
	return &broker.RuleDescription{Name: name, Filter: broker.SQLRuleFilter(expr, nil)}
}

func TestTopicFanOut(t *testing.T) {
	subs := []string{"s1", "s2", "S3"}
	opts := &servicebustest.Options{Topics: []string{"orders"}}
	for _, name := range subs {
		opts.Subscriptions = append(opts.Subscriptions, servicebustest.Subscription{Topic: "orders", Name: name})
	}
	s := servicebustest.Start(t, opts)
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)

	snd := newSender(t, c, "Orders") // names are case-insensitive
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("one"), MessageID: ptr("m1"), Subject: ptr("subj"),
		ApplicationProperties: map[string]any{"i": int32(7), "s": "v"}})
	batch, err := snd.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"two", "three"} {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(b)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatalf("SendMessageBatch to a topic: %v", err)
	}

	for _, name := range subs {
		r := newSubReceiver(t, c, "orders", strings.ToLower(name), nil)
		ms := receiveN(t, ctx, r, 3)
		if got := bodies(ms); !slices.Equal(got, []string{"one", "three", "two"}) {
			t.Fatalf("subscription %s received %v", name, got)
		}
		for _, m := range ms {
			if string(m.Body) == "one" && (m.MessageID != "m1" || *m.Subject != "subj" || m.ApplicationProperties["i"] != int32(7) ||
				m.ApplicationProperties["s"] != "v") {
				t.Errorf("subscription %s: message %+v", name, m)
			}
			if m.SequenceNumber == nil || m.LockedUntil == nil || m.DeliveryCount != 1 {
				t.Errorf("subscription %s: seq %v locked %v count %d", name, m.SequenceNumber, m.LockedUntil, m.DeliveryCount)
			}
			if _, ok := m.ApplicationProperties["RuleName"]; ok {
				t.Errorf("a copy routed by $Default (no action) carries RuleName")
			}
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("CompleteMessage on subscription %s: %v", name, err)
			}
		}
		if n := subCounts(t, s, "orders", name); n.Total != 0 {
			t.Fatalf("subscription %s holds %d messages after completing", name, n.Total)
		}
	}
}

// TestTopicSQLRouting: each subscription's only rule is one SQL filter;
// one family of operators per subscription.
func TestTopicSQLRouting(t *testing.T) {
	filters := []struct {
		sub, expr string
		want      []string
	}{
		{"cmp", "n > 5 AND n <= 10", []string{"m2", "m3"}},
		{"neq", "color <> 'red'", []string{"m2", "m3"}},
		{"cmpfloat", "price >= 2.5", []string{"m1"}},
		{"arith", "n * 2 + 1 = 7", []string{"m1"}},
		{"arithmod", "n % 3 = 1 AND n - 7 = 0", []string{"m3"}},
		{"arithdiv", "n / 2 = 5 OR -n = -3", []string{"m1", "m2"}},
		{"like", "sys.Label LIKE 'order.%'", []string{"m1", "m2"}},
		{"likeone", "name LIKE 'a_c'", []string{"m1", "m2"}},
		{"likeesc", "name LIKE 'a!_c' ESCAPE '!'", []string{"m2"}},
		{"notlike", "name NOT LIKE 'a%'", []string{"m3"}},
		{"in", "color IN ('red', 'green')", []string{"m1", "m3"}},
		{"notin", "color NOT IN ('red', 'green')", []string{"m2"}},
		{"isnull", "color IS NULL", []string{"m4"}},
		{"isnotnull", "extra IS NOT NULL", []string{"m2"}},
		{"exists", "EXISTS(extra)", []string{"m2"}},
		{"notexists", "NOT EXISTS(color)", []string{"m4"}},
		{"logic", "(color = 'red' OR color = 'blue') AND NOT (n > 5)", []string{"m1"}},
		{"bool", "extra = TRUE OR user.[odd name] = 'x'", []string{"m2", "m3"}},
		{"sys", "sys.MessageId = 'special-id' AND sys.CorrelationId = 'corr-1' AND sys.To = 'dest' AND sys.ContentType = 'application/json'", []string{"m4"}},
		{"none", "1=0", nil},
		{"all", "1=1", []string{"m1", "m2", "m3", "m4"}},
	}
	opts := &servicebustest.Options{Topics: []string{"t"}}
	for _, f := range filters {
		opts.Subscriptions = append(opts.Subscriptions, servicebustest.Subscription{Topic: "t", Name: f.sub, DefaultRule: sqlRule("f", f.expr)})
	}
	// A parameterised filter (parameters come only from the broker API).
	opts.Subscriptions = append(opts.Subscriptions, servicebustest.Subscription{Topic: "t", Name: "param",
		DefaultRule: &broker.RuleDescription{Name: "p", Filter: broker.SQLRuleFilter("color = @c", map[string]any{"@c": "blue"})}})
	s := servicebustest.Start(t, opts)
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)

	send(t, ctx, newSender(t, c, "t"),
		&azservicebus.Message{Body: []byte("m1"), Subject: ptr("order.created"),
			ApplicationProperties: map[string]any{"n": int64(3), "color": "red", "price": 2.5, "name": "abc"}},
		&azservicebus.Message{Body: []byte("m2"), Subject: ptr("order.deleted"),
			ApplicationProperties: map[string]any{"n": int64(10), "color": "blue", "name": "a_c", "extra": true}},
		&azservicebus.Message{Body: []byte("m3"), Subject: ptr("invoice"),
			ApplicationProperties: map[string]any{"n": int32(7), "color": "green", "name": "xyz", "odd name": "x"}},
		&azservicebus.Message{Body: []byte("m4"), Subject: ptr("ping"), MessageID: ptr("special-id"), CorrelationID: ptr("corr-1"),
			To: ptr("dest"), ContentType: ptr("application/json")},
	)
	filters = append(filters, struct {
		sub, expr string
		want      []string
	}{"param", "color = @c", []string{"m2"}})
	for _, f := range filters {
		if n := subCounts(t, s, "t", f.sub); n.DeadLetter != 0 {
			t.Errorf("%s (%s): %d messages dead-lettered (a filter evaluation failed)", f.sub, f.expr, n.DeadLetter)
		}
		got := bodies(drainSub(t, ctx, s, c, "t", f.sub))
		if !slices.Equal(got, f.want) && len(got)+len(f.want) > 0 {
			t.Errorf("%s (%s) received %v; want %v", f.sub, f.expr, got, f.want)
		}
	}
}

// TestTopicCorrelationRouting: correlation filters on system fields and on
// typed user properties (integers compare numerically across widths, a
// string never equals a number, strings are case-sensitive).
func TestTopicCorrelationRouting(t *testing.T) {
	sysFilter := broker.CorrelationFilter{CorrelationID: "c1", MessageID: "mid", To: "to1", ReplyTo: "rt", Label: "lbl",
		ReplyToSessionID: "rts", ContentType: "ct"}
	propFilter := broker.CorrelationFilter{Properties: map[string]any{"n": int64(2), "kind": "a", "flag": true}}
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{
		{Topic: "t", Name: "sys", DefaultRule: &broker.RuleDescription{Name: "c", Filter: broker.CorrelationRuleFilter(sysFilter)}},
		{Topic: "t", Name: "props", DefaultRule: &broker.RuleDescription{Name: "c", Filter: broker.CorrelationRuleFilter(propFilter)}},
		{Topic: "t", Name: "label", DefaultRule: &broker.RuleDescription{Name: "c", Filter: broker.CorrelationRuleFilter(broker.CorrelationFilter{Label: "lbl"})}},
	}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)

	sysMsg := func(body string) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(body), CorrelationID: ptr("c1"), MessageID: ptr("mid"), To: ptr("to1"),
			ReplyTo: ptr("rt"), Subject: ptr("lbl"), ReplyToSessionID: ptr("rts"), ContentType: ptr("ct")}
	}
	almost := sysMsg("sys-almost")
	almost.ContentType = ptr("CT") // case-sensitive
	props := func(body string, p map[string]any) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(body), ApplicationProperties: p}
	}
	send(t, ctx, newSender(t, c, "t"),
		sysMsg("sys-all"), almost,
		props("p-int32", map[string]any{"n": int32(2), "kind": "a", "flag": true}),
		props("p-double", map[string]any{"n": 2.0, "kind": "a", "flag": true}),
		props("p-string", map[string]any{"n": "2", "kind": "a", "flag": true}),
		props("p-case", map[string]any{"n": int64(2), "kind": "A", "flag": true}),
		props("p-missing", map[string]any{"n": int64(2), "kind": "a"}),
		props("p-extra", map[string]any{"n": int64(2), "kind": "a", "flag": true, "other": "x"}),
	)
	for sub, want := range map[string][]string{
		"sys":   {"sys-all"},
		"props": {"p-double", "p-extra", "p-int32"},
		"label": {"sys-all", "sys-almost"},
	} {
		if got := bodies(drainSub(t, ctx, s, c, "t", sub)); !slices.Equal(got, want) {
			t.Errorf("%s received %v; want %v", sub, got, want)
		}
	}
}

// TestTopicRuleActions: an action's SET and REMOVE are visible to the
// receiver on the copy its rule delivers, with RuleName; $Default keeps
// matching after another rule is added (a second, unchanged copy); two
// matching rules with actions deliver two copies.
func TestTopicRuleActions(t *testing.T) {
	vip := broker.RuleDescription{Name: "vip", Filter: broker.SQLRuleFilter("tier = 'gold'", nil),
		Action: &broker.SQLAction{Expression: "SET tag = 'vip'; SET n = n * 10; REMOVE secret; SET sys.Label = 'upgraded'"}}
	ruleA := broker.RuleDescription{Name: "A", Filter: broker.SQLRuleFilter("EXISTS(tier)", nil), Action: &broker.SQLAction{Expression: "SET via = 'A'"}}
	ruleB := broker.RuleDescription{Name: "B", Filter: broker.SQLRuleFilter("tier = 'gold'", nil), Action: &broker.SQLAction{Expression: "SET via = 'B'"}}
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{
		{Topic: "t", Name: "withdefault", Rules: []broker.RuleDescription{vip}},
		{Topic: "t", Name: "twoactions", DefaultRule: &ruleA, Rules: []broker.RuleDescription{ruleB}},
	}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "t"),
		&azservicebus.Message{Body: []byte("gold"), Subject: ptr("orig"), ApplicationProperties: map[string]any{"tier": "gold", "n": int64(2), "secret": "x"}},
		&azservicebus.Message{Body: []byte("silver"), ApplicationProperties: map[string]any{"tier": "silver"}},
	)

	var plain, acted []*azservicebus.ReceivedMessage
	for _, m := range drainSub(t, ctx, s, c, "t", "withdefault") {
		if _, ok := m.ApplicationProperties["RuleName"]; ok {
			acted = append(acted, m)
		} else {
			plain = append(plain, m)
		}
	}
	if got := bodies(plain); !slices.Equal(got, []string{"gold", "silver"}) {
		t.Fatalf("$Default delivered %v; want gold and silver unchanged", got)
	}
	for _, m := range plain {
		if string(m.Body) == "gold" && (m.ApplicationProperties["secret"] != "x" || m.ApplicationProperties["n"] != int64(2) || *m.Subject != "orig") {
			t.Errorf("the $Default copy was changed by another rule's action: %v %q", m.ApplicationProperties, deref(m.Subject))
		}
	}
	if len(acted) != 1 {
		t.Fatalf("the vip rule delivered %d copies; want 1", len(acted))
	}
	a := acted[0]
	if string(a.Body) != "gold" || a.ApplicationProperties["RuleName"] != "vip" || a.ApplicationProperties["tag"] != "vip" ||
		a.ApplicationProperties["n"] != int64(20) || a.Subject == nil || *a.Subject != "upgraded" {
		t.Errorf("action copy: body %q subject %q props %v", a.Body, deref(a.Subject), a.ApplicationProperties)
	}
	if _, ok := a.ApplicationProperties["secret"]; ok {
		t.Errorf("REMOVE secret left it: %v", a.ApplicationProperties)
	}

	got := map[string]string{} // RuleName → via, for the gold message
	var silver []string
	for _, m := range drainSub(t, ctx, s, c, "t", "twoactions") {
		rn, _ := m.ApplicationProperties["RuleName"].(string)
		if string(m.Body) == "silver" {
			silver = append(silver, rn)
			continue
		}
		got[rn], _ = m.ApplicationProperties["via"].(string)
	}
	if len(got) != 2 || got["A"] != "A" || got["B"] != "B" || !slices.Equal(silver, []string{"A"}) {
		t.Fatalf("two matching rules with actions: gold copies %v, silver copies by %v", got, silver)
	}
}

// TestSubscriptionSettlement: peek-lock on a subscription with
// dead-letter (received through SubQueueDeadLetter), defer and
// ReceiveDeferredMessages, peek of both, lock renewal, abandon.
func TestSubscriptionSettlement(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"},
		Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}, {Topic: "t", Name: "other"}}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "t"), &azservicebus.Message{Body: []byte("dead")}, &azservicebus.Message{Body: []byte("later")},
		&azservicebus.Message{Body: []byte("again")})

	r := newSubReceiver(t, c, "t", "s", nil)
	ms := receiveN(t, ctx, r, 3)
	byBody := map[string]*azservicebus.ReceivedMessage{}
	for _, m := range ms {
		byBody[string(m.Body)] = m
	}
	before := *byBody["later"].LockedUntil
	time.Sleep(10 * time.Millisecond)
	if err := r.RenewMessageLock(ctx, byBody["later"], nil); err != nil || !byBody["later"].LockedUntil.After(before) {
		t.Fatalf("RenewMessageLock on a subscription: %v (locked until %v, was %v)", err, byBody["later"].LockedUntil, before)
	}
	if err := r.DeadLetterMessage(ctx, byBody["dead"], &azservicebus.DeadLetterOptions{Reason: ptr("Bad"), ErrorDescription: ptr("very bad")}); err != nil {
		t.Fatalf("DeadLetterMessage: %v", err)
	}
	seq := *byBody["later"].SequenceNumber
	if err := r.DeferMessage(ctx, byBody["later"], nil); err != nil {
		t.Fatalf("DeferMessage: %v", err)
	}
	if err := r.AbandonMessage(ctx, byBody["again"], nil); err != nil {
		t.Fatalf("AbandonMessage: %v", err)
	}
	m := receiveN(t, ctx, r, 1)[0]
	if string(m.Body) != "again" || m.DeliveryCount != 2 {
		t.Fatalf("after abandon: %q count %d", m.Body, m.DeliveryCount)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}

	peeked, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	if err != nil || len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateDeferred || *peeked[0].SequenceNumber != seq {
		t.Fatalf("PeekMessages on the subscription = %v, %v; want the deferred message", peeked, err)
	}
	ds, err := r.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "later" || ds[0].LockedUntil == nil {
		t.Fatalf("ReceiveDeferredMessages = %v, %v", ds, err)
	}
	if err := r.CompleteMessage(ctx, ds[0], nil); err != nil {
		t.Fatalf("completing a deferred subscription message: %v", err)
	}

	dlq := newSubReceiver(t, c, "t", "s", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	pd, err := dlq.PeekMessages(ctx, 10, nil)
	if err != nil || len(pd) != 1 || string(pd[0].Body) != "dead" {
		t.Fatalf("PeekMessages on the subscription DLQ = %v, %v", pd, err)
	}
	d := receiveN(t, ctx, dlq, 1)[0]
	if string(d.Body) != "dead" || d.DeadLetterReason == nil || *d.DeadLetterReason != "Bad" || *d.DeadLetterErrorDescription != "very bad" {
		t.Fatalf("subscription DLQ message %q reason %q", d.Body, deref(d.DeadLetterReason))
	}
	if err := dlq.CompleteMessage(ctx, d, nil); err != nil {
		t.Fatalf("completing a subscription DLQ message: %v", err)
	}
	if n := subCounts(t, s, "t", "s"); n.Total != 0 {
		t.Fatalf("subscription s holds %+v", n)
	}
	// The other subscription was not touched by any of that.
	if n := subCounts(t, s, "t", "other"); n.Active != 3 || n.DeadLetter != 0 {
		t.Fatalf("subscription other holds %+v; want 3 active", n)
	}
}

// TestSubscriptionReceiveAndDelete: receive-and-delete on a subscription
// removes the message at once; settling it fails.
func TestSubscriptionReceiveAndDelete(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "t"), &azservicebus.Message{Body: []byte("a")}, &azservicebus.Message{Body: []byte("b")})
	r := newSubReceiver(t, c, "t", "s", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	ms := receiveN(t, ctx, r, 2)
	if string(ms[0].Body) != "a" || string(ms[1].Body) != "b" || ms[0].LockedUntil != nil {
		t.Fatalf("received %q %q locked %v", ms[0].Body, ms[1].Body, ms[0].LockedUntil)
	}
	if err := r.CompleteMessage(ctx, ms[0], nil); err == nil {
		t.Fatal("completing a receive-and-delete message succeeded")
	}
	if n := subCounts(t, s, "t", "s"); n.Total != 0 {
		t.Fatalf("subscription holds %d messages after receive-and-delete", n.Total)
	}
}

// TestTopicFilterExceptionDeadLettered: a filter that fails to evaluate
// dead-letters the message in that subscription with the exception type
// as reason and its message as description; without
// DeadLetteringOnFilterEvaluationExceptions the rule just does not match.
func TestTopicFilterExceptionDeadLettered(t *testing.T) {
	noDLQ := broker.DefaultSubscriptionProperties()
	noDLQ.DeadLetteringOnFilterEvaluationExceptions = false
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{
		{Topic: "t", Name: "div", DefaultRule: sqlRule("div", "user.x / 0 > 1")},
		{Topic: "t", Name: "mismatch", DefaultRule: sqlRule("cmp", "user.s > 5")},
		{Topic: "t", Name: "nodlq", Properties: &noDLQ, DefaultRule: sqlRule("div", "user.x / 0 > 1")},
		{Topic: "t", Name: "ok", DefaultRule: sqlRule("fine", "user.x = 5")},
	}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "t"), &azservicebus.Message{Body: []byte("boom"), ApplicationProperties: map[string]any{"x": int64(5), "s": "abc"}})

	for sub, wantReason := range map[string]string{"div": filter.ExcDivideByZero, "mismatch": filter.ExcFilter} {
		if n := subCounts(t, s, "t", sub); n.Active != 0 || n.DeadLetter != 1 {
			t.Fatalf("%s: counts %+v; want one dead-lettered message", sub, n)
		}
		dlq := newSubReceiver(t, c, "t", sub, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		m := receiveN(t, ctx, dlq, 1)[0]
		if string(m.Body) != "boom" || m.DeadLetterReason == nil || *m.DeadLetterReason != wantReason ||
			m.DeadLetterErrorDescription == nil || *m.DeadLetterErrorDescription == "" {
			t.Fatalf("%s: dead-lettered %q reason %q description %q; want reason %s", sub, m.Body, deref(m.DeadLetterReason), deref(m.DeadLetterErrorDescription), wantReason)
		}
		if m.ApplicationProperties["x"] != int64(5) {
			t.Errorf("%s: the dead-lettered message lost its properties: %v", sub, m.ApplicationProperties)
		}
		if err := dlq.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if sub == "div" && *m.DeadLetterErrorDescription != "Attempted to divide by zero." {
			t.Errorf("div: description %q", *m.DeadLetterErrorDescription)
		}
	}
	if n := subCounts(t, s, "t", "nodlq"); n.Total != 0 {
		t.Fatalf("nodlq: counts %+v; want nothing (the failing rule does not match)", n)
	}
	if got := bodies(drainSub(t, ctx, s, c, "t", "ok")); !slices.Equal(got, []string{"boom"}) {
		t.Fatalf("ok received %v", got)
	}
}

// TestTopicScheduled: messages scheduled on a topic (ScheduleMessages
// over topic/$management, and ScheduledEnqueueTime on a send) reach the
// subscriptions when due; a cancelled one never does.
func TestTopicScheduled(t *testing.T) {
	fc := clock.NewFake(time.Now())
	s := servicebustest.Start(t, &servicebustest.Options{Clock: fc, Topics: []string{"t"},
		Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s1"}, {Topic: "t", Name: "s2"}}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "t")
	at := fc.Now().Add(time.Minute)
	seqs, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("due")}, {Body: []byte("cancelled")}}, at, nil)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("ScheduleMessages on a topic = %v, %v", seqs, err)
	}
	if err := snd.CancelScheduledMessages(ctx, seqs[1:], nil); err != nil {
		t.Fatalf("CancelScheduledMessages on a topic: %v", err)
	}
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("sent-scheduled"), ScheduledEnqueueTime: ptr(at)})
	ti, err := s.Broker.GetTopic("t")
	if err != nil || ti.Counts.Scheduled != 2 {
		t.Fatalf("topic scheduled count %d (%v); want 2", ti.Counts.Scheduled, err)
	}
	if n := subCounts(t, s, "t", "s1"); n.Total != 0 {
		t.Fatalf("a scheduled message reached the subscription early: %+v", n)
	}
	s.Advance(t, 2*time.Minute)
	for _, sub := range []string{"s1", "s2"} {
		r := newSubReceiver(t, c, "t", sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		ms := receiveN(t, ctx, r, 2)
		if got := bodies(ms); !slices.Equal(got, []string{"due", "sent-scheduled"}) {
			t.Fatalf("%s received %v", sub, got)
		}
		for _, m := range ms {
			if m.ScheduledEnqueueTime == nil || m.ScheduledEnqueueTime.Unix() != at.Unix() {
				t.Errorf("%s: %q ScheduledEnqueueTime %v; want %v", sub, m.Body, m.ScheduledEnqueueTime, at)
			}
		}
		receiveNone(t, r, 100*time.Millisecond)
	}
}

// TestTopicAddressing: what each address may be used for, and not-found
// errors for unknown topics and subscriptions.
func TestTopicAddressing(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)

	err := newSender(t, c, "nope").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if sbCode(err) != azservicebus.CodeNotFound {
		t.Fatalf("send to an unknown topic = %v; want CodeNotFound", err)
	}
	for _, tc := range []struct{ topic, sub string }{{"t", "nosub"}, {"nope", "s"}} {
		_, err = newSubReceiver(t, c, tc.topic, tc.sub, nil).ReceiveMessages(ctx, 1, nil)
		want := fmt.Sprintf("The messaging entity 'sb://127.0.0.1/%s/Subscriptions/%s' could not be found.", tc.topic, tc.sub)
		if sbCode(err) != azservicebus.CodeNotFound || !strings.Contains(err.Error(), want) {
			t.Fatalf("receive from %s/Subscriptions/%s = %v; want CodeNotFound with %q", tc.topic, tc.sub, err, want)
		}
	}
	_, err = newSubReceiver(t, c, "t", "nosub", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}).ReceiveMessages(ctx, 1, nil)
	if sbCode(err) != azservicebus.CodeNotFound {
		t.Fatalf("receive from an unknown subscription's DLQ = %v; want CodeNotFound", err)
	}

	// A subscription is not a send target; a topic is not a receive source.
	err = newSender(t, c, "t/Subscriptions/s").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if err == nil || !strings.Contains(err.Error(), "it is a subscription") {
		t.Fatalf("send to a subscription = %v; want a refusal", err)
	}
	_, err = newReceiver(t, c, "t", nil).ReceiveMessages(ctx, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "is a topic") {
		t.Fatalf("receive from a topic = %v; want a refusal", err)
	}
	// A topic has no dead-letter queue.
	_, err = newReceiver(t, c, "t", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}).ReceiveMessages(ctx, 1, nil)
	if sbCode(err) != azservicebus.CodeNotFound {
		t.Fatalf("receive from t/$DeadLetterQueue = %v; want CodeNotFound", err)
	}
	// None of that broke the real entities.
	send(t, ctx, newSender(t, c, "t"), &azservicebus.Message{Body: []byte("fine")})
	if got := bodies(drainSub(t, ctx, s, c, "t", "s")); !slices.Equal(got, []string{"fine"}) {
		t.Fatalf("received %v", got)
	}
}

// TestTopicRights: Send rights for topic senders, Listen rights for
// subscription receivers.
func TestTopicRights(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{
		Topics:        []string{"t"},
		Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}},
		Policies: []auth.Policy{
			{Name: "RootManageSharedAccessKey", PrimaryKey: "root", Rights: auth.Manage},
			{Name: "sendonly", PrimaryKey: "s", Rights: auth.Send},
			{Name: "listenonly", PrimaryKey: "l", Rights: auth.Listen},
		}})
	ctx := testCtx(t, 30*time.Second)
	sendOnly := newClient(t, s.ConnectionStringWith("sendonly", "s"))
	listenOnly := newClient(t, s.ConnectionStringWith("listenonly", "l"))

	send(t, ctx, newSender(t, sendOnly, "t"), &azservicebus.Message{Body: []byte("x")})
	if _, err := newSubReceiver(t, sendOnly, "t", "s", nil).ReceiveMessages(ctx, 1, nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("receive from a subscription with Send rights = %v; want CodeUnauthorizedAccess", err)
	}
	if err := newSender(t, listenOnly, "t").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("send to a topic with Listen rights = %v; want CodeUnauthorizedAccess", err)
	} else if !strings.Contains(err.Error(), "SystemTracker:busbar:Topic:t,") {
		t.Fatalf("a topic's SystemTracker should name it a topic: %v", err)
	}
	if _, err := newSender(t, listenOnly, "t").ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("x")}}, time.Now().Add(time.Hour), nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("schedule on a topic with Listen rights = %v; want CodeUnauthorizedAccess", err)
	}
	r := newSubReceiver(t, listenOnly, "t", "s", nil)
	m := receiveN(t, ctx, r, 1)[0]
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := newSubReceiver(t, listenOnly, "t", "s", nil).PeekMessages(ctx, 1, nil); err != nil {
		t.Fatalf("peek on a subscription with Listen rights: %v", err)
	}
}

// TestSubscriptionDeletedWhileReceiving: a receiver whose subscription is
// deleted gets not-found.
func TestSubscriptionDeletedWhileReceiving(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	r := newSubReceiver(t, c, "t", "s", nil)
	if _, err := r.PeekMessages(ctx, 1, nil); err != nil { // the links are up
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.ReceiveMessages(ctx, 1, nil)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := s.Broker.DeleteSubscription("t", "s"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "could not be found") {
			t.Fatalf("receive on a deleted subscription = %v; want a not-found detach", err)
		}
	case <-ctx.Done():
		t.Fatal("the receiver of a deleted subscription kept waiting")
	}
}
