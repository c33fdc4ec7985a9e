package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// newTierEnv is newEnv with the broker enforcing tier.
func newTierEnv(t *testing.T, tier *Tier) *env {
	t.Helper()
	e := &env{t: t, clk: clock.NewFake(t0), st: memstore.New()}
	b, err := Open(Options{Store: e.st, Clock: e.clk, Tier: tier})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	t.Cleanup(func() { e.b.Close() })
	return e
}

func mustTier(t *testing.T, name string) *Tier {
	t.Helper()
	tier, err := TierProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return tier
}

// wantRefused fails unless err is of kind k and mentions texts.
func wantRefused(t *testing.T, what string, err error, k Kind, texts ...string) {
	t.Helper()
	if KindOf(err) != k {
		t.Fatalf("%s: %v; want %v", what, err, k)
	}
	for _, s := range texts {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not mention %q", what, err, s)
		}
	}
}

func TestTierProfiles(t *testing.T) {
	for name, sku := range map[string]string{"basic": "Basic", "Standard": "Standard", "PREMIUM": "Premium"} {
		if tier := mustTier(t, name); tier.SKU() != sku {
			t.Errorf("%s: SKU %s", name, tier.SKU())
		}
	}
	if _, err := TierProfile("gold"); err == nil {
		t.Error("gold is a tier")
	}
	var none *Tier
	if none.SKU() != "Standard" {
		t.Errorf("no tier reports %s", none.SKU())
	}
}

func TestTierBasic(t *testing.T) {
	e := newTierEnv(t, mustTier(t, "basic"))
	q, err := e.b.CreateQueue("q", DefaultQueueProperties())
	if err != nil {
		t.Fatal(err)
	}
	// Basic caps the TTL at 14 days: "never" becomes 14 days.
	if q.Properties.DefaultMessageTimeToLive != 14*24*time.Hour || q.Properties.MaxMessageSizeInKilobytes != 256 {
		t.Errorf("basic queue: %+v", q.Properties)
	}
	_, err = e.b.CreateTopic("t", DefaultTopicProperties())
	wantRefused(t, "topic", err, KindInvalidArgument, "topics are not available", "Basic tier")
	for what, mod := range map[string]func(*QueueProperties){
		"sessions":                 func(p *QueueProperties) { p.RequiresSession = true },
		"duplicate detection":      func(p *QueueProperties) { p.RequiresDuplicateDetection = true },
		"auto-forwarding":          func(p *QueueProperties) { p.ForwardTo = "q" },
		"DefaultMessageTimeToLive": func(p *QueueProperties) { p.DefaultMessageTimeToLive = 15 * 24 * time.Hour },
		"MaxSizeInMegabytes":       func(p *QueueProperties) { p.MaxSizeInMegabytes = 10240 },
	} {
		p := DefaultQueueProperties()
		mod(&p)
		_, err := e.b.CreateQueue("q2", p)
		wantRefused(t, what, err, KindInvalidArgument, what)
		_, err = e.b.UpdateQueue("q", p)
		wantRefused(t, what+" (update)", err, KindInvalidArgument, what)
	}
}

func TestTierStandard(t *testing.T) {
	e := newTierEnv(t, mustTier(t, "standard"))
	p := DefaultQueueProperties()
	p.MaxMessageSizeInKilobytes = 1024
	_, err := e.b.CreateQueue("big", p)
	wantRefused(t, "1 MB messages", err, KindInvalidArgument, "only be set in Premium")
	p = DefaultQueueProperties()
	p.MaxSizeInMegabytes = 10240
	p.EnablePartitioning = true
	if _, err := e.b.CreateQueue("partitioned", p); err != nil {
		t.Errorf("10 GB partitioned: %v", err)
	}
	e.queue("q", func(p *QueueProperties) { p.RequiresSession = true; p.RequiresDuplicateDetection = true })
	if _, err := e.b.CreateTopic("t", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.queue("plain")
	big := strings.Repeat("x", 200<<10)
	if err := e.b.Send(ctx, "plain", []*message.Message{msg(big)}); err != nil {
		t.Fatalf("one 200 KB message: %v", err)
	}
	err = e.b.Send(ctx, "plain", []*message.Message{msg(big), msg(big)})
	wantRefused(t, "a 400 KB batch", err, KindMessageTooLarge, "batch", "Standard")
	err = e.b.Send(ctx, "plain", []*message.Message{msg(strings.Repeat("x", 300<<10))})
	wantRefused(t, "a 300 KB message", err, KindMessageTooLarge)
	if qi, _ := e.b.GetQueue("plain"); qi.Counts.Active != 1 {
		t.Errorf("%d messages stored", qi.Counts.Active)
	}
}

func TestTierPremium(t *testing.T) {
	e := newTierEnv(t, mustTier(t, "premium"))
	q, err := e.b.CreateQueue("q", DefaultQueueProperties())
	if err != nil {
		t.Fatal(err)
	}
	if q.Properties.MaxMessageSizeInKilobytes != 1024 {
		t.Errorf("premium default message size %d KB", q.Properties.MaxMessageSizeInKilobytes)
	}
	tp := DefaultTopicProperties()
	tp.MaxMessageSizeInKilobytes = 102400
	if _, err := e.b.CreateTopic("t", tp); err != nil {
		t.Errorf("100 MB topic: %v", err)
	}
	p := DefaultQueueProperties()
	p.MaxMessageSizeInKilobytes = 512
	_, err = e.b.CreateQueue("small", p)
	wantRefused(t, "512 KB", err, KindInvalidArgument, "1024 … 102400")
	ctx := context.Background()
	if err := e.b.Send(ctx, "q", []*message.Message{msg(strings.Repeat("x", 900<<10))}); err != nil {
		t.Errorf("a 900 KB message: %v", err)
	}
	err = e.b.Send(ctx, "q", []*message.Message{msg(strings.Repeat("x", 600<<10)), msg(strings.Repeat("x", 600<<10))})
	wantRefused(t, "a 1.2 MB batch", err, KindMessageTooLarge, "Premium")
}

func TestTierEntityCount(t *testing.T) {
	tier := mustTier(t, "standard")
	tier.MaxEntities = 2
	e := newTierEnv(t, tier)
	e.queue("a")
	if _, err := e.b.CreateTopic("b", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	_, err := e.b.CreateQueue("c", DefaultQueueProperties())
	wantRefused(t, "third queue", err, KindQuotaExceeded, "allows 2")
	_, err = e.b.CreateTopic("c", DefaultTopicProperties())
	wantRefused(t, "third topic", err, KindQuotaExceeded)
	if err := e.b.DeleteQueue("a"); err != nil {
		t.Fatal(err)
	}
	e.queue("c")
}

// TestNoTier: without a tier, today's limits hold (100 MB per entity, no
// batch cap, topics and sessions).
func TestNoTier(t *testing.T) {
	e := newEnv(t)
	p := DefaultQueueProperties()
	p.MaxMessageSizeInKilobytes = 102400
	p.RequiresSession = true
	if _, err := e.b.CreateQueue("q", p); err != nil {
		t.Fatal(err)
	}
	if qi, _ := e.b.GetQueue("q"); qi.Properties.DefaultMessageTimeToLive != Infinite {
		t.Errorf("TTL %v", qi.Properties.DefaultMessageTimeToLive)
	}
	e.queue("plain")
	big := strings.Repeat("x", 200<<10)
	if err := e.b.Send(context.Background(), "plain", []*message.Message{msg(big), msg(big)}); err != nil {
		t.Errorf("a 400 KB batch: %v", err)
	}
}
