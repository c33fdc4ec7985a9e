package relay

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// txnCluster is node b, which serves queues "in", "out" and "sin" (with
// sessions), and node a, which serves "local" and relays the others to b; owners can be
// changed while it runs.
type txnCluster struct {
	a, b *servicebustest.Server
	g    *Gateway

	mu     sync.Mutex
	owners map[string]Owner
}

func (tc *txnCluster) setOwner(unit string, o Owner) {
	tc.mu.Lock()
	tc.owners[unit] = o
	tc.mu.Unlock()
}

func startTxnCluster(t *testing.T) *txnCluster {
	t.Helper()
	return startTxnClusterWith(t, nil)
}

// startTxnClusterWith is startTxnCluster with the gateway's configuration
// adjusted by adjust.
func startTxnClusterWith(t *testing.T, adjust func(*GatewayConfig)) *txnCluster {
	t.Helper()
	tc := &txnCluster{owners: map[string]Owner{}}
	sq := broker.DefaultQueueProperties()
	sq.RequiresSession = true
	tc.b = servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Queues: []string{"in", "out", "sin"},
		QueueProps: map[string]broker.QueueProperties{"sin": sq}})
	addr, stop := serveListener(t, ListenerConfig{Secret: testSecret, Self: "b", Sessions: sessionsOf(map[string]int64{"a": 7}), Owner: tc.b.Handler})
	tc.owners["in"] = Owner{Node: "b", Addr: addr}
	tc.owners["out"] = tc.owners["in"]
	tc.owners["sin"] = tc.owners["in"]
	cfg := GatewayConfig{Secret: testSecret, Node: "a", Session: func() int64 { return 7 }, Timeout: 5 * time.Second,
		OwnerOf: func(unit string) (Owner, bool) {
			tc.mu.Lock()
			defer tc.mu.Unlock()
			o, ok := tc.owners[unit]
			return o, ok
		}}
	if adjust != nil {
		adjust(&cfg)
	}
	g, err := NewGateway(cfg)
	tc.g = g
	if err != nil {
		t.Fatal(err)
	}
	tc.a = servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Queues: []string{"local"}, Router: g})
	t.Cleanup(func() {
		tc.a.Close()
		g.Close()
		stop()
	})
	return tc
}

func seedTxn(t *testing.T, s *servicebustest.Server, path string, bodies ...string) {
	t.Helper()
	var msgs []*message.Message
	for _, b := range bodies {
		msgs = append(msgs, &message.Message{Body: frames.AppendDataSection(nil, []byte(b))})
	}
	if err := s.Broker.Send(context.Background(), path, msgs); err != nil {
		t.Fatal(err)
	}
}

// holds checks the bodies of path's messages (peek: locked ones too).
func holds(t *testing.T, s *servicebustest.Server, path string, bodies ...string) {
	t.Helper()
	ds, err := s.Broker.Peek(context.Background(), path, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		data, err := frames.DataSections(d.Message.Body)
		if err != nil || len(data) != 1 {
			t.Fatalf("body %x: %v", d.Message.Body, err)
		}
		got = append(got, string(data[0]))
	}
	if !slices.Equal(got, bodies) {
		t.Fatalf("%s holds %q; want %q", path, got, bodies)
	}
}

func txnAccepted(t *testing.T, st frames.DeliveryState) {
	t.Helper()
	ts, ok := st.(*frames.TransactionalState)
	if ok {
		st = ts.Outcome
	}
	if _, acc := st.(*frames.Accepted); !acc {
		t.Fatalf("answered %v; want accepted", st)
	}
}

func txnRejected(t *testing.T, st frames.DeliveryState, cond frames.Symbol, text string) {
	t.Helper()
	r, ok := st.(*frames.Rejected)
	if !ok || r.Error == nil || r.Error.Condition != cond || !strings.Contains(r.Error.Description, text) {
		t.Fatalf("answered %v; want rejected %s containing %q", st, cond, text)
	}
}

var deadLetter = &frames.Rejected{Error: &frames.Error{Condition: "com.microsoft:dead-letter",
	Info: map[frames.Symbol]any{"DeadLetterReason": "bad"}}}

// A transaction through a node that does not serve its entity: receive
// and complete, dead-letter, send and send-via (destination on the same
// owner) are recorded on the owner and applied by the commit, not before.
func TestRelayTxnCommit(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnCluster(t)
	seedTxn(t, tc.b, "in", "a", "b")
	c := txnclient.Dial(t, tc.a.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 3)
	c.AttachSender(2, "in", "")
	c.AttachSender(3, "in", "out") // send-via
	ms := c.Receive(1, 2)
	id := c.Declare()

	txnAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	if st, ok := c.Dispose(ms[1], deadLetter, id).(*frames.TransactionalState); !ok {
		t.Fatalf("dead-letter answered %v", st)
	} else if _, rej := st.Outcome.(*frames.Rejected); !rej {
		t.Fatalf("dead-letter answered %v", st)
	}
	txnAccepted(t, c.SendTxn(2, "c", id))
	txnAccepted(t, c.SendTxn(3, "d", id))
	holds(t, tc.b, "in", "a", "b") // nothing applied yet
	holds(t, tc.b, "out")

	txnAccepted(t, c.Discharge(id, false))
	holds(t, tc.b, "in", "c")
	holds(t, tc.b, "in/$DeadLetterQueue", "b")
	holds(t, tc.b, "out", "d")
	txnRejected(t, c.Discharge(id, false), "amqp:transaction:unknown-id", "not open")

	// A second transaction on the same links: a new one on the owner.
	ms = c.Receive(1, 1)
	id = c.Declare()
	txnAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	txnAccepted(t, c.SendTxn(3, "e", id))
	txnAccepted(t, c.Discharge(id, false))
	holds(t, tc.b, "in")
	holds(t, tc.b, "out", "d", "e")
}

// A rolled back relayed transaction changes nothing on the owner, and a
// refused operation makes the commit a rollback.
func TestRelayTxnRollback(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnCluster(t)
	seedTxn(t, tc.b, "in", "a", "b")
	c := txnclient.Dial(t, tc.a.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 2)
	c.AttachSender(2, "in", "out")
	c.AttachSender(4, "out", "")
	ms := c.Receive(1, 2)
	id := c.Declare()
	txnAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	txnAccepted(t, c.SendTxn(2, "x", id))
	txnAccepted(t, c.Discharge(id, true))
	holds(t, tc.b, "in", "a", "b")
	holds(t, tc.b, "out")

	// Complete the other in a transaction that also sends to another
	// entity directly, which is refused.
	id = c.Declare()
	txnAccepted(t, c.Dispose(ms[1], &frames.Accepted{}, id))
	txnRejected(t, c.SendTxn(4, "y", id), "amqp:not-allowed", "several top-level entities")
	txnRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "several top-level entities")
	holds(t, tc.b, "in", "a", "b")
	holds(t, tc.b, "out")
}

// A send-via link whose destination another node serves is refused at
// the attach, with a clear error, by a node whose store cannot hold
// transfers (no outbox: these test nodes; the cluster's pass them on,
// internal/server's TestClusterSendVia).
func TestRelaySendViaOtherOwner(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnCluster(t)
	c := txnclient.Dial(t, tc.a.Addr)
	r := c.AttachSender(1, "local", "in")
	if r.Target != nil {
		t.Fatal("send-via local → in attached")
	}
	f := c.Await("detach", func(f frames.Frame) bool { _, ok := f.Body.(*frames.Detach); return ok })
	d := f.Body.(*frames.Detach)
	if d.Error == nil || d.Error.Condition != "amqp:not-allowed" || !strings.Contains(d.Error.Description, "another node") {
		t.Fatalf("send-via local → in refused with %v", d.Error)
	}
}

// The entity's owner changes while a transaction is open: the commit is
// not sent to the new owner nor applied by the old one; it fails with
// amqp:transaction:rollback.
func TestRelayTxnOwnerChange(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnCluster(t)
	seedTxn(t, tc.b, "in", "a")
	c := txnclient.Dial(t, tc.a.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 1)
	c.AttachSender(2, "in", "out")
	ms := c.Receive(1, 1)
	id := c.Declare()
	txnAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	txnAccepted(t, c.SendTxn(2, "x", id))

	tc.setOwner("in", Owner{Node: "c", Addr: "127.0.0.1:1"}) // moved to a node not reachable yet
	txnRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "moved to another node")
	holds(t, tc.b, "in", "a")
	holds(t, tc.b, "out")
}

// A $management update-disposition sent in a transaction through the
// gateway is recorded in the owner's transaction and applied by the
// commit (or not at all, rolled back).
func TestRelayTxnManagement(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnCluster(t)
	seedTxn(t, tc.b, "in", "a", "b")
	c := txnclient.Dial(t, tc.a.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 2)
	c.AttachSender(2, "in", "out")
	c.AttachSender(4, "in/$management", "")
	c.AttachReceiver(5, "in/$management", 10)
	ms := c.Receive(1, 2)
	settle := func(status string, m txnclient.Received, id []byte) (frames.DeliveryState, any) {
		t.Helper()
		tag := m.Tag
		var u [16]byte
		u[0], u[1], u[2], u[3] = tag[3], tag[2], tag[1], tag[0]
		u[4], u[5], u[6], u[7] = tag[5], tag[4], tag[7], tag[6]
		copy(u[8:], tag[8:])
		return c.MgmtTxn(4, 5, "com.microsoft:update-disposition", encoding.Map{
			{Key: "disposition-status", Value: status},
			{Key: "lock-tokens", Value: []any{encoding.UUID(u)}},
		}, id)
	}
	id := c.Declare()
	st, code := settle("completed", ms[0], id)
	txnAccepted(t, st)
	if code != int32(200) {
		t.Fatalf("update-disposition in a transaction answered %v", code)
	}
	txnAccepted(t, c.SendTxn(2, "x", id))
	holds(t, tc.b, "in", "a", "b")
	txnAccepted(t, c.Discharge(id, false))
	holds(t, tc.b, "in", "b")
	holds(t, tc.b, "out", "x")

	id = c.Declare()
	st, _ = settle("completed", ms[1], id)
	txnAccepted(t, st)
	txnAccepted(t, c.Discharge(id, true))
	holds(t, tc.b, "in", "b")

	// A request Busbar does not run in a transaction: refused, and the
	// transaction can only roll back.
	id = c.Declare()
	txnAccepted(t, c.SendTxn(2, "y", id))
	st, _ = c.MgmtTxn(4, 5, "com.microsoft:batch-delete-messages", encoding.Map{{Key: "message-count", Value: int32(10)}}, id)
	if _, ok := st.(*frames.Rejected); !ok {
		t.Fatalf("batch-delete in a transaction answered %v", st)
	}
	txnRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "")
	holds(t, tc.b, "in", "b")
	holds(t, tc.b, "out", "x")
}
