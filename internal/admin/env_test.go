package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// env is a Handler on a broker with a memstore and a fake clock, served by
// a TLS test server on loopback (the Go admin client always speaks https).
type env struct {
	t    *testing.T
	clk  *clock.Fake
	b    *broker.Broker
	h    *Handler
	srv  *httptest.Server
	host string // 127.0.0.1:port
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, auth.Config{})
}

func newEnvWith(t *testing.T, ac auth.Config) *env {
	t.Helper()
	e := &env{t: t, clk: clock.NewFake(t0)}
	st := memstore.New()
	var err error
	e.b, err = broker.Open(broker.Options{Store: st, Clock: e.clk})
	if err != nil {
		t.Fatalf("broker.Open: %v", err)
	}
	// Tokens are checked against the wall clock: the SDK signs them
	// with real expiry times.
	a, err := auth.New(ac)
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	e.h, err = New(Options{Broker: e.b, Auth: a, Clock: e.clk, Namespace: "testns"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = httptest.NewTLSServer(e.h)
	e.host = e.srv.Listener.Addr().String()
	t.Cleanup(func() {
		e.srv.Close()
		if err := e.b.Close(); err != nil {
			t.Errorf("broker.Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store.Close: %v", err)
		}
	})
	return e
}

// queue creates a queue through the broker, with default properties
// changed by mods.
func (e *env) queue(name string, mods ...func(*broker.QueueProperties)) {
	e.t.Helper()
	p := broker.DefaultQueueProperties()
	for _, m := range mods {
		m(&p)
	}
	if _, err := e.b.CreateQueue(name, p); err != nil {
		e.t.Fatalf("CreateQueue(%q): %v", name, err)
	}
}

// token is a namespace-wide token of the default policy, as .NET signs
// management requests.
func (e *env) token() string {
	return auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "https://"+e.host, time.Now().Add(time.Hour))
}

// do sends a raw request to the test server with headers given as name,
// value pairs, and returns the status and body.
func (e *env) do(method, path, body string, headers ...string) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", e.token())
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}
