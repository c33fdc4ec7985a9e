package broker

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

const triageDLQ = "q/$DeadLetterQueue"

// TestResubmit: chosen dead letters go back to their queue without their
// dead-letter reason, edited, each exactly once, durably.
func TestResubmit(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.deadLetterN(5)
	res, err := e.b.Resubmit(ctx, triageDLQ, []int64{1, 3, 3, 99}, "q", func(m *message.Message) error {
		m.Body = append([]byte("fixed-"), m.Body...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != 2 || !slices.Equal(res.Skipped, []int64{99}) {
		t.Fatalf("result %+v", res)
	}
	check := func() {
		t.Helper()
		if got := seqs(e.peek(triageDLQ, 0, 10)); !slices.Equal(got, []int64{2, 4, 5}) {
			t.Fatalf("DLQ after resubmit: %v", got)
		}
		ds := e.peek("q", 0, 10)
		if got := bodies(ds); !slices.Equal(got, []string{"fixed-0", "fixed-2"}) {
			t.Fatalf("queue after resubmit: %v", got)
		}
		for _, d := range ds {
			if prop(d, PropDeadLetterReason) != nil || prop(d, PropDeadLetterErrorDescription) != nil {
				t.Fatalf("resubmitted message keeps its dead-letter reason: %v", d.Message.ApplicationProperties)
			}
			if d.SequenceNumber <= 5 {
				t.Fatalf("resubmitted message has an old sequence number %d", d.SequenceNumber)
			}
		}
		c := e.counts("q")
		if c.Active != 2 || c.DeadLetter != 3 {
			t.Fatalf("counts %+v", c)
		}
	}
	check()
	e.restart()
	check()
}

// TestResubmitFailedCommit: a commit that fails moves nothing and leaves
// the dead letters available for the next attempt.
func TestResubmitFailedCommit(t *testing.T) {
	ds := &diskStore{spyStore: &spyStore{Store: memstore.New()}}
	e := newEnvOn(t, ds)
	e.queue("q")
	e.deadLetterN(3)
	ds.setFull(true)
	res, err := e.b.Resubmit(ctx, triageDLQ, []int64{1, 2, 3}, "q", nil)
	var ns *store.NoSpaceError
	if !errors.As(err, &ns) && KindOf(err) != KindNoSpace {
		t.Fatalf("resubmit on a full disk: %v", err)
	}
	if res.Done != 0 || len(e.peek(triageDLQ, 0, 10)) != 3 || len(e.peek("q", 0, 10)) != 0 {
		t.Fatalf("a failed resubmit moved something: %+v", res)
	}
	ds.setFull(false)
	if res, err := e.b.Resubmit(ctx, triageDLQ, []int64{1, 2, 3}, "q", nil); err != nil || res.Done != 3 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if len(e.peek(triageDLQ, 0, 10)) != 0 || len(e.peek("q", 0, 10)) != 3 {
		t.Fatal("retry did not move every message once")
	}
}

// TestResubmitSkipsLocked: a dead letter someone holds locked stays.
func TestResubmitSkipsLocked(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.deadLetterN(2)
	d := e.recv1(triageDLQ)
	res, err := e.b.Resubmit(ctx, triageDLQ, []int64{1, 2}, "q", nil)
	if err != nil || res.Done != 1 || !slices.Equal(res.Skipped, []int64{d.SequenceNumber}) {
		t.Fatalf("%+v %v", res, err)
	}
	// Inspect shows the lock, Peek does not.
	in, err := e.b.Inspect(ctx, triageDLQ, 0, 10)
	if err != nil || len(in) != 1 || in[0].LockedUntil.IsZero() {
		t.Fatalf("inspect: %v %v", in, err)
	}
	e.complete(triageDLQ, d.LockToken)
}

// TestResubmitRefusals: only dead-letter queues, a target that exists,
// bounded batches; an edit that fails moves nothing.
func TestResubmitRefusals(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.deadLetterN(1)
	if _, err := e.b.Resubmit(ctx, "q", []int64{1}, "q", nil); KindOf(err) != KindInvalidArgument {
		t.Fatalf("from a main queue: %v", err)
	}
	if _, err := e.b.Resubmit(ctx, triageDLQ, []int64{1}, "nope", nil); KindOf(err) != KindNotFound {
		t.Fatalf("to a missing entity: %v", err)
	}
	if _, err := e.b.Resubmit(ctx, triageDLQ, make([]int64, MaxTriageBatch+1), "q", nil); KindOf(err) != KindInvalidArgument {
		t.Fatalf("too many: %v", err)
	}
	_, err := e.b.Resubmit(ctx, triageDLQ, []int64{1}, "q", func(*message.Message) error { return errors.New("bad edit") })
	if KindOf(err) != KindInvalidArgument {
		t.Fatalf("failing edit: %v", err)
	}
	if len(e.peek(triageDLQ, 0, 10)) != 1 {
		t.Fatal("a refused resubmit lost the message")
	}
	if res, err := e.b.Resubmit(ctx, triageDLQ, []int64{1}, "q", nil); err != nil || res.Done != 1 {
		t.Fatalf("after a refusal the message is not released: %+v %v", res, err)
	}
}

// TestResubmitToTopic: resubmitting to a topic fans out, and a batch
// larger than one store batch is moved whole.
func TestResubmitToTopic(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	if _, err := e.b.CreateTopic("t", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if _, err := e.b.CreateSubscription("t", s, DefaultSubscriptionProperties(), nil); err != nil {
			t.Fatal(err)
		}
	}
	const n = 1000
	e.deadLetterN(n)
	all := make([]int64, n)
	for i := range all {
		all[i] = int64(i + 1)
	}
	res, err := e.b.Resubmit(ctx, triageDLQ, all, "t", nil)
	if err != nil || res.Done != n {
		t.Fatalf("%+v %v", res, err)
	}
	for _, s := range []string{"t/Subscriptions/a", "t/Subscriptions/b"} {
		if got := len(e.peek(s, 0, 2*n)); got != n {
			t.Fatalf("%s has %d messages, want %d", s, got, n)
		}
	}
	if c := e.counts("q"); c.DeadLetter != 0 {
		t.Fatalf("DLQ left: %+v", c)
	}
}

// TestRemoveMessages deletes chosen messages durably, skipping locked ones.
func TestRemoveMessages(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 4)
	d := e.recv1("q") // seq 1 locked
	res, err := e.b.RemoveMessages(ctx, "q", []int64{1, 2, 4})
	if err != nil || res.Done != 2 || !slices.Equal(res.Skipped, []int64{1}) {
		t.Fatalf("%+v %v", res, err)
	}
	e.complete("q", d.LockToken)
	e.restart()
	if got := seqs(e.peek("q", 0, 10)); !slices.Equal(got, []int64{3}) {
		t.Fatalf("after remove and restart: %v", got)
	}
}

// TestTestRules: the rule tester (the console's, on DryRun) reports each
// rule's verdict and changes nothing.
func TestTestRules(t *testing.T) {
	e := newEnv(t)
	if _, err := e.b.CreateTopic("t", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	eu := &RuleDescription{Name: "eu", Filter: RuleFilter{Kind: FilterSQL, Expression: "region = 'eu'"}}
	if _, err := e.b.CreateSubscription("t", "a", DefaultSubscriptionProperties(), eu); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CreateSubscription("t", "b", DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CreateRule("t", "b", RuleDescription{Name: "tag", Filter: RuleFilter{Kind: FilterSQL, Expression: "region = 'eu'"},
		Action: &SQLAction{Expression: "SET tagged = 'yes'"}}); err != nil {
		t.Fatal(err)
	}
	verdicts := func(dr DryRun) (sub, rule []string, vs []RuleDryRun) {
		for _, sd := range dr.Subscriptions {
			for _, v := range sd.Rules {
				sub, rule, vs = append(sub, sd.Name), append(rule, v.Name), append(vs, v)
			}
		}
		return sub, rule, vs
	}
	dr, err := e.b.DryRun("t", &message.Message{ApplicationProperties: map[string]any{"region": "us"}})
	subs, rules, vs := verdicts(dr)
	if err != nil || len(vs) != 3 {
		t.Fatalf("%v %v", vs, err)
	}
	for i, v := range vs {
		want := rules[i] == "$Default"
		if v.Matched != want {
			t.Fatalf("%s/%s matched %v", subs[i], rules[i], v.Matched)
		}
	}
	dr, _ = e.b.DryRun("t", &message.Message{ApplicationProperties: map[string]any{"region": "eu"}})
	subs, rules, vs = verdicts(dr)
	for i, v := range vs {
		if !v.Matched {
			t.Fatalf("%s/%s did not match region = eu", subs[i], rules[i])
		}
		if rules[i] == "tag" && v.Sets["tagged"] != "yes" {
			t.Fatalf("action result %v", v.Sets)
		}
	}
	if si, err := e.b.GetSubscription("t", "b"); err != nil || si.Counts.Total != 0 {
		t.Fatalf("the tester sent something: %+v %v", si.Counts, err)
	}
	if _, err := e.b.DryRun("nope", &message.Message{}); KindOf(err) != KindNotFound {
		t.Fatalf("missing topic: %v", err)
	}
}

// TestInspectTopicScheduled: Inspect on a topic shows its scheduled
// messages until they fan out.
func TestInspectTopicScheduled(t *testing.T) {
	e := newEnv(t)
	if _, err := e.b.CreateTopic("t", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CreateSubscription("t", "a", DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}
	e.send("t", msg("now"))
	if _, err := e.b.Schedule(ctx, "t", []*message.Message{msg("later")}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ds, err := e.b.Inspect(ctx, "t", 0, 10)
	if err != nil || len(ds) != 1 || body(ds[0]) != "later" || ds[0].State != StateScheduled {
		t.Fatalf("%v %v", ds, err)
	}
	e.advance(2 * time.Hour)
	e.b.Tick()
	if ds, err := e.b.Inspect(ctx, "t", 0, 10); err != nil || len(ds) != 0 {
		t.Fatalf("after the fan-out: %v %v", ds, err)
	}
}

// TestDeadLetterMessages: chosen messages go to the DLQ with the reason,
// durably; locked and scheduled ones stay.
func TestDeadLetterMessages(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 3)
	if _, err := e.b.Schedule(ctx, "q", []*message.Message{msg("later")}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	d := e.recv1("q") // seq 1 locked
	res, err := e.b.DeadLetterMessages(ctx, "q", []int64{1, 2, 4}, "operator", "bad order")
	if err != nil || res.Done != 1 || !slices.Equal(res.Skipped, []int64{1, 4}) {
		t.Fatalf("%+v %v", res, err)
	}
	e.complete("q", d.LockToken)
	e.restart()
	ds := e.peek(triageDLQ, 0, 10)
	if len(ds) != 1 || ds[0].SequenceNumber != 2 || prop(ds[0], PropDeadLetterReason) != "operator" || prop(ds[0], PropDeadLetterErrorDescription) != "bad order" {
		t.Fatalf("DLQ: %v", ds)
	}
	if c := e.counts("q"); c.Active != 1 || c.Scheduled != 1 || c.DeadLetter != 1 {
		t.Fatalf("counts %+v", c)
	}
	if _, err := e.b.DeadLetterMessages(ctx, triageDLQ, []int64{2}, "r", ""); KindOf(err) != KindInvalidArgument {
		t.Fatalf("from a DLQ: %v", err)
	}
}

// TestDeadLetterMessagesInSession: a session's message dead-lettered by
// sequence number leaves its session.
func TestDeadLetterMessagesInSession(t *testing.T) {
	e := newEnv(t)
	e.queue("s", func(p *QueueProperties) { p.RequiresSession = true })
	e.send("s", &message.Message{SessionID: "a", Body: []byte("1")}, &message.Message{SessionID: "a", Body: []byte("2")})
	if res, err := e.b.DeadLetterMessages(ctx, "s", []int64{1}, "operator", ""); err != nil || res.Done != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	r, err := e.b.AcceptSession("s", "a", PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ds, err := r.TryReceive(10)
	if err != nil || len(ds) != 1 || body(ds[0]) != "2" {
		t.Fatalf("session a after dead-lettering 1: %v %v", ds, err)
	}
	if got := len(e.peek("s/$DeadLetterQueue", 0, 10)); got != 1 {
		t.Fatalf("DLQ has %d", got)
	}
}

// TestInspectLockHolder: Inspect shows who holds each lock (for receivers
// that said), and the holder goes with the lock: on settle and on expiry.
func TestInspectLockHolder(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 3)
	r := e.receiver("q", PeekLock)
	r.SetHolder("link L on connection C")
	ds, err := r.TryReceive(2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("%v %v", ds, err)
	}
	anon := e.recv1("q") // a receiver that did not say who it is
	holders := func() []string {
		t.Helper()
		ins, err := e.b.Inspect(ctx, "q", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var hs []string
		for _, d := range ins {
			hs = append(hs, d.LockHolder)
		}
		return hs
	}
	if got := holders(); !slices.Equal(got, []string{"link L on connection C", "link L on connection C", ""}) || anon.SequenceNumber != 3 {
		t.Fatalf("holders %q", got)
	}
	if ds, _ := e.b.Peek(ctx, "q", 0, 10); ds[0].LockHolder != "" {
		t.Fatal("Peek shows a lock holder")
	}
	e.complete("q", ds[0].LockToken)
	if got := holders(); !slices.Equal(got, []string{"link L on connection C", ""}) {
		t.Fatalf("holders after complete %q", got)
	}
	e.abandon("q", ds[1].LockToken, nil)
	if got := holders(); !slices.Equal(got, []string{"", ""}) {
		t.Fatalf("holders after abandon %q", got)
	}
	ds, _ = r.TryReceive(1)
	if len(ds) != 1 || holders()[0] == "" {
		t.Fatalf("relocked: %v %q", ds, holders())
	}
	e.advance(2 * time.Minute)
	e.b.Tick()
	if got := holders(); !slices.Equal(got, []string{"", ""}) {
		t.Fatalf("holders after lock expiry %q", got)
	}
	r.SetHolder(string(make([]byte, 1000)))
	if ds, _ = r.TryReceive(1); len(ds) != 1 || len(holders()[0]) != maxLockHolder {
		t.Fatalf("long holder not cut: %d", len(holders()[0]))
	}
	if h := cutHolder("x" + strings.Repeat("é", 200)); len(h) != maxLockHolder-1 || !utf8.ValidString(h) {
		t.Fatalf("cut inside a character: %d %q", len(h), h)
	}
}

// TestInspectLockHolderSession: a session receiver's holder shows on the
// messages it locks.
func TestInspectLockHolderSession(t *testing.T) {
	e := newEnv(t)
	e.queue("s", func(p *QueueProperties) { p.RequiresSession = true })
	e.send("s", &message.Message{SessionID: "a", Body: []byte("1")})
	r, err := e.b.AcceptSession("s", "a", PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHolder("session link")
	if ds, err := r.TryReceive(1); err != nil || len(ds) != 1 {
		t.Fatalf("%v %v", ds, err)
	}
	ins, err := e.b.Inspect(ctx, "s", 0, 10)
	if err != nil || len(ins) != 1 || ins[0].LockHolder != "session link" {
		t.Fatalf("%v %v", ins, err)
	}
	h, until, held, err := e.b.SessionHolder("s", "a")
	if err != nil || !held || h != "session link" || !until.Equal(r.SessionLockedUntil()) {
		t.Fatalf("SessionHolder: %q %v %v %v", h, until, held, err)
	}
	r.Close()
	if _, _, held, err := e.b.SessionHolder("s", "a"); err != nil || held {
		t.Fatalf("SessionHolder after close: %v %v", held, err)
	}
	if _, _, held, err := e.b.SessionHolder("s", "nope"); err != nil || held {
		t.Fatalf("SessionHolder of an unknown session: %v %v", held, err)
	}
}

// TestAbandonMessages: an operator's abandon raises each chosen message's
// delivery count durably, dead-letters at MaxDeliveryCount, and skips
// locked, scheduled and missing messages.
func TestAbandonMessages(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.MaxDeliveryCount = 2 })
	e.sendN("q", 3)
	if _, err := e.b.Schedule(ctx, "q", []*message.Message{msg("later")}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.recv1("q") // seq 1 locked
	res, err := e.b.AbandonMessages(ctx, "q", []int64{1, 2, 3, 4, 99})
	if err != nil || res.Done != 2 || res.DeadLettered != 0 || !slices.Equal(res.Skipped, []int64{1, 4, 99}) {
		t.Fatalf("%+v %v", res, err)
	}
	e.restart()
	ds := e.peek("q", 2, 2)
	if len(ds) != 2 || ds[0].DeliveryCount != 2 || ds[1].DeliveryCount != 2 {
		t.Fatalf("after abandon: %v", ds)
	}
	res, err = e.b.AbandonMessages(ctx, "q", []int64{2})
	if err != nil || res.Done != 1 || res.DeadLettered != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	dl := e.peek(triageDLQ, 0, 10)
	if len(dl) != 1 || dl[0].SequenceNumber != 2 || prop(dl[0], PropDeadLetterReason) != ReasonMaxDeliveryCountExceeded {
		t.Fatalf("DLQ: %v", dl)
	}
	if _, err := e.b.AbandonMessages(ctx, triageDLQ, []int64{2}); KindOf(err) != KindInvalidArgument {
		t.Fatalf("from a DLQ: %v", err)
	}
	if _, err := e.b.AbandonMessages(ctx, "q", make([]int64, MaxTriageBatch+1)); KindOf(err) != KindInvalidArgument {
		t.Fatalf("too many: %v", err)
	}
}

// TestLockHolderKeptOnFailedSettle: a settlement whose commit fails puts
// the lock back with its holder (single and batch).
func TestLockHolderKeptOnFailedSettle(t *testing.T) {
	ds := &diskStore{spyStore: &spyStore{Store: memstore.New()}}
	e := newEnvOn(t, ds)
	e.queue("q")
	e.sendN("q", 1)
	r := e.receiver("q", PeekLock)
	r.SetHolder("worker")
	got, err := r.TryReceive(1)
	if err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	ds.setFull(true)
	wantKind(t, e.b.Complete(ctx, "q", got[0].LockToken), ErrNoSpace)
	if errs := e.b.CompleteBatch(ctx, "q", []uuid.UUID{got[0].LockToken}); !errors.Is(errs[0], ErrNoSpace) {
		t.Fatalf("CompleteBatch: %v", errs)
	}
	ins, err := e.b.Inspect(ctx, "q", 0, 1)
	if err != nil || len(ins) != 1 || ins[0].LockHolder != "worker" {
		t.Fatalf("after failed settles: %v %v", ins, err)
	}
}

// TestLockHolderReceiveDeferred: deferred messages received by sequence
// number are held by the holder the call's context names.
func TestLockHolderReceiveDeferred(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 1)
	d := e.recv1("q")
	if err := e.b.Defer(ctx, "q", d.LockToken, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.ReceiveDeferred(WithLockHolder(ctx, "mgmt"), "q", []int64{d.SequenceNumber}, PeekLock); err != nil {
		t.Fatal(err)
	}
	ins, err := e.b.Inspect(ctx, "q", 0, 1)
	if err != nil || len(ins) != 1 || ins[0].LockHolder != "mgmt" {
		t.Fatalf("%v %v", ins, err)
	}
}
