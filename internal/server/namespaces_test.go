package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	amqp "github.com/Azure/go-amqp"
	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// twoNamespaces declares "sbemulatorns" (the default) and "other", each
// with a queue "orders"; "other" also has "extra".
const twoNamespaces = `{"UserConfig": {"Namespaces": [
  {"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]},
  {"Name": "other", "Queues": [{"Name": "orders"}, {"Name": "extra"}]}
]}}`

func loadConfig(t *testing.T, text string) *config.EmulatorConfig {
	t.Helper()
	ec, err := config.LoadEmulatorConfig(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return ec
}

// nsConnectionString is the connection string of namespace host (a name
// such as "other.localhost") on the server's AMQP port, with key name
// keyName and the emulator's key, and the options that make the SDK dial
// the loopback address whatever the host resolves to.
func nsConnectionString(s *Server, host, keyName string) (string, *azservicebus.ClientOptions) {
	_, port, _ := net.SplitHostPort(s.AMQPAddr().String())
	cs := "Endpoint=sb://" + host + ":" + port + ";SharedAccessKeyName=" + keyName + ";SharedAccessKey=" + emulatorKey + ";UseDevelopmentEmulator=true;"
	return cs, &azservicebus.ClientOptions{CustomEndpoint: "127.0.0.1:" + port}
}

// sendTo sends one message with body to queue over a new client.
func sendTo(t *testing.T, cs string, opts *azservicebus.ClientOptions, queue, body string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(cs, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender(queue, nil)
	if err != nil {
		return err
	}
	defer sender.Close(ctx)
	return sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil)
}

// peekAll returns the bodies of the messages in queue, by peeking.
func peekAll(t *testing.T, cs string, opts *azservicebus.ClientOptions, queue string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(cs, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	msgs, err := rcv.PeekMessages(ctx, 100, nil)
	if err != nil {
		t.Fatalf("peek %s: %v", queue, err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

func wantBodies(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s: messages %q, want %q", what, got, want)
	}
}

// activeIn is the active message count of queue in namespace name.
func activeIn(t *testing.T, s *Server, name, queue string) int64 {
	t.Helper()
	n := s.ns.byName[strings.ToLower(name)]
	if n == nil {
		t.Fatalf("no namespace %q", name)
	}
	q, err := n.broker.GetQueue(queue)
	if err != nil {
		t.Fatalf("namespace %s, queue %s: %v", name, queue, err)
	}
	return q.Counts.Active
}

// The Go SDK connects to each namespace by its host name; the same queue
// name in two namespaces is two queues.
func TestNamespacesByHostName(t *testing.T) {
	s := start(t, Options{Server: config.Server{DataDir: t.TempDir(), MetricsOpen: true}, Entities: loadConfig(t, twoNamespaces)})
	defer stop(t, s)

	def := connectionString(s) // 127.0.0.1: the default namespace
	other, opts := nsConnectionString(s, "other.localhost", auth.DefaultKeyName)
	named, nopts := nsConnectionString(s, "sbemulatorns.localhost", auth.DefaultKeyName)
	if err := sendTo(t, def, nil, "orders", "to-default"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo(t, other, opts, "orders", "to-other"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo(t, named, nopts, "orders", "to-default-by-name"); err != nil {
		t.Fatal(err)
	}
	wantBodies(t, "default orders", peekAll(t, def, nil, "orders"), "to-default", "to-default-by-name")
	wantBodies(t, "other orders", peekAll(t, other, opts, "orders"), "to-other")

	// "extra" is only in "other".
	if err := sendTo(t, other, opts, "extra", "x"); err != nil {
		t.Fatalf("send to other's extra: %v", err)
	}
	err := sendTo(t, def, nil, "extra", "x")
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeNotFound {
		t.Fatalf("send to extra in the default namespace: %v, want not found", err)
	}

	// Metrics: each namespace's series carry its name.
	_, body := scrape(t, s, "")
	wantSeries(t, body, `busbar_incoming_messages_total{entity="orders",namespace="sbemulatorns"}`, 2)
	wantSeries(t, body, `busbar_incoming_messages_total{entity="orders",namespace="other"}`, 1)
	wantSeries(t, body, `busbar_incoming_messages_total{entity="extra",namespace="other"}`, 1)
	if _, ok := series(body, `busbar_incoming_messages_total{entity="extra",namespace="sbemulatorns"}`); ok {
		t.Error("the default namespace has a series for other's queue extra")
	}
}

// cbsConn is a raw go-amqp connection that puts tokens on $cbs.
type cbsConn struct {
	t    *testing.T
	ctx  context.Context
	conn *amqp.Conn
	sess *amqp.Session
	snd  *amqp.Sender
	rcv  *amqp.Receiver
}

func dialCBS(t *testing.T, s *Server, hostName string) *cbsConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	conn, err := amqp.Dial(ctx, "amqp://"+s.AMQPAddr().String(), &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), HostName: hostName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "$cbs", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "$cbs", &amqp.ReceiverOptions{TargetAddress: "cbs-reply", Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return &cbsConn{t: t, ctx: ctx, conn: conn, sess: sess, snd: snd, rcv: rcv}
}

// put puts a SAS token for audience signed with keyName and the
// emulator's key, and returns the status code and description.
func (c *cbsConn) put(audience, keyName string) (int32, string) {
	c.t.Helper()
	return c.putKey(audience, keyName, emulatorKey)
}

// putKey is put with a token signed with key.
func (c *cbsConn) putKey(audience, keyName, key string) (int32, string) {
	c.t.Helper()
	reply := "cbs-reply"
	tok := auth.NewToken(keyName, key, audience, time.Now().Add(time.Hour))
	req := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: uuid.NewString(), ReplyTo: &reply},
		ApplicationProperties: map[string]any{"operation": "put-token", "type": auth.TypeSAS, "name": audience},
		Value:                 tok,
	}
	if err := c.snd.Send(c.ctx, req, nil); err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.rcv.Receive(c.ctx, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	_ = c.rcv.AcceptMessage(c.ctx, resp)
	code, _ := resp.ApplicationProperties["status-code"].(int32)
	desc, _ := resp.ApplicationProperties["status-description"].(string)
	return code, desc
}

func (c *cbsConn) send(queue, body string) error {
	snd, err := c.sess.NewSender(c.ctx, queue, nil)
	if err != nil {
		return err
	}
	defer snd.Close(c.ctx)
	return snd.Send(c.ctx, &amqp.Message{Data: [][]byte{[]byte(body)}}, nil)
}

// A connection to an address that names no namespace takes the one its
// first token's audience names, and keeps it: a token for another
// namespace is refused.
func TestNamespacesByTokenAudience(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}, Entities: loadConfig(t, twoNamespaces)})
	defer stop(t, s)
	_, port, _ := net.SplitHostPort(s.AMQPAddr().String())

	c := dialCBS(t, s, "127.0.0.1")
	if code, desc := c.put("amqp://other.localhost:"+port+"/orders", auth.DefaultKeyName); code != 202 {
		t.Fatalf("put-token for other: %d %s", code, desc)
	}
	if err := c.send("orders", "by-audience"); err != nil {
		t.Fatal(err)
	}
	if got := activeIn(t, s, "other", "orders"); got != 1 {
		t.Errorf("other's orders holds %d messages, want 1", got)
	}
	if got := activeIn(t, s, "sbemulatorns", "orders"); got != 0 {
		t.Errorf("the default namespace's orders holds %d messages, want 0", got)
	}
	code, desc := c.put("amqp://sbemulatorns.localhost:"+port+"/orders", auth.DefaultKeyName)
	if code != 401 || !strings.Contains(desc, "namespace 'sbemulatorns'") || !strings.Contains(desc, "works in namespace 'other'") {
		t.Errorf("put-token for another namespace: %d %q, want 401 naming both", code, desc)
	}

	// A connection whose host names a namespace is in it from the start.
	c2 := dialCBS(t, s, "other.localhost")
	if code, desc := c2.put("amqp://sbemulatorns.localhost:"+port+"/orders", auth.DefaultKeyName); code != 401 {
		t.Errorf("put-token for the default namespace on other's connection: %d %s, want 401", code, desc)
	}
}

// With --namespace-per-key-name, the key name alone isolates: each names
// a namespace made on first use with the default namespace's entities,
// up to --max-namespaces.
func TestNamespacePerKeyName(t *testing.T) {
	cfg := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]}]}}`
	dir := t.TempDir()
	s := start(t, Options{Server: config.Server{DataDir: dir, NamespacePerKeyName: true, MaxNamespaces: 3}, Entities: loadConfig(t, cfg)})
	stopped := false
	defer func() {
		if !stopped {
			stop(t, s)
		}
	}()
	run1, opts := nsConnectionString(s, "localhost", "run-1")
	run2, _ := nsConnectionString(s, "localhost", "run-2")
	def, _ := nsConnectionString(s, "localhost", auth.DefaultKeyName)
	for _, c := range []struct{ cs, body string }{{run1, "one"}, {run2, "two"}, {def, "default"}} {
		if err := sendTo(t, c.cs, opts, "orders", c.body); err != nil {
			t.Fatalf("send %s: %v", c.body, err)
		}
	}
	wantBodies(t, "run-1", peekAll(t, run1, opts, "orders"), "one")
	wantBodies(t, "run-2", peekAll(t, run2, opts, "orders"), "two")
	wantBodies(t, "default", peekAll(t, def, opts, "orders"), "default")

	// A key name the default namespace knows as an entity's rule stays
	// in the default namespace.
	q, err := s.Broker().GetQueue("orders")
	if err != nil {
		t.Fatal(err)
	}
	q.Properties.AuthorizationRules = append(q.Properties.AuthorizationRules, broker.AuthorizationRule{KeyName: "orders-sender", PrimaryKey: "rule-key", Rights: []string{"Send"}})
	if _, err := s.Broker().UpdateQueue("orders", q.Properties); err != nil {
		t.Fatal(err)
	}
	ruleCS := strings.Replace(strings.Replace(def, auth.DefaultKeyName, "orders-sender", 1), emulatorKey, "rule-key", 1)
	if err := sendTo(t, ruleCS, opts, "orders", "by-rule"); err != nil {
		t.Fatalf("send with the queue's own rule: %v", err)
	}
	wantBodies(t, "default with a rule's message", peekAll(t, def, opts, "orders"), "default", "by-rule")
	if n := len(s.ns.list()); n != 3 {
		t.Errorf("%d namespaces, want 3 (no namespace for an entity rule's name)", n)
	}

	// A client without the key makes no namespace.
	c := dialCBS(t, s, "localhost")
	if code, desc := c.putKey("amqp://localhost/orders", "run-x", "not-the-key"); code != 401 {
		t.Errorf("a key name's token signed with another key: %d %q, want 401", code, desc)
	}
	if n := len(s.ns.list()); n != 3 {
		t.Errorf("%d namespaces after a token with a wrong key, want 3", n)
	}
	if code, _ := nsRequest(t, s, http.MethodGet, "localhost", "/orders?api-version=2021-05"); code != 200 {
		t.Errorf("admin GET with the default key: %d", code)
	}

	// The bound: 1 declared + 2 made.
	code, desc := c.put("amqp://localhost/orders", "run-3")
	if code == 202 || !strings.Contains(desc, "--max-namespaces") {
		t.Errorf("a fourth namespace: %d %q, want refused naming --max-namespaces", code, desc)
	}
	// A key name that cannot name a namespace.
	code, desc = c.put("amqp://localhost/orders", "-bad")
	if code == 202 || !strings.Contains(desc, "cannot name one") {
		t.Errorf("key name -bad: %d %q, want refused", code, desc)
	}

	// A restart keeps each namespace's messages; made namespaces reopen
	// at their first use.
	stop(t, s)
	stopped = true
	s = start(t, Options{Server: config.Server{DataDir: dir, NamespacePerKeyName: true, MaxNamespaces: 3}, Entities: loadConfig(t, cfg)})
	stopped = false
	run1, opts = nsConnectionString(s, "localhost", "run-1")
	run2, _ = nsConnectionString(s, "localhost", "run-2")
	def, _ = nsConnectionString(s, "localhost", auth.DefaultKeyName)
	wantBodies(t, "run-1 after restart", peekAll(t, run1, opts, "orders"), "one")
	wantBodies(t, "run-2 after restart", peekAll(t, run2, opts, "orders"), "two")
	wantBodies(t, "default after restart", peekAll(t, def, opts, "orders"), "default", "by-rule")
}

// nsRequest is an admin API request to the server's HTTP port with the
// Host header host and a SAS token for it.
func nsRequest(t *testing.T, s *Server, method, host, path string) (int, string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.HTTPAddr().String())
	req, err := http.NewRequest(method, "http://"+s.HTTPAddr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host + ":" + port
	req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, emulatorKey, "http://"+req.Host+"/", time.Now().Add(time.Hour)))
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The admin API works in the namespace its Host header names; a restart
// keeps every namespace's data.
func TestNamespacesAdminAPIAndRestart(t *testing.T) {
	dir := t.TempDir()
	o := Options{Server: config.Server{DataDir: dir}, Entities: loadConfig(t, twoNamespaces)}
	s := start(t, o)
	if code, body := nsRequest(t, s, http.MethodGet, "other.localhost", "/extra?api-version=2021-05"); code != 200 {
		t.Errorf("GET extra in other: %d %s", code, body)
	}
	if code, _ := nsRequest(t, s, http.MethodGet, "localhost", "/extra?api-version=2021-05"); code != 404 {
		t.Errorf("GET extra in the default namespace: %d, want 404", code)
	}
	if code, _ := nsRequest(t, s, http.MethodGet, "sbemulatorns.localhost", "/extra?api-version=2021-05"); code != 404 {
		t.Errorf("GET extra in sbemulatorns: %d, want 404", code)
	}
	if code, body := nsRequest(t, s, http.MethodDelete, "other.localhost", "/orders?api-version=2021-05"); code != 200 {
		t.Fatalf("DELETE orders in other: %d %s", code, body)
	}
	if code, _ := nsRequest(t, s, http.MethodGet, "localhost", "/orders?api-version=2021-05"); code != 200 {
		t.Errorf("GET orders in the default namespace after deleting other's: %d, want 200", code)
	}
	other, opts := nsConnectionString(s, "other.localhost", auth.DefaultKeyName)
	if err := sendTo(t, other, opts, "extra", "kept"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo(t, connectionString(s), nil, "orders", "kept-default"); err != nil {
		t.Fatal(err)
	}
	stop(t, s)

	// Config.json declares "orders" in other again at start-up.
	s = start(t, o)
	defer stop(t, s)
	if got := activeIn(t, s, "other", "extra"); got != 1 {
		t.Errorf("other's extra holds %d messages after a restart, want 1", got)
	}
	if got := activeIn(t, s, "sbemulatorns", "orders"); got != 1 {
		t.Errorf("the default namespace's orders holds %d messages after a restart, want 1", got)
	}
	if got := activeIn(t, s, "other", "orders"); got != 0 {
		t.Errorf("other's orders holds %d messages after a restart, want 0", got)
	}
}

// A data directory written before namespaces existed (by Busbar at
// c7397f3: queue "orders" holding one message) is the default
// namespace's as it is; the other namespaces start empty beside it.
func TestNamespacesOpenDataDirectoryFromBefore(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "datadir-before-namespaces"))); err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{Server: config.Server{DataDir: dir}, Entities: loadConfig(t, twoNamespaces)})
	defer stop(t, s)
	wantBodies(t, "default orders", peekAll(t, connectionString(s), nil, "orders"), "from-before-namespaces")
	other, opts := nsConnectionString(s, "other.localhost", auth.DefaultKeyName)
	wantBodies(t, "other orders", peekAll(t, other, opts, "orders"))
	if _, err := os.Stat(filepath.Join(dir, "namespaces", "other")); err != nil {
		t.Errorf("other's data directory: %v", err)
	}
}

// A namespace's own policies and host names (Config.json Hosts and
// Policies): its keys work in it and nowhere else.
func TestNamespaceHostsAndPolicies(t *testing.T) {
	cfg := `{"UserConfig": {"Namespaces": [
	  {"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]},
	  {"Name": "secure", "Hosts": ["bus.secure.test"], "Policies": "Owner=secret-key", "Queues": [{"Name": "orders"}]}]}}`
	s := start(t, Options{Server: config.Server{Memory: true}, Entities: loadConfig(t, cfg)})
	defer stop(t, s)
	withKey := func(host, keyName, key string) (string, *azservicebus.ClientOptions) {
		cs, opts := nsConnectionString(s, host, keyName)
		return strings.Replace(cs, "SharedAccessKey="+emulatorKey, "SharedAccessKey="+key, 1), opts
	}
	secure, opts := withKey("bus.secure.test", "Owner", "secret-key")
	if err := sendTo(t, secure, opts, "orders", "secret"); err != nil {
		t.Fatalf("send with secure's own key: %v", err)
	}
	wantBodies(t, "secure orders", peekAll(t, secure, opts, "orders"), "secret")
	if got := activeIn(t, s, "sbemulatorns", "orders"); got != 0 {
		t.Errorf("the default namespace's orders holds %d messages, want 0", got)
	}
	for _, c := range []struct{ what, host, keyName, key string }{
		{"the default key in secure", "bus.secure.test", auth.DefaultKeyName, emulatorKey},
		{"secure's key in the default namespace", "localhost", "Owner", "secret-key"},
	} {
		cs, opts := withKey(c.host, c.keyName, c.key)
		err := sendTo(t, cs, opts, "orders", "x")
		var sbErr *azservicebus.Error
		if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
			t.Errorf("%s: %v, want unauthorized", c.what, err)
		}
	}
}

// Below AMQP, the TLS server name and the WebSocket upgrade's Host header
// select the namespace when the open frame's hostname names none.
func TestNamespacesByServerNameAndWebSocketHost(t *testing.T) {
	s := start(t, Options{Server: config.Server{DataDir: t.TempDir(), DevTLS: true, AMQPSAddr: "127.0.0.1:0"}, Entities: loadConfig(t, twoNamespaces)})
	defer stop(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// TLS: SNI other.localhost, open hostname 127.0.0.1. The test checks
	// the choice of namespace, not the certificate (made for localhost).
	tc, err := amqp.Dial(ctx, "amqps://"+s.AMQPSAddr().String(), &amqp.ConnOptions{
		SASLType: amqp.SASLTypeAnonymous(), HostName: "127.0.0.1",
		TLSConfig: &tls.Config{ServerName: "other.localhost", InsecureSkipVerify: true}, //nolint:gosec // a test of SNI routing
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	// WebSocket: Host other.localhost, open hostname 127.0.0.1.
	ws, _, err := websocket.Dial(ctx, "ws://"+s.HTTPAddr().String()+wsPath, &websocket.DialOptions{Subprotocols: []string{"amqp"}, Host: "other.localhost"})
	if err != nil {
		t.Fatal(err)
	}
	wc, err := amqp.NewConn(ctx, websocket.NetConn(context.Background(), ws, websocket.MessageBinary), &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), HostName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()

	_, port, _ := net.SplitHostPort(s.AMQPAddr().String())
	for _, c := range []struct {
		what string
		conn *amqp.Conn
	}{{"tls", tc}, {"websocket", wc}} {
		cc := &cbsConn{t: t, ctx: ctx, conn: c.conn}
		if cc.sess, err = c.conn.NewSession(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if cc.snd, err = cc.sess.NewSender(ctx, "$cbs", nil); err != nil {
			t.Fatal(err)
		}
		if cc.rcv, err = cc.sess.NewReceiver(ctx, "$cbs", &amqp.ReceiverOptions{TargetAddress: "cbs-reply", Credit: 10}); err != nil {
			t.Fatal(err)
		}
		// A token for the default namespace is refused: the connection
		// is in "other" already.
		if code, desc := cc.put("amqp://sbemulatorns.localhost:"+port+"/orders", auth.DefaultKeyName); code != 401 {
			t.Errorf("%s: a token for the default namespace: %d %s, want 401", c.what, code, desc)
		}
		if code, desc := cc.put("amqp://127.0.0.1:"+port+"/orders", auth.DefaultKeyName); code != 202 {
			t.Fatalf("%s: put-token: %d %s", c.what, code, desc)
		}
		if err := cc.send("orders", c.what); err != nil {
			t.Fatalf("%s: send: %v", c.what, err)
		}
	}
	if got := activeIn(t, s, "other", "orders"); got != 2 {
		t.Errorf("other's orders holds %d messages, want 2", got)
	}
	if got := activeIn(t, s, "sbemulatorns", "orders"); got != 0 {
		t.Errorf("the default namespace's orders holds %d messages, want 0", got)
	}
}

// Each namespace has its own test clock: moving one moves no other.
func TestNamespacesOwnTestClock(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, TestClock: true}, Entities: loadConfig(t, twoNamespaces)})
	defer stop(t, s)
	_, port, _ := net.SplitHostPort(s.HTTPAddr().String())
	req, err := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr().String()+"/$time/advance", strings.NewReader(`{"by": "1h"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "other.localhost:" + port
	req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, emulatorKey, "http://"+req.Host+"/", time.Now().Add(time.Hour)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("advance other's clock: %d %s", resp.StatusCode, b)
	}
	other, def := s.ns.byName["other"].broker.Now(), s.Broker().Now()
	if d := other.Sub(def); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("other's clock is %v ahead of the default namespace's, want 1h", d)
	}

	// /health keeps the default namespace's fields and lists each
	// namespace's own test time.
	code, body := get(t, "http://"+s.HTTPAddr().String()+"/health")
	var h struct {
		TestClock  bool   `json:"testClock"`
		TestTime   string `json:"testTime"`
		Namespaces []struct {
			Name, Origin, TestTime string
			Default                bool
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || code != http.StatusOK || !h.TestClock || len(h.Namespaces) != 2 {
		t.Fatalf("GET /health = %d %s", code, body)
	}
	parse := func(s string) time.Time {
		tt, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("/health: %v in %s", err, body)
		}
		return tt
	}
	d0, n0, n1 := parse(h.TestTime), h.Namespaces[0], h.Namespaces[1]
	if n0.Name != "sbemulatorns" || !n0.Default || n0.Origin != "config" || parse(n0.TestTime).Sub(d0).Abs() > time.Minute {
		t.Errorf("/health's default entry %+v (top-level testTime %v)", n0, d0)
	}
	if d := parse(n1.TestTime).Sub(d0); n1.Name != "other" || n1.Default || d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("/health's entry for other %+v is %v ahead, want 1h", n1, d)
	}

	// One namespace: no list, as before.
	one := start(t, Options{Server: config.Server{Memory: true, TestClock: true}})
	defer stop(t, one)
	if _, body := get(t, "http://"+one.HTTPAddr().String()+"/health"); strings.Contains(body, "namespaces") || !strings.Contains(body, "testTime") {
		t.Errorf("/health with one namespace: %s", body)
	}
}
