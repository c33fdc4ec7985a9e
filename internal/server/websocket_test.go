package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/coder/websocket"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

const wsPath = "/$servicebus/websocket"

// wsDialer returns a ClientOptions.NewWebSocketConn as an application
// writes it with coder/websocket: dial the URL the SDK passes (with the
// scheme replaced by ws:// for the plain HTTP listener), subprotocol
// "amqp", binary messages. It checks the URL the SDK asked for.
func wsDialer(t *testing.T, scheme string, hc *http.Client) func(context.Context, azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
	return func(ctx context.Context, args azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
		if !strings.HasPrefix(args.Host, "wss://") || !strings.HasSuffix(args.Host, wsPath) {
			t.Errorf("the SDK asked for %q", args.Host)
		}
		url := scheme + strings.TrimPrefix(args.Host, "wss://")
		ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"amqp"}, HTTPClient: hc})
		if err != nil {
			return nil, err
		}
		// Not ctx: it ends with the operation that made the connection.
		return websocket.NetConn(context.Background(), ws, websocket.MessageBinary), nil
	}
}

func sendReceive(t *testing.T, cs string, opts *azservicebus.ClientOptions, queue, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(cs, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 200<<10) // many frames, many messages
	for _, b := range []string{body, big} {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(b)}, nil); err != nil {
			t.Fatalf("send over WebSocket: %v", err)
		}
	}
	receiver, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{body, big} {
		msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 || string(msgs[0].Body) != want {
			t.Fatalf("receive over WebSocket = %d messages, %v", len(msgs), err)
		}
		if err := receiver.CompleteMessage(ctx, msgs[0], nil); err != nil {
			t.Fatalf("complete over WebSocket: %v", err)
		}
	}
}

// TestWebSocketGoSDK: the Go SDK sends, receives and completes through
// ClientOptions.NewWebSocketConn, over ws:// on the HTTP listener and
// over wss:// on the HTTPS listener (trusting the development
// certificate), with an ordinary connection string naming that listener.
func TestWebSocketGoSDK(t *testing.T) {
	dir := t.TempDir()
	s := start(t, Options{Server: config.Server{DataDir: dir, DevTLS: true, HTTPSAddr: "127.0.0.1:0"}})
	defer stop(t, s)
	if _, err := s.Broker().CreateQueue("ws", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	const key = ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"

	t.Run("ws", func(t *testing.T) {
		cs := "Endpoint=sb://127.0.0.1:" + portOf(t, s.HTTPAddr().String()) + key
		sendReceive(t, cs, &azservicebus.ClientOptions{NewWebSocketConn: wsDialer(t, "ws://", nil)}, "ws", "over ws")
	})
	t.Run("wss", func(t *testing.T) {
		pem, err := os.ReadFile(s.DevCertificate())
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		cs := "Endpoint=sb://localhost:" + portOf(t, s.HTTPSAddr().String()) + key
		sendReceive(t, cs, &azservicebus.ClientOptions{NewWebSocketConn: wsDialer(t, "wss://", hc)}, "ws", "over wss")
	})
}

// dialWSAMQP opens raw go-amqp over a WebSocket to the HTTP listener,
// without SASL.
func dialWSAMQP(ctx context.Context, s *Server) (*goamqp.Conn, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+s.HTTPAddr().String()+wsPath, &websocket.DialOptions{Subprotocols: []string{"amqp"}})
	if err != nil {
		return nil, err
	}
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	c, err := goamqp.NewConn(ctx, nc, &goamqp.ConnOptions{HostName: "localhost"})
	if err != nil {
		_ = nc.Close()
	}
	return c, err
}

// openSession begins a session, which needs the connection to be really
// open: a refused connection is closed right after its open.
func openSession(ctx context.Context, c *goamqp.Conn) error {
	_, err := c.NewSession(ctx, nil)
	return err
}

// TestWebSocketConnectionLimit: WebSocket connections count against
// --max-connections like TCP ones, in both directions. The connections are
// authenticated (AllowAnyKey): an unauthenticated one would give way to a
// newcomer (amqp.Config.MaxUnauthenticatedConnections).
func TestWebSocketConnectionLimit(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, AllowAnyKey: true, MaxConnections: 1}})
	defer stop(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	refused := func(what string, c *goamqp.Conn, err error) {
		t.Helper()
		if err == nil {
			err = openSession(ctx, c)
			_ = c.Close()
		}
		var ce *goamqp.ConnError
		if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded {
			t.Fatalf("%s beyond the limit = %v; want resource-limit-exceeded", what, err)
		}
	}

	ws1, err := dialWSAMQP(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := openSession(ctx, ws1); err != nil {
		t.Fatalf("first WebSocket connection: %v", err)
	}
	tcp, err := goamqp.Dial(ctx, "amqp://"+s.AMQPAddr().String(), nil)
	refused("a TCP connection", tcp, err)
	ws2, err := dialWSAMQP(ctx, s)
	refused("a second WebSocket connection", ws2, err)

	// Closing the WebSocket connection frees its place.
	// (go-amqp reports the client's own cancelled WebSocket read here:
	// coder/websocket's NetConn ends reads by cancelling them.)
	_ = ws1.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := goamqp.Dial(ctx, "amqp://"+s.AMQPAddr().String(), nil)
		if err == nil {
			err = openSession(ctx, c)
			_ = c.Close()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the place of a closed WebSocket connection was not freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // the broker notices the close asynchronously
	}
}

// TestWebSocketShutdown: Shutdown closes AMQP connections carried by
// WebSockets (the client gets close(amqp:connection:forced)) and waits
// for their goroutines (goleak, in TestMain, checks none is left).
func TestWebSocketShutdown(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dialWSAMQP(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop(t, s)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
	_, err = sess.NewSender(ctx, "q", nil)
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) {
		t.Fatalf("after Shutdown = %v; want a closed connection", err)
	}
	if ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondConnectionForced {
		t.Fatalf("closed with %v; want connection-forced", ce.RemoteErr)
	}
}

// TestWebSocketHTTPErrors: the endpoint needs no admin authorisation and
// answers a plain GET or another subprotocol with a clear HTTP error, not
// the admin API's 401.
func TestWebSocketHTTPErrors(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}})
	defer stop(t, s)
	base := "http://" + s.HTTPAddr().String()
	for _, p := range []string{wsPath, wsPath + "/"} {
		code, body := get(t, base+p)
		if code != http.StatusUpgradeRequired || !strings.Contains(body, `subprotocol "amqp"`) {
			t.Errorf("GET %s = %d %q", p, code, body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+s.HTTPAddr().String()+wsPath, &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("subprotocol mqtt = %v", err)
	}
}

// TestWebSocketHandshakeDeadline: a WebSocket that never starts the AMQP
// handshake is closed after the handshake time-out, as a TCP one is.
func TestWebSocketHandshakeDeadline(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, HandshakeTimeout: 200 * time.Millisecond}})
	defer stop(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+s.HTTPAddr().String()+wsPath, &websocket.DialOptions{Subprotocols: []string{"amqp"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	begin := time.Now()
	_, _, err = ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("silent WebSocket: read = %v; want the server's close", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("closed after %v", d)
	}
}
