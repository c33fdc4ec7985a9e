package server

// Send-via and transactions whose via entity and destination different
// nodes of a cluster serve (the outbox, docs/cluster.md), driven with raw
// transaction frames (txnclient_test.go) through a third node.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/message"
)

// TestClusterSendVia: queue via is served by node b, queue dst (duplicate
// detection on) by node c; the client talks to node a. A transaction
// that completes a message of via and sends to dst through via commits on
// b and its message lands in dst once; a rolled back one sends nothing; a
// plain send on the send-via link lands too, and duplicate detection at
// dst drops a message-id sent twice; the same through a connection to b. Settling on both queues in one
// transaction is refused (two owners: not one batch). Then a transaction commits while
// dst's owner is down and via's owner crashes right after: the survivor
// taking dst lands the message, once, and via keeps the completion.
func TestClusterSendVia(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes, adm := startNodes(t, func(o *Options) { o.Server.AllowAnyKey = true }, ids...)
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	via := placeOn(t, ctx, nodes, adm, "via", "b", nil)
	dst := placeOn(t, ctx, nodes, adm, "dst", "c", &admin.QueueProperties{RequiresDuplicateDetection: to.Ptr(true)})
	var seed []*message.Message
	for _, b := range []string{"r1", "r2", "r3", "r4"} {
		seed = append(seed, &message.Message{Body: frames.AppendDataSection(nil, []byte(b))})
	}
	if err := nodes["b"].Broker().Send(ctx, via, seed); err != nil {
		t.Fatal(err)
	}

	c := txnclient.Dial(t, a.AMQPAddr().String())
	c.AttachCoordinator()
	c.AttachReceiver(1, via, 4)
	if r := c.AttachSender(2, via, dst); r.Target == nil {
		t.Fatalf("send-via %s → %s refused", via, dst)
	}
	ms := c.Receive(1, 4)

	// Commit: the completion and the send in b's one batch; c lands it.
	id := c.Declare()
	txnAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	txnAccepted(t, c.SendTxn(2, "t1", id))
	txnAccepted(t, c.Discharge(id, false))
	landed(t, ctx, nodes["c"], dst, 5*time.Second, "t1")

	// Rollback: nothing sent, nothing completed. Transfers from one
	// source land in order, so once the plain send after it has landed,
	// a rolled back send would be there too.
	id = c.Declare()
	txnAccepted(t, c.Dispose(ms[1], &frames.Accepted{}, id))
	txnAccepted(t, c.SendTxn(2, "t2", id))
	txnAccepted(t, c.Discharge(id, true))
	txnAccepted(t, c.SendTxn(2, "p1", nil))
	landed(t, ctx, nodes["c"], dst, 5*time.Second, "t1", "p1")

	// Duplicate detection at dst applies to what comes through via.
	txnAccepted(t, c.SendWithID(2, "dup", "same-id"))
	txnAccepted(t, c.SendWithID(2, "dup-again", "same-id"))
	txnAccepted(t, c.SendTxn(2, "p2", nil))
	landed(t, ctx, nodes["c"], dst, 5*time.Second, "t1", "p1", "dup", "p2")

	// The same link on via's own node (not relayed).
	cb := txnclient.Dial(t, nodes["b"].AMQPAddr().String())
	if r := cb.AttachSender(1, via, dst); r.Target == nil {
		t.Fatalf("send-via %s → %s refused on b", via, dst)
	}
	txnAccepted(t, cb.SendTxn(1, "direct", nil))
	landed(t, ctx, nodes["c"], dst, 5*time.Second, "t1", "p1", "dup", "p2", "direct")
	peekBodies(t, ctx, nodes["b"], via, "r2", "r3", "r4")

	// Settlements on two owners cannot be one batch: refused, and the
	// commit is a rollback.
	c.AttachReceiver(3, dst, 1)
	got := c.Receive(3, 1)
	id = c.Declare()
	txnAccepted(t, c.Dispose(ms[2], &frames.Accepted{}, id))
	txnRejected(t, c.Dispose(got[0], &frames.Accepted{}, id), "amqp:not-allowed", "several top-level entities")
	txnRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "several top-level entities")
	peekBodies(t, ctx, nodes["b"], via, "r2", "r3", "r4")

	// dst's owner crashes; a transaction commits on b, which crashes
	// right after, before anyone could land its transfer: the survivor
	// (a) takes both queues and lands it.
	id = c.Declare()
	txnAccepted(t, c.Dispose(ms[3], &frames.Accepted{}, id))
	txnAccepted(t, c.SendTxn(2, "t3", id))
	nodes["c"].cluster.halt() // no poll any more: nothing lands in dst
	txnAccepted(t, c.Discharge(id, false))
	nodes["b"].cluster.halt()               // the transfer is still in the outbox
	for _, id := range []string{"c", "b"} { // what a crashed node fails to save is refused: its error is expected
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		_ = nodes[id].Shutdown(sctx)
		scancel()
	}
	waitFor(t, ctx, func() bool {
		_, v := a.Broker().EntityStoreID(via)
		_, d := a.Broker().EntityStoreID(dst)
		return v && d
	}, "a to take "+via+" and "+dst)
	landed(t, ctx, a, dst, 10*time.Second, "t1", "p1", "dup", "p2", "direct", "t3")
	peekBodies(t, ctx, a, via, "r2", "r3")
}

// bodiesOf are the bodies of path's messages on s (peek: locked ones
// too).
func bodiesOf(t *testing.T, ctx context.Context, s *Server, path string) []string {
	t.Helper()
	ds, err := s.Broker().Peek(ctx, path, 0, 100)
	if err != nil {
		t.Fatalf("peek %s: %v", path, err)
	}
	var got []string
	for _, d := range ds {
		data, err := frames.DataSections(d.Message.Body)
		if err != nil || len(data) != 1 {
			t.Fatalf("body %x: %v", d.Message.Body, err)
		}
		got = append(got, string(data[0]))
	}
	return got
}

func peekBodies(t *testing.T, ctx context.Context, s *Server, path string, want ...string) {
	t.Helper()
	if got := bodiesOf(t, ctx, s, path); !slices.Equal(got, want) {
		t.Fatalf("%s holds %q; want %q", path, got, want)
	}
}

// landed waits (at most within) until path on s holds exactly want,
// failing at once if it holds more or other messages.
func landed(t *testing.T, ctx context.Context, s *Server, path string, within time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := bodiesOf(t, ctx, s, path)
		if slices.Equal(got, want) {
			return
		}
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) || time.Now().After(deadline) {
			t.Fatalf("%s holds %q; want %q", path, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func txnAccepted(t *testing.T, st frames.DeliveryState) {
	t.Helper()
	if ts, ok := st.(*frames.TransactionalState); ok {
		st = ts.Outcome
	}
	if _, acc := st.(*frames.Accepted); !acc {
		t.Fatalf("answered %v; want accepted", st)
	}
}

func txnRejected(t *testing.T, st frames.DeliveryState, cond frames.Symbol, text string) {
	t.Helper()
	r, ok := st.(*frames.Rejected)
	if !ok || r.Error == nil || r.Error.Condition != cond || !strings.Contains(r.Error.Description, text) {
		t.Fatalf("answered %v; want rejected %s containing %q", st, cond, text)
	}
}
