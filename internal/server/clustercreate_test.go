package server

// Creating a queue through a node that placement does not give it: the
// creation is forwarded to the node placement chose, which serves the
// queue at once; nothing moves afterwards, so a lock taken right after
// the creation settles fine well past the drain.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/cluster"
)

// waitAllLive waits until every node's last poll saw every node live, so
// that they all place units alike.
func waitAllLive(t *testing.T, ctx context.Context, nodes map[string]*Server) {
	t.Helper()
	var ids []string
	for id := range nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for id, s := range nodes {
		waitFor(t, ctx, func() bool { return slices.Equal(s.cluster.node.Live(), ids) }, id+" to see every node live")
	}
}

// unitServing is the unit id of entity and the node serving it; "" when
// no node does.
func unitServing(nodes map[string]*Server, entity string) (uint64, string) {
	for id, s := range nodes {
		if u, ok := s.Broker().EntityStoreID(entity); ok {
			return u, id
		}
	}
	return 0, ""
}

func TestClusterCreateOnWinner(t *testing.T) {
	nodes, adm := startNodes(t, func(o *Options) { o.Server.AllowAnyKey = true }, "a", "b", "c")
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitAllLive(t, ctx, nodes)
	live := []string{"a", "b", "c"}

	// Every queue created through a is served at once by its winner;
	// keep one that another node wins.
	var queue, owner string
	for i := 0; i < 12; i++ {
		name := fmt.Sprint("placed", i)
		if _, err := adm.CreateQueue(ctx, name, nil); err != nil {
			t.Fatalf("create %s through a: %v", name, err)
		}
		u, on := unitServing(nodes, name)
		if w := cluster.Winner(u, live); on != w {
			t.Fatalf("%s (unit %d) is served by %q right after its creation, its winner is %s", name, u, on, w)
		}
		if on != "a" && queue == "" {
			queue, owner = name, on
		}
	}
	if queue == "" {
		t.Fatal("placement gave every queue to a")
	}
	// Topics too.
	if _, err := adm.CreateTopic(ctx, "placed-topic", nil); err != nil {
		t.Fatal(err)
	}
	if u, on := unitServing(nodes, "placed-topic"); on != cluster.Winner(u, live) {
		t.Fatalf("topic served by %q, its winner is %s", on, cluster.Winner(u, live))
	}

	// A lock taken through a right after the creation, settled after
	// three drains (1 s here): the queue never moved.
	cs := "Endpoint=sb://" + a.AMQPAddr().String() + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	snd, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("hi")}, nil); err != nil {
		t.Fatal(err)
	}
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(context.Background())
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	time.Sleep(3 * time.Second) // three drains of clusterOptions; a wire test waits in real time
	if _, on := unitServing(nodes, queue); on != owner {
		t.Fatalf("%s moved from %s to %q", queue, owner, on)
	}
	if err := rcv.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatalf("complete a lock taken right after the creation: %v", err)
	}
}
