package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// startNodes starts nodes ids on a fresh test database, with adjust
// applied to each node's options, and an admin client of the first.
func startNodes(t *testing.T, adjust func(*Options), ids ...string) (map[string]*Server, *admin.Client) {
	t.Helper()
	_, url := pgtest.Database(t)
	nodes := map[string]*Server{}
	for _, id := range ids {
		o := clusterOptions(t, url, id)
		if adjust != nil {
			adjust(&o)
		}
		s := start(t, o)
		nodes[id] = s
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer scancel()
			_ = s.Shutdown(sctx)
		})
	}
	first := nodes[ids[0]]
	_, adm := sasAdmin(t, first)
	return nodes, adm
}

// TestClusterHandoffParksAttaches: a client of node a attaches links to
// queues node b serves, over and over, while b leaves gracefully and hands
// them to a and c. No attach fails: those made while a queue has no owner
// are parked by a's gateway and served by the new owner (c over the relay,
// a through its own internal listener).
func TestClusterHandoffParksAttaches(t *testing.T) {
	nodes, adm := startNodes(t, func(o *Options) { o.Server.AllowAnyKey = true }, "a", "b", "c")
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// Queues b wins; after b leaves one goes to c, one to a.
	next := map[string]string{} // queue → its winner without b
	for i := 0; len(next) < 2 || !slices.Contains(mapValues(next), "a") || !slices.Contains(mapValues(next), "c"); i++ {
		if i == 40 {
			t.Fatal("no queue placement to test with")
		}
		name := fmt.Sprint("park", i)
		if _, err := adm.CreateQueue(ctx, name, nil); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		u, _ := unitServing(nodes, name)
		if cluster.Winner(u, []string{"a", "b", "c"}) != "b" {
			continue
		}
		w := cluster.Winner(u, []string{"a", "c"})
		if !slices.Contains(mapValues(next), w) {
			next[name] = w
		}
	}
	for q := range next {
		waitFor(t, ctx, func() bool { _, ok := nodes["b"].Broker().EntityStoreID(q); return ok }, q+" to move to b")
	}

	conn, err := goamqp.Dial(ctx, "amqp://"+a.AMQPAddr().String(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		failures []error
		attaches int
		parked   int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for q := range next {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if s, serr := sess.NewSender(ctx, q, nil); serr == nil {
					err = s.Close(ctx)
				} else {
					err = serr
				}
				if r, rerr := sess.NewReceiver(ctx, q, nil); rerr == nil {
					_ = r.Close(ctx)
				} else if err == nil {
					err = rerr
				}
				mu.Lock()
				attaches += 2
				if err != nil {
					failures = append(failures, fmt.Errorf("%s: %w", q, err))
				}
				mu.Unlock()
			}
		}()
	}
	watch := make(chan struct{})
	go func() { // how many attaches a's gateway held at once, at most
		defer close(watch)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			mu.Lock()
			parked = max(parked, a.cluster.gateway.Parked())
			mu.Unlock()
		}
	}()
	time.Sleep(200 * time.Millisecond) // attaching while b serves them
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if err := nodes["b"].Shutdown(sctx); err != nil {
		t.Errorf("b's shutdown: %v", err)
	}
	scancel()
	for q, w := range next {
		waitFor(t, ctx, func() bool { _, ok := nodes[w].Broker().EntityStoreID(q); return ok }, q+" to move to "+w)
	}
	time.Sleep(300 * time.Millisecond) // attaching while the new owners serve them
	close(stop)
	wg.Wait()
	<-watch
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d attaches through a during the hand-off, at most %d parked at once", attaches, parked)
	for _, err := range failures {
		t.Errorf("attach failed: %v", err)
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestClusterGracefulHandoffSettles: a client of node a holds locks on
// messages of a queue node b serves. b leaves gracefully: while its units
// drain (no new deliveries, sends refused retriably) the client completes
// every locked message through a without a lock-lost, and the new owner
// has none of them.
func TestClusterGracefulHandoffSettles(t *testing.T) {
	nodes, adm := startNodes(t, nil, "a", "b", "c")
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var queue string
	for i := 0; queue == ""; i++ {
		if i == 40 {
			t.Fatal("no queue placed on b")
		}
		name := fmt.Sprint("drain", i)
		if _, err := adm.CreateQueue(ctx, name, nil); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if u, _ := unitServing(nodes, name); cluster.Winner(u, []string{"a", "b", "c"}) == "b" {
			queue = name
		}
	}
	waitFor(t, ctx, func() bool { _, ok := nodes["b"].Broker().EntityStoreID(queue); return ok }, queue+" to move to b")

	cs := "Endpoint=sb://" + a.AMQPAddr().String() + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
		MaxRetries: 10, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	snd, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())
	for i := range 5 {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint("m", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(context.Background())
	var locked []*azservicebus.ReceivedMessage
	for len(locked) < 5 {
		ms, err := rcv.ReceiveMessages(ctx, 5-len(locked), nil)
		if err != nil {
			t.Fatal(err)
		}
		locked = append(locked, ms...)
	}

	left := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		left <- nodes["b"].Shutdown(sctx)
	}()
	waitFor(t, ctx, func() bool { return nodes["b"].Broker().Moving(queue) != nil }, "b to drain "+queue)
	for _, m := range locked {
		if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
			t.Errorf("complete %s while its queue drains: %v", m.Body, err)
		}
	}
	if err := <-left; err != nil {
		t.Errorf("b's shutdown: %v", err)
	}
	var taker string
	waitFor(t, ctx, func() bool {
		for _, id := range []string{"a", "c"} {
			if _, ok := nodes[id].Broker().EntityStoreID(queue); ok {
				taker = id
				return true
			}
		}
		return false
	}, "a or c to take "+queue)
	if info, err := nodes[taker].Broker().GetQueue(queue); err != nil || info.Counts.Total != 0 {
		t.Fatalf("the new owner %s holds %+v, %v; want none (all were completed)", taker, info.Counts, err)
	}
}

// TestClusterEntityRuleThroughGateway: a queue served by node b has its
// own shared access rule; a client of node a with that rule's key (a
// connection string naming the rule, as Azure's portal gives one for an
// entity) sends and receives through a, which reads the rule from the
// shared catalog. The rule's key is good for that queue only, and a
// wrong key is refused.
func TestClusterEntityRuleThroughGateway(t *testing.T) {
	nodes, adm := startNodes(t, nil, "a", "b")
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rule := admin.AuthorizationRule{KeyName: ptrTo("orders-app"), PrimaryKey: ptrTo("orders-app-key-0123456789"),
		AccessRights: []admin.AccessRight{admin.AccessRightSend, admin.AccessRightListen}}
	var queue string
	for i := 0; queue == ""; i++ {
		if i == 40 {
			t.Fatal("no queue placed on b")
		}
		name := fmt.Sprint("ruled", i)
		if _, err := adm.CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
			AuthorizationRules: []admin.AuthorizationRule{rule}}}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if u, _ := unitServing(nodes, name); cluster.Winner(u, []string{"a", "b"}) == "b" {
			queue = name
		}
	}
	if _, err := adm.CreateQueue(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, func() bool {
		_, onB := nodes["b"].Broker().EntityStoreID(queue)
		_, onA := a.Broker().EntityStoreID(queue)
		return onB && !onA
	}, queue+" to move to b")

	connect := func(key string) *azservicebus.Client {
		cs := "Endpoint=sb://" + a.AMQPAddr().String() + ";SharedAccessKeyName=orders-app;SharedAccessKey=" + key + ";UseDevelopmentEmulator=true;"
		c, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
			MaxRetries: 2, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	c := connect(*rule.PrimaryKey)
	snd, err := c.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("ruled")}, nil); err != nil {
		t.Fatalf("send with the queue's own rule through a: %v", err)
	}
	rcv, err := c.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "ruled" {
		t.Fatalf("receive with the queue's own rule through a: %v %v", ms, err)
	}
	if err := rcv.CompleteMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	other, err := c.NewSender("other", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err == nil {
		t.Fatal("the queue's rule was good for another queue")
	}
	bad, err := connect("not-the-key").NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err == nil {
		t.Fatal("a wrong key for the queue's rule was accepted")
	}
}

func ptrTo[T any](v T) *T { return &v }
