package history

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) int64 { return t0.Add(d).UnixNano() }

func TestOffIsNil(t *testing.T) {
	if New(Config{}) != nil {
		t.Fatal("mode off must give a nil log")
	}
}

func TestRecordAndLookup(t *testing.T) {
	l := New(Config{Mode: On})
	tok := [16]byte{1, 2, 3}
	l.Record("Orders", 7, "m-1", Event{At: at(0), Kind: Enqueued, By: "link s on connection c"})
	l.Record("orders", 7, "", Event{At: at(time.Second), Kind: Delivered, LockToken: tok, Until: at(time.Minute), DeliveryCount: 1, By: "link r on connection c"})
	l.Record("orders", 7, "", Event{At: at(2 * time.Second), Kind: DeadLettered, ToSub: 1, Reason: "why", Description: "because", LockToken: tok})
	got := l.BySeq(t0, "ORDERS", 7)
	if len(got) != 1 || got[0].MessageID != "m-1" || got[0].Entity != "Orders" || len(got[0].Events) != 3 {
		t.Fatalf("BySeq = %+v", got)
	}
	ev := got[0].Events
	if ev[0].Kind != "enqueued" || ev[0].Link != "link s on connection c" {
		t.Errorf("enqueue event %+v", ev[0])
	}
	if ev[1].Kind != "delivered" || ev[1].LockToken == "" || ev[1].LockedUntil == nil || !ev[1].LockedUntil.Equal(t0.Add(time.Minute)) {
		t.Errorf("delivery event %+v", ev[1])
	}
	if ev[2].MovedTo != "$DeadLetterQueue" || ev[2].Reason != "why" || ev[2].Description != "because" {
		t.Errorf("dead-letter event %+v", ev[2])
	}
	if ids := l.ByMessageID(t0, "orders", "m-1"); len(ids) != 1 || ids[0].SequenceNumber != 7 {
		t.Errorf("ByMessageID = %+v", ids)
	}
	if l.BySeq(t0, "orders", 8) != nil || l.ByMessageID(t0, "other", "m-1") != nil {
		t.Error("unknown message found")
	}
}

func TestTraceFollowsRoutesAndForwards(t *testing.T) {
	l := New(Config{Mode: On})
	l.Record("t", 1, "m", Event{At: at(0), Kind: Enqueued})
	l.Record("t", 1, "", Event{At: at(0), Kind: Routed, Peer: "t/Subscriptions/a", PeerSeq: 1})
	l.Record("t/Subscriptions/a", 1, "m", Event{At: at(0), Kind: Enqueued, Peer: "t", PeerSeq: 1})
	l.Record("t/Subscriptions/a", 1, "", Event{At: at(0), Kind: Forwarded, Peer: "q", PeerSeq: 9, Gone: true})
	l.Record("q", 9, "m", Event{At: at(0), Kind: Enqueued, Peer: "t/Subscriptions/a", PeerSeq: 1})
	got := l.BySeq(t0, "t", 1)
	if len(got) != 3 || got[1].Entity != "t/Subscriptions/a" || got[2].Entity != "q" || got[2].SequenceNumber != 9 {
		t.Fatalf("trace = %+v", got)
	}
	if got[2].Events[0].From != "t/Subscriptions/a" || got[1].Events[1].To != "q" {
		t.Errorf("peers: %+v", got)
	}
}

func TestSampled(t *testing.T) {
	l := New(Config{Mode: Sampled, SampleEvery: 10})
	for seq := int64(1); seq <= 100; seq++ {
		l.Record("q", seq, "", Event{At: at(0), Kind: Enqueued})
	}
	if s := l.Stats(); s.Messages != 10 {
		t.Fatalf("sampled 1 in 10 of 100 kept %d", s.Messages)
	}
	if l.BySeq(t0, "q", 30) == nil || l.BySeq(t0, "q", 31) != nil {
		t.Error("sampling is not by sequence number")
	}
}

func TestPerEntityBound(t *testing.T) {
	l := New(Config{Mode: On, MaxMessagesPerEntity: 5})
	for seq := int64(1); seq <= 20; seq++ {
		l.Record("q", seq, fmt.Sprint("id", seq), Event{At: at(0), Kind: Enqueued})
		l.Record("other", seq, "", Event{At: at(0), Kind: Enqueued})
	}
	// Touching 16 keeps it; the least recently touched goes.
	l.Record("q", 16, "", Event{At: at(0), Kind: Delivered})
	l.Record("q", 21, "", Event{At: at(0), Kind: Enqueued})
	if s := l.Stats(); s.Messages != 10 || s.Entities != 2 {
		t.Fatalf("stats %+v", s)
	}
	if l.BySeq(t0, "q", 16) == nil || l.BySeq(t0, "q", 17) != nil || l.BySeq(t0, "q", 15) != nil {
		t.Error("wrong message evicted")
	}
	if l.ByMessageID(t0, "q", "id3") != nil {
		t.Error("message id index kept an evicted message")
	}
}

func TestWindow(t *testing.T) {
	l := New(Config{Mode: On, Window: time.Minute})
	l.Record("q", 1, "", Event{At: at(0), Kind: Enqueued})
	l.Record("q", 2, "", Event{At: at(50 * time.Second), Kind: Enqueued})
	if l.BySeq(t0.Add(70*time.Second), "q", 1) != nil {
		t.Error("message older than the window kept")
	}
	if l.BySeq(t0.Add(70*time.Second), "q", 2) == nil {
		t.Error("message inside the window forgotten")
	}
	if s := l.Stats(); s.Messages != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestMaxEventsKeepsFirst(t *testing.T) {
	l := New(Config{Mode: On, MaxEventsPerMessage: 4})
	l.Record("q", 1, "", Event{At: at(0), Kind: Enqueued})
	for i := range 10 {
		l.Record("q", 1, "", Event{At: at(time.Duration(i+1) * time.Second), Kind: Renewed})
	}
	m := l.BySeq(t0, "q", 1)[0]
	if len(m.Events) != 4 || m.Events[0].Kind != "enqueued" || m.Omitted != 7 || !m.Events[3].Time.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("history %+v", m)
	}
}

// TestMemoryBoundUnderAttack: many entities × many messages × long strings
// never take the log past MaxBytes, and the bytes it counts match what it
// holds once everything is evicted.
func TestMemoryBoundUnderAttack(t *testing.T) {
	const limit = MinMaxBytes
	l := New(Config{Mode: On, MaxBytes: limit, MaxMessagesPerEntity: 1 << 20})
	long := strings.Repeat("x", 10_000)
	for e := range 300 {
		name := fmt.Sprintf("entity-%d-%s", e, long[:200])
		for seq := int64(1); seq <= 50; seq++ {
			l.Record(name, seq, long, Event{At: at(0), Kind: Enqueued, By: long, Reason: long, Description: long, Peer: long})
			l.Record(name, seq, "", Event{At: at(0), Kind: Delivered, By: long})
			if s := l.Stats(); s.Bytes > limit {
				t.Fatalf("%d bytes held, over the bound %d", s.Bytes, limit)
			}
		}
	}
	s := l.Stats()
	if s.Evicted == 0 || s.Messages == 0 {
		t.Fatalf("stats %+v", s)
	}
	// Strings were cut: no event holds more than maxString of any one.
	for _, m := range l.BySeq(t0, fmt.Sprintf("entity-%d-%s", 299, long[:200]), 50) {
		for _, ev := range m.Events {
			if len(ev.Link) > maxString || len(ev.Reason) > maxString {
				t.Fatalf("string kept whole: %d bytes", len(ev.Link))
			}
		}
	}
	// Everything leaves: the counts go back to zero.
	l.mu.Lock()
	l.expireLocked(t0.Add(2 * DefaultWindow).UnixNano())
	l.mu.Unlock()
	if s := l.Stats(); s.Bytes != 0 || s.Messages != 0 || s.Entities != 0 {
		t.Fatalf("after eviction %+v", s)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"off": Off, "Sampled": Sampled, "on": On} {
		if m, ok := ParseMode(in); !ok || m != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, m, ok)
		}
	}
	if _, ok := ParseMode("sometimes"); ok {
		t.Error("bad mode accepted")
	}
}

// TestHeapWithinBound measures the heap the log really takes when full:
// within its MaxBytes (plus slack for the maps' growth).
func TestHeapWithinBound(t *testing.T) {
	const limit = 8 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := New(Config{Mode: On, MaxBytes: limit, MaxMessagesPerEntity: 1 << 20})
	for e := range 2000 {
		name := fmt.Sprintf("queue-%d", e)
		for seq := int64(1); seq <= 100; seq++ {
			l.Record(name, seq, fmt.Sprintf("message-%d-%d", e, seq), Event{At: at(0), Kind: Enqueued, By: "link sender on connection c"})
			l.Record(name, seq, "", Event{At: at(0), Kind: Delivered, By: "link receiver on connection c"})
			l.Record(name, seq, "", Event{At: at(0), Kind: Completed})
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	s := l.Stats()
	t.Logf("counted %d bytes for %d messages; heap grew %d bytes", s.Bytes, s.Messages, grew)
	if s.Bytes > limit || grew > limit*3/2 {
		t.Fatalf("counted %d, heap grew %d: over the bound %d", s.Bytes, grew, limit)
	}
	runtime.KeepAlive(l)
}

func TestSameMessageIDTwice(t *testing.T) {
	l := New(Config{Mode: On, MaxMessagesPerEntity: 3})
	for seq := int64(1); seq <= 3; seq++ {
		l.Record("q", seq, "dup", Event{At: at(0), Kind: Enqueued})
	}
	if got := l.ByMessageID(t0, "q", "dup"); len(got) != 3 || got[0].SequenceNumber != 1 || got[2].SequenceNumber != 3 {
		t.Fatalf("3 with one id: %+v", got)
	}
	l.Record("q", 2, "", Event{At: at(0), Kind: Delivered}) // 1 is now the least recently touched
	l.Record("q", 4, "other", Event{At: at(0), Kind: Enqueued})
	got := l.ByMessageID(t0, "q", "dup")
	if len(got) != 2 || got[0].SequenceNumber != 2 || got[1].SequenceNumber != 3 {
		t.Fatalf("after evicting 1: %+v", got)
	}
}
