package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/pgstore"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// xferNode is a broker on a cluster-mode pgstore without a Node: the test
// creates its units (the creator owns them) and lands by hand.
type xferNode struct {
	s   *pgstore.Store
	b   *broker.Broker
	log *logRecorder
}

// logRecorder keeps the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }
func (l *logRecorder) saw(part string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, part) {
			return true
		}
	}
	return false
}

func startXferNode(t *testing.T, url, id string, backlog int) *xferNode {
	t.Helper()
	s, err := pgstore.Open(context.Background(), url, pgstore.Options{Cluster: true, NodeID: id, TxnDeadline: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(context.Background(), store.NodeRegistration{ID: id, Addr: id + ":1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	rec := &logRecorder{}
	b, err := broker.Open(broker.Options{Store: s, Units: true, TransferBacklog: backlog, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		b.Close()
		s.Close()
	})
	return &xferNode{s: s, b: b, log: rec}
}

func (n *xferNode) unit(t *testing.T, name string) uint64 {
	t.Helper()
	u, ok := n.b.EntityStoreID(name)
	if !ok {
		t.Fatalf("%s not served", name)
	}
	return u
}

// land lands every transfer waiting for unit (and orphans of it).
func (n *xferNode) land(t *testing.T, unit uint64) int {
	t.Helper()
	ctx := context.Background()
	xs, err := n.s.PendingTransfers(ctx, unit, 1000, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	os, err := n.s.OrphanTransfers(ctx, []uint64{unit}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	xs = append(xs, os...)
	if landed, err := n.b.LandTransfers(ctx, unit, xs); err != nil || landed != len(xs) {
		t.Fatalf("landed %d of %d: %v", landed, len(xs), err)
	}
	return len(xs)
}

func (n *xferNode) sendN(t *testing.T, path string, from, to int) {
	t.Helper()
	var ms []*message.Message
	for i := from; i < to; i++ {
		ms = append(ms, &message.Message{Body: []byte(fmt.Sprintf("m%02d", i))})
	}
	if err := n.b.Send(context.Background(), path, ms); err != nil {
		t.Fatalf("send to %s: %v", path, err)
	}
}

// bodies peeks every message of path.
func (n *xferNode) bodies(t *testing.T, path string) ([]string, []*broker.Delivery) {
	t.Helper()
	ds, err := n.b.Peek(context.Background(), path, 0, 1000)
	if err != nil {
		t.Fatalf("peek %s: %v", path, err)
	}
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Message.Body))
	}
	return out, ds
}

func seqBodies(from, to int) string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("m%02d", i))
	}
	return strings.Join(out, " ")
}

// TestForwardThroughOutbox: queue src on node a forwards to queue dst on
// node b. The forwarded messages leave src in a's commit and wait in the
// outbox until b lands them, in order, with b's own sequence numbers.
// Over the backlog bound (3) src stops forwarding: its messages wait
// there (and a log says so) until b has landed the backlog. A dst
// disabled while transfers wait bounces them back: a lands them in src's
// transfer dead-letter queue at their old sequence numbers
// (MessagingEntityDisabled); once dst is disabled, a refuses to forward
// to it from its spec. A transfer of a kind b does not land stops the
// landing there.
// A transfer to a queue deleted before it landed is taken back by its
// source (MessagingEntityNotFound).
func TestForwardThroughOutbox(t *testing.T) {
	url := newPG(t)
	a := startXferNode(t, url, "a", 3)
	b := startXferNode(t, url, "b", 3)
	p := broker.DefaultQueueProperties()
	p.MaxMessageSizeInKilobytes = 1024
	if _, err := b.b.CreateQueue("dst", p); err != nil {
		t.Fatal(err)
	}
	p.ForwardTo = "dst"
	if _, err := a.b.CreateQueue("src", p); err != nil {
		t.Fatalf("create src forwarding to a queue of another node: %v", err)
	}
	p.ForwardTo = "nowhere"
	if _, err := a.b.CreateQueue("bad", p); err == nil {
		t.Fatal("a forward to a queue no node has was accepted")
	}
	src, dst := a.unit(t, "src"), b.unit(t, "dst")
	backlog := func() int {
		n, err := a.s.TransferBacklog(context.Background(), dst, 100)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	srcCount := func() int64 {
		info, err := a.b.GetQueue("src")
		if err != nil {
			t.Fatal(err)
		}
		return info.Counts.Transfer
	}
	a.sendN(t, "src", 0, 10)
	waitUntil(t, "the first ten in the outbox", 10*time.Second, func() bool { return backlog() == 10 && srcCount() == 0 })
	a.sendN(t, "src", 10, 15)
	waitUntil(t, "the source to hold back", 10*time.Second, func() bool { return a.log.saw("backlog limit") })
	if n := backlog(); n != 10 || srcCount() != 5 {
		t.Fatalf("over the backlog bound: %d in the outbox, %d in the source; want 10 and 5", n, srcCount())
	}
	if n := b.land(t, dst); n != 10 {
		t.Fatalf("landed %d", n)
	}
	waitUntil(t, "the held five in the outbox", 10*time.Second, func() bool { return backlog() == 5 && srcCount() == 0 })
	b.land(t, dst)
	got, ds := b.bodies(t, "dst")
	if strings.Join(got, " ") != seqBodies(0, 15) || ds[0].SequenceNumber != 1 || ds[14].SequenceNumber != 15 {
		t.Fatalf("dst holds %v (first seq %d)", got, ds[0].SequenceNumber)
	}
	// A large message (its body streamed from the store by the forward,
	// in chunks in the outbox) arrives whole.
	large := strings.Repeat("0123456789abcdef", 40<<10) // 640 KiB
	if err := a.b.Send(context.Background(), "src", []*message.Message{{Body: []byte(large)}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the large message in the outbox", 10*time.Second, func() bool { return backlog() == 1 })
	b.land(t, dst)
	ds, err := b.b.Peek(context.Background(), "dst", 16, 1)
	if err != nil || len(ds) != 1 || string(ds[0].Message.Body) != large {
		t.Fatalf("the large message: %d deliveries, %v", len(ds), err)
	}

	// A target disabled while transfers wait bounces them.
	a.sendN(t, "src", 15, 17)
	waitUntil(t, "two in the outbox", 10*time.Second, func() bool { return backlog() == 2 })
	info, _ := b.b.GetQueue("dst")
	info.Properties.Status = broker.StatusDisabled
	if _, err := b.b.UpdateQueue("dst", info.Properties); err != nil {
		t.Fatal(err)
	}
	b.land(t, dst)
	if backlog() != 0 {
		t.Fatal("refused transfers left in the outbox")
	}
	if n := a.land(t, src); n != 2 {
		t.Fatalf("%d bounces landed in the source", n)
	}
	got, ds = a.bodies(t, "src/$Transfer/$DeadLetterQueue")
	if strings.Join(got, " ") != seqBodies(15, 17) || ds[0].SequenceNumber != 17 {
		t.Fatalf("src's transfer dead-letter queue holds %v (first seq %d)", got, ds[0].SequenceNumber)
	}
	for _, d := range ds {
		if r := d.Message.ApplicationProperties[broker.PropDeadLetterReason]; r != broker.ReasonForwardEntityDisabled {
			t.Fatalf("bounced with reason %v", r)
		}
	}
	// A target already disabled: refused by the source, from its spec.
	a.sendN(t, "src", 17, 18)
	waitUntil(t, "the refusal at the source", 10*time.Second, func() bool {
		got, _ := a.bodies(t, "src/$Transfer/$DeadLetterQueue")
		return len(got) == 3
	})
	if backlog() != 0 {
		t.Fatal("a forward to a disabled target went to the outbox")
	}
	info.Properties.Status = broker.StatusActive
	if _, err := b.b.UpdateQueue("dst", info.Properties); err != nil {
		t.Fatal(err)
	}
	// A transfer of a kind this node does not land stops the landing
	// there, in order; the ones after it wait.
	a.sendN(t, "src", 30, 33)
	waitUntil(t, "three in the outbox", 10*time.Second, func() bool { return backlog() == 3 })
	// (A kind from a newer binary: the constraint of this one's schema
	// is dropped to write it.)
	if err := pgtest.Exec(url, `ALTER TABLE bb_transfer DROP CONSTRAINT bb_transfer_kind_check; UPDATE bb_transfer SET kind = 9 WHERE id = (SELECT min(id) FROM bb_transfer) + 1`); err != nil {
		t.Fatal(err)
	}
	xs, err := b.s.PendingTransfers(context.Background(), dst, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.b.LandTransfers(context.Background(), dst, xs); n != 1 || err == nil {
		t.Fatalf("landing past an unknown kind: %d landed, %v", n, err)
	}
	if backlog() != 2 {
		t.Fatalf("%d left in the outbox, want 2", backlog())
	}
	if err := pgtest.Exec(url, `UPDATE bb_transfer SET kind = 1`); err != nil {
		t.Fatal(err)
	}
	b.land(t, dst)
	got, _ = b.bodies(t, "dst")
	if got = slices.DeleteFunc(got, func(s string) bool { return s == large }); strings.Join(got, " ") != seqBodies(0, 15)+" "+seqBodies(30, 33) {
		t.Fatalf("dst holds %v", got)
	}

	// A target deleted while transfers wait: the source takes them back.
	a.sendN(t, "src", 18, 20)
	waitUntil(t, "two more in the outbox", 10*time.Second, func() bool { return backlog() == 2 })
	if err := b.b.DeleteQueue("dst"); err != nil {
		t.Fatal(err)
	}
	if n := a.land(t, src); n != 2 {
		t.Fatalf("%d orphans taken back", n)
	}
	got, ds = a.bodies(t, "src/$Transfer/$DeadLetterQueue")
	if strings.Join(got, " ") != seqBodies(15, 20) {
		t.Fatalf("src's transfer dead-letter queue holds %v", got)
	}
	if r := ds[4].Message.ApplicationProperties[broker.PropDeadLetterReason]; r != broker.ReasonForwardEntityNotFound {
		t.Fatalf("taken back with reason %v", r)
	}
	if n := pgInt(t, url, `SELECT count(*) FROM bb_transfer`); n != 0 {
		t.Fatalf("%d transfers left", n)
	}
	// Reloaded from the store, the source has the same.
	if err := a.b.LoadUnit(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.bodies(t, "src/$Transfer/$DeadLetterQueue"); strings.Join(got, " ") != seqBodies(15, 20) {
		t.Fatalf("after a reload: %v", got)
	}
}

// TestForwardAfterTakeoverKeepsOrder: queue src on node a forwards to
// queue dst on node b; five messages wait in the outbox when a takes dst
// over (b gone without landing them). The next five forwarded, though dst
// is now a's own, do not overtake them: they too go through the outbox,
// and dst holds the ten in src's order.
func TestForwardAfterTakeoverKeepsOrder(t *testing.T) {
	url := newPG(t)
	a := startXferNode(t, url, "a", 100)
	b := startXferNode(t, url, "b", 100)
	if _, err := b.b.CreateQueue("dst", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	p := broker.DefaultQueueProperties()
	p.ForwardTo = "dst"
	if _, err := a.b.CreateQueue("src", p); err != nil {
		t.Fatal(err)
	}
	dst := b.unit(t, "dst")
	backlog := func() int {
		n, err := a.s.TransferBacklog(context.Background(), dst, 100)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a.sendN(t, "src", 0, 5)
	waitUntil(t, "five in the outbox", 10*time.Second, func() bool { return backlog() == 5 })
	ctx := context.Background()
	b.b.UnloadUnit(dst, errors.New("test: b leaves"))
	if err := b.s.Release(ctx, dst, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.s.Acquire(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if err := a.b.LoadUnit(ctx, dst); err != nil {
		t.Fatal(err)
	}
	a.sendN(t, "src", 5, 10)
	waitUntil(t, "ten in the outbox", 10*time.Second, func() bool { return backlog() == 10 })
	if got, _ := a.bodies(t, "dst"); len(got) != 0 {
		t.Fatalf("forwarded past the outbox: dst holds %v", got)
	}
	a.land(t, dst)
	if got, _ := a.bodies(t, "dst"); strings.Join(got, " ") != seqBodies(0, 10) {
		t.Fatalf("dst holds %v, want %s", got, seqBodies(0, 10))
	}
	// Nothing waits any more: the next forward is local, after them.
	a.sendN(t, "src", 10, 12)
	waitUntil(t, "the local forward", 10*time.Second, func() bool {
		got, _ := a.bodies(t, "dst")
		return strings.Join(got, " ") == seqBodies(0, 12)
	})
	if backlog() != 0 {
		t.Fatal("a forward went to the outbox with nothing waiting")
	}
}

// TestTxnSendViaOtherOwner: a transaction on node a sends to its own
// queue via and to queue dst that node b serves. One commit on a holds
// the local send and the transfers (kind send-via); b lands them with
// dst's duplicate detection (a second send of the same MessageId is
// dropped). A send refused when it lands (dst disabled meanwhile) goes to
// via's transfer dead-letter queue with a sequence number of its own. A
// transaction with nothing on this node is refused, unless it names a via
// queue of this node (Txn.Via, Broker.SendVia), which its transfers are
// then fenced on; a via topic is refused.
func TestTxnSendViaOtherOwner(t *testing.T) {
	url := newPG(t)
	ctx := context.Background()
	a := startXferNode(t, url, "a", 100)
	b := startXferNode(t, url, "b", 100)
	p := broker.DefaultQueueProperties()
	p.RequiresDuplicateDetection = true
	if _, err := b.b.CreateQueue("dst", p); err != nil {
		t.Fatal(err)
	}
	if _, err := a.b.CreateQueue("via", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	via, dst := a.unit(t, "via"), b.unit(t, "dst")
	msg := func(body, id string) *message.Message { return &message.Message{Body: []byte(body), MessageID: id} }
	backlog := func() int {
		n, err := a.s.TransferBacklog(ctx, dst, 100)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	err := a.b.CommitTxn(ctx, &broker.Txn{Sends: []broker.TxnSend{
		{To: "via", Msg: msg("v1", "v1")}, {To: "dst", Msg: msg("d1", "x")}, {To: "dst", Msg: msg("d2", "y")}}})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got, _ := a.bodies(t, "via"); strings.Join(got, " ") != "v1" || backlog() != 2 {
		t.Fatalf("after the commit: via holds %v, %d transfers", got, backlog())
	}
	b.land(t, dst)
	if got, _ := b.bodies(t, "dst"); strings.Join(got, " ") != "d1 d2" {
		t.Fatalf("dst holds %v", got)
	}
	// The same MessageId again: dst's duplicate detection drops it.
	if err := a.b.CommitTxn(ctx, &broker.Txn{Sends: []broker.TxnSend{{To: "via", Msg: msg("v2", "v2")}, {To: "dst", Msg: msg("d1 again", "x")}}}); err != nil {
		t.Fatal(err)
	}
	b.land(t, dst)
	if got, _ := b.bodies(t, "dst"); strings.Join(got, " ") != "d1 d2" || backlog() != 0 {
		t.Fatalf("after a duplicate: dst holds %v, %d transfers", got, backlog())
	}
	// Refused when it lands: back to via's transfer dead-letter queue.
	if err := a.b.CommitTxn(ctx, &broker.Txn{Sends: []broker.TxnSend{{To: "via", Msg: msg("v3", "v3")}, {To: "dst", Msg: msg("d3", "z")}}}); err != nil {
		t.Fatal(err)
	}
	info, _ := b.b.GetQueue("dst")
	info.Properties.Status = broker.StatusDisabled
	if _, err := b.b.UpdateQueue("dst", info.Properties); err != nil {
		t.Fatal(err)
	}
	b.land(t, dst)
	a.land(t, via)
	got, ds := a.bodies(t, "via/$Transfer/$DeadLetterQueue")
	if strings.Join(got, " ") != "d3" || ds[0].Message.ApplicationProperties[broker.PropDeadLetterReason] != broker.ReasonForwardEntityDisabled {
		t.Fatalf("via's transfer dead-letter queue holds %v", got)
	}
	if vs, _ := a.bodies(t, "via"); ds[0].SequenceNumber <= 3 || len(vs) != 3 {
		t.Fatalf("the refused send has sequence number %d in via (which holds %v)", ds[0].SequenceNumber, vs)
	}
	// Already disabled: refused at the commit, nothing applied.
	if err := a.b.CommitTxn(ctx, &broker.Txn{Sends: []broker.TxnSend{{To: "via", Msg: msg("v4", "v4")}, {To: "dst", Msg: msg("d4", "w")}}}); broker.KindOf(err) != broker.KindEntityDisabled {
		t.Fatalf("commit to a disabled queue of another node: %v", err)
	}
	if vs, _ := a.bodies(t, "via"); len(vs) != 3 {
		t.Fatalf("a refused transaction sent to via: %v", vs)
	}
	// Nothing of the transaction on this node.
	if err := a.b.CommitTxn(ctx, &broker.Txn{Sends: []broker.TxnSend{{To: "dst", Msg: msg("d5", "u")}}}); broker.KindOf(err) != broker.KindNotAllowed {
		t.Fatalf("a transaction with only sends to another node: %v", err)
	}
	// Sends through via only (a send-via link, SendVia; a transaction
	// naming Via): fenced on via, refused at landing back to its transfer
	// dead-letter queue too.
	if err := a.b.SendVia(ctx, "via", "dst", []*message.Message{msg("d5", "u")}); broker.KindOf(err) != broker.KindEntityDisabled {
		t.Fatalf("send via to a disabled queue of another node: %v", err)
	}
	info.Properties.Status = broker.StatusActive
	if _, err := b.b.UpdateQueue("dst", info.Properties); err != nil {
		t.Fatal(err)
	}
	if err := a.b.SendVia(ctx, "via", "dst", []*message.Message{msg("d6", "v"), msg("d7", "w")}); err != nil {
		t.Fatalf("send via: %v", err)
	}
	if err := a.b.CommitTxn(ctx, &broker.Txn{Via: "via", Sends: []broker.TxnSend{{To: "dst", Msg: msg("d8", "s")}}}); err != nil {
		t.Fatalf("commit through via: %v", err)
	}
	if backlog() != 3 {
		t.Fatalf("%d transfers after sends through via; want 3", backlog())
	}
	b.land(t, dst)
	if got, _ := b.bodies(t, "dst"); strings.Join(got, " ") != "d1 d2 d6 d7 d8" {
		t.Fatalf("dst holds %v", got)
	}
	if vs, _ := a.bodies(t, "via"); len(vs) != 3 {
		t.Fatalf("sends through via were stored in it: %v", vs)
	}
	// Through a topic (no transfer dead-letter queue): refused.
	if _, err := a.b.CreateTopic("tv", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	if err := a.b.SendVia(ctx, "tv", "dst", []*message.Message{msg("d9", "t")}); broker.KindOf(err) != broker.KindNotAllowed {
		t.Fatalf("send via a topic to another node: %v", err)
	}
}
