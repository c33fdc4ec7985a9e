package servicebus_test

import (
	"context"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	amqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// inspectHolder is the lock holder the broker's Inspect shows for seq of
// path.
func inspectHolder(t *testing.T, s *servicebustest.Server, path string, seq int64) string {
	t.Helper()
	ds, err := s.Broker.Inspect(context.Background(), path, seq, 1)
	if err != nil || len(ds) != 1 || ds[0].SequenceNumber != seq {
		t.Fatalf("Inspect(%s, %d): %v %v", path, seq, ds, err)
	}
	return ds[0].LockHolder
}

// TestLockHolderSDK: a message the Go SDK's receiver locks is shown (to
// operators, Broker.Inspect) as held by that receiver's link.
func TestLockHolderSDK(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("x")})
	r := newReceiver(t, c, "q", nil)
	m := receiveN(t, ctx, r, 1)[0]
	// The SDK does not export its link's name; the message keeps it (for
	// its management calls) in an unexported field, read here.
	link := reflect.ValueOf(m).Elem().FieldByName("linkName").String()
	if link == "" {
		t.Fatal("the SDK's message carries no link name")
	}
	got := inspectHolder(t, s, "q", *m.SequenceNumber)
	if !regexp.MustCompile(`^link ` + regexp.QuoteMeta(link) + ` on connection \S+$`).MatchString(got) {
		t.Fatalf("lock holder %q; want link %s on connection ...", got, link)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
}

// TestLockHolderWire: the holder names the attach's link name and the
// open frame's container id, for plain and session receivers.
func TestLockHolderWire(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	ctx := testCtx(t, 30*time.Second)
	conn, err := amqp.Dial(ctx, "amqp://"+s.Addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), ContainerID: "my-container"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	w := &wire{t: t, s: s, conn: conn, ctx: ctx}
	w.authorize("amqp://" + s.Addr + "/q")
	sess := w.session()
	snd, err := sess.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, amqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "q", &amqp.ReceiverOptions{Name: "orders-worker-1", Credit: 1,
		SettlementMode: amqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	seq := m.Annotations["x-opt-sequence-number"].(int64)
	if got := inspectHolder(t, s, "q", seq); got != "link orders-worker-1 on connection my-container" {
		t.Fatalf("lock holder %q", got)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestLockHolderSDKSession: a session the Go SDK accepts, and the
// messages its receiver locks, are held by that receiver's link.
func TestLockHolderSDKSession(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("a", "x"))
	r := acceptSession(t, ctx, c, "sq", "a")
	ms, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("ReceiveMessages: %v %v", ms, err)
	}
	m := ms[0]
	link := reflect.ValueOf(m).Elem().FieldByName("linkName").String()
	want := regexp.MustCompile(`^link ` + regexp.QuoteMeta(link) + ` on connection \S+$`)
	if got := inspectHolder(t, s, "sq", *m.SequenceNumber); link == "" || !want.MatchString(got) {
		t.Fatalf("message lock holder %q; want link %q on connection ...", got, link)
	}
	h, _, held, err := s.Broker.SessionHolder("sq", "a")
	if err != nil || !held || !want.MatchString(h) {
		t.Fatalf("session holder %q %v %v", h, held, err)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
}

// TestLockHolderSDKDeferred: a deferred message the Go SDK receives by
// sequence number (a management request naming its receiver link) is
// held by that link.
func TestLockHolderSDKDeferred(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("x")})
	r := newReceiver(t, c, "q", nil)
	m := receiveN(t, ctx, r, 1)[0]
	if err := r.DeferMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	ms, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("ReceiveDeferredMessages: %v %v", ms, err)
	}
	link := reflect.ValueOf(ms[0]).Elem().FieldByName("linkName").String()
	got := inspectHolder(t, s, "q", *m.SequenceNumber)
	if link == "" || !regexp.MustCompile(`^link `+regexp.QuoteMeta(link)+` on connection \S+$`).MatchString(got) {
		t.Fatalf("lock holder %q; want link %q on connection ...", got, link)
	}
}
