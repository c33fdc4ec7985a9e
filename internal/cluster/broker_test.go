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

// brokerNode is a node driving a real broker on a cluster-mode pgstore.
type brokerNode struct {
	s *pgstore.Store
	b *broker.Broker
	n *Node
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
	n, err := New(Options{ID: id, Membership: s, Leases: s, Units: b,
		Heartbeat: 100 * time.Millisecond, TTL: time.Second, Margin: 300 * time.Millisecond, Poll: 100 * time.Millisecond,
		Drain: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	bn := &brokerNode{s: s, b: b, n: n}
	t.Cleanup(func() {
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

var (
	_ Units   = (*broker.Broker)(nil)
	_ Drainer = (*loader)(nil)
)
