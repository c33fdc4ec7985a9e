package servicebus_test

// Auto-forwarding with the official Go SDK (azservicebus v1.11.0; its
// SubQueueTransfer is the transfer dead-letter queue the other SDKs call
// SubQueueTransferDeadLetter / FormatTransferDeadLetterPath): the
// broker moves messages (ForwardTo, ForwardDeadLetteredMessagesTo); the SDK
// sends to the source and receives at the destination, and reads refused
// messages from the source's transfer dead-letter queue.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

func forwardingTo(target string) broker.QueueProperties {
	p := broker.DefaultQueueProperties()
	p.ForwardTo = target
	return p
}

func TestForwardQueueToQueue(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{
		Queues:     []string{"dst", "src"},
		QueueProps: map[string]broker.QueueProperties{"src": forwardingTo("dst")},
	})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "dst"), &azservicebus.Message{Body: []byte("direct")})
	send(t, ctx, newSender(t, c, "src"),
		&azservicebus.Message{Body: []byte("one"), MessageID: ptr("m1"), ApplicationProperties: map[string]any{"k": "v"}},
		&azservicebus.Message{Body: []byte("two")})
	dst := newReceiver(t, c, "dst", nil)
	// Only auto-forwarded messages carry EnqueuedSequenceNumber (x-opt-
	// enqueue-sequence-number): the number they had in the source.
	if d := receiveN(t, ctx, dst, 1)[0]; string(d.Body) != "direct" || d.EnqueuedSequenceNumber != nil {
		t.Fatalf("direct message %q: EnqueuedSequenceNumber %v", d.Body, d.EnqueuedSequenceNumber)
	}
	ms := receiveN(t, ctx, dst, 2)
	for i, m := range ms {
		if m.EnqueuedSequenceNumber == nil || *m.EnqueuedSequenceNumber != int64(i+1) || *m.SequenceNumber != int64(i+2) {
			t.Fatalf("forwarded %q: EnqueuedSequenceNumber %v, SequenceNumber %d", m.Body, m.EnqueuedSequenceNumber, *m.SequenceNumber)
		}
	}
	if got := bodies(ms); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("dst received %v", got)
	}
	for _, m := range ms {
		if string(m.Body) == "one" && (m.MessageID != "m1" || m.ApplicationProperties["k"] != "v" || m.DeliveryCount != 1) {
			t.Fatalf("forwarded message %+v", m)
		}
		if m.DeadLetterSource != nil {
			t.Fatalf("dead-letter source %q on a plain forward", *m.DeadLetterSource)
		}
	}
	// The source cannot be received from (Service Bus refuses too).
	r := newReceiver(t, c, "src", nil)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.ReceiveMessages(rctx, 1, nil); err == nil || !strings.Contains(err.Error(), "auto-forwards") {
		t.Fatalf("receiving from a forwarding queue: %v", err)
	}
}

func TestForwardSubscriptionToQueue(t *testing.T) {
	sp := broker.DefaultSubscriptionProperties()
	sp.ForwardTo = "audit"
	s := servicebustest.Start(t, &servicebustest.Options{
		Queues: []string{"audit"},
		Topics: []string{"orders"},
		Subscriptions: []servicebustest.Subscription{
			{Topic: "orders", Name: "to-audit", Properties: &sp},
			{Topic: "orders", Name: "local"},
		},
	})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "orders"), &azservicebus.Message{Body: []byte("order-1"), Subject: ptr("new")})
	ms := receiveN(t, ctx, newReceiver(t, c, "audit", nil), 1)
	if string(ms[0].Body) != "order-1" || ms[0].Subject == nil || *ms[0].Subject != "new" {
		t.Fatalf("audit received %+v", ms[0])
	}
	ms = receiveN(t, ctx, newSubReceiver(t, c, "orders", "local", nil), 1)
	if string(ms[0].Body) != "order-1" {
		t.Fatalf("local received %q", ms[0].Body)
	}
}

func TestForwardQueueToTopicToSubscription(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{
		Topics: []string{"events"},
		Subscriptions: []servicebustest.Subscription{
			{Topic: "events", Name: "all"},
			{Topic: "events", Name: "red", DefaultRule: sqlRule("red", "color = 'red'")},
		},
	})
	s.CreateQueue(t, "inbox", forwardingTo("events"))
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "inbox")
	send(t, ctx, snd,
		&azservicebus.Message{Body: []byte("r"), ApplicationProperties: map[string]any{"color": "red"}},
		&azservicebus.Message{Body: []byte("b"), ApplicationProperties: map[string]any{"color": "blue"}})
	if got := bodies(receiveN(t, ctx, newSubReceiver(t, c, "events", "all", nil), 2)); !slices.Equal(got, []string{"b", "r"}) {
		t.Fatalf("all received %v", got)
	}
	red := newSubReceiver(t, c, "events", "red", nil)
	if got := bodies(receiveN(t, ctx, red, 1)); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("red received %v", got)
	}
	receiveNone(t, red, 300*time.Millisecond)
}

func TestForwardDeadLetteredMessages(t *testing.T) {
	p := broker.DefaultQueueProperties()
	p.ForwardDeadLetteredMessagesTo = "parking"
	s := servicebustest.Start(t, &servicebustest.Options{
		Queues:     []string{"parking", "work"},
		QueueProps: map[string]broker.QueueProperties{"work": p},
	})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "work"), &azservicebus.Message{Body: []byte("poison")})
	r := newReceiver(t, c, "work", nil)
	m := receiveN(t, ctx, r, 1)[0]
	if err := r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: ptr("bad input"), ErrorDescription: ptr("cannot parse")}); err != nil {
		t.Fatal(err)
	}
	parking := newReceiver(t, c, "parking", nil)
	got := receiveN(t, ctx, parking, 1)[0]
	if string(got.Body) != "poison" || deref(got.DeadLetterSource) != "work" ||
		deref(got.DeadLetterReason) != "bad input" || deref(got.DeadLetterErrorDescription) != "cannot parse" {
		t.Fatalf("parking received %q source %s reason %s (%s)", got.Body, deref(got.DeadLetterSource),
			deref(got.DeadLetterReason), deref(got.DeadLetterErrorDescription))
	}
	if err := parking.CompleteMessage(ctx, got, nil); err != nil {
		t.Fatal(err)
	}
	// Peeking shows the annotation too.
	send(t, ctx, newSender(t, c, "work"), &azservicebus.Message{Body: []byte("second")})
	m = receiveN(t, ctx, r, 1)[0]
	if err := r.DeadLetterMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	pr := newReceiver(t, c, "parking", nil)
	var peeked []*azservicebus.ReceivedMessage
	for len(peeked) == 0 {
		ps, err := pr.PeekMessages(ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		peeked = ps
		if len(ps) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if string(peeked[0].Body) != "second" || deref(peeked[0].DeadLetterSource) != "work" {
		t.Fatalf("peeked %q source %s", peeked[0].Body, deref(peeked[0].DeadLetterSource))
	}
}

func TestForwardChainOfFiveStopsInTransferDeadLetterQueue(t *testing.T) {
	opts := &servicebustest.Options{
		Queues:     []string{"q5", "q4", "q3", "q2", "q1"},
		QueueProps: map[string]broker.QueueProperties{},
	}
	for i := 1; i <= 4; i++ {
		opts.QueueProps["q"+string(rune('0'+i))] = forwardingTo("q" + string(rune('0'+i+1)))
	}
	s := servicebustest.Start(t, opts)
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q1"), &azservicebus.Message{Body: []byte("far traveller")})
	tdlq := newReceiver(t, c, "q4", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	m := receiveN(t, ctx, tdlq, 1)[0]
	if ps, err := tdlq.PeekMessages(ctx, 10, nil); err != nil || len(ps) != 1 || string(ps[0].Body) != "far traveller" ||
		deref(ps[0].DeadLetterReason) != "MaxTransferHopCountExceeded" {
		t.Fatalf("peek of the transfer DLQ: %d messages, %v", len(ps), err)
	}
	if string(m.Body) != "far traveller" || deref(m.DeadLetterReason) != "MaxTransferHopCountExceeded" ||
		!strings.Contains(deref(m.DeadLetterErrorDescription), "'q4'") {
		t.Fatalf("q4 transfer DLQ: %q reason %s (%s)", m.Body, deref(m.DeadLetterReason), deref(m.DeadLetterErrorDescription))
	}
	if err := tdlq.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	receiveNone(t, newReceiver(t, c, "q5", nil), 300*time.Millisecond)
	// The SDK's admin-side counts see it gone; the broker's too.
	info, err := s.Broker.GetQueue("q4")
	if err != nil || info.Counts.TransferDeadLetter != 0 || info.Counts.Total != 0 {
		t.Fatalf("q4 counts %+v %v", info.Counts, err)
	}
}

func TestForwardDestinationDisabledWhileMessagesFlow(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{
		Queues:     []string{"dst", "src"},
		QueueProps: map[string]broker.QueueProperties{"src": forwardingTo("dst")},
	})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "src")
	dst := newReceiver(t, c, "dst", nil)
	setStatus := func(st broker.EntityStatus) {
		p := broker.DefaultQueueProperties()
		p.Status = st
		if _, err := s.Broker.UpdateQueue("dst", p); err != nil {
			t.Fatal(err)
		}
	}
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("before")})
	if got := bodies(receiveN(t, ctx, dst, 1)); got[0] != "before" {
		t.Fatal(got)
	}
	setStatus(broker.StatusDisabled)
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("while disabled")}) // the source takes it
	tdlq := newReceiver(t, c, "src", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	m := receiveN(t, ctx, tdlq, 1)[0]
	if string(m.Body) != "while disabled" || deref(m.DeadLetterReason) != "MessagingEntityDisabled" ||
		!strings.Contains(deref(m.DeadLetterErrorDescription), "'dst'") {
		t.Fatalf("src transfer DLQ: %q reason %s (%s)", m.Body, deref(m.DeadLetterReason), deref(m.DeadLetterErrorDescription))
	}
	if err := tdlq.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	setStatus(broker.StatusActive)
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("after")})
	if got := bodies(receiveN(t, ctx, newReceiver(t, c, "dst", nil), 1)); got[0] != "after" {
		t.Fatal(got)
	}
}
