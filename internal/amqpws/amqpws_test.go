package amqpws

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTimeout = 10 * time.Second

// env is an HTTP server on loopback serving a Handler; the connections it
// hands out arrive on conns and are closed at the end of the test.
type env struct {
	t     testing.TB
	url   string
	srv   *http.Server
	h     *Handler
	conns chan *Conn
}

func newEnv(t testing.TB, srv *http.Server) *env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, url: "ws://" + ln.Addr().String() + Path, srv: srv, conns: make(chan *Conn, 16)}
	e.h = NewHandler(func(nc net.Conn) { e.conns <- nc.(*Conn) }, nil)
	mux := http.NewServeMux()
	mux.Handle(Path, e.h)
	mux.Handle(Path+"/{$}", e.h)
	srv.Handler = mux
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := e.h.Shutdown(ctx); err != nil {
			t.Errorf("handler shutdown: %v", err)
		}
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("http shutdown: %v", err)
		}
		<-served
		close(e.conns)
		for c := range e.conns {
			_ = c.Close()
		}
	})
	return e
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// dial opens a client WebSocket offering subprotocol "amqp" and returns
// it with the server's side of the connection.
func (e *env) dial(subprotocols ...string) (*websocket.Conn, *Conn) {
	e.t.Helper()
	if subprotocols == nil {
		subprotocols = []string{"amqp"}
	}
	ws, resp, err := websocket.Dial(ctxT(e.t), e.url, &websocket.DialOptions{Subprotocols: subprotocols})
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	if resp.Header.Get("Sec-WebSocket-Protocol") != subprotocols[0] {
		e.t.Fatalf("negotiated subprotocol %q", resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	select {
	case c := <-e.conns:
		// Cleanups run last-registered first: the client goes away, then
		// the server closes without waiting for a closing handshake.
		e.t.Cleanup(func() { _ = c.Close() })
		e.t.Cleanup(func() { _ = ws.CloseNow() })
		return ws, c
	case <-time.After(testTimeout):
		e.t.Fatal("the handler did not serve the connection")
		return nil, nil
	}
}

func readFull(t testing.TB, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

// TestStream: message boundaries mean nothing. Bytes written in messages
// of any size, several protocol units in one or one split over several,
// read back as one stream; each Write of the server is one message.
func TestStream(t *testing.T) {
	e := newEnv(t, &http.Server{})
	ws, c := e.dial()
	ctx := ctxT(t)
	var want bytes.Buffer
	for i, size := range []int{8, 1, 3, 70000, 0, 5, chunkSize, chunkSize + 1, 2} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, size)
		want.Write(msg)
		if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	buf := make([]byte, 1000) // smaller than most messages
	for len(got) < want.Len() {
		_ = c.SetReadDeadline(time.Now().Add(testTimeout))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the stream came out different")
	}

	for _, out := range []string{"AMQP\x00\x01\x00\x00", "two frames in one message"} {
		if n, err := c.Write([]byte(out)); err != nil || n != len(out) {
			t.Fatalf("write: %d %v", n, err)
		}
		typ, b, err := ws.Read(ctx)
		if err != nil || typ != websocket.MessageBinary || string(b) != out {
			t.Fatalf("client read %v %q %v", typ, b, err)
		}
	}
	if c.RemoteAddr().String() == "" || !strings.HasPrefix(c.LocalAddr().String(), "127.0.0.1:") {
		t.Fatalf("addresses %v %v", c.LocalAddr(), c.RemoteAddr())
	}
}

// TestReadDeadline: a read deadline that passes (or is already past)
// interrupts Read with a timeout, and the connection stays usable; this
// is how the AMQP endpoint enforces idle time-outs and stops its reader.
func TestReadDeadline(t *testing.T) {
	e := newEnv(t, &http.Server{})
	ws, c := e.dial()
	ctx := ctxT(t)

	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline = %v; want a timeout", err)
	}

	// Interrupt a Read in progress from another goroutine.
	done := make(chan error, 1)
	_ = c.SetReadDeadline(time.Time{})
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Read block (a wait, not a condition)
	_ = c.SetReadDeadline(time.Now())
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("interrupted read = %v", err)
	}

	// A deadline in the past fails at once even with data waiting.
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with a past deadline = %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	if got := readFull(t, c, 5); string(got) != "hello" {
		t.Fatalf("after time-outs read %q", got)
	}
	if _, err := c.Write([]byte("still open")); err != nil {
		t.Fatalf("write after time-outs: %v", err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "still open" {
		t.Fatalf("client read %q %v", b, err)
	}
}

// TestWriteDeadline: a write deadline in the past fails Write at once with
// a timeout; a future one lets it through.
func TestWriteDeadline(t *testing.T) {
	e := newEnv(t, &http.Server{})
	ws, c := e.dial()
	_ = c.SetWriteDeadline(time.Now().Add(-time.Second))
	_, err := c.Write([]byte("late"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("write past the deadline = %v; want a timeout", err)
	}
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	if _, err := c.Write([]byte("in time")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctxT(t)); err != nil || string(b) != "in time" {
		t.Fatalf("client read %q %v", b, err)
	}
}

// TestPeerCloses: a normal close by the client reads as io.EOF; so does a
// going-away close; the server's Close then returns promptly.
func TestPeerCloses(t *testing.T) {
	e := newEnv(t, &http.Server{})
	for _, code := range []websocket.StatusCode{websocket.StatusNormalClosure, websocket.StatusGoingAway} {
		ws, c := e.dial()
		if err := ws.Write(ctxT(t), websocket.MessageBinary, []byte("last")); err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- ws.Close(code, "bye") }()
		_ = c.SetReadDeadline(time.Now().Add(testTimeout))
		if got := readFull(t, c, 4); string(got) != "last" {
			t.Fatalf("read %q", got)
		}
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read after the peer's close = %v; want io.EOF", err)
		}
		if err := <-closed; err != nil {
			t.Fatalf("client close: %v", err)
		}
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Close after the peer's close took %v", d)
		}
		if err := c.Close(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("second Close = %v", err)
		}
	}
}

// TestClose: Close interrupts a Read in progress, does the closing
// handshake (the client sees status 1000) and stops the pump (goleak).
func TestClose(t *testing.T) {
	e := newEnv(t, &http.Server{})
	ws, c := e.dial()
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	// The client reads concurrently, as a client does, so that it answers
	// the close frame.
	clientErr := make(chan error, 1)
	go func() {
		_, _, err := ws.Read(ctxT(t))
		clientErr <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read during Close = %v", err)
	}
	if err := <-clientErr; websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("client saw %v; want status 1000", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close = %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close = %v", err)
	}
}

// TestCloseUnresponsivePeer: a client that never answers the close frame
// costs Close at most closeTimeout.
func TestCloseUnresponsivePeer(t *testing.T) {
	e := newEnv(t, &http.Server{})
	_, c := e.dial() // the client never reads
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > closeTimeout+time.Second {
		t.Fatalf("Close took %v", d)
	}
}

// TestTextMessage: a text message ends the stream with an error, and Close
// tells the client why (status 1003).
func TestTextMessage(t *testing.T) {
	e := newEnv(t, &http.Server{})
	ws, c := e.dial()
	if err := ws.Write(ctxT(t), websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, errTextMessage) {
		t.Fatalf("read of a text message = %v", err)
	}
	clientErr := make(chan error, 1)
	go func() {
		_, _, err := ws.Read(ctxT(t))
		clientErr <- err
	}()
	_ = c.Close()
	if err := <-clientErr; websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
		t.Fatalf("client saw %v; want status 1003", err)
	}
}

// TestHTTPTimeoutsSpareUpgraded: the HTTP server's read, write and idle
// time-outs end ordinary requests, not upgraded connections, which live
// as long as AMQP keeps them.
func TestHTTPTimeoutsSpareUpgraded(t *testing.T) {
	const short = 50 * time.Millisecond
	e := newEnv(t, &http.Server{ReadTimeout: short, ReadHeaderTimeout: short, WriteTimeout: short, IdleTimeout: short})
	ws, c := e.dial()
	ctx := ctxT(t)
	time.Sleep(6 * short) // well past every HTTP time-out (a wait on purpose)
	for i := range 3 {
		if err := ws.Write(ctx, websocket.MessageBinary, []byte("ping")); err != nil {
			t.Fatalf("round %d: client write: %v", i, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(testTimeout))
		if got := readFull(t, c, 4); string(got) != "ping" {
			t.Fatalf("read %q", got)
		}
		if _, err := c.Write([]byte("pong")); err != nil {
			t.Fatalf("round %d: server write: %v", i, err)
		}
		if _, b, err := ws.Read(ctx); err != nil || string(b) != "pong" {
			t.Fatalf("round %d: client read %q %v", i, b, err)
		}
		time.Sleep(2 * short)
	}
}

// TestRefusals: anything but a WebSocket upgrade offering an AMQP
// subprotocol gets an HTTP error saying what is expected, and no
// connection reaches serve.
func TestRefusals(t *testing.T) {
	e := newEnv(t, &http.Server{})
	client := &http.Client{Timeout: testTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	do := func(method string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http"+strings.TrimPrefix(e.url, "ws"), nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for k, v := range upgrade {
			if _, ok := m[k]; !ok {
				m[k] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		method string
		hdr    map[string]string
		code   int
		text   string
	}{
		{"plain GET", "GET", nil, http.StatusUpgradeRequired, "not a WebSocket upgrade"},
		{"POST", "POST", upgrade, http.StatusMethodNotAllowed, "method POST not allowed"},
		{"no subprotocol", "GET", upgrade, http.StatusBadRequest, "no WebSocket subprotocol offered"},
		{"another subprotocol", "GET", with("Sec-WebSocket-Protocol", "mqtt, stomp"), http.StatusBadRequest, `unsupported WebSocket subprotocol "mqtt, stomp"`},
		{"bad version", "GET", with("Sec-WebSocket-Protocol", "amqp") /* version set below */, 0, ""},
	} {
		if tc.code == 0 {
			tc.hdr["Sec-WebSocket-Version"] = "8"
			tc.code, tc.text = http.StatusBadRequest, "version"
		}
		code, body := do(tc.method, tc.hdr)
		if code != tc.code || !strings.Contains(body, tc.text) {
			t.Errorf("%s: %d %q; want %d containing %q", tc.name, code, body, tc.code, tc.text)
		}
		if tc.code != http.StatusBadRequest || tc.name == "bad version" {
			continue
		}
		if !strings.Contains(body, `"amqp"`) {
			t.Errorf("%s: %q does not say what is expected", tc.name, body)
		}
	}
	// The client library sees the refusal too.
	if _, resp, err := websocket.Dial(ctxT(t), e.url, &websocket.DialOptions{Subprotocols: []string{"mqtt"}}); err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("dial with subprotocol mqtt = %v", err)
	}
	select {
	case <-e.conns:
		t.Fatal("a refused request reached serve")
	default:
	}

	// Both spellings of the path, and the draft subprotocol name.
	e.url += "/"
	e.dial("AMQPWSB10")

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := e.h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := do("GET", with("Sec-WebSocket-Protocol", "amqp")); code != http.StatusServiceUnavailable {
		t.Fatalf("after Shutdown: %d %q", code, body)
	}
}

// TestConcurrentUse exercises every method at once under the race
// detector; the connection then still carries data.
func TestConcurrentUse(t *testing.T) {
	e := newEnv(t, &http.Server{})
	ws, c := e.dial()
	ctx := ctxT(t)
	go func() { // the client echoes until the end of the test
		for {
			typ, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if err := ws.Write(ctx, typ, b); err != nil {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { _, _ = c.Write([]byte("x")) })
		wg.Go(func() { _, _ = c.Read(make([]byte, 1)) })
		wg.Go(func() { _ = c.SetDeadline(time.Now().Add(10 * time.Millisecond)) })
		wg.Go(func() { _ = c.SetReadDeadline(time.Now().Add(-time.Second)) })
		wg.Go(func() { _ = c.SetWriteDeadline(time.Now().Add(time.Second)) })
		wg.Go(func() { _ = c.RemoteAddr(); _ = c.LocalAddr() })
	}
	wg.Wait()
	_ = c.SetDeadline(time.Time{})
	// Drain the echoes of the concurrent writes, then round-trip.
	for {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 100)); err != nil {
			break
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := c.Write([]byte("final")); err != nil {
		t.Fatal(err)
	}
	if got := readFull(t, c, 5); string(got) != "final" {
		t.Fatalf("read %q", got)
	}
}

// FuzzStream: however the client cuts a byte stream into binary messages
// (empty ones included), Read returns exactly that stream. Each input is
// the stream and the message sizes (one byte each, 0-255), cycled; one
// connection serves every input. testdata/fuzz/FuzzStream holds the
// corpus that every test run replays.
func FuzzStream(f *testing.F) {
	f.Add([]byte("AMQP\x00\x01\x00\x00"), []byte{8})
	f.Add([]byte("AMQP\x03\x01\x00\x00\x00\x00\x00\x15\x02\x01\x00\x00"), []byte{1, 0, 3})
	f.Add(bytes.Repeat([]byte{0xa5}, 3000), []byte{255, 0, 1})
	f.Add([]byte{}, []byte{})
	e := newEnv(f, &http.Server{})
	ws, c := e.dial()
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		ctx := ctxT(t) // per input: fuzzing outlasts any one time-out
		if len(sizes) == 0 {
			sizes = []byte{byte(len(data))}
		}
		rest := data
		for i := 0; len(rest) > 0 || i == 0; i++ {
			n := min(int(sizes[i%len(sizes)]), len(rest))
			if i >= len(sizes) && n == 0 && i%len(sizes) == len(sizes)-1 {
				n = len(rest) // sizes of only zeros: the rest in one message
			}
			if err := ws.Write(ctx, websocket.MessageBinary, rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		_ = c.SetReadDeadline(time.Now().Add(testTimeout))
		if got := readFull(t, c, len(data)); !bytes.Equal(got, data) {
			t.Fatalf("read %x; want %x", got, data)
		}
		// Nothing more is waiting: a short deadline passes with no data.
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("extra read: %d %v", n, err)
		}
	})
}
