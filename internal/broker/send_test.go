package broker

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

func TestSendSequenceNumbersAndEnqueuedTime(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.send("q", msg("a"))
	e.advance(time.Second)
	e.send("q", msg("b"), msg("c")) // a batch
	ds := e.recv("q", ReceiveAndDelete, 10)
	if got := seqs(ds); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("sequence numbers %v, want [1 2 3]", got)
	}
	if !ds[0].EnqueuedTime.Equal(t0) || !ds[1].EnqueuedTime.Equal(t0.Add(time.Second)) {
		t.Fatalf("enqueued times %v %v", ds[0].EnqueuedTime, ds[1].EnqueuedTime)
	}
	if got := bodies(ds); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("bodies %v", got)
	}
	// Removing messages does not make numbers reusable.
	e.send("q", msg("d"))
	if d := e.recv1("q"); d.SequenceNumber != 4 {
		t.Fatalf("next seq %d, want 4", d.SequenceNumber)
	}
}

func TestSendBatchIsAtomic(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	bad := &message.Message{Body: []byte("x"), ApplicationProperties: map[string]any{"k": struct{}{}}}
	err := e.b.Send(ctx, "q", []*message.Message{msg("ok"), bad})
	wantKind(t, err, ErrInvalidArgument)
	tooBig := &message.Message{Body: make([]byte, 300*1024)}
	err = e.b.Send(ctx, "q", []*message.Message{msg("ok"), tooBig})
	wantKind(t, err, ErrMessageTooLarge)
	if c := e.counts("q"); c.Active != 0 {
		t.Fatalf("after failed batches: %d active, want 0", c.Active)
	}
}

func TestSendLimits(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.queue("small", func(p *QueueProperties) { p.MaxSizeInMegabytes = 1 })
	e.queue("big", func(p *QueueProperties) { p.MaxMessageSizeInKilobytes = 1024 })

	// Message size: default 256 KB.
	err := e.b.Send(ctx, "q", []*message.Message{{Body: make([]byte, 257*1024)}})
	wantKind(t, err, ErrMessageTooLarge)
	if !strings.Contains(err.Error(), "MaxMessageSizeInKilobytes") || !strings.Contains(err.Error(), "256 KB") {
		t.Fatalf("error %q does not name the limit", err)
	}
	e.send("q", &message.Message{Body: make([]byte, 250*1024)})
	e.send("big", &message.Message{Body: make([]byte, 1000*1024)})

	// Header + properties: 64 KB whatever the message size limit.
	props := map[string]any{"k": strings.Repeat("x", 65*1024)}
	err = e.b.Send(ctx, "big", []*message.Message{{Body: []byte("x"), ApplicationProperties: props}})
	wantKind(t, err, ErrMessageTooLarge)
	if !strings.Contains(err.Error(), "64 KB") {
		t.Fatalf("error %q does not name the header limit", err)
	}

	// Entity size: MaxSizeInMegabytes.
	chunk := &message.Message{Body: make([]byte, 200*1024)}
	for range 5 {
		e.send("small", chunk)
	}
	err = e.b.Send(ctx, "small", []*message.Message{chunk})
	wantKind(t, err, ErrQuotaExceeded)
	if !strings.Contains(err.Error(), "MaxSizeInMegabytes") {
		t.Fatalf("error %q does not name the quota", err)
	}
	// Room comes back when messages go.
	e.recv("small", ReceiveAndDelete, 1)
	e.send("small", chunk)

	// MessageId and SessionId lengths.
	err = e.b.Send(ctx, "q", []*message.Message{msgID("x", strings.Repeat("i", 129))})
	wantKind(t, err, ErrInvalidArgument)
}

func TestSendToSubQueueOrMissingEntity(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	wantKind(t, e.b.Send(ctx, "q/$DeadLetterQueue", []*message.Message{msg("x")}), ErrNotAllowed)
	wantKind(t, e.b.Send(ctx, "nope", []*message.Message{msg("x")}), ErrNotFound)
	wantKind(t, e.b.Send(ctx, "bad name!", []*message.Message{msg("x")}), ErrInvalidArgument)
	// Paths are case-insensitive.
	e.send("Q", msg("x"))
	if e.counts("q").Active != 1 {
		t.Fatal("send via upper-case path not counted")
	}
}

func TestDuplicateDetection(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) {
		p.RequiresDuplicateDetection = true
		p.DuplicateDetectionHistoryTimeWindow = time.Minute
	})
	e.send("q", msgID("a", "id-1"))
	e.send("q", msgID("a again", "id-1")) // dropped, but acknowledged
	e.send("q", msgID("b", "id-2"), msgID("b twice in one batch", "id-2"))
	e.send("q", msg("no id"), msg("no id"))
	if c := e.counts("q"); c.Active != 4 {
		t.Fatalf("active %d, want 4 (a, b, two without id)", c.Active)
	}
	// Completing the original does not end the window.
	for _, d := range e.recv("q", ReceiveAndDelete, 10) {
		if strings.Contains(body(d), "again") || strings.Contains(body(d), "twice") {
			t.Fatalf("duplicate %q delivered", body(d))
		}
	}
	e.send("q", msgID("a3", "id-1"))
	e.expectEmpty("q")

	// History survives a restart.
	e.restart()
	e.advance(30 * time.Second)
	e.send("q", msgID("a4", "id-1"))
	e.expectEmpty("q")

	// After the window the id is new again.
	e.advance(31 * time.Second)
	e.send("q", msgID("a5", "id-1"))
	if d := e.recv1("q"); body(d) != "a5" {
		t.Fatalf("got %q, want a5", body(d))
	}

	// Duplicates of scheduled messages still get a sequence number.
	s1, err := e.b.Schedule(ctx, "q", []*message.Message{msgID("s", "sched")}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := e.b.Schedule(ctx, "q", []*message.Message{msgID("s", "sched")}, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(s2) != 1 || s2[0] <= s1[0] {
		t.Fatalf("duplicate schedule returned %v after %v", s2, s1)
	}
	if c := e.counts("q"); c.Scheduled != 1 {
		t.Fatalf("scheduled %d, want 1", c.Scheduled)
	}
}

func TestDuplicateHistoryIsPurged(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) {
		p.RequiresDuplicateDetection = true
		p.DuplicateDetectionHistoryTimeWindow = 20 * time.Second
	})
	for i := range 100 {
		e.send("q", msgID("x", fmt.Sprint(i)))
	}
	q, _, _ := e.b.lookup("q")
	if n := len(q.mu.dedup.seen); n != 100 {
		t.Fatalf("history holds %d ids, want 100", n)
	}
	if d := e.b.NextDeadline(); !d.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("NextDeadline %v, want the window end", d)
	}
	e.advance(21 * time.Second)
	e.b.Tick()
	q.mu.Lock()
	n := len(q.mu.dedup.seen)
	q.mu.Unlock()
	if n != 0 {
		t.Fatalf("history holds %d ids after the window, want 0", n)
	}
	e.restart()
	q, _, _ = e.b.lookup("q")
	if n := len(q.mu.dedup.seen); n != 0 {
		t.Fatalf("history holds %d ids after restart, want 0", n)
	}
}

func TestEntityStatus(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.send("q", msg("1"), msg("2"))
	set := func(s EntityStatus) {
		p := DefaultQueueProperties()
		p.Status = s
		if _, err := e.b.UpdateQueue("q", p); err != nil {
			t.Fatal(err)
		}
	}
	r := e.receiver("q", PeekLock)
	d := e.recv1("q")

	set(StatusSendDisabled)
	wantKind(t, e.b.Send(ctx, "q", []*message.Message{msg("x")}), ErrEntityDisabled)
	if ds, err := r.TryReceive(1); err != nil || len(ds) != 1 {
		t.Fatalf("receive while SendDisabled: %v %v", ds, err)
	}

	set(StatusReceiveDisabled)
	e.send("q", msg("3"))
	_, err := r.TryReceive(1)
	wantKind(t, err, ErrEntityDisabled)
	if !strings.Contains(err.Error(), "ReceiveDisabled") {
		t.Fatalf("error %q does not say why", err)
	}
	select {
	case <-r.Ready():
	default:
		t.Fatal("Ready should fire so the receiver sees the error")
	}
	_, err = e.b.OpenReceiver("q", PeekLock)
	wantKind(t, err, ErrEntityDisabled)
	// Settling what was received before still works.
	e.complete("q", d.LockToken)

	set(StatusDisabled)
	wantKind(t, e.b.Send(ctx, "q", []*message.Message{msg("x")}), ErrEntityDisabled)
	_, err = r.TryReceive(1)
	wantKind(t, err, ErrEntityDisabled)
	_, err = e.b.Peek(ctx, "q", 0, 1)
	wantKind(t, err, ErrEntityDisabled)

	set(StatusActive)
	if ds, err := r.TryReceive(5); err != nil || len(ds) != 1 {
		t.Fatalf("receive after re-enabling: %d %v", len(ds), err)
	}
}

func TestConcurrentSenders(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	const senders, each = 16, 50
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if err := e.b.Send(ctx, "q", []*message.Message{msg(fmt.Sprintf("%d/%d", s, i))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	ds := e.recv("q", ReceiveAndDelete, senders*each+1)
	if len(ds) != senders*each {
		t.Fatalf("received %d, want %d", len(ds), senders*each)
	}
	for i, d := range ds {
		if d.SequenceNumber != int64(i+1) {
			t.Fatalf("message %d has seq %d: not in order or not unique", i, d.SequenceNumber)
		}
	}
}
