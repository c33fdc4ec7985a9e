package broker

import (
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/message"
)

// TestDryRun: every verdict the dry-run gives (accept with and without an
// action, correlation mismatch with the differing field, evaluation error
// dead-lettered or ignored, session-less message on a session
// subscription, inactive subscription) and that a real send of the same
// message then does what it said.
func TestDryRun(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	e.sub("t", "all")
	e.subRule("t", "eu", &RuleDescription{Name: "eu", Filter: SQLRuleFilter("region = 'eu'", nil),
		Action: &SQLAction{Expression: "SET tier = 'gold'; REMOVE scratch"}})
	e.subRule("t", "vip", &RuleDescription{Name: "vip", Filter: CorrelationRuleFilter(CorrelationFilter{Label: "vip", Properties: map[string]any{"region": "eu"}})})
	e.subRule("t", "boom", &RuleDescription{Name: "boom", Filter: SQLRuleFilter("region + 1 > 0", nil)})
	e.subRule("t", "quiet", &RuleDescription{Name: "boom", Filter: SQLRuleFilter("region + 1 > 0", nil)},
		func(p *SubscriptionProperties) { p.DeadLetteringOnFilterEvaluationExceptions = false })
	e.sub("t", "sess", func(p *SubscriptionProperties) { p.RequiresSession = true })
	e.sub("t", "off", func(p *SubscriptionProperties) { p.Status = StatusSendDisabled })

	m := &message.Message{Subject: "normal", Body: []byte("x"),
		ApplicationProperties: map[string]any{"region": "eu", "scratch": int64(1)}}
	dr, err := e.b.DryRun("T", m)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SubscriptionDryRun{}
	var names []string
	for _, s := range dr.Subscriptions {
		got[s.Name] = s
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "all,boom,eu,off,quiet,sess,vip" {
		t.Fatalf("subscriptions %v", names)
	}
	if s := got["all"]; !s.Accepted || s.Copies != 1 || !s.Rules[0].Matched || s.Rules[0].Name != "$Default" {
		t.Errorf("all: %+v", s)
	}
	if s := got["eu"]; !s.Accepted || s.Copies != 1 || s.Rules[0].Sets["tier"] != "gold" ||
		len(s.Rules[0].Removes) != 1 || s.Rules[0].Removes[0] != "scratch" {
		t.Errorf("eu: %+v", s)
	}
	if s := got["vip"]; s.Accepted || s.Rules[0].Matched || !strings.Contains(s.Rules[0].Why, `Label = "vip"`) ||
		strings.Contains(s.Rules[0].Why, "region") {
		t.Errorf("vip: %+v", s)
	}
	if s := got["boom"]; s.Accepted || !s.DeadLettered || s.Rules[0].Error == "" || s.DeadLetterReason == "" {
		t.Errorf("boom: %+v", s)
	}
	if s := got["quiet"]; s.Accepted || s.DeadLettered || s.Rules[0].Error == "" {
		t.Errorf("quiet: %+v", s)
	}
	if s := got["sess"]; s.Accepted || !s.DeadLettered || s.DeadLetterReason != ReasonSessionIDNull {
		t.Errorf("sess: %+v", s)
	}
	if s := got["off"]; s.Accepted || !s.Inactive {
		t.Errorf("off: %+v", s)
	}
	if _, err := e.b.DryRun("missing", m); KindOf(err) != KindNotFound {
		t.Errorf("unknown topic: %v", err)
	}

	// The real send agrees.
	e.send("t", m)
	for _, s := range dr.Subscriptions {
		c := e.subCounts("t", s.Name)
		wantActive := int64(s.Copies)
		wantDLQ := int64(0)
		if s.DeadLettered {
			wantDLQ = 1
		}
		if c.Active != wantActive || c.DeadLetter != wantDLQ {
			t.Errorf("%s after send: active %d dlq %d, dry-run said %d and %d", s.Name, c.Active, c.DeadLetter, wantActive, wantDLQ)
		}
	}
}
