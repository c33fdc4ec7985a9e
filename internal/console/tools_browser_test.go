package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/server"
)

// TestBrowserTools drives the Time and Faults pages in Chromium against
// a real busbar started with --test-clock and --faults: follow the
// header's links, advance the clock, add a fault rule and clear it.
func TestBrowserTools(t *testing.T) {
	ctx := browser(t)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.Start(sctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Policies: "admin=admin-key:Manage", TestClock: true, Faults: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	base := "http://" + s.HTTPAddr().String() + strings.TrimSuffix(console.Prefix, "/")
	run(t, ctx, "sign in", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#keyName", chromedp.ByQuery),
		chromedp.SendKeys("#keyName", "admin", chromedp.ByQuery), chromedp.SendKeys("#key", "admin-key", chromedp.ByQuery),
		clickAndLoad("form button[type=submit]"), chromedp.WaitVisible("#q-name", chromedp.ByQuery))

	run(t, ctx, "time page", clickAndLoad(`nav a[href$="/time"]`), chromedp.WaitVisible("#by", chromedp.ByQuery))
	run(t, ctx, "advance", chromedp.SetValue("#by", "3h", chromedp.ByQuery), clickAndLoad(`form[action$="/time/advance"] button`),
		chromedp.WaitVisible(".flash", chromedp.ByQuery))
	if got := textOf(t, ctx, "#test-offset"); got != "3h0m0s" {
		t.Fatalf("offset after advancing 3h: %q", got)
	}

	run(t, ctx, "faults page", clickAndLoad(`nav a[href$="/faults"]`), chromedp.WaitVisible("#f-entity", chromedp.ByQuery))
	run(t, ctx, "add rule", chromedp.SetValue("#f-kind", "server-busy", chromedp.ByQuery), chromedp.SendKeys("#f-entity", "orders", chromedp.ByQuery),
		chromedp.SendKeys("#f-count", "2", chromedp.ByQuery), clickAndLoad(`form[action$="/faults/add"] button`),
		chromedp.WaitVisible(".flash", chromedp.ByQuery))
	if rules := textOf(t, ctx, "#fault-rules tbody"); !strings.Contains(rules, "server-busy") || !strings.Contains(rules, "orders") {
		t.Fatalf("rules after adding: %q", rules)
	}
	run(t, ctx, "clear all", clickAndLoad(`form[action$="/faults/clear"] button.danger`), chromedp.WaitVisible(".flash", chromedp.ByQuery))
	if rules := textOf(t, ctx, "#fault-rules tbody"); !strings.Contains(rules, "No fault rules") {
		t.Fatalf("rules after clearing: %q", rules)
	}
}
