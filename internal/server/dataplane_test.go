package server

// The HTTP data plane against a running server, with the official Go SDK
// on the other side: a message sent with plain HTTP is received over AMQP
// with its properties, and one sent over AMQP is received with HTTP.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

func TestHTTPDataPlaneWithSDK(t *testing.T) {
	s := start(t, Options{Server: config.Server{DataDir: t.TempDir()}})
	defer stop(t, s)
	if _, err := s.Broker().CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.HTTPAddr().String()
	hc := &http.Client{Timeout: 20 * time.Second}
	do := func(method, path, body string, headers ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, base+"/orders", time.Now().Add(time.Hour)))
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	// HTTP → SDK.
	resp, body := do("POST", "/orders/messages", `{"id":1}`, "Content-Type", "application/json",
		"BrokerProperties", `{"Label":"new-order","MessageId":"order-1"}`, "Priority", `"High"`, "Attempt", "3")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("HTTP send: %d %s", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := "Endpoint=sb://" + s.AMQPAddr().String() + ";SharedAccessKeyName=" + auth.DefaultKeyName + ";SharedAccessKey=" + auth.DefaultKey + ";UseDevelopmentEmulator=true;"
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	rcv, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	ms, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("SDK receive: %v (%d)", err, len(ms))
	}
	m := ms[0]
	if string(m.Body) != `{"id":1}` || m.MessageID != "order-1" || m.Subject == nil || *m.Subject != "new-order" ||
		m.ContentType == nil || *m.ContentType != "application/json" || m.ApplicationProperties["Priority"] != "High" || m.ApplicationProperties["Attempt"] != int64(3) {
		t.Errorf("SDK got body %q id %q subject %v content type %v props %v", m.Body, m.MessageID, m.Subject, m.ContentType, m.ApplicationProperties)
	}
	if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}

	// SDK → HTTP.
	snd, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	subject := "shipped"
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("from AMQP"), Subject: &subject,
		ApplicationProperties: map[string]any{"region": "eu", "n": int32(7)}}, nil); err != nil {
		t.Fatal(err)
	}
	resp, body = do("POST", "/orders/messages/head?timeout=10", "")
	if resp.StatusCode != http.StatusCreated || body != "from AMQP" {
		t.Fatalf("HTTP peek-lock: %d %q", resp.StatusCode, body)
	}
	var bp map[string]any
	if err := json.Unmarshal([]byte(resp.Header.Get("BrokerProperties")), &bp); err != nil || bp["Label"] != "shipped" {
		t.Errorf("BrokerProperties %s (%v)", resp.Header.Get("BrokerProperties"), err)
	}
	if resp.Header.Get("Region") != `"eu"` || resp.Header.Get("N") != "7" {
		t.Errorf("custom properties: %v", resp.Header)
	}
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, base+"/orders/messages/") {
		t.Fatalf("Location %q", loc)
	}
	if resp, body := do("DELETE", strings.TrimPrefix(loc, base), ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP complete: %d %s", resp.StatusCode, body)
	}
	if qi, _ := s.Broker().GetQueue("orders"); qi.Counts.Active != 0 {
		t.Errorf("%d messages left", qi.Counts.Active)
	}

	// A receive still waiting when the server shuts down does not hold
	// the shutdown for its timeout.
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("DELETE", base+"/orders/messages/head?timeout=600", nil)
		req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, base+"/orders", time.Now().Add(time.Hour)))
		resp, err := hc.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond) // let the receive start waiting (either way the test holds)
	start := time.Now()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if err := client.Close(stopCtx); err != nil {
		t.Log(err)
	}
	if err := s.Shutdown(stopCtx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	if code := <-done; code != http.StatusServiceUnavailable && code != 0 {
		t.Errorf("waiting receive at shutdown: %d", code)
	}
}
