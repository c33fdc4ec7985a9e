package console_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/chromedp/chromedp"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/server"
)

// sdkSend sends body to queue in the namespace host names (a
// NAME.localhost, or localhost for the default one) with the Go SDK,
// dialling the loopback address.
func sdkSend(t *testing.T, s *server.Server, host, queue, body string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.AMQPAddr().String())
	cs := "Endpoint=sb://" + host + ":" + port + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{CustomEndpoint: "127.0.0.1:" + port})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
		t.Fatalf("send %s to %s in %s: %v", body, queue, host, err)
	}
}

// TestBrowserNamespaces: two namespaces with a queue of the same name and
// different messages; the console opens on the default one, the header's
// switcher leads to the other one and back, and each shows its own
// messages only. The other namespace's host name opens its console too.
func TestBrowserNamespaces(t *testing.T) {
	ec, err := config.LoadEmulatorConfig(strings.NewReader(`{"UserConfig": {"Namespaces": [
	  {"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]},
	  {"Name": "other", "Queues": [{"Name": "orders"}]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx0, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.Start(ctx0, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, Entities: ec})
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
	sdkSend(t, s, "localhost", "orders", "order-in-default")
	sdkSend(t, s, "other.localhost", "orders", "order-in-other")
	origin := "http://" + s.HTTPAddr().String()
	ctx := browser(t)

	// shows checks the namespace in the header and the messages of
	// orders on the page the link of that namespace's console leads to.
	shows := func(ns, want, not string) {
		t.Helper()
		if got := textOf(t, ctx, "#current-namespace"); got != ns {
			t.Fatalf("the header shows namespace %q, want %q", got, ns)
		}
		var loc string
		run(t, ctx, "location", chromedp.Location(&loc))
		base := loc[:strings.Index(loc, console.Prefix)]
		prefix := console.Prefix
		if rest := loc[len(base)+len(console.Prefix):]; strings.HasPrefix(rest, "ns/") {
			prefix += rest[:len("ns/")+strings.Index(rest[len("ns/"):], "/")+1]
		}
		run(t, ctx, "messages of "+ns, chromedp.Navigate(base+prefix+"messages?path=orders"), chromedp.WaitVisible("caption", chromedp.ByQuery))
		main := textOf(t, ctx, "main")
		if !strings.Contains(main, want) || strings.Contains(main, not) {
			t.Fatalf("orders in %s shows:\n%s\nwant %q and not %q", ns, main, want, not)
		}
		if got := textOf(t, ctx, "#current-namespace"); got != ns {
			t.Fatalf("the messages page's header shows namespace %q, want %q", got, ns)
		}
	}

	// Loopback with the development key: signed in automatically, in the
	// default namespace, and the switcher lists both.
	run(t, ctx, "open", chromedp.Navigate(origin+console.Prefix), chromedp.WaitVisible("#current-namespace", chromedp.ByQuery))
	var names []string
	run(t, ctx, "switcher", chromedp.Evaluate(`[...document.querySelectorAll(".ns-switch a")].map(a => a.dataset.namespace)`, &names))
	if strings.Join(names, ",") != "sbemulatorns,other" {
		t.Fatalf("the switcher lists %v", names)
	}
	shows("sbemulatorns", "order-in-default", "order-in-other")

	// Switch to other.
	run(t, ctx, "open the switcher", chromedp.Click(".ns-switch summary", chromedp.ByQuery), chromedp.WaitVisible(`.ns-switch a[data-namespace="other"]`, chromedp.ByQuery))
	shot(t, ctx, "namespaces")
	run(t, ctx, "switch to other",
		clickAndLoad(`.ns-switch a[data-namespace="other"]`), chromedp.WaitVisible("#current-namespace", chromedp.ByQuery))
	var loc string
	run(t, ctx, "location", chromedp.Location(&loc))
	if !strings.HasSuffix(loc, console.Prefix+"ns/other/") {
		t.Fatalf("switched to %s", loc)
	}
	shows("other", "order-in-other", "order-in-default")

	// And back.
	run(t, ctx, "switch back", chromedp.Click(".ns-switch summary", chromedp.ByQuery),
		clickAndLoad(`.ns-switch a[data-namespace="sbemulatorns"]`), chromedp.WaitVisible("#current-namespace", chromedp.ByQuery))
	shows("sbemulatorns", "order-in-default", "order-in-other")

	// The other namespace's host name (Chromium resolves *.localhost to
	// loopback) opens its console.
	_, port, _ := net.SplitHostPort(s.HTTPAddr().String())
	run(t, ctx, "by host", chromedp.Navigate("http://other.localhost:"+port+console.Prefix), chromedp.WaitVisible("#current-namespace", chromedp.ByQuery))
	shows("other", "order-in-other", "order-in-default")
}
