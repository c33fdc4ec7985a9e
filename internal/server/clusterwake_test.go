package server

// The wake a node sends after committing transfers (clusterwake.go):
// the node serving their target lands them at once instead of at its
// next landing poll.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/message"
)

// placeOn creates queues base0, base1, … through adm until one is
// placed on node want, waits until want serves it (created there, or
// created by the node adm talks to, which hands it off, when that node
// did not see want live yet), and returns its name.
func placeOn(t *testing.T, ctx context.Context, nodes map[string]*Server, adm *admin.Client, base, want string, p *admin.QueueProperties) string {
	t.Helper()
	var ids []string
	for id := range nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i := 0; i < 40; i++ {
		name := fmt.Sprint(base, i)
		if _, err := adm.CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: p}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		u, on := unitServing(nodes, name)
		if on == "" {
			t.Fatalf("%s not served by any node right after its creation", name)
		}
		if cluster.Winner(u, ids) == want {
			waitFor(t, ctx, func() bool { _, ok := nodes[want].Broker().EntityStoreID(name); return ok }, name+" to move to "+want)
			return name
		}
	}
	t.Fatalf("no %s placed on %s", base, want)
	return ""
}

// latencies measures, n times, how long after do(i) returns the i-th
// message (body fmt.Sprint(tag, i)) is in path on s; each must be there
// within limit.
func latencies(t *testing.T, ctx context.Context, s *Server, path, tag string, n int, limit time.Duration, do func(i int)) []time.Duration {
	t.Helper()
	var ds []time.Duration
	for i := range n {
		body := fmt.Sprint(tag, i)
		do(i)
		start := time.Now()
		for !slices.Contains(bodiesOf(t, ctx, s, path), body) {
			if time.Since(start) > limit {
				t.Fatalf("%s not in %s %v after it was sent (limit %v)", body, path, time.Since(start), limit)
			}
			time.Sleep(2 * time.Millisecond)
		}
		ds = append(ds, time.Since(start))
	}
	return ds
}

func p50max(ds []time.Duration) string {
	s := slices.Sorted(slices.Values(ds))
	return fmt.Sprintf("p50 %v, max %v (%d sends)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

func bodyMsg(s string) *message.Message {
	return &message.Message{Body: frames.AppendDataSection(nil, []byte(s))}
}

// TestClusterWake: the landing poll is 30 s, so only the wake lands
// quickly. A message forwarded (ForwardTo) from a queue node a serves to
// one node b serves, one dead-letter forwarded (ForwardDeadLetteredMessagesTo)
// and one sent in a transaction on a send-via link are each in b's queue
// well under the poll (< 2 s). With the wakes dropped (the broker's hook
// unset) a forwarded message waits for the poll; a wake from a stranger on
// b's internal listener (no node proof, a false one, or through b's public
// HTTP listener) lands nothing; a.node's wake then lands it at once.
func TestClusterWake(t *testing.T) {
	const poll = 30 * time.Second
	nodes, adm := startNodes(t, func(o *Options) { o.Server.AllowAnyKey = true; o.ClusterLandPoll = poll }, "a", "b")
	a, b := nodes["a"], nodes["b"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	waitAllLive(t, ctx, nodes)

	dst := placeOn(t, ctx, nodes, adm, "dst", "b", nil)
	src := placeOn(t, ctx, nodes, adm, "src", "a", &admin.QueueProperties{ForwardTo: to.Ptr(dst)})
	dlsrc := placeOn(t, ctx, nodes, adm, "dlsrc", "a", &admin.QueueProperties{ForwardDeadLetteredMessagesTo: to.Ptr(dst)})
	via := placeOn(t, ctx, nodes, adm, "via", "a", nil)
	dstUnit, _ := b.Broker().EntityStoreID(dst)
	waitFor(t, ctx, func() bool { n, _, _ := a.cluster.node.OwnerOf(dstUnit); return n == "b" }, "a to know b serves "+dst)

	fwd := latencies(t, ctx, b, dst, "f", 5, 2*time.Second, func(i int) {
		if err := a.Broker().Send(ctx, src, []*message.Message{bodyMsg(fmt.Sprint("f", i))}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("forward a → b with wakes (landing poll %v): %s", poll, p50max(fwd))

	dl := latencies(t, ctx, b, dst, "d", 5, 2*time.Second, func(i int) {
		if err := a.Broker().Send(ctx, dlsrc, []*message.Message{bodyMsg(fmt.Sprint("d", i))}); err != nil {
			t.Fatal(err)
		}
		ds, err := a.Broker().Peek(ctx, dlsrc, 0, 10)
		if err != nil || len(ds) != 1 {
			t.Fatalf("peek %s: %d, %v", dlsrc, len(ds), err)
		}
		if r, err := a.Broker().DeadLetterMessages(ctx, dlsrc, []int64{ds[0].SequenceNumber}, "test", "wake"); err != nil || r.Done != 1 {
			t.Fatalf("dead-letter in %s: %+v, %v", dlsrc, r, err)
		}
	})
	t.Logf("dead-letter forward a → b with wakes: %s", p50max(dl))

	c := txnclient.Dial(t, a.AMQPAddr().String())
	c.AttachCoordinator()
	if r := c.AttachSender(1, via, dst); r.Target == nil {
		t.Fatalf("send-via %s → %s refused", via, dst)
	}
	sv := latencies(t, ctx, b, dst, "v", 5, 2*time.Second, func(i int) {
		id := c.Declare()
		txnAccepted(t, c.SendTxn(1, fmt.Sprint("v", i), id))
		txnAccepted(t, c.Discharge(id, false))
	})
	t.Logf("send-via transaction a → b with wakes: %s", p50max(sv))

	// Wakes dropped: the message waits in the outbox for b's poll.
	a.Broker().SetTransferred(nil)
	if err := a.Broker().Send(ctx, src, []*message.Message{bodyMsg("quiet0")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, func() bool {
		xs, err := b.cluster.store.PendingTransfers(ctx, dstUnit, 10, 1<<20)
		return err == nil && len(xs) == 1
	}, "the forward to wait in the outbox")

	// Strangers' wakes for dst's unit land nothing.
	wake := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%d", wakePath, len(fmt.Sprint(dstUnit)), dstUnit)
	internal := b.cluster.ln.Addr().String()
	for _, pre := range []string{"", "BBH1 a 0123456789abcdef\n", "BBH1 a " + strings.Repeat("A", 60) + "\n"} {
		conn, err := net.DialTimeout("tcp", internal, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.WriteString(conn, pre+wake); err != nil {
			t.Logf("write refused: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err == nil {
			t.Fatalf("a wake after preamble %q answered %s", pre, resp.Status)
		}
	}
	resp, err := http.Post("http://"+b.HTTPAddr().String()+wakePath, "text/plain", strings.NewReader(fmt.Sprint(dstUnit)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		t.Fatalf("a wake on the public HTTP listener answered %s", resp.Status)
	}
	time.Sleep(500 * time.Millisecond) // a wake would land it in milliseconds
	if got := bodiesOf(t, ctx, b, dst); slices.Contains(got, "quiet0") {
		t.Fatal("a stranger's wake landed the transfer")
	}

	// a's wake (as after a commit) lands it at once.
	start := time.Now()
	a.cluster.node.Transferred([]uint64{dstUnit})
	latencies(t, ctx, b, dst, "quiet", 1, 2*time.Second, func(int) {})
	t.Logf("a transfer left for the poll, woken: landed %v later", time.Since(start).Round(time.Millisecond))
}

// TestClusterWakeOff: without wakes (ClusterNoWake) a forwarded message
// lands at the landing poll, here the default 1 s: the latency before
// wakes, for comparison. The sends are spread over the poll interval
// (a send right after a landing would wait a whole poll).
func TestClusterWakeOff(t *testing.T) {
	nodes, adm := startNodes(t, func(o *Options) {
		o.Server.AllowAnyKey, o.ClusterNoWake, o.ClusterLandPoll = true, true, cluster.DefaultPoll
	}, "a", "b")
	a, b := nodes["a"], nodes["b"]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	waitAllLive(t, ctx, nodes)
	dst := placeOn(t, ctx, nodes, adm, "dst", "b", nil)
	src := placeOn(t, ctx, nodes, adm, "src", "a", &admin.QueueProperties{ForwardTo: to.Ptr(dst)})
	fwd := latencies(t, ctx, b, dst, "f", 5, 5*time.Second, func(i int) {
		time.Sleep(time.Duration(i) * cluster.DefaultPoll / 5)
		if err := a.Broker().Send(ctx, src, []*message.Message{bodyMsg(fmt.Sprint("f", i))}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("forward a → b without wakes (landing poll %v): %s", cluster.DefaultPoll, p50max(fwd))
}
