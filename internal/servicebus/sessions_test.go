package servicebus_test

// Message sessions with the official Go SDK (azservicebus v1.11.0), and the
// JS SDK's plain-string session filter at the wire.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	amqp "github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

func sessionQueueProps(lock time.Duration) broker.QueueProperties {
	p := broker.DefaultQueueProperties()
	p.RequiresSession = true
	if lock > 0 {
		p.LockDuration = lock
	}
	return p
}

func startSessions(t *testing.T, opts *servicebustest.Options) *servicebustest.Server {
	t.Helper()
	if opts.QueueProps == nil {
		opts.QueueProps = map[string]broker.QueueProperties{}
	}
	opts.Queues = append(opts.Queues, "sq", "plain")
	if _, ok := opts.QueueProps["sq"]; !ok {
		opts.QueueProps["sq"] = sessionQueueProps(0)
	}
	return servicebustest.Start(t, opts)
}

func smessage(session, body string) *azservicebus.Message {
	return &azservicebus.Message{Body: []byte(body), SessionID: ptr(session)}
}

func acceptSession(t *testing.T, ctx context.Context, c *azservicebus.Client, q, id string) *azservicebus.SessionReceiver {
	t.Helper()
	r, err := c.AcceptSessionForQueue(ctx, q, id, nil)
	if err != nil {
		t.Fatalf("AcceptSessionForQueue(%s, %s): %v", q, id, err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func acceptNext(t *testing.T, ctx context.Context, c *azservicebus.Client, q string) *azservicebus.SessionReceiver {
	t.Helper()
	r, err := c.AcceptNextSessionForQueue(ctx, q, nil)
	if err != nil {
		t.Fatalf("AcceptNextSessionForQueue(%s): %v", q, err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func receiveSession(t *testing.T, ctx context.Context, r *azservicebus.SessionReceiver, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var out []*azservicebus.ReceivedMessage
	for len(out) < n {
		ms, err := r.ReceiveMessages(ctx, n-len(out), nil)
		if err != nil {
			t.Fatalf("ReceiveMessages after %d of %d: %v", len(out), n, err)
		}
		out = append(out, ms...)
	}
	return out
}

func msgBodies(ms []*azservicebus.ReceivedMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	return out
}

func amqpCondition(err error) amqp.ErrCond {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e.Condition
	}
	return ""
}

func TestSessionsQueue(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	snd := newSender(t, c, "sq")
	for i := range 9 {
		send(t, ctx, snd, smessage([]string{"b", "a", "c"}[i%3], fmt.Sprint(i)))
	}
	// A send without a session id is refused.
	err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("none")}, nil)
	if err == nil || !strings.Contains(err.Error(), "SessionId was not set") || amqpCondition(err) != amqp.ErrCondNotAllowed {
		t.Fatalf("send without a session id: %v", err)
	}

	// A named session: its messages only, in order, locked with it.
	before := time.Now()
	a := acceptSession(t, ctx, c, "sq", "a")
	if a.SessionID() != "a" || a.LockedUntil().Before(before.Add(50*time.Second)) || a.LockedUntil().After(time.Now().Add(61*time.Second)) {
		t.Fatalf("session %q locked until %v", a.SessionID(), a.LockedUntil())
	}
	ms := receiveSession(t, ctx, a, 3)
	if got := msgBodies(ms); !slices.Equal(got, []string{"1", "4", "7"}) {
		t.Fatalf("session a got %v", got)
	}
	for _, m := range ms {
		if *m.SessionID != "a" || m.DeliveryCount != 1 || m.LockedUntil == nil {
			t.Fatalf("message %+v", m)
		}
	}
	// Abandoned: it comes back first, its count raised.
	if err := a.AbandonMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	again := receiveSession(t, ctx, a, 1)[0]
	if string(again.Body) != "1" || again.DeliveryCount != 2 {
		t.Fatalf("after abandon %q count %d", again.Body, again.DeliveryCount)
	}
	for _, m := range append(ms[1:], again) {
		if err := a.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}

	// A second receiver cannot lock session a.
	_, err = c.AcceptSessionForQueue(ctx, "sq", "a", nil)
	if amqpCondition(err) != "com.microsoft:session-cannot-be-locked" {
		t.Fatalf("second AcceptSessionForQueue(a) = %v; want session-cannot-be-locked", err)
	}

	// The next available sessions, oldest first: b, then c.
	b := acceptNext(t, ctx, c, "sq")
	if b.SessionID() != "b" {
		t.Fatalf("next session %q; want b", b.SessionID())
	}
	if got := msgBodies(receiveSession(t, ctx, b, 3)); !slices.Equal(got, []string{"0", "3", "6"}) {
		t.Fatalf("session b got %v", got)
	}
	cs := acceptNext(t, ctx, c, "sq")
	if cs.SessionID() != "c" {
		t.Fatalf("next session %q; want c", cs.SessionID())
	}
	// Peek sees the receiver's session only (from the start).
	peeked, err := cs.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	if err != nil || !slices.Equal(msgBodies(peeked), []string{"2", "5", "8"}) {
		t.Fatalf("PeekMessages %v %v", msgBodies(peeked), err)
	}

	// Session state.
	if st, err := cs.GetSessionState(ctx, nil); err != nil || st != nil {
		t.Fatalf("initial state %q %v", st, err)
	}
	if err := cs.SetSessionState(ctx, []byte("step 1"), nil); err != nil {
		t.Fatal(err)
	}
	if st, err := cs.GetSessionState(ctx, nil); err != nil || string(st) != "step 1" {
		t.Fatalf("state %q %v", st, err)
	}
	// Renewing the lock moves it forward.
	old := cs.LockedUntil()
	time.Sleep(20 * time.Millisecond)
	if err := cs.RenewSessionLock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if !cs.LockedUntil().After(old) {
		t.Fatalf("LockedUntil %v after renewal, was %v", cs.LockedUntil(), old)
	}

	// Listing: every session with messages or state.
	pager := c.NewListSessionsForQueuePager("sq", nil)
	var ids []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, page.Sessions...)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"b", "c"}) {
		t.Fatalf("ListSessions %v", ids)
	}
	since := time.Now().Add(-time.Minute)
	pager = c.NewListSessionsForQueuePager("sq", &azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: &since})
	page, err := pager.NextPage(ctx)
	if err != nil || !slices.Equal(page.Sessions, []string{"c"}) {
		t.Fatalf("ListSessions(updated after) %v %v", page.Sessions, err)
	}
	// The plain queue has none.
	page, err = c.NewListSessionsForQueuePager("plain", nil).NextPage(ctx)
	if err != nil || len(page.Sessions) != 0 {
		t.Fatalf("ListSessions(plain) %v %v", page.Sessions, err)
	}
}

func TestSessionsRefusals(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("a", "x"))

	// A non-session receiver on a session queue.
	r := newReceiver(t, c, "sq", nil)
	_, err := r.ReceiveMessages(ctx, 1, nil)
	if amqpCondition(err) != amqp.ErrCondNotAllowed ||
		!strings.Contains(err.Error(), "It is not possible for an entity that requires sessions to create a non-sessionful message receiver.") {
		t.Fatalf("non-session receiver: %v", err)
	}
	// A session receiver on a queue without sessions.
	_, err = c.AcceptSessionForQueue(ctx, "plain", "a", nil)
	if amqpCondition(err) != amqp.ErrCondNotAllowed || !strings.Contains(err.Error(), "does not require sessions") {
		t.Fatalf("session receiver on a plain queue: %v", err)
	}
	// Nothing to accept: the wait ends with com.microsoft:timeout.
	tctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	acceptSession(t, ctx, c, "sq", "a") // the only session is locked
	start := time.Now()
	_, err = c.AcceptNextSessionForQueue(tctx, "sq", nil)
	if sbCode(err) != azservicebus.CodeTimeout {
		t.Fatalf("AcceptNextSessionForQueue with nothing available = %v (code %q); want CodeTimeout", err, sbCode(err))
	}
	if d := time.Since(start); d < time.Second || d > 10*time.Second {
		t.Fatalf("waited %v", d)
	}
}

func TestSessionsDeferral(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("a", "1"), smessage("a", "2"), smessage("b", "3"))
	a := acceptSession(t, ctx, c, "sq", "a")
	m := receiveSession(t, ctx, a, 1)[0]
	if err := a.DeferMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	next := receiveSession(t, ctx, a, 1)[0]
	if string(next.Body) != "2" {
		t.Fatalf("after defer got %q", next.Body)
	}
	if err := a.CompleteMessage(ctx, next, nil); err != nil {
		t.Fatal(err)
	}
	// Another session's receiver cannot take it.
	b := acceptSession(t, ctx, c, "sq", "b")
	if got, err := b.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil); err == nil && len(got) > 0 {
		t.Fatalf("session b received a's deferred message")
	}
	// The session inferred from the link (the SDK sends no session-id).
	got, err := a.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	if err != nil || len(got) != 1 || string(got[0].Body) != "1" || got[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("ReceiveDeferredMessages %v %v", got, err)
	}
	if err := a.CompleteMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	if c := s.Broker; c != nil {
		info, _ := c.GetQueue("sq")
		if info.Counts.Active != 1 || info.Counts.Deferred != 0 {
			t.Fatalf("counts %+v", info.Counts)
		}
	}
}

// TestSessionsLockExpiry: a session whose lock runs out moves to the next
// receiver, its unsettled messages' delivery counts raised; the first
// receiver's settlements fail with lock lost. Closing a receiver releases
// its session without raising them.
func TestSessionsLockExpiry(t *testing.T) {
	fc := clock.NewFake(time.Now())
	s := startSessions(t, &servicebustest.Options{Clock: fc,
		QueueProps: map[string]broker.QueueProperties{"sq": sessionQueueProps(5 * time.Second)}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("a", "1"), smessage("a", "2"))

	// Released by Close: counts unchanged.
	first := acceptNext(t, ctx, c, "sq")
	if got := receiveSession(t, ctx, first, 2); got[0].DeliveryCount != 1 {
		t.Fatalf("first delivery count %d", got[0].DeliveryCount)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a := acceptNext(t, ctx, c, "sq")
	ms := receiveSession(t, ctx, a, 2)
	if ms[0].DeliveryCount != 1 || ms[1].DeliveryCount != 1 {
		t.Fatalf("after close: counts %d %d; want 1 1", ms[0].DeliveryCount, ms[1].DeliveryCount)
	}

	// The lock expires (LockDuration 5 s on the fake clock): the broker
	// detaches the link with session-lock-lost and the session goes to the
	// next receiver, the counts of the messages it held raised.
	s.Advance(t, 6*time.Second)
	b := acceptNext(t, ctx, c, "sq")
	if b.SessionID() != "a" {
		t.Fatalf("session %q", b.SessionID())
	}
	got := receiveSession(t, ctx, b, 2)
	if !slices.Equal(msgBodies(got), []string{"1", "2"}) || got[0].DeliveryCount != 2 || got[1].DeliveryCount != 2 {
		t.Fatalf("after expiry %v counts %d %d; want 2 2", msgBodies(got), got[0].DeliveryCount, got[1].DeliveryCount)
	}
	// The first receiver's settlement fails: its link is gone and the
	// SDK's attempt to lock session a again is refused. (Settling by lock
	// token on $management gets 410 session-lock-lost, which the SDK's
	// session receiver retries for a while: TestWireSessionLockLost.)
	err := a.CompleteMessage(ctx, ms[0], nil)
	if err == nil || amqpCondition(err) != "com.microsoft:session-cannot-be-locked" {
		t.Fatalf("CompleteMessage after losing the session = %v", err)
	}
	for _, m := range got {
		if err := b.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSessionsSubscription(t *testing.T) {
	sp := broker.DefaultSubscriptionProperties()
	sp.RequiresSession = true
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"},
		Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s", Properties: &sp}}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "t"), smessage("x", "1"), &azservicebus.Message{Body: []byte("no session")},
		smessage("y", "2"), smessage("x", "3"))

	x, err := c.AcceptSessionForSubscription(ctx, "t", "s", "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close(context.Background())
	if got := msgBodies(receiveSession(t, ctx, x, 2)); !slices.Equal(got, []string{"1", "3"}) {
		t.Fatalf("session x got %v", got)
	}
	y, err := c.AcceptNextSessionForSubscription(ctx, "t", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close(context.Background())
	if y.SessionID() != "y" {
		t.Fatalf("next session %q", y.SessionID())
	}
	if got := msgBodies(receiveSession(t, ctx, y, 1)); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("session y got %v", got)
	}
	// The session-less message is in the subscription's dead-letter queue,
	// read by a normal receiver.
	dlq, err := c.NewReceiverForSubscription("t", "s", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(context.Background())
	dl, err := dlq.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(dl) != 1 || string(dl[0].Body) != "no session" ||
		dl[0].DeadLetterReason == nil || *dl[0].DeadLetterReason != "Session id is null." ||
		dl[0].DeadLetterErrorDescription == nil || *dl[0].DeadLetterErrorDescription != "Session enabled entity doesn't allow a message whose session identifier is null." {
		t.Fatalf("dead letter %v %v", dl, err)
	}
	if err := dlq.CompleteMessage(ctx, dl[0], nil); err != nil {
		t.Fatal(err)
	}
	pager := c.NewListSessionsForSubscriptionPager("t", "s", nil)
	page, err := pager.NextPage(ctx)
	if err != nil || !slices.Equal(page.Sessions, []string{"x", "y"}) {
		t.Fatalf("ListSessions %v %v", page.Sessions, err)
	}
}

// TestSessionsStatePersists: session state survives a broker restart on
// the filestore.
func TestSessionsStatePersists(t *testing.T) {
	dir := t.TempDir()
	openStore := func() *filestore.Store {
		st, err := filestore.Open(filestore.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := openStore()
	s := startSessions(t, &servicebustest.Options{Store: st})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("a", "1"), smessage("a", "2"))
	a := acceptSession(t, ctx, c, "sq", "a")
	m := receiveSession(t, ctx, a, 1)[0]
	if err := a.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	state := []byte("checkpoint after 1")
	if err := a.SetSessionState(ctx, state, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = openStore()
	defer st.Close()
	s2 := servicebustest.Start(t, &servicebustest.Options{Store: st})
	c2 := newClient(t, s2.ConnectionString)
	a2 := acceptNext(t, ctx, c2, "sq")
	if a2.SessionID() != "a" {
		t.Fatalf("session %q", a2.SessionID())
	}
	if got, err := a2.GetSessionState(ctx, nil); err != nil || string(got) != string(state) {
		t.Fatalf("state after restart %q %v", got, err)
	}
	rest := receiveSession(t, ctx, a2, 1)
	if string(rest[0].Body) != "2" {
		t.Fatalf("after restart got %q", rest[0].Body)
	}
	if err := a2.CompleteMessage(ctx, rest[0], nil); err != nil {
		t.Fatal(err)
	}
	// Clearing it (nil) leaves a session with neither messages nor state.
	if err := a2.SetSessionState(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := a2.GetSessionState(ctx, nil); err != nil || got != nil {
		t.Fatalf("cleared state %q %v", got, err)
	}
	s2.Close()
}

// TestWireSessionFilterPlainString: the JS SDK sends the session filter as
// a plain string (or null) and needs the echo in that form; go-amqp can
// only send (and decode) a described filter, so this attaches with raw
// frames.
func TestWireSessionFilterPlainString(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{AllowAnyKey: true})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("js-session", "x"), smessage("other", "y"))

	rc := dialRaw(t, s.Addr)
	// Named, plain string.
	reply, detach := rc.attachReceiver(1, "named", "sq", map[frames.Symbol]any{"com.microsoft:session-filter": "js-session"}, nil)
	if detach != nil {
		t.Fatalf("named attach refused: %v", detach.Error)
	}
	if v := reply.Source.Filter["com.microsoft:session-filter"]; v != "js-session" {
		t.Fatalf("named echo %#v; want the plain string", v)
	}
	ticks, ok := reply.Properties["com.microsoft:locked-until-utc"].(int64)
	if until := time.UnixMilli((ticks - 621355968000000000) / 10000); !ok || until.Before(time.Now().Add(50*time.Second)) || until.After(time.Now().Add(70*time.Second)) {
		t.Fatalf("locked-until-utc %#v", reply.Properties["com.microsoft:locked-until-utc"])
	}
	// Next available: null → the session id as a plain string.
	reply, detach = rc.attachReceiver(2, "next", "sq", map[frames.Symbol]any{"com.microsoft:session-filter": nil},
		map[frames.Symbol]any{"com.microsoft:timeout": uint32(5000)})
	if detach != nil || reply.Source.Filter["com.microsoft:session-filter"] != "other" {
		t.Fatalf("next echo %#v %v", reply.Source, detach)
	}
	// Locked: null source and detach session-cannot-be-locked.
	reply, detach = rc.attachReceiver(3, "again", "sq", map[frames.Symbol]any{"com.microsoft:session-filter": "js-session"}, nil)
	if reply.Source != nil || detach == nil || detach.Error == nil || detach.Error.Condition != "com.microsoft:session-cannot-be-locked" {
		t.Fatalf("second attach %+v %+v", reply, detach)
	}
	// Nothing left: null source and detach com.microsoft:timeout.
	start := time.Now()
	reply, detach = rc.attachReceiver(4, "none", "sq", map[frames.Symbol]any{"com.microsoft:session-filter": nil},
		map[frames.Symbol]any{"com.microsoft:timeout": uint32(300)})
	if reply.Source != nil || detach == nil || detach.Error == nil || detach.Error.Condition != "com.microsoft:timeout" || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("timed-out attach %+v %+v after %v", reply, detach, time.Since(start))
	}
}

// rawConn is a minimal AMQP client on raw frames (SASL ANONYMOUS, one
// session on channel 0).
type rawConn struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	rc := &rawConn{t: t, nc: nc, r: bufio.NewReader(nc)}
	rc.header(frames.ProtocolHeaderSASL)
	if _, ok := rc.read().Body.(*frames.SASLMechanisms); !ok {
		t.Fatal("no sasl-mechanisms")
	}
	rc.send(&frames.SASLInit{Mechanism: frames.SASLMechanismAnonymous})
	if o, ok := rc.read().Body.(*frames.SASLOutcome); !ok || o.Code != frames.SASLCodeOK {
		t.Fatal("SASL failed")
	}
	rc.header(frames.ProtocolHeaderAMQP)
	rc.send(&frames.Open{ContainerID: "raw-js-like", Hostname: "localhost", MaxFrameSize: 65536, ChannelMax: 10})
	if _, ok := rc.read().Body.(*frames.Open); !ok {
		t.Fatal("no open")
	}
	rc.send(&frames.Begin{NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 100})
	if _, ok := rc.read().Body.(*frames.Begin); !ok {
		t.Fatal("no begin")
	}
	return rc
}

func (rc *rawConn) header(h string) {
	rc.t.Helper()
	if _, err := rc.nc.Write([]byte(h)); err != nil {
		rc.t.Fatal(err)
	}
	var got [8]byte
	if _, err := io.ReadFull(rc.r, got[:]); err != nil || string(got[:]) != h {
		rc.t.Fatalf("protocol header %q %v", got, err)
	}
}

func (rc *rawConn) send(b frames.Body) {
	rc.t.Helper()
	out, err := frames.AppendFrame(nil, 0, b)
	if err != nil {
		rc.t.Fatal(err)
	}
	if _, err := rc.nc.Write(out); err != nil {
		rc.t.Fatal(err)
	}
}

// read returns the next non-empty frame.
func (rc *rawConn) read() frames.Frame {
	rc.t.Helper()
	for {
		f, err := frames.ReadFrame(rc.r, 0)
		if err != nil {
			rc.t.Fatal(err)
		}
		if f.Body != nil {
			return f
		}
	}
}

// attachReceiver attaches a peek-lock receiver link as rhea does and
// returns the broker's attach reply and, if the link was refused, its
// detach.
func (rc *rawConn) attachReceiver(handle uint32, name, source string, filter, props map[frames.Symbol]any) (*frames.Attach, *frames.Detach) {
	rc.t.Helper()
	rc.send(&frames.Attach{Name: name, Handle: handle, Role: frames.RoleReceiver,
		SndSettleMode: frames.Ptr(frames.SenderSettleModeUnsettled), RcvSettleMode: frames.Ptr(frames.ReceiverSettleModeSecond),
		Source: &frames.Source{Address: source, Filter: filter}, Target: &frames.Target{Address: "client"}, Properties: props})
	var reply *frames.Attach
	for {
		switch b := rc.read().Body.(type) {
		case *frames.Attach:
			if b.Name != name {
				continue
			}
			reply = b
			if b.Source != nil {
				return reply, nil
			}
		case *frames.Detach:
			if reply != nil {
				return reply, b
			}
		}
	}
}

// TestWireSessionLockLost: a Go-style session receiver with go-amqp, and
// the session management operations at the wire: the session inferred
// from associated-link-name, the types of the answers, the link detached
// with session-lock-lost when the lock expires, and 410
// session-lock-lost for its lock tokens and session afterwards.
func TestWireSessionLockLost(t *testing.T) {
	fc := clock.NewFake(time.Now())
	s := startSessions(t, &servicebustest.Options{Clock: fc,
		QueueProps: map[string]broker.QueueProperties{"sq": sessionQueueProps(5 * time.Second)}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/sq")
	sess := w.session()
	snd, err := sess.NewSender(w.ctx, "sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ sid, body string }{{"a", "1"}, {"b", "2"}, {"a", "3"}} {
		if err := snd.Send(w.ctx, &amqp.Message{Data: [][]byte{[]byte(m.body)}, Properties: &amqp.MessageProperties{GroupID: &m.sid}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	second := amqp.ReceiverSettleModeSecond
	rcv, err := sess.NewReceiver(w.ctx, "sq", &amqp.ReceiverOptions{Name: "session-link", Credit: 10, SettlementMode: &second,
		Filters: []amqp.LinkFilter{amqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000c, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if v := rcv.LinkSourceFilterValue("com.microsoft:session-filter"); v != "a" {
		t.Fatalf("filter echo %#v; want \"a\"", v)
	}
	if _, ok := rcv.Properties()["com.microsoft:locked-until-utc"].(int64); !ok {
		t.Fatalf("locked-until-utc %#v", rcv.Properties()["com.microsoft:locked-until-utc"])
	}
	m, err := rcv.Receive(w.ctx, nil)
	if err != nil || string(m.GetData()) != "1" {
		t.Fatalf("receive %v %v", m, err)
	}
	tok := rfcFromTag(t, m.DeliveryTag)

	mg := w.newRPC("sq/$management", "mgmt-reply-"+uuid.NewString(), false)
	call := func(op string, link string, body map[string]any) *amqp.Message {
		props := map[string]any{"operation": op}
		if link != "" {
			props["associated-link-name"] = link
		}
		return mg.call(uuid.NewString(), props, body)
	}
	// The session from the link: renew (expiration is a timestamp), peek.
	resp := call("com.microsoft:renew-session-lock", "session-link", map[string]any{})
	if exp, ok := resp.Value.(map[string]any)["expiration"].(time.Time); status(t, resp) != 200 || !ok || exp.IsZero() {
		t.Fatalf("renew-session-lock %d %#v", status(t, resp), resp.Value)
	}
	resp = call("com.microsoft:peek-message", "session-link", map[string]any{"from-sequence-number": int64(0), "message-count": int32(10)})
	if list, _ := resp.Value.(map[string]any)["messages"].([]any); status(t, resp) != 200 || len(list) != 2 {
		t.Fatalf("session peek %d %#v", status(t, resp), resp.Value)
	}
	// State by session id (the JS way): null, then binary.
	resp = call("com.microsoft:get-session-state", "", map[string]any{"session-id": "a"})
	if v, present := resp.Value.(map[string]any)["session-state"]; status(t, resp) != 200 || !present || v != nil {
		t.Fatalf("get-session-state %d %#v", status(t, resp), resp.Value)
	}
	resp = call("com.microsoft:set-session-state", "", map[string]any{"session-id": "a", "session-state": []byte{1, 2, 3}})
	if status(t, resp) != 200 {
		t.Fatalf("set-session-state %d %v", status(t, resp), resp.ApplicationProperties)
	}
	resp = call("com.microsoft:get-session-state", "session-link", map[string]any{"session-id": "a"})
	if v, _ := resp.Value.(map[string]any)["session-state"].([]byte); string(v) != "\x01\x02\x03" {
		t.Fatalf("get-session-state %#v", resp.Value)
	}
	// Listing (the Go SDK's "all" time): sessions-ids is an array of string.
	resp = call("com.microsoft:get-message-sessions", "", map[string]any{
		"last-updated-time": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), "skip": int32(0), "top": int32(100)})
	if ids, ok := resp.Value.(map[string]any)["sessions-ids"].([]string); status(t, resp) != 200 || !ok || !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("get-message-sessions %d %#v", status(t, resp), resp.Value)
	}
	resp = call("com.microsoft:get-message-sessions", "", map[string]any{"last-updated-time": time.Now().Add(time.Hour), "skip": int32(0), "top": int32(100)})
	if status(t, resp) != 204 {
		t.Fatalf("get-message-sessions (none updated) %d %#v", status(t, resp), resp.Value)
	}

	// The lock expires: the link is detached with session-lock-lost.
	s.Advance(t, 6*time.Second)
	for err == nil { // "3" was delivered too (credit 10)
		_, err = rcv.Receive(w.ctx, nil)
	}
	var le *amqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != "com.microsoft:session-lock-lost" {
		t.Fatalf("receive after expiry: %v", err)
	}
	for _, tc := range []struct {
		op   string
		body map[string]any
	}{
		{"com.microsoft:update-disposition", map[string]any{"disposition-status": "completed", "lock-tokens": []amqp.UUID{tok}}},
		{"com.microsoft:renew-session-lock", map[string]any{"session-id": "a"}},
		{"com.microsoft:get-session-state", map[string]any{"session-id": "a"}},
	} {
		resp := call(tc.op, "session-link", tc.body)
		if status(t, resp) != 410 || resp.ApplicationProperties["errorCondition"] != "com.microsoft:session-lock-lost" {
			t.Fatalf("%s after expiry: %d %v", tc.op, status(t, resp), resp.ApplicationProperties)
		}
	}
}

func TestSessionsReceiveAndDelete(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("a", "1"), smessage("b", "x"), smessage("a", "2"))
	r, err := c.AcceptSessionForQueue(ctx, "sq", "a", &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if got := msgBodies(receiveSession(t, ctx, r, 2)); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("got %v", got)
	}
	info, err := s.Broker.GetQueue("sq")
	if err != nil || info.Counts.Active != 1 {
		t.Fatalf("counts %+v %v", info.Counts, err)
	}
}
