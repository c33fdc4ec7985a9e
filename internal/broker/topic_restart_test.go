package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

func TestTopicRestartKeepsEverything(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.topic("t", func(p *TopicProperties) {
			p.DefaultMessageTimeToLive = time.Hour
			p.RequiresDuplicateDetection = true
			p.UserMetadata = "meta"
		})
		a := e.sub("t", "a", func(p *SubscriptionProperties) { p.MaxDeliveryCount = 5 })
		b := e.subRule("t", "b", &RuleDescription{Name: "n", Filter: SQLRuleFilter("n >= @min", map[string]any{"@min": int32(2)}),
			Action: &SQLAction{Expression: "SET seen = @v", Parameters: map[string]any{"@v": int16(3)}}})
		e.rule("t", "b", RuleDescription{Name: "corr", Filter: CorrelationRuleFilter(CorrelationFilter{CorrelationID: "c", Properties: map[string]any{"k": uint8(1)}})})
		e.rule("t", "b", RuleDescription{Name: "gone", Filter: TrueRuleFilter()})
		if err := e.b.DeleteRule("t", "b", "gone"); err != nil {
			t.Fatal(err)
		}
		e.send("t",
			&message.Message{MessageID: "m1", Body: []byte("m1"), ApplicationProperties: map[string]any{"n": int64(1)}},
			&message.Message{MessageID: "m2", Body: []byte("m2"), ApplicationProperties: map[string]any{"n": int64(2)}},
			&message.Message{MessageID: "m3", Body: []byte("m3"), CorrelationID: "c", ApplicationProperties: map[string]any{"k": uint8(1), "n": "bad"}})
		// a: abandon m1 (count 1, own data), defer m2.
		d := e.recv1(a)
		e.abandon(a, d.LockToken, map[string]any{"x": "y"})
		ds := e.recv(a, PeekLock, 2)
		if err := e.b.Defer(ctx, a, ds[1].LockToken, nil); err != nil {
			t.Fatal(err)
		}
		sched, err := e.b.Schedule(ctx, "t", []*message.Message{msg("s1")}, t0.Add(30*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		before := e.topicInfo("t")
		beforeA, beforeB := e.subCounts("t", "a"), e.subCounts("t", "b")
		var maxSeq int64
		for _, p := range []string{a, b, b + "/$DeadLetterQueue"} {
			for _, d := range e.peek(p, 0, 100) {
				maxSeq = max(maxSeq, d.SequenceNumber)
			}
		}

		reopen()

		after := e.topicInfo("t")
		if after.Properties.UserMetadata != "meta" || after.SubscriptionCount != 2 || after.SQLFilterCount != 2 ||
			after.CorrelationFilterCount != 1 || after.Counts != before.Counts || !after.CreatedAt.Equal(before.CreatedAt) {
			t.Fatalf("topic after restart %+v\nbefore %+v", after, before)
		}
		if c := e.subCounts("t", "a"); c != beforeA {
			t.Fatalf("a counts %+v, before %+v", c, beforeA)
		}
		if c := e.subCounts("t", "b"); c != beforeB {
			t.Fatalf("b counts %+v, before %+v", c, beforeB)
		}
		rules, _ := e.b.ListRules("t", "b", 0, 0)
		if len(rules) != 2 || rules[0].Name != "corr" || rules[0].Filter.Correlation.Properties["k"] != uint8(1) ||
			rules[1].Filter.Parameters["@min"] != int32(2) || rules[1].Action.Parameters["@v"] != int16(3) {
			t.Fatalf("rules after restart %+v", rules)
		}
		// Rules work after recompilation; duplicate detection remembers.
		e.send("t", &message.Message{MessageID: "m1", Body: []byte("dup")},
			&message.Message{MessageID: "m4", Body: []byte("m4"), ApplicationProperties: map[string]any{"n": int64(9)}})
		// Copies: states, counts, own and shared data.
		ps := e.peek(a, 0, 10)
		if len(ps) != 4 || ps[0].DeliveryCount != 2 || prop(ps[0], "x") != "y" || ps[1].State != StateDeferred ||
			body(ps[2]) != "m3" || body(ps[3]) != "m4" {
			t.Fatalf("a after restart: %v", bodies(ps))
		}
		if ps[3].SequenceNumber <= maxSeq {
			t.Fatalf("sequence number %d reused (had %d)", ps[3].SequenceNumber, maxSeq)
		}
		pb := e.peek(b, 0, 10)
		if fmt.Sprint(bodies(pb)) != "[m2 m4]" || prop(pb[0], "seen") != int64(3) || prop(pb[0], PropRuleName) != "n" {
			t.Fatalf("b after restart: %v %v", bodies(pb), pb[0].Message.ApplicationProperties)
		}
		// m3 matched corr (plain) but failed n >= @min ("bad" >= 2): DLQ only.
		if dl := e.peek(b+"/$DeadLetterQueue", 0, 10); len(dl) != 1 || body(dl[0]) != "m3" {
			t.Fatalf("b DLQ after restart: %v", bodies(dl))
		}
		// The scheduled message fans out after the restart.
		e.advance(30 * time.Minute)
		e.b.Tick()
		ps = e.peek(a, 0, 10) // s1 has the number it was scheduled with
		if fmt.Sprint(bodies(ps)) != "[m1 m2 m3 s1 m4]" || ps[3].SequenceNumber != sched[0] {
			t.Fatalf("scheduled after restart: %v", bodies(ps))
		}
		// Reference counts survived: draining a and b frees every shared data.
		for _, p := range []string{a, b, b + "/$DeadLetterQueue"} {
			r := e.receiver(p, ReceiveAndDelete)
			r.TryReceive(100)
		}
		if _, err := e.b.ReceiveDeferred(ctx, a, []int64{ps[1].SequenceNumber}, ReceiveAndDelete); err != nil {
			t.Fatal(err)
		}
		e.flushGarbage("t")
		for seq := int64(1); seq <= ps[4].SequenceNumber; seq++ {
			if e.sharedData("t", seq) {
				t.Fatalf("shared data %d kept after every copy is gone", seq)
			}
		}
		if info := e.topicInfo("t"); info.Counts.SizeInBytes != 0 {
			t.Fatalf("size after draining %+v", info.Counts)
		}
	})
}

func TestTopicRestartSequenceNumbers(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.topic("t")
		e.sub("t", "keep")
		e.subRule("t", "acts", &RuleDescription{Name: "r1", Filter: TrueRuleFilter(), Action: &SQLAction{Expression: "SET a = 1"}})
		e.rule("t", "acts", RuleDescription{Name: "r2", Filter: TrueRuleFilter(), Action: &SQLAction{Expression: "SET a = 2"}})
		e.rule("t", "acts", RuleDescription{Name: "r3", Filter: TrueRuleFilter(), Action: &SQLAction{Expression: "SET a = 3"}})
		e.send("t", msg("m")) // seq 1; extra copies 2, 3 in "acts" only
		ps := e.peek("t/Subscriptions/acts", 0, 10)
		if fmt.Sprint(seqs(ps)) != "[1 2 3]" {
			t.Fatalf("copies %v", seqs(ps))
		}
		e.recv("t/Subscriptions/keep", ReceiveAndDelete, 10)
		// The only holder of numbers 2 and 3 goes away.
		if err := e.b.DeleteSubscription("t", "acts"); err != nil {
			t.Fatal(err)
		}
		reopen()
		e.send("t", msg("n"))
		if d := e.recv1("t/Subscriptions/keep"); d.SequenceNumber != 4 {
			t.Fatalf("seq after restart %d, want 4", d.SequenceNumber)
		}
	})
}

func TestTopicScheduledTimePassedWhileDown(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.topic("t")
		s := e.sub("t", "s")
		e.b.Schedule(ctx, "t", []*message.Message{msg("s")}, t0.Add(time.Minute))
		e.advance(time.Hour)
		reopen()
		// No Tick: the receive's lazy check reaches the topic.
		if d := e.recv1(s); body(d) != "s" || !d.EnqueuedTime.Equal(t0.Add(time.Minute)) {
			t.Fatalf("got %v", d)
		}
	})
}

// TestRecoveryRemovesUnreferencedSharedData: a crash after the last copy
// of a message was removed but before its shared data was (the removal
// rides on a later commit) leaves data no copy refers to; recovery
// counts the references again and removes it.
func TestRecoveryRemovesUnreferencedSharedData(t *testing.T) {
	st := memstore.New()
	e := newEnvOn(t, st)
	e.topic("t")
	s := e.sub("t", "s")
	e.send("t", msg("m"))
	e.recv(s, ReceiveAndDelete, 1)
	if !e.sharedData("t", 1) {
		t.Fatal("expected the removal to be pending")
	}
	// "Crash": open a second broker on the store without closing the first.
	b2, err := Open(Options{Store: st, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if e.sharedData("t", 1) {
		t.Fatal("recovery kept shared data no copy refers to")
	}
	if info, err := b2.GetTopic("t"); err != nil || info.Counts.SizeInBytes != 0 {
		t.Fatalf("topic after recovery %+v %v", info, err)
	}
}
