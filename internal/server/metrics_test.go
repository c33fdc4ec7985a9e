package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

const emulatorKey = "SAS_KEY_VALUE"

func connectionString(s *Server) string {
	return "Endpoint=sb://" + s.AMQPAddr().String() + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=" + emulatorKey + ";UseDevelopmentEmulator=true;"
}

// scrape GETs /metrics with the given Authorization header ("" for none)
// and returns the status and the exposition.
func scrape(t *testing.T, s *Server, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricsToken is what a Prometheus scrape config puts in its
// authorization: a SAS token of a policy with Manage, for the namespace.
func metricsToken(s *Server) string {
	return auth.NewToken("RootManageSharedAccessKey", emulatorKey, "sb://"+s.HTTPAddr().String()+"/", time.Now().Add(time.Hour))
}

// series returns the value of the sample whose name and labels are
// exactly series (as written in the exposition: name{l="v",…}).
func series(body, name string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

func wantSeries(t *testing.T, body, name string, want float64) {
	t.Helper()
	got, ok := series(body, name)
	if !ok {
		t.Errorf("%s: missing", name)
		return
	}
	if got != want {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

func wantSeriesAtLeast(t *testing.T, body, name string, min float64) {
	t.Helper()
	got, ok := series(body, name)
	if !ok {
		t.Errorf("%s: missing", name)
		return
	}
	if got < min {
		t.Errorf("%s = %v, want at least %v", name, got, min)
	}
}

func TestMetricsAfterTraffic(t *testing.T) {
	s := start(t, Options{Server: config.Server{DataDir: t.TempDir()}})
	defer stop(t, s)
	b := s.Broker()
	if _, err := b.CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateTopic("events", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSubscription("events", "eu", broker.DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("m" + strconv.Itoa(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	topicSender, err := client.NewSender("events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := topicSender.SendMessage(ctx, &azservicebus.Message{Body: []byte("e")}, nil); err != nil {
		t.Fatal(err)
	}
	// A send to an entity that does not exist is the client's error.
	bad, err := client.NewSender("no-such-queue", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err == nil {
		t.Fatal("send to a missing queue succeeded")
	}

	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []*azservicebus.ReceivedMessage
	for len(got) < 3 {
		ms, err := receiver.ReceiveMessages(ctx, 3-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	if err := receiver.CompleteMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := receiver.AbandonMessage(ctx, got[1], nil); err != nil {
		t.Fatal(err)
	}
	if err := receiver.DeadLetterMessage(ctx, got[2], nil); err != nil {
		t.Fatal(err)
	}
	if err := receiver.Close(ctx); err != nil {
		t.Fatal(err)
	}

	code, body := scrape(t, s, metricsToken(s))
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", code, body)
	}
	// Counters, per entity.
	wantSeries(t, body, `busbar_incoming_messages_total{entity="orders"}`, 4)
	wantSeries(t, body, `busbar_incoming_messages_total{entity="events"}`, 1)
	wantSeriesAtLeast(t, body, `busbar_outgoing_messages_total{entity="orders"}`, 3)
	wantSeries(t, body, `busbar_complete_message_total{entity="orders"}`, 1)
	wantSeries(t, body, `busbar_abandon_message_total{entity="orders"}`, 1)
	wantSeries(t, body, `busbar_deadlettered_messages_total{entity="orders"}`, 1)
	// Gauges read from the broker: one never received, one abandoned,
	// one dead-lettered.
	wantSeries(t, body, `busbar_active_messages{entity="orders"}`, 2)
	wantSeries(t, body, `busbar_deadlettered_messages{entity="orders"}`, 1)
	wantSeries(t, body, `busbar_scheduled_messages{entity="orders"}`, 0)
	wantSeriesAtLeast(t, body, `busbar_size_bytes{entity="orders"}`, 3)
	wantSeries(t, body, `busbar_active_messages{entity="events/Subscriptions/eu"}`, 1)
	wantSeries(t, body, `busbar_scheduled_messages{entity="events"}`, 0)
	// Namespace-wide.
	wantSeriesAtLeast(t, body, `busbar_connections_opened_total`, 1)
	wantSeriesAtLeast(t, body, `busbar_active_connections`, 1)
	wantSeriesAtLeast(t, body, `busbar_user_errors_total`, 1)
	wantSeries(t, body, `busbar_server_errors_total`, 0)
	wantSeries(t, body, `busbar_throttled_requests_total`, 0)
	wantSeriesAtLeast(t, body, `busbar_send_seconds_count`, 5)
	wantSeriesAtLeast(t, body, `busbar_settle_seconds_count`, 3)
	wantSeriesAtLeast(t, body, `busbar_store_fsync_seconds_count`, 1)
	wantSeriesAtLeast(t, body, `busbar_store_group_commit_size_count`, 1)
	wantSeriesAtLeast(t, body, `busbar_store_bytes`, 1)
	wantSeriesAtLeast(t, body, `go_goroutines`, 1)
	wantSeriesAtLeast(t, body, `go_memstats_heap_alloc_bytes`, 1)

	// Closing the client closes its connection.
	if err := client.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body = scrape(t, s, metricsToken(s))
		if v, _ := series(body, "busbar_active_connections"); v == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantSeries(t, body, `busbar_active_connections`, 0)
	wantSeriesAtLeast(t, body, `busbar_connections_closed_total`, 1)

	// A deleted entity's series go with it.
	if err := b.DeleteQueue("orders"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteSubscription("events", "eu"); err != nil {
		t.Fatal(err)
	}
	_, body = scrape(t, s, metricsToken(s))
	for _, gone := range []string{`entity="orders"`, `entity="events/Subscriptions/eu"`} {
		if strings.Contains(body, gone) {
			t.Errorf("after deletion the exposition still has %s", gone)
		}
	}
	wantSeries(t, body, `busbar_incoming_messages_total{entity="events"}`, 1)
}

func TestMetricsNeedAuthentication(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}})
	defer stop(t, s)
	if code, body := scrape(t, s, ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s, want 401", code, body)
	}
	wrong := auth.NewToken("RootManageSharedAccessKey", "not-the-key", "sb://"+s.HTTPAddr().String()+"/", time.Now().Add(time.Hour))
	if code, _ := scrape(t, s, wrong); code != http.StatusUnauthorized {
		t.Errorf("with a badly signed token: %d, want 401", code)
	}
	if code, body := scrape(t, s, "Bearer "+metricsToken(s)); code != http.StatusUnauthorized {
		t.Errorf("with a bearer token: %d %s, want 401", code, body)
	}
	if code, body := scrape(t, s, metricsToken(s)); code != http.StatusOK || !strings.Contains(body, "busbar_active_connections") {
		t.Errorf("with a token: %d, want 200 and the metrics", code)
	}
	// With api-version the admin API answers for an entity named
	// "metrics" (there is none).
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr().String()+"/metrics?api-version=2021-05", nil)
	req.Header.Set("Authorization", metricsToken(s))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "<Error>") {
		t.Errorf("GET /metrics?api-version = %d %s, want the admin API's 404", resp.StatusCode, body)
	}
	// The three 401s and the 404 are the clients' errors.
	_, text := scrape(t, s, metricsToken(s))
	wantSeries(t, text, `busbar_user_errors_total`, 4)
	wantSeries(t, text, `busbar_server_errors_total`, 0)
}

func TestMetricsOverHTTPS(t *testing.T) {
	s := start(t, Options{Server: config.Server{DataDir: t.TempDir(), DevTLS: true, HTTPSAddr: "127.0.0.1:0"}})
	defer stop(t, s)
	pem, err := os.ReadFile(s.DevCertificate())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {metricsToken(s), http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+s.HTTPSAddr().String()+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", tc.token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == http.StatusOK && !strings.Contains(string(body), "busbar_store_bytes")) {
			t.Errorf("GET https /metrics (token %v) = %d, want %d", tc.token != "", resp.StatusCode, tc.want)
		}
	}
}

func TestMetricsSendOnlyPolicyRefused(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, Policies: "admin=admin-key:Manage; app=app-key:Send,Listen"}})
	defer stop(t, s)
	aud := "sb://" + s.HTTPAddr().String() + "/"
	if code, _ := scrape(t, s, auth.NewToken("app", "app-key", aud, time.Now().Add(time.Hour))); code != http.StatusUnauthorized {
		t.Errorf("Send|Listen token: %d, want 401", code)
	}
	if code, _ := scrape(t, s, auth.NewToken("admin", "admin-key", aud, time.Now().Add(time.Hour))); code != http.StatusOK {
		t.Errorf("Manage token: %d, want 200", code)
	}
}

func TestMetricsOpen(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, MetricsOpen: true}})
	defer stop(t, s)
	if code, body := scrape(t, s, ""); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("--metrics-open without a token: %d, want 200 and the metrics", code)
	}
}
