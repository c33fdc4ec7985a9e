package amqp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// attachSender attaches a client sender link (the broker receives) on
// channel 0 and returns the attach reply and the flow that grants credit.
func (r *rawClient) attachSender(handle uint32, name, target string) (*frames.Attach, *frames.Flow) {
	r.t.Helper()
	r.send(0, &frames.Attach{
		Name: name, Handle: handle, Role: frames.RoleSender,
		Source:               &frames.Source{Address: "client"},
		Target:               &frames.Target{Address: target},
		InitialDeliveryCount: ptr(uint32(0)),
	})
	a, ok := r.next().(*frames.Attach)
	if !ok {
		r.t.Fatal("no attach reply")
	}
	if a.Target == nil {
		return a, nil
	}
	f, ok := r.next().(*frames.Flow)
	if !ok || f.Handle == nil || f.LinkCredit == nil {
		r.t.Fatalf("no credit flow: %v", f)
	}
	return a, f
}

// attachReceiver attaches a client receiver link (the broker sends).
func (r *rawClient) attachReceiver(handle uint32, name, source string) *frames.Attach {
	r.t.Helper()
	r.send(0, &frames.Attach{
		Name: name, Handle: handle, Role: frames.RoleReceiver,
		Source:        &frames.Source{Address: source},
		Target:        &frames.Target{Address: "client"},
		RcvSettleMode: ptr(frames.ReceiverSettleModeSecond),
	})
	a, ok := r.next().(*frames.Attach)
	if !ok {
		r.t.Fatal("no attach reply")
	}
	return a
}

func (r *rawClient) transfer(handle, id uint32, payload []byte, more bool) {
	r.t.Helper()
	r.send(0, &frames.Transfer{
		Handle: handle, DeliveryID: &id, DeliveryTag: binary.BigEndian.AppendUint32(nil, id),
		MessageFormat: ptr(uint32(0)), More: more, Payload: payload,
	})
}

// checkServing proves the server still works for a well-behaved client.
func checkServing(t *testing.T, addr string) {
	t.Helper()
	conn := dial(t, addr, nil)
	snd, err := openSession(t, conn).NewSender(testCtx(t), "alive", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(testCtx(t), goamqp.NewMessage([]byte("still here")), nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
}

func TestBadProtocolHeader(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	for _, hdr := range []string{"GET / HTTP/1.1\r\n\r\n", frames.ProtocolHeaderTLS, "AMQP\x03\x02\x00\x00", "AMQP\x00\x01\x00\x01"} {
		r := dialRaw(t, addr)
		r.write([]byte(hdr))
		if got := r.readHeader(); got != frames.ProtocolHeaderSASL {
			t.Errorf("%q: answered %q", hdr, got)
		}
		r.expectEOF()
	}
	// After SASL, only the AMQP header is acceptable.
	r := dialRaw(t, addr)
	r.write([]byte(frames.ProtocolHeaderSASL))
	r.readHeader()
	r.next()
	r.send(0, &frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
	r.next()
	r.write([]byte("AMQP\x03\x01\x00\x00"))
	if got := r.readHeader(); got != frames.ProtocolHeaderAMQP {
		t.Errorf("answered %q", got)
	}
	r.expectEOF()
	checkServing(t, addr)
}

// TestNoSASL: by default a client may skip SASL and open at once, as
// Service Bus allows (go-amqp sends the plain AMQP header when no SASL
// type is set); RequireSASL refuses it with the SASL header.
func TestNoSASL(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	conn, err := goamqp.Dial(testCtx(t), "amqp://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	snd, err := openSession(t, conn).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(testCtx(t), goamqp.NewMessage([]byte("no SASL")), nil); err != nil {
		t.Fatal(err)
	}

	// Byte by byte: the AMQP header is echoed and open answered with open.
	r := dialRaw(t, addr)
	r.write([]byte(frames.ProtocolHeaderAMQP))
	if got := r.readHeader(); got != frames.ProtocolHeaderAMQP {
		t.Fatalf("answered %q", got)
	}
	r.send(0, &frames.Open{ContainerID: "raw", MaxFrameSize: 65536})
	if o, ok := r.next().(*frames.Open); !ok || o.ContainerID != "busbar" {
		t.Fatalf("got %v; want open", o)
	}

	_, strict := startServer(t, b, Config{SASL: SASLConfig{RequireSASL: true}})
	r = dialRaw(t, strict)
	r.write([]byte(frames.ProtocolHeaderAMQP))
	if got := r.readHeader(); got != frames.ProtocolHeaderSASL {
		t.Errorf("RequireSASL answered %q", got)
	}
	r.expectEOF()
	if _, err := goamqp.Dial(testCtx(t), "amqp://"+strict, nil); err == nil {
		t.Fatal("RequireSASL: a client without SASL connected")
	}
	checkServing(t, strict)
}

func TestSASLUnknownMechanism(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	r.write([]byte(frames.ProtocolHeaderSASL))
	r.readHeader()
	m, ok := r.next().(*frames.SASLMechanisms)
	if !ok || fmt.Sprint(m.Mechanisms) != "[MSSBCBS ANONYMOUS PLAIN]" {
		t.Fatalf("mechanisms %v", m)
	}
	r.send(0, &frames.SASLInit{Mechanism: "SCRAM-SHA-1"})
	if o, ok := r.next().(*frames.SASLOutcome); !ok || o.Code != frames.SASLCodeAuth {
		t.Fatalf("outcome %v", o)
	}
	r.expectEOF()
}

// TestMalformedFrames sends broken and hostile frames after the
// handshake: each closes that connection with the right condition, and
// the server keeps serving others.
func TestMalformedFrames(t *testing.T) {
	header := func(size uint32, doff, typ byte, ch uint16) []byte {
		b := binary.BigEndian.AppendUint32(nil, size)
		b = append(b, doff, typ)
		return binary.BigEndian.AppendUint16(b, ch)
	}
	frame := func(ch uint16, body []byte) []byte {
		return append(header(uint32(8+len(body)), 2, 0, ch), body...)
	}
	tests := []struct {
		name  string
		begin bool
		send  func(r *rawClient)
		want  Condition
	}{
		{"huge frame", false, func(r *rawClient) { r.write(header(0x7fffffff, 2, 0, 0)) }, CondFramingError},
		{"bad data offset", false, func(r *rawClient) { r.write(header(16, 1, 0, 0)) }, CondFramingError},
		{"bad frame type", false, func(r *rawClient) { r.write(header(8, 2, 7, 0)) }, CondFramingError},
		{"unknown performative", false, func(r *rawClient) { r.write(frame(0, []byte{0x00, 0x53, 0x99, 0x45})) }, CondDecodeError},
		{"not a described list", false, func(r *rawClient) { r.write(frame(0, []byte{0xa1, 0x03, 'a', 'b', 'c'})) }, CondDecodeError},
		{"truncated list", false, func(r *rawClient) { r.write(frame(0, []byte{0x00, 0x53, 0x11, 0xc0, 0x40, 0x03, 0x43})) }, CondDecodeError},
		{"missing mandatory field", false, func(r *rawClient) { r.write(frame(0, []byte{0x00, 0x53, 0x11, 0x45})) }, CondDecodeError},
		{"frame on unknown channel", false, func(r *rawClient) {
			r.send(3, &frames.Flow{IncomingWindow: 1, OutgoingWindow: 1})
		}, CondNotAllowed},
		{"second open", false, func(r *rawClient) { r.send(0, &frames.Open{ContainerID: "again"}) }, CondNotAllowed},
		{"SASL frame after open", false, func(r *rawClient) {
			r.send(0, &frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
		}, CondFramingError},
		{"begin on a used channel", true, func(r *rawClient) {
			r.send(0, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
		}, CondNotAllowed},
		{"transfer on unknown handle", true, func(r *rawClient) { r.transfer(7, 0, []byte("x"), false) }, CondUnattachedHandle},
		{"flow on unknown handle", true, func(r *rawClient) {
			r.send(0, &frames.Flow{IncomingWindow: 1, OutgoingWindow: 1, Handle: ptr(uint32(9)), LinkCredit: ptr(uint32(1))})
		}, CondUnattachedHandle},
		{"detach on unknown handle", true, func(r *rawClient) { r.send(0, &frames.Detach{Handle: 4, Closed: true}) }, CondUnattachedHandle},
		{"attach on a used handle", true, func(r *rawClient) {
			r.attachSender(0, "a", "q")
			r.send(0, &frames.Attach{Name: "b", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{}, InitialDeliveryCount: ptr(uint32(0))})
		}, CondHandleInUse},
		{"transfer on a receiver link", true, func(r *rawClient) {
			r.attachReceiver(0, "r", "q")
			r.transfer(0, 0, []byte("x"), false)
		}, CondNotAllowed},
		{"transfer without delivery-id", true, func(r *rawClient) {
			r.attachSender(0, "a", "q")
			r.send(0, &frames.Transfer{Handle: 0, Payload: []byte("x")})
		}, CondNotAllowed},
	}
	b := newTestBroker()
	_, addr := startServer(t, b, Config{MaxFrameSize: 4096})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			r.handshake(nil)
			if tt.begin {
				r.begin()
			}
			tt.send(r)
			c := r.expectClose(tt.want)
			t.Logf("close: %v", c.Error)
		})
	}
	checkServing(t, addr)
}

// TestTransferWithoutCredit detaches a link whose client sends beyond
// its credit. MaxUnsettled keeps the credit from being topped up while
// the handler holds the deliveries.
func TestTransferWithoutCredit(t *testing.T) {
	b := newTestBroker()
	b.intercept = func(d *IncomingDelivery) bool { return true } // never settle
	b.onAttach = func(l *Link) {
		if l.incoming != nil {
			l.incoming.MaxUnsettled = 2
		}
	}
	_, addr := startServer(t, b, Config{LinkCredit: 100})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	_, f := r.attachSender(0, "greedy", "q")
	if *f.LinkCredit != 2 {
		t.Fatalf("credit %d", *f.LinkCredit)
	}
	for id := range uint32(3) {
		r.transfer(0, id, []byte("x"), false)
	}
	d, ok := r.next().(*frames.Detach)
	if !ok || !d.Closed || d.Error == nil || d.Error.Condition != CondTransferLimitExceeded {
		t.Fatalf("got %v, want detach with transfer-limit-exceeded", d)
	}
	// Frames in flight for the detaching link are ignored; the client's
	// detach completes the exchange and the handle can be reused.
	r.transfer(0, 3, []byte("x"), false)
	r.send(0, &frames.Detach{Handle: 0, Closed: true})
	b.waitEvent(t, "detach greedy")
	r.attachSender(0, "again", "q")
}

// sendRaw serves b, opens a raw session with a sender link "s" to "q"
// and sends n unsettled transfers with delivery ids 100, 101, ...
func sendRaw(t *testing.T, b *testBroker, n uint32) *rawClient {
	t.Helper()
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.attachSender(0, "s", "q")
	for id := range n {
		r.transfer(0, id+100, []byte("x"), false)
	}
	return r
}

// TestDispositionRanges settles deliveries in one batch and expects one
// disposition per run of consecutive ids with the same outcome.
func TestDispositionRanges(t *testing.T) {
	b := newTestBroker()
	var held []*IncomingDelivery
	b.intercept = func(d *IncomingDelivery) bool {
		held = append(held, d) // on the session goroutine: no lock needed
		if len(held) == 6 {
			// Out of order, within one callback: one batch.
			for _, i := range []int{5, 0, 3, 4, 1} {
				held[i].Settle(&frames.Accepted{})
			}
			held[2].Settle(&frames.Rejected{Error: &Error{Condition: "test:bad"}})
		}
		return true
	}
	r := sendRaw(t, b, 6)
	want := []dispRange{{100, 101, "*frames.Accepted"}, {102, 102, "*frames.Rejected"}, {103, 105, "*frames.Accepted"}}
	if got := readDispositions(t, r, frames.RoleReceiver, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dispositions %v, want %v", got, want)
	}
}

// dispRange is one settled disposition: its delivery-id range and the
// type of its state.
type dispRange struct {
	first, last uint32
	state       string
}

// readDispositions reads frames until n dispositions have come, skipping
// flows; each must be settled and from role.
func readDispositions(t *testing.T, r *rawClient, role frames.Role, n int) []dispRange {
	t.Helper()
	var got []dispRange
	for len(got) < n {
		switch fr := r.next().(type) {
		case *frames.Disposition:
			if fr.Role != role || !fr.Settled {
				t.Fatalf("disposition %v", fr)
			}
			last := fr.First
			if fr.Last != nil {
				last = *fr.Last
			}
			got = append(got, dispRange{fr.First, last, fmt.Sprintf("%T", fr.State)})
		case *frames.Flow:
		default:
			t.Fatalf("unexpected %v", fr)
		}
	}
	return got
}

// TestSettleAllOneDisposition settles a group of deliveries from another
// goroutine with SettleAll, as a sender link does once the group is
// stored: exactly one disposition covers it (single Settle calls could be
// split by the session waking up between them).
func TestSettleAllOneDisposition(t *testing.T) {
	b := newTestBroker()
	const n = 40
	held := make(chan *IncomingDelivery, n)
	b.intercept = func(d *IncomingDelivery) bool {
		held <- d
		return true
	}
	r := sendRaw(t, b, n)
	go func() {
		ds := make([]*IncomingDelivery, 0, n)
		for range n {
			ds = append(ds, <-held)
		}
		ds[0].Link.SettleAll(ds, &frames.Accepted{})
	}()
	for {
		switch fr := r.next().(type) {
		case *frames.Disposition:
			if fr.Role != frames.RoleReceiver || !fr.Settled || fr.First != 100 || fr.Last == nil || *fr.Last != 100+n-1 {
				t.Fatalf("disposition %v, want one for 100..%d", fr, 100+n-1)
			}
			if _, ok := fr.State.(*frames.Accepted); !ok {
				t.Fatalf("state %T", fr.State)
			}
			return
		case *frames.Flow:
		default:
			t.Fatalf("unexpected %v", fr)
		}
	}
}

// TestOutgoingSettleAllOneStep: the client accepts a batch of deliveries
// with one disposition and the handler answers them from another
// goroutine with OutgoingLink.SettleAll, one outcome each (a receiver
// link's settler after a batched complete): the answers leave as one
// disposition per run of equal outcomes, none split.
func TestOutgoingSettleAllOneStep(t *testing.T) {
	b := newTestBroker()
	const n = 40
	held := make(chan *OutgoingDelivery, n)
	b.holdDisp = func(d *OutgoingDelivery, _ frames.DeliveryState) bool {
		held <- d
		return true
	}
	_, addr := startServer(t, b, Config{})
	for i := range n {
		b.put("sq", []byte{byte(i)})
	}
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.attachReceiver(0, "r", "sq")
	r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 1000, OutgoingWindow: 1000,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(n))})
	var first uint32
	for i := range n {
		tr, ok := r.next().(*frames.Transfer)
		if !ok || tr.DeliveryID == nil || tr.Settled {
			t.Fatalf("delivery %d: %v", i, tr)
		}
		if i == 0 {
			first = *tr.DeliveryID
		}
	}
	r.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: first, Last: ptr(first + n - 1), State: &frames.Accepted{}})
	lost := &frames.Rejected{Error: Errorf("com.microsoft:message-lock-lost", "lock lost")}
	go func() {
		ds := make([]*OutgoingDelivery, 0, n)
		states := make([]frames.DeliveryState, 0, n)
		for i := range n {
			ds = append(ds, <-held)
			if i == 7 {
				states = append(states, lost)
			} else {
				states = append(states, &frames.Accepted{}) // equal outcomes, distinct values
			}
		}
		ds[0].Link().SettleAll(ds, states)
	}()
	want := []dispRange{{first, first + 6, "*frames.Accepted"}, {first + 7, first + 7, "*frames.Rejected"}, {first + 8, first + n - 1, "*frames.Accepted"}}
	if got := readDispositions(t, r, frames.RoleSender, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dispositions %v, want %v", got, want)
	}
}

// TestDrainRaw drains with credit outstanding, as rhea does for the JS
// SDK: the answer must carry drain=true, link-credit=0 and the
// delivery-count advanced by the unused credit (docs/wire/amqp.md §0.11).
func TestDrainRaw(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	b.put("dq", []byte("a"))
	b.put("dq", []byte("b"))
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	a := r.attachReceiver(0, "r", "dq")
	if a.Source == nil || a.InitialDeliveryCount == nil || *a.InitialDeliveryCount != 0 {
		t.Fatalf("attach reply %v", a)
	}
	r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(0)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(0)), LinkCredit: ptr(uint32(5))})
	for range 2 {
		if _, ok := r.next().(*frames.Transfer); !ok {
			t.Fatal("expected a transfer")
		}
	}
	start := time.Now()
	r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(2)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(2)), LinkCredit: ptr(uint32(3)), Drain: true})
	f, ok := r.next().(*frames.Flow)
	if !ok || f.Handle == nil || !f.Drain || f.LinkCredit == nil || *f.LinkCredit != 0 ||
		f.DeliveryCount == nil || *f.DeliveryCount != 5 {
		t.Fatalf("drain answer %v", f)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("drain answered after %v", d)
	}
	// Echo: the link state comes back as is.
	r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(2)), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), DeliveryCount: ptr(uint32(5)), LinkCredit: ptr(uint32(0)), Echo: true})
	f, ok = r.next().(*frames.Flow)
	if !ok || f.Handle == nil || *f.DeliveryCount != 5 || *f.LinkCredit != 0 || f.Drain {
		t.Fatalf("echo answer %v", f)
	}
	// A session echo is answered with a session flow.
	r.send(0, &frames.Flow{NextIncomingID: ptr(uint32(2)), IncomingWindow: 100, OutgoingWindow: 100, Echo: true})
	f, ok = r.next().(*frames.Flow)
	if !ok || f.Handle != nil || f.NextIncomingID == nil || f.IncomingWindow == 0 {
		t.Fatalf("session echo answer %v", f)
	}
}

// TestAbortedAndOversize checks that aborted deliveries vanish and that
// deliveries over max-message-size are rejected without being kept.
func TestAbortedAndOversize(t *testing.T) {
	b := newTestBroker()
	got := make(chan *IncomingDelivery, 10)
	b.intercept = func(d *IncomingDelivery) bool {
		got <- d
		d.Settle(&frames.Accepted{})
		return true
	}
	_, addr := startServer(t, b, Config{MaxMessageSize: 1000})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	a, _ := r.attachSender(0, "s", "q")
	if a.MaxMessageSize != 1000 {
		t.Errorf("max-message-size %d", a.MaxMessageSize)
	}
	// Aborted: two frames, then abort.
	r.transfer(0, 0, []byte("part1"), true)
	r.send(0, &frames.Transfer{Handle: 0, More: true, Payload: []byte("part2")})
	r.send(0, &frames.Transfer{Handle: 0, Aborted: true})
	// Oversize: 3 x 400 bytes.
	chunk := []byte(strings.Repeat("z", 400))
	r.transfer(0, 1, chunk, true)
	r.send(0, &frames.Transfer{Handle: 0, More: true, Payload: chunk})
	r.send(0, &frames.Transfer{Handle: 0, Payload: chunk})
	d, ok := r.next().(*frames.Disposition)
	if !ok || d.First != 1 || !d.Settled {
		t.Fatalf("got %v, want a disposition for delivery 1", d)
	}
	if rj, ok := d.State.(*frames.Rejected); !ok || rj.Error == nil || rj.Error.Condition != CondMessageSizeExceeded {
		t.Fatalf("state %v", d.State)
	}
	// A good multi-frame delivery gets through whole.
	r.transfer(0, 2, []byte("hello "), true)
	r.send(0, &frames.Transfer{Handle: 0, Payload: []byte("world")})
	select {
	case d := <-got:
		if d.ID != 2 || string(d.Payload) != "hello world" {
			t.Errorf("delivery %d %q", d.ID, d.Payload)
		}
	case <-time.After(testTimeout):
		t.Fatal("no delivery")
	}
	if len(got) != 0 {
		t.Error("the aborted or oversize delivery reached the handler")
	}
}

// TestPeerVanishes drops the connection in the middle of a multi-frame
// transfer; everything is cleaned up (goleak checks the goroutines).
func TestPeerVanishes(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.attachSender(0, "vanishing", "q")
	r.attachReceiver(1, "vanishing-r", "q")
	r.transfer(0, 0, make([]byte, 1000), true)
	_ = r.nc.Close()
	for range 2 {
		if err := <-b.detErrs; !errors.Is(err, ErrConnLost) {
			t.Errorf("OnDetach got %v, want ErrConnLost", err)
		}
	}
	if err := <-b.discErrs; !errors.Is(err, ErrConnLost) {
		t.Errorf("Disconnected got %v, want ErrConnLost", err)
	}
}

// TestDetachWhilePending detaches a link whose attach the handler
// deferred: the server answers the attach with a null terminus and
// detaches.
func TestDetachWhilePending(t *testing.T) {
	b := newTestBroker()
	b.deferAll = true
	b.deferDelay = 300 * time.Millisecond
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.send(0, &frames.Attach{Name: "p", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "q"}, InitialDeliveryCount: ptr(uint32(0))})
	r.send(0, &frames.Detach{Handle: 0, Closed: true})
	a, ok := r.next().(*frames.Attach)
	if !ok || a.Target != nil {
		t.Fatalf("attach reply %v", a)
	}
	if d, ok := r.next().(*frames.Detach); !ok || !d.Closed {
		t.Fatalf("detach reply %v", d)
	}
	b.waitEvent(t, "detach p")
	// The late CompleteAttach does nothing; the session goes on.
	time.Sleep(400 * time.Millisecond)
	r.send(0, &frames.End{})
	if _, ok := r.next().(*frames.End); !ok {
		t.Fatal("no end reply")
	}
}

// TestLimits checks the session and link limits.
func TestLimits(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{MaxSessions: 2, MaxLinks: 2})
	r := dialRaw(t, addr)
	o := r.handshake(nil)
	if o.ChannelMax != 1 {
		t.Errorf("channel-max %d, want 1", o.ChannelMax)
	}
	bg := r.begin()
	if bg.HandleMax != 1 {
		t.Errorf("handle-max %d, want 1", bg.HandleMax)
	}
	r.attachSender(0, "a", "q")
	r.attachSender(1, "b", "q")
	// A third link exceeds handle-max; a client that respects it cannot
	// get here, so it is a protocol error.
	r.send(0, &frames.Attach{Name: "c", Handle: 2, Role: frames.RoleSender, Target: &frames.Target{}, InitialDeliveryCount: ptr(uint32(0))})
	r.expectClose(CondNotAllowed)

	r = dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.send(2, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1})
	r.expectClose(CondNotAllowed)
}

// TestLinkLimitRefusal refuses the attach that exceeds MaxLinks when the
// handle numbers would allow it (links on two sessions).
func TestLinkLimitRefusal(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{MaxLinks: 1})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	if _, err := openSession(t, conn).NewSender(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	_, err := openSession(t, conn).NewSender(ctx, "q", nil)
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCond(CondResourceLimitExceeded) {
		t.Fatalf("second link: %v", err)
	}
}

// TestSendWhilePending sends on an outgoing link whose attach is still
// deferred, with credit the client granted early: the deliveries follow
// the attach reply.
func TestSendWhilePending(t *testing.T) {
	b := newTestBroker()
	b.deferAll = true
	b.deferDelay = 50 * time.Millisecond
	_, addr := startServer(t, b, Config{})
	b.put("pq", []byte("a"))
	b.put("pq", []byte("b"))
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.send(0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver,
		Source: &frames.Source{Address: "pq"}, Target: &frames.Target{}})
	r.send(0, &frames.Flow{IncomingWindow: 100, OutgoingWindow: 100,
		Handle: ptr(uint32(0)), LinkCredit: ptr(uint32(5))})
	a, ok := r.next().(*frames.Attach)
	if !ok || a.Source == nil || a.Properties["deferred"] != true {
		t.Fatalf("attach reply %v", a)
	}
	for i := range 2 {
		tr, ok := r.next().(*frames.Transfer)
		if !ok || tr.DeliveryID == nil || *tr.DeliveryID != uint32(i) {
			t.Fatalf("transfer %d: %v", i, tr)
		}
	}
}

// TestUnencodableState settles with a state the codec cannot encode (a
// handler bug): the connection closes with amqp:internal-error instead
// of hanging.
func TestUnencodableState(t *testing.T) {
	b := newTestBroker()
	b.intercept = func(d *IncomingDelivery) bool {
		if d.Link.TargetAddress() != "q" {
			return false
		}
		d.Settle(&frames.Rejected{Error: &Error{Condition: "x", Info: map[frames.Symbol]any{"bad": struct{}{}}}})
		return true
	}
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.attachSender(0, "s", "q")
	r.transfer(0, 0, []byte("x"), false)
	r.expectClose(CondInternalError)
	checkServing(t, addr)
}

// TestEndWithoutBegin: an end on a channel no begin opened (go-amqp sends
// one for a session whose begin it abandoned before sending it) is
// ignored; the connection and its other sessions go on.
func TestEndWithoutBegin(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.send(3, &frames.End{})
	r.send(0, &frames.End{})
	if _, ok := r.next().(*frames.End); !ok {
		t.Fatal("the session on channel 0 was not ended normally after an end on channel 3")
	}
}
