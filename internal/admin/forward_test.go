package admin

import (
	"testing"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// TestSDKForwardingRuntimeCounts: the Go admin client reads the forwarding
// backlog (TransferMessageCount) and the transfer dead-letter queue's
// depth (TransferDeadLetterMessageCount) from CountDetails.
func TestSDKForwardingRuntimeCounts(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.queue("dst", func(p *broker.QueueProperties) { p.Status = broker.StatusDisabled })
	// The source may not be received from, so it does not forward either:
	// its messages wait, counted as Transfer.
	e.queue("src", func(p *broker.QueueProperties) { p.ForwardTo = "dst"; p.Status = broker.StatusReceiveDisabled })
	if err := e.b.Send(ctx, "src", []*message.Message{{Body: []byte("1")}, {Body: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	rt, err := c.GetQueueRuntimeProperties(ctx, "src", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rt.TransferMessageCount != 2 || rt.ActiveMessageCount != 0 || rt.TransferDeadLetterMessageCount != 0 || rt.TotalMessageCount != 2 {
		t.Fatalf("waiting: %+v", rt.QueueRuntimeProperties)
	}
	// Receiving again: forwarded to a disabled queue, so to the transfer
	// dead-letter queue (the lookup itself runs the forwarding due).
	p := broker.DefaultQueueProperties()
	p.ForwardTo = "dst"
	if _, err := e.b.UpdateQueue("src", p); err != nil {
		t.Fatal(err)
	}
	rt, err = c.GetQueueRuntimeProperties(ctx, "src", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rt.TransferMessageCount != 0 || rt.TransferDeadLetterMessageCount != 2 || rt.TotalMessageCount != 2 {
		t.Fatalf("refused: %+v", rt.QueueRuntimeProperties)
	}
}
