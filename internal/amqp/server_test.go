package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

func ptr[T any](v T) *T { return &v }

// TestSendReceive sends unsettled messages through the test broker and
// receives them back, with SASL ANONYMOUS.
func TestSendReceive(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	sess := openSession(t, conn)

	snd, err := sess.NewSender(ctx, "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := snd.MaxMessageSize(); got != DefaultMaxMessageSize {
		t.Errorf("sender max-message-size %d, want %d", got, DefaultMaxMessageSize)
	}
	for i := range 10 {
		if err := snd.Send(ctx, goamqp.NewMessage(fmt.Appendf(nil, "m%d", i)), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	rcv, err := sess.NewReceiver(ctx, "q1", &goamqp.ReceiverOptions{Credit: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if got, want := string(m.GetData()), fmt.Sprintf("m%d", i); got != want {
			t.Errorf("message %d: %q, want %q", i, got, want)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := rcv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := snd.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the client detached both links cleanly
		if err := <-b.detErrs; err != nil {
			t.Errorf("OnDetach got %v, want nil", err)
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-b.discErrs; !errors.Is(err, ErrConnClosed) {
		t.Errorf("Disconnected got %v, want ErrConnClosed", err)
	}
}

// TestConnectRefused refuses a connection from Handler.Connect.
func TestConnectRefused(t *testing.T) {
	h := HandlerFunc(func(c *Conn) (ConnHandler, error) {
		if c.ContainerID() == "unwelcome" {
			return nil, &Error{Condition: CondUnauthorizedAccess, Description: "go away"}
		}
		return nil, errors.New("plain error")
	})
	_, addr := startServer(t, h, Config{})
	r := dialRaw(t, addr)
	r.handshake(&frames.Open{ContainerID: "unwelcome"})
	if c := r.expectClose(CondUnauthorizedAccess); c.Error.Description != "go away" {
		t.Errorf("close %v", c.Error)
	}
	r = dialRaw(t, addr)
	r.handshake(nil)
	r.expectClose(CondInternalError)
}

// TestSessionEndDetaches ends a session with links attached: their
// OnDetach callbacks get ErrSessionEnded.
func TestSessionEndDetaches(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	r := dialRaw(t, addr)
	r.handshake(nil)
	r.begin()
	r.attachSender(0, "a", "q")
	r.attachReceiver(1, "b", "q")
	r.send(0, &frames.End{})
	if _, ok := r.next().(*frames.End); !ok {
		t.Fatal("no end reply")
	}
	for range 2 {
		if err := <-b.detErrs; !errors.Is(err, ErrSessionEnded) {
			t.Errorf("OnDetach got %v", err)
		}
	}
	// The channel can be used again.
	r.begin()
	r.attachSender(0, "a", "q")
	r.send(0, &frames.Close{})
	r.expectClose("")
	if err := <-b.discErrs; !errors.Is(err, ErrConnClosed) {
		t.Errorf("Disconnected got %v", err)
	}
}

func TestSASLPlain(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{SASL: SASLConfig{ValidatePlain: func(user, pass string) error {
		if user == "alice" && pass == "secret" {
			return nil
		}
		return errors.New("bad credentials")
	}}})

	c := dial(t, addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "secret")})
	var sc *Conn
	select {
	case sc = <-b.conns:
	case <-time.After(testTimeout):
		t.Fatal("no connection")
	}
	if sc.SASLMechanism() != frames.SASLMechanismPlain || sc.SASLUser() != "alice" {
		t.Errorf("mechanism %q user %q", sc.SASLMechanism(), sc.SASLUser())
	}
	openSession(t, c)

	_, err := goamqp.Dial(testCtx(t), "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("alice", "wrong")})
	if err == nil {
		t.Fatal("dial with a wrong password succeeded")
	}
}

// TestSASLPlainOnly: a listener with PlainOnly refuses ANONYMOUS (and
// skipping SASL, with RequireSASL); CheckPlain's answer is the
// connection's SASLInfo, and a login it refuses is refused.
func TestSASLPlainOnly(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{SASL: SASLConfig{PlainOnly: true, RequireSASL: true,
		CheckPlain: func(user, pass string) (any, error) {
			if pass == "proof" {
				return "info:" + user, nil
			}
			return nil, errors.New("no proof")
		}}})
	c := dial(t, addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("node-a", "proof")})
	var sc *Conn
	select {
	case sc = <-b.conns:
	case <-time.After(testTimeout):
		t.Fatal("no connection")
	}
	if sc.SASLInfo() != "info:node-a" || sc.SASLUser() != "node-a" || !sc.IsAuthenticated() {
		t.Errorf("info %v user %q authenticated %v", sc.SASLInfo(), sc.SASLUser(), sc.IsAuthenticated())
	}
	openSession(t, c)
	for name, opts := range map[string]*goamqp.ConnOptions{
		"anonymous":   {SASLType: goamqp.SASLTypeAnonymous()},
		"wrong proof": {SASLType: goamqp.SASLTypePlain("node-a", "guess")},
		"no SASL":     nil,
	} {
		if c, err := goamqp.Dial(testCtx(t), "amqp://"+addr, opts); err == nil {
			c.Close()
			t.Errorf("%s: admitted", name)
		}
	}
}

// TestSettleModes checks that every requested settle mode is echoed:
// go-amqp fails the attach otherwise (docs/wire/amqp.md §0.1).
func TestSettleModes(t *testing.T) {
	b := newTestBroker()
	seen := make(chan [2]string, 20)
	b.onAttach = func(l *Link) {
		seen <- [2]string{l.SenderSettleMode().String(), l.ReceiverSettleMode().String()}
	}
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	sess := openSession(t, conn)

	for _, snd := range []goamqp.SenderSettleMode{goamqp.SenderSettleModeUnsettled, goamqp.SenderSettleModeSettled, goamqp.SenderSettleModeMixed} {
		for _, rcv := range []goamqp.ReceiverSettleMode{goamqp.ReceiverSettleModeFirst, goamqp.ReceiverSettleModeSecond} {
			s, err := sess.NewSender(ctx, "modes", &goamqp.SenderOptions{SettlementMode: ptr(snd), RequestedReceiverSettleMode: ptr(rcv)})
			if err != nil {
				t.Fatalf("sender %v/%v: %v", snd, rcv, err)
			}
			<-seen
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			r, err := sess.NewReceiver(ctx, "modes", &goamqp.ReceiverOptions{RequestedSenderSettleMode: ptr(snd), SettlementMode: ptr(rcv)})
			if err != nil {
				t.Fatalf("receiver %v/%v: %v", snd, rcv, err)
			}
			if got := <-seen; got != [2]string{snd.String(), rcv.String()} {
				t.Errorf("handler saw %v, want %v/%v", got, snd, rcv)
			}
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestUnsettledOutOfOrder keeps many sends in flight and has the handler
// settle them from another goroutine in random order.
func TestUnsettledOutOfOrder(t *testing.T) {
	const n = 200
	b := newTestBroker()
	got := make(chan *IncomingDelivery, n)
	b.intercept = func(d *IncomingDelivery) bool {
		got <- d
		return true
	}
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	snd, err := openSession(t, conn).NewSender(ctx, "ooo", nil)
	if err != nil {
		t.Fatal(err)
	}

	settled := make(chan struct{})
	go func() {
		defer close(settled)
		var ds []*IncomingDelivery
		for range n {
			select {
			case d := <-got:
				ds = append(ds, d)
			case <-ctx.Done():
				return
			}
		}
		rand.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
		for i, d := range ds {
			if d.Settled {
				t.Errorf("delivery %d arrived settled", d.ID)
			}
			if i%10 == 0 {
				d.Settle(&frames.Rejected{Error: &Error{Condition: "test:rejected"}})
				continue
			}
			d.Settle(&frames.Accepted{})
		}
	}()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var rejected, accepted int
	for i := range n {
		wg.Go(func() {
			err := snd.Send(ctx, goamqp.NewMessage(fmt.Appendf(nil, "%d", i)), nil)
			mu.Lock()
			defer mu.Unlock()
			var ae *goamqp.Error
			switch {
			case err == nil:
				accepted++
			case errors.As(err, &ae) && ae.Condition == "test:rejected":
				rejected++
			default:
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	<-settled
	if accepted+rejected != n || rejected != n/10 {
		t.Errorf("accepted %d rejected %d", accepted, rejected)
	}
}

// TestPresettled sends settled deliveries: the handler sees them settled
// and sends nothing back.
func TestPresettled(t *testing.T) {
	b := newTestBroker()
	got := make(chan *IncomingDelivery, 10)
	b.intercept = func(d *IncomingDelivery) bool {
		got <- d
		d.Settle(&frames.Accepted{}) // a no-op on a presettled delivery
		return true
	}
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	snd, err := openSession(t, conn).NewSender(ctx, "pre", &goamqp.SenderOptions{SettlementMode: ptr(goamqp.SenderSettleModeSettled)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte{byte(i)}), nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		select {
		case d := <-got:
			if !d.Settled {
				t.Error("delivery not presettled")
			}
		case <-ctx.Done():
			t.Fatal("deliveries missing")
		}
	}
}

// TestMultiFrame moves a message larger than max-frame-size both ways.
func TestMultiFrame(t *testing.T) {
	b := newTestBroker()
	// The server accepts 4 KiB frames, so the client must split; the
	// client accepts 4 KiB frames, so the server must split.
	_, addr := startServer(t, b, Config{MaxFrameSize: 4096, MaxMessageSize: 1 << 20})
	conn := dial(t, addr, &goamqp.ConnOptions{MaxFrameSize: 4096})
	ctx := testCtx(t)
	sess := openSession(t, conn)
	payload := make([]byte, 300<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	snd, err := sess.NewSender(ctx, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := snd.Send(ctx, goamqp.NewMessage(payload), nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := sess.NewReceiver(ctx, "big", &goamqp.ReceiverOptions{Credit: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.GetData(), payload) {
			t.Fatal("payload changed on the way")
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReceiveCredit checks that the server sends no more than the credit.
func TestReceiveCredit(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	for i := range 5 {
		b.put("credit", []byte{byte(i)})
	}
	rcv, err := openSession(t, conn).NewReceiver(ctx, "credit", &goamqp.ReceiverOptions{Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.IssueCredit(3); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.GetData()[0] != byte(i) {
			t.Errorf("got message %d, want %d", m.GetData()[0], i)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// A fourth message must not arrive without credit.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if m, err := rcv.Receive(short, nil); err == nil {
		t.Fatalf("received %v without credit", m.GetData())
	}
	if n := b.queueLen("credit"); n != 2 {
		t.Errorf("%d messages left, want 2", n)
	}
	if err := rcv.IssueCredit(2); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := rcv.Receive(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDrain drains with go-amqp: the server sends what it has, then
// answers with drain=true and no credit left. (go-amqp's drain flow
// carries link-credit 0; TestDrainRaw drains with credit outstanding, as
// rhea does.)
func TestDrain(t *testing.T) {
	b := newTestBroker()
	outs := make(chan *OutgoingLink, 1)
	b.onAttach = func(l *Link) {
		if l.outgoing != nil {
			outs <- l.outgoing
		}
	}
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	for i := range 3 {
		b.put("drain", []byte{byte(i)})
	}
	rcv, err := openSession(t, conn).NewReceiver(ctx, "drain", &goamqp.ReceiverOptions{Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	out := <-outs
	if err := rcv.IssueCredit(10); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := rcv.Receive(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := rcv.DrainCredit(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if c := out.Credit(); c != 0 {
		t.Errorf("credit %d after drain", c)
	}
	// Nothing flows without new credit.
	b.put("drain", []byte{9})
	if n := b.queueLen("drain"); n != 1 {
		t.Errorf("queue length %d after drain, want 1", n)
	}
	if err := rcv.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	if m, err := rcv.Receive(ctx, nil); err != nil || m.GetData()[0] != 9 {
		t.Fatalf("after drain: %v %v", m, err)
	}
}

// TestDispositions settles peek-lock deliveries with each outcome; the
// broker answers each with a settled disposition, the lock-lost case
// with rejected(com.microsoft:message-lock-lost).
func TestDispositions(t *testing.T) {
	b := newTestBroker()
	lost := make(map[string]bool)
	var lostMu sync.Mutex
	b.answer = func(d *OutgoingDelivery, state frames.DeliveryState) frames.DeliveryState {
		lostMu.Lock()
		defer lostMu.Unlock()
		if lost[string(d.Tag)] {
			return &frames.Rejected{Error: &Error{Condition: "com.microsoft:message-lock-lost", Description: "lock expired"}}
		}
		return state
	}
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	rcv, err := openSession(t, conn).NewReceiver(ctx, "disp", &goamqp.ReceiverOptions{
		Credit:         10,
		SettlementMode: ptr(goamqp.ReceiverSettleModeSecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		b.put("disp", []byte{byte(i)})
	}
	var msgs []*goamqp.Message
	for range 5 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	lostMu.Lock()
	lost[string(msgs[4].DeliveryTag)] = true
	lostMu.Unlock()

	if err := rcv.AcceptMessage(ctx, msgs[0]); err != nil {
		t.Errorf("accept: %v", err)
	}
	if err := rcv.ReleaseMessage(ctx, msgs[1]); err != nil {
		t.Errorf("release: %v", err)
	}
	if err := rcv.ModifyMessage(ctx, msgs[2], &goamqp.ModifyMessageOptions{UndeliverableHere: true, Annotations: goamqp.Annotations{"k": "v"}}); err != nil {
		t.Errorf("modify: %v", err)
	}
	if err := rcv.RejectMessage(ctx, msgs[3], &goamqp.Error{Condition: "com.microsoft:dead-letter", Info: map[string]any{"DeadLetterReason": "r"}}); err != nil {
		t.Errorf("reject: %v", err)
	}
	err = rcv.AcceptMessage(ctx, msgs[4])
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:message-lock-lost" {
		t.Errorf("accept of a lost lock: %v", err)
	}

	want := []string{"Accepted", "Released", "Modified", "Rejected", "Accepted"}
	for i, w := range want {
		select {
		case ev := <-b.disps:
			if ev.settled {
				t.Errorf("disposition %d arrived settled in mode second", i)
			}
			name := fmt.Sprintf("%T", ev.state)
			if name != "*frames."+w {
				t.Errorf("disposition %d: %s, want %s", i, name, w)
			}
			if m, ok := ev.state.(*frames.Modified); ok && (!m.UndeliverableHere || m.MessageAnnotations["k"] != "v") {
				t.Errorf("modified: %+v", m)
			}
			if r, ok := ev.state.(*frames.Rejected); ok && (r.Error == nil || r.Error.Condition != "com.microsoft:dead-letter" || r.Error.Info["DeadLetterReason"] != "r") {
				t.Errorf("rejected: %+v", r)
			}
		case <-ctx.Done():
			t.Fatal("dispositions missing")
		}
	}
}

// TestReceiveAndDelete sends settled deliveries to a receiver that asked
// for snd-settle-mode settled.
func TestReceiveAndDelete(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	rcv, err := openSession(t, conn).NewReceiver(ctx, "rad", &goamqp.ReceiverOptions{
		Credit:                    10,
		RequestedSenderSettleMode: ptr(goamqp.SenderSettleModeSettled),
		SettlementMode:            ptr(goamqp.ReceiverSettleModeFirst),
	})
	if err != nil {
		t.Fatal(err)
	}
	b.put("rad", []byte("x"))
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// go-amqp accepts settled messages locally without a disposition.
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-b.disps:
		t.Errorf("unexpected disposition %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestAttachRefused refuses links with an error condition; go-amqp gets
// the condition from the detach, and the session stays usable.
func TestAttachRefused(t *testing.T) {
	b := newTestBroker()
	b.refuse["missing"] = &Error{Condition: CondNotFound, Description: "The messaging entity 'missing' could not be found."}
	srv, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	sess := openSession(t, conn)
	var ae *goamqp.Error

	_, err := sess.NewSender(ctx, "missing", nil)
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCond(CondNotFound) {
		t.Errorf("sender: %v", err)
	}
	_, err = sess.NewReceiver(ctx, "missing", nil)
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCond(CondNotFound) || ae.Description == "" {
		t.Errorf("receiver: %v", err)
	}
	snd, err := sess.NewSender(ctx, "present", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("ok")), nil); err != nil {
		t.Fatal(err)
	}
	// Refused links hold no slot.
	for c := range srv.conns {
		c.mu.Lock()
		n := c.nLinks
		c.mu.Unlock()
		if n != 1 {
			t.Errorf("%d links counted, want 1", n)
		}
	}
}

// TestCloseLink closes links from the handler side with an error.
func TestCloseLink(t *testing.T) {
	b := newTestBroker()
	links := make(chan *Link, 2)
	b.onAttach = func(l *Link) { links <- l }
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	sess := openSession(t, conn)
	snd, err := sess.NewSender(ctx, "closeme", &goamqp.SenderOptions{Name: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	l := <-links
	l.Close(&Error{Condition: CondDetachForced, Description: "idle"})
	b.waitEvent(t, "detach s1")
	var le *goamqp.LinkError
	for {
		err = snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil)
		if err != nil {
			break
		}
	}
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != goamqp.ErrCond(CondDetachForced) {
		t.Fatalf("send after close: %v", err)
	}
	// The session still works.
	rcv, err := sess.NewReceiver(ctx, "closeme", nil)
	if err != nil {
		t.Fatal(err)
	}
	l = <-links
	l.Close(nil)
	_, err = rcv.Receive(ctx, nil)
	if !errors.As(err, &le) {
		t.Fatalf("receive after close: %v", err)
	}
}

// TestDeferredAttach answers attaches later from another goroutine.
func TestDeferredAttach(t *testing.T) {
	b := newTestBroker()
	b.deferAll = true
	b.deferDelay = 20 * time.Millisecond
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	sess := openSession(t, conn)
	snd, err := sess.NewSender(ctx, "later", nil)
	if err != nil {
		t.Fatal(err)
	}
	if snd.Properties()["deferred"] != true {
		t.Errorf("properties %v", snd.Properties())
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "later", &goamqp.ReceiverOptions{Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rcv.Receive(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// TestLinkLookup finds outgoing links by target address and by name.
func TestLinkLookup(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	var sc *Conn
	select {
	case sc = <-b.conns:
	case <-ctx.Done():
		t.Fatal("no connection")
	}
	sess := openSession(t, conn)
	rcv, err := sess.NewReceiver(ctx, "$cbs", &goamqp.ReceiverOptions{Name: "cbs-1", TargetAddress: "$cbs$$cbs-reply-to-1"})
	if err != nil {
		t.Fatal(err)
	}
	if l := sc.OutgoingLinkByTarget("$cbs$$cbs-reply-to-1"); l == nil || l.Name() != "cbs-1" || l.SourceAddress() != "$cbs" {
		t.Errorf("by target: %v", l)
	}
	if l := sc.OutgoingLink("cbs-1"); l == nil || l.TargetAddress() != "$cbs$$cbs-reply-to-1" {
		t.Errorf("by name: %v", l)
	}
	if n := len(sc.OutgoingLinks()); n != 1 {
		t.Errorf("%d outgoing links", n)
	}
	if err := rcv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b.waitEvent(t, "detach cbs-1")
	if l := sc.OutgoingLink("cbs-1"); l != nil {
		t.Error("link still found after detach")
	}
}

// TestSessionChurn opens and closes sessions and links many times, as the
// Go SDK does per CBS token, and checks that nothing is left behind.
func TestSessionChurn(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{})
	conn := dial(t, addr, nil)
	ctx := testCtx(t)
	var sc *Conn
	select {
	case sc = <-b.conns:
	case <-ctx.Done():
		t.Fatal("no connection")
	}
	for i := range 100 {
		sess := openSession(t, conn)
		snd, err := sess.NewSender(ctx, "$cbs", &goamqp.SenderOptions{Name: fmt.Sprintf("s%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		rcv, err := sess.NewReceiver(ctx, "$cbs", &goamqp.ReceiverOptions{Name: fmt.Sprintf("r%d", i), TargetAddress: "reply"})
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Send(ctx, goamqp.NewMessage([]byte("token")), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := rcv.Receive(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // half detach first, half just end the session
			if err := snd.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rcv.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(testTimeout)
	for {
		sc.mu.Lock()
		nSess, nLinks, nOut := sc.nSess, sc.nLinks, len(sc.outLinks)
		sc.mu.Unlock()
		if nSess == 0 && nLinks == 0 && nOut == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %d sessions, %d links, %d outgoing", nSess, nLinks, nOut)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeartbeats keeps a quiet go-amqp connection alive: the client's
// short idle time-out only holds because the server sends empty frames.
func TestHeartbeats(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{IdleTimeout: 100 * time.Millisecond})
	// go-amqp advertises half of this (our heartbeats then come every
	// 75 ms) and closes after all of it.
	conn := dial(t, addr, &goamqp.ConnOptions{IdleTimeout: 300 * time.Millisecond})
	ctx := testCtx(t)
	sess := openSession(t, conn)
	time.Sleep(time.Second)
	snd, err := sess.NewSender(ctx, "hb", nil)
	if err != nil {
		t.Fatalf("connection died while idle: %v", err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
}

// TestIdleTimeout closes a connection that sends nothing.
func TestIdleTimeout(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{IdleTimeout: 50 * time.Millisecond})
	r := dialRaw(t, addr)
	o := r.handshake(nil)
	if o.IdleTimeOut != 50 {
		t.Errorf("advertised idle-time-out %d", o.IdleTimeOut)
	}
	start := time.Now()
	c := r.expectClose(CondResourceLimitExceeded)
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("closed after %v, before twice the idle time-out", d)
	}
	t.Logf("closed: %v", c.Error)
}

// TestMaxConnections refuses connections beyond the limit with a clean
// close and accepts again once one ends.
func TestMaxConnections(t *testing.T) {
	b := newTestBroker()
	_, addr := startServer(t, b, Config{MaxConnections: 1})
	ctx := testCtx(t)
	c1, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	<-b.conns

	r := dialRaw(t, addr)
	r.handshake(nil)
	r.expectClose(CondResourceLimitExceeded)

	// go-amqp sees the refusal as soon as it uses the connection.
	c2, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err == nil {
		_, err = c2.NewSession(ctx, nil)
		_ = c2.Close()
	}
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCond(CondResourceLimitExceeded) {
		t.Errorf("second connection: %v", err)
	}

	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	b.waitEvent(t, "disconnect")
	c3 := dial(t, addr, nil)
	openSession(t, c3)
}

// TestShutdown closes live connections with amqp:connection:forced.
func TestShutdown(t *testing.T) {
	b := newTestBroker()
	srv, err := NewServer(b, Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ctx := testCtx(t)
	conn, err := goamqp.Dial(ctx, "amqp://"+ln.Addr().String(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	_, err = rcv.Receive(ctx, nil)
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCond(CondConnectionForced) {
		t.Errorf("receive after shutdown: %v", err)
	}
	if err := srv.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
}
