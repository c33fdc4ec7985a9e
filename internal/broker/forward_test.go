package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// flush runs Tick until nothing is due at the fake clock's now: every
// forward that became due, and the forwards those caused, are done.
func (e *env) flush() {
	e.t.Helper()
	for range 1000 {
		next := e.b.NextDeadline()
		if next.IsZero() || next.After(e.clk.Now()) {
			return
		}
		e.b.Tick()
	}
	e.t.Fatal("Tick does not settle")
}

func forwardTo(target string) func(*QueueProperties) {
	return func(p *QueueProperties) { p.ForwardTo = target }
}

func forwardDLQTo(target string) func(*QueueProperties) {
	return func(p *QueueProperties) { p.ForwardDeadLetteredMessagesTo = target }
}

func subForwardTo(target string) func(*SubscriptionProperties) {
	return func(p *SubscriptionProperties) { p.ForwardTo = target }
}

func (e *env) updateQueue(name string, mod func(*QueueProperties)) {
	e.t.Helper()
	info, err := e.b.GetQueue(name)
	if err != nil {
		e.t.Fatal(err)
	}
	p := info.Properties
	mod(&p)
	if _, err := e.b.UpdateQueue(name, p); err != nil {
		e.t.Fatalf("UpdateQueue(%s): %v", name, err)
	}
}

// take receives exactly one message in ReceiveAndDelete mode.
func (e *env) take(path string) *Delivery {
	e.t.Helper()
	ds := e.recv(path, ReceiveAndDelete, 1)
	if len(ds) != 1 {
		e.t.Fatalf("receive from %s: got %d messages, want 1", path, len(ds))
	}
	return ds[0]
}

// tdlq receives exactly one message from path's transfer dead-letter
// queue and checks its reason.
func (e *env) tdlq(path, reason string) *Delivery {
	e.t.Helper()
	d := e.take(path + "/$Transfer/$DeadLetterQueue")
	if got := prop(d, PropDeadLetterReason); got != reason {
		e.t.Fatalf("transfer DLQ of %s: reason %v (%v), want %s", path, got, prop(d, PropDeadLetterErrorDescription), reason)
	}
	return d
}

func TestForwardIsOneSyncedBatch(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("b")
	e.queue("a", forwardTo("b"))
	e.send("a", msg("m"))
	spy.mu.Lock()
	spy.commits = nil
	spy.mu.Unlock()
	e.flush()
	c, ok := spy.last(store.OpRemove)
	if !ok || !c.sync || !slices.Contains(c.kinds, store.OpAppend) {
		t.Fatalf("forward commit %+v: want one synced batch with the append and the removal", c)
	}
}

func TestForwardSubscriptionToQueue(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.topic("t")
	e.sub("t", "fwd", subForwardTo("q"))
	plain := e.sub("t", "plain")
	e.send("t", labelled("m", "label", map[string]any{"p": int64(1)}))
	e.flush()
	if c := e.subCounts("t", "fwd"); c != (Counts{}) {
		t.Fatalf("forwarding subscription: %+v", c)
	}
	d := e.take("q")
	if body(d) != "m" || d.Message.Subject != "label" || prop(d, "p") != int64(1) || d.SequenceNumber != 1 {
		t.Fatalf("q got %q seq %d", body(d), d.SequenceNumber)
	}
	// The other subscription's copy still shares the topic's data.
	if !e.sharedData("t", 1) {
		t.Fatal("shared data gone while a copy refers to it")
	}
	if d := e.take(plain); body(d) != "m" {
		t.Fatal("plain subscription")
	}
	_, err := e.b.OpenReceiver("t/Subscriptions/fwd", PeekLock)
	wantKind(t, err, ErrNotAllowed)

	// A copy made by a rule action is forwarded with the action applied.
	e.sub("t", "act", subForwardTo("q"))
	if err := e.b.DeleteRule("t", "act", DefaultRuleName); err != nil {
		t.Fatal(err)
	}
	e.rule("t", "act", RuleDescription{Name: "stamp", Filter: TrueRuleFilter(), Action: &SQLAction{Expression: "SET stamped = 'yes'"}})
	e.send("t", msg("n"))
	e.flush()
	ds := e.recv("q", ReceiveAndDelete, 10)
	if len(ds) != 2 {
		t.Fatalf("q got %d", len(ds))
	}
	stamped := 0
	for _, d := range ds {
		if prop(d, "stamped") == "yes" && prop(d, "RuleName") == "stamp" {
			stamped++
		}
	}
	if stamped != 1 {
		t.Fatalf("action copies forwarded: %d", stamped)
	}
}

func TestForwardQueueTopicSubscriptionChain(t *testing.T) {
	e := newEnv(t)
	e.queue("end")
	e.topic("t")
	e.sub("t", "s", subForwardTo("end"))
	e.queue("start", forwardTo("t"))
	e.send("start", msg("x"))
	e.flush()
	ps := e.peek("end", 0, 10)
	if len(ps) != 1 || body(ps[0]) != "x" {
		t.Fatalf("end holds %v", bodies(ps))
	}
	d := ps[0]
	// Survives a restart with its hop count: 2 forwards so far.
	e.restart()
	e.b.mu.RLock()
	q := e.b.mu.queues["end"]
	e.b.mu.RUnlock()
	q.lockAndPublish()
	var hops uint8 = 99
	if r := q.mu.subs[SubQueueMain].idx.get(d.SequenceNumber); r != nil {
		hops = r.hops
	}
	q.mu.Unlock()
	if hops != 2 {
		t.Fatalf("hop count after restart: %d, want 2", hops)
	}
}

func TestForwardDestinationOverQuota(t *testing.T) {
	e := newEnv(t)
	e.queue("b", func(p *QueueProperties) { p.MaxSizeInMegabytes = 1; p.MaxMessageSizeInKilobytes = 1024 })
	e.queue("a", forwardTo("b"), func(p *QueueProperties) { p.MaxMessageSizeInKilobytes = 1024 })
	big := func(s string) *message.Message {
		return &message.Message{Body: []byte(s + strings.Repeat("x", 300<<10))}
	}
	e.send("b", big("0"), big("1"), big("2")) // ~900 KB of 1 MB
	e.send("a", big("fits?"), msg("small"))
	e.flush()
	// The big one does not fit, the small one does: one at a time.
	d := e.tdlq("a", ReasonForwardQuotaExceeded)
	if !strings.HasPrefix(body(d), "fits?") {
		t.Fatal("wrong message refused")
	}
	if desc, _ := prop(d, PropDeadLetterErrorDescription).(string); !strings.Contains(desc, "MaxSizeInMegabytes") {
		t.Fatalf("description %q", desc)
	}
	if c := e.counts("b"); c.Active != 4 {
		t.Fatalf("b: %+v", c)
	}
	// Too large for the destination's MaxMessageSizeInKilobytes.
	e.queue("tiny", func(p *QueueProperties) { p.MaxMessageSizeInKilobytes = 1 })
	e.queue("c", forwardTo("tiny"))
	e.send("c", &message.Message{Body: make([]byte, 2048)})
	e.flush()
	e.tdlq("c", ReasonForwardMessageSizeExceeded)
}

func TestForwardCounts(t *testing.T) {
	e := newEnv(t)
	e.queue("dst", func(p *QueueProperties) { p.Status = StatusDisabled })
	e.queue("src", forwardTo("dst"), forwardDLQTo("dst"), func(p *QueueProperties) { p.Status = StatusReceiveDisabled })
	e.sendN("src", 3)
	if c := e.counts("src"); c.Transfer != 3 || c.Active != 0 || c.TransferDeadLetter != 0 || c.Total != 3 {
		t.Fatalf("waiting: %+v", c)
	}
	e.updateQueue("src", func(p *QueueProperties) { p.Status = StatusActive })
	e.flush()
	c := e.counts("src")
	if c.Transfer != 0 || c.TransferDeadLetter != 3 || c.Total != 3 || c.SizeInBytes == 0 {
		t.Fatalf("refused: %+v", c)
	}
	// The transfer DLQ is peekable and receivable, and is never forwarded.
	const tdlq = "src/$Transfer/$DeadLetterQueue"
	if ps := e.peek(tdlq, 0, 10); len(ps) != 3 {
		t.Fatalf("peek %d", len(ps))
	}
	d := e.recv1(tdlq)
	e.complete(tdlq, d.LockToken)
	e.updateQueue("dst", func(p *QueueProperties) { p.Status = StatusActive })
	e.flush()
	if c := e.counts("src"); c.TransferDeadLetter != 2 || c.Total != 2 {
		t.Fatalf("after completing one: %+v", c)
	}
	if c := e.counts("dst"); c.Total != 0 {
		t.Fatalf("dst: %+v", c)
	}
}

func TestForwardRetriesAfterStoreFailure(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("b")
	e.queue("a", forwardTo("b"))
	e.send("a", msg("m"))
	spy.mu.Lock()
	spy.fail = fmt.Errorf("disk on fire")
	spy.mu.Unlock()
	e.b.Tick()
	spy.mu.Lock()
	spy.fail = nil
	spy.mu.Unlock()
	e.flush() // not yet: retried after retryDelay
	if c := e.counts("a"); c.Transfer != 1 {
		t.Fatalf("a after a failed forward: %+v", c)
	}
	e.advance(time.Duration(retryDelay))
	e.flush()
	if d := e.take("b"); body(d) != "m" {
		t.Fatal(body(d))
	}
	if c := e.counts("a"); c != (Counts{}) {
		t.Fatalf("a: %+v", c)
	}
}

func TestForwardRecoversWhatWaited(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("a", forwardTo("b"))
	e.sendN("a", 300) // more than one forward batch
	e.restart()
	e.flush()
	if c := e.counts("b"); c.Active != 300 {
		t.Fatalf("b: %+v", c)
	}
	if c := e.counts("a"); c != (Counts{}) {
		t.Fatalf("a: %+v", c)
	}
}

func TestMetaHopCount(t *testing.T) {
	for _, hops := range []uint8{0, 1, 3, 255} {
		r := rec{enq: 12345, ttl: 99, dc: 2, state: StateDeferred, hops: hops}
		b := appendMeta(nil, SubQueueTransferDeadLetter, &r)
		if len(b) > maxMetaLen {
			t.Fatalf("meta %d bytes > %d", len(b), maxMetaLen)
		}
		var got rec
		sub, err := decodeMeta(b, &got)
		if err != nil || sub != SubQueueTransferDeadLetter || got != r {
			t.Fatalf("hops %d: %+v %v %v", hops, got, sub, err)
		}
	}
	// With a session id (bit 0) before it.
	r := rec{enq: 1, hops: 2}
	var got rec
	var o metaOpt
	if _, err := decodeMetaOpt(appendMetaOpt(nil, SubQueueMain, &r, metaOpt{sessionID: "s-1"}), &got, &o); err != nil || got.hops != 2 || o.sessionID != "s-1" {
		t.Fatalf("%+v %+v %v", got, o, err)
	}
	// Version-1 Meta written before hop counts existed has opt = 0.
	if _, err := decodeMeta([]byte{metaVersion, 0, 0, 2, 0, 0}, &got); err != nil || got.hops != 0 {
		t.Fatalf("%+v %v", got, err)
	}
	// A zero hop count is never written: corrupt.
	if _, err := decodeMeta([]byte{metaVersion, 0, 0, 2, 0, metaOptHops, 0}, &got); err == nil {
		t.Fatal("accepted hop count 0")
	}
}

// TestForwardStress: senders to a queue forwarding to a topic (one
// subscription forwarding on to a queue, one keeping its copies), receivers
// completing at both ends and the destination queue disabled and enabled
// again, all concurrently with the Run shell forwarding (with -race).
// Every message ends exactly once per route: received at its destination,
// or in the transfer dead-letter queue of the subscription whose
// destination was disabled.
func TestForwardStress(t *testing.T) {
	e := newEnv(t)
	e.queue("end")
	e.topic("t")
	keep := e.sub("t", "keep")
	e.sub("t", "fwd", subForwardTo("end"))
	e.queue("in", forwardTo("t"))
	runCtx, cancel := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = e.b.Run(runCtx) }()
	defer func() { cancel(); <-runDone }()

	const senders, perSender = 4, 150
	var (
		mu   sync.Mutex
		seen = map[string]int{} // route + body → times it ended
	)
	got := func(route string, ds []*Delivery) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds {
			seen[route+" "+body(d)]++
		}
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range perSender {
				if err := e.b.Send(ctx, "in", []*message.Message{msg(fmt.Sprintf("%d-%d", s, i))}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	drain := func(path, route string) {
		r, err := e.b.OpenReceiver(path, ReceiveAndDelete)
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Close()
		for {
			ds, err := r.TryReceive(16)
			if err != nil {
				t.Error(err)
				return
			}
			got(route, ds)
			if len(ds) == 0 {
				select {
				case <-stop:
					return
				case <-r.Ready():
				case <-time.After(time.Millisecond):
				}
			}
		}
	}
	for _, p := range [][2]string{{"end", "fwd"}, {"t/Subscriptions/fwd/$Transfer/$DeadLetterQueue", "fwd"}, {keep, "keep"}} {
		rwg.Go(func() { drain(p[0], p[1]) })
	}
	wg.Go(func() {
		for i := range 20 {
			st := StatusActive
			if i%2 == 0 {
				st = StatusSendDisabled
			}
			p := DefaultQueueProperties()
			p.Status = st
			if _, err := e.b.UpdateQueue("end", p); err != nil {
				t.Error(err)
			}
			time.Sleep(500 * time.Microsecond)
		}
		p := DefaultQueueProperties()
		if _, err := e.b.UpdateQueue("end", p); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	// Wait until every message has ended somewhere, then stop.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 2*senders*perSender || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	rwg.Wait()
	for s := range senders {
		for i := range perSender {
			for _, route := range []string{"fwd", "keep"} {
				if k := fmt.Sprintf("%s %d-%d", route, s, i); seen[k] != 1 {
					t.Errorf("%s ended %d times", k, seen[k])
				}
			}
		}
	}
	for _, q := range []string{"in", "end"} {
		if c := e.counts(q); c.Total != 0 {
			t.Errorf("%s: %+v", q, c)
		}
	}
	if c := e.subCounts("t", "fwd"); c.Total != 0 {
		t.Errorf("fwd: %+v", c)
	}
	if ti := e.topicInfo("t"); ti.Counts.SizeInBytes != 0 {
		t.Errorf("topic size %d after everything was received", ti.Counts.SizeInBytes)
	}
}
