package server

// Three in-process cluster nodes on one test PostgreSQL, driven by the
// official Go SDK through node a only.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

const testClusterSecret = "0123456789abcdef0123456789abcdef-test"

// clusterOptions are node id's settings on the database at url, with
// short timings.
func clusterOptions(t *testing.T, url, id string) Options {
	s := config.DefaultServer()
	s.Cluster, s.Store, s.NodeID = true, url, id
	s.ClusterListen, s.ClusterSecret = "127.0.0.1:0", testClusterSecret
	s.AMQPAddr, s.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	s.ClusterHeartbeat, s.ClusterLeaseTTL, s.ClusterTrustMargin, s.ClusterPoll = 100*time.Millisecond, time.Second, 300*time.Millisecond, 100*time.Millisecond
	s.ConfigFile, s.ConfigSearch = "", ""
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return Options{Server: s, ClusterDrain: time.Second}
}

// Without a PostgreSQL store --cluster is refused by the settings.
func TestClusterNeedsStore(t *testing.T) {
	s := config.DefaultServer()
	s.Cluster, s.NodeID = true, "n1"
	s.ClusterListen, s.ClusterSecret = "127.0.0.1:0", testClusterSecret
	if err := s.Validate(); err == nil {
		t.Fatal("--cluster without --store was accepted")
	}
}

// TestClusterThreeNodes: the Go SDK talks to node a only. Its admin
// client creates queues there (each is created by the node placement
// gives it), and sends and receives through a while the queue is
// owned by b or c. Then the owner stops without handing anything off, as
// a crash: with the SDK's retries the client carries on through a, and
// every message acknowledged is received exactly once more, completed
// ones never again.
func TestClusterThreeNodes(t *testing.T) {
	_, url := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	nodes := map[string]*Server{}
	for _, id := range []string{"a", "b", "c"} {
		s := start(t, clusterOptions(t, url, id))
		nodes[id] = s
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer scancel()
			_ = s.Shutdown(sctx)
		})
	}
	a := nodes["a"]
	cs, adm := sasAdmin(t, a)
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
		MaxRetries: 20, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })

	// Queues created on a; keep the first that placement gives to b or c.
	live := []string{"a", "b", "c"}
	var queue, owner string
	var unit uint64
	for i := 0; queue == ""; i++ {
		if i == 8 {
			t.Fatal("placement gave every queue to a")
		}
		name := fmt.Sprint("orders", i)
		if _, err := adm.CreateQueue(ctx, name, nil); err != nil {
			t.Fatalf("create %s on a: %v", name, err)
		}
		u, on := unitServing(nodes, name)
		if on == "" {
			t.Fatalf("%s not served by any node right after its creation", name)
		}
		if w := cluster.Winner(u, live); w != "a" {
			queue, owner, unit = name, w, u
		}
	}
	// Its winner serves it (created there, or handed off after the
	// drain when a's view of the live nodes was not complete yet).
	waitFor(t, ctx, func() bool {
		_, onOwner := nodes[owner].Broker().EntityStoreID(queue)
		_, onA := a.Broker().EntityStoreID(queue)
		return onOwner && !onA
	}, "the queue to move to "+owner)
	t.Logf("queue %s (unit %d) is served by %s", queue, unit, owner)
	// a no longer holds it; creating it again there is refused: the
	// catalog knows it.
	var re *azcore.ResponseError
	if _, err := adm.CreateQueue(ctx, queue, nil); !errors.As(err, &re) || re.StatusCode != 409 {
		t.Fatalf("second creation of %s on a: %v, want 409 Conflict", queue, err)
	}

	snd, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(context.Background())
	send := func(from, to int) {
		for i := from; i < to; i++ {
			if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint("m", i))}, nil); err != nil {
				t.Fatalf("send m%d: %v", i, err)
			}
		}
	}
	seen := map[string]int{}
	// receive completes messages until n were completed in all.
	receive := func(n int) {
		for completed(seen) < n {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			ms, err := rcv.ReceiveMessages(rctx, n-completed(seen), nil)
			rcancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("receive: %v (the SDK retries)", err)
			}
			for _, m := range ms {
				if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
					t.Logf("complete %s: %v (it comes again)", m.Body, err)
					continue
				}
				seen[string(m.Body)]++
			}
			if ctx.Err() != nil {
				t.Fatalf("received %d of %d: %v", completed(seen), n, ctx.Err())
			}
		}
	}
	send(0, 20)
	receive(8)
	if info, err := nodes[owner].Broker().GetQueue(queue); err != nil || info.Counts.Total != 12 {
		t.Fatalf("the owner holds %+v, %v; want the 12 not completed", info.Counts, err)
	}

	// The owner crashes: no hand-off, its units stay its own until its
	// session ends (Shutdown's store close ends it at once).
	nodes[owner].cluster.halt()
	stop(t, nodes[owner])
	survivors := []string{"a", "b", "c"}
	survivors = slices.DeleteFunc(survivors, func(s string) bool { return s == owner })
	var taker string
	waitFor(t, ctx, func() bool {
		for _, id := range survivors {
			if _, ok := nodes[id].Broker().EntityStoreID(queue); ok {
				taker = id
				return true
			}
		}
		return false
	}, "a survivor to take the queue")
	t.Logf("%s crashed; %s took %s", owner, taker, queue)

	send(20, 25) // through a again, the SDK's retries riding over the crash
	receive(25)
	for b, n := range seen {
		if n != 1 {
			t.Errorf("%s received and completed %d times", b, n)
		}
	}
	if len(seen) != 25 {
		t.Fatalf("completed %d distinct messages, want 25: %v", len(seen), seen)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if extra, _ := rcv.ReceiveMessages(pctx, 10, nil); len(extra) != 0 {
		t.Fatalf("%d messages came again after all were completed", len(extra))
	}
}

func completed(seen map[string]int) int {
	n := 0
	for _, c := range seen {
		n += c
	}
	return n
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, cond func() bool, what string) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sasAdmin is the emulator connection string of s's AMQP listener and an
// admin client of its HTTP listener with that key, without retries.
func sasAdmin(t *testing.T, s *Server) (string, *admin.Client) {
	t.Helper()
	cs := "Endpoint=sb://" + s.AMQPAddr().String() + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	adm, err := admin.NewClientFromConnectionString(cs, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: plainHTTP{s.HTTPAddr().String()}, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	return cs, adm
}
