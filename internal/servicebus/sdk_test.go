package servicebus_test

// Tests with the official Go SDK (azservicebus v1.11.0) against a real
// server on loopback, using the emulator-style connection string.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

func newClient(t *testing.T, connStr string) *azservicebus.Client {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(connStr, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func ptr[T any](v T) *T { return &v }

func newSender(t *testing.T, c *azservicebus.Client, q string) *azservicebus.Sender {
	t.Helper()
	s, err := c.NewSender(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func newReceiver(t *testing.T, c *azservicebus.Client, q string, opts *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	r, err := c.NewReceiverForQueue(q, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func send(t *testing.T, ctx context.Context, s *azservicebus.Sender, msgs ...*azservicebus.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := s.SendMessage(ctx, m, nil); err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
	}
}

// receiveN receives exactly n messages (within ctx).
func receiveN(t *testing.T, ctx context.Context, r *azservicebus.Receiver, n int) []*azservicebus.ReceivedMessage {
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

// receiveNone checks that nothing arrives within d.
func receiveNone(t *testing.T, r *azservicebus.Receiver, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ms, err := r.ReceiveMessages(ctx, 1, nil)
	if len(ms) > 0 {
		t.Fatalf("unexpected message %q", ms[0].Body)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReceiveMessages: %v", err)
	}
}

func sbCode(err error) azservicebus.Code {
	var e *azservicebus.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestSendReceiveRoundTrip(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q1"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)

	in := &azservicebus.Message{
		Body:             []byte("hello"),
		MessageID:        ptr("mid-1"),
		CorrelationID:    ptr("cid-1"),
		Subject:          ptr("subject"),
		ContentType:      ptr("text/plain"),
		To:               ptr("to-addr"),
		ReplyTo:          ptr("reply-addr"),
		TimeToLive:       ptr(time.Hour),
		PartitionKey:     ptr("pk"),
		ReplyToSessionID: ptr("rts"),
		ApplicationProperties: map[string]any{
			"s": "v", "i32": int32(-7), "i64": int64(1) << 40, "f": 1.5, "b": true,
			"t": time.UnixMilli(1700000000123).UTC(), "bin": []byte{1, 2},
		},
	}
	send(t, ctx, newSender(t, c, "Q1"), in) // entity names are case-insensitive
	r := newReceiver(t, c, "q1", nil)
	m := receiveN(t, ctx, r, 1)[0]

	if string(m.Body) != "hello" || m.MessageID != "mid-1" || *m.CorrelationID != "cid-1" || *m.Subject != "subject" ||
		*m.ContentType != "text/plain" || *m.To != "to-addr" || *m.ReplyTo != "reply-addr" || *m.PartitionKey != "pk" ||
		*m.ReplyToSessionID != "rts" {
		t.Fatalf("received %+v", m)
	}
	for k, v := range in.ApplicationProperties {
		got := m.ApplicationProperties[k]
		if fmt.Sprint(got) != fmt.Sprint(v) || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", v) {
			t.Errorf("property %s = %#v; want %#v", k, got, v)
		}
	}
	// System properties (§4.4, §4.5).
	if m.DeliveryCount != 1 {
		t.Errorf("DeliveryCount = %d; want 1", m.DeliveryCount)
	}
	// EnqueuedSequenceNumber is for auto-forwarded messages only.
	if m.SequenceNumber == nil || *m.SequenceNumber != 1 || m.EnqueuedSequenceNumber != nil {
		t.Errorf("sequence numbers %v %v", m.SequenceNumber, m.EnqueuedSequenceNumber)
	}
	if m.EnqueuedTime == nil || time.Since(*m.EnqueuedTime) > time.Minute {
		t.Errorf("EnqueuedTime = %v", m.EnqueuedTime)
	}
	if m.LockedUntil == nil || !m.LockedUntil.After(time.Now()) {
		t.Errorf("LockedUntil = %v", m.LockedUntil)
	}
	if m.TimeToLive == nil || *m.TimeToLive != time.Hour || m.ExpiresAt == nil || !m.ExpiresAt.Equal(m.EnqueuedTime.Add(time.Hour)) {
		t.Errorf("TimeToLive %v ExpiresAt %v", m.TimeToLive, m.ExpiresAt)
	}
	if m.State != azservicebus.MessageStateActive {
		t.Errorf("State = %v", m.State)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("CompleteMessage: %v", err)
	}
	if qi, _ := s.Broker.GetQueue("q1"); qi.Counts.Total != 0 {
		t.Fatalf("queue still holds %d messages after complete", qi.Counts.Total)
	}
}

func TestConcurrentSends(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	snd := newSender(t, c, "q")
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := snd.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%d-%d", w, i)}, nil); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if qi, _ := s.Broker.GetQueue("q"); qi.Counts.Active != workers*each {
		t.Errorf("queue holds %d messages; want %d", qi.Counts.Active, workers*each)
	}
	for err := range errs {
		t.Fatalf("concurrent SendMessage: %v", err)
	}
	r := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	got := map[string]bool{}
	for _, m := range receiveN(t, ctx, r, workers*each) {
		got[string(m.Body)] = true
	}
	if len(got) != workers*each {
		t.Fatalf("received %d distinct messages; want %d", len(got), workers*each)
	}
}

// TestReusedFrameBuffersKeepMessagesIntact: the endpoint reuses a sent
// message's frame buffer once the sender link has stored it. Several
// connections send distinct bodies of every pooled size class (and
// larger), one by one and in batches, with binary properties that alias
// the frame; every message must come back byte for byte.
func TestReusedFrameBuffersKeepMessagesIntact(t *testing.T) {
	frames.PoisonReleased(true) // a use after release reads 0xdb at once
	t.Cleanup(func() { frames.PoisonReleased(false) })
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	ctx := testCtx(t, 60*time.Second)
	sizes := []int{0, 1, 300, 511, 513, 1000, 4000, 20000, 65000, 70000}
	const workers, rounds = 4, 6
	body := func(w, r, i int) []byte {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(w*131 + r*17 + i*7 + j)
		}
		return b
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		c := newClient(t, s.ConnectionString) // a connection each
		snd := newSender(t, c, "q")
		wg.Go(func() {
			for r := range rounds {
				for i := range sizes {
					b := body(w, r, i)
					m := &azservicebus.Message{Body: b, ApplicationProperties: map[string]any{"w": int64(w), "r": int64(r), "i": int64(i), "copy": slices.Clone(b[:min(len(b), 64)])}}
					if r%2 == 0 {
						if err := snd.SendMessage(ctx, m, nil); err != nil {
							errs <- err
							return
						}
						continue
					}
					batch, err := snd.NewMessageBatch(ctx, nil)
					if err == nil {
						err = batch.AddMessage(m, nil)
					}
					if err == nil {
						err = snd.SendMessageBatch(ctx, batch, nil)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := workers * rounds * len(sizes)
	if qi, _ := s.Broker.GetQueue("q"); qi.Counts.Active != int64(n) {
		t.Fatalf("queue holds %d messages; want %d", qi.Counts.Active, n)
	}
	c := newClient(t, s.ConnectionString)
	rcv := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	seen := map[[3]int64]bool{}
	for _, m := range receiveN(t, testCtx(t, 20*time.Second), rcv, n) {
		w, r, i := m.ApplicationProperties["w"].(int64), m.ApplicationProperties["r"].(int64), m.ApplicationProperties["i"].(int64)
		want := body(int(w), int(r), int(i))
		if !bytes.Equal(m.Body, want) || !bytes.Equal(m.ApplicationProperties["copy"].([]byte), want[:min(len(want), 64)]) {
			t.Fatalf("message w%d r%d i%d (%d bytes) came back changed", w, r, i, len(want))
		}
		seen[[3]int64{w, r, i}] = true
	}
	if len(seen) != n {
		t.Fatalf("received %d distinct messages; want %d", len(seen), n)
	}
}

func TestBatchSend(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "q")
	batch, err := snd.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := batch.AddMessage(&azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i), ApplicationProperties: map[string]any{"i": int64(i)}}, nil); err != nil {
			t.Fatalf("AddMessage: %v", err)
		}
	}
	if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	r := newReceiver(t, c, "q", nil)
	ms := receiveN(t, ctx, r, 10)
	for i, m := range ms {
		if string(m.Body) != fmt.Sprintf("m%d", i) || m.ApplicationProperties["i"] != int64(i) || *m.SequenceNumber != int64(i+1) {
			t.Fatalf("message %d: body %q props %v seq %d", i, m.Body, m.ApplicationProperties, *m.SequenceNumber)
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatchSizeFromLink checks §0.2: the batch limit comes from the
// attach reply's max-message-size (the entity's MaxMessageSizeInKilobytes).
func TestBatchSizeFromLink(t *testing.T) {
	p := broker.DefaultQueueProperties()
	p.MaxMessageSizeInKilobytes = 64
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"small"}, QueueProps: map[string]broker.QueueProperties{"small": p}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "small")
	batch, err := snd.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.AddMessage(&azservicebus.Message{Body: make([]byte, 30<<10)}, nil); err != nil {
		t.Fatalf("30 KiB into a 64 KiB batch: %v", err)
	}
	if err := batch.AddMessage(&azservicebus.Message{Body: make([]byte, 40<<10)}, nil); !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("70 KiB into a 64 KiB batch: %v; want ErrMessageTooLarge", err)
	}
}

func TestOversizeMessage(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "q")
	err := snd.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 300<<10)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("SendMessage(300 KiB) = %v; want ErrMessageTooLarge", err)
	}
	// The link is still usable.
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("small")})
}

func TestReceiveAndDelete(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("a")}, &azservicebus.Message{Body: []byte("b")})
	r := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	ms := receiveN(t, ctx, r, 2)
	if string(ms[0].Body) != "a" || string(ms[1].Body) != "b" || ms[0].LockedUntil != nil {
		t.Fatalf("received %q %q locked %v", ms[0].Body, ms[1].Body, ms[0].LockedUntil)
	}
	if err := r.CompleteMessage(ctx, ms[0], nil); err == nil {
		t.Fatal("completing a receive-and-delete message succeeded")
	}
	if qi, _ := s.Broker.GetQueue("q"); qi.Counts.Total != 0 {
		t.Fatalf("queue holds %d messages after receive-and-delete", qi.Counts.Total)
	}
}

func TestAbandonWithProperties(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("x"), ApplicationProperties: map[string]any{"keep": "k", "n": int32(1)}})
	r := newReceiver(t, c, "q", nil)
	m := receiveN(t, ctx, r, 1)[0]
	if err := r.AbandonMessage(ctx, m, &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{"n": int32(2), "added": "yes"}}); err != nil {
		t.Fatalf("AbandonMessage: %v", err)
	}
	m = receiveN(t, ctx, r, 1)[0]
	if m.DeliveryCount != 2 {
		t.Errorf("DeliveryCount after abandon = %d; want 2", m.DeliveryCount)
	}
	want := map[string]any{"keep": "k", "n": int32(2), "added": "yes"}
	for k, v := range want {
		if m.ApplicationProperties[k] != v {
			t.Errorf("property %s = %#v; want %#v", k, m.ApplicationProperties[k], v)
		}
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
}

func TestDeadLetterAndDLQReceive(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("bad")}, &azservicebus.Message{Body: []byte("plain")})
	r := newReceiver(t, c, "q", nil)
	ms := receiveN(t, ctx, r, 2)
	if err := r.DeadLetterMessage(ctx, ms[0], &azservicebus.DeadLetterOptions{
		Reason: ptr("BadInput"), ErrorDescription: ptr("could not parse"), PropertiesToModify: map[string]any{"extra": int64(9)},
	}); err != nil {
		t.Fatalf("DeadLetterMessage: %v", err)
	}
	if err := r.DeadLetterMessage(ctx, ms[1], nil); err != nil {
		t.Fatalf("DeadLetterMessage without options: %v", err)
	}
	dlq := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	got := receiveN(t, ctx, dlq, 2)
	d := got[0]
	if string(d.Body) != "bad" || d.DeadLetterReason == nil || *d.DeadLetterReason != "BadInput" ||
		d.DeadLetterErrorDescription == nil || *d.DeadLetterErrorDescription != "could not parse" || d.ApplicationProperties["extra"] != int64(9) {
		t.Fatalf("dead-lettered message: body %q reason %v desc %v props %v", d.Body, d.DeadLetterReason, d.DeadLetterErrorDescription, d.ApplicationProperties)
	}
	if string(got[1].Body) != "plain" {
		t.Fatalf("second DLQ message %q", got[1].Body)
	}
	for _, m := range got {
		if err := dlq.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatalf("completing a DLQ message: %v", err)
		}
	}
	// A message in the dead-letter queue cannot be dead-lettered again.
	if qi, _ := s.Broker.GetQueue("q"); qi.Counts.Total != 0 {
		t.Fatalf("%d messages left", qi.Counts.Total)
	}
}

func TestDeferAndReceiveDeferred(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("later")})
	r := newReceiver(t, c, "q", nil)
	m := receiveN(t, ctx, r, 1)[0]
	seq := *m.SequenceNumber
	if err := r.DeferMessage(ctx, m, &azservicebus.DeferMessageOptions{PropertiesToModify: map[string]any{"deferred": true}}); err != nil {
		t.Fatalf("DeferMessage: %v", err)
	}
	receiveNone(t, r, 300*time.Millisecond)

	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil || len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("PeekMessages = %v, %v; want one deferred message", peeked, err)
	}

	ds, err := r.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
	if err != nil || len(ds) != 1 {
		t.Fatalf("ReceiveDeferredMessages = %v, %v", ds, err)
	}
	d := ds[0]
	if string(d.Body) != "later" || d.ApplicationProperties["deferred"] != true || d.State != azservicebus.MessageStateDeferred || d.LockedUntil == nil {
		t.Fatalf("deferred message: %q props %v state %v locked %v", d.Body, d.ApplicationProperties, d.State, d.LockedUntil)
	}
	if d.LockToken == ([16]byte{}) {
		t.Fatal("deferred message has no lock token (x-opt-lock-token delivery annotation)")
	}
	if err := r.RenewMessageLock(ctx, d, nil); err != nil {
		t.Fatalf("RenewMessageLock on a deferred message: %v", err)
	}
	// Deferred messages settle through $management (update-disposition).
	if err := r.CompleteMessage(ctx, d, nil); err != nil {
		t.Fatalf("CompleteMessage(deferred): %v", err)
	}
	if _, err := r.ReceiveDeferredMessages(ctx, []int64{seq}, nil); err == nil {
		t.Fatal("receiving a completed deferred message succeeded")
	}
}

func TestDeferredSettlementsViaManagement(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("1")}, &azservicebus.Message{Body: []byte("2")}, &azservicebus.Message{Body: []byte("3")})
	r := newReceiver(t, c, "q", nil)
	var seqs []int64
	for _, m := range receiveN(t, ctx, r, 3) {
		seqs = append(seqs, *m.SequenceNumber)
		if err := r.DeferMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := r.ReceiveDeferredMessages(ctx, seqs, nil)
	if err != nil || len(ds) != 3 {
		t.Fatalf("ReceiveDeferredMessages = %d, %v", len(ds), err)
	}
	if err := r.AbandonMessage(ctx, ds[0], &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{"a": "b"}}); err != nil {
		t.Fatalf("AbandonMessage(deferred): %v", err)
	}
	if err := r.DeadLetterMessage(ctx, ds[1], &azservicebus.DeadLetterOptions{Reason: ptr("why"), ErrorDescription: ptr("because")}); err != nil {
		t.Fatalf("DeadLetterMessage(deferred): %v", err)
	}
	if err := r.DeferMessage(ctx, ds[2], nil); err != nil {
		t.Fatalf("DeferMessage(deferred): %v", err)
	}
	// The abandoned one is still deferred, with its new property.
	again, err := r.ReceiveDeferredMessages(ctx, []int64{seqs[0]}, nil)
	if err != nil || len(again) != 1 || again[0].ApplicationProperties["a"] != "b" {
		t.Fatalf("abandoned deferred message: %v, %v", again, err)
	}
	dlq := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dm := receiveN(t, ctx, dlq, 1)[0]
	if *dm.DeadLetterReason != "why" || *dm.DeadLetterErrorDescription != "because" {
		t.Fatalf("dead-letter reason %q description %q", *dm.DeadLetterReason, *dm.DeadLetterErrorDescription)
	}
}

func TestRenewMessageLock(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("x")})
	r := newReceiver(t, c, "q", nil)
	m := receiveN(t, ctx, r, 1)[0]
	before := *m.LockedUntil
	time.Sleep(20 * time.Millisecond)
	if err := r.RenewMessageLock(ctx, m, nil); err != nil {
		t.Fatalf("RenewMessageLock: %v", err)
	}
	if !m.LockedUntil.After(before) {
		t.Fatalf("LockedUntil %v not after %v", *m.LockedUntil, before)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.RenewMessageLock(ctx, m, nil); sbCode(err) != azservicebus.CodeLockLost {
		t.Fatalf("RenewMessageLock after complete = %v; want CodeLockLost", err)
	}
}

func TestLockLost(t *testing.T) {
	fc := clock.NewFake(time.Now())
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, Clock: fc})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("x")}, &azservicebus.Message{Body: []byte("y")})
	r := newReceiver(t, c, "q", nil)
	ms := receiveN(t, ctx, r, 2)

	// Renewing a lock that was used up: lock lost.
	if err := r.CompleteMessage(ctx, ms[1], nil); err != nil {
		t.Fatal(err)
	}
	if err := r.RenewMessageLock(ctx, ms[1], nil); sbCode(err) != azservicebus.CodeLockLost {
		t.Fatalf("RenewMessageLock after complete = %v; want CodeLockLost", err)
	}

	// Lock expiry.
	s.Advance(t, 2*time.Minute)
	err := r.CompleteMessage(ctx, ms[0], nil)
	if sbCode(err) != azservicebus.CodeLockLost {
		t.Fatalf("CompleteMessage after lock expiry = %v; want CodeLockLost", err)
	}
	if !strings.Contains(err.Error(), "TrackingId:") {
		t.Errorf("lock-lost error lacks a tracking id: %v", err)
	}
	// The message is back with a higher delivery count.
	m := receiveN(t, ctx, r, 1)[0]
	if string(m.Body) != "x" || m.DeliveryCount != 2 {
		t.Fatalf("redelivered %q with DeliveryCount %d; want x, 2", m.Body, m.DeliveryCount)
	}
}

func TestScheduleAndCancel(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "q")
	at := time.Now().Add(time.Hour)
	seqs, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("s1")}, {Body: []byte("s2")}}, at, nil)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("ScheduleMessages = %v, %v", seqs, err)
	}
	r := newReceiver(t, c, "q", nil)
	peeked, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	if err != nil || len(peeked) != 2 {
		t.Fatalf("PeekMessages = %v, %v", peeked, err)
	}
	for _, p := range peeked {
		if p.State != azservicebus.MessageStateScheduled || p.ScheduledEnqueueTime == nil || p.ScheduledEnqueueTime.Unix() != at.Unix() {
			t.Fatalf("peeked scheduled message: state %v at %v", p.State, p.ScheduledEnqueueTime)
		}
	}
	if err := snd.CancelScheduledMessages(ctx, seqs[:1], nil); err != nil {
		t.Fatalf("CancelScheduledMessages: %v", err)
	}
	peeked, err = r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	if err != nil || len(peeked) != 1 || *peeked[0].SequenceNumber != seqs[1] {
		t.Fatalf("after cancel PeekMessages = %v, %v", peeked, err)
	}
	receiveNone(t, r, 200*time.Millisecond)

	// A message scheduled in the near past is available at once; one
	// sent with ScheduledEnqueueTime appears when due.
	send(t, ctx, snd, &azservicebus.Message{Body: []byte("soon"), ScheduledEnqueueTime: ptr(time.Now().Add(500 * time.Millisecond))})
	m := receiveN(t, ctx, r, 1)[0]
	if string(m.Body) != "soon" || m.ScheduledEnqueueTime == nil {
		t.Fatalf("scheduled send: %q at %v", m.Body, m.ScheduledEnqueueTime)
	}
}

func TestPeekFromSequenceNumber(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "q")
	for i := range 5 {
		send(t, ctx, snd, &azservicebus.Message{Body: fmt.Appendf(nil, "p%d", i)})
	}
	r := newReceiver(t, c, "q", nil)
	ps, err := r.PeekMessages(ctx, 2, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(3))})
	if err != nil || len(ps) != 2 || *ps[0].SequenceNumber != 3 || *ps[1].SequenceNumber != 4 || string(ps[0].Body) != "p2" {
		t.Fatalf("PeekMessages(from 3, 2) = %v, %v", ps, err)
	}
	if ps[0].LockedUntil != nil {
		t.Fatal("peeked message carries a lock")
	}
	// Without FromSequenceNumber the SDK walks on from its last implicit
	// peek: all five, then nothing (204: an empty result).
	ps, err = r.PeekMessages(ctx, 10, nil)
	if err != nil || len(ps) != 5 || *ps[4].SequenceNumber != 5 {
		t.Fatalf("PeekMessages (implicit) = %v, %v", ps, err)
	}
	ps, err = r.PeekMessages(ctx, 10, nil)
	if err != nil || len(ps) != 0 {
		t.Fatalf("PeekMessages at the end = %v, %v", ps, err)
	}
}

func TestTTLExpiryToDeadLetter(t *testing.T) {
	p := broker.DefaultQueueProperties()
	p.DeadLetteringOnMessageExpiration = true
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, QueueProps: map[string]broker.QueueProperties{"q": p}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("short"), TimeToLive: ptr(time.Second)})
	dlq := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	m := receiveN(t, ctx, dlq, 1)[0]
	if string(m.Body) != "short" || m.DeadLetterReason == nil || *m.DeadLetterReason != broker.ReasonTTLExpired {
		t.Fatalf("expired message: %q reason %v", m.Body, m.DeadLetterReason)
	}
	if err := dlq.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
}

func TestMaxDeliveryCount(t *testing.T) {
	p := broker.DefaultQueueProperties()
	p.MaxDeliveryCount = 2
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, QueueProps: map[string]broker.QueueProperties{"q": p}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("poison")})
	r := newReceiver(t, c, "q", nil)
	for i := 1; i <= 2; i++ {
		m := receiveN(t, ctx, r, 1)[0]
		if m.DeliveryCount != uint32(i) {
			t.Fatalf("delivery %d has DeliveryCount %d", i, m.DeliveryCount)
		}
		if err := r.AbandonMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	receiveNone(t, r, 200*time.Millisecond)
	dlq := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter, ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	m := receiveN(t, ctx, dlq, 1)[0]
	if *m.DeadLetterReason != broker.ReasonMaxDeliveryCountExceeded {
		t.Fatalf("reason %q", *m.DeadLetterReason)
	}
}

func TestDuplicateDetection(t *testing.T) {
	p := broker.DefaultQueueProperties()
	p.RequiresDuplicateDetection = true
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, QueueProps: map[string]broker.QueueProperties{"q": p}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "q")
	send(t, ctx, snd, &azservicebus.Message{MessageID: ptr("same"), Body: []byte("first")}, &azservicebus.Message{MessageID: ptr("same"), Body: []byte("second")},
		&azservicebus.Message{MessageID: ptr("other"), Body: []byte("third")})
	r := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	ms := receiveN(t, ctx, r, 2)
	if string(ms[0].Body) != "first" || string(ms[1].Body) != "third" {
		t.Fatalf("received %q, %q", ms[0].Body, ms[1].Body)
	}
	receiveNone(t, r, 200*time.Millisecond)
}

func TestUnknownEntity(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	err := newSender(t, c, "nope").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if sbCode(err) != azservicebus.CodeNotFound {
		t.Fatalf("send to unknown queue = %v; want CodeNotFound", err)
	}
	if !strings.Contains(err.Error(), "The messaging entity 'sb://127.0.0.1/nope' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions. TrackingId:") {
		t.Errorf("not-found text: %v", err)
	}
	_, err = newReceiver(t, c, "nope", nil).ReceiveMessages(ctx, 1, nil)
	if sbCode(err) != azservicebus.CodeNotFound {
		t.Fatalf("receive from unknown queue = %v; want CodeNotFound", err)
	}
}

// TestInvalidNameAddress: an address whose entity name no entity can have
// is not found, and the description says why; a name the rule refuses for
// new entities but older data may hold ("x/../y") is simply not found.
func TestInvalidNameAddress(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q", "y"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	err := newSender(t, c, "a b").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if sbCode(err) != azservicebus.CodeNotFound || !strings.Contains(err.Error(), "The messaging entity 'sb://127.0.0.1/a b' could not be found.") ||
		!strings.Contains(err.Error(), `The queue or topic name "a b" is not valid: it contains ' '`) {
		t.Errorf("send to \"a b\" = %v; want CodeNotFound with the reason", err)
	}
	_, err = newReceiver(t, c, "x/../y", nil).ReceiveMessages(ctx, 1, nil)
	if sbCode(err) != azservicebus.CodeNotFound || !strings.Contains(err.Error(), "The messaging entity 'sb://127.0.0.1/x/../y' could not be found.") {
		t.Errorf("receive from x/../y = %v; want CodeNotFound", err)
	}
}

func TestWrongKeyUnauthorized(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	ctx := testCtx(t, 30*time.Second)
	for name, cs := range map[string]string{
		"wrong key":      s.ConnectionStringWith("RootManageSharedAccessKey", "not-the-key"),
		"unknown policy": s.ConnectionStringWith("Nobody", "SAS_KEY_VALUE"),
	} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, cs)
			start := time.Now()
			err := newSender(t, c, "q").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
			if sbCode(err) != azservicebus.CodeUnauthorizedAccess {
				t.Fatalf("send with a bad key = %v; want CodeUnauthorizedAccess", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("refusal took %v", d)
			}
			_, err = newReceiver(t, c, "q", nil).ReceiveMessages(ctx, 1, nil)
			if sbCode(err) != azservicebus.CodeUnauthorizedAccess {
				t.Fatalf("receive with a bad key = %v; want CodeUnauthorizedAccess", err)
			}
		})
	}
}

func TestRights(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, Policies: []auth.Policy{
		{Name: "RootManageSharedAccessKey", PrimaryKey: "root", Rights: auth.Manage},
		{Name: "sendonly", PrimaryKey: "s", Rights: auth.Send},
		{Name: "listenonly", PrimaryKey: "l", Rights: auth.Listen},
	}})
	ctx := testCtx(t, 30*time.Second)
	sendOnly := newClient(t, s.ConnectionStringWith("sendonly", "s"))
	listenOnly := newClient(t, s.ConnectionStringWith("listenonly", "l"))

	send(t, ctx, newSender(t, sendOnly, "q"), &azservicebus.Message{Body: []byte("x")})
	if _, err := newReceiver(t, sendOnly, "q", nil).ReceiveMessages(ctx, 1, nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("receive with Send rights = %v; want CodeUnauthorizedAccess", err)
	}
	if err := newSender(t, listenOnly, "q").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("send with Listen rights = %v; want CodeUnauthorizedAccess", err)
	}
	r := newReceiver(t, listenOnly, "q", nil)
	m := receiveN(t, ctx, r, 1)[0]
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := newSender(t, listenOnly, "q").ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("x")}}, time.Now().Add(time.Hour), nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("schedule with Listen rights = %v; want CodeUnauthorizedAccess", err)
	}
}

func TestAllowAnyKey(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, AllowAnyKey: true})
	c := newClient(t, s.ConnectionStringWith("whoever", "whatever"))
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("x")})
	r := newReceiver(t, c, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if m := receiveN(t, ctx, r, 1)[0]; string(m.Body) != "x" {
		t.Fatalf("got %q", m.Body)
	}
}

// TestReleasedDoesNotCount: the Go SDK releases messages that arrive after
// ReceiveMessages returned (§0.12); they come back without a higher count.
func TestReleasedDoesNotCount(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "q")
	for i := range 20 {
		send(t, ctx, snd, &azservicebus.Message{Body: fmt.Appendf(nil, "%02d", i)})
	}
	r := newReceiver(t, c, "q", nil)
	var bodies []string
	for len(bodies) < 20 {
		ms, err := r.ReceiveMessages(ctx, 20, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.DeliveryCount != 1 {
				t.Fatalf("message %s has DeliveryCount %d; released deliveries must not count", m.Body, m.DeliveryCount)
			}
			bodies = append(bodies, string(m.Body))
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(bodies)
	if len(slices.Compact(bodies)) != 20 {
		t.Fatalf("received %v", bodies)
	}
}

// TestReceiverDetachKeepsLocks: locks outlive the link; the message can
// still be completed by lock token through $management.
func TestReceiverDetachKeepsLocks(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	send(t, ctx, newSender(t, c, "q"), &azservicebus.Message{Body: []byte("x")})
	r := newReceiver(t, c, "q", nil)
	m := receiveN(t, ctx, r, 1)[0]
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := newReceiver(t, c, "q", nil)
	receiveNone(t, r2, 300*time.Millisecond) // still locked
	if err := r2.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("CompleteMessage by lock token on another receiver: %v", err)
	}
	if qi, _ := s.Broker.GetQueue("q"); qi.Counts.Total != 0 {
		t.Fatalf("%d messages left", qi.Counts.Total)
	}
}
