package amqp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait in the tests; it is generous because the
// race detector on two cores is slow.
const testTimeout = 20 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// quietLogger keeps test output readable; set AMQP_TEST_LOG=1 to see
// the server's debug log.
func quietLogger() *slog.Logger {
	if os.Getenv("AMQP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startServer runs a Server on a loopback listener until the test ends.
func startServer(t *testing.T, h Handler, cfg Config) (*Server, string) {
	t.Helper()
	return startServerOn(t, h, cfg, nil)
}

// startServerOn is startServer serving the listener wrap makes of a
// loopback one (wrap nil: that listener).
func startServerOn(t *testing.T, h Handler, cfg Config, wrap func(net.Listener) net.Listener) (*Server, string) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	srv, err := NewServer(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return srv, ln.Addr().String()
}

// dial opens a go-amqp connection with SASL ANONYMOUS.
func dial(t *testing.T, addr string, opts *goamqp.ConnOptions) *goamqp.Conn {
	t.Helper()
	if opts == nil {
		opts = &goamqp.ConnOptions{}
	}
	if opts.SASLType == nil {
		opts.SASLType = goamqp.SASLTypeAnonymous()
	}
	c, err := goamqp.Dial(testCtx(t), "amqp://"+addr, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func openSession(t *testing.T, c *goamqp.Conn) *goamqp.Session {
	t.Helper()
	s, err := c.NewSession(testCtx(t), nil)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	return s
}

// ---- the test broker ----

// testBroker is a small in-memory queue broker: incoming links append to
// a queue named by their target address, outgoing links take from the
// queue named by their source address.
type testBroker struct {
	mu     sync.Mutex
	queues map[string]*testQueue

	// Knobs, set before clients connect.
	refuse     map[string]*Error              // attach errors by address
	intercept  func(d *IncomingDelivery) bool // takes deliveries; true: the test settles
	answer     func(d *OutgoingDelivery, state frames.DeliveryState) frames.DeliveryState
	holdDisp   func(d *OutgoingDelivery, state frames.DeliveryState) bool // takes unsettled outcomes; true: the test settles
	onAttach   func(l *Link)                                              // sees every link before it is accepted
	deferAll   bool                                                       // defer every attach; complete from a goroutine
	deferDelay time.Duration
	// unauthenticated leaves connections unauthenticated; by default
	// Connect calls Conn.Authenticated, as a handler without
	// authentication does.
	unauthenticated bool
	sent            chan *OutgoingDelivery // if set, receives every delivery sent
	// stream, if set, turns a payload into an OutgoingDelivery with a
	// Stream (see stream_test.go).
	stream func(payload []byte) *OutgoingDelivery
	// incoming, if set, sees every incoming link before it is accepted.
	incoming func(l *IncomingLink)

	events   chan string // "detach <name>", "disconnect", ... (buffered)
	disps    chan dispEvent
	conns    chan *Conn
	discErrs chan error // Disconnected's argument
	detErrs  chan error // OnDetach's argument
}

type dispEvent struct {
	tag     string
	state   frames.DeliveryState
	settled bool
}

type testQueue struct {
	msgs      []queued
	consumers []*OutgoingLink
}

type queued struct {
	payload []byte
	format  uint32
}

func newTestBroker() *testBroker {
	return &testBroker{
		queues: make(map[string]*testQueue),
		refuse: make(map[string]*Error),
		events: make(chan string, 1000),
		disps:  make(chan dispEvent, 1000),
		conns:  make(chan *Conn, 100),

		discErrs: make(chan error, 100),
		detErrs:  make(chan error, 1000),
	}
}

func (b *testBroker) Connect(c *Conn) (ConnHandler, error) {
	if !b.unauthenticated {
		c.Authenticated()
	}
	select {
	case b.conns <- c:
	default:
	}
	return &testConnHandler{b: b}, nil
}

func (b *testBroker) event(s string) {
	select {
	case b.events <- s:
	default:
	}
}

// waitEvent waits for an event with the given text.
func (b *testBroker) waitEvent(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case ev := <-b.events:
			if ev == want {
				return
			}
		case <-deadline:
			t.Fatalf("no event %q", want)
		}
	}
}

func (b *testBroker) queue(name string) *testQueue {
	q := b.queues[name]
	if q == nil {
		q = &testQueue{}
		b.queues[name] = q
	}
	return q
}

// put adds a message with data as its body to a queue and dispatches.
func (b *testBroker) put(name string, data []byte) {
	payload, err := goamqp.NewMessage(data).MarshalBinary()
	if err != nil {
		panic(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue(name)
	q.msgs = append(q.msgs, queued{payload: payload})
	b.dispatchLocked(q)
}

func (b *testBroker) queueLen(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue(name).msgs)
}

var tagSeq struct {
	sync.Mutex
	n uint64
}

// nextTag returns a fresh 16-byte delivery tag (Service Bus tags are
// lock-token GUIDs).
func nextTag() []byte {
	tagSeq.Lock()
	defer tagSeq.Unlock()
	tagSeq.n++
	return binary.BigEndian.AppendUint64(make([]byte, 8, 16), tagSeq.n)
}

// dispatchLocked hands queued messages to consumers with credit.
func (b *testBroker) dispatchLocked(q *testQueue) {
	for _, l := range q.consumers {
		for len(q.msgs) > 0 && l.Credit() > 0 {
			m := q.msgs[0]
			d := &OutgoingDelivery{Tag: nextTag(), Payload: m.payload, MessageFormat: m.format}
			if b.stream != nil {
				d = b.stream(m.payload)
				d.Tag = nextTag()
			}
			if err := l.Send(d); err != nil {
				break
			}
			if b.sent != nil {
				b.sent <- d
			}
			q.msgs = q.msgs[1:]
		}
	}
}

type testConnHandler struct{ b *testBroker }

func (h *testConnHandler) AttachIncoming(l *IncomingLink) error {
	b := h.b
	if b.onAttach != nil {
		b.onAttach(&l.Link)
	}
	if e := b.refuse[l.TargetAddress()]; e != nil {
		return e
	}
	addr := l.TargetAddress()
	if b.incoming != nil {
		b.incoming(l)
	}
	l.OnDelivery = func(d *IncomingDelivery) {
		if b.intercept != nil && b.intercept(d) {
			return
		}
		b.mu.Lock()
		q := b.queue(addr)
		q.msgs = append(q.msgs, queued{payload: d.Payload, format: d.MessageFormat})
		b.dispatchLocked(q)
		b.mu.Unlock()
		d.Settle(&frames.Accepted{})
	}
	l.OnDetach = func(err error) { b.detached(l.Name(), err) }
	return h.maybeDefer(&l.Link)
}

func (h *testConnHandler) AttachOutgoing(l *OutgoingLink) error {
	b := h.b
	if b.onAttach != nil {
		b.onAttach(&l.Link)
	}
	if e := b.refuse[l.SourceAddress()]; e != nil {
		return e
	}
	addr := l.SourceAddress()
	l.OnFlow = func(credit uint32, drain bool) {
		b.mu.Lock()
		b.dispatchLocked(b.queue(addr))
		b.mu.Unlock()
	}
	l.OnDisposition = func(d *OutgoingDelivery, state frames.DeliveryState, settled bool) {
		select {
		case b.disps <- dispEvent{tag: string(d.Tag), state: state, settled: settled}:
		default:
		}
		if settled || b.holdDisp != nil && b.holdDisp(d, state) {
			return
		}
		final := state
		if _, ok := state.(*frames.Rejected); ok {
			// Dead-lettered: go-amqp counts a rejected answer with an
			// error as a failure, so answer without one.
			final = &frames.Rejected{}
		}
		if b.answer != nil {
			final = b.answer(d, final)
		}
		d.Settle(final)
	}
	l.OnDetach = func(err error, unsent []*OutgoingDelivery) {
		b.mu.Lock()
		q := b.queue(addr)
		for i, c := range q.consumers {
			if c == l {
				q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
				break
			}
		}
		for _, d := range unsent {
			q.msgs = append(q.msgs, queued{payload: d.Payload, format: d.MessageFormat})
		}
		b.mu.Unlock()
		b.detached(l.Name(), err)
	}
	b.mu.Lock()
	q := b.queue(addr)
	q.consumers = append(q.consumers, l)
	b.mu.Unlock()
	return h.maybeDefer(&l.Link)
}

func (h *testConnHandler) maybeDefer(l *Link) error {
	if !h.b.deferAll {
		return nil
	}
	go func() {
		time.Sleep(h.b.deferDelay)
		l.Reply.Properties = map[frames.Symbol]any{"deferred": true}
		if l.outgoing != nil {
			// Sending before the attach completes is allowed: the
			// deliveries go out after the attach reply.
			h.b.mu.Lock()
			h.b.dispatchLocked(h.b.queue(l.SourceAddress()))
			h.b.mu.Unlock()
		}
		l.CompleteAttach(nil)
	}()
	return ErrAttachDeferred
}

func (h *testConnHandler) Disconnected(err error) {
	select {
	case h.b.discErrs <- err:
	default:
	}
	h.b.event("disconnect")
}

func (b *testBroker) detached(name string, err error) {
	select {
	case b.detErrs <- err:
	default:
	}
	b.event("detach " + name)
}

// ---- a raw frame-level client ----

// rawClient speaks AMQP frames directly, to send what go-amqp never
// would and to look at exactly what the server answers.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(testTimeout))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

func (r *rawClient) send(ch uint16, body frames.Body) {
	r.t.Helper()
	b, err := frames.AppendFrame(nil, ch, body)
	if err != nil {
		r.t.Fatal(err)
	}
	r.write(b)
}

func (r *rawClient) readHeader() string {
	r.t.Helper()
	var b [8]byte
	_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := io.ReadFull(r.br, b[:]); err != nil {
		r.t.Fatalf("raw read header: %v", err)
	}
	return string(b[:])
}

// next reads the next frame that is not a heartbeat.
func (r *rawClient) next() frames.Body {
	r.t.Helper()
	for {
		_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
		fr, err := frames.ReadFrame(r.br, 0)
		if err != nil {
			r.t.Fatalf("raw read: %v", err)
		}
		if fr.Body != nil {
			return fr.Body
		}
	}
}

// handshake does SASL ANONYMOUS and open with the given settings and
// returns the server's open.
func (r *rawClient) handshake(open *frames.Open) *frames.Open {
	r.t.Helper()
	r.write([]byte(frames.ProtocolHeaderSASL))
	if h := r.readHeader(); h != frames.ProtocolHeaderSASL {
		r.t.Fatalf("header %q", h)
	}
	if _, ok := r.next().(*frames.SASLMechanisms); !ok {
		r.t.Fatal("no sasl-mechanisms")
	}
	r.send(0, &frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
	if o, ok := r.next().(*frames.SASLOutcome); !ok || o.Code != frames.SASLCodeOK {
		r.t.Fatalf("sasl outcome %v", o)
	}
	r.write([]byte(frames.ProtocolHeaderAMQP))
	if h := r.readHeader(); h != frames.ProtocolHeaderAMQP {
		r.t.Fatalf("header %q", h)
	}
	if open == nil {
		open = &frames.Open{ContainerID: "raw"}
	}
	r.send(0, open)
	o, ok := r.next().(*frames.Open)
	if !ok {
		r.t.Fatal("no open")
	}
	return o
}

// begin begins a session on channel 0.
func (r *rawClient) begin() *frames.Begin {
	r.t.Helper()
	r.send(0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 100, OutgoingWindow: 100})
	b, ok := r.next().(*frames.Begin)
	if !ok || b.RemoteChannel == nil || *b.RemoteChannel != 0 {
		r.t.Fatalf("begin reply %v", b)
	}
	return b
}

// expectClose reads until a close frame and checks its condition ("" for
// none), then waits for the server to close the socket.
func (r *rawClient) expectClose(cond Condition) *frames.Close {
	r.t.Helper()
	for {
		b := r.next()
		c, ok := b.(*frames.Close)
		if !ok {
			continue
		}
		switch {
		case cond == "" && c.Error != nil:
			r.t.Fatalf("close with %v, want none", c.Error)
		case cond != "" && (c.Error == nil || c.Error.Condition != cond):
			r.t.Fatalf("close with %v, want %s", c.Error, cond)
		}
		r.expectEOF()
		return c
	}
}

// expectEOF waits for the server to close the connection. The server
// lingers until we close, so close the write side first.
func (r *rawClient) expectEOF() {
	r.t.Helper()
	if tc, ok := r.nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = r.nc.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := io.Copy(io.Discard, r.br); err != nil {
		r.t.Fatalf("waiting for EOF: %v", err)
	}
}
