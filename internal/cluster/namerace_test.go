package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/store/pgstore"
)

// blindCatalog is a node's store whose catalog has not seen the other
// node's creation yet: the broker's look-up before a creation finds
// nothing, as when two creations race.
type blindCatalog struct{ *pgstore.Store }

func (blindCatalog) UnitNamed(context.Context, string) (uint64, bool, error) { return 0, false, nil }

// Two nodes create a queue of the same name (whatever its case) at once,
// neither seeing the other's: the second commit is refused as the name
// being taken (KindAlreadyExists, 409 at the admin API), not as the
// database being unavailable, and changes nothing.
func TestNameRace(t *testing.T) {
	url := newPG(t)
	a := startBrokerNode(t, url, "a")
	if _, err := a.b.CreateQueue("orders", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}

	s, err := pgstore.Open(context.Background(), url, pgstore.Options{Cluster: true, NodeID: "b", TxnDeadline: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := broker.Open(broker.Options{Store: blindCatalog{s}, Units: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n, err := New(Options{ID: "b", Membership: s, Leases: s, Units: b,
		Heartbeat: 100 * time.Millisecond, TTL: time.Second, Margin: 300 * time.Millisecond, Poll: 100 * time.Millisecond, Drain: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Stop(ctx)
	}()

	_, err = b.CreateQueue("Orders", broker.DefaultQueueProperties())
	if broker.KindOf(err) != broker.KindAlreadyExists {
		t.Fatalf("a racing creation of the name on another node: %v, want KindAlreadyExists", err)
	}
	if _, err := b.GetQueue("Orders"); broker.KindOf(err) != broker.KindNotFound {
		t.Fatalf("the refused queue is served on b: %v", err)
	}
	if _, err := b.CreateTopic("ORDERS", broker.DefaultTopicProperties()); broker.KindOf(err) != broker.KindAlreadyExists {
		t.Fatalf("a racing topic of the name: %v, want KindAlreadyExists", err)
	}
	if _, err := b.CreateQueue("invoices", broker.DefaultQueueProperties()); err != nil {
		t.Fatalf("b's store refuses other work after the race: %v", err)
	}
}
