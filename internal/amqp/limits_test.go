package amqp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// TestSessionLimitDefault: without configuration a connection gets at most
// DefaultMaxSessions sessions, advertised as channel-max; a begin beyond
// it closes the connection. (Before the default existed, one
// unauthenticated connection could open 65,536 sessions.)
func TestSessionLimitDefault(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	o := r.handshake(nil)
	if o.ChannelMax != DefaultMaxSessions-1 {
		t.Errorf("channel-max %d, want %d", o.ChannelMax, DefaultMaxSessions-1)
	}
	for ch := range uint16(DefaultMaxSessions) {
		r.send(ch, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
	}
	for range DefaultMaxSessions {
		if _, ok := r.next().(*frames.Begin); !ok {
			t.Fatal("begin not answered")
		}
	}
	r.send(DefaultMaxSessions, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
	c := r.expectClose(CondNotAllowed)
	t.Logf("session %d: %v", DefaultMaxSessions+1, c.Error)

	// go-amqp honours channel-max and refuses the extra session itself.
	conn := dial(t, addr, nil)
	for range DefaultMaxSessions {
		openSession(t, conn)
	}
	if _, err := conn.NewSession(testCtx(t), nil); err == nil {
		t.Error("go-amqp opened a session beyond channel-max")
	}
}

// TestLimitsBeforeAuth: until it authenticates a connection may hold only
// a few sessions and links (what the SDKs need to put their first token).
func TestLimitsBeforeAuth(t *testing.T) {
	b := newTestBroker()
	b.unauthenticated = true
	b.onAttach = func(l *Link) {
		if l.TargetAddress() == "login" {
			l.Conn().Authenticated()
		}
	}
	_, addr := startServer(t, b, Config{})

	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	for h := range uint32(maxLinksBeforeAuth) {
		if a, _ := r.attachSender(h, fmt.Sprint("l", h), "q"); a.Target == nil {
			t.Fatalf("link %d refused", h)
		}
	}
	if a, _ := r.attachSender(maxLinksBeforeAuth, "one-too-many", "q"); a.Target != nil {
		t.Fatal("a link beyond the limit before authentication was accepted")
	}
	if d, ok := r.next().(*frames.Detach); !ok || d.Error == nil || d.Error.Condition != CondResourceLimitExceeded {
		t.Fatalf("refusal %v", d)
	}
	for ch := uint16(1); ch < maxSessionsBeforeAuth; ch++ {
		r.send(ch, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
		if _, ok := r.next().(*frames.Begin); !ok {
			t.Fatalf("session %d refused", ch)
		}
	}
	r.send(maxSessionsBeforeAuth, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
	c := r.expectClose(CondResourceLimitExceeded)
	t.Logf("session %d: %v", maxSessionsBeforeAuth+1, c.Error)

	// Once authenticated, the connection's limits are the configured ones.
	r = dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.attachSender(0, "login", "login")
	for h := uint32(1); h <= maxLinksBeforeAuth; h++ {
		if a, _ := r.attachSender(h, fmt.Sprint("l", h), "q"); a.Target == nil {
			t.Fatalf("link %d refused after authentication", h)
		}
	}
	for ch := uint16(1); ch <= maxSessionsBeforeAuth; ch++ {
		r.send(ch, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
		if _, ok := r.next().(*frames.Begin); !ok {
			t.Fatalf("session %d refused after authentication", ch)
		}
	}
}

// TestMaxSessionsUnlimited: a negative MaxSessions lifts the default.
func TestMaxSessionsUnlimited(t *testing.T) {
	cfg, err := Config{MaxSessions: -1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ChannelMax != DefaultChannelMax || cfg.MaxSessions != DefaultChannelMax+1 {
		t.Errorf("channel-max %d, max sessions %d", cfg.ChannelMax, cfg.MaxSessions)
	}
	for _, tt := range []struct{ max, want int }{{0, DefaultMaxUnauthenticated}, {10000, DefaultMaxUnauthenticated}, {100, 25}, {2, 1}} {
		cfg, _ := Config{MaxConnections: tt.max}.withDefaults()
		if cfg.MaxUnauthenticatedConnections != tt.want {
			t.Errorf("MaxConnections %d: unauthenticated budget %d, want %d", tt.max, cfg.MaxUnauthenticatedConnections, tt.want)
		}
	}
	if cfg.HandshakeTimeout != 10*time.Second || cfg.AuthTimeout != 60*time.Second {
		t.Errorf("handshake %v, auth %v", cfg.HandshakeTimeout, cfg.AuthTimeout)
	}
}

// plainConfig makes PLAIN logins with password "secret" authenticate.
func plainConfig(cfg Config) Config {
	cfg.SASL.ValidatePlain = func(_, pass string) error {
		if pass != "secret" {
			return errors.New("wrong password")
		}
		return nil
	}
	return cfg
}

func dialPlain(t *testing.T, addr string) (*goamqp.Conn, error) {
	t.Helper()
	c, err := goamqp.Dial(testCtx(t), "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("app", "secret")})
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

// attackers opens n connections that send only the AMQP protocol header
// and n that finish the handshake and then send only heartbeats; none
// ever authenticates. It returns the opened ones (raw clients).
func attackers(t *testing.T, addr string, n int) []*rawClient {
	t.Helper()
	var out []*rawClient
	for range n {
		r := dialRaw(t, addr)
		r.write([]byte(frames.ProtocolHeaderSASL))
		out = append(out, r)
	}
	for range n {
		r := dialRaw(t, addr)
		r.write([]byte(frames.ProtocolHeaderSASL))
		if h := r.readHeader(); h != frames.ProtocolHeaderSASL {
			// Evicted at once by a later attacker: fine.
			continue
		}
		r.next() // mechanisms
		r.send(0, &frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
		r.next()
		r.write([]byte(frames.ProtocolHeaderAMQP))
		r.readHeader()
		r.send(0, &frames.Open{ContainerID: "attacker", IdleTimeOut: 1000})
		r.write(frames.AppendEmptyFrame(nil)) // a heartbeat
		out = append(out, r)
	}
	return out
}

// TestUnauthenticatedBudget: connections that never authenticate hold at
// most MaxUnauthenticatedConnections slots, the oldest give way to new
// ones, and a client that authenticates is served while they keep
// coming. With the budget disabled the attackers hold every slot of
// MaxConnections and the client is refused.
func TestUnauthenticatedBudget(t *testing.T) {
	b := newTestBroker()
	b.unauthenticated = true
	srv, addr := startServer(t, b, plainConfig(Config{MaxConnections: 8, MaxUnauthenticatedConnections: 2}))
	first := attackers(t, addr, 8)

	app, err := dialPlain(t, addr)
	if err != nil {
		t.Fatalf("a client that authenticates was refused: %v", err)
	}
	snd, err := openSession(t, app).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	attackers(t, addr, 8) // more keep coming; the client keeps its slot
	if err := snd.Send(testCtx(t), goamqp.NewMessage([]byte("served")), nil); err != nil {
		t.Fatalf("send during the attack: %v", err)
	}
	if st := srv.Stats(); st.Unauthenticated > 2 || st.Active > 3 {
		t.Errorf("stats %+v: the unauthenticated budget of 2 is exceeded", st)
	}
	// The first attacker was closed to make room.
	_ = first[0].nc.SetReadDeadline(time.Now().Add(testTimeout))
	// Closed is EOF, or a reset when the server closed with the
	// attacker's bytes still unread.
	if _, err := io.Copy(io.Discard, first[0].nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("oldest attacker: %v", err)
	}
}

// TestUnauthenticatedBudgetOff shows what the budget prevents: with it
// disabled, the same attack takes every slot.
func TestUnauthenticatedBudgetOff(t *testing.T) {
	b := newTestBroker()
	b.unauthenticated = true
	_, addr := startServer(t, b, plainConfig(Config{MaxConnections: 8, MaxUnauthenticatedConnections: -1}))
	attackers(t, addr, 4)
	expectRefused(t, addr)
}

// expectRefused dials with PLAIN and expects the connection limit.
func expectRefused(t *testing.T, addr string) {
	t.Helper()
	app, err := dialPlain(t, addr)
	if err == nil {
		_, err = app.NewSession(testCtx(t), nil)
	}
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCond(CondResourceLimitExceeded) {
		t.Errorf("got %v, want the connection limit", err)
	}
}

// TestAuthenticatedNotEvicted: an authenticated connection is never
// closed to make room.
func TestAuthenticatedNotEvicted(t *testing.T) {
	b := newTestBroker()
	b.unauthenticated = true
	srv, addr := startServer(t, b, plainConfig(Config{MaxConnections: 4, MaxUnauthenticatedConnections: 1}))
	var apps []*goamqp.Conn
	for range 3 {
		app, err := dialPlain(t, addr)
		if err != nil {
			t.Fatal(err)
		}
		apps = append(apps, app)
	}
	attackers(t, addr, 3)
	for _, app := range apps {
		openSession(t, app)
	}
	if st := srv.Stats(); st.Active != 4 || st.Unauthenticated != 1 {
		t.Errorf("stats %+v, want 3 authenticated and 1 unauthenticated", st)
	}
	// A fourth client takes the attacker's place; then the server is
	// full of authenticated connections and a newcomer is refused.
	app, err := dialPlain(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	openSession(t, app)
	expectRefused(t, addr)
	for _, app := range apps {
		openSession(t, app)
	}
}

// TestAuthTimeout closes a connection that does not authenticate within
// AuthTimeout, and leaves one that did alone.
func TestAuthTimeout(t *testing.T) {
	b := newTestBroker()
	b.unauthenticated = true
	_, addr := startServer(t, b, plainConfig(Config{AuthTimeout: 100 * time.Millisecond}))
	app, err := dialPlain(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	c := r.expectClose(CondUnauthorizedAccess)
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("closed after %v, before AuthTimeout", d)
	}
	t.Logf("closed: %v", c.Error)
	openSession(t, app)
}

// TestHandshakeTimeout closes a connection that sends only the protocol
// header.
func TestHandshakeTimeout(t *testing.T) {
	b := newTestBroker()
	srv, addr := startServer(t, b, Config{HandshakeTimeout: 100 * time.Millisecond})
	r := dialRaw(t, addr)
	r.write([]byte(frames.ProtocolHeaderSASL))
	r.readHeader()
	r.next()
	_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := io.Copy(io.Discard, r.nc); err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || ne.Timeout() {
			t.Fatalf("not closed: %v", err)
		}
	}
	deadline := time.Now().Add(testTimeout)
	for srv.Stats().Active != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := srv.Stats(); st.Active != 0 {
		t.Errorf("stats %+v after the handshake timed out", st)
	}
}

// inUse is the memory the process holds for Go objects and goroutine
// stacks, after a collection.
func inUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// leanClient handshakes on a bare socket (no bufio, no goroutine), so
// that the client side adds little to what is measured.
func leanClient(t *testing.T, addr string, sessions int) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	var out []byte
	out = append(out, frames.ProtocolHeaderSASL...)
	out, _ = frames.AppendFrame(out, 0, &frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
	out = append(out, frames.ProtocolHeaderAMQP...)
	out, _ = frames.AppendFrame(out, 0, &frames.Open{ContainerID: "lean"})
	for ch := range uint16(sessions) {
		out, _ = frames.AppendFrame(out, ch, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
	}
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	// Read the answers: headers, mechanisms, outcome, open and one begin
	// per session.
	br := bufio.NewReaderSize(nc, 512)
	_ = nc.SetReadDeadline(time.Now().Add(testTimeout))
	var hdr [8]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := frames.ReadFrame(br, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 1+sessions; {
		fr, err := frames.ReadFrame(br, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fr.Body != nil {
			n++
		}
	}
	return nc
}

// TestMemoryFigures measures what a connection and a session cost the
// server (heap and goroutine stacks; the lean client adds under 1 KiB per
// connection) and checks the figures docs/limits.md states. Run with -v
// to see them.
func TestMemoryFigures(t *testing.T) {
	b := newTestBroker()
	srv, addr := startServer(t, b, Config{MaxUnauthenticatedConnections: 1000})
	const nConns = 200
	before := inUse()
	for range nConns {
		leanClient(t, addr, 0)
	}
	perConn := (inUse() - before) / nConns
	before = inUse()
	for range 4 {
		leanClient(t, addr, DefaultMaxSessions)
	}
	perSession := (inUse()-before)/4/DefaultMaxSessions - perConn/DefaultMaxSessions
	full := perConn + DefaultMaxSessions*perSession
	t.Logf("per connection %.1f KiB, per session %.1f KiB, a connection with %d sessions %.0f KiB (%d connections)",
		float64(perConn)/1024, float64(perSession)/1024, DefaultMaxSessions, float64(full)/1024, srv.Stats().Active)
	if perConn > 96<<10 || perSession > 16<<10 {
		t.Errorf("per connection %d bytes, per session %d bytes: more than docs/limits.md states", perConn, perSession)
	}
}

// TestForget: a forgotten delivery leaves the session's state without a
// frame to the client, and the client's later disposition of it is
// answered with the handler's outcome for unknown deliveries.
func TestForget(t *testing.T) {
	b := newTestBroker()
	b.sent = make(chan *OutgoingDelivery, 10)
	lost := &frames.Rejected{Error: Errorf("test:lost", "forgotten")}
	srv, err := NewServer(HandlerFunc(func(c *Conn) (ConnHandler, error) {
		c.AnswerUnknownDispositions(func() frames.DeliveryState { return lost })
		return b.Connect(c)
	}), Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(testCtx(t)) })
	for i := range 3 {
		b.put("fq", []byte{byte(i)})
	}
	r := dialRaw(t, ln.Addr().String())
	r.handshake(nil)
	r.begin()
	r.attachReceiver(0, "r", "fq")
	r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1000, OutgoingWindow: 1000,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(3))})
	var ids []uint32
	for range 3 {
		tr, ok := r.next().(*frames.Transfer)
		if !ok {
			t.Fatalf("got %v", tr)
		}
		ids = append(ids, *tr.DeliveryID)
	}
	var ds []*OutgoingDelivery
	for range 3 {
		ds = append(ds, <-b.sent)
	}
	if ds[0].Payload != nil {
		t.Error("the payload of a sent unsettled delivery is kept")
	}
	waitUnsettled := func(n int) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for srv.Stats().Unsettled != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d unsettled, want %d", srv.Stats().Unsettled, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitUnsettled(3)
	ds[0].Forget()
	ds[0].Link().ForgetAll(ds[1:2])
	waitUnsettled(1)
	// Nothing was sent for them: the next frame answers the disposition
	// of all three, the forgotten ones with the unknown outcome.
	r.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: ids[0], Last: ptr(ids[2]), State: &frames.Accepted{}})
	want := []dispRange{{ids[0], ids[1], "*frames.Rejected"}, {ids[2], ids[2], "*frames.Accepted"}}
	if got := readDispositions(t, r, frames.RoleSender, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dispositions %v, want %v", got, want)
	}
	waitUnsettled(0)
}
