package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// startClusterNodes starts three cluster nodes a, b and c on a new test
// database; it skips the test without PostgreSQL.
func startClusterNodes(t *testing.T) map[string]*server.Server {
	t.Helper()
	_, url := pgtest.Database(t)
	nodes := map[string]*server.Server{}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c"} {
		s := config.DefaultServer()
		s.Cluster, s.Store, s.NodeID = true, url, id
		s.ClusterListen, s.ClusterSecret = "127.0.0.1:0", "0123456789abcdef0123456789abcdef-cli-test"
		s.AMQPAddr, s.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
		s.ClusterHeartbeat, s.ClusterLeaseTTL, s.ClusterTrustMargin, s.ClusterPoll = 100*time.Millisecond, time.Second, 300*time.Millisecond, 100*time.Millisecond
		s.ConfigFile, s.ConfigSearch = "", ""
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := server.Start(ctx, server.Options{Server: s})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			nodes[id] = srv
		})
	}
	wg.Wait()
	for _, srv := range nodes {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// The busbar CLI pointed at node a manages and uses a queue and a topic
// that node b or c serves.
func TestCLIThroughAClusterNode(t *testing.T) {
	nodes := startClusterNodes(t)
	a := nodes["a"]
	b := &testBroker{t: t, srv: a, cs: connString(a.AMQPAddr().String(), "SAS_KEY_VALUE"), admin: a.HTTPAddr().String()}
	servedBy := func(name string) string {
		for id, s := range nodes {
			if _, ok := s.Broker().EntityStoreID(name); ok {
				return id
			}
		}
		return ""
	}
	// remote creates kind named prefix0, prefix1, … through a until
	// placement gives one to another node, and waits for that node to
	// serve it.
	remote := func(kind, prefix string) (string, string) {
		for i := range 12 {
			name := fmt.Sprint(prefix, i)
			b.run(kind, "create", name).ok(t)
			on := servedBy(name)
			if on == "" {
				t.Fatalf("%s not served by any node after its creation", name)
			}
			u, _ := nodes[on].Broker().EntityStoreID(name)
			if w := cluster.Winner(u, []string{"a", "b", "c"}); w != "a" {
				deadline := time.Now().Add(30 * time.Second)
				for servedBy(name) != w {
					if time.Now().After(deadline) {
						t.Fatalf("%s did not move to %s", name, w)
					}
					time.Sleep(50 * time.Millisecond)
				}
				return name, w
			}
		}
		t.Fatal("placement gave everything to a")
		return "", ""
	}
	queue, qOwner := remote("queue", "orders")
	topic, tOwner := remote("topic", "events")
	t.Logf("queue %s on %s, topic %s on %s", queue, qOwner, topic, tOwner)

	b.run("queue", "update", queue, "--max-delivery-count", "3").ok(t)
	if info, err := nodes[qOwner].Broker().GetQueue(queue); err != nil || info.Properties.MaxDeliveryCount != 3 {
		t.Fatalf("the owner has %+v, %v", info.Properties, err)
	}
	b.run("send", queue, "hello").ok(t)
	v := decode[queueView](t, b.run("queue", "show", queue, "--json").ok(t))
	if *v.Properties.MaxDeliveryCount != 3 || v.Runtime == nil || v.Runtime.ActiveMessageCount != 1 {
		t.Fatalf("show through a: %+v %+v", v.Properties, v.Runtime)
	}
	found := false
	for _, q := range decode[[]queueView](t, b.run("queue", "list", "--json").ok(t)) {
		found = found || q.Name == queue && q.Runtime != nil && q.Runtime.ActiveMessageCount == 1
	}
	if !found {
		t.Fatalf("%s with its message is not in a's list", queue)
	}

	b.run("subscription", "create", topic, "audit").ok(t)
	b.run("rule", "create", topic, "audit", "big", "--sql", "amount > 100").ok(t)
	if !strings.Contains(b.run("rule", "show", topic, "audit", "big").ok(t), "amount > 100") {
		t.Fatal("rule show through a lacks the filter")
	}
	if _, err := nodes[tOwner].Broker().GetRule(topic, "audit", "big"); err != nil {
		t.Fatalf("the owner has no rule: %v", err)
	}
	if subs := decode[[]subscriptionView](t, b.run("subscription", "list", topic, "--json").ok(t)); len(subs) != 1 || subs[0].Name != "audit" {
		t.Fatalf("subscription list through a: %+v", subs)
	}
	b.run("subscription", "delete", topic, "audit").ok(t)
	b.run("topic", "delete", topic).ok(t)
	b.run("queue", "delete", queue).ok(t)
	if w := servedBy(queue) + servedBy(topic); w != "" {
		t.Fatalf("still served by %s after the deletes", w)
	}
	b.run("queue", "show", queue).fails(t, ExitNotFound, "not found")
}
