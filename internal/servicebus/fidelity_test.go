package servicebus_test

// What Microsoft's live tests for the Go SDK catch (and reading the SDKs
// shows) about message fidelity and the management operations.

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

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
