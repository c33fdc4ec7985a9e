package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/server"
)

// chromium finds Debian's Chromium, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("BUSBAR_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Skip("no Chromium installed (apt-get install -y chromium, or set BUSBAR_CHROMIUM): the browser tests of the web console cannot run")
	return ""
}

// startBusbar starts a real server on loopback ephemeral ports with two
// policies: admin (Manage) and reader (Listen).
func startBusbar(t *testing.T, policies string) (*server.Server, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Policies: policies}})
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
	return s, "http://" + s.HTTPAddr().String() + strings.TrimSuffix(console.Prefix, "/")
}

// browser starts headless Chromium; dark selects the dark colour scheme.
func browser(t *testing.T) context.Context {
	t.Helper()
	// Not t.TempDir: Chromium may still be writing its profile when the
	// test ends; a leftover file must not fail it.
	dir, err := os.MkdirTemp("", "busbar-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(dir),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA(); os.RemoveAll(dir) })
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Run(sctx, actions...); err != nil {
		var body string
		_ = chromedp.Run(ctx, chromedp.Text("main", &body, chromedp.ByQuery))
		t.Fatalf("%s: %v\npage: %s", what, err, body)
	}
}

// clickAndLoad clicks an element that loads a new page (a submit button,
// a link) and waits until the new document has replaced the old one, so
// that the waits and reads after it never see the page being left (a
// WaitVisible could otherwise match the old page's element, and a read
// then fail on a node that is gone).
func clickAndLoad(sel string) chromedp.Tasks {
	return chromedp.Tasks{
		chromedp.Evaluate(`document.documentElement.setAttribute("data-left", "1")`, nil),
		chromedp.Click(sel, chromedp.ByQuery),
		chromedp.WaitReady("html:not([data-left])", chromedp.ByQuery),
	}
}

func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	run(t, ctx, "read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
	return s
}

// shots writes screenshots of the current page, light and dark, when
// BUSBAR_CONSOLE_SCREENSHOTS names a directory (docs/console).
func shot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("BUSBAR_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	for _, scheme := range []string{"light", "dark"} {
		var png []byte
		run(t, ctx, "screenshot "+name,
			emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}),
			chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(filepath.Join(dir, name+"-"+scheme+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctx, "reset media", emulation.SetEmulatedMedia().WithFeatures(nil))
}

// TestBrowser drives the console in Chromium against a real busbar:
// sign-in, create entities, send, inspect, message detail, dead-letter
// triage with a bulk resubmit, the rule tester, a rule's syntax error,
// session state; each step checked on the page and in the broker.
func TestBrowser(t *testing.T) {
	srv, base := startBusbar(t, "admin=admin-key:Manage;reader=reader-key:Listen")
	b := srv.Broker()
	ctx := browser(t)

	// Signing in: a wrong key is refused on the page, the right one opens
	// the overview.
	run(t, ctx, "open", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#keyName", chromedp.ByQuery))
	run(t, ctx, "wrong key", chromedp.SendKeys("#keyName", "admin", chromedp.ByQuery), chromedp.SendKeys("#key", "nope", chromedp.ByQuery),
		clickAndLoad("form button[type=submit]"), chromedp.WaitVisible(".error", chromedp.ByQuery))
	run(t, ctx, "sign in", chromedp.SetValue("#keyName", "admin", chromedp.ByQuery), chromedp.SetValue("#key", "admin-key", chromedp.ByQuery),
		clickAndLoad("form button[type=submit]"), chromedp.WaitVisible("#q-name", chromedp.ByQuery))

	// Create a queue.
	run(t, ctx, "create queue", chromedp.SendKeys("#q-name", "orders", chromedp.ByQuery),
		clickAndLoad("fieldset:has(#q-name) button"), chromedp.WaitVisible("#m-body", chromedp.ByQuery))
	if _, err := b.GetQueue("orders"); err != nil {
		t.Fatalf("the console's queue is not in the broker: %v", err)
	}
	if got := textOf(t, ctx, ".flash"); !strings.Contains(got, "Created queue 'orders'") {
		t.Fatalf("flash %q", got)
	}

	// Send a test message from the page.
	run(t, ctx, "send", chromedp.SendKeys("#m-body", `{"order": {"id": 42, "customer": "ada"}}`, chromedp.ByQuery),
		chromedp.SendKeys("#m-props", "kind=test\npriority=3", chromedp.ByQuery), chromedp.SendKeys("#m-subject", "new-order", chromedp.ByQuery),
		clickAndLoad("form[action$='/send'] button"), chromedp.WaitVisible("#f-state", chromedp.ByQuery))
	ds, err := b.Peek(context.Background(), "orders", 0, 10)
	if err != nil || len(ds) != 1 || ds[0].Message.Subject != "new-order" || ds[0].Message.ApplicationProperties["priority"] != int64(3) {
		t.Fatalf("sent message in the broker: %v %v", ds, err)
	}
	for i := range 5 {
		if err := b.Send(context.Background(), "orders", []*message.Message{{Body: dataBody(fmt.Sprintf(`{"n": %d}`, i))}}); err != nil {
			t.Fatal(err)
		}
	}

	// Inspect, filtered by a JSON path of the body.
	run(t, ctx, "filter", chromedp.SendKeys("#f-jp", "$.order.customer", chromedp.ByQuery), chromedp.SendKeys("#f-value", "ada", chromedp.ByQuery),
		clickAndLoad("fieldset:has(#f-jp) button"), chromedp.WaitVisible("caption", chromedp.ByQuery))
	if got := textOf(t, ctx, "caption"); !strings.HasPrefix(got, "1 messages shown") {
		t.Fatalf("JSON path filter: %q", got)
	}
	shot(t, ctx, "messages")
	run(t, ctx, "detail", clickAndLoad("tbody td.num a"), chromedp.WaitVisible("#body", chromedp.ByQuery))
	if got := textOf(t, ctx, "#body"); !strings.Contains(got, `"customer": "ada"`) {
		t.Fatalf("body rendered as %q", got)
	}
	shot(t, ctx, "message")

	// Dead-letter three chosen messages from the page, then triage them:
	// the group by reason, and a bulk resubmit of all with that reason.
	run(t, ctx, "dead-letter", chromedp.Navigate(base+"/messages?path=orders"), chromedp.WaitVisible("#sel-1", chromedp.ByQuery),
		chromedp.Click("#sel-1", chromedp.ByQuery), chromedp.Click("#sel-2", chromedp.ByQuery), chromedp.Click("#sel-3", chromedp.ByQuery),
		chromedp.SetValue("#dl-reason", "bad-input", chromedp.ByQuery), chromedp.SendKeys("#dl-desc", "the order has no customer", chromedp.ByQuery),
		clickAndLoad("button[value=deadletter]"), chromedp.WaitVisible(".flash", chromedp.ByQuery))
	if got := textOf(t, ctx, ".flash"); got != "Dead-lettered 3 messages." {
		t.Fatalf("flash %q", got)
	}
	if q, _ := b.GetQueue("orders"); q.Counts.DeadLetter != 3 || q.Counts.Active != 3 {
		t.Fatalf("after dead-lettering: %+v", q.Counts)
	}
	// Abandon a chosen message: its delivery count rises.
	run(t, ctx, "abandon", chromedp.Navigate(base+"/messages?path=orders"), chromedp.WaitVisible("#sel-4", chromedp.ByQuery),
		chromedp.Click("#sel-4", chromedp.ByQuery), clickAndLoad("button[value=abandon]"), chromedp.WaitVisible(".flash", chromedp.ByQuery))
	if got := textOf(t, ctx, ".flash"); got != "Abandoned 1 messages." {
		t.Fatalf("flash %q", got)
	}
	if ds, err := b.Peek(context.Background(), "orders", 4, 1); err != nil || len(ds) != 1 || ds[0].DeliveryCount != 2 {
		t.Fatalf("after abandon: %v %v", ds, err)
	}
	run(t, ctx, "dlq", chromedp.Navigate(base+"/dlq?path=orders"), chromedp.WaitVisible("table", chromedp.ByQuery))
	if got := textOf(t, ctx, "main table tbody"); !strings.Contains(got, "bad-input") || !strings.Contains(got, "3") {
		t.Fatalf("DLQ groups: %q", got)
	}
	shot(t, ctx, "dlq")
	run(t, ctx, "bulk resubmit", chromedp.Click("input[name=all]", chromedp.ByQuery),
		clickAndLoad("button[value=resubmit]"), chromedp.WaitVisible("#job-state", chromedp.ByQuery))
	deadline := time.Now().Add(20 * time.Second)
	for {
		if textOf(t, ctx, "#job-state") == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job: %s", textOf(t, ctx, "main"))
		}
		time.Sleep(200 * time.Millisecond)
		run(t, ctx, "reload", chromedp.Reload())
	}
	if got := textOf(t, ctx, "#job-done"); got != "3" {
		t.Fatalf("job moved %s", got)
	}
	shot(t, ctx, "job")
	q, _ := b.GetQueue("orders")
	if q.Counts.DeadLetter != 0 || q.Counts.Active != 6 {
		t.Fatalf("after resubmit: %+v", q.Counts)
	}

	// A topic with two subscriptions, and the rule tester.
	if _, err := b.CreateTopic("events", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "create subscription", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#s-topic", chromedp.ByQuery),
		chromedp.SendKeys("#s-topic", "events", chromedp.ByQuery), chromedp.SendKeys("#s-name", "eu", chromedp.ByQuery),
		chromedp.SendKeys("#s-filter", "region = 'eu'", chromedp.ByQuery),
		clickAndLoad("fieldset:has(#s-name) button"), chromedp.WaitVisible(".flash", chromedp.ByQuery))
	if _, err := b.CreateSubscription("events", "all", broker.DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible("table", chromedp.ByQuery))
	shot(t, ctx, "overview")
	run(t, ctx, "tester", chromedp.Navigate(base+"/tester?topic=events"), chromedp.WaitVisible("#t-props", chromedp.ByQuery),
		chromedp.SendKeys("#t-props", "region=us", chromedp.ByQuery), clickAndLoad("main form button"),
		chromedp.WaitVisible("#tester-result", chromedp.ByQuery))
	eu, all := textOf(t, ctx, "td[data-sub=eu]"), textOf(t, ctx, "td[data-sub=all]")
	if !strings.HasPrefix(eu, "no — no rule matches") || !strings.HasPrefix(all, "yes") {
		t.Fatalf("tester: eu %q, all %q", eu, all)
	}
	shot(t, ctx, "tester")

	// A rule with a syntax error: the error, with its position, beside the form.
	run(t, ctx, "bad rule", chromedp.Navigate(base+"/rules?topic=events&sub=eu"), chromedp.WaitVisible("#r-name", chromedp.ByQuery),
		chromedp.SendKeys("#r-name", "broken", chromedp.ByQuery), chromedp.SendKeys("#r-filter", "region = ", chromedp.ByQuery),
		clickAndLoad("fieldset:has(#r-name) button[type=submit]"), chromedp.WaitVisible("#rule-error", chromedp.ByQuery))
	if got := textOf(t, ctx, "#rule-error"); !strings.Contains(got, "1:") {
		t.Fatalf("rule error without a position: %q", got)
	}
	if _, err := b.GetRule("events", "eu", "broken"); err == nil {
		t.Fatal("a broken rule was created")
	}

	// The scheduled timeline of the topic: a message scheduled in an hour,
	// cancelled from the page.
	if _, err := b.Schedule(context.Background(), "events", []*message.Message{{Body: dataBody("later")}}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "scheduled", chromedp.Navigate(base+"/scheduled?path=events"), chromedp.WaitVisible("input[name=seq]", chromedp.ByQuery))
	shot(t, ctx, "scheduled")
	run(t, ctx, "cancel scheduled", chromedp.Click("input[name=seq]", chromedp.ByQuery),
		clickAndLoad("form[action$='/messages/cancel'] button"), chromedp.WaitVisible(".flash", chromedp.ByQuery))
	if ti, _ := b.GetTopic("events"); ti.Counts.Scheduled != 0 {
		t.Fatalf("scheduled after cancel: %+v", ti.Counts)
	}

	// Sessions: state edited on the page, read back from the broker.
	p := broker.DefaultQueueProperties()
	p.RequiresSession = true
	if _, err := b.CreateQueue("carts", p); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(context.Background(), "carts", []*message.Message{{SessionID: "cart-1", Body: dataBody("x")}}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "sessions", chromedp.Navigate(base+"/sessions?path=carts"), chromedp.WaitVisible("#st-cart-1", chromedp.ByQuery),
		chromedp.SendKeys("#st-cart-1", "step=2", chromedp.ByQuery), clickAndLoad("form[action$='/sessions/state'] button"),
		chromedp.WaitVisible(".flash", chromedp.ByQuery))
	rc, err := b.AcceptSession("carts", "cart-1", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	st, err := rc.SessionState(context.Background())
	rc.Close()
	if err != nil || string(st) != "step=2" {
		t.Fatalf("session state %q %v", st, err)
	}
	shot(t, ctx, "sessions")
}

func dataBody(s string) []byte {
	// 0x00 0x53 0x75: the data section descriptor; 0xa0: binary, 1-byte length.
	return append([]byte{0x00, 0x53, 0x75, 0xa0, byte(len(s))}, s...)
}

// TestServedByBusbar: the server serves the console under its prefix;
// with the default (well-known) key on loopback it opens signed in, and
// the admin API's paths are untouched.
func TestServedByBusbar(t *testing.T) {
	srv, base := startBusbar(t, "")
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "development key") {
		t.Fatalf("console: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatal("no Content-Security-Policy")
	}
	// Without the trailing slash: redirected.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = c.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != console.Prefix {
		t.Fatalf("%s: %d %s", base, resp.StatusCode, resp.Header.Get("Location"))
	}
	// The admin API still answers for entities, unauthenticated → 401.
	resp, err = http.Get("http://" + srv.HTTPAddr().String() + "/orders?api-version=2021-05")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("admin API: %d", resp.StatusCode)
	}
}
