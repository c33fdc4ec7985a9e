package broker

import (
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/vfs"
)

func TestTxnCommitReceiveCompleteSend(t *testing.T) {
	e := newEnv(t)
	e.queue("in")
	e.queue("out")
	e.send("in", msg("a"), msg("b"))
	a, b := e.recv1("in"), e.recv1("in")
	err := e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{
			{Kind: TxnComplete, Path: "in", Token: a.LockToken},
			{Kind: TxnDeadLetter, Path: "in", Token: b.LockToken, Reason: "r", Desc: "d"},
		},
		Sends: txnTo("out", []*message.Message{msg("x"), msg("y")}...),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := bodies(e.recv("out", PeekLock, 10)); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("out has %v", got)
	}
	e.expectEmpty("in")
	if d := e.recv1("in/$DeadLetterQueue"); body(d) != "b" || prop(d, PropDeadLetterReason) != "r" {
		t.Fatalf("dead-lettered %q %v", body(d), d.Message.ApplicationProperties)
	}
	// Durable: all of it is still there after a restart.
	e.restart()
	if c := e.counts("out"); c.Active != 2 {
		t.Fatalf("out after restart: %+v", c)
	}
	if c := e.counts("in"); c.Active != 0 || c.DeadLetter != 1 {
		t.Fatalf("in after restart: %+v", c)
	}
}

func TestTxnAllOrNothingOnLostLock(t *testing.T) {
	e := newEnv(t)
	e.queue("in", func(p *QueueProperties) { p.LockDuration = 30 * time.Second })
	e.send("in", msg("a"))
	a := e.recv1("in")
	e.advance(20 * time.Second)
	e.send("in", msg("b"))
	b := e.recv1("in")
	e.advance(15 * time.Second) // a's lock expired, b's holds
	err := e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{
			{Kind: TxnComplete, Path: "in", Token: b.LockToken},
			{Kind: TxnComplete, Path: "in", Token: a.LockToken},
		},
		Sends: txnTo("in", []*message.Message{msg("new")}...),
	})
	wantKind(t, err, ErrLockLost)
	// Nothing applied: b still locked (its token still settles), no "new".
	c := e.counts("in")
	if c.Active != 2 {
		t.Fatalf("counts %+v; want a and b only", c)
	}
	e.complete("in", b.LockToken)
}

func TestTxnFailedCommitKeepsLocks(t *testing.T) {
	e := newEnv(t)
	e.queue("in")
	e.queue("small", func(p *QueueProperties) { p.MaxSizeInMegabytes = 1 })
	e.send("in", msg("a"))
	a := e.recv1("in")
	big := &message.Message{Body: make([]byte, 200<<10)}
	for range 5 {
		e.send("small", big)
	}
	err := e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "in", Token: a.LockToken}},
		Sends:       txnTo("small", []*message.Message{big}...),
	})
	wantKind(t, err, ErrQuotaExceeded)
	// The complete was not applied and a's lock is still held.
	e.complete("in", a.LockToken)
}

func TestTxnRules(t *testing.T) {
	e := newEnv(t)
	e.queue("q1")
	e.queue("q2")
	e.send("q1", msg("a"))
	e.send("q2", msg("b"))
	a, b := e.recv1("q1"), e.recv1("q2")
	err := e.b.CommitTxn(ctx, &Txn{Settlements: []TxnSettlement{
		{Kind: TxnComplete, Path: "q1", Token: a.LockToken},
		{Kind: TxnComplete, Path: "q2", Token: b.LockToken},
	}})
	wantKind(t, err, ErrNotAllowed)
	err = e.b.CommitTxn(ctx, &Txn{Settlements: []TxnSettlement{
		{Kind: TxnComplete, Path: "q1", Token: a.LockToken},
		{Kind: TxnAbandon, Path: "q1", Token: a.LockToken},
	}})
	wantKind(t, err, ErrLockLost)
	many := make([]*message.Message, MaxTxnOperations+1)
	for i := range many {
		many[i] = msg("m")
	}
	err = e.b.CommitTxn(ctx, &Txn{Sends: txnTo("q1", many...)})
	wantKind(t, err, ErrQuotaExceeded)
	// Abandon and defer in one transaction, on the same entity.
	e.send("q1", msg("c"))
	c := e.recv1("q1")
	if err := e.b.CommitTxn(ctx, &Txn{Settlements: []TxnSettlement{
		{Kind: TxnAbandon, Path: "q1", Token: a.LockToken, Props: map[string]any{"k": "v"}},
		{Kind: TxnDefer, Path: "q1", Token: c.LockToken},
	}}); err != nil {
		t.Fatal(err)
	}
	d := e.recv1("q1")
	if body(d) != "a" || d.DeliveryCount != 2 || prop(d, "k") != "v" {
		t.Fatalf("abandoned message: %q dc %d props %v", body(d), d.DeliveryCount, d.Message.ApplicationProperties)
	}
	if cs := e.counts("q1"); cs.Deferred != 1 {
		t.Fatalf("counts %+v; want c deferred", cs)
	}
}

// TestTxnCrashAtManyPoints commits transactions on the filestore on the
// crashable in-memory file system, taking a crash image before file-system
// operations. Each transaction completes one message of session "s" of
// "in", sets that session's state, sends to a queue and a topic,
// schedules a message and cancels one scheduled earlier (on "in" or on
// the topic, in turn); in every image, each transaction is either wholly
// applied or not at all, and every acknowledged one is wholly applied.
func TestTxnCrashAtManyPoints(t *testing.T) {
	const n = 40
	mem := vfs.NewMem()
	var (
		mu     sync.Mutex
		images []fwdCrashImage
		armed  atomic.Bool
		acked  atomic.Int64
	)
	rng := rand.New(rand.NewSource(1))
	inject := func(op vfs.Op) error {
		if !armed.Load() {
			return nil
		}
		a := int(acked.Load())
		mu.Lock()
		defer mu.Unlock()
		img := fwdCrashImage{op: op, acked: a}
		img.fs = mem.CrashClone(vfs.CrashOptions{Rand: rand.New(rand.NewSource(rng.Int63())), AnySubset: rng.Intn(2) == 0})
		images = append(images, img)
		return nil
	}
	opts := filestore.Options{Dir: "/db", FS: vfs.WithErrors(mem, inject), SegmentSize: 16 << 10, BackgroundInterval: -1, NoPreallocate: true}
	st, err := filestore.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, clk: clock.NewFake(t0), st: st}
	e.open()
	e.queue("in", sessionQueue)
	e.queue("out")
	e.topic("tout")
	subPath := e.sub("tout", "s1")
	for i := range n {
		e.send("in", &message.Message{Body: []byte(fmt.Sprintf("in-%03d", i)), SessionID: "s"})
	}
	// Each transaction also cancels one of these: on "in" (even ones) or
	// on the topic (odd ones).
	var toCancel, cancelOn []string
	var cancelSeqs []int64
	for i := range n {
		on := "in"
		if i%2 == 1 {
			on = "tout"
		}
		m := &message.Message{Body: []byte(fmt.Sprintf("cancel-%03d", i)), SessionID: "x"}
		seqs, err := e.b.Schedule(ctx, on, []*message.Message{m}, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		toCancel, cancelOn, cancelSeqs = append(toCancel, string(m.Body)), append(cancelOn, on), append(cancelSeqs, seqs[0])
	}
	sr := e.accept("in", "s")
	armed.Store(true)
	for i := range n {
		ds := take(t, sr, 1)
		if len(ds) != 1 || body(ds[0]) != fmt.Sprintf("in-%03d", i) {
			t.Fatalf("received %v", bodies(ds))
		}
		d := ds[0]
		// A scheduled message with its sequence number reserved
		// beforehand, as a schedule-message request inside a
		// transaction has it.
		r, err := e.b.ReserveSeqs("out", 1)
		if err != nil {
			t.Fatal(err)
		}
		sched := TxnSend{To: "out", Msg: scheduledMsg(fmt.Sprintf("out-%03d-c", i), t0.Add(time.Hour)), Seq: r[0]}
		err = e.b.CommitTxn(ctx, &Txn{
			Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "in", Token: d.LockToken}},
			// Two destinations, a queue and a topic: one batch.
			Sends:    append(append(txnTo("tout", msg(fmt.Sprintf("out-%03d-b", i))), txnTo("out", msg(fmt.Sprintf("out-%03d-a", i)))...), sched),
			CancelOn: cancelOn[i], Cancels: cancelSeqs[i : i+1],
			States: []TxnSessionState{{Path: "in", Holder: sr, State: []byte(fmt.Sprintf("state-%03d", i))}},
		})
		if err != nil {
			t.Fatal(err)
		}
		acked.Store(int64(i + 1))
		if i%10 == 9 {
			if err := st.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	armed.Store(false)
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	images = append(images, fwdCrashImage{fs: mem.CrashClone(vfs.CrashOptions{}), op: vfs.Op{Path: "after Close"}, acked: n})
	if len(images) < 50 {
		t.Fatalf("only %d crash points", len(images))
	}
	partial := 0
	for _, img := range images {
		opts := opts
		opts.FS = img.fs
		st, err := filestore.Open(opts)
		if err != nil {
			t.Fatalf("crash before %v %s: reopen: %v", img.op.Kind, img.op.Path, err)
		}
		e := &env{t: t, clk: clock.NewFake(t0), st: st}
		e.open()
		places := placesOf(t, e.b)
		topicSched := topicScheduled(t, e.b, "tout")
		done := 0
		for i := range n {
			in := places[fmt.Sprintf("in-%03d", i)]
			oa := places[fmt.Sprintf("out-%03d-a", i)]
			ob := places[fmt.Sprintf("out-%03d-b", i)]
			oc := places[fmt.Sprintf("out-%03d-c", i)]
			cancelled := len(places[toCancel[i]]) == 0 && !slices.Contains(topicSched, toCancel[i])
			committed := len(in) == 0
			switch {
			case committed && cancelled && slices.Equal(oa, []string{"out"}) && slices.Equal(ob, []string{subPath}) && slices.Equal(oc, []string{"out"}):
				done++
			case !committed && !cancelled && slices.Equal(in, []string{"in"}) && len(oa) == 0 && len(ob) == 0 && len(oc) == 0:
				if i < img.acked {
					t.Fatalf("crash before %v %s: transaction %d was acknowledged but is not applied", img.op.Kind, img.op.Path, i)
				}
			default:
				t.Fatalf("crash before %v %s: transaction %d half applied: in %v, out %v %v %v, cancelled %v", img.op.Kind, img.op.Path, i, in, oa, ob, oc, cancelled)
			}
		}
		if done > 0 && done < n {
			partial++
		}
		// The session state is the last committed transaction's.
		if got, want := sessionStateOf(t, e.b, "in", "s"), stateAfter(done); got != want {
			t.Fatalf("crash before %v %s: %d transactions applied, session state %q; want %q", img.op.Kind, img.op.Path, done, got, want)
		}
		if err := e.b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d crash images, %d between transactions", len(images), partial)
	if partial == 0 {
		t.Fatal("no image caught the transactions part-way")
	}
}

// txnTo is a transaction's sends of msgs to one destination.
func txnTo(dest string, msgs ...*message.Message) []TxnSend {
	out := make([]TxnSend, len(msgs))
	for i, m := range msgs {
		out[i] = TxnSend{To: dest, Msg: m}
	}
	return out
}

// A transaction sends to several queues and topics at once (send-via to
// several final destinations): all land on commit, in order per
// destination; one destination's refusal fails the whole, leaving every
// other destination and the settlement as before.
func TestTxnSeveralDestinations(t *testing.T) {
	e := newEnv(t)
	e.queue("in")
	e.queue("b-out")
	e.queue("a-out")
	e.queue("zs", sessionQueue)
	e.topic("t")
	sub := e.sub("t", "s")
	e.send("in", msg("m"))
	d := e.recv1("in")
	var sends []TxnSend
	sends = append(sends, txnTo("b-out", msg("b1"))...)
	sends = append(sends, txnTo("t", msg("t1"))...)
	sends = append(sends, txnTo("a-out", msg("a1"))...)
	sends = append(sends, txnTo("B-OUT", msg("b2"))...) // entity names are case-insensitive
	err := e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "in", Token: d.LockToken}},
		Sends:       sends,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.expectEmpty("in")
	if got := bodies(e.recv("b-out", PeekLock, 10)); !slices.Equal(got, []string{"b1", "b2"}) {
		t.Fatalf("b-out has %v", got)
	}
	if got := bodies(e.recv("a-out", PeekLock, 10)); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("a-out has %v", got)
	}
	if got := bodies(e.recv(sub, PeekLock, 10)); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("%s has %v", sub, got)
	}

	// All or nothing: the last destination (in lock order) refuses.
	e.send("in", msg("m2"))
	d = e.recv1("in")
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "in", Token: d.LockToken}},
		Sends:       append(append(txnTo("a-out", msg("no")), txnTo("t", msg("no"))...), txnTo("zs", msg("no session"))...),
	})
	wantKind(t, err, ErrInvalidArgument)
	if c := e.counts("a-out"); c.Active != 1 {
		t.Fatalf("a-out after a failed commit: %+v", c)
	}
	if c := e.subCounts("t", "s"); c.Active != 1 {
		t.Fatalf("%s after a failed commit: %+v", sub, c)
	}
	if c := e.counts("zs"); c.Active != 0 {
		t.Fatalf("zs after a failed commit: %+v", c)
	}
	// The message is still locked, and the same commit without the
	// refused send goes through; the failed plans left nothing behind.
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "in", Token: d.LockToken}},
		Sends:       append(txnTo("a-out", msg("a2")), txnTo("t", msg("t2"))...),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.restart()
	if c := e.counts("a-out"); c.Active != 2 {
		t.Fatalf("a-out after restart: %+v", c)
	}
	if c := e.counts("in"); c.Active != 0 {
		t.Fatalf("in after restart: %+v", c)
	}
	// An unknown destination fails before anything is planned.
	err = e.b.CommitTxn(ctx, &Txn{Sends: append(txnTo("a-out", msg("x")), txnTo("nope", msg("x"))...)})
	wantKind(t, err, ErrNotFound)
}

// A session receiver's messages settle in a transaction like any others,
// and a transaction may send to a session queue.
func TestTxnSession(t *testing.T) {
	e := newEnv(t)
	e.queue("s", sessionQueue)
	e.send("s", &message.Message{Body: []byte("a"), SessionID: "x"})
	r := e.accept("s", "x")
	ds := take(t, r, 1)
	if len(ds) != 1 {
		t.Fatal("nothing received")
	}
	err := e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "s", Token: ds[0].LockToken}},
		Sends:       txnTo("s", []*message.Message{{Body: []byte("b"), SessionID: "x"}}...),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ds := take(t, r, 1); len(ds) != 1 || body(ds[0]) != "b" {
		t.Fatalf("then received %v", ds)
	}
	// A send without a session id fails the whole.
	e.send("s", &message.Message{Body: []byte("c"), SessionID: "x"})
	err = e.b.CommitTxn(ctx, &Txn{Sends: txnTo("s", msg("no session"))})
	wantKind(t, err, ErrInvalidArgument)
}

// Abandoning a dead-lettered message in a transaction keeps its lock until
// the commit, and a failed commit keeps it locked.
func TestTxnAbandonInDeadLetterQueue(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.queue("small", func(p *QueueProperties) { p.MaxSizeInMegabytes = 1 })
	big := &message.Message{Body: make([]byte, 200<<10)}
	for range 5 {
		e.send("small", big)
	}
	e.send("q", msg("a"))
	d := e.recv1("q")
	if err := e.b.DeadLetter(ctx, "q", d.LockToken, "r", "", nil); err != nil {
		t.Fatal(err)
	}
	dl := e.recv1("q/$DeadLetterQueue")
	abandon := []TxnSettlement{{Kind: TxnAbandon, Path: "q/$DeadLetterQueue", Token: dl.LockToken}}
	// The send fails after the settlement was planned: all fails.
	err := e.b.CommitTxn(ctx, &Txn{Settlements: abandon, Sends: txnTo("small", big)})
	wantKind(t, err, ErrQuotaExceeded)
	e.expectEmpty("q/$DeadLetterQueue") // still locked
	if err := e.b.CommitTxn(ctx, &Txn{Settlements: abandon}); err != nil {
		t.Fatal(err)
	}
	if d := e.recv1("q/$DeadLetterQueue"); body(d) != "a" {
		t.Fatalf("received %q", body(d))
	}
}

// A transaction's sends go through the destination's duplicate
// detection like any send: a MessageId seen within the window is
// accepted and dropped, on queues and topics alike.
func TestTxnSendsDuplicateDetection(t *testing.T) {
	e := newEnv(t)
	dd := func(p *QueueProperties) { p.RequiresDuplicateDetection = true }
	e.queue("q", dd)
	e.topic("t", func(p *TopicProperties) { p.RequiresDuplicateDetection = true })
	e.sub("t", "s")
	withID := func(id, b string) *message.Message {
		m := msg(b)
		m.MessageID = id
		return m
	}
	for _, b := range []string{"first", "again"} {
		err := e.b.CommitTxn(ctx, &Txn{Sends: append(txnTo("q", withID("m1", b)), txnTo("t", withID("m1", b))...)})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := bodies(e.recv("q", PeekLock, 10)); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("q has %v", got)
	}
	if c := e.subCounts("t", "s"); c.Active != 1 {
		t.Fatalf("t/s: %+v", c)
	}
}

// scheduledMsg is a message scheduled for at.
func scheduledMsg(body string, at time.Time) *message.Message {
	m := msg(body)
	m.Annotations = map[string]any{ScheduledEnqueueTimeAnnotation: at}
	return m
}

// A schedule-message request inside a transaction answers with sequence
// numbers before the commit: ReserveSeqs hands them out, the commit
// schedules the messages under them (on a queue and on a topic), a
// rollback leaves a gap, and numbers reserved on an entity that was
// deleted and created again are refused.
func TestTxnScheduleReservedSeqs(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.topic("t")
	e.sub("t", "s")
	at := t0.Add(time.Hour)
	r, err := e.b.ReserveSeqs("q", 2)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := e.b.ReserveSeqs("t", 1)
	if err != nil {
		t.Fatal(err)
	}
	if r[0].Seq != 1 || r[1].Seq != 2 || rt[0].Seq != 1 {
		t.Fatalf("reserved %+v %+v", r, rt)
	}
	e.send("q", msg("plain")) // sent meanwhile: the next number
	err = e.b.CommitTxn(ctx, &Txn{Sends: []TxnSend{
		{To: "q", Msg: scheduledMsg("s1", at), Seq: r[0]},
		{To: "q", Msg: scheduledMsg("s2", at), Seq: r[1]},
		{To: "t", Msg: scheduledMsg("ts", at), Seq: rt[0]},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ds := e.peek("q", 0, 10)
	if got := bodies(ds); !slices.Equal(got, []string{"s1", "s2", "plain"}) || !slices.Equal(seqs(ds), []int64{1, 2, 3}) {
		t.Fatalf("q holds %v %v", got, seqs(ds))
	}
	if c := e.counts("q"); c.Scheduled != 2 || c.Active != 1 {
		t.Fatalf("q counts %+v", c)
	}
	// The reserved number names the scheduled message.
	if err := e.b.CancelScheduled(ctx, "q", []int64{r[1].Seq}); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if got := bodies(e.peek("q", 0, 10)); !slices.Equal(got, []string{"s1", "plain"}) {
		t.Fatalf("q after restart %v", got)
	}
	e.advance(2 * time.Hour)
	if got := bodies(e.recv("t/Subscriptions/s", PeekLock, 10)); !slices.Equal(got, []string{"ts"}) {
		t.Fatalf("subscription got %v", got)
	}

	// A rollback: the reserved number is never used.
	g, err := e.b.ReserveSeqs("q", 1)
	if err != nil {
		t.Fatal(err)
	}
	e.send("q", msg("after"))
	if d := e.peek("q", g[0].Seq, 10); len(d) != 1 || d[0].SequenceNumber != g[0].Seq+1 {
		t.Fatalf("after a rolled back reservation: %v", seqs(d))
	}

	// The entity deleted and created again: the reservation is refused.
	g, err = e.b.ReserveSeqs("q", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	e.queue("q")
	err = e.b.CommitTxn(ctx, &Txn{Sends: []TxnSend{{To: "q", Msg: scheduledMsg("late", at), Seq: g[0]}}})
	wantKind(t, err, ErrNotFound)
	if c := e.counts("q"); c.Scheduled+c.Active != 0 {
		t.Fatalf("recreated q %+v", c)
	}

	if _, err := e.b.ReserveSeqs("nope", 1); KindOf(err) != KindNotFound {
		t.Fatalf("reserve on a missing entity: %v", err)
	}
	if _, err := e.b.ReserveSeqs("q", MaxTxnOperations+1); KindOf(err) != KindQuotaExceeded {
		t.Fatalf("reserve too many: %v", err)
	}
}

// A scheduled time already past enqueues the message at once under its
// reserved number, below the numbers receivers have moved past: it is
// still delivered, on a queue, a session and a topic's subscription.
func TestTxnScheduleReservedSeqPastTime(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.queue("sq", func(p *QueueProperties) { p.RequiresSession = true })
	e.topic("t")
	e.sub("t", "s")
	var sends []TxnSend
	for _, p := range []string{"q", "sq", "t"} {
		r, err := e.b.ReserveSeqs(p, 1)
		if err != nil {
			t.Fatal(err)
		}
		later := msg("later")
		m := scheduledMsg("reserved", t0)
		if p == "sq" {
			later.SessionID, m.SessionID = "s1", "s1"
		}
		e.send(p, later)
		sends = append(sends, TxnSend{To: p, Msg: m, Seq: r[0]})
	}
	if d := e.recv1("q"); body(d) != "later" {
		t.Fatalf("q: %q", body(d))
	}
	if d := e.recv1("t/Subscriptions/s"); body(d) != "later" {
		t.Fatalf("sub: %q", body(d))
	}
	if err := e.b.CommitTxn(ctx, &Txn{Sends: sends}); err != nil {
		t.Fatal(err)
	}
	if d := e.recv1("q"); body(d) != "reserved" || d.SequenceNumber != 1 {
		t.Fatalf("q: %q %d", body(d), d.SequenceNumber)
	}
	if d := e.recv1("t/Subscriptions/s"); body(d) != "reserved" {
		t.Fatalf("sub: %q", body(d))
	}
	if got := bodies(e.peek("sq", 0, 10)); !slices.Equal(got, []string{"reserved", "later"}) {
		t.Fatalf("sq: %v", got)
	}
}

// A transaction cancels scheduled messages of its queue with the rest of
// it, all or nothing.
func TestTxnCancelScheduled(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.queue("q2")
	e.topic("t")
	at := t0.Add(time.Hour)
	seqs, err := e.b.Schedule(ctx, "q", []*message.Message{msg("s1"), msg("s2"), msg("s3")}, at)
	if err != nil {
		t.Fatal(err)
	}
	scheduled := func() int64 { t.Helper(); return e.counts("q").Scheduled }

	// With a settlement whose lock is lost: nothing is cancelled.
	e.send("q", msg("a"))
	d := e.recv1("q")
	e.complete("q", d.LockToken)
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "q", Token: d.LockToken}},
		CancelOn:    "q", Cancels: seqs[:1],
	})
	wantKind(t, err, ErrLockLost)
	if n := scheduled(); n != 3 {
		t.Fatalf("%d scheduled after a failed commit", n)
	}

	// Committed: cancelled with the send, unknown numbers ignored.
	err = e.b.CommitTxn(ctx, &Txn{Sends: txnTo("q", msg("sent")), CancelOn: "q", Cancels: []int64{seqs[0], seqs[2], 999}})
	if err != nil {
		t.Fatal(err)
	}
	if got := bodies(e.peek("q", 0, 10)); !slices.Equal(got, []string{"s2", "sent"}) {
		t.Fatalf("q holds %v", got)
	}
	e.restart()
	if got := bodies(e.peek("q", 0, 10)); !slices.Equal(got, []string{"s2", "sent"}) {
		t.Fatalf("q after restart holds %v", got)
	}

	// Another queue than the one it settles on: refused.
	e.send("q", msg("b"))
	d = e.recv1("q")
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "q", Token: d.LockToken}},
		CancelOn:    "q2", Cancels: []int64{1},
	})
	wantKind(t, err, ErrNotAllowed)
	if n := scheduled(); n != 1 {
		t.Fatalf("%d scheduled after refusals", n)
	}
}

// topicScheduled lists the bodies of topic name's scheduled messages (not
// yet fanned out), in sequence order.
func topicScheduled(t *testing.T, b *Broker, name string) []string {
	t.Helper()
	tp, err := b.topicByName(name)
	if err != nil {
		t.Fatal(err)
	}
	var recs []rec
	tp.lockAndPublish()
	tp.mu.idx.ascend(0, func(r *rec) bool {
		if r.state == StateScheduled {
			recs = append(recs, *r)
		}
		return true
	})
	tp.mu.Unlock()
	var out []string
	for _, r := range recs {
		data, err := b.store.ReadData(tp.id, uint64(r.seq))
		if err != nil {
			t.Fatal(err)
		}
		m, err := message.Unmarshal(data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(m.Body))
	}
	return out
}

// A transaction cancels a topic's scheduled messages with the rest of it
// (here a settlement on one of its subscriptions and a send), all or
// nothing; the cancelled ones never fan out, the others do at their time.
func TestTxnCancelTopicScheduled(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	sub := e.sub("t", "s")
	e.queue("small", func(p *QueueProperties) { p.MaxSizeInMegabytes = 1 })
	big := &message.Message{Body: make([]byte, 200<<10)}
	for range 5 {
		e.send("small", big)
	}
	at := t0.Add(time.Hour)
	seqs, err := e.b.Schedule(ctx, "t", []*message.Message{msg("s1"), msg("s2"), msg("s3")}, at)
	if err != nil {
		t.Fatal(err)
	}
	e.send("t", msg("a"))
	d := e.recv1(sub)

	// A send refused at commit: nothing cancelled, the message still locked.
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: sub, Token: d.LockToken}},
		Sends:       txnTo("small", big),
		CancelOn:    "t", Cancels: seqs[:2],
	})
	wantKind(t, err, ErrQuotaExceeded)
	if got := topicScheduled(t, e.b, "t"); !slices.Equal(got, []string{"s1", "s2", "s3"}) {
		t.Fatalf("scheduled after a failed commit: %v", got)
	}
	if c := e.topicInfo("t").Counts; c.Scheduled != 3 {
		t.Fatalf("topic counts after a failed commit: %+v", c)
	}

	// Committed: cancelled with the settlement and a send to the topic;
	// numbers of messages not scheduled are ignored.
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: sub, Token: d.LockToken}},
		Sends:       txnTo("t", msg("sent")),
		CancelOn:    "t", Cancels: []int64{seqs[0], seqs[2], 999},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := topicScheduled(t, e.b, "t"); !slices.Equal(got, []string{"s2"}) {
		t.Fatalf("scheduled after the commit: %v", got)
	}
	if c := e.topicInfo("t").Counts; c.Scheduled != 1 {
		t.Fatalf("topic counts after the commit: %+v", c)
	}
	e.restart()
	if got := topicScheduled(t, e.b, "t"); !slices.Equal(got, []string{"s2"}) {
		t.Fatalf("scheduled after restart: %v", got)
	}
	e.advance(2 * time.Hour)
	if got := bodies(e.recv(sub, PeekLock, 10)); !slices.Equal(got, []string{"s2", "sent"}) {
		t.Fatalf("%s got %v", sub, got)
	}
	if c := e.topicInfo("t").Counts; c.Scheduled != 0 {
		t.Fatalf("topic counts after the fan-out: %+v", c)
	}
}

// A transaction sets session state with the rest of it: applied on
// commit in the same batch (durable), left as it was by a failed commit;
// the session's lock must still be held at commit.
func TestTxnSessionState(t *testing.T) {
	e := newEnv(t)
	e.queue("s", sessionQueue)
	e.queue("small", func(p *QueueProperties) { p.MaxSizeInMegabytes = 1 })
	big := &message.Message{Body: make([]byte, 200<<10)}
	for range 5 {
		e.send("small", big)
	}
	e.send("s", &message.Message{Body: []byte("a"), SessionID: "x"}, &message.Message{Body: []byte("b"), SessionID: "x"})
	r := e.accept("s", "x")
	if err := r.SetSessionState(ctx, []byte("old")); err != nil {
		t.Fatal(err)
	}
	ds := take(t, r, 2)
	state := func() string {
		t.Helper()
		st, err := r.SessionState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(st)
	}

	// A failed commit (a send refused) leaves the old state.
	err := e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "s", Token: ds[0].LockToken}},
		States:      []TxnSessionState{{Path: "s", Holder: r, State: []byte("new")}},
		Sends:       txnTo("small", big),
	})
	wantKind(t, err, ErrQuotaExceeded)
	if got := state(); got != "old" {
		t.Fatalf("state after a failed commit: %q", got)
	}

	// Committed: the last state set wins, with the completion.
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "s", Token: ds[0].LockToken}},
		States: []TxnSessionState{
			{Path: "s", Holder: r, State: []byte("first")},
			{Path: "s", SessionID: "x", State: []byte("second")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "second" {
		t.Fatalf("state after the commit: %q", got)
	}
	// Cleared in a transaction of its own.
	if err := e.b.CommitTxn(ctx, &Txn{States: []TxnSessionState{{Path: "s", SessionID: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "" {
		t.Fatalf("state after clearing: %q", got)
	}
	if err := e.b.CommitTxn(ctx, &Txn{States: []TxnSessionState{{Path: "s", SessionID: "x", State: []byte("kept")}}}); err != nil {
		t.Fatal(err)
	}

	// Refusals: too large, another entity than the settlements', a
	// session nobody holds, a session whose lock expired.
	err = e.b.CommitTxn(ctx, &Txn{States: []TxnSessionState{{Path: "s", Holder: r, State: make([]byte, 257<<10)}}})
	wantKind(t, err, ErrMessageTooLarge)
	e.queue("other")
	e.send("other", msg("o"))
	o := e.recv1("other")
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "other", Token: o.LockToken}},
		States:      []TxnSessionState{{Path: "s", Holder: r, State: []byte("no")}},
	})
	wantKind(t, err, ErrNotAllowed)
	err = e.b.CommitTxn(ctx, &Txn{States: []TxnSessionState{{Path: "s", SessionID: "nobody", State: []byte("no")}}})
	wantKind(t, err, ErrSessionLockLost)
	e.advance(2 * time.Minute) // past the lock duration
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "s", Token: ds[1].LockToken}},
		States:      []TxnSessionState{{Path: "s", Holder: r, State: []byte("late")}},
	})
	if KindOf(err) != KindSessionLockLost && KindOf(err) != KindLockLost {
		t.Fatalf("commit after the session lock expired: %v", err)
	}

	// Durable: the committed state comes back after a restart.
	e.restart()
	r2 := e.accept("s", "x")
	if st, err := r2.SessionState(ctx); err != nil || string(st) != "kept" {
		t.Fatalf("state after restart: %q %v", st, err)
	}
}

// stateAfter is the session state TestTxnCrashAtManyPoints expects after
// its first done transactions.
func stateAfter(done int) string {
	if done == 0 {
		return ""
	}
	return fmt.Sprintf("state-%03d", done-1)
}

// sessionStateOf reads the state of session id of path, held or not.
func sessionStateOf(t *testing.T, b *Broker, path, id string) string {
	t.Helper()
	q, err := b.sessionEntity(path)
	if err != nil {
		t.Fatal(err)
	}
	q.lockAndPublish()
	defer q.mu.Unlock()
	if s := q.ss.byID[id]; s != nil {
		return string(s.state)
	}
	return ""
}

// Transactions setting the states of two sessions (taking their stateMu
// in session-id order) race plain SetSessionState calls and each other
// without deadlock; every state ends as one of the writes.
func TestTxnSessionStateConcurrent(t *testing.T) {
	e := newEnv(t)
	e.queue("s", sessionQueue)
	ra, rb := e.accept("s", "a"), e.accept("s", "b")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				v := []byte(fmt.Sprintf("w%d-%d", w, i))
				var err error
				switch w {
				case 0:
					err = ra.SetSessionState(ctx, v)
				case 1:
					err = rb.SetSessionState(ctx, v)
				case 2: // b before a
					err = e.b.CommitTxn(ctx, &Txn{States: []TxnSessionState{{Path: "s", Holder: rb, State: v}, {Path: "s", Holder: ra, State: v}}})
				default:
					err = e.b.CommitTxn(ctx, &Txn{States: []TxnSessionState{{Path: "s", SessionID: "a", State: v}, {Path: "s", SessionID: "b", State: v}}})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, r := range []*Receiver{ra, rb} {
		st, err := r.SessionState(ctx)
		if err != nil || len(st) == 0 || st[0] != 'w' {
			t.Fatalf("state of %s: %q %v", r.SessionID(), st, err)
		}
	}
}
