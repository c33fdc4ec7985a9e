package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/faults"
)

// adminJSON sends a JSON request to the admin API with a Manage token and
// returns the status and body.
func adminJSON(t *testing.T, s *Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.HTTPAddr().String()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", metricsToken(s))
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// addFault adds a rule through POST /$faults and returns its id.
func addFault(t *testing.T, s *Server, spec string) string {
	t.Helper()
	code, body := adminJSON(t, s, http.MethodPost, "/$faults", spec)
	if code != http.StatusCreated {
		t.Fatalf("POST /$faults %s = %d %s", spec, code, body)
	}
	var r faults.Rule
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// injected is how many faults rule id has fired, from GET /$faults (0
// once the rule is gone: use the per-kind totals for those).
func injectedTotal(t *testing.T, s *Server, kind faults.Kind) int {
	t.Helper()
	code, body := adminJSON(t, s, http.MethodGet, "/$faults", "")
	if code != http.StatusOK {
		t.Fatalf("GET /$faults = %d %s", code, body)
	}
	var l struct {
		Rules    []faults.Rule       `json:"rules"`
		Injected map[faults.Kind]int `json:"injected"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err)
	}
	return l.Injected[kind]
}

// fastRetries: the SDK's own retry loop, with short waits.
var fastRetries = &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
	MaxRetries: 5, RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond}}

func faultServer(t *testing.T) (*Server, *azservicebus.Client, context.Context) {
	t.Helper()
	s := start(t, Options{Server: config.Server{Memory: true, Faults: true}})
	t.Cleanup(func() { stop(t, s) })
	p := broker.DefaultQueueProperties()
	p.LockDuration = broker.MinLockDuration
	if _, err := s.Broker().CreateQueue("q", p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return s, client, ctx
}

func sendOne(ctx context.Context, t *testing.T, c *azservicebus.Client, body string) {
	t.Helper()
	snd, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(body), ApplicationProperties: map[string]any{"kind": body}}, nil); err != nil {
		t.Fatalf("send %s: %v", body, err)
	}
}

func receiveOne(ctx context.Context, t *testing.T, r *azservicebus.Receiver) *azservicebus.ReceivedMessage {
	t.Helper()
	for {
		ms, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(ms) > 0 {
			return ms[0]
		}
	}
}

func activeCount(t *testing.T, s *Server) int64 {
	t.Helper()
	info, err := s.Broker().GetQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	return info.Counts.Active
}

// TestFaultsGoSDK: each fault kind, injected through the admin API, and
// the Go SDK's answer to it: its retry loop (server-busy), its link and
// connection recovery (detach, close-connection), the lock-lost error an
// application handles by receiving again, waiting out a delay, a dropped
// delivery coming back when its lock expires, a store write error
// reported as a failure (never as success).
func TestFaultsGoSDK(t *testing.T) {
	t.Run("server-busy on send is retried", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		addFault(t, s, `{"kind":"server-busy","entity":"q","count":2,"retryAfter":"1s"}`)
		sendOne(ctx, t, c, "a")
		if n := injectedTotal(t, s, faults.ServerBusy); n != 2 || activeCount(t, s) != 1 {
			t.Fatalf("injected %d, active %d", n, activeCount(t, s))
		}
		_, body := scrape(t, s, metricsToken(s))
		wantSeries(t, body, `busbar_injected_faults_total{kind="server-busy"}`, 2)
		wantSeries(t, body, `busbar_throttled_requests_total`, 2)
	})
	t.Run("server-busy on attach and management is retried", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		sendOne(ctx, t, c, "a")
		addFault(t, s, `{"kind":"server-busy","entity":"q","op":"attach"}`)
		addFault(t, s, `{"kind":"server-busy","entity":"q","op":"management"}`)
		r, err := c.NewReceiverForQueue("q", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		ms, err := r.PeekMessages(ctx, 1, nil)
		if err != nil || len(ms) != 1 {
			t.Fatalf("peek: %v %v", ms, err)
		}
		m := receiveOne(ctx, t, r)
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if n := injectedTotal(t, s, faults.ServerBusy); n != 2 {
			t.Fatalf("injected %d", n)
		}
	})
	t.Run("server-busy on settle: the Go SDK's retry hides it", func(t *testing.T) {
		// The Go SDK (1.11) retries the settlement on the same link, where
		// go-amqp finds the delivery already settled (rejected) and reports
		// success: CompleteMessage returns nil although the broker refused
		// it. Nothing is lost: the message keeps its lock and comes back
		// when the lock expires. docs/testing-tools.md warns about it.
		s, c, ctx := faultServer(t)
		sendOne(ctx, t, c, "a")
		addFault(t, s, `{"kind":"server-busy","entity":"q","op":"settle"}`)
		r, _ := c.NewReceiverForQueue("q", nil)
		defer r.Close(ctx)
		m := receiveOne(ctx, t, r)
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatalf("complete: %v (the SDK now reports the refusal: update the docs)", err)
		}
		if injectedTotal(t, s, faults.ServerBusy) != 1 || activeCount(t, s) != 1 {
			t.Fatalf("after complete: active %d", activeCount(t, s))
		}
		m2 := receiveOne(ctx, t, r)
		if m2.DeliveryCount != 2 {
			t.Fatalf("redelivered with count %d", m2.DeliveryCount)
		}
		if err := r.CompleteMessage(ctx, m2, nil); err != nil || activeCount(t, s) != 0 {
			t.Fatalf("second complete: %v", err)
		}
	})
	t.Run("detach and close-connection on send recover", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		addFault(t, s, `{"kind":"detach","entity":"q","condition":"amqp:link:detach-forced"}`)
		sendOne(ctx, t, c, "a")
		addFault(t, s, `{"kind":"close-connection","entity":"q","condition":"amqp:connection:forced"}`)
		sendOne(ctx, t, c, "b")
		if injectedTotal(t, s, faults.Detach) != 1 || injectedTotal(t, s, faults.CloseConnection) != 1 || activeCount(t, s) != 2 {
			t.Fatalf("active %d", activeCount(t, s))
		}
	})
	t.Run("detach on receive recovers", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		sendOne(ctx, t, c, "a")
		addFault(t, s, `{"kind":"detach","entity":"q","op":"receive"}`)
		r, _ := c.NewReceiverForQueue("q", nil)
		defer r.Close(ctx)
		m := receiveOne(ctx, t, r)
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if injectedTotal(t, s, faults.Detach) != 1 || activeCount(t, s) != 0 {
			t.Fatal("detach on receive")
		}
	})
	t.Run("lock-lost on settle", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		sendOne(ctx, t, c, "a")
		addFault(t, s, `{"kind":"lock-lost","entity":"q"}`)
		r, _ := c.NewReceiverForQueue("q", nil)
		defer r.Close(ctx)
		m := receiveOne(ctx, t, r)
		err := r.CompleteMessage(ctx, m, nil)
		var sbErr *azservicebus.Error
		if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
			t.Fatalf("complete = %v, want lock lost", err)
		}
		// The application's path: receive it again, delivery count raised.
		m2 := receiveOne(ctx, t, r)
		if m2.DeliveryCount != 2 {
			t.Fatalf("redelivered with count %d", m2.DeliveryCount)
		}
		if err := r.CompleteMessage(ctx, m2, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("lock-lost on renew-lock", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		sendOne(ctx, t, c, "a")
		addFault(t, s, `{"kind":"lock-lost","entity":"q","op":"management"}`)
		r, _ := c.NewReceiverForQueue("q", nil)
		defer r.Close(ctx)
		if _, err := r.PeekMessages(ctx, 1, nil); err != nil {
			t.Fatalf("a peek cannot lose a lock: %v", err)
		}
		m := receiveOne(ctx, t, r)
		err := r.RenewMessageLock(ctx, m, nil)
		var sbErr *azservicebus.Error
		if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
			t.Fatalf("renew = %v, want lock lost", err)
		}
		m2 := receiveOne(ctx, t, r)
		if m2.DeliveryCount != 2 {
			t.Fatalf("redelivered with count %d", m2.DeliveryCount)
		}
		if err := r.CompleteMessage(ctx, m2, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("delay on settle and management", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		sendOne(ctx, t, c, "a")
		addFault(t, s, `{"kind":"delay","entity":"q","delay":"400ms"}`)
		addFault(t, s, `{"kind":"delay","entity":"q","op":"management","delay":"400ms"}`)
		r, _ := c.NewReceiverForQueue("q", nil)
		defer r.Close(ctx)
		begin := time.Now()
		if _, err := r.PeekMessages(ctx, 1, nil); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d < 400*time.Millisecond {
			t.Fatalf("peek answered after %v", d)
		}
		m := receiveOne(ctx, t, r)
		begin = time.Now()
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d < 400*time.Millisecond {
			t.Fatalf("complete answered after %v", d)
		}
		if injectedTotal(t, s, faults.Delay) != 2 || activeCount(t, s) != 0 {
			t.Fatal("delay")
		}
	})
	t.Run("drop-frame on receive: the message returns when its lock expires", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		addFault(t, s, `{"kind":"drop-frame","entity":"q","property":"kind=lost"}`)
		sendOne(ctx, t, c, "lost")
		r, _ := c.NewReceiverForQueue("q", nil)
		defer r.Close(ctx)
		begin := time.Now()
		m := receiveOne(ctx, t, r)
		if string(m.Body) != "lost" || m.DeliveryCount != 2 || time.Since(begin) < broker.MinLockDuration-time.Second {
			t.Fatalf("got %q count %d after %v", m.Body, m.DeliveryCount, time.Since(begin))
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if injectedTotal(t, s, faults.DropFrame) != 1 {
			t.Fatal("drop-frame not counted")
		}
	})
	t.Run("store-error is a failure, then the broker goes on", func(t *testing.T) {
		s, c, ctx := faultServer(t)
		addFault(t, s, `{"kind":"store-error","entity":"q"}`)
		snd, _ := c.NewSender("q", nil)
		defer snd.Close(ctx)
		err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
		if err == nil || !strings.Contains(err.Error(), "resource-limit-exceeded") {
			t.Fatalf("send over a store error = %v", err)
		}
		if activeCount(t, s) != 0 {
			t.Fatal("a failed send left a message")
		}
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("y")}, nil); err != nil {
			t.Fatalf("the next send: %v", err)
		}
		if injectedTotal(t, s, faults.StoreError) != 1 || activeCount(t, s) != 1 {
			t.Fatal("store-error")
		}
	})
}

// TestFaultsAPI: listing, clearing, validation and the switch.
func TestFaultsAPI(t *testing.T) {
	s, _, _ := faultServer(t)
	if code, body := adminJSON(t, s, http.MethodPost, "/$faults", `{"kind":"lock-lost","entity":"q","op":"send"}`); code != http.StatusBadRequest || !strings.Contains(body, "applies to settle") {
		t.Fatalf("invalid rule: %d %s", code, body)
	}
	if code, body := adminJSON(t, s, http.MethodPost, "/$faults", `{"kind":"lock-lost","entity":"q","bogus":1}`); code != http.StatusBadRequest {
		t.Fatalf("unknown field: %d %s", code, body)
	}
	id := addFault(t, s, `{"kind":"lock-lost","entity":"q","count":3}`)
	addFault(t, s, `{"kind":"server-busy","entity":"*"}`)
	code, body := adminJSON(t, s, http.MethodGet, "/$faults", "")
	if code != http.StatusOK || !strings.Contains(body, `"id":"`+id+`"`) || !strings.Contains(body, `"remaining":3`) {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := adminJSON(t, s, http.MethodDelete, "/$faults/"+id, ""); code != http.StatusOK || !strings.Contains(body, `"cleared":1`) {
		t.Fatalf("clear one: %d %s", code, body)
	}
	if code, _ := adminJSON(t, s, http.MethodDelete, "/$faults/"+id, ""); code != http.StatusNotFound {
		t.Fatalf("clear unknown: %d", code)
	}
	if code, body := adminJSON(t, s, http.MethodDelete, "/$faults", ""); code != http.StatusOK || !strings.Contains(body, `"cleared":1`) {
		t.Fatalf("clear all: %d %s", code, body)
	}
	if code, body := get(t, "http://"+s.HTTPAddr().String()+"/health"); code != http.StatusOK || !strings.Contains(body, `"faults":true`) {
		t.Fatalf("health: %d %s", code, body)
	}

	off := start(t, Options{Server: config.Server{Memory: true}})
	defer stop(t, off)
	if code, body := adminJSON(t, off, http.MethodPost, "/$faults", `{"kind":"lock-lost","entity":"q"}`); code != http.StatusNotFound || !strings.Contains(body, "--faults") {
		t.Fatalf("faults off: %d %s", code, body)
	}
	if code, body := get(t, "http://"+off.HTTPAddr().String()+"/health"); strings.Contains(body, "faults") {
		t.Fatalf("health without faults: %d %s", code, body)
	}
	// Without a token.
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr().String()+"/$faults", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestRuleDryRunAPI: POST /$rules/dry-run end to end, checked against a
// real send with the Go SDK.
func TestRuleDryRunAPI(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}})
	defer stop(t, s)
	b := s.Broker()
	if _, err := b.CreateTopic("events", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	for name, rule := range map[string]*broker.RuleDescription{
		"eu":  {Name: "eu", Filter: broker.SQLRuleFilter("region = 'eu' AND n > 2", nil), Action: &broker.SQLAction{Expression: "SET tier = 'gold'"}},
		"us":  {Name: "us", Filter: broker.CorrelationRuleFilter(broker.CorrelationFilter{Properties: map[string]any{"region": "us"}})},
		"bad": {Name: "bad", Filter: broker.SQLRuleFilter("region / 0 = 1", nil)},
	} {
		if _, err := b.CreateSubscription("events", name, broker.DefaultSubscriptionProperties(), rule); err != nil {
			t.Fatal(err)
		}
	}
	code, body := adminJSON(t, s, http.MethodPost, "/$rules/dry-run",
		`{"topic":"events","message":{"body":"hi","properties":{"region":"eu","n":3}}}`)
	if code != http.StatusOK {
		t.Fatalf("dry-run: %d %s", code, body)
	}
	var dr struct {
		Accepted      []string `json:"accepted"`
		DeadLettered  []string `json:"deadLettered"`
		Subscriptions []struct {
			Name  string `json:"name"`
			Rules []struct {
				Matched bool           `json:"matched"`
				Why     string         `json:"why"`
				Error   string         `json:"error"`
				Sets    map[string]any `json:"sets"`
			} `json:"rules"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal([]byte(body), &dr); err != nil {
		t.Fatal(err)
	}
	if strings.Join(dr.Accepted, ",") != "eu" || strings.Join(dr.DeadLettered, ",") != "bad" || len(dr.Subscriptions) != 3 {
		t.Fatalf("verdict: %s", body)
	}
	for _, sub := range dr.Subscriptions {
		r := sub.Rules[0]
		switch sub.Name {
		case "eu":
			if !r.Matched || r.Sets["tier"] != "gold" {
				t.Errorf("eu: %s", body)
			}
		case "us":
			if r.Matched || !strings.Contains(r.Why, "region") {
				t.Errorf("us: %s", body)
			}
		case "bad":
			if r.Error == "" {
				t.Errorf("bad: %s", body)
			}
		}
	}
	for _, bad := range []string{`{"message":{}}`, `{"topic":"events","message":{"properties":{"x":[1]}}}`, `not json`} {
		if code, _ := adminJSON(t, s, http.MethodPost, "/$rules/dry-run", bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d", bad, code)
		}
	}
	if code, _ := adminJSON(t, s, http.MethodPost, "/$rules/dry-run", `{"topic":"nope","message":{}}`); code != http.StatusNotFound {
		t.Errorf("unknown topic: %d", code)
	}

	// The real send agrees.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := azservicebus.NewClientFromConnectionString(connectionString(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	snd, _ := c.NewSender("events", nil)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("hi"), ApplicationProperties: map[string]any{"region": "eu", "n": int64(3)}}, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][2]int64{"eu": {1, 0}, "us": {0, 0}, "bad": {0, 1}} {
		info, err := b.GetSubscription("events", name)
		if err != nil || info.Counts.Active != want[0] || info.Counts.DeadLetter != want[1] {
			t.Errorf("%s: %+v %v, want active/dlq %v", name, info.Counts, err, want)
		}
	}
}
