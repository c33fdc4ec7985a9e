package servicebus_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// TestConcurrentCompletes completes many messages from many goroutines
// at once, as the SDK's users do, with abandons mixed in: the completes of
// a link are batched by its settler (one broker call and one commit per
// batch), each one must still be answered only for its own message, and
// the other outcomes keep working alongside.
func TestConcurrentCompletes(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 60*time.Second)
	snd := newSender(t, c, "q")
	const n = 600
	for i := 0; i < n; i += 100 {
		b, err := snd.NewMessageBatch(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := i; j < i+100; j++ {
			if err := b.AddMessage(&azservicebus.Message{Body: fmt.Appendf(nil, "%d", j)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := snd.SendMessageBatch(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
	}

	r := newReceiver(t, c, "q", nil)
	ms := receiveN(t, ctx, r, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	abandoned := map[string]bool{}
	work := make(chan *azservicebus.ReceivedMessage)
	for range 64 {
		wg.Go(func() {
			for m := range work {
				var err error
				if m.SequenceNumber != nil && *m.SequenceNumber%50 == 0 {
					err = r.AbandonMessage(ctx, m, nil)
				} else {
					err = r.CompleteMessage(ctx, m, nil)
				}
				if err != nil {
					errs <- fmt.Errorf("settling %s: %w", m.Body, err)
				}
			}
		})
	}
	for _, m := range ms {
		if *m.SequenceNumber%50 == 0 {
			abandoned[string(m.Body)] = true
		}
		work <- m
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if qi, _ := s.Broker.GetQueue("q"); qi.Counts.Total != int64(len(abandoned)) {
		t.Fatalf("queue holds %d messages after the settlements; want the %d abandoned", qi.Counts.Total, len(abandoned))
	}
	// The abandoned ones come back, once more; completing them empties the
	// queue.
	for _, m := range receiveN(t, ctx, r, len(abandoned)) {
		if !abandoned[string(m.Body)] || m.DeliveryCount != 2 {
			t.Fatalf("redelivered %s with DeliveryCount %d", m.Body, m.DeliveryCount)
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if qi, _ := s.Broker.GetQueue("q"); qi.Counts.Total != 0 {
		t.Fatalf("queue holds %d messages at the end", qi.Counts.Total)
	}
}
