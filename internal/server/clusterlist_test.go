package server

// Queue and topic lists while units move between nodes: the list waits
// for the moving units to be served again (up to --cluster-park) and
// answers with every entry and its owner's counts; past the bound it is
// 503 with Retry-After.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// listed is what the admin SDK lists through adm: queue names, each
// queue's active message count, topic names.
func listedBy(ctx context.Context, adm *admin.Client) (queues []string, active map[string]int32, topics []string, err error) {
	for p := adm.NewListQueuesPager(nil); p.More(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ListQueues: %w", err)
		}
		for _, q := range page.Queues {
			queues = append(queues, q.QueueName)
		}
	}
	active = map[string]int32{}
	for p := adm.NewListQueuesRuntimePropertiesPager(nil); p.More(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ListQueuesRuntimeProperties: %w", err)
		}
		for _, q := range page.QueueRuntimeProperties {
			active[q.QueueName] = q.ActiveMessageCount
		}
	}
	for p := adm.NewListTopicsPager(nil); p.More(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ListTopics: %w", err)
		}
		for _, tp := range page.Topics {
			topics = append(topics, tp.TopicName)
		}
	}
	return queues, active, topics, nil
}

// TestClusterListWhileMoving: four nodes; queues (one message each) and
// topics spread over them. While c leaves gracefully (a drain, then its
// units handed off), lists through a, without SDK retries, return every
// queue and topic with its message count. Then d halts, unreachable (its
// units wait for its session to expire, then are taken over): a list through b, whose --cluster-park is
// 300 ms, is 503 with Retry-After; one through a (15 s) waits for the
// takeover and returns them all.
func TestClusterListWhileMoving(t *testing.T) {
	nodes, adm := startNodes(t, func(o *Options) {
		o.ClusterLeaseTTL = 3 * time.Second
		if o.NodeID == "b" {
			o.ClusterPark = 300 * time.Millisecond
		}
	}, "a", "b", "c", "d")
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	waitAllLive(t, ctx, nodes)

	var queues, topics []string
	per := map[string]int{}
	for i := 0; i < 40 && (per["c"] < 2 || per["d"] < 2 || len(queues) < 6); i++ {
		name := fmt.Sprintf("lq%02d", i)
		if i%4 == 3 {
			name = fmt.Sprintf("lt%02d", i)
			if _, err := adm.CreateTopic(ctx, name, nil); err != nil {
				t.Fatal(err)
			}
			topics = append(topics, name)
		} else {
			if _, err := adm.CreateQueue(ctx, name, nil); err != nil {
				t.Fatal(err)
			}
			queues = append(queues, name)
		}
		_, on := unitServing(nodes, name)
		per[on]++
	}
	if per["c"] < 2 || per["d"] < 2 {
		t.Fatalf("placement gave c and d too few units: %v", per)
	}
	cs, _ := sasAdmin(t, a)
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
		MaxRetries: 30, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	for _, q := range queues {
		snd, err := client.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("m")}, nil); err != nil {
			t.Fatalf("send to %s: %v", q, err)
		}
		_ = snd.Close(ctx)
	}
	check := func(what string, adm *admin.Client) {
		t.Helper()
		qs, active, ts, err := listedBy(ctx, adm)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(qs, queues) || !slices.Equal(ts, topics) {
			t.Fatalf("%s: queues %v topics %v, want %v and %v", what, qs, ts, queues, topics)
		}
		for _, q := range queues {
			if active[q] != 1 {
				t.Fatalf("%s: %s has %d active messages, want 1 (%v)", what, q, active[q], active)
			}
		}
	}
	check("before any move", adm)

	// c leaves: its units drain, then move to a, b and d.
	done := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		done <- nodes["c"].Shutdown(sctx)
	}()
	lists := 0
	for moving := true; moving; lists++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("c's shutdown: %v", err)
			}
			moving = false
		default:
		}
		check(fmt.Sprintf("list %d while c leaves", lists), adm)
	}
	delete(nodes, "c")
	t.Logf("%d lists of queues and topics while c left", lists)

	// d halts and cannot be reached (its internal listener closed): its
	// units have no node that answers until its session expires (3 s).
	d := nodes["d"]
	d.cluster.halt()
	d.cluster.ln.Close()
	d.cluster.httpSrv.Close()
	delete(nodes, "d")
	_, admB := sasAdmin(t, nodes["b"])
	start := time.Now()
	_, _, _, err = listedBy(ctx, admB)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusServiceUnavailable || re.RawResponse.Header.Get("Retry-After") == "" {
		t.Fatalf("a list through b while d's units have no node: %v, want 503 with Retry-After", err)
	}
	t.Logf("503 through b after %v", time.Since(start))
	check("list through a while d's units are taken over", adm)
	t.Logf("a's list answered %v after d halted", time.Since(start))
}
