package servicebus_test

// What Microsoft's live tests for the Go SDK catch (and reading the SDKs
// shows) about message fidelity and the management operations.

import (
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	amqp "github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/broker"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

// TestDeliveryAnnotationsAndFooterKept: as in the SDK's
// TestSender_SendAMQPMessageWithMultipleByteSlicesInData, a message's
// delivery annotations and footer come back as sent, the delivery
// annotations beside the broker's x-opt-lock-token, and no
// x-opt-enqueue-sequence-number is added. It survives a restart (the
// codec's version 2).
func TestDeliveryAnnotationsAndFooterKept(t *testing.T) {
	dir := t.TempDir()
	openStore := func() *filestore.Store {
		st, err := filestore.Open(filestore.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := openStore()
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, Store: st})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)

	sender := newSender(t, c, "q")
	in := &azservicebus.AMQPAnnotatedMessage{
		DeliveryAnnotations:   map[any]any{"x-opt-delivery-annotation-test": "test-value"},
		MessageAnnotations:    map[any]any{"x-opt-message-annotation-test": "test-value"},
		Footer:                map[any]any{"x-opt-footer-test": "footer-value"},
		Header:                &azservicebus.AMQPAnnotatedMessageHeader{Priority: 100, Durable: true},
		Body:                  azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("Hello World"), []byte("And another message!")}},
		ApplicationProperties: map[string]any{"hello": "world"},
	}
	for range 2 {
		if err := sender.SendAMQPAnnotatedMessage(ctx, in, nil); err != nil {
			t.Fatal(err)
		}
	}
	check := func(m *azservicebus.ReceivedMessage, locked bool) {
		t.Helper()
		raw := m.RawAMQPMessage
		if raw.Footer["x-opt-footer-test"] != "footer-value" || len(raw.Footer) != 1 {
			t.Errorf("footer %v", raw.Footer)
		}
		want := 1
		if locked {
			want = 2
			if _, ok := raw.DeliveryAnnotations["x-opt-lock-token"]; !ok {
				t.Errorf("no x-opt-lock-token in %v", raw.DeliveryAnnotations)
			}
		}
		if raw.DeliveryAnnotations["x-opt-delivery-annotation-test"] != "test-value" || len(raw.DeliveryAnnotations) != want {
			t.Errorf("delivery annotations %v", raw.DeliveryAnnotations)
		}
		ma := raw.MessageAnnotations
		if ma["x-opt-message-annotation-test"] != "test-value" {
			t.Errorf("message annotations %v", ma)
		}
		for k := range ma {
			switch k {
			case "x-opt-message-annotation-test", "x-opt-enqueued-time", "x-opt-sequence-number", "x-opt-locked-until":
			default:
				t.Errorf("message annotation %v = %v, which Service Bus does not send here", k, ma[k])
			}
		}
		if m.EnqueuedSequenceNumber != nil {
			t.Errorf("EnqueuedSequenceNumber %d", *m.EnqueuedSequenceNumber)
		}
	}
	r := newReceiver(t, c, "q", nil)
	ms := receiveN(t, ctx, r, 1)
	check(ms[0], true)
	if err := r.CompleteMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	// Peeked: no lock token; after a restart, still all there.
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openStore()
	t.Cleanup(func() { _ = st.Close() }) // after the server's own cleanup
	s = servicebustest.Start(t, &servicebustest.Options{Store: st})
	c = newClient(t, s.ConnectionString)
	r = newReceiver(t, c, "q", nil)
	peeked, err := r.PeekMessages(ctx, 1, nil)
	if err != nil || len(peeked) != 1 {
		t.Fatalf("peek: %v %v", peeked, err)
	}
	check(peeked[0], false)
}

// TestWireBatchDeleteAndPeekOptions: batch-delete-messages honours
// session-id (only that session's messages go) and refuses more than
// 4,000 per call; peek honours omit-message-body; the sender attach
// reply carries com.microsoft:max-message-batch-size.
func TestWireBatchDeleteAndPeekOptions(t *testing.T) {
	props := sessionQueueProps(time.Minute)
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q", "sq"},
		QueueProps: map[string]broker.QueueProperties{"sq": props}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "sq"), smessage("a", "a1"), smessage("a", "a2"),
		smessage("b", "b1"), smessage("b", "b2"), smessage("b", "b3"))
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("body")})

	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/sq")
	w.authorize("amqp://" + s.Addr + "/q")
	call := func(r *rpc, op string, body map[string]any) *amqp.Message {
		return r.call(uuid.NewString(), map[string]any{"operation": op}, body)
	}
	smg := w.newRPC("sq/$management", "sq-reply-"+uuid.NewString(), false)
	del := func(body map[string]any) (int32, any) {
		resp := call(smg, "com.microsoft:batch-delete-messages", body)
		return status(t, resp), resp.Value
	}
	future := time.Now().Add(time.Hour)
	if code, v := del(map[string]any{"message-count": int32(10), "enqueued-time-utc": future, "session-id": "a"}); code != 200 || v.(map[string]any)["message-count"] != int32(2) {
		t.Fatalf("delete in session a: %d %v", code, v)
	}
	if code, _ := del(map[string]any{"message-count": int32(4001), "enqueued-time-utc": future}); code != 400 {
		t.Fatalf("delete 4001: %d, want 400", code)
	}
	if code, _ := del(map[string]any{"message-count": int32(10), "enqueued-time-utc": future, "session-id": "nobody"}); code != 204 {
		t.Fatalf("delete in an unknown session: %d, want 204", code)
	}
	peek := func(r *rpc, body map[string]any) []*amqp.Message {
		t.Helper()
		resp := call(r, "com.microsoft:peek-message", body)
		if code := status(t, resp); code != 200 {
			t.Fatalf("peek: %d %v", code, resp.ApplicationProperties)
		}
		var out []*amqp.Message
		for _, e := range resp.Value.(map[string]any)["messages"].([]any) {
			m := new(amqp.Message)
			if err := m.UnmarshalBinary(e.(map[string]any)["message"].([]byte)); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	left := peek(smg, map[string]any{"from-sequence-number": int64(0), "message-count": int32(10)})
	if len(left) != 3 || *left[0].Properties.GroupID != "b" {
		t.Fatalf("after deleting session a: %d messages left", len(left))
	}

	qmg := w.newRPC("q/$management", "q-reply-"+uuid.NewString(), false)
	if m := peek(qmg, map[string]any{"from-sequence-number": int64(0), "message-count": int32(1), "omit-message-body": true})[0]; m.Data != nil || m.Value != nil {
		t.Fatalf("omit-message-body: body %q %v", m.Data, m.Value)
	}
	if m := peek(qmg, map[string]any{"from-sequence-number": int64(0), "message-count": int32(1)})[0]; string(m.GetData()) != "body" {
		t.Fatalf("peek: body %q", m.GetData())
	}

	// The batch limit: the entity's message limit, at most 1 MB.
	big := broker.DefaultQueueProperties()
	big.MaxMessageSizeInKilobytes = 102400
	s.CreateQueue(t, "big", big)
	w.authorize("amqp://" + s.Addr + "/big")
	// A batch over 1 MB is refused there, however large its messages may be.
	var parts [][]byte
	for range 2 {
		enc, err := (&amqp.Message{Data: [][]byte{make([]byte, 600<<10)}}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, enc)
	}
	bsnd, err := w.session().NewSender(w.ctx, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bsnd.Send(w.ctx, &amqp.Message{Format: 0x80013700, Data: parts}, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondMessageSizeExceeded {
		t.Fatalf("a 1.2 MB batch: %v, want message-size-exceeded", err)
	}
	if err := bsnd.Send(w.ctx, &amqp.Message{Data: [][]byte{make([]byte, 1200<<10)}}, nil); err != nil {
		t.Fatalf("a 1.2 MB message: %v", err)
	}
	for q, want := range map[string]uint64{"q": 256 * 1024, "big": 1 << 20} {
		snd, err := w.session().NewSender(w.ctx, q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v := snd.Properties()["com.microsoft:max-message-batch-size"]; v != want {
			t.Fatalf("%s: max-message-batch-size %T %v, want %d", q, v, v, want)
		}
	}
}

// TestWireDispositionBeforeManagement: a disposition followed at once by
// a management request on the same connection (another session) is
// applied first. The client settles without waiting (rcv-settle-mode
// first, as uamqp does), defers, and asks for the deferred message by
// sequence number straight away: it is found every time.
func TestWireDispositionBeforeManagement(t *testing.T) {
	const n = 150
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	sender := newSender(t, c, "q")
	for i := range n {
		send(t, ctx, sender, &azservicebus.Message{Body: []byte{byte(i)}})
	}

	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/q")
	rcv, err := w.session().NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{
		SettlementMode: amqp.ReceiverSettleModeFirst.Ptr(), Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	mg := w.newRPC("q/$management", "mgmt-reply-"+uuid.NewString(), false)
	for i := range n {
		m, err := rcv.Receive(w.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		seq := m.Annotations["x-opt-sequence-number"].(int64)
		if err := rcv.ModifyMessage(w.ctx, m, &amqp.ModifyMessageOptions{UndeliverableHere: true}); err != nil {
			t.Fatal(err)
		}
		resp := mg.call(uuid.NewString(), map[string]any{"operation": "com.microsoft:receive-by-sequence-number"},
			map[string]any{"sequence-numbers": []int64{seq}, "receiver-settle-mode": uint32(0)})
		if code := status(t, resp); code != 200 {
			t.Fatalf("iteration %d: receive-by-sequence-number of the message just deferred: %d %v", i, code, resp.ApplicationProperties)
		}
	}
}

// TestSessionEmptyID: as in the SDK's TestSessionReceiver_blankSessionIDs,
// SessionID "" is a session of its own on send, schedule and accept.
func TestSessionEmptyID(t *testing.T) {
	s := startSessions(t, &servicebustest.Options{})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	sender := newSender(t, c, "sq")
	send(t, ctx, sender, &azservicebus.Message{Body: []byte("sent"), SessionID: ptr("")})
	if _, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("scheduled"), SessionID: ptr("")}}, time.Now(), nil); err != nil {
		t.Fatalf("ScheduleMessages: %v", err)
	}
	send(t, ctx, sender, smessage("other", "not this one"))
	r := acceptSession(t, ctx, c, "sq", "")
	if r.SessionID() != "" || r.LockedUntil().IsZero() {
		t.Fatalf("session %q locked until %v", r.SessionID(), r.LockedUntil())
	}
	got := receiveSession(t, ctx, r, 2)
	for _, m := range got {
		if m.SessionID == nil || *m.SessionID != "" {
			t.Errorf("message %q: SessionID %v", m.Body, m.SessionID)
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if b := msgBodies(got); len(b) != 2 || b[0] != "sent" || b[1] != "scheduled" {
		t.Fatalf("received %v", b)
	}
}
