package admin

// Tests of the HTTP data plane (dataplane.go) with a plain net/http
// client, as curl would use it.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// brokerProps decodes a response's BrokerProperties header.
func brokerProps(t *testing.T, h http.Header) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(h.Get("BrokerProperties")), &m); err != nil {
		t.Fatalf("BrokerProperties %q: %v", h.Get("BrokerProperties"), err)
	}
	return m
}

// locPath is the path of a Location header.
func locPath(t *testing.T, h http.Header) string {
	t.Helper()
	u, err := url.Parse(h.Get("Location"))
	if err != nil || u.Path == "" {
		t.Fatalf("Location %q: %v", h.Get("Location"), err)
	}
	return u.Path
}

func TestDataPlaneSendPeekLockComplete(t *testing.T) {
	e := newEnv(t)
	e.queue("orders")
	status, _, body := e.do("POST", "/orders/messages", "hello, REST",
		"Content-Type", "text/plain",
		"BrokerProperties", `{"Label":"M1","MessageId":"m-1","CorrelationId":"c-1","TimeToLive":90,"ReplyTo":"replies","To":"dest"}`,
		"Priority", `"High"`, "Customer", "12345,ABC", "Count", "42", "Ratio", "0.5", "Vip", "true")
	if status != http.StatusCreated {
		t.Fatalf("send: %d %s", status, body)
	}
	status, h, body := e.do("POST", "/orders/messages/head?timeout=0", "")
	if status != http.StatusCreated || body != "hello, REST" {
		t.Fatalf("peek-lock: %d %q", status, body)
	}
	if ct := h.Get("Content-Type"); ct != "text/plain" {
		t.Errorf("Content-Type = %q", ct)
	}
	bp := brokerProps(t, h)
	for k, want := range map[string]any{"Label": "M1", "MessageId": "m-1", "CorrelationId": "c-1", "TimeToLive": 90.0,
		"ReplyTo": "replies", "To": "dest", "DeliveryCount": 1.0, "SequenceNumber": 1.0, "State": "Active",
		"EnqueuedTimeUtc": t0.Format(http.TimeFormat), "LockedUntilUtc": t0.Add(time.Minute).Format(http.TimeFormat)} {
		if bp[k] != want {
			t.Errorf("BrokerProperties %s = %v, want %v", k, bp[k], want)
		}
	}
	tok, _ := bp["LockToken"].(string)
	if tok == "" {
		t.Fatal("no LockToken")
	}
	for k, want := range map[string]string{"Priority": `"High"`, "Customer": `"12345,ABC"`, "Count": "42", "Ratio": "0.5", "Vip": "true"} {
		if got := h.Get(k); got != want {
			t.Errorf("header %s = %s, want %s", k, got, want)
		}
	}
	if got := h.Get("User-Agent"); got != "" {
		t.Errorf("the User-Agent became a property: %q", got)
	}
	loc := locPath(t, h)
	if loc != "/orders/messages/1/"+tok {
		t.Errorf("Location path = %s", loc)
	}
	// Operators see who holds the lock: this HTTP client.
	if ds, err := e.b.Inspect(context.Background(), "orders", 1, 1); err != nil || len(ds) != 1 || !strings.HasPrefix(ds[0].LockHolder, "http ") {
		t.Errorf("lock holder: %v %v", ds, err)
	}
	// Nothing else is available while the message is locked.
	if status, _, _ := e.do("POST", "/orders/messages/head?timeout=0", ""); status != http.StatusNoContent {
		t.Errorf("second peek-lock: %d, want 204", status)
	}
	if status, _, body := e.do("POST", loc, ""); status != http.StatusOK {
		t.Errorf("renew: %d %s", status, body)
	}
	if status, _, body := e.do("DELETE", loc, ""); status != http.StatusOK {
		t.Fatalf("complete: %d %s", status, body)
	}
	if qi, _ := e.b.GetQueue("orders"); qi.Counts.Active != 0 {
		t.Errorf("after complete: %d active", qi.Counts.Active)
	}
	// The lock is gone: 404, as for any unknown lock token.
	e.fails(http.StatusNotFound, "DELETE", loc, "")
}

func TestDataPlaneUnlockAndLockExpiry(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	if status, _, body := e.do("POST", "/q/messages", "x"); status != http.StatusCreated {
		t.Fatalf("send: %d %s", status, body)
	}
	_, h, _ := e.do("POST", "/q/messages/head?timeout=0", "")
	if status, _, body := e.do("PUT", locPath(t, h), ""); status != http.StatusOK {
		t.Fatalf("unlock: %d %s", status, body)
	}
	status, h, _ := e.do("POST", "/q/messages/head?timeout=0", "")
	if status != http.StatusCreated || brokerProps(t, h)["DeliveryCount"] != 2.0 {
		t.Fatalf("after unlock: %d %v", status, h.Get("BrokerProperties"))
	}
	// The lock expires with the (fake) clock: completing is then 404.
	e.clk.Advance(2 * time.Minute)
	e.fails(http.StatusNotFound, "DELETE", locPath(t, h), "")
	if status, _, _ := e.do("DELETE", "/q/messages/head?timeout=0", ""); status != http.StatusOK {
		t.Errorf("receive-and-delete after the lock expired: %d", status)
	}
}

func TestDataPlaneBatchAndReceiveAndDelete(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	batch := `[{"Body":"first","BrokerProperties":{"Label":"M1","TimeToLiveTimeSpan":"0.00:00:40"}},
	 {"Body":"second","UserProperties":{"Priority":"Low","N":7,"F":1.5,"B":false}},
	 {"Body":"third","BrokerProperties":{"Label":"M3"},"UserProperties":{"Priority":"Medium","Customer":"ABC"}}]`
	if status, _, body := e.do("POST", "/q/messages", batch, "Content-Type", "application/vnd.microsoft.servicebus.json"); status != http.StatusCreated {
		t.Fatalf("batch: %d %s", status, body)
	}
	var got []string
	for range 3 {
		status, h, body := e.do("DELETE", "/q/messages/head?timeout=0", "")
		if status != http.StatusOK {
			t.Fatalf("receive-and-delete: %d %s", status, body)
		}
		bp := brokerProps(t, h)
		if _, ok := bp["LockToken"]; ok || h.Get("Location") != "" {
			t.Errorf("receive-and-delete answer carries a lock: %v %s", bp, h.Get("Location"))
		}
		switch body {
		case "first":
			if bp["Label"] != "M1" || bp["TimeToLive"] != 40.0 {
				t.Errorf("first: %v", bp)
			}
		case "second":
			if h.Get("Priority") != `"Low"` || h.Get("N") != "7" || h.Get("F") != "1.5" || h.Get("B") != "false" {
				t.Errorf("second's headers: %v", h)
			}
		case "third":
			if bp["Label"] != "M3" || h.Get("Customer") != `"ABC"` {
				t.Errorf("third: %v %v", bp, h)
			}
		}
		got = append(got, body)
	}
	if strings.Join(got, ",") != "first,second,third" {
		t.Errorf("order: %v", got)
	}
	if status, _, _ := e.do("DELETE", "/q/messages/head?timeout=0", ""); status != http.StatusNoContent {
		t.Errorf("empty queue: %d", status)
	}
	if qi, _ := e.b.GetQueue("q"); qi.Counts.Active != 0 {
		t.Errorf("after receive-and-delete: %d active", qi.Counts.Active)
	}
}

func TestDataPlaneSubscription(t *testing.T) {
	e := newEnv(t)
	if _, err := e.b.CreateTopic("events", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if _, err := e.b.CreateSubscription("events", s, broker.DefaultSubscriptionProperties(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if status, _, body := e.do("POST", "/events/messages", "fan out", "Region", `"eu"`); status != http.StatusCreated {
		t.Fatalf("send to topic: %d %s", status, body)
	}
	for _, s := range []string{"a", "b"} {
		status, h, body := e.do("POST", "/events/subscriptions/"+s+"/messages/head?timeout=0", "")
		if status != http.StatusCreated || body != "fan out" || h.Get("Region") != `"eu"` {
			t.Fatalf("subscription %s: %d %q %v", s, status, body, h)
		}
		if status, _, body := e.do("DELETE", locPath(t, h), ""); status != http.StatusOK {
			t.Fatalf("complete on %s: %d %s", s, status, body)
		}
	}
	// A subscription takes no sends, a topic no receives.
	e.fails(http.StatusBadRequest, "POST", "/events/subscriptions/a/messages", "x")
	e.fails(http.StatusBadRequest, "POST", "/events/messages/head?timeout=0", "")
}

func TestDataPlaneErrors(t *testing.T) {
	e := newEnv(t)
	e.queue("small", func(p *broker.QueueProperties) { p.MaxMessageSizeInKilobytes = 1 })
	e.queue("q")
	e.fails(http.StatusGone, "POST", "/nosuch/messages", "x")
	e.fails(http.StatusGone, "POST", "/nosuch/messages/head?timeout=0", "")
	e.fails(http.StatusForbidden, "POST", "/small/messages", strings.Repeat("x", 2048))
	e.fails(http.StatusForbidden, "POST", "/small/messages", strings.Repeat("x", 200<<10))
	e.fails(http.StatusBadRequest, "POST", "/q/messages", "x", "BrokerProperties", `{"Label":`)
	e.fails(http.StatusBadRequest, "POST", "/q/messages", "x", "BrokerProperties", `{"TimeToLive":"soon"}`, "~TimeToLive")
	e.fails(http.StatusBadRequest, "POST", "/q/messages", "x", "BrokerProperties", `{"TimeToLive":-1}`)
	e.fails(http.StatusBadRequest, "POST", "/q/messages", `{"Body":"x"}`, "Content-Type", contentTypeBatch, "~array")
	e.fails(http.StatusBadRequest, "POST", "/q/messages", `[]`, "Content-Type", contentTypeBatch)
	e.fails(http.StatusBadRequest, "POST", "/q/messages", `[{"Body":"x","UserProperties":{"o":{}}}]`, "Content-Type", contentTypeBatch, "~UserProperties")
	e.fails(http.StatusBadRequest, "POST", "/q/messages/head?timeout=x", "", "~timeout")
	e.fails(http.StatusBadRequest, "POST", "/q/messages/head?timeout=601", "", "~timeout")
	e.fails(http.StatusNotFound, "DELETE", "/q/messages/1/0b0e3a04-8f2c-4c55-9d4d-2a0a4bd6f0c1", "")
	e.fails(http.StatusNotFound, "PUT", "/q/messages/1/0b0e3a04-8f2c-4c55-9d4d-2a0a4bd6f0c1", "")
	// Nothing of these was stored.
	if qi, _ := e.b.GetQueue("q"); qi.Counts.Active != 0 {
		t.Errorf("%d messages stored by failed sends", qi.Counts.Active)
	}
	// Management requests still reach the management API.
	if status, _, body := e.do("GET", "/q", ""); status != http.StatusOK {
		t.Errorf("GET /q: %d %s", status, body)
	}
}

func TestDataPlaneAuth(t *testing.T) {
	e := newEnvWith(t, auth.Config{Policies: []auth.Policy{
		auth.DefaultPolicy(),
		{Name: "sender", PrimaryKey: "send-key", Rights: auth.Send},
		{Name: "listener", PrimaryKey: "listen-key", Rights: auth.Listen},
	}})
	e.queue("q")
	e.queue("other")
	tok := func(name, key, entity string) string {
		return auth.NewToken(name, key, "https://"+e.host+"/"+entity, time.Now().Add(time.Hour))
	}
	e.fails(http.StatusUnauthorized, "POST", "/q/messages", "x", "Authorization", "", "~MissingToken")
	e.fails(http.StatusUnauthorized, "POST", "/q/messages", "x", "Authorization", tok("listener", "listen-key", "q"), "~'Send'")
	e.fails(http.StatusUnauthorized, "POST", "/q/messages/head?timeout=0", "", "Authorization", tok("sender", "send-key", "q"), "~'Listen'")
	e.fails(http.StatusUnauthorized, "POST", "/q/messages", "x", "Authorization", tok("sender", "send-key", "other"))
	if status, _, body := e.do("POST", "/q/messages", "x", "Authorization", tok("sender", "send-key", "q")); status != http.StatusCreated {
		t.Fatalf("send with Send: %d %s", status, body)
	}
	status, h, _ := e.do("POST", "/q/messages/head?timeout=0", "", "Authorization", tok("listener", "listen-key", "q"))
	if status != http.StatusCreated {
		t.Fatalf("receive with Listen: %d", status)
	}
	e.fails(http.StatusUnauthorized, "DELETE", locPath(t, h), "", "Authorization", tok("sender", "send-key", "q"))
	if status, _, body := e.do("DELETE", locPath(t, h), "", "Authorization", tok("listener", "listen-key", "q")); status != http.StatusOK {
		t.Fatalf("complete with Listen: %d %s", status, body)
	}
	// Without Manage, the management API stays closed.
	e.fails(http.StatusUnauthorized, "GET", "/q", "", "Authorization", tok("sender", "send-key", "q"))
}

// TestDataPlaneLongPoll: a receive with a timeout waits for a message sent
// later, and one still waiting ends (503) when the server stops waiting.
func TestDataPlaneLongPoll(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	type result struct {
		status int
		body   string
	}
	got := make(chan result, 1)
	go func() {
		status, _, body := e.do("DELETE", "/q/messages/head?timeout=30", "")
		got <- result{status, body}
	}()
	// Wait until the receive is waiting, then send.
	deadline := time.Now().Add(10 * time.Second)
	for len(e.h.waiters.sem) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the receive never waited")
		}
		time.Sleep(time.Millisecond)
	}
	if status, _, body := e.do("POST", "/q/messages", "late"); status != http.StatusCreated {
		t.Fatalf("send: %d %s", status, body)
	}
	select {
	case r := <-got:
		if r.status != http.StatusOK || r.body != "late" {
			t.Fatalf("long poll: %d %q", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting receive did not get the message")
	}

	go func() {
		status, _, body := e.do("POST", "/q/messages/head?timeout=30", "")
		got <- result{status, body}
	}()
	for len(e.h.waiters.sem) == 0 {
		time.Sleep(time.Millisecond)
	}
	e.h.StopWaiting()
	select {
	case r := <-got:
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("after StopWaiting: %d %q", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("StopWaiting did not end the waiting receive")
	}
}

func TestParseDataPath(t *testing.T) {
	const lock = "0b0e3a04-8f2c-4c55-9d4d-2a0a4bd6f0c1"
	for _, c := range []struct {
		method, path string
		op           dataOp
		entity       string
	}{
		{"POST", "q/messages", opSend, "q"},
		{"POST", "a/b/Messages", opSend, "a/b"},
		{"POST", "t/subscriptions/s/messages/head", opPeekLock, "t/subscriptions/s"},
		{"DELETE", "q/messages/head", opReceiveDelete, "q"},
		{"PUT", "q/messages/5/" + lock, opUnlock, "q"},
		{"DELETE", "q/messages/some-id/" + lock, opComplete, "q"},
		{"POST", "q/messages/5/" + lock, opRenew, "q"},
		{"GET", "q/messages", 0, ""},
		{"PUT", "q/messages", 0, ""},
		{"DELETE", "q/messages", 0, ""},
		{"PUT", "q/messages/head", 0, ""},
		{"DELETE", "q/messages/5/not-a-lock", 0, ""},
		{"POST", "messages", 0, ""},
		{"GET", "q/messages/5/" + lock, 0, ""},
	} {
		dr, ok := parseDataPath(c.method, c.path)
		if ok != (c.op != 0) || dr.op != c.op || dr.entity != c.entity {
			t.Errorf("%s %s = %+v, %v; want op %d on %q", c.method, c.path, dr, ok, c.op, c.entity)
		}
	}
}

// TestDataPlaneDeadLetterQueue: a dead-letter queue is an entity path like
// any other for receives and settlement.
func TestDataPlaneDeadLetterQueue(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	if status, _, body := e.do("POST", "/q/messages", "poison"); status != http.StatusCreated {
		t.Fatalf("send: %d %s", status, body)
	}
	_, h, _ := e.do("POST", "/q/messages/head?timeout=0", "")
	tok, err := uuid.Parse(brokerProps(t, h)["LockToken"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.DeadLetter(t.Context(), "q", tok, "bad", "unreadable", nil); err != nil {
		t.Fatal(err)
	}
	status, h, body := e.do("POST", "/q/$DeadLetterQueue/messages/head?timeout=0", "")
	if status != http.StatusCreated || body != "poison" {
		t.Fatalf("dead-letter peek-lock: %d %q", status, body)
	}
	if h.Get("DeadLetterReason") != `"bad"` {
		t.Errorf("DeadLetterReason header: %q", h.Get("DeadLetterReason"))
	}
	if status, _, body := e.do("DELETE", locPath(t, h), ""); status != http.StatusOK {
		t.Fatalf("complete in the dead-letter queue: %d %s", status, body)
	}
}
