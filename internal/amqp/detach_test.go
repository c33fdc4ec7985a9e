package amqp

import (
	"testing"
	"time"
)

// detachOrderHandler accepts every link; OnDetach waits a moment for the
// client's detach to return and reports whether it did.
type detachOrderHandler struct {
	returned chan struct{} // closed by the test once the client's Close returned
	early    chan bool     // per OnDetach: did Close return while it ran?
}

func (h *detachOrderHandler) Connect(*Conn) (ConnHandler, error) { return h, nil }
func (h *detachOrderHandler) Disconnected(error)                 {}

func (h *detachOrderHandler) onDetach() {
	select {
	case <-h.returned:
		h.early <- true
	case <-time.After(300 * time.Millisecond):
		h.early <- false
	}
}

func (h *detachOrderHandler) AttachIncoming(l *IncomingLink) error {
	l.OnDelivery = func(d *IncomingDelivery) { d.Settle(nil) }
	l.OnDetach = func(error) { h.onDetach() }
	return nil
}

func (h *detachOrderHandler) AttachOutgoing(l *OutgoingLink) error {
	l.OnDetach = func(error, []*OutgoingDelivery) { h.onDetach() }
	return nil
}

// TestDetachAnsweredAfterOnDetach: the client's detach (or end of the
// link's session) is answered only once the link's OnDetach returned, so a client that saw the answer finds
// what the link held released. OnDetach waits (up to 300 ms) for the
// client's Close to return: answered first, Close would return while it
// waits.
func TestDetachAnsweredAfterOnDetach(t *testing.T) {
	for _, kind := range []string{"sender", "receiver", "session end"} {
		t.Run(kind, func(t *testing.T) {
			h := &detachOrderHandler{returned: make(chan struct{}), early: make(chan bool, 1)}
			_, addr := startServer(t, h, Config{})
			s := openSession(t, dial(t, addr, nil))
			ctx := testCtx(t)
			var closeLink func() error
			switch kind {
			case "sender":
				l, err := s.NewSender(ctx, "q", nil)
				if err != nil {
					t.Fatal(err)
				}
				closeLink = func() error { return l.Close(ctx) }
			case "session end":
				if _, err := s.NewSender(ctx, "q", nil); err != nil {
					t.Fatal(err)
				}
				closeLink = func() error { return s.Close(ctx) }
			default:
				l, err := s.NewReceiver(ctx, "q", nil)
				if err != nil {
					t.Fatal(err)
				}
				closeLink = func() error { return l.Close(ctx) }
			}
			if err := closeLink(); err != nil {
				t.Fatalf("close: %v", err)
			}
			close(h.returned)
			if <-h.early {
				t.Fatal("the client's detach was answered before OnDetach returned")
			}
		})
	}
}
