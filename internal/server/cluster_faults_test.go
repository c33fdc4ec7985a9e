package server

// Faults of a cluster under load (docs/design/cluster.md §15.5, §15.6):
// a node cut off from PostgreSQL, PostgreSQL restarted, a rolling
// restart. Three in-process nodes, each reaching the test PostgreSQL
// through its own pgtest.Proxy; official Go SDK clients connected to
// every node send (keeping a ledger of what was acknowledged, and by
// which node) and receive-and-complete; at the end every queue is
// drained and compared with the ledger. With BUSBAR_TEST_LOGDIR set, each
// node's log goes to a file there (<test>-<node>.log).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// faultCluster is three nodes, each behind its own database proxy.
type faultCluster struct {
	t       *testing.T
	pg      *pgtest.Server
	ids     []string
	proxies map[string]*pgtest.Proxy
	urls    map[string]string // each node's store URL (through its proxy)
	queues  []string

	mu    sync.Mutex
	nodes map[string]*Server
	eps   map[string]*endpoint
}

// endpoint is the SDK client of one node's AMQP listener; replaced when
// the node restarts (its port changes).
type endpoint struct {
	node   string
	client *azservicebus.Client

	mu      sync.Mutex
	senders map[string]*azservicebus.Sender
}

func (e *endpoint) sender(q string) (*azservicebus.Sender, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.senders[q]; ok {
		return s, nil
	}
	s, err := e.client.NewSender(q, nil)
	if err != nil {
		return nil, err
	}
	e.senders[q] = s
	return s, nil
}

func (e *endpoint) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = e.client.Close(ctx)
}

// faultSendPace is the pause between two sends of one sender.
const faultSendPace = 10 * time.Millisecond

// faultLockDuration is the queues' lock duration: locks of receivers
// stopped mid-way expire quickly, so the final drain gets every message.
const faultLockDuration = 5 * time.Second

// newFaultCluster starts PostgreSQL, three proxies and three nodes, and
// creates at least nq queues, and more until placement gives every node
// one, waiting until each is served by its placement winner.
func newFaultCluster(t *testing.T, nq int) *faultCluster {
	t.Helper()
	pg, url := pgtest.Database(t)
	c := &faultCluster{t: t, pg: pg, ids: []string{"a", "b", "c"}, proxies: map[string]*pgtest.Proxy{},
		urls: map[string]string{}, nodes: map[string]*Server{}, eps: map[string]*endpoint{}}
	for _, id := range c.ids {
		p, err := pgtest.NewProxy(fmt.Sprintf("127.0.0.1:%d", pg.Port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.proxies[id] = p
		if c.urls[id], err = p.URL(url); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.closeAll)
	for _, id := range c.ids {
		c.startNode(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := c.node("a")
	adm, err := admin.NewClientFromConnectionString(connString(a), &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: plainHTTP{a.HTTPAddr().String()}, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	lock := "PT5S"
	var maxDelivery int32 = 1000
	won := map[string]bool{}
	for i := 0; i < nq || len(won) < len(c.ids); i++ {
		if i == nq+12 {
			t.Fatalf("placement gave no queue to some node: %v", won)
		}
		q := fmt.Sprint("work", i)
		// Duplicate detection: a send retried through another node after
		// its answer was lost is saved once, whichever node took the
		// queue over in between (check fails a copy saved twice).
		dedup := true
		if _, err := adm.CreateQueue(ctx, q, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
			LockDuration: &lock, MaxDeliveryCount: &maxDelivery, RequiresDuplicateDetection: &dedup}}); err != nil {
			t.Fatalf("create %s: %v", q, err)
		}
		// Created by a, or by the node placement gives it to once a sees
		// every node live: the catalog knows its unit either way.
		u, ok := c.unitOf(q)
		if !ok {
			t.Fatalf("%s not in the catalog right after its creation", q)
		}
		won[cluster.Winner(u, c.ids)] = true
		c.queues = append(c.queues, q)
	}
	waitFor(t, ctx, func() bool {
		for _, q := range c.queues {
			u, ok := c.unitOf(q)
			if !ok || c.servedBy(q) != cluster.Winner(u, c.ids) {
				return false
			}
		}
		return true
	}, "every queue to be served by its placement winner")
	for _, q := range c.queues {
		t.Logf("queue %s is served by %s", q, c.servedBy(q))
	}
	return c
}

// startNode starts node id (again) and connects a new SDK client to it.
func (c *faultCluster) startNode(id string) {
	o := clusterOptions(c.t, c.urls[id], id)
	if dir := os.Getenv("BUSBAR_TEST_LOGDIR"); dir != "" {
		// Each node's log, for a failure's post-mortem.
		f, err := os.OpenFile(filepath.Join(dir, c.t.Name()+"-"+id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { f.Close() })
		o.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s := start(c.t, o)
	client, err := azservicebus.NewClientFromConnectionString(connString(s), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[id] = s
	c.eps[id] = &endpoint{node: id, client: client, senders: map[string]*azservicebus.Sender{}}
	c.mu.Unlock()
}

// stopNode shuts node id down gracefully (hand-offs) and closes its
// client.
func (c *faultCluster) stopNode(id string) {
	c.mu.Lock()
	s, ep := c.nodes[id], c.eps[id]
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		c.t.Errorf("shutdown of %s: %v", id, err)
	}
	c.mu.Lock()
	delete(c.nodes, id)
	delete(c.eps, id)
	c.mu.Unlock()
	ep.close()
}

func (c *faultCluster) closeAll() {
	c.mu.Lock()
	ids := make([]string, 0, len(c.nodes))
	for id := range c.nodes {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		c.stopNode(id)
	}
}

func (c *faultCluster) node(id string) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *faultCluster) endpoint(id string) *endpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eps[id]
}

// unitOf is q's unit, as the catalog of any running node knows it.
func (c *faultCluster) unitOf(q string) (uint64, bool) {
	for _, id := range c.ids {
		if s := c.node(id); s != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			e, ok, err := s.cluster.store.Lookup(ctx, q)
			cancel()
			if err == nil && ok {
				return e.Unit, true
			}
		}
	}
	return 0, false
}

// servedBy is the node whose broker serves q now, "" when none.
func (c *faultCluster) servedBy(q string, except ...string) string {
	for _, id := range c.ids {
		if slices.Contains(except, id) {
			continue
		}
		if s := c.node(id); s != nil {
			if _, ok := s.Broker().EntityStoreID(q); ok {
				return id
			}
		}
	}
	return ""
}

// ready is node id's /health/ready status code.
func (c *faultCluster) ready(id string) (int, string) {
	s := c.node(id)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + s.HTTPAddr().String() + "/health/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b healthBody
	_ = json.NewDecoder(resp.Body).Decode(&b)
	return resp.StatusCode, b.Reason
}

// ack is one acknowledged operation: which node's client got the
// answer, and when (after it returned).
type ack struct {
	node, queue string
	at          time.Time
	seq         int64 // a complete's: the sequence number of the copy completed
}

// ledger holds what the clients were told succeeded.
type ledger struct {
	mu        sync.Mutex
	sent      map[string]ack // message id -> the send's acknowledgement
	completed map[string]ack // message id -> the complete's acknowledgement
	delivered map[string]int // message id -> deliveries to the load's receivers
	failed    map[string]int // node -> operations that failed through it
	again     []string       // copies delivered again after their complete was acknowledged
	done      map[string]ack // "queue/sequence number" -> the complete's acknowledgement
}

func newLedger() *ledger {
	return &ledger{sent: map[string]ack{}, completed: map[string]ack{}, delivered: map[string]int{}, failed: map[string]int{}, done: map[string]ack{}}
}

// load is the SDK traffic of a test: one sender per node (a send that
// fails through its node is retried through the others, same message
// id) and one peek-lock receiver per queue, completing what it gets (its
// node chosen in turn; after a failure it moves to the next node).
type load struct {
	c      *faultCluster
	l      *ledger
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (c *faultCluster) startLoad() *load {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &load{c: c, l: newLedger(), cancel: cancel}
	for i, id := range c.ids {
		ld.wg.Add(1)
		go ld.sendLoop(ctx, i, id)
	}
	for i, q := range c.queues {
		ld.wg.Add(1)
		go ld.receiveLoop(ctx, i, q)
	}
	return ld
}

func (ld *load) stop() {
	ld.cancel()
	ld.wg.Wait()
}

// sendLoop sends m<i>-<k> to the queues in turn, through node first and,
// when that fails, through the other nodes.
func (ld *load) sendLoop(ctx context.Context, i int, first string) {
	defer ld.wg.Done()
	c := ld.c
	order := append([]string{first}, slices.DeleteFunc(slices.Clone(c.ids), func(s string) bool { return s == first })...)
	for k := 0; ctx.Err() == nil; k++ {
		id := fmt.Sprintf("m%d-%d", i, k)
		q := c.queues[k%len(c.queues)]
		sent := false
		for _, via := range order {
			ep := c.endpoint(via)
			if ep == nil {
				continue // restarting
			}
			if ld.sendVia(ctx, ep, q, id) {
				sent = true
				break
			}
			if ctx.Err() != nil {
				return
			}
		}
		// Paced: the nodes share this process and the machine with the
		// clients; an unpaced load starves their 100 ms heartbeats.
		pause := faultSendPace
		if !sent {
			pause = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

func (ld *load) sendVia(ctx context.Context, ep *endpoint, q, id string) bool {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	snd, err := ep.sender(q)
	if err == nil {
		err = snd.SendMessage(sctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil)
	}
	if err != nil && snd != nil {
		// A new sender next time, as an application would after an error
		// the SDK reports as final (it keeps returning it). The client
		// closes the old one with the others.
		ep.mu.Lock()
		if ep.senders[q] == snd {
			delete(ep.senders, q)
		}
		ep.mu.Unlock()
	}
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	if err != nil {
		ld.l.failed[ep.node]++
		return false
	}
	ld.l.sent[id] = ack{node: ep.node, queue: q, at: time.Now()}
	return true
}

// receiveLoop receives from q and completes, through node ids[first]
// and, after a failure or while that node is down, through the next.
func (ld *load) receiveLoop(ctx context.Context, first int, q string) {
	defer ld.wg.Done()
	at := first // the node it receives through: ids[at % len(ids)]
	node := ld.c.ids[at%len(ld.c.ids)]
	var ep *endpoint
	var rcv *azservicebus.Receiver
	defer func() {
		if rcv != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = rcv.Close(cctx)
			cancel()
		}
	}()
	for ctx.Err() == nil {
		if cur := ld.c.endpoint(node); cur != ep {
			ep, rcv = cur, nil
			if ep != nil {
				r, err := ep.client.NewReceiverForQueue(q, nil)
				if err == nil {
					rcv = r
				}
			}
		}
		if rcv == nil { // the node is down: try the next one
			at++
			node, ep = ld.c.ids[at%len(ld.c.ids)], nil
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ms, err := rcv.ReceiveMessages(rctx, 20, nil)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			ld.l.mu.Lock()
			ld.l.failed[node]++
			ld.l.mu.Unlock()
			// A new receiver next time: the SDK's releaser goroutine of
			// a receiver whose link broke spins, starving the nodes that
			// share this process.
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = rcv.Close(cctx)
			cancel()
			// And through the next node: a client retrying elsewhere.
			at++
			node, rcv, ep = ld.c.ids[at%len(ld.c.ids)], nil, nil
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		for _, m := range ms {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := rcv.CompleteMessage(cctx, m, nil)
			cancel()
			ld.l.mu.Lock()
			ld.l.delivered[m.MessageID]++
			key := fmt.Sprintf("%s/%d", q, *m.SequenceNumber)
			if a, ok := ld.l.done[key]; ok {
				ld.l.again = append(ld.l.again, fmt.Sprintf("%s (%s), its complete acknowledged by %s at %s", m.MessageID, key, a.node, a.at.Format("15:04:05.000")))
			}
			if err == nil {
				ld.l.done[key] = ack{node: node, queue: q, at: time.Now(), seq: *m.SequenceNumber}
				ld.l.completed[m.MessageID] = ack{node: node, queue: q, at: time.Now(), seq: *m.SequenceNumber}
			} else {
				ld.l.failed[node]++
			}
			ld.l.mu.Unlock()
		}
	}
}

// counts is how many sends and completes were acknowledged so far.
func (ld *load) counts() (sent, completed int) {
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	return len(ld.l.sent), len(ld.l.completed)
}

// waitProgress waits until n more sends were acknowledged.
func (ld *load) waitProgress(t *testing.T, ctx context.Context, n int, what string) {
	t.Helper()
	s0, _ := ld.counts()
	waitFor(t, ctx, func() bool { s, _ := ld.counts(); return s >= s0+n }, what)
}

// check drains every queue (and its dead-letter queue) through node via
// and compares with the ledger: every acknowledged send was completed or
// is still there; no acknowledged complete comes back; no message was
// saved twice. A message is known by its id and a copy of it by its
// sequence number: a send whose answer was lost (its node shut down) is
// retried through another node with the same id, and the queues' duplicate
// detection must keep the second copy out.
func (c *faultCluster) check(ld *load, via string) {
	t := c.t
	ld.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Messages locked by the stopped receivers come back after their
	// lock.
	time.Sleep(faultLockDuration + 500*time.Millisecond)
	drained := map[string][]int64{} // message id -> sequence numbers left
	client := c.endpoint(via).client
	for _, q := range c.queues {
		for _, sub := range []azservicebus.SubQueue{0, azservicebus.SubQueueDeadLetter} {
			rcv, err := client.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{
				ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete, SubQueue: sub})
			if err != nil {
				t.Fatal(err)
			}
			quiet := time.Now()
			for time.Since(quiet) < time.Second {
				rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				ms, err := rcv.ReceiveMessages(rctx, 100, nil)
				rcancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Logf("drain %s: %v", q, err)
				}
				for _, m := range ms {
					drained[m.MessageID] = append(drained[m.MessageID], *m.SequenceNumber)
					quiet = time.Now()
				}
				if ctx.Err() != nil {
					t.Fatalf("drain %s: %v", q, ctx.Err())
				}
			}
			_ = rcv.Close(ctx)
		}
	}
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	lost, maybe := 0, 0
	for id, a := range ld.l.sent {
		_, done := ld.l.completed[id]
		if _, there := drained[id]; !done && !there {
			if ld.l.delivered[id] > 0 {
				// Delivered, and a complete failed that may have been
				// saved all the same (its answer was lost): not a loss.
				maybe++
				continue
			}
			lost++
			if lost <= 10 {
				t.Errorf("lost: %s, acknowledged by %s at %s to %s, neither completed nor left in the queue", id, a.node, a.at.Format("15:04:05.000"), a.queue)
			}
		}
	}
	for _, a := range ld.l.again {
		t.Errorf("delivered again: %s", a)
	}
	back, twice := 0, 0
	for id, a := range ld.l.completed {
		if slices.Contains(drained[id], a.seq) {
			back++
			if back <= 10 {
				t.Errorf("came back: %s (sequence number %d), its complete acknowledged by %s at %s", id, a.seq, a.node, a.at.Format("15:04:05.000"))
			}
		} else if len(drained[id]) > 0 {
			twice++
			t.Errorf("saved twice despite duplicate detection: %s, completed as %d, another copy left as %v (a send retried after its answer was lost)", id, a.seq, drained[id])
		}
	}
	for id, seqs := range drained {
		if len(seqs) > 1 {
			twice++
			t.Errorf("saved twice despite duplicate detection: %s, left as %v", id, seqs)
		}
	}
	t.Logf("ledger: %d sends and %d completes acknowledged, %d left in the queues; failed operations by node %v; %d lost, %d completed ones came back, %d saved twice, %d delivered whose completes failed and are gone all the same",
		len(ld.l.sent), len(ld.l.completed), len(drained), ld.l.failed, lost, back, twice, maybe)
}

// acksBy lists the sends and completes node's clients were told
// succeeded in (from, to).
func (ld *load) acksBy(node string, from, to time.Time) []string {
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	var out []string
	for what, m := range map[string]map[string]ack{"send": ld.l.sent, "complete": ld.l.completed} {
		for id, a := range m {
			if a.node == node && a.at.After(from) && a.at.Before(to) {
				out = append(out, fmt.Sprintf("%s %s at %s", what, id, a.at.Format("15:04:05.000")))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestClusterCutOffFromPostgres (§15.5): the node serving the most
// queues loses its database (its proxy black-holes) under load. Within
// ttl − margin it acknowledges nothing more and its readiness is 503;
// the other nodes serve its queues within 10 s, and the clients'
// operations through them succeed. Healed, it serves queues again;
// nothing acknowledged was lost.
func TestClusterCutOffFromPostgres(t *testing.T) {
	c := newFaultCluster(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ttl, margin := time.Second, 300*time.Millisecond // clusterOptions

	// x: the node serving the most queues.
	per := map[string][]string{}
	for _, q := range c.queues {
		per[c.servedBy(q)] = append(per[c.servedBy(q)], q)
	}
	x := ""
	for _, id := range c.ids {
		if len(per[id]) > len(per[x]) {
			x = id
		}
	}
	if code, _ := c.ready(x); code != http.StatusOK {
		t.Fatalf("%s not ready before the cut: %d", x, code)
	}
	ld := c.startLoad()
	ld.waitProgress(t, ctx, 40, "load before the cut")

	cut := time.Now()
	c.proxies[x].SetMode(pgtest.BlackHole)
	t.Logf("%s (serving %v) cut off from PostgreSQL", x, per[x])

	// Readiness fails within the trust window.
	waitFor(t, ctx, func() bool { code, _ := c.ready(x); return code == http.StatusServiceUnavailable }, x+" to be not ready")
	notReady := time.Since(cut)
	_, reason := c.ready(x)
	t.Logf("%s not ready %v after the cut: %s", x, notReady.Round(time.Millisecond), reason)
	if notReady > ttl {
		t.Errorf("%s still ready %v after the cut (ttl %v)", x, notReady, ttl)
	}
	// Its queues are served by the others.
	waitFor(t, ctx, func() bool {
		for _, q := range per[x] {
			if c.servedBy(q, x) == "" {
				return false
			}
		}
		return true
	}, "the others to serve "+x+"'s queues")
	moved := time.Since(cut)
	t.Logf("%s's queues served by others %v after the cut", x, moved.Round(time.Millisecond))
	if moved > 10*time.Second {
		t.Errorf("%s's queues unserved for %v, want under 10 s", x, moved)
	}
	for _, q := range per[x] {
		if _, ok := c.node(x).Broker().EntityStoreID(q); ok {
			t.Errorf("%s still serves %s after the takeover", x, q)
		}
	}
	// The clients carry on through the others.
	ld.waitProgress(t, ctx, 40, "sends through the other nodes after the takeover")

	heal := time.Now()
	if acks := ld.acksBy(x, cut.Add(ttl-margin), heal); len(acks) > 0 {
		t.Errorf("%s acknowledged %d operations between ttl − margin after the cut and the heal: %v", x, len(acks), acks)
	}
	c.proxies[x].SetMode(pgtest.Pass)
	t.Logf("%s healed %v after the cut", x, heal.Sub(cut).Round(time.Millisecond))
	waitFor(t, ctx, func() bool { code, _ := c.ready(x); return code == http.StatusOK }, x+" ready again")
	waitFor(t, ctx, func() bool {
		for _, q := range c.queues {
			if c.servedBy(q) == x {
				return true
			}
		}
		return false
	}, x+" to serve a queue again")
	t.Logf("%s serves queues again %v after the heal", x, time.Since(heal).Round(time.Millisecond))
	ld.waitProgress(t, ctx, 20, "load after the heal")
	c.check(ld, x)
}

// acksAfter is how many sends and completes of each queue were
// acknowledged after t.
func (ld *load) acksAfter(t time.Time) (sends, completes map[string]int) {
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	sends, completes = map[string]int{}, map[string]int{}
	for _, a := range ld.l.sent {
		if a.at.After(t) {
			sends[a.queue]++
		}
	}
	for _, a := range ld.l.completed {
		if a.at.After(t) {
			completes[a.queue]++
		}
	}
	return sends, completes
}

// resumed waits until every queue is served, every node is ready and
// every queue took an acknowledged send and an acknowledged complete
// after since.
func (c *faultCluster) resumed(t *testing.T, ctx context.Context, ld *load, since time.Time, what string) {
	t.Helper()
	waitFor(t, ctx, func() bool {
		for _, id := range c.ids {
			if c.node(id) == nil {
				return false
			}
			if code, _ := c.ready(id); code != http.StatusOK {
				return false
			}
		}
		sends, completes := ld.acksAfter(since)
		for _, q := range c.queues {
			if c.servedBy(q) == "" || sends[q] == 0 || completes[q] == 0 {
				return false
			}
		}
		return true
	}, what)
}

// TestClusterPostgresRestart (§13.6, §15.6): PostgreSQL restarted under
// load, fast (a clean shutdown) and immediate (a crash: recovery from
// the WAL at start), no node touched. Service resumes by itself within
// ttl + reconnect, and nothing acknowledged is lost.
func TestClusterPostgresRestart(t *testing.T) {
	c := newFaultCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ld := c.startLoad()
	ld.waitProgress(t, ctx, 40, "load before the restarts")
	for _, mode := range []pgtest.RestartMode{pgtest.Fast, pgtest.Immediate} {
		begin := time.Now()
		if err := c.pg.Restart(mode); err != nil {
			t.Fatal(err)
		}
		up := time.Now()
		c.resumed(t, ctx, ld, up, "service to resume after the restart "+string(mode))
		took := time.Since(up)
		t.Logf("restart -m %s: PostgreSQL down and up again in %v; service resumed %v after it accepted connections",
			mode, up.Sub(begin).Round(time.Millisecond), took.Round(time.Millisecond))
		if took > faultResumeBound {
			t.Errorf("restart -m %s: service resumed after %v, want under %v", mode, took, faultResumeBound)
		}
		ld.waitProgress(t, ctx, 20, "load after the restart")
	}
	c.check(ld, "a")
}

// faultResumeBound is how soon service must resume after PostgreSQL is
// back (ttl 1 s + reconnect and re-take, with room for a loaded machine).
const faultResumeBound = 10 * time.Second

// TestClusterRollingRestart (§15.6): each node in turn shuts down
// gracefully (hands its queues off) and starts again with the same node
// id, under load. Nothing acknowledged is lost; how long each queue went
// unserved is logged.
func TestClusterRollingRestart(t *testing.T) {
	c := newFaultCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	ld := c.startLoad()
	ld.waitProgress(t, ctx, 40, "load before the rolling restart")

	// The monitor samples which queues are served by some node.
	unserved := map[string]time.Duration{} // the longest gap, per queue
	mctx, mstop := context.WithCancel(ctx)
	mdone := make(chan struct{})
	go func() {
		defer close(mdone)
		since := map[string]time.Time{}
		for mctx.Err() == nil {
			now := time.Now()
			for _, q := range c.queues {
				if c.servedBy(q) == "" {
					if since[q].IsZero() {
						since[q] = now
					}
					unserved[q] = max(unserved[q], now.Sub(since[q]))
				} else {
					since[q] = time.Time{}
				}
			}
			select {
			case <-mctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	for _, id := range c.ids {
		begin := time.Now()
		c.stopNode(id)
		stopped := time.Since(begin)
		c.startNode(id)
		c.resumed(t, ctx, ld, time.Now(), "service with "+id+" back")
		waitFor(t, ctx, func() bool {
			for _, q := range c.queues {
				u, ok := c.unitOf(q)
				if !ok || c.servedBy(q) != cluster.Winner(u, c.ids) {
					return false
				}
			}
			return true
		}, "placement to settle with "+id+" back")
		t.Logf("%s: shut down in %v, back and placement settled %v after the shutdown began", id,
			stopped.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	}
	mstop()
	<-mdone
	for _, q := range c.queues {
		t.Logf("queue %s: longest time unserved during the rolling restart %v", q, unserved[q].Round(time.Millisecond))
	}
	c.check(ld, "a")
}
