package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

func pendOf(ids ...string) []pendingMsg {
	pend := make([]pendingMsg, len(ids))
	for i, id := range ids {
		pend[i] = pendingMsg{m: &message.Message{MessageID: id}, data: make([]byte, 100)}
	}
	return pend
}

// The checks every send shares, in the order queues and topics apply
// them, with each kind's wording.
func TestSendLimitsCheck(t *testing.T) {
	q := queueSendLimits("q", &QueueProperties{MaxMessageSizeInKilobytes: 1, MaxSizeInMegabytes: 1, RequiresSession: true,
		DefaultMessageTimeToLive: Infinite})
	big := pendOf("a")
	big[0].data = make([]byte, 1025)
	var e *Error
	if err := q.check(big, 1025, 0, 0); !errors.As(err, &e) || e.Kind != KindMessageTooLarge || !strings.Contains(e.Msg, "queue's") {
		t.Fatalf("too large: %v", err)
	}
	if err := q.check(pendOf("a"), 100, 0, 0); !errors.As(err, &e) || e.Kind != KindInvalidArgument {
		t.Fatalf("no session id: %v", err)
	}
	ok := pendOf("a")
	ok[0].hasSess = true
	if err := q.check(ok, 100, 1<<20-150, 51); !errors.As(err, &e) || e.Kind != KindQuotaExceeded {
		t.Fatalf("over quota (stored + pending + total): %v", err)
	}
	if err := q.check(ok, 100, 1<<20-150, 50); err != nil {
		t.Fatalf("within quota: %v", err)
	}
	tp := topicSendLimits("t", &TopicProperties{MaxMessageSizeInKilobytes: 1, MaxSizeInMegabytes: 1, DefaultMessageTimeToLive: time.Minute})
	if err := tp.check(big, 1025, 0, 0); !errors.As(err, &e) || !strings.Contains(e.Msg, "topic's") {
		t.Fatalf("topic, too large: %v", err)
	}
	if err := tp.check(pendOf("a"), 100, 0, 0); err != nil {
		t.Fatalf("a topic needs no session id: %v", err)
	}
	if q.defTTL != 0 || tp.defTTL != int64(time.Minute) {
		t.Fatalf("default TTLs %d, %d", q.defTTL, tp.defTTL)
	}
}

// Planning numbers the messages, runs duplicate detection (not for
// auto-forwarded messages) and changes nothing when a check fails;
// forgetLocked takes back only this send's history.
func TestSendPlan(t *testing.T) {
	l := sendLimits{kind: "queue", name: "q", maxMessageKB: 1, maxSizeMB: 1, dedup: true, window: int64(time.Minute)}
	var hist dedupHistory
	next := int64(7)
	st := sendState{id: 1, nextSeq: &next, dedup: &hist}

	pend := pendOf("a", "b", "a")
	seqs := make([]int64, 3)
	p1, err := l.planLocked(st, pend, 300, 0, false, seqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if seqs[0] != 7 || seqs[2] != 9 || next != 10 {
		t.Fatalf("seqs %v, next %d", seqs, next)
	}
	if pend[0].drop || pend[1].drop || !pend[2].drop {
		t.Fatal("the repeat within the send is not the one dropped")
	}
	if len(p1.ops) != 2 || len(p1.waits) != 0 {
		t.Fatalf("ops %d (want a history value per new id), waits %d", len(p1.ops), len(p1.waits))
	}

	pend2 := pendOf("b", "c")
	p2, err := l.planLocked(st, pend2, 200, 1, false, make([]int64, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !pend2[0].drop || len(p2.waits) != 1 || p2.waits[0] != p1.w {
		t.Fatal("a duplicate of an in-flight send does not wait for it")
	}

	fw := pendOf("c")
	if _, err := l.planLocked(st, fw, 100, 2, true, make([]int64, 1), nil); err != nil || fw[0].drop {
		t.Fatalf("an auto-forwarded message was checked: %v, drop %v", err, fw[0].drop)
	}

	tooBig := pendOf("d")
	tooBig[0].data = make([]byte, 2000)
	before := next
	if _, err := l.planLocked(st, tooBig, 2000, 3, false, make([]int64, 1), nil); err == nil || next != before {
		t.Fatalf("a refused send: %v, next %d → %d", err, before, next)
	}

	p2.forgetLocked(&hist, pend2)
	if _, ok := hist.lookup(mustKey("c"), 4, l.window); ok {
		t.Fatal("forgetLocked kept the failed send's id")
	}
	if _, ok := hist.lookup(mustKey("b"), 4, l.window); !ok {
		t.Fatal("forgetLocked dropped another send's id")
	}
}

func mustKey(id string) string {
	k, _ := dedupKey(id)
	return k
}

// answer releases the send's duplicates with its outcome and reports
// the commit's failure, a deletion meanwhile, or an original's failure.
func TestSendPlanAnswer(t *testing.T) {
	ctx := context.Background()
	fail := errors.New("disk on fire")

	p := sendPlan{w: &sendWait{done: make(chan struct{})}}
	if _, err := p.answer(ctx, "q", nil, fail, nil); KindOf(err) != KindInternal {
		t.Fatalf("commit failed: %v", err)
	}
	select {
	case <-p.w.done:
	default:
		t.Fatal("the duplicates' wait is still open")
	}
	if p.w.err != fail {
		t.Fatal("the duplicates do not see the failure")
	}

	if _, err := (&sendPlan{}).answer(ctx, "q", nil, nil, errEntityNotFound("q")); KindOf(err) != KindNotFound {
		t.Fatalf("deleted meanwhile: %v", err)
	}
	if seqs, err := (&sendPlan{}).answer(ctx, "q", []int64{1}, nil, errClosed()); err != nil || len(seqs) != 1 {
		t.Fatalf("closed meanwhile (the messages are durable): %v %v", seqs, err)
	}

	orig := &sendWait{done: make(chan struct{}), err: fail}
	close(orig.done)
	if _, err := (&sendPlan{waits: []*sendWait{orig}}).answer(ctx, "q", nil, nil, nil); KindOf(err) != KindInternal {
		t.Fatalf("the original failed: %v", err)
	}
	pending := &sendWait{done: make(chan struct{})}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := (&sendPlan{waits: []*sendWait{pending}}).answer(cctx, "q", nil, nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while the original is in flight: %v", err)
	}
}
