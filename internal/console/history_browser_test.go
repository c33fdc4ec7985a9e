package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/server"
)

// TestBrowserHistory: the History view of a message in Chromium against a
// real busbar started with --history on — from the message page, and
// found by message id.
func TestBrowserHistory(t *testing.T) {
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(sctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Policies: "admin=admin-key:Manage", History: "on"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	base := "http://" + srv.HTTPAddr().String() + strings.TrimSuffix(console.Prefix, "/")
	b := srv.Broker()
	bg := context.Background()
	if _, err := b.CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(bg, "orders", []*message.Message{{MessageID: "order-7", Body: dataBody(`{"n": 7}`)}}); err != nil {
		t.Fatal(err)
	}
	r, err := b.OpenReceiver("orders", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHolder("link worker-1 on connection app")
	ds, err := r.TryReceive(1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if err := b.Abandon(bg, "orders", ds[0].LockToken, nil); err != nil {
		t.Fatal(err)
	}

	ctx := browser(t)
	run(t, ctx, "sign in", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#keyName", chromedp.ByQuery),
		chromedp.SendKeys("#keyName", "admin", chromedp.ByQuery), chromedp.SendKeys("#key", "admin-key", chromedp.ByQuery),
		clickAndLoad("form button[type=submit]"), chromedp.WaitVisible("#q-name", chromedp.ByQuery))
	run(t, ctx, "message", chromedp.Navigate(base+"/message?path=orders&seq=1"), chromedp.WaitVisible("#history-link", chromedp.ByQuery))
	run(t, ctx, "history", clickAndLoad("#history-link"), chromedp.WaitVisible("section.history", chromedp.ByQuery))
	got := textOf(t, ctx, "section.history")
	for _, want := range []string{"message id order-7", "enqueued", "delivered", "abandoned", ds[0].LockToken.String(), "link worker-1 on connection app"} {
		if !strings.Contains(got, want) {
			t.Errorf("history view lacks %q:\n%s", want, got)
		}
	}
	shot(t, ctx, "history")

	run(t, ctx, "by message id", chromedp.SetValue("#h-id", "order-7", chromedp.ByQuery), clickAndLoad("fieldset:has(#h-id) button"),
		chromedp.WaitVisible("section.history", chromedp.ByQuery))
	if got := textOf(t, ctx, "h1"); !strings.Contains(got, "order-7") {
		t.Errorf("heading %q", got)
	}
	run(t, ctx, "unknown", chromedp.Navigate(base+"/history?path=orders&seq=99"), chromedp.WaitVisible("#history-none", chromedp.ByQuery))
}
