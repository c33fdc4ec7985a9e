package servicebus_test

// A detach the broker has answered has released what the link held: the
// session lock of a session receiver and the connection's $cbs slots.

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"time"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

// TestSessionReacceptAfterClose: the Go SDK's Close waits for the detach
// reply, so a session accepted again right after it is free, every time.
// The broker runs on a file store, whose commits (the release of the
// session's locked message is one) take a while.
func TestSessionReacceptAfterClose(t *testing.T) {
	st, err := filestore.Open(filestore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s := startSessions(t, &servicebustest.Options{Store: st})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 120*time.Second)
	snd := newSender(t, c, "sq")
	send(t, ctx, snd, smessage("a", "m"))
	// Sends to another queue keep the store's writer busy meanwhile.
	plain := newSender(t, c, "plain")
	stop, stopped := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				stopped <- nil
				return
			default:
			}
			if err := plain.SendMessage(ctx, &azservicebus.Message{Body: []byte("load")}, nil); err != nil {
				stopped <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-stopped; err != nil {
			t.Errorf("load: %v", err)
		}
	}()
	for i := range 200 {
		r, err := c.AcceptSessionForQueue(ctx, "sq", "a", nil)
		if err != nil {
			t.Fatalf("round %d: accept: %v", i, err)
		}
		// The message stays locked by the session until the receiver
		// closes: the release then has messages to give back.
		if ms := receiveSession(t, ctx, r, 1); string(ms[0].Body) != "m" {
			t.Fatalf("round %d: got %q", i, ms[0].Body)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatalf("round %d: close: %v", i, err)
		}
	}
}

// TestWireCBSReattachAfterDetach: once the client's detach of the $cbs
// pair is answered, a new pair attaches on the same connection at once.
func TestWireCBSReattachAfterDetach(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	aud := "amqp://" + s.Addr + "/q"
	for i := range 200 {
		w.authorize(aud)
		if err := w.cbs.snd.Close(w.ctx); err != nil {
			t.Fatalf("round %d: close sender: %v", i, err)
		}
		if err := w.cbs.rcv.Close(w.ctx); err != nil {
			t.Fatalf("round %d: close receiver: %v", i, err)
		}
		w.cbs = nil
	}
}
