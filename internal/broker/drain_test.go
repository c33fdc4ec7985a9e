package broker

import (
	"testing"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
)

// A draining unit (DrainUnit, before a hand-off) admits no new work —
// sends, new receivers and new deliveries are refused or withheld — while
// the locks already held are still settled and renewed.
func TestDrainUnit(t *testing.T) {
	e := newEnv(t)
	if _, err := e.b.CreateQueue("q", DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Send(ctx, "q", []*message.Message{{Body: []byte("a")}, {Body: []byte("b")}, {Body: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	r, err := e.b.OpenReceiver("q", PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ds, err := r.TryReceive(2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	id, _ := e.b.EntityStoreID("q")
	e.b.DrainUnit(id)

	if err := e.b.Send(ctx, "q", []*message.Message{{Body: []byte("d")}}); KindOf(err) != KindMoved {
		t.Fatalf("send while draining: %v, want KindMoved", err)
	}
	if err := e.b.Moving("q"); KindOf(err) != KindMoved {
		t.Fatalf("Moving: %v", err)
	}
	if _, err := e.b.OpenReceiver("q", PeekLock); KindOf(err) != KindMoved {
		t.Fatalf("new receiver while draining: %v, want KindMoved", err)
	}
	if more, err := r.TryReceive(5); err != nil || len(more) != 0 {
		t.Fatalf("receive while draining: %d messages, %v; want none", len(more), err)
	}
	select {
	case <-r.Ready():
		t.Fatal("a receiver of a draining queue is told messages are ready")
	default:
	}
	if _, err := e.b.RenewLock(ctx, "q", []uuid.UUID{ds[0].LockToken}); err != nil {
		t.Fatalf("renew while draining: %v", err)
	}
	if err := e.b.Complete(ctx, "q", ds[0].LockToken); err != nil {
		t.Fatalf("complete while draining: %v", err)
	}
	if err := e.b.Abandon(ctx, "q", ds[1].LockToken, nil); err != nil {
		t.Fatalf("abandon while draining: %v", err)
	}
	if more, err := r.TryReceive(5); err != nil || len(more) != 0 {
		t.Fatalf("receive after an abandon while draining: %d messages, %v; want none", len(more), err)
	}
	if info, err := e.b.GetQueue("q"); err != nil || info.Counts.Active != 2 {
		t.Fatalf("queue holds %+v, %v; want b and c", info.Counts, err)
	}

	// A topic: sends refused, its subscriptions deliver nothing new.
	if _, err := e.b.CreateTopic("t", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CreateSubscription("t", "s", DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Send(ctx, "t", []*message.Message{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	tid, _ := e.b.EntityStoreID("t")
	e.b.DrainUnit(tid)
	if err := e.b.Send(ctx, "t", []*message.Message{{Body: []byte("y")}}); KindOf(err) != KindMoved {
		t.Fatalf("send to a draining topic: %v, want KindMoved", err)
	}
	if _, err := e.b.OpenReceiver("t/Subscriptions/s", PeekLock); KindOf(err) != KindMoved {
		t.Fatalf("new subscription receiver while draining: %v, want KindMoved", err)
	}
	if _, err := e.b.CreateSubscription("t", "s2", DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.OpenReceiver("t/Subscriptions/s2", PeekLock); KindOf(err) != KindMoved {
		t.Fatalf("receiver of a subscription created while its topic drains: %v, want KindMoved", err)
	}
}

// UnitDrained tells a draining unit with locks held from one without.
func TestUnitDrained(t *testing.T) {
	e := newEnv(t)
	if _, err := e.b.CreateQueue("q", DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Send(ctx, "q", []*message.Message{{Body: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	id, _ := e.b.EntityStoreID("q")
	if e.b.UnitDrained(id) {
		t.Fatal("a unit not draining is drained")
	}
	r, err := e.b.OpenReceiver("q", PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ds, err := r.TryReceive(1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	e.b.DrainUnit(id)
	if e.b.UnitDrained(id) {
		t.Fatal("drained with a message locked")
	}
	if err := e.b.Complete(ctx, "q", ds[0].LockToken); err != nil {
		t.Fatal(err)
	}
	if !e.b.UnitDrained(id) {
		t.Fatal("not drained once its last lock was settled")
	}

	// A topic without subscriptions holds no locks.
	if _, err := e.b.CreateTopic("t", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	tid, _ := e.b.EntityStoreID("t")
	e.b.DrainUnit(tid)
	if !e.b.UnitDrained(tid) {
		t.Fatal("a draining topic without subscriptions is not drained")
	}
}
