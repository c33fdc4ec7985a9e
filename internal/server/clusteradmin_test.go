package server

// The admin API, the REST data plane and Config.json on three in-process
// cluster nodes: the official Go SDK's admin client and net/http talk to
// node a only, about a queue and a topic that b or c serves.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// startCluster starts nodes a, b and c on a new test database, at once,
// each with entities; it skips the test without PostgreSQL.
func startCluster(t *testing.T, entities *config.EmulatorConfig) map[string]*Server {
	t.Helper()
	return startClusterWith(t, entities, nil)
}

// startClusterWith is startCluster with adjust applied to each node's
// options.
func startClusterWith(t *testing.T, entities *config.EmulatorConfig, adjust func(*Options)) map[string]*Server {
	t.Helper()
	_, url := pgtest.Database(t)
	ids := []string{"a", "b", "c"}
	servers := make([]*Server, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		o := clusterOptions(t, url, id)
		o.Entities = entities
		if adjust != nil {
			adjust(&o)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			servers[i], errs[i] = Start(ctx, o)
		})
	}
	wg.Wait()
	nodes := map[string]*Server{}
	for i, s := range servers {
		if s == nil {
			continue
		}
		nodes[ids[i]] = s
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer scancel()
			_ = s.Shutdown(sctx)
		})
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// servedBy is the node whose broker serves entity, "" if none.
func servedBy(nodes map[string]*Server, entity string) string {
	for id, s := range nodes {
		if _, ok := s.Broker().EntityStoreID(entity); ok {
			return id
		}
	}
	return ""
}

// remoteEntity creates queues or topics named prefix0, prefix1, …
// through node a until placement gives one to another node, waits for
// that node to serve it and returns its name and owner.
func remoteEntity(t *testing.T, ctx context.Context, nodes map[string]*Server, prefix string, create func(string) error) (string, string) {
	t.Helper()
	for i := 0; i < 12; i++ {
		name := fmt.Sprint(prefix, i)
		if err := create(name); err != nil {
			t.Fatalf("create %s on a: %v", name, err)
		}
		u, on := unitServing(nodes, name)
		if on == "" {
			t.Fatalf("%s not served by any node right after its creation", name)
		}
		if w := cluster.Winner(u, []string{"a", "b", "c"}); w != "a" {
			waitFor(t, ctx, func() bool { return servedBy(nodes, name) == w }, name+" to move to "+w)
			return name, w
		}
	}
	t.Fatal("placement gave every entity to a")
	return "", ""
}

func TestClusterAdminThroughAnyNode(t *testing.T) {
	nodes := startCluster(t, nil)
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cs, adm := sasAdmin(t, a)
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })

	queue, qOwner := remoteEntity(t, ctx, nodes, "orders", func(n string) error { _, err := adm.CreateQueue(ctx, n, nil); return err })
	topic, tOwner := remoteEntity(t, ctx, nodes, "events", func(n string) error { _, err := adm.CreateTopic(ctx, n, nil); return err })
	t.Logf("queue %s on %s, topic %s on %s", queue, qOwner, topic, tOwner)

	t.Run("queue get, update, runtime properties and lists through a", func(t *testing.T) {
		q, err := adm.GetQueue(ctx, queue, nil)
		if err != nil || q == nil {
			t.Fatalf("GetQueue through a: %v, %v", q, err)
		}
		q.MaxDeliveryCount = to.Ptr[int32](7)
		if _, err := adm.UpdateQueue(ctx, queue, q.QueueProperties, nil); err != nil {
			t.Fatalf("UpdateQueue through a: %v", err)
		}
		if info, err := nodes[qOwner].Broker().GetQueue(queue); err != nil || info.Properties.MaxDeliveryCount != 7 {
			t.Fatalf("the owner has %+v, %v; want MaxDeliveryCount 7", info.Properties, err)
		}
		snd, err := client.NewSender(queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(context.Background())
		for i := range 3 {
			if err := snd.SendMessage(ctx, &azservicebus.Message{Body: fmt.Append(nil, "m", i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		rp, err := adm.GetQueueRuntimeProperties(ctx, queue, nil)
		if err != nil || rp == nil || rp.ActiveMessageCount != 3 {
			t.Fatalf("GetQueueRuntimeProperties through a: %+v, %v; want 3 active", rp, err)
		}
		found := false
		for pager := adm.NewListQueuesRuntimePropertiesPager(&admin.ListQueuesRuntimePropertiesOptions{MaxPageSize: 1}); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListQueuesRuntimeProperties through a: %v", err)
			}
			for _, e := range page.QueueRuntimeProperties {
				if e.QueueName == queue {
					found = true
					if e.ActiveMessageCount != 3 {
						t.Errorf("listed with %d active messages, want 3", e.ActiveMessageCount)
					}
				}
			}
		}
		if !found {
			t.Errorf("%s is not in a's list of queues", queue)
		}
		var names []string
		for pager := adm.NewListQueuesPager(nil); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListQueues through a: %v", err)
			}
			for _, e := range page.Queues {
				names = append(names, e.QueueName)
			}
		}
		want := 0
		for _, s := range nodes {
			want += len(s.Broker().ListQueues())
		}
		if len(names) != want {
			t.Errorf("a lists %d queues %v; the nodes serve %d", len(names), names, want)
		}
	})

	t.Run("subscriptions and rules of a topic served elsewhere", func(t *testing.T) {
		if tp, err := adm.GetTopic(ctx, topic, nil); err != nil || tp == nil {
			t.Fatalf("GetTopic through a: %v, %v", tp, err)
		}
		if _, err := adm.CreateSubscription(ctx, topic, "audit", nil); err != nil {
			t.Fatalf("CreateSubscription through a: %v", err)
		}
		if _, err := nodes[tOwner].Broker().GetSubscription(topic, "audit"); err != nil {
			t.Fatalf("the owner has no subscription: %v", err)
		}
		if s, err := adm.GetSubscription(ctx, topic, "audit", nil); err != nil || s == nil {
			t.Fatalf("GetSubscription through a: %v, %v", s, err)
		}
		if _, err := adm.CreateRule(ctx, topic, "audit", &admin.CreateRuleOptions{Name: to.Ptr("big"),
			Filter: &admin.SQLFilter{Expression: "amount > 100"}}); err != nil {
			t.Fatalf("CreateRule through a: %v", err)
		}
		if r, err := adm.GetRule(ctx, topic, "audit", "big", nil); err != nil || r == nil {
			t.Fatalf("GetRule through a: %v, %v", r, err)
		}
		var rules []string
		for pager := adm.NewListRulesPager(topic, "audit", nil); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListRules through a: %v", err)
			}
			for _, r := range page.Rules {
				rules = append(rules, r.Name)
			}
		}
		if strings.Join(rules, ",") != "$Default,big" {
			t.Errorf("rules %v, want $Default and big", rules)
		}
		var subs []string
		for pager := adm.NewListSubscriptionsPager(topic, nil); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListSubscriptions through a: %v", err)
			}
			for _, s := range page.Subscriptions {
				subs = append(subs, s.SubscriptionName)
			}
		}
		if strings.Join(subs, ",") != "audit" {
			t.Errorf("subscriptions %v, want audit", subs)
		}
		if rp, err := adm.GetSubscriptionRuntimeProperties(ctx, topic, "audit", nil); err != nil || rp == nil {
			t.Fatalf("GetSubscriptionRuntimeProperties through a: %v, %v", rp, err)
		}
		found := false
		for pager := adm.NewListTopicsRuntimePropertiesPager(nil); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListTopicsRuntimeProperties through a: %v", err)
			}
			for _, e := range page.TopicRuntimeProperties {
				found = found || e.TopicName == topic && e.SubscriptionCount == 1
			}
		}
		if !found {
			t.Errorf("%s is not in a's list of topics with its one subscription", topic)
		}
		if _, err := adm.DeleteRule(ctx, topic, "audit", "big", nil); err != nil {
			t.Fatalf("DeleteRule through a: %v", err)
		}
		if _, err := adm.DeleteSubscription(ctx, topic, "audit", nil); err != nil {
			t.Fatalf("DeleteSubscription through a: %v", err)
		}
		if s, err := adm.GetSubscription(ctx, topic, "audit", nil); err != nil || s != nil {
			t.Fatalf("GetSubscription after its deletion: %v, %v; want not found", s, err)
		}
	})

	t.Run("REST data plane through a", func(t *testing.T) {
		base := "http://" + a.HTTPAddr().String()
		do := func(method, path, body string) (*http.Response, string) {
			t.Helper()
			req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, base+"/"+queue, time.Now().Add(time.Hour)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp, string(b)
		}
		before, err := nodes[qOwner].Broker().GetQueue(queue)
		if err != nil {
			t.Fatal(err)
		}
		if resp, body := do("POST", "/"+queue+"/messages", "over http"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("send through a: %d %s", resp.StatusCode, body)
		}
		if info, _ := nodes[qOwner].Broker().GetQueue(queue); info.Counts.Active != before.Counts.Active+1 {
			t.Fatalf("the owner has %d active messages, want %d", info.Counts.Active, before.Counts.Active+1)
		}
		resp, body := do("POST", "/"+queue+"/messages/head?timeout=5", "")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("peek-lock through a: %d %s", resp.StatusCode, body)
		}
		var bp struct {
			LockToken      string
			SequenceNumber int64
		}
		if err := json.Unmarshal([]byte(resp.Header.Get("BrokerProperties")), &bp); err != nil || bp.LockToken == "" {
			t.Fatalf("BrokerProperties %q: %v", resp.Header.Get("BrokerProperties"), err)
		}
		if resp, body := do("DELETE", fmt.Sprintf("/%s/messages/%d/%s", queue, bp.SequenceNumber, bp.LockToken), ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("complete through a: %d %s", resp.StatusCode, body)
		}
		if info, _ := nodes[qOwner].Broker().GetQueue(queue); info.Counts.Active != before.Counts.Active {
			t.Fatalf("the owner has %d active messages after the complete, want %d", info.Counts.Active, before.Counts.Active)
		}
		// A message this node serves is not found elsewhere: 410 as on one node.
		if resp, body := do("POST", "/nosuchqueue/messages", "x"); resp.StatusCode != http.StatusGone && resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("send to a missing queue: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("deleting through a is done by the owner", func(t *testing.T) {
		if _, err := adm.DeleteQueue(ctx, queue, nil); err != nil {
			t.Fatalf("DeleteQueue through a: %v", err)
		}
		if _, err := adm.DeleteTopic(ctx, topic, nil); err != nil {
			t.Fatalf("DeleteTopic through a: %v", err)
		}
		if w := servedBy(nodes, queue) + servedBy(nodes, topic); w != "" {
			t.Fatalf("still served by %s", w)
		}
		if q, err := adm.GetQueue(ctx, queue, nil); err != nil || q != nil {
			t.Fatalf("GetQueue after its deletion: %v, %v; want not found", q, err)
		}
		// The name is free again, on any node.
		if _, err := adm.CreateQueue(ctx, queue, nil); err != nil {
			t.Fatalf("creating %s again: %v", queue, err)
		}
	})
}

// TestClusterConfigEntities: three nodes start at once with the same
// Config.json; every queue, topic, subscription and rule exists once,
// whichever node serves it, and a's admin API shows them all.
func TestClusterConfigEntities(t *testing.T) {
	ec := &config.EmulatorConfig{Namespaces: []config.Namespace{{Name: "sbemulatorns"}}}
	ns := &ec.Namespaces[0]
	for i := range 4 {
		ns.Queues = append(ns.Queues, config.Queue{Name: fmt.Sprint("cq", i), Props: config.QueueProps{MaxDeliveryCount: to.Ptr[int32](5)}})
	}
	for i := range 3 {
		ns.Topics = append(ns.Topics, config.Topic{Name: fmt.Sprint("ct", i), Subscriptions: []config.Subscription{
			{Name: "all"},
			{Name: "red", Rules: []config.Rule{{Name: "isred", Filter: config.Filter{Type: config.FilterCorrelation, Correlation: &config.CorrelationFilter{Label: to.Ptr("red")}}},
				{Name: "big", Filter: config.Filter{Type: config.FilterSQL, SQL: "size > 10"}}}},
		}})
	}
	nodes := startCluster(t, ec)
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, adm := sasAdmin(t, a)
	for _, q := range ns.Queues {
		waitFor(t, ctx, func() bool { return servedBy(nodes, q.Name) != "" }, q.Name+" to be served")
		got, err := adm.GetQueue(ctx, q.Name, nil)
		if err != nil || got == nil || *got.MaxDeliveryCount != 5 {
			t.Fatalf("queue %s through a: %+v, %v", q.Name, got, err)
		}
	}
	for _, tp := range ns.Topics {
		waitFor(t, ctx, func() bool { return servedBy(nodes, tp.Name) != "" }, tp.Name+" to be served")
		owner := nodes[servedBy(nodes, tp.Name)]
		waitFor(t, ctx, func() bool {
			_, err := owner.Broker().GetRule(tp.Name, "red", "big")
			return err == nil
		}, tp.Name+"'s rules")
		for _, sub := range []string{"all", "red"} {
			if s, err := adm.GetSubscription(ctx, tp.Name, sub, nil); err != nil || s == nil {
				t.Fatalf("%s/%s through a: %v, %v", tp.Name, sub, s, err)
			}
		}
		var rules []string
		for pager := adm.NewListRulesPager(tp.Name, "red", nil); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Rules {
				rules = append(rules, r.Name)
			}
		}
		if strings.Join(rules, ",") != "big,isred" {
			t.Errorf("%s/red has rules %v, want big and isred", tp.Name, rules)
		}
	}
	total := 0
	for _, s := range nodes {
		total += len(s.Broker().ListQueues()) + len(s.Broker().ListTopics())
	}
	if total != len(ns.Queues)+len(ns.Topics) {
		t.Fatalf("the nodes serve %d queues and topics, want %d (each once)", total, len(ns.Queues)+len(ns.Topics))
	}
}

// TestClusterAdminOwnerDown: while the node serving a queue is gone and
// another takes it over, a's admin API answers 503 with Retry-After (or
// already the new owner's answer), never a wrong one; then it answers
// from the new owner.
func TestClusterAdminOwnerDown(t *testing.T) {
	nodes := startCluster(t, nil)
	a := nodes["a"]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, adm := sasAdmin(t, a)
	queue, owner := remoteEntity(t, ctx, nodes, "orders", func(n string) error { _, err := adm.CreateQueue(ctx, n, nil); return err })
	nodes[owner].cluster.halt()
	stop(t, nodes[owner])
	delete(nodes, owner)

	base := "http://" + a.HTTPAddr().String()
	statuses := map[int]int{}
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", base+"/"+queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, base+"/"+queue, time.Now().Add(time.Hour)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusOK {
			if !strings.Contains(string(body), queue) {
				t.Fatalf("200 without the queue:\n%s", body)
			}
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("while %s is down: %d (Retry-After %q)\n%s", owner, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no node answered for %s: %v", queue, statuses)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Logf("%s down: answers %v until %s took %s", owner, statuses, servedBy(nodes, queue), queue)
}

// TestClusterConfigForwarding: three nodes start at once with one
// Config.json whose queues src0…src5 forward (ForwardTo) to dst, and a
// topic's subscriptions forward to queues subdst0…5 (six of each, so
// that placement mostly leaves some target on another node; a fresh
// cluster is started when it does not). Every entity is
// created on its placement winner and served there from the start (some
// sources on another node than dst's); a message sent through any node
// to each source, and to the topic, arrives in its targets.
func TestClusterConfigForwarding(t *testing.T) {
	const nSubs = 6
	ec := &config.EmulatorConfig{Namespaces: []config.Namespace{{Name: "sbemulatorns"}}}
	ns := &ec.Namespaces[0]
	for i := range 6 {
		ns.Queues = append(ns.Queues, config.Queue{Name: fmt.Sprint("src", i), Props: config.QueueProps{ForwardTo: to.Ptr("dst")}})
	}
	ns.Queues = append(ns.Queues, config.Queue{Name: "dst"})
	tp := config.Topic{Name: "ftopic"}
	for i := range nSubs {
		ns.Queues = append(ns.Queues, config.Queue{Name: fmt.Sprint("subdst", i)})
		tp.Subscriptions = append(tp.Subscriptions, config.Subscription{Name: fmt.Sprint("fwd", i),
			Props: config.SubscriptionProps{ForwardTo: to.Ptr(fmt.Sprint("subdst", i))}})
	}
	ns.Topics = append(ns.Topics, tp)
	ids := []string{"a", "b", "c"}
	names := []string{"dst", "ftopic"}
	for i := range nSubs {
		names = append(names, fmt.Sprint("subdst", i))
	}
	for i := range 6 {
		names = append(names, fmt.Sprint("src", i))
	}
	// placed starts the three nodes and checks that every entity is
	// served by its placement winner from its creation: at once, and
	// still after three drains (1 s here; a wire test waits in real
	// time). It reports how many sources are on another node than dst
	// and subscription targets on another node than ftopic, and where
	// each entity is.
	placed := func() (nodes map[string]*Server, cross, subCross int, where string) {
		// Each node declares once it sees the three live, so that they
		// all place alike.
		nodes = startClusterWith(t, ec, func(o *Options) {
			o.beforeDeclare = func(c *clusterPart) {
				for deadline := time.Now().Add(20 * time.Second); len(c.node.Live()) < 3 && time.Now().Before(deadline); {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
		onWinners := func(when string) {
			t.Helper()
			for _, n := range names {
				if u, on := unitServing(nodes, n); on == "" || on != cluster.Winner(u, ids) {
					t.Fatalf("%s: %s (unit %d) served by %q, its winner is %s", when, n, u, on, cluster.Winner(u, ids))
				}
			}
		}
		onWinners("right after the start")
		time.Sleep(3 * time.Second)
		onWinners("three drains after the start")
		for _, n := range names {
			u, on := unitServing(nodes, n)
			where += fmt.Sprintf(" %s=%d@%s", n, u, on)
		}
		for i := range 6 {
			if servedBy(nodes, fmt.Sprint("src", i)) != servedBy(nodes, "dst") {
				cross++
			}
		}
		for i := range nSubs {
			if servedBy(nodes, fmt.Sprint("subdst", i)) != servedBy(nodes, "ftopic") {
				subCross++
			}
		}
		return nodes, cross, subCross, where
	}
	// Placement follows the entity ids the nodes draw as they declare, so
	// now and then it leaves no target on another node: then the test
	// starts a fresh cluster (a new database, new ids).
	var nodes map[string]*Server
	for attempt := 1; ; attempt++ {
		var cross, subCross int
		var where string
		nodes, cross, subCross, where = placed()
		if cross > 0 && subCross > 0 {
			t.Logf("%d of 6 sources on another node than dst, %d of %d subscription targets on another node than ftopic", cross, subCross, nSubs)
			break
		}
		if attempt == 3 {
			t.Fatalf("no forwarding across nodes in %d clusters: %d sources off dst's node, %d subscription targets off ftopic's; entity=unit@node:%s", attempt, cross, subCross, where)
		}
		t.Logf("cluster %d: %d sources off dst's node, %d subscription targets off ftopic's (entity=unit@node:%s); starting a fresh one", attempt, cross, subCross, where)
		for _, s := range nodes {
			sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = s.Shutdown(sctx)
			scancel()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	owner := nodes[servedBy(nodes, "ftopic")]
	for i := range nSubs {
		if _, err := owner.Broker().GetSubscription("ftopic", fmt.Sprint("fwd", i)); err != nil {
			t.Fatalf("subscription fwd%d: %v", i, err)
		}
	}

	opts := &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: 30, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}}
	send := func(node, entity, body string) {
		t.Helper()
		cs, _ := sasAdmin(t, nodes[node])
		client, err := azservicebus.NewClientFromConnectionString(cs, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close(context.Background())
		snd, err := client.NewSender(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(context.Background())
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatalf("send to %s through %s: %v", entity, node, err)
		}
	}
	var want []string
	for i := range 6 {
		body := fmt.Sprint("via src", i)
		send(ids[i%3], fmt.Sprint("src", i), body)
		want = append(want, body)
	}
	send("b", "ftopic", "via ftopic")
	for i := range nSubs {
		q := fmt.Sprint("subdst", i)
		landed(t, ctx, nodes[servedBy(nodes, q)], q, 10*time.Second, "via ftopic")
	}
	got := func() []string {
		b := bodiesOf(t, ctx, nodes[servedBy(nodes, "dst")], "dst")
		slices.Sort(b)
		return b
	}
	waitFor(t, ctx, func() bool { return slices.Equal(got(), want) }, "every source's message in dst")
}
