package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"
)

// moving is what OwnerOf answers for a unit no node serves yet.
var movingOwner = Owner{Node: "(moving)"}

// An attach for a unit that is moving is held until its new owner is
// known, then served there: the Go SDK, with no retries, sends and
// receives without an error.
func TestRelayParkedAttach(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnClusterWith(t, func(c *GatewayConfig) { c.Park = 10 * time.Second })
	owner := tc.owners["in"]
	tc.setOwner("in", movingOwner)
	c := newClientNoRetry(t, tc.a.ConnectionString)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := c.NewSender("in", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	sent := make(chan error, 1)
	go func() { sent <- snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil) }()
	for tc.g.Parked() == 0 {
		select {
		case err := <-sent:
			t.Fatalf("the send ended (%v) while the queue had no owner", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	tc.setOwner("in", owner) // taken by b
	if err := <-sent; err != nil {
		t.Fatalf("send through a parked attach: %v", err)
	}
	holds(t, tc.b, "in", "x")
	if n := tc.g.Parked(); n != 0 {
		t.Fatalf("%d attaches still parked", n)
	}

	tc.setOwner("in", movingOwner)
	rcv, err := c.NewReceiverForQueue("in", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	go func() {
		for tc.g.Parked() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		tc.setOwner("in", owner)
	}()
	ms, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "x" {
		t.Fatalf("receive through a parked attach: %v %v", ms, err)
	}
	if err := rcv.CompleteMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
}

// A unit still without an owner when the park bound passes: the attach
// fails, retriably (server-busy).
func TestRelayParkTimesOut(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnClusterWith(t, func(c *GatewayConfig) { c.Park = 300 * time.Millisecond })
	tc.setOwner("in", movingOwner)
	conn, err := goamqp.Dial(context.Background(), "amqp://"+tc.a.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = sess.NewSender(context.Background(), "in", nil)
	if err == nil || !strings.Contains(err.Error(), "server-busy") {
		t.Fatalf("attach to a unit without an owner: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("refused after %v, before the park bound", d)
	}
}

// Parked attaches are bounded per client connection: past the bound an
// attach fails at once, retriably.
func TestRelayParkBound(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnClusterWith(t, func(c *GatewayConfig) { c.Park = 10 * time.Second; c.MaxParkedPerConn = 1 })
	owner := tc.owners["in"]
	tc.setOwner("in", movingOwner)
	conn, err := goamqp.Dial(context.Background(), "amqp://"+tc.a.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		s, err := sess.NewSender(context.Background(), "in", nil)
		if err == nil {
			_ = s.Close(context.Background())
		}
		first <- err
	}()
	for tc.g.Parked() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	_, err = sess.NewSender(context.Background(), "in", nil)
	if err == nil || !strings.Contains(err.Error(), "Too many attaches") {
		t.Fatalf("second parked attach: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refused after %v; want at once", d)
	}
	tc.setOwner("in", owner)
	if err := <-first; err != nil {
		t.Fatalf("the parked attach: %v", err)
	}
}
