package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// newHistEnv is newEnv with message histories in mode m.
func newHistEnv(t *testing.T, m history.Mode) *env {
	t.Helper()
	e := &env{t: t, clk: clock.NewFake(t0), st: memstore.New()}
	b, err := Open(Options{Store: e.st, Clock: e.clk, History: history.New(history.Config{Mode: m, SampleEvery: 2})})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	t.Cleanup(func() { b.Close() })
	return e
}

func kinds(m history.Message) string {
	var ks []string
	for _, ev := range m.Events {
		ks = append(ks, ev.Kind)
	}
	return strings.Join(ks, " ")
}

func (e *env) history(entity string, seq int64) history.Message {
	e.t.Helper()
	ms := e.b.History().BySeq(e.b.Now(), entity, seq)
	if len(ms) == 0 {
		e.t.Fatalf("no history for %s seq %d", entity, seq)
	}
	return ms[0]
}

func TestHistoryPeekLockLife(t *testing.T) {
	e := newHistEnv(t, history.On)
	e.queue("q", func(p *QueueProperties) { p.MaxDeliveryCount = 3; p.LockDuration = 30 * time.Second })
	s := e.b.NewSender("q")
	s.SetHolder("link snd on connection c1")
	if err := s.Send(ctx, []*message.Message{msgID("a", "m-1")}); err != nil {
		t.Fatal(err)
	}
	r := e.receiver("q", PeekLock)
	r.SetHolder("link rcv on connection c2")
	take := func() *Delivery {
		ds, err := r.TryReceive(1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %v %v", ds, err)
		}
		return ds[0]
	}
	d1 := take()
	e.advance(time.Second)
	e.abandon("q", d1.LockToken, nil)
	d2 := take()
	if _, err := e.b.RenewLock(ctx, "q", []uuid.UUID{d2.LockToken}); err != nil {
		t.Fatal(err)
	}
	e.advance(40 * time.Second) // the lock expires
	e.b.Tick()
	d3 := take()
	if err := e.b.DeadLetter(ctx, "q", d3.LockToken, "Bad", "really bad", nil); err != nil {
		t.Fatal(err)
	}
	d4 := e.recv1("q/$DeadLetterQueue")
	e.complete("q/$DeadLetterQueue", d4.LockToken)

	h := e.history("Q", d1.SequenceNumber)
	if got, want := kinds(h), "enqueued delivered abandoned delivered renewed lock-expired delivered dead-lettered delivered completed"; got != want {
		t.Fatalf("kinds:\n got %s\nwant %s", got, want)
	}
	ev := h.Events
	if h.MessageID != "m-1" || ev[0].Link != "link snd on connection c1" || !ev[0].Time.Equal(t0) {
		t.Errorf("enqueue: %+v (id %q)", ev[0], h.MessageID)
	}
	if ev[1].Link != "link rcv on connection c2" || ev[1].LockToken != d1.LockToken.String() || !ev[1].LockedUntil.Equal(d1.LockedUntil) || ev[1].DeliveryCount != 1 {
		t.Errorf("delivery: %+v", ev[1])
	}
	if ev[2].LockToken != d1.LockToken.String() || ev[2].DeliveryCount != 2 || !ev[2].Time.Equal(t0.Add(time.Second)) {
		t.Errorf("abandon: %+v", ev[2])
	}
	if ev[4].LockToken != d2.LockToken.String() || ev[4].LockedUntil == nil {
		t.Errorf("renew: %+v", ev[4])
	}
	if ev[5].LockToken != d2.LockToken.String() || ev[5].Link != "link rcv on connection c2" || ev[5].DeliveryCount != 3 {
		t.Errorf("lock expiry: %+v", ev[5])
	}
	if ev[7].MovedTo != "$DeadLetterQueue" || ev[7].Reason != "Bad" || ev[7].Description != "really bad" {
		t.Errorf("dead-letter: %+v", ev[7])
	}
	if ev[8].SubQueue != "$DeadLetterQueue" || !ev[9].Gone {
		t.Errorf("in the DLQ: %+v %+v", ev[8], ev[9])
	}
	if ids := e.b.History().ByMessageID(e.b.Now(), "q", "m-1"); len(ids) != 1 {
		t.Errorf("by message id: %+v", ids)
	}
}

func TestHistoryMaxDeliveryExpiryAndDelete(t *testing.T) {
	e := newHistEnv(t, history.On)
	e.queue("q", func(p *QueueProperties) {
		p.MaxDeliveryCount = 1
		p.DeadLetteringOnMessageExpiration = true
	})
	e.send("q", msgID("a", "x"), &message.Message{Body: []byte("b"), TTL: time.Minute}, msg("c"))
	d := e.recv1("q")
	e.abandon("q", d.LockToken, nil) // max delivery count reached
	e.advance(2 * time.Minute)
	e.b.Tick() // b expires into the DLQ
	e.recv("q", ReceiveAndDelete, 1)

	if got := kinds(e.history("q", 1)); got != "enqueued delivered abandoned" {
		t.Errorf("1: %s", got)
	}
	if ev := e.history("q", 1).Events[2]; ev.Reason != ReasonMaxDeliveryCountExceeded || ev.MovedTo != "$DeadLetterQueue" {
		t.Errorf("max delivery: %+v", ev)
	}
	h2 := e.history("q", 2)
	if got := kinds(h2); got != "enqueued expired" || h2.Events[1].Reason != ReasonTTLExpired || !h2.Events[1].Time.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("2: %s %+v", got, h2.Events)
	}
	if h3 := e.history("q", 3); kinds(h3) != "enqueued received-and-deleted" || !h3.Events[1].Gone {
		t.Errorf("3: %+v", h3)
	}
}

func TestHistoryForwardAndTopic(t *testing.T) {
	e := newHistEnv(t, history.On)
	e.queue("dest")
	e.topic("t")
	e.sub("t", "a", func(p *SubscriptionProperties) { p.ForwardTo = "dest" })
	e.sub("t", "b")
	e.send("t", msgID("x", "m-9"))
	e.b.Tick() // forwards
	got := e.b.History().ByMessageID(e.b.Now(), "t", "m-9")
	if len(got) != 4 {
		t.Fatalf("trace: %+v", got)
	}
	if kinds(got[0]) != "enqueued routed routed" {
		t.Errorf("topic: %s", kinds(got[0]))
	}
	var fwd, dst history.Message
	for _, m := range got {
		switch m.Entity {
		case "t/Subscriptions/a":
			fwd = m
		case "dest":
			dst = m
		}
	}
	if kinds(fwd) != "enqueued forwarded" || fwd.Events[1].To != "dest" || fwd.Events[1].PeerSeq != dst.SequenceNumber {
		t.Errorf("forward: %+v", fwd)
	}
	if kinds(dst) != "enqueued" || dst.Events[0].From != "t/Subscriptions/a" || dst.MessageID != "m-9" {
		t.Errorf("destination: %+v", dst)
	}
}

func TestHistorySampledAndScheduled(t *testing.T) {
	e := newHistEnv(t, history.Sampled) // 1 in 2
	e.queue("q")
	seqs, err := e.b.Schedule(ctx, "q", []*message.Message{msg("a"), msg("b")}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.CancelScheduled(ctx, "q", seqs); err != nil {
		t.Fatal(err)
	}
	for _, seq := range seqs {
		ms := e.b.History().BySeq(e.b.Now(), "q", seq)
		if seq%2 != 0 {
			if ms != nil {
				t.Errorf("seq %d not sampled but kept", seq)
			}
			continue
		}
		if len(ms) != 1 || kinds(ms[0]) != "enqueued cancelled" || ms[0].Events[0].ScheduledFor == nil {
			t.Errorf("seq %d: %+v", seq, ms)
		}
	}
}

// TestHistoryOffAllocatesNothing: with histories off, a send, receive and
// complete allocate what they did without the hooks.
func TestHistoryOffAllocatesNothing(t *testing.T) {
	measure := func(m history.Mode) float64 {
		e := newHistEnv(t, m)
		e.queue("q")
		r := e.receiver("q", PeekLock)
		one := []*message.Message{msg("x")}
		return testing.AllocsPerRun(200, func() {
			_ = e.b.Send(ctx, "q", one)
			ds, _ := r.TryReceive(1)
			_ = e.b.Complete(ctx, "q", ds[0].LockToken)
		})
	}
	off, on := measure(history.Off), measure(history.On)
	t.Logf("allocations per send+receive+complete: off %.1f, on %.1f", off, on)
	if on <= off {
		t.Errorf("on (%.1f) should allocate more than off (%.1f): are the hooks wired?", on, off)
	}
}

func TestHistoryDeferAndTransaction(t *testing.T) {
	e := newHistEnv(t, history.On)
	e.queue("in")
	e.queue("out")
	e.send("in", msgID("a", "a"), msgID("b", "b"))
	d := e.recv1("in")
	if err := e.b.Defer(ctx, "in", d.LockToken, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := e.b.ReceiveDeferred(ctx, "in", []int64{d.SequenceNumber}, PeekLock)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive deferred: %v %v", ds, err)
	}
	d2 := e.recv1("in")
	err = e.b.CommitTxn(ctx, &Txn{
		Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "in", Token: ds[0].LockToken}, {Kind: TxnComplete, Path: "in", Token: d2.LockToken}},
		Sends:       []TxnSend{{To: "out", Msg: msgID("c", "c")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.history("in", d.SequenceNumber)
	if got := kinds(h); got != "enqueued delivered deferred delivered completed" {
		t.Fatalf("kinds %s", got)
	}
	if !h.Events[4].Transaction || h.Events[2].Transaction || h.Events[3].LockToken != ds[0].LockToken.String() {
		t.Errorf("events %+v", h.Events)
	}
	out := e.b.History().ByMessageID(e.b.Now(), "out", "c")
	if len(out) != 1 || kinds(out[0]) != "enqueued" || !out[0].Events[0].Transaction {
		t.Errorf("transactional send: %+v", out)
	}
}

func TestHistorySession(t *testing.T) {
	e := newHistEnv(t, history.On)
	e.queue("s", func(p *QueueProperties) { p.RequiresSession = true })
	e.send("s", &message.Message{MessageID: "m", SessionID: "a", Body: []byte("x")}, &message.Message{MessageID: "n", SessionID: "a", Body: []byte("y")})
	r, err := e.b.AcceptSession("s", "a", PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	r.SetHolder("link sess on connection c")
	ds, err := r.TryReceive(2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	e.complete("s", ds[0].LockToken)
	r.Close() // releases the session and its other message
	h := e.history("s", ds[0].SequenceNumber)
	if kinds(h) != "enqueued delivered completed" || h.Events[1].Link != "link sess on connection c" || h.Events[2].LockToken != ds[0].LockToken.String() {
		t.Errorf("completed: %+v", h)
	}
	if h := e.history("s", ds[1].SequenceNumber); kinds(h) != "enqueued delivered released" || h.Events[2].LockToken != ds[1].LockToken.String() {
		t.Errorf("released: %+v", h)
	}
}
