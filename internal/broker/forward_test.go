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

func TestForwardQueueToQueue(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("a", forwardTo("b"))
	e.sendN("b", 5) // b's own numbers go on from 6
	sent := &message.Message{Body: []byte("m0"), MessageID: "id-0", Subject: "subj", TTL: time.Hour,
		ApplicationProperties: map[string]any{"k": "v"}}
	e.send("a", sent, msg("m1"), msg("m2"))

	// Before the forwarder ran: waiting, counted as Transfer.
	info := e.b.ListQueues()[0]
	if info.Name != "a" || info.Counts.Transfer != 3 || info.Counts.Active != 0 || info.Counts.Total != 3 {
		t.Fatalf("a before forwarding: %+v", info.Counts)
	}
	e.advance(time.Second)
	e.flush()
	if c := e.counts("a"); c != (Counts{}) {
		t.Fatalf("a after forwarding: %+v", c)
	}
	if c := e.counts("b"); c.Active != 8 || c.Transfer != 0 {
		t.Fatalf("b: %+v", c)
	}
	ds := e.recv("b", ReceiveAndDelete, 10)
	if got := bodies(ds[5:]); !slices.Equal(got, []string{"m0", "m1", "m2"}) {
		t.Fatalf("b got %v", got)
	}
	d := ds[5]
	if d.SequenceNumber != 6 || !d.EnqueuedTime.Equal(t0.Add(time.Second)) || d.DeliveryCount != 1 ||
		d.Message.MessageID != "id-0" || d.Message.Subject != "subj" || prop(d, "k") != "v" || d.TimeToLive != time.Hour {
		t.Fatalf("forwarded message: seq %d enq %v count %d %+v", d.SequenceNumber, d.EnqueuedTime, d.DeliveryCount, d.Message)
	}
	if d.DeadLetterSource != "" {
		t.Fatalf("dead-letter source %q on a plain forward", d.DeadLetterSource)
	}
	// A receiver cannot be opened on a forwarding queue's main queue; its
	// dead-letter queues can.
	_, err := e.b.OpenReceiver("a", PeekLock)
	wantKind(t, err, ErrNotAllowed)
	e.expectEmpty("a/$DeadLetterQueue")
	e.expectEmpty("a/$Transfer/$DeadLetterQueue")
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

func TestForwardQueueToTopic(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	all := e.sub("t", "all")
	red := e.subRule("t", "red", &RuleDescription{Name: "red", Filter: SQLRuleFilter("color = 'red'", nil)})
	e.queue("in", forwardTo("t"))
	e.send("in", labelled("r", "", map[string]any{"color": "red"}), labelled("b", "", map[string]any{"color": "blue"}))
	e.flush()
	if got := bodies(e.recv(all, ReceiveAndDelete, 10)); !slices.Equal(got, []string{"r", "b"}) {
		t.Fatalf("all got %v", got)
	}
	if got := bodies(e.recv(red, ReceiveAndDelete, 10)); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("red got %v", got)
	}
	if c := e.counts("in"); c != (Counts{}) {
		t.Fatalf("in: %+v", c)
	}
	// Nobody matches: accepted by the topic and dropped, gone from the source.
	if err := e.b.DeleteSubscription("t", "all"); err != nil {
		t.Fatal(err)
	}
	e.send("in", labelled("g", "", map[string]any{"color": "green"}))
	e.flush()
	if c := e.counts("in"); c != (Counts{}) {
		t.Fatalf("in after an unmatched forward: %+v", c)
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

func TestForwardDeadLetters(t *testing.T) {
	e := newEnv(t)
	e.queue("parking")
	e.queue("q", forwardDLQTo("parking"), func(p *QueueProperties) {
		p.MaxDeliveryCount = 1
		p.DeadLetteringOnMessageExpiration = true
	})
	// Explicit dead-lettering, a sender's fake x-opt-deadletter-source.
	m := msg("explicit")
	m.Annotations = map[string]any{DeadLetterSourceAnnotation: "forged"}
	e.send("q", m)
	d := e.recv1("q")
	if d.DeadLetterSource != "" {
		t.Fatalf("a sender's annotation surfaced as DeadLetterSource %q", d.DeadLetterSource)
	}
	if err := e.b.DeadLetter(ctx, "q", d.LockToken, "bad", "very bad", nil); err != nil {
		t.Fatal(err)
	}
	// MaxDeliveryCount, and TTL expiry.
	e.send("q", msg("abandoned"))
	e.abandon("q", e.recv1("q").LockToken, nil)
	e.send("q", &message.Message{Body: []byte("expired"), TTL: time.Minute})
	e.advance(2 * time.Minute)
	e.flush()

	if c := e.counts("q"); c != (Counts{}) {
		t.Fatalf("q: %+v", c)
	}
	ds := e.recv("parking", PeekLock, 10)
	if got := bodies(ds); !slices.Equal(got, []string{"explicit", "abandoned", "expired"}) {
		t.Fatalf("parking got %v", got)
	}
	want := []string{"bad", ReasonMaxDeliveryCountExceeded, ReasonTTLExpired}
	for i, d := range ds {
		if d.DeadLetterSource != "q" || prop(d, PropDeadLetterReason) != want[i] {
			t.Fatalf("%s: source %q reason %v", body(d), d.DeadLetterSource, prop(d, PropDeadLetterReason))
		}
	}
	// It stays on through a further plain forward.
	e.queue("next")
	e.updateQueue("parking", func(p *QueueProperties) { p.ForwardTo = "next" })
	for _, d := range ds {
		e.abandon("parking", d.LockToken, nil)
	}
	e.flush()
	for _, d := range e.recv("next", ReceiveAndDelete, 10) {
		if d.DeadLetterSource != "q" {
			t.Fatalf("%s lost its source: %q", body(d), d.DeadLetterSource)
		}
	}
}

func TestForwardSubscriptionDeadLetters(t *testing.T) {
	e := newEnv(t)
	e.queue("parking")
	e.topic("t")
	bad := RuleDescription{Name: "bad", Filter: SQLRuleFilter("n / 0 = 1", nil)}
	e.subRule("t", "s", &bad, func(p *SubscriptionProperties) { p.ForwardDeadLetteredMessagesTo = "parking" })
	e.send("t", labelled("m", "", map[string]any{"n": int64(1)}))
	e.flush()
	d := e.take("parking")
	if d.DeadLetterSource != "t/Subscriptions/s" || prop(d, PropDeadLetterReason) != "DivideByZeroException" {
		t.Fatalf("source %q reason %v", d.DeadLetterSource, prop(d, PropDeadLetterReason))
	}
	if c := e.subCounts("t", "s"); c != (Counts{}) {
		t.Fatalf("s: %+v", c)
	}
}

func TestForwardScheduledWhenItMaterialises(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("a", forwardTo("b"))
	at := t0.Add(time.Minute)
	if _, err := e.b.Schedule(ctx, "a", []*message.Message{msg("later")}, at); err != nil {
		t.Fatal(err)
	}
	e.flush()
	if c := e.counts("a"); c.Scheduled != 1 || c.Transfer != 0 {
		t.Fatalf("a: %+v", c)
	}
	e.expectEmpty("b")
	e.advance(time.Minute)
	e.flush()
	d := e.take("b")
	if body(d) != "later" || !d.EnqueuedTime.Equal(at) {
		t.Fatalf("b got %q enqueued %v", body(d), d.EnqueuedTime)
	}
	if c := e.counts("a"); c != (Counts{}) {
		t.Fatalf("a: %+v", c)
	}

	// A topic's scheduled message, to a forwarding subscription.
	e.topic("t")
	e.sub("t", "s", subForwardTo("b"))
	if _, err := e.b.Schedule(ctx, "t", []*message.Message{msg("topic-later")}, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Minute)
	e.flush()
	if d := e.take("b"); body(d) != "topic-later" {
		t.Fatal(body(d))
	}
}

func TestForwardWhenLocksEnd(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("a")
	e.sendN("a", 3)
	r := e.receiver("a", PeekLock)
	ds, err := r.TryReceive(3)
	if err != nil || len(ds) != 3 {
		t.Fatal(len(ds), err)
	}
	// Locked messages are not taken when forwarding starts.
	e.updateQueue("a", forwardTo("b"))
	e.flush()
	e.expectEmpty("b")
	if c := e.counts("a"); c.Transfer != 3 {
		t.Fatalf("a: %+v", c)
	}
	// Abandon, release, lock expiry: each makes one available, forwarded.
	e.abandon("a", ds[0].LockToken, map[string]any{"why": "abandoned"})
	e.flush()
	d := e.take("b")
	if body(d) != "0" || prop(d, "why") != "abandoned" || d.DeliveryCount != 1 {
		t.Fatalf("abandoned: %q %v count %d", body(d), prop(d, "why"), d.DeliveryCount)
	}
	if err := e.b.Release(ctx, "a", ds[1].LockToken); err != nil {
		t.Fatal(err)
	}
	e.flush()
	if d := e.take("b"); body(d) != "1" {
		t.Fatal(body(d))
	}
	e.advance(DefaultLockDuration)
	e.flush()
	if d := e.take("b"); body(d) != "2" {
		t.Fatal(body(d))
	}
	if c := e.counts("a"); c != (Counts{}) {
		t.Fatalf("a: %+v", c)
	}
	// Removing ForwardTo stops it: messages stay and can be received.
	e.updateQueue("a", forwardTo(""))
	e.send("a", msg("stays"))
	e.flush()
	if d := e.recv1("a"); body(d) != "stays" {
		t.Fatal(body(d))
	}
}

func TestForwardChainStopsAtHopLimit(t *testing.T) {
	e := newEnv(t)
	names := []string{"q1", "q2", "q3", "q4", "q5"}
	e.queue("q5")
	for i := len(names) - 2; i >= 0; i-- {
		e.queue(names[i], forwardTo(names[i+1]))
	}
	e.send("q1", msg("from q1"))
	e.send("q2", msg("from q2"))
	e.flush()
	// From q2: three forwards, the most allowed, reach q5.
	if d := e.take("q5"); body(d) != "from q2" {
		t.Fatalf("q5 got %q", body(d))
	}
	e.expectEmpty("q5")
	// From q1: forwarded three times, it stops in q4.
	d := e.tdlq("q4", ReasonMaxTransferHopCountExceeded)
	if body(d) != "from q1" {
		t.Fatal(body(d))
	}
	if desc, _ := prop(d, PropDeadLetterErrorDescription).(string); !strings.Contains(desc, "'q4'") || !strings.Contains(desc, "'q5'") {
		t.Fatalf("description %q", desc)
	}
	for _, q := range names[:3] {
		if c := e.counts(q); c != (Counts{}) {
			t.Fatalf("%s: %+v", q, c)
		}
	}
	if MaxTransferHops != 3 {
		t.Fatal("the hop limit changed: update this test and the documentation")
	}
}

func TestForwardChainHopLimitSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	e.queue("q5")
	e.queue("q4", forwardTo("q5"))
	e.queue("q3", forwardTo("q4"))
	e.queue("q2", forwardTo("q3"))
	e.queue("q1", forwardTo("q2"))
	e.send("q1", msg("m"))
	for range 4 { // one forward per restart; the hop count is in the store
		e.restart()
		e.advance(time.Second)
		e.b.Tick()
	}
	e.flush()
	e.tdlq("q4", ReasonMaxTransferHopCountExceeded)
	e.expectEmpty("q5")
}

func TestForwardDestinationDisabledWhileMessagesFlow(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("a", forwardTo("b"))
	e.send("a", msg("1"))
	e.flush()
	for _, status := range []EntityStatus{StatusDisabled, StatusSendDisabled} {
		e.updateQueue("b", func(p *QueueProperties) { p.Status = status })
		e.send("a", msg(string(status)))
		e.flush()
		d := e.tdlq("a", ReasonForwardEntityDisabled)
		desc, _ := prop(d, PropDeadLetterErrorDescription).(string)
		if body(d) != string(status) || !strings.Contains(desc, "'b'") || !strings.Contains(desc, string(status)) {
			t.Fatalf("%s: body %q description %q", status, body(d), desc)
		}
	}
	if c := e.counts("a"); c.TransferDeadLetter != 0 || c.Total != 0 {
		t.Fatalf("a: %+v", c)
	}
	// ReceiveDisabled takes sends, and forwarded messages.
	e.updateQueue("b", func(p *QueueProperties) { p.Status = StatusReceiveDisabled })
	e.send("a", msg("rd"))
	e.flush()
	e.updateQueue("b", func(p *QueueProperties) { p.Status = StatusActive })
	if got := bodies(e.recv("b", ReceiveAndDelete, 10)); !slices.Equal(got, []string{"1", "rd"}) {
		t.Fatalf("b got %v", got)
	}

	// A disabled topic as the destination.
	e.topic("t")
	e.sub("t", "s")
	e.queue("c", forwardTo("t"))
	if _, err := e.b.UpdateTopic("t", func() TopicProperties { p := DefaultTopicProperties(); p.Status = StatusDisabled; return p }()); err != nil {
		t.Fatal(err)
	}
	e.send("c", msg("to disabled topic"))
	e.flush()
	e.tdlq("c", ReasonForwardEntityDisabled)
}

func TestForwardSourceNotReceivingWaits(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("a", forwardTo("b"), forwardDLQTo("b"), func(p *QueueProperties) { p.Status = StatusReceiveDisabled })
	e.sendN("a", 2)
	e.flush()
	if c := e.counts("a"); c.Transfer != 2 || c.Active != 0 || c.Total != 2 {
		t.Fatalf("a: %+v", c)
	}
	e.updateQueue("a", func(p *QueueProperties) { p.Status = StatusActive })
	e.flush()
	if c := e.counts("b"); c.Active != 2 {
		t.Fatalf("b: %+v", c)
	}
}

func TestForwardDestinationDeleted(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("a", forwardTo("b"))
	if err := e.b.DeleteQueue("b"); err != nil {
		t.Fatal(err)
	}
	e.send("a", msg("orphan"))
	e.flush()
	d := e.tdlq("a", ReasonForwardEntityNotFound)
	if desc, _ := prop(d, PropDeadLetterErrorDescription).(string); !strings.Contains(desc, "'b' does not exist") {
		t.Fatalf("description %q", desc)
	}
	// Recreated: forwarding resumes.
	e.queue("b")
	e.send("a", msg("again"))
	e.flush()
	if d := e.take("b"); body(d) != "again" {
		t.Fatal(body(d))
	}
	// A subscription whose target topic is deleted.
	e.topic("t2")
	e.topic("t")
	e.sub("t", "s", subForwardTo("t2"))
	if err := e.b.DeleteTopic("t2"); err != nil {
		t.Fatal(err)
	}
	e.send("t", msg("x"))
	e.flush()
	e.tdlq("t/Subscriptions/s", ReasonForwardEntityNotFound)
	if c := e.subCounts("t", "s"); c.TransferDeadLetter != 0 {
		t.Fatalf("s: %+v", c)
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

func TestForwardToSessionQueueNeedsASessionID(t *testing.T) {
	e := newEnv(t)
	e.queue("sess", func(p *QueueProperties) { p.RequiresSession = true })
	e.queue("a", forwardTo("sess"))
	e.send("a", msg("no session"))
	e.flush()
	d := e.tdlq("a", ReasonForwardRefused)
	if desc, _ := prop(d, PropDeadLetterErrorDescription).(string); !strings.Contains(desc, "SessionId") {
		t.Fatalf("description %q", desc)
	}
	e.send("a", &message.Message{Body: []byte("with session"), SessionID: "s1"})
	e.flush()
	if c := e.counts("sess"); c.Active != 1 {
		t.Fatalf("sess: %+v", c)
	}
}

func TestForwardingRefusedAtCreateAndUpdate(t *testing.T) {
	e := newEnv(t)
	create := func(name string, mods ...func(*QueueProperties)) error {
		p := DefaultQueueProperties()
		for _, m := range mods {
			m(&p)
		}
		_, err := e.b.CreateQueue(name, p)
		return err
	}
	wantErr := func(err error, parts ...string) {
		t.Helper()
		wantKind(t, err, ErrInvalidArgument)
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not say %q", err, p)
			}
		}
	}
	wantErr(create("a", forwardTo("nowhere")), "ForwardTo", "'nowhere' does not exist")
	wantErr(create("a", forwardDLQTo("nowhere")), "ForwardDeadLetteredMessagesTo", "does not exist")
	e.queue("a")
	_, err := e.b.UpdateQueue("a", func() QueueProperties { p := DefaultQueueProperties(); p.ForwardTo = "A"; return p }())
	wantErr(err, "itself")

	// A → B → A.
	e.queue("b", forwardTo("a"))
	_, err = e.b.UpdateQueue("a", func() QueueProperties { p := DefaultQueueProperties(); p.ForwardTo = "b"; return p }())
	wantErr(err, "loop", "a → b → a")
	// A longer one: c → a, then a → c → ... is b → a → c? a → c → a.
	e.queue("c", forwardTo("b")) // c → b → a
	_, err = e.b.UpdateQueue("a", func() QueueProperties { p := DefaultQueueProperties(); p.ForwardTo = "c"; return p }())
	wantErr(err, "a → c → b → a")

	// Through a topic's subscription: q → t, t/s → q.
	e.queue("q")
	e.topic("t")
	e.sub("t", "s", subForwardTo("q"))
	_, err = e.b.UpdateQueue("q", func() QueueProperties { p := DefaultQueueProperties(); p.ForwardTo = "t"; return p }())
	wantErr(err, "q → t → t/Subscriptions/s → q")
	// The same loop closed from the subscription's side, and a new one.
	e.queue("q2", forwardTo("t"))
	p := DefaultSubscriptionProperties()
	p.ForwardTo = "q2"
	_, err = e.b.CreateSubscription("t", "s2", p, nil)
	wantErr(err, "t/Subscriptions/s2 → q2 → t → t/Subscriptions/s2")
	_, err = e.b.UpdateSubscription("t", "s", p)
	wantErr(err, "t/Subscriptions/s → q2 → t → t/Subscriptions/s")
	// A subscription forwarding to its own topic.
	p.ForwardTo = "t"
	_, err = e.b.CreateSubscription("t", "s3", p, nil)
	wantErr(err, "loop", "t/Subscriptions/s3 → t → t/Subscriptions/s3")

	// A dead-letter forward back to the source's forwarder is no loop.
	e.queue("dl")
	e.queue("work", forwardDLQTo("dl"))
	e.updateQueue("dl", forwardTo("work"))

	// Session-enabled entities do not forward (their dead letters may).
	wantErr(create("sess", forwardTo("q"), func(p *QueueProperties) { p.RequiresSession = true }), "ForwardTo", "session")
	if err := create("sess", forwardDLQTo("q"), func(p *QueueProperties) { p.RequiresSession = true }); err != nil {
		t.Fatal(err)
	}
	sp := DefaultSubscriptionProperties()
	sp.RequiresSession = true
	sp.ForwardTo = "q"
	_, err = e.b.CreateSubscription("t", "sess", sp, nil)
	wantErr(err, "ForwardTo", "session")
	sp.ForwardTo, sp.ForwardDeadLetteredMessagesTo = "", "q"
	if _, err := e.b.CreateSubscription("t", "sess", sp, nil); err != nil {
		t.Fatal(err)
	}
	sp.ForwardTo = "q"
	_, err = e.b.UpdateSubscription("t", "sess", sp)
	wantErr(err, "ForwardTo", "session")
	// Nothing refused was stored.
	if info, _ := e.b.GetQueue("a"); info.Properties.ForwardTo != "" {
		t.Fatalf("a forwards to %q", info.Properties.ForwardTo)
	}
}

func TestForwardingAndAutoDeleteOnIdle(t *testing.T) {
	e := newEnv(t)
	idle := func(p *QueueProperties) { p.AutoDeleteOnIdle = 5 * time.Minute }
	e.queue("dst", idle)
	e.queue("src", forwardTo("dst"), idle)
	// Forwarding keeps the source alive like an open receiver, and the
	// forwarded messages keep the destination alive like sends.
	for range 3 {
		e.advance(4 * time.Minute)
		e.send("src", msg("m"))
		e.flush()
	}
	e.advance(4 * time.Minute)
	e.flush()
	for _, q := range []string{"src", "dst"} {
		if _, err := e.b.GetQueue(q); err != nil {
			t.Fatalf("%s deleted: %v", q, err)
		}
	}
	if c := e.counts("dst"); c.Active != 3 {
		t.Fatalf("dst: %+v", c)
	}
	// Without traffic the destination goes idle; the source never does.
	e.advance(time.Hour)
	e.flush()
	_, err := e.b.GetQueue("dst")
	wantKind(t, err, ErrNotFound)
	if _, err := e.b.GetQueue("src"); err != nil {
		t.Fatalf("forwarding source deleted: %v", err)
	}
	// Its messages now go to its transfer dead-letter queue.
	e.send("src", msg("late"))
	e.flush()
	e.tdlq("src", ReasonForwardEntityNotFound)

	// A subscription with ForwardTo keeps itself and its topic alive.
	e.queue("q")
	e.topic("t", func(p *TopicProperties) { p.AutoDeleteOnIdle = 5 * time.Minute })
	e.sub("t", "s", subForwardTo("q"), func(p *SubscriptionProperties) { p.AutoDeleteOnIdle = 5 * time.Minute })
	e.advance(time.Hour)
	e.flush()
	if _, err := e.b.GetSubscription("t", "s"); err != nil {
		t.Fatalf("forwarding subscription deleted: %v", err)
	}
	// A dead-letter forward is receive activity of the source.
	e.queue("dl")
	e.queue("w", forwardDLQTo("dl"), idle, func(p *QueueProperties) { p.MaxDeliveryCount = 1; p.LockDuration = 5 * time.Minute })
	e.send("w", msg("x"))
	d := e.recv1("w")
	e.advance(4 * time.Minute)
	e.abandon("w", d.LockToken, nil) // dead-lettered (a use at +4 min)
	e.advance(4 * time.Minute)
	e.flush() // forwarded at +8 min: a use
	e.advance(4 * time.Minute)
	e.flush()
	if _, err := e.b.GetQueue("w"); err != nil {
		t.Fatalf("w deleted 4 minutes after its dead letter was forwarded: %v", err)
	}
	if d := e.take("dl"); d.DeadLetterSource != "w" {
		t.Fatalf("dl: source %q", d.DeadLetterSource)
	}
	e.advance(2 * time.Minute)
	e.flush()
	_, err = e.b.GetQueue("w")
	wantKind(t, err, ErrNotFound)
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
