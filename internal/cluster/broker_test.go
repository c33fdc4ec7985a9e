package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/pgstore"
)

// brokerNode is a node driving a real broker on a cluster-mode pgstore;
// pause and clk pause it as in TestFencingPausedOwner.
type brokerNode struct {
	s     *pgstore.Store
	b     *broker.Broker
	n     *Node
	pause *paused
	clk   *freezable
}

func startBrokerNode(t *testing.T, url, id string) *brokerNode {
	t.Helper()
	s, err := pgstore.Open(context.Background(), url, pgstore.Options{Cluster: true, NodeID: id, TxnDeadline: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(broker.Options{Store: s, Units: true})
	if err != nil {
		t.Fatal(err)
	}
	pause, clk := &paused{m: s, l: s}, &freezable{}
	n, err := New(Options{ID: id, Membership: pause, Leases: pause, Units: b, Clock: clk,
		Heartbeat: 100 * time.Millisecond, TTL: time.Second, Margin: 300 * time.Millisecond, Poll: 100 * time.Millisecond,
		Drain: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	bn := &brokerNode{s: s, b: b, n: n, pause: pause, clk: clk}
	t.Cleanup(func() {
		pause.set(false)
		clk.thaw()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Stop(ctx)
		b.Close()
		s.Close()
	})
	return bn
}

// TestBrokerUnitsOnPostgres: a queue created on node a is served there
// (the node takes the unit the broker created and reloads it); a receiver
// holds a lock. Node a leaves: its waiting receiver fails with
// KindMoved, its lock is forgotten; node b loads the unit and delivers
// every message, the one that was locked included, and accepts sends.
func TestBrokerUnitsOnPostgres(t *testing.T) {
	url := newPG(t)
	ctx := context.Background()
	a := startBrokerNode(t, url, "a")
	if _, err := broker.Open(broker.Options{Store: store.Store(nil), Units: true}); err == nil {
		t.Fatal("a broker with Units and no unit store opened")
	}
	if _, err := a.b.CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	id, ok := a.b.EntityStoreID("orders")
	if !ok {
		t.Fatal("no store id for the queue")
	}
	waitUntil(t, "a serving the queue's unit", 10*time.Second, func() bool { _, ok := a.n.Owned()[id]; return ok })
	msgs := []*message.Message{{Body: []byte("m1")}, {Body: []byte("m2")}, {Body: []byte("m3")}}
	if err := a.b.Send(ctx, "orders", msgs); err != nil {
		t.Fatalf("send on the owner: %v", err)
	}
	r, err := a.b.OpenReceiver("orders", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.TryReceive(1)
	if err != nil || len(got) != 1 {
		t.Fatalf("receive on the owner: %v, %v", got, err)
	}
	locked := got[0]
	if _, err := r.TryReceive(2); err != nil { // the rest locked too; the receiver now waits
		t.Fatal(err)
	}
	ready := r.Ready()

	b := startBrokerNode(t, url, "b")
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.n.Stop(stopCtx); err != nil {
		t.Fatalf("stop a: %v", err)
	}
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("a's waiting receiver was not woken by the unload")
	}
	if _, err := r.TryReceive(1); broker.KindOf(err) != broker.KindMoved {
		t.Fatalf("a's receiver after the unload: %v, want KindMoved", err)
	}
	if err := a.b.Complete(ctx, "orders", locked.LockToken); err == nil {
		t.Fatal("a completed a message of a unit it no longer serves")
	}
	waitUntil(t, "b serving the queue's unit", 10*time.Second, func() bool { _, ok := b.n.Owned()[id]; return ok })
	rb, err := b.b.OpenReceiver("orders", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	ds, err := rb.TryReceive(10)
	if err != nil || len(ds) != 3 {
		t.Fatalf("b delivers %d messages, %v; want 3", len(ds), err)
	}
	for _, d := range ds {
		if err := b.b.Complete(ctx, "orders", d.LockToken); err != nil {
			t.Fatalf("complete on b: %v", err)
		}
	}
	if err := b.b.Send(ctx, "orders", []*message.Message{{Body: []byte("m4")}}); err != nil {
		t.Fatalf("send on the new owner: %v", err)
	}
	if n := pgInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = $1`, int64(id)); n != 1 {
		t.Fatalf("%d messages in the unit's rows, want 1", n)
	}
}

// TestFencingPausedBroker is TestFencingPausedOwner with real brokers: the
// paused owner's broker still serves the queue from memory when it
// resumes, and its send ("stale-1") fails with KindMoved and writes
// nothing; the queue's rows are those the new owner wrote. Fails with
// -tags busbar_nofence.
func TestFencingPausedBroker(t *testing.T) {
	url := newPG(t)
	ctx := context.Background()
	a := startBrokerNode(t, url, "a")
	b := startBrokerNode(t, url, "b")
	if _, err := a.b.CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	id, _ := a.b.EntityStoreID("orders")
	// The unit on the node placement gives it to (not draining towards
	// it: a draining unit refuses sends).
	x, y := a, b
	if Winner(id, []string{"a", "b"}) == "b" {
		x, y = b, a
	}
	waitUntil(t, "the queue's unit served by its winner", 15*time.Second, func() bool {
		_, ok := x.n.Owned()[id]
		return ok
	})
	epoch := x.n.Owned()[id]
	if err := x.b.Send(ctx, "orders", []*message.Message{{Body: []byte("before-pause")}}); err != nil {
		t.Fatalf("send on the owner: %v", err)
	}
	x.clk.freeze()
	x.pause.set(true)
	waitUntil(t, "the takeover", 15*time.Second, func() bool { ep, ok := y.n.Owned()[id]; return ok && ep > epoch })
	if err := y.b.Send(ctx, "orders", []*message.Message{{Body: []byte("probe")}}); err != nil {
		t.Fatalf("probe send on the new owner: %v", err)
	}
	before := snapshot(t, url, id)
	if _, err := x.b.GetQueue("orders"); err != nil {
		t.Fatalf("the paused broker should still serve the queue from memory: %v", err)
	}
	x.pause.set(false)
	x.clk.thaw()
	err := x.b.Send(ctx, "orders", []*message.Message{{Body: []byte("stale-1")}})
	if broker.KindOf(err) != broker.KindMoved {
		t.Errorf("the resumed owner's send: %v, want KindMoved", err)
	}
	waitUntil(t, "the resumed node to unload the queue", 5*time.Second, func() bool {
		_, err := x.b.GetQueue("orders")
		return err != nil
	})
	if after := snapshot(t, url, id); after != before {
		t.Fatalf("the queue's rows changed after the takeover:\nbefore %s\nafter  %s", before, after)
	}
	// The resumed node is the placement winner again, so the new owner
	// may already be draining the unit to hand it back: receive from
	// whichever node serves it.
	var rb *broker.Receiver
	waitUntil(t, "a node serving the queue to receivers", 15*time.Second, func() bool {
		for _, n := range []*brokerNode{y, x} {
			if r, err := n.b.OpenReceiver("orders", broker.ReceiveAndDelete); err == nil {
				rb = r
				return true
			}
		}
		return false
	})
	defer rb.Close()
	ds, err := rb.TryReceive(10)
	if err != nil || len(ds) != 2 || string(ds[0].Message.Body) != "before-pause" || string(ds[1].Message.Body) != "probe" {
		t.Fatalf("the new owner delivers %d messages, %v", len(ds), err)
	}
}

var (
	_ Units   = (*broker.Broker)(nil)
	_ Drainer = (*loader)(nil)
)
