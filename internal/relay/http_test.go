package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
)

// startMux runs node "b"'s internal listener with its Mux on a loopback
// ephemeral port: AMQP served by the Listener, HTTP by handler (under
// OwnerHTTP).
func startMux(t *testing.T, sessions Sessions, handler func(w http.ResponseWriter, r *http.Request, g auth.Grant)) string {
	t.Helper()
	l, err := NewListener(ListenerConfig{Secret: testSecret, Self: "b", Sessions: sessions})
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
	m := NewMux(ln, l)
	hs := &http.Server{Handler: OwnerHTTP(handler), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{}, 3)
	go func() { _ = m.Serve(); done <- struct{}{} }()
	go func() { _ = srv.Serve(m.AMQP()); done <- struct{}{} }()
	go func() { _ = hs.Serve(m.HTTP()); done <- struct{}{} }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = hs.Shutdown(ctx)
		ln.Close()
		began := time.Now()
		for range 3 {
			<-done
		}
		if d := time.Since(began); d > sniffTimeout/2 {
			t.Errorf("the mux took %v to stop (a connection still being sorted was not closed)", d)
		}
	})
	return ln.Addr().String()
}

func newForwarder(t *testing.T, secret []byte) *HTTPForwarder {
	t.Helper()
	f, err := NewHTTPForwarder(HTTPConfig{Secret: secret, Node: "a", Session: func() int64 { return 7 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func TestHTTPOverInternalListener(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	var silentConn net.Conn
	t.Cleanup(func() {
		if silentConn != nil {
			silentConn.Close()
		}
	})
	var misdirect atomic.Int32 // answers 421 while positive
	addr := startMux(t, sessionsOf(map[string]int64{"a": 7}), func(w http.ResponseWriter, r *http.Request, g auth.Grant) {
		if misdirect.Add(-1) >= 0 {
			w.WriteHeader(http.StatusMisdirectedRequest)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", fmt.Sprintf("%s %s %s %s|%s|%s|%s", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Host, g.KeyName, g.Rights, r.Header.Get(PrincipalHeader)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	misdirect.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner := Owner{Node: "b", Addr: addr}
	g := auth.Grant{KeyName: "writer", Rights: auth.Send | auth.Listen, Resource: "orders", ExpiresAt: time.UnixMilli(1_800_000_000_000)}
	request := func(body io.Reader, length int64) *http.Request {
		r, err := http.NewRequest("POST", "http://client.example/orders%2Fa/messages?timeout=5", body)
		if err != nil {
			t.Fatal(err)
		}
		r.ContentLength = length
		r.Header.Set(PrincipalHeader, "forged by the client")
		r.Header.Set("Connection", "close")
		return r
	}

	t.Run("a proven node's request is served with its principal", func(t *testing.T) {
		f := newForwarder(t, testSecret)
		resp, err := f.Forward(ctx, func() (Owner, error) { return owner, nil }, request(strings.NewReader("hello"), 5), g)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		want := "POST /orders%2Fa/messages timeout=5 client.example|writer|Send, Listen|"
		if resp.StatusCode != http.StatusCreated || string(body) != "hello" || resp.Header.Get("X-Seen") != want {
			t.Fatalf("got %d %q, seen %q; want 201 hello, %q", resp.StatusCode, body, resp.Header.Get("X-Seen"), want)
		}
	})

	t.Run("not the owner: asked again and retried once", func(t *testing.T) {
		f := newForwarder(t, testSecret)
		asked := 0
		ownerOf := func() (Owner, error) { asked++; return owner, nil }
		misdirect.Store(1)
		resp, err := f.Forward(ctx, ownerOf, request(strings.NewReader("again"), 5), g)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || asked != 2 {
			t.Fatalf("status %d after %d look-ups; want 201 after 2", resp.StatusCode, asked)
		}
		misdirect.Store(2)
		asked = 0
		if _, err := f.Forward(ctx, ownerOf, request(strings.NewReader("again"), 5), g); !errors.Is(err, ErrNotOwner) || asked != 2 {
			t.Fatalf("two not-owner answers: %v after %d look-ups; want ErrNotOwner after 2", err, asked)
		}
		// A body of unknown length is streamed, so never sent twice.
		misdirect.Store(1)
		asked = 0
		if _, err := f.Forward(ctx, ownerOf, request(io.MultiReader(strings.NewReader("stream")), -1), g); !errors.Is(err, ErrNotOwner) || asked != 1 {
			t.Fatalf("not-owner for a streamed body: %v after %d look-ups; want ErrNotOwner after 1", err, asked)
		}
		misdirect.Store(0)
	})

	t.Run("no address: moving", func(t *testing.T) {
		f := newForwarder(t, testSecret)
		if _, err := f.Forward(ctx, func() (Owner, error) { return Owner{Node: "(moving)"}, nil }, request(nil, 0), g); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("got %v, want ErrNotOwner", err)
		}
	})

	t.Run("another secret is refused", func(t *testing.T) {
		f := newForwarder(t, []byte("not the cluster's secret, but long enough"))
		if _, err := f.Forward(ctx, func() (Owner, error) { return owner, nil }, request(nil, 0), g); err == nil {
			t.Fatal("a node with another secret was served")
		}
	})

	t.Run("AMQP still reaches the listener", func(t *testing.T) {
		conn, err := Dial(ctx, addr, DialConfig{Secret: testSecret, Node: "a", Session: 7, Owner: "b"})
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	})

	// A connection that says nothing is still being sorted when the
	// listener closes (startMux's clean-up runs before silentConn's):
	// closed then, not waited for.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	silentConn = silent

	t.Run("a connection that is neither is closed", func(t *testing.T) {
		for _, hello := range []string{"GET / HTTP/1.1\r\nHost: b\r\n\r\n", "BBH1 a 1.2.3\n"} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.WriteString(c, hello)
			if n, err := c.Read(make([]byte, 64)); err == nil {
				t.Errorf("%q got %d bytes back", hello, n)
			}
			c.Close()
		}
	})
}

func TestPrincipalRoundTrip(t *testing.T) {
	for _, g := range []auth.Grant{
		{KeyName: "RootManageSharedAccessKey", Rights: auth.Manage | auth.Send | auth.Listen},
		{KeyName: "Entra ID principal 00000000-0000-0000-0000-000000000001", Rights: auth.Listen, Resource: "orders/subscriptions/ü", Audience: "orders", ExpiresAt: time.UnixMilli(1_800_000_000_123)},
	} {
		got, err := DecodePrincipal(EncodePrincipal(g))
		if err != nil || !got.ExpiresAt.Equal(g.ExpiresAt) {
			t.Fatalf("%+v came back as %+v, %v", g, got, err)
		}
		got.ExpiresAt = g.ExpiresAt
		if got != g {
			t.Fatalf("%+v came back as %+v", g, got)
		}
	}
	for _, bad := range []string{"", "!!", EncodePrincipal(auth.Grant{}) + "x", "eyJrIjoiYSIsInIiOjh9", "eyJrIjoiYSIsInIiOjEsInoiOjF9", strings.Repeat("A", maxPrincipal+1)} {
		if g, err := DecodePrincipal(bad); err == nil {
			t.Errorf("%q decoded as %+v", bad, g)
		}
	}
}

// FuzzDecodePrincipal: any header value decodes to a grant that encodes
// and decodes to itself, or is refused.
func FuzzDecodePrincipal(f *testing.F) {
	f.Add(EncodePrincipal(auth.Grant{KeyName: "k", Rights: auth.Send, Resource: "q", Audience: "q", ExpiresAt: time.UnixMilli(1)}))
	f.Add("e30")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := DecodePrincipal(s)
		if err != nil {
			return
		}
		h, err := DecodePrincipal(EncodePrincipal(g))
		if err != nil || h.KeyName != g.KeyName || h.Rights != g.Rights || h.Resource != g.Resource || h.Audience != g.Audience || !h.ExpiresAt.Equal(g.ExpiresAt) {
			t.Fatalf("%+v re-encoded decodes as %+v, %v", g, h, err)
		}
	})
}

// FuzzParsePreamble: a preamble parses into a node proof that formats
// back to the same line, or is refused as a bad proof.
func FuzzParsePreamble(f *testing.F) {
	user, pass := MakeProof(testSecret, "node-a", "node-b", 3, time.Unix(1_800_000_000, 0), [16]byte{9})
	f.Add(strings.TrimSuffix(FormatPreamble(user, pass), "\n"))
	f.Add("BBH1 a 1.2.3")
	f.Add("")
	f.Fuzz(func(t *testing.T, line string) {
		user, pass, err := ParsePreamble(line)
		if err != nil {
			if !errors.Is(err, ErrBadProof) {
				t.Fatalf("error %v is not ErrBadProof", err)
			}
			return
		}
		if got := FormatPreamble(user, pass); got != line+"\n" {
			t.Fatalf("%q parsed as %q %q, formats as %q", line, user, pass, got)
		}
	})
}
