package servicebus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/servicebus"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// movedRouter is the Router of a cluster node whose queue "q" moves to
// another node when moved is set: it only answers Remote (nothing is
// relayed in this test).
type movedRouter struct{ moved atomic.Bool }

func (r *movedRouter) Remote(unit string) bool { return unit == "q" && r.moved.Load() }
func (r *movedRouter) AttachSender(*amqp.IncomingLink, servicebus.Relayed) error {
	return errors.New("not relayed in this test")
}
func (r *movedRouter) AttachReceiver(*amqp.OutgoingLink, servicebus.Relayed) error {
	return errors.New("not relayed in this test")
}
func (r *movedRouter) DeclareTxn(context.Context, *amqp.Conn, servicebus.Relayed) (servicebus.RemoteTxn, error) {
	return servicebus.RemoteTxn{}, errors.New("not relayed in this test")
}
func (r *movedRouter) DischargeTxn(context.Context, *amqp.Conn, servicebus.RemoteTxn, bool) error {
	return errors.New("not relayed in this test")
}
func (r *movedRouter) Request(context.Context, *amqp.Conn, string, []byte, servicebus.Relayed) ([]byte, error) {
	return nil, errors.New("not relayed in this test")
}

// TestSettleAfterMove: a message received here whose queue then moved to
// another node of the cluster (unloaded here, served there) cannot be
// settled on its link: the client is told its lock is lost, as
// after an expiry, not that the entity does not exist (the Go SDK's
// TestReceiverMessageLockExpires and the JS settle suite, run against a
// cluster, met the not-found).
func TestSettleAfterMove(t *testing.T) {
	r := &movedRouter{}
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, Router: r})
	c := newClient(t, s.ConnectionString)
	ctx := testCtx(t, 30*time.Second)
	snd := newSender(t, c, "q")
	for range 2 {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	ms, err := rcv.ReceiveMessages(ctx, 2, nil)
	if err != nil || len(ms) != 2 {
		t.Fatalf("received %d, %v", len(ms), err)
	}
	// The unit moves: this node forgets the queue, the cluster serves it
	// elsewhere.
	if err := s.Broker.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	r.moved.Store(true)

	var sbErr *azservicebus.Error
	if err := rcv.CompleteMessage(ctx, ms[0], nil); !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("complete after the move: %v; want lock lost", err)
	}
	if err := rcv.AbandonMessage(ctx, ms[1], nil); !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("abandon after the move: %v; want lock lost", err)
	}
}
