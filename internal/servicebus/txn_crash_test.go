package servicebus_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/vfs"
)

// txnImage is what a crash would leave: the file system's image, and how
// far the transactions had come (those before acked were accepted; open,
// when ≥ 0, was declared with its operations recorded but not discharged).
type txnImage struct {
	fs    *vfs.Mem
	what  string
	acked int
	open  int
}

// txnCrashes records the crash images of a run of transactions on a
// file store over the crashable in-memory file system: once armed, one
// before every file-system operation (with a random torn tail and subset
// of name changes), and those the test takes itself.
type txnCrashes struct {
	mem    *vfs.Mem
	opts   filestore.Options // the store's; FS asks inject first
	rng    *rand.Rand
	mu     sync.Mutex
	images []txnImage
	armed  atomic.Bool
	acked  atomic.Int64
}

// newTxnCrashes opens the file store whose crashes c records.
func newTxnCrashes(t *testing.T, seed int64) (*txnCrashes, *filestore.Store) {
	t.Helper()
	c := &txnCrashes{mem: vfs.NewMem(), rng: rand.New(rand.NewSource(seed))}
	c.opts = filestore.Options{Dir: "/db", FS: vfs.WithErrors(c.mem, c.inject), SegmentSize: 16 << 10, BackgroundInterval: -1, NoPreallocate: true}
	st, err := filestore.Open(c.opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

func (c *txnCrashes) inject(op vfs.Op) error {
	if !c.armed.Load() {
		return nil
	}
	a := int(c.acked.Load())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.images = append(c.images, txnImage{
		fs:   c.mem.CrashClone(vfs.CrashOptions{Rand: rand.New(rand.NewSource(c.rng.Int63())), AnySubset: c.rng.Intn(2) == 0}),
		what: fmt.Sprintf("before %v %s", op.Kind, op.Path), acked: a, open: -1})
	return nil
}

// declared takes the image of transaction i declared, its operations
// done, not discharged.
func (c *txnCrashes) declared(i int) {
	c.mu.Lock()
	c.images = append(c.images, txnImage{fs: c.mem.CrashClone(vfs.CrashOptions{}), what: "between declare and discharge", acked: i, open: i})
	c.mu.Unlock()
}

// finish disarms c and returns its images, the last one taken after the
// n accepted discharges.
func (c *txnCrashes) finish(n int) []txnImage {
	c.armed.Store(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(c.images, txnImage{fs: c.mem.CrashClone(vfs.CrashOptions{}), what: "after the last accepted discharge", acked: n, open: -1})
}

// TestTxnCrashImages runs transactions over the wire (receive from "in",
// complete and send-via to "out") on the file store on the crashable
// in-memory file system. Crash images are taken before every file-system
// operation (so during each discharge's commit), between declare and
// discharge, and after the last accepted discharge. Reopened, every image
// shows each transaction wholly applied or not at all, every accepted one
// applied, and the one open at the crash not applied.
func TestTxnCrashImages(t *testing.T) {
	const n = 12
	crashes, st := newTxnCrashes(t, 1)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk, Queues: []string{"in", "out"}, Store: st})
	var bodies []string
	for i := range n {
		bodies = append(bodies, fmt.Sprintf("in-%02d", i))
	}
	seed(t, s, "in", bodies...)

	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", n)
	c.AttachSender(2, "in", "out")
	ms := c.Receive(1, n)
	crashes.armed.Store(true)
	for i, m := range ms {
		if m.Body != bodies[i] {
			t.Fatalf("received %q, want %q", m.Body, bodies[i])
		}
		id := c.Declare()
		wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
		wantAccepted(t, c.SendTxn(2, fmt.Sprintf("out-%02d", i), id))
		crashes.declared(i)
		wantAccepted(t, c.Discharge(id, false))
		crashes.acked.Store(int64(i + 1))
	}
	images := crashes.finish(n)
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	during := 0
	for _, img := range images {
		opts := crashes.opts
		opts.FS = img.fs
		st, err := filestore.Open(opts)
		if err != nil {
			t.Fatalf("%s: reopen: %v", img.what, err)
		}
		b, err := broker.Open(broker.Options{Store: st, Clock: clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))})
		if err != nil {
			t.Fatalf("%s: broker: %v", img.what, err)
		}
		in, out := peekBodies(t, b, "in"), peekBodies(t, b, "out")
		applied := 0
		for i := range n {
			gone := !slices.Contains(in, fmt.Sprintf("in-%02d", i))
			sent := slices.Contains(out, fmt.Sprintf("out-%02d", i))
			switch {
			case gone != sent:
				t.Fatalf("%s: transaction %d half applied (in: %v, out: %v)", img.what, i, in, out)
			case gone && i == img.open:
				t.Fatalf("%s: transaction %d applied before its discharge", img.what, i)
			case !gone && i < img.acked:
				t.Fatalf("%s: transaction %d was accepted but is not applied", img.what, i)
			case gone:
				applied++
			}
		}
		if img.open < 0 && applied > 0 && applied < n {
			during++
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d crash images, %d of them during the discharges", len(images), during)
	if during == 0 {
		t.Fatal("no image was taken during a discharge")
	}
}

func peekBodies(t *testing.T, b *broker.Broker, path string) []string {
	t.Helper()
	ds, err := b.Peek(context.Background(), path, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		data, err := frames.DataSections(d.Message.Body)
		if err != nil || len(data) != 1 {
			t.Fatalf("body %x: %v", d.Message.Body, err)
		}
		out = append(out, string(data[0]))
	}
	return out
}

// TestTxnCrashImagesSessionTopic is TestTxnCrashImages for the operations
// a transaction applies on a topic and a session: each transaction
// completes a message of session "s" of a session-enabled subscription,
// sends to its topic, sets the session's state (set-session-state) and
// cancels one of the topic's scheduled messages
// (cancel-scheduled-message), all over the wire. Every image shows each
// transaction wholly applied or not at all, every accepted one applied.
func TestTxnCrashImagesSessionTopic(t *testing.T) {
	const n = 8
	crashes, st := newTxnCrashes(t, 2)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(t0)
	sp := broker.DefaultSubscriptionProperties()
	sp.RequiresSession = true
	const sub = "t/Subscriptions/s"
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk, Store: st,
		Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s", Properties: &sp}}})
	ctx := context.Background()
	var in, sched []*message.Message
	for i := range n {
		in = append(in, &message.Message{Body: frames.AppendDataSection(nil, []byte(fmt.Sprintf("in-%02d", i))), SessionID: "s"})
		sched = append(sched, &message.Message{Body: frames.AppendDataSection(nil, []byte(fmt.Sprintf("sched-%02d", i))), SessionID: "x"})
	}
	if err := s.Broker.Send(ctx, "t", in); err != nil {
		t.Fatal(err)
	}
	seqs, err := s.Broker.Schedule(ctx, "t", sched, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachSessionReceiver(1, sub, "s", n)
	c.AttachSender(2, "t", "")
	c.AttachSender(3, sub+"/$management", "")
	c.AttachReceiver(4, sub+"/$management", 2*n)
	c.AttachSender(5, "t/$management", "")
	c.AttachReceiver(6, "t/$management", 2*n)
	ms := c.Receive(1, n)
	crashes.armed.Store(true)
	for i, m := range ms {
		id := c.Declare()
		wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
		out, err := (&frames.Message{Properties: &frames.Properties{MessageID: fmt.Sprintf("out-%02d", i), GroupID: "o"},
			RawBody: frames.AppendDataSection(nil, []byte(fmt.Sprintf("out-%02d", i)))}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		wantAccepted(t, c.Transfer(txnclient.ChEntities, 2, out, &frames.TransactionalState{TxnID: id}))
		st, code := c.MgmtTxn(3, 4, "com.microsoft:set-session-state", encoding.Map{
			{Key: "session-id", Value: "s"}, {Key: "session-state", Value: []byte(fmt.Sprintf("state-%02d", i))}}, id)
		if wantAccepted(t, st); code != int32(200) {
			t.Fatalf("set-session-state answered %v", code)
		}
		st, code = c.MgmtTxn(5, 6, "com.microsoft:cancel-scheduled-message", encoding.Map{{Key: "sequence-numbers", Value: seqs[i : i+1]}}, id)
		if wantAccepted(t, st); code != int32(200) {
			t.Fatalf("cancel-scheduled-message answered %v", code)
		}
		crashes.declared(i)
		wantAccepted(t, c.Discharge(id, false))
		crashes.acked.Store(int64(i + 1))
	}
	images := crashes.finish(n)
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	during := 0
	for _, img := range images {
		done := checkSessionTopicImage(t, crashes.opts, img, n, sub)
		if img.open < 0 && done > 0 && done < n {
			during++
		}
	}
	t.Logf("%d crash images, %d of them during the discharges", len(images), during)
	if during == 0 {
		t.Fatal("no image was taken during a discharge")
	}
}

// checkSessionTopicImage reopens a crash image of
// TestTxnCrashImagesSessionTopic, checks that its transactions are
// applied all or nothing (a prefix of them: the session's state and the
// topic's scheduled messages agree with the settlements and sends) and
// returns how many are.
func checkSessionTopicImage(t *testing.T, opts filestore.Options, img txnImage, n int, sub string) int {
	t.Helper()
	opts.FS = img.fs
	st, err := filestore.Open(opts)
	if err != nil {
		t.Fatalf("%s: reopen: %v", img.what, err)
	}
	b, err := broker.Open(broker.Options{Store: st, Clock: clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))})
	if err != nil {
		t.Fatalf("%s: broker: %v", img.what, err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	bodiesOf := func(session string) []string {
		ds, err := b.PeekSession(context.Background(), sub, session, 0, 100)
		if err != nil {
			t.Fatalf("%s: peek: %v", img.what, err)
		}
		var out []string
		for _, d := range ds {
			data, err := frames.DataSections(d.Message.Body)
			if err != nil || len(data) != 1 {
				t.Fatalf("body %x: %v", d.Message.Body, err)
			}
			out = append(out, string(data[0]))
		}
		return out
	}
	in, out := bodiesOf("s"), bodiesOf("o")
	done := 0
	for i := range n {
		gone := !slices.Contains(in, fmt.Sprintf("in-%02d", i))
		sent := slices.Contains(out, fmt.Sprintf("out-%02d", i))
		switch {
		case gone != sent:
			t.Fatalf("%s: transaction %d half applied (in: %v, out: %v)", img.what, i, in, out)
		case gone && i != done:
			t.Fatalf("%s: transaction %d applied after one that is not", img.what, i)
		case gone && i == img.open:
			t.Fatalf("%s: transaction %d applied before its discharge", img.what, i)
		case !gone && i < img.acked:
			t.Fatalf("%s: transaction %d was accepted but is not applied", img.what, i)
		case gone:
			done++
		}
	}
	ti, err := b.GetTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	if ti.Counts.Scheduled != int64(n-done) {
		t.Fatalf("%s: %d transactions applied, %d messages still scheduled; want %d", img.what, done, ti.Counts.Scheduled, n-done)
	}
	r, err := b.AcceptSession(sub, "s", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	state, err := r.SessionState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	if done > 0 {
		want = fmt.Sprintf("state-%02d", done-1)
	}
	if string(state) != want {
		t.Fatalf("%s: %d transactions applied, session state %q; want %q", img.what, done, state, want)
	}
	return done
}
