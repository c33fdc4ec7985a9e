package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/faults"
)

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// consolePost posts form (with the page's CSRF token) to the console
// at origin and follows the redirect.
func consolePost(t *testing.T, c *http.Client, origin, p string, form url.Values) (int, string) {
	t.Helper()
	_, page, _ := consoleGet(t, c, origin+"/$console/")
	m := consoleCSRF.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the console:\n%s", page)
	}
	form.Set("csrf", m[1])
	resp, err := c.PostForm(origin+"/$console/"+p, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleTestingTools: through the console of a broker started with
// --test-clock and --faults, advancing the clock makes a scheduled
// message due for a real Go SDK receiver, and a server-busy rule makes
// the SDK's send fail until the rule is cleared. Without the flags the
// pages do not exist.
func TestConsoleTestingTools(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, TestClock: true, Faults: true}})
	t.Cleanup(func() { stop(t, s) })
	if _, err := s.Broker().CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	origin := "http://" + s.HTTPAddr().String()
	c := consoleClient(t) // loopback with the development key: signed in with Manage
	if _, page, _ := consoleGet(t, c, origin+"/$console/"); !strings.Contains(page, `href="/$console/time"`) || !strings.Contains(page, `href="/$console/faults"`) {
		t.Fatalf("no Time/Faults links:\n%s", page)
	}

	t.Run("advancing the clock in the console releases a scheduled message", func(t *testing.T) {
		snd, err := client.NewSender("q", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(ctx)
		if _, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		rcv, err := client.NewReceiverForQueue("q", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rcv.Close(ctx)
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		ms, _ := rcv.ReceiveMessages(short, 1, nil)
		cancelShort()
		if len(ms) != 0 {
			t.Fatal("the scheduled message came before its time")
		}
		if code, page := consolePost(t, c, origin, "time/advance", url.Values{"by": {"2h"}}); code != http.StatusOK || !strings.Contains(page, `id="test-offset" class="mono">2h0m0s<`) {
			t.Fatalf("advance: %d\n%s", code, page)
		}
		ms, err = rcv.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(ms) != 1 || string(ms[0].Body) != "later" {
			t.Fatalf("receive after advance: %d messages, %v", len(ms), err)
		}
		if err := rcv.CompleteMessage(ctx, ms[0], nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a server-busy rule added in the console fails a send", func(t *testing.T) {
		if code, page := consolePost(t, c, origin, "faults/add", url.Values{"kind": {"server-busy"}, "entity": {"q"}, "count": {"100"}, "retryAfter": {"10ms"}}); code != http.StatusOK || !strings.Contains(page, "server-busy") {
			t.Fatalf("add: %d\n%s", code, page)
		}
		snd, err := client.NewSender("q", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(ctx)
		err = snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "server-busy") && !strings.Contains(err.Error(), "ServerBusy") {
			t.Fatalf("send under a server-busy rule: %v", err)
		}
		if n := injectedTotal(t, s, faults.ServerBusy); n == 0 {
			t.Fatal("no server-busy fault injected")
		}
		if code, _ := consolePost(t, c, origin, "faults/clear", url.Values{"all": {"1"}}); code != http.StatusOK {
			t.Fatalf("clear: %d", code)
		}
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("y")}, nil); err != nil {
			t.Fatalf("send after clearing: %v", err)
		}
	})

	t.Run("absent without the flags", func(t *testing.T) {
		off := start(t, Options{Server: config.Server{Memory: true}})
		defer stop(t, off)
		o := "http://" + off.HTTPAddr().String()
		oc := consoleClient(t)
		if _, page, _ := consoleGet(t, oc, o+"/$console/"); strings.Contains(page, `href="/$console/time"`) || strings.Contains(page, `href="/$console/faults"`) {
			t.Fatal("links to tools that are off")
		}
		for _, p := range []string{"time", "faults"} {
			if code, _, _ := consoleGet(t, oc, o+"/$console/"+p); code != http.StatusNotFound {
				t.Fatalf("GET %s: %d", p, code)
			}
		}
	})
}
