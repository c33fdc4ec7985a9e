package servicebus_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

// TestLargeBodiesFromFramesSDK: 64 KB and 20 KB bodies, which the broker
// stores from where they lie in the delivery's frames (store.Op.More),
// sent by two Go SDK senders at once, one by one and in batches, onto a
// file store (whose log writes them as iovecs of their own, group
// committed together), come back byte for byte, and again after the
// broker restarts on the same store.
func TestLargeBodiesFromFramesSDK(t *testing.T) {
	dir := t.TempDir()
	st, err := filestore.Open(filestore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	first := st
	t.Cleanup(func() { _ = first.Close() }) // after the server stops (a second Close is harmless)
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, Store: st})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 120*time.Second)

	want := map[string][]byte{}
	var mu sync.Mutex
	body := func(rng *rand.Rand, id string, size int) []byte {
		b := make([]byte, size)
		rng.Read(b)
		mu.Lock()
		want[id] = b
		mu.Unlock()
		return bytes.Clone(b)
	}
	sizes := []int{64 << 10, 20 << 10, 1 << 10}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		snd := newSender(t, c, "q")
		wg.Go(func() {
			rng := rand.New(rand.NewSource(int64(w)))
			for i := range 9 {
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := snd.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: body(rng, id, sizes[i%3])}, nil); err != nil {
					errs <- err
					return
				}
			}
			batch, err := snd.NewMessageBatch(ctx, nil)
			if err != nil {
				errs <- err
				return
			}
			for i := range 3 {
				id := fmt.Sprintf("w%d-batch%d", w, i)
				if err := batch.AddMessage(&azservicebus.Message{MessageID: &id, Body: body(rng, id, 20<<10+i)}, nil); err != nil {
					errs <- err
					return
				}
			}
			if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	r := newReceiver(t, c, "q", nil)
	peeked, err := r.PeekMessages(ctx, len(want), &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	if err != nil || len(peeked) != len(want) {
		t.Fatalf("PeekMessages = %d messages, %v; want %d", len(peeked), err, len(want))
	}
	for _, m := range peeked {
		if !bytes.Equal(m.Body, want[m.MessageID]) {
			t.Fatalf("message %s: %d bytes, changed on the way", m.MessageID, len(m.Body))
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The broker restarts on the same directory: the log gives them back.
	_ = c.Close(ctx)
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = filestore.Open(filestore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	second := st
	t.Cleanup(func() { _ = second.Close() })
	s = servicebustest.Start(t, &servicebustest.Options{Store: st})
	c = newClient(t, s.ConnectionString)
	r = newReceiver(t, c, "q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	for _, m := range receiveN(t, ctx, r, len(want)) {
		if !bytes.Equal(m.Body, want[m.MessageID]) {
			t.Fatalf("after a restart, message %s: %d bytes, changed on the way", m.MessageID, len(m.Body))
		}
	}
}
