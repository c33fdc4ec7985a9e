package relay

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp"
)

// serveListener runs an internal listener with cfg on a loopback
// ephemeral port and returns its address and a stop function, which
// shuts it down and waits for it (the caller registers it where its
// clean-up order needs it).
func serveListener(t *testing.T, cfg ListenerConfig) (addr string, stop func()) {
	t.Helper()
	l, err := NewListener(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := amqp.NewServer(l, amqp.Config{SASL: l.ServerSASL(), HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

// startListener runs node "b"'s internal listener on a loopback
// ephemeral port and returns its address.
func startListener(t *testing.T, sessions Sessions) string {
	t.Helper()
	addr, stop := serveListener(t, ListenerConfig{Secret: testSecret, Self: "b", Sessions: sessions})
	t.Cleanup(stop)
	return addr
}

func TestInternalListener(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startListener's clean-up
	addr := startListener(t, sessionsOf(map[string]int64{"a": 7}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("a proven node gets in and the owner proves itself", func(t *testing.T) {
		conn, err := Dial(ctx, addr, DialConfig{Secret: testSecret, Node: "a", Session: 7, Owner: "b"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Relayed entity links are not served yet: refused, not
		// silently accepted.
		s, err := conn.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewSender(ctx, "orders", nil)
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondNotImplemented {
			t.Fatalf("attach to an entity: %v", err)
		}
	})
	t.Run("an impostor owner is not trusted", func(t *testing.T) {
		// The listener is node b; a gateway that meant to reach node c
		// has its proof refused (made for c), and would refuse b's.
		_, err := Dial(ctx, addr, DialConfig{Secret: testSecret, Node: "a", Session: 7, Owner: "c"})
		if err == nil {
			t.Fatal("dialled the wrong owner")
		}
	})
	refused := func(t *testing.T, opts *goamqp.ConnOptions) {
		t.Helper()
		conn, err := goamqp.Dial(ctx, "amqp://"+addr, opts)
		if err == nil {
			conn.Close()
			t.Fatal("connection admitted")
		}
	}
	t.Run("wrong secret", func(t *testing.T) {
		_, err := Dial(ctx, addr, DialConfig{Secret: []byte("not the cluster's secret, but 32+ bytes"), Node: "a", Session: 7, Owner: "b"})
		if err == nil {
			t.Fatal("admitted")
		}
	})
	t.Run("stale session", func(t *testing.T) {
		if _, err := Dial(ctx, addr, DialConfig{Secret: testSecret, Node: "a", Session: 6, Owner: "b"}); err == nil {
			t.Fatal("admitted")
		}
	})
	t.Run("replayed proof", func(t *testing.T) {
		user, pass := MakeProof(testSecret, "a", "b", 7, time.Now(), [16]byte{42})
		conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(user, pass)})
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		refused(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(user, pass)})
	})
	t.Run("ordinary PLAIN login", func(t *testing.T) {
		refused(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("RootManageSharedAccessKey", "key")})
	})
	t.Run("anonymous", func(t *testing.T) {
		refused(t, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	})
	t.Run("no SASL", func(t *testing.T) {
		refused(t, nil)
	})
}

// A client-facing listener never takes a node proof for a login: its
// SASL configuration knows nothing of the Verifier, and the relay's
// handler refuses a connection that did not log in with one.
func TestListenerNeedsProof(t *testing.T) {
	l, err := NewListener(ListenerConfig{Secret: testSecret, Self: "b", Sessions: sessionsOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := amqp.NewServer(l, amqp.Config{SASL: amqp.SASLConfig{}, HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := goamqp.Dial(ctx, "amqp://"+ln.Addr().String(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err == nil {
		// go-amqp may see the open before the close that refuses it.
		_, err = conn.NewSession(ctx, nil)
		conn.Close()
		if err == nil {
			t.Fatal("admitted without a proof")
		}
	}
	if !strings.Contains(err.Error(), "unauthorized-access") {
		t.Fatalf("refused with %v", err)
	}
}

// A listener that admits the gateway's proof but cannot prove itself
// (it does not hold the secret it answers with) is not trusted: Dial
// fails before anything is sent on the connection.
func TestDialChecksOwnerProof(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	impostor := &Listener{secret: []byte("a secret that is not the cluster's!!"), self: "b",
		verifier: NewVerifier(testSecret, "b", nil, sessionsOf(map[string]int64{"a": 7})), log: discard()}
	srv, err := amqp.NewServer(impostor, amqp.Config{SASL: impostor.ServerSASL(), HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Dial(ctx, ln.Addr().String(), DialConfig{Secret: testSecret, Node: "a", Session: 7, Owner: "b"})
	if err == nil || !strings.Contains(err.Error(), "did not prove itself") {
		t.Fatalf("dial an impostor: %v", err)
	}
}
