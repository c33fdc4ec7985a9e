package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

func smsg(session, body string) *message.Message {
	return &message.Message{Body: []byte(body), SessionID: session}
}

func sessionQueue(p *QueueProperties) { p.RequiresSession = true }

func sessionSub(p *SubscriptionProperties) { p.RequiresSession = true }

func (e *env) accept(path, session string) *Receiver {
	e.t.Helper()
	r, err := e.b.AcceptSession(path, session, PeekLock)
	if err != nil {
		e.t.Fatalf("AcceptSession(%s, %s): %v", path, session, err)
	}
	e.t.Cleanup(func() { r.Close() })
	return r
}

func (e *env) acceptNext(path string) *Receiver {
	e.t.Helper()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := e.b.AcceptNextSession(c, path, PeekLock)
	if err != nil {
		e.t.Fatalf("AcceptNextSession(%s): %v", path, err)
	}
	e.t.Cleanup(func() { r.Close() })
	return r
}

func take(t testing.TB, r *Receiver, max int) []*Delivery {
	t.Helper()
	ds, err := r.TryReceive(max)
	if err != nil {
		t.Fatalf("TryReceive: %v", err)
	}
	return ds
}

func counts(ds []*Delivery) []uint32 {
	out := make([]uint32, len(ds))
	for i, d := range ds {
		out[i] = d.DeliveryCount
	}
	return out
}

func TestSessionRules(t *testing.T) {
	e := newEnv(t)
	e.queue("sq", sessionQueue)
	e.queue("plain")

	// A send without a session id is refused, the whole batch.
	err := e.b.Send(ctx, "sq", []*message.Message{smsg("a", "1"), msg("2")})
	wantKind(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "SessionId was not set") {
		t.Fatalf("text: %v", err)
	}
	err = e.b.Send(ctx, "sq", []*message.Message{smsg(strings.Repeat("s", MaxSessionIDLength+1), "x")})
	wantKind(t, err, ErrInvalidArgument)
	e.send("sq", smsg(strings.Repeat("s", MaxSessionIDLength), "x"))

	// Non-session receivers on a session entity, session receivers on
	// other entities and sub-queues are refused.
	_, err = e.b.OpenReceiver("sq", PeekLock)
	wantKind(t, err, ErrNotAllowed)
	if err.Error() != "It is not possible for an entity that requires sessions to create a non-sessionful message receiver." {
		t.Fatalf("text: %q", err)
	}
	_, err = e.b.AcceptSession("plain", "a", PeekLock)
	wantKind(t, err, ErrNotAllowed)
	_, err = e.b.AcceptNextSession(ctx, "plain", PeekLock)
	wantKind(t, err, ErrNotAllowed)
	_, err = e.b.AcceptSession("sq/$DeadLetterQueue", "a", PeekLock)
	wantKind(t, err, ErrNotAllowed)
	// "" is a session id of its own.
	r, err := e.b.AcceptSession("sq", "", PeekLock)
	if err != nil || r.SessionID() != "" {
		t.Fatalf("AcceptSession(\"\"): %v", err)
	}
	r.Close()
	_, err = e.b.AcceptSession("missing", "a", PeekLock)
	wantKind(t, err, ErrNotFound)
	// The dead-letter queue is read by a normal receiver.
	e.receiver("sq/$DeadLetterQueue", PeekLock)
	// RequiresSession is immutable.
	info, _ := e.b.GetQueue("sq")
	p := info.Properties
	p.RequiresSession = false
	_, err = e.b.UpdateQueue("sq", p)
	wantKind(t, err, ErrNotAllowed)
}

func TestSessionAcceptNextWaits(t *testing.T) {
	e := newEnv(t)
	e.queue("sq", sessionQueue)
	// Nothing available: the wait ends with the context.
	c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := e.b.AcceptNextSession(c, "sq", PeekLock)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	// An empty session that is locked is not "next"; a send wakes the
	// waiter with the session that got a message.
	e.accept("sq", "busy")
	got := make(chan *Receiver)
	go func() {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := e.b.AcceptNextSession(c, "sq", PeekLock)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	time.Sleep(10 * time.Millisecond)
	e.send("sq", smsg("busy", "x"), smsg("free", "y"))
	r := <-got
	defer r.Close()
	if r.SessionID() != "free" {
		t.Fatalf("next session %q", r.SessionID())
	}
	// Sessions are taken in the order they became available.
	e.send("sq", smsg("s3", "1"), smsg("s1", "2"), smsg("s2", "3"))
	var order []string
	for range 3 {
		order = append(order, e.acceptNext("sq").SessionID())
	}
	if !slices.Equal(order, []string{"s3", "s1", "s2"}) {
		t.Fatalf("order %v", order)
	}
}

func TestSessionLockRenewAndExpiry(t *testing.T) {
	e := newEnv(t)
	e.queue("sq", sessionQueue, func(p *QueueProperties) { p.MaxDeliveryCount = 3 })
	e.send("sq", smsg("a", "1"), smsg("a", "2"), smsg("a", "3"))
	a := e.accept("sq", "a")
	ds := take(t, a, 2)
	// Renewing moves the session's and its messages' locks.
	e.advance(40 * time.Second)
	until, err := a.RenewSessionLock(ctx)
	if err != nil || !until.Equal(t0.Add(100*time.Second)) {
		t.Fatalf("renew %v %v", until, err)
	}
	if u2, err := e.b.RenewSessionLock(ctx, "sq", "a"); err != nil || !u2.Equal(until) {
		t.Fatalf("renew by id %v %v", u2, err)
	}
	if !a.SessionLockedUntil().Equal(until) {
		t.Fatalf("locked until %v", a.SessionLockedUntil())
	}
	// A message's own lock cannot be renewed.
	_, err = e.b.RenewLock(ctx, "sq", []uuid.UUID{ds[0].LockToken})
	wantKind(t, err, ErrNotAllowed)
	e.advance(30 * time.Second) // past the original minute
	e.complete("sq", ds[0].LockToken)

	// Expiry: the receiver learns it, its locks are gone with raised
	// counts, and the session goes to the next receiver.
	lost := a.SessionLost()
	e.advance(30 * time.Second)
	e.b.Tick()
	select {
	case <-lost:
	default:
		t.Fatal("SessionLost not closed")
	}
	_, err = a.TryReceive(1)
	wantKind(t, err, ErrSessionLockLost)
	err = e.b.Complete(ctx, "sq", ds[1].LockToken)
	wantKind(t, err, ErrSessionLockLost)
	_, err = a.RenewSessionLock(ctx)
	wantKind(t, err, ErrSessionLockLost)
	_, err = e.b.RenewSessionLock(ctx, "sq", "a")
	wantKind(t, err, ErrSessionLockLost)
	b := e.acceptNext("sq")
	got := take(t, b, 10)
	if !slices.Equal(bodies(got), []string{"2", "3"}) || !slices.Equal(counts(got), []uint32{2, 1}) {
		t.Fatalf("after expiry %v %v", bodies(got), counts(got))
	}
	// A session lock expiring on a message's last delivery dead-letters
	// it (MaxDeliveryCount 3).
	e.advance(time.Minute)
	c := e.acceptNext("sq")
	got = take(t, c, 10)
	if !slices.Equal(counts(got), []uint32{3, 2}) {
		t.Fatalf("third round %v", counts(got))
	}
	e.advance(time.Minute)
	e.b.Tick()
	dl := e.recv("sq/$DeadLetterQueue", PeekLock, 10)
	if len(dl) != 1 || body(dl[0]) != "2" || prop(dl[0], PropDeadLetterReason) != ReasonMaxDeliveryCountExceeded || dl[0].Message.SessionID != "a" {
		t.Fatalf("dead letters %v", bodies(dl))
	}
}

func TestSessionReadyWakes(t *testing.T) {
	e := newEnv(t)
	e.queue("sq", sessionQueue)
	a := e.accept("sq", "a")
	ready := a.Ready()
	e.send("sq", smsg("b", "other"))
	select {
	case <-ready:
		t.Fatal("woken by another session's message")
	default:
	}
	e.send("sq", smsg("a", "mine"))
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken")
	}
	// Losing the lock wakes it too.
	take(t, a, 1)
	ready = a.Ready()
	e.advance(time.Minute)
	e.b.Tick()
	select {
	case <-ready:
	default:
		t.Fatal("not woken by the lost lock")
	}
}

func TestSessionState(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("sq", sessionQueue)
		// The state needs the session's lock.
		_, err := e.b.GetSessionState(ctx, "sq", "a")
		wantKind(t, err, ErrSessionLockLost)
		wantKind(t, e.b.SetSessionState(ctx, "sq", "a", []byte("x")), ErrSessionLockLost)
		a := e.accept("sq", "a")
		if st, err := a.SessionState(ctx); err != nil || st != nil {
			t.Fatalf("initial state %q %v", st, err)
		}
		if err := a.SetSessionState(ctx, []byte("v1")); err != nil {
			t.Fatal(err)
		}
		if st, err := e.b.GetSessionState(ctx, "sq", "a"); err != nil || string(st) != "v1" {
			t.Fatalf("state %q %v", st, err)
		}
		if err := e.b.SetSessionState(ctx, "sq", "a", []byte("v2")); err != nil {
			t.Fatal(err)
		}
		// Too large.
		wantKind(t, a.SetSessionState(ctx, make([]byte, 256*1024+1)), ErrMessageTooLarge)
		big := bytes.Repeat([]byte("s"), 256*1024)
		e.accept("sq", "big")
		if err := e.b.SetSessionState(ctx, "sq", "big", big); err != nil {
			t.Fatal(err)
		}
		// A session with state and no messages is kept and listed.
		a.Close()
		if ids, err := e.b.ListSessions(ctx, "sq", time.Time{}, 0, 0); err != nil || !slices.Equal(ids, []string{"a", "big"}) {
			t.Fatalf("sessions %v %v", ids, err)
		}
		e.advance(time.Minute)
		reopen()
		a = e.accept("sq", "a")
		if st, err := a.SessionState(ctx); err != nil || string(st) != "v2" {
			t.Fatalf("state after restart %q %v", st, err)
		}
		if st, err := e.b.GetSessionState(ctx, "sq", "big"); err == nil || st != nil {
			t.Fatalf("state of an unlocked session %q %v", st, err)
		}
		b := e.accept("sq", "big")
		if st, _ := b.SessionState(ctx); !bytes.Equal(st, big) {
			t.Fatalf("big state after restart: %d bytes", len(st))
		}
		// Empty or nil clears it.
		if err := a.SetSessionState(ctx, []byte{}); err != nil {
			t.Fatal(err)
		}
		if err := b.SetSessionState(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if st, _ := a.SessionState(ctx); st != nil {
			t.Fatalf("cleared state %q", st)
		}
		a.Close()
		b.Close()
		reopen()
		if ids, _ := e.b.ListSessions(ctx, "sq", time.Time{}, 0, 0); len(ids) != 0 {
			t.Fatalf("sessions after clearing %v", ids)
		}
	})
}

func TestSessionRestart(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("sq", sessionQueue)
		e.send("sq", smsg("a", "1"), smsg("b", "2"), smsg("a", "3"), smsg("a", "4"))
		a := e.accept("sq", "a")
		ds := take(t, a, 1)
		e.abandon("sq", ds[0].LockToken, nil) // count 1, persisted with the session id
		d := take(t, a, 1)[0]
		if err := e.b.Defer(ctx, "sq", d.LockToken, nil); err != nil {
			t.Fatal(err)
		}
		take(t, a, 1) // "3": locked when the broker stops
		reopen()
		// Sessions are rebuilt from Meta: b's message came first.
		if r := e.acceptNext("sq"); r.SessionID() != "b" {
			t.Fatalf("first session %q", r.SessionID())
		}
		a = e.acceptNext("sq")
		got := take(t, a, 10)
		if !slices.Equal(bodies(got), []string{"3", "4"}) || !slices.Equal(counts(got), []uint32{1, 1}) {
			t.Fatalf("session a after restart %v %v", bodies(got), counts(got))
		}
		def, err := a.ReceiveDeferred(ctx, []int64{d.SequenceNumber}, PeekLock)
		if err != nil || len(def) != 1 || body(def[0]) != "1" || def[0].DeliveryCount != 2 || def[0].State != StateDeferred {
			t.Fatalf("deferred after restart %v %v", def, err)
		}
		// Scheduled messages of a session survive too.
		if _, err := e.b.Schedule(ctx, "sq", []*message.Message{smsg("c", "later")}, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		reopen()
		if ids, _ := e.b.ListSessions(ctx, "sq", time.Time{}, 0, 0); !slices.Equal(ids, []string{"a", "b", "c"}) {
			t.Fatalf("sessions %v", ids)
		}
		e.advance(time.Hour)
		c := e.accept("sq", "c")
		if got := take(t, c, 10); len(got) != 1 || body(got[0]) != "later" {
			t.Fatalf("scheduled %v", bodies(got))
		}
	})
}

func TestSessionSubscription(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.topic("t")
		sp := e.sub("t", "s", sessionSub)
		plain := e.sub("t", "p")
		e.send("t", smsg("a", "1"), msg("no session"), smsg("b", "2"), smsg("a", "3"))
		// The session-less copy is dead-lettered in the session
		// subscription only.
		dl := e.recv(sp+"/$DeadLetterQueue", PeekLock, 10)
		if len(dl) != 1 || body(dl[0]) != "no session" ||
			prop(dl[0], PropDeadLetterReason) != ReasonSessionIDNull ||
			prop(dl[0], PropDeadLetterErrorDescription) != "Session enabled entity doesn't allow a message whose session identifier is null." {
			t.Fatalf("dead letters %v", dl)
		}
		if c := e.subCounts("t", "p"); c.Active != 4 {
			t.Fatalf("plain subscription %+v", c)
		}
		_, err := e.b.OpenReceiver(sp, PeekLock)
		wantKind(t, err, ErrNotAllowed)
		_, err = e.b.AcceptSession(plain, "a", PeekLock)
		wantKind(t, err, ErrNotAllowed)
		a := e.accept(sp, "a")
		ds := take(t, a, 1)
		reopen()
		// Copies (shared data) come back in their sessions.
		a = e.acceptNext(sp)
		if got := take(t, a, 10); a.SessionID() != "a" || !slices.Equal(bodies(got), []string{"1", "3"}) || got[0].DeliveryCount != 1 || got[0].SequenceNumber != ds[0].SequenceNumber {
			t.Fatalf("session a %v", bodies(got))
		}
		b := e.acceptNext(sp)
		if got := take(t, b, 10); b.SessionID() != "b" || !slices.Equal(bodies(got), []string{"2"}) {
			t.Fatalf("session b %v", bodies(got))
		}
		// Scheduled topic messages join their session when fanned out.
		if _, err := e.b.Schedule(ctx, "t", []*message.Message{smsg("c", "later"), msg("later, no session")}, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		e.advance(time.Hour)
		c := e.acceptNext(sp)
		if got := take(t, c, 10); c.SessionID() != "c" || len(got) != 1 || body(got[0]) != "later" {
			t.Fatalf("scheduled %v", bodies(got))
		}
		if dl := e.recv(sp+"/$DeadLetterQueue", PeekLock, 10); len(dl) != 2 {
			t.Fatalf("dead letters %v", bodies(dl))
		}
	})
}

// TestSessionConcurrent drains many sessions with concurrent session
// receivers while senders add to them, checking each session's order.
func TestSessionConcurrent(t *testing.T) {
	e := newEnv(t)
	e.queue("sq", sessionQueue)
	const sessions, perSession, receivers = 20, 50, 4
	var sendWG sync.WaitGroup
	for s := range sessions {
		sendWG.Add(1)
		go func() {
			defer sendWG.Done()
			for i := range perSession {
				if err := e.b.Send(ctx, "sq", []*message.Message{smsg(fmt.Sprint(s), fmt.Sprint(i))}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	var wg sync.WaitGroup
	for range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				r, err := e.b.AcceptNextSession(c, "sq", PeekLock)
				cancel()
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						return
					}
					t.Error(err)
					return
				}
				for {
					ds, err := r.TryReceive(7)
					if err != nil {
						t.Error(err)
						break
					}
					if len(ds) == 0 {
						break
					}
					mu.Lock()
					for _, d := range ds {
						seen[r.SessionID()] = append(seen[r.SessionID()], body(d))
					}
					mu.Unlock()
					for _, d := range ds {
						if err := e.b.Complete(ctx, "sq", d.LockToken); err != nil {
							t.Error(err)
						}
					}
				}
				r.Close()
			}
		}()
	}
	sendWG.Wait()
	wg.Wait()
	for s := range sessions {
		got := seen[fmt.Sprint(s)]
		if len(got) != perSession {
			t.Fatalf("session %d: %d messages", s, len(got))
		}
		for i, b := range got {
			if b != fmt.Sprint(i) {
				t.Fatalf("session %d out of order: %v", s, got)
			}
		}
	}
	if c := e.counts("sq"); c.Total != 0 {
		t.Fatalf("left %+v", c)
	}
}

func TestSessionDeleteEntityWakes(t *testing.T) {
	e := newEnv(t)
	e.queue("sq", sessionQueue)
	a := e.accept("sq", "a")
	ready := a.Ready()
	errc := make(chan error, 1)
	go func() {
		_, err := e.b.AcceptNextSession(ctx, "sq", PeekLock)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := e.b.DeleteQueue("sq"); err != nil {
		t.Fatal(err)
	}
	<-ready
	_, err := a.TryReceive(1)
	wantKind(t, err, ErrNotFound)
	select {
	case err := <-errc:
		wantKind(t, err, ErrNotFound)
	case <-time.After(5 * time.Second):
		t.Fatal("AcceptNextSession not woken")
	}
	a.Close()
}

// BenchmarkSessions drains 100 sessions × 1,000 messages (1 KB, sent
// interleaved across the sessions) with 4 concurrent session receivers,
// each accepting the next available session, receiving in batches of 100
// and completing every message one by one (as an SDK does). Only the
// drain is timed. Reported:
//
//	msgs/s          messages received and completed per second
//	recv-min-%      share of the messages the least busy receiver handled (ideal 25)
//	recv-max-%      … the busiest receiver
//	order-displace  the largest distance between a session's place in the
//	                order sessions were accepted and its place in the order
//	                they got their first message (0: strictly oldest first)
//
// plain-baseline is the same drain of the same messages from a queue
// without sessions by 4 ordinary receivers, for comparison.
//
//	go test -run XXX -bench Sessions -benchtime 3x ./internal/broker/
func BenchmarkSessions(b *testing.B) {
	for _, tc := range []struct {
		name     string
		durable  bool
		sessions bool
	}{{"memstore", false, true}, {"memstore/plain-baseline", false, false}, {"filestore", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			const sessions, perSession, receivers, batch = 100, 1000, 4, 100
			var total time.Duration
			var agg sessionBenchStats
			for i := 0; i < b.N; i++ {
				var st store.Store = memstore.New()
				if tc.durable {
					fs, err := filestore.Open(filestore.Options{Dir: benchDir(b)})
					if err != nil {
						b.Fatal(err)
					}
					st = fs
				}
				br, err := Open(Options{Store: st, Clock: clock.Real{}})
				if err != nil {
					b.Fatal(err)
				}
				p := DefaultQueueProperties()
				p.RequiresSession = tc.sessions
				p.MaxSizeInMegabytes = 4096
				if _, err := br.CreateQueue("sq", p); err != nil {
					b.Fatal(err)
				}
				// Fill: 1,000 rounds, each one batch of one message per session.
				for m := range perSession {
					msgs := make([]*message.Message, sessions)
					for s := range sessions {
						msgs[s] = &message.Message{Body: payload1K, SessionID: fmt.Sprintf("session-%03d", s), MessageID: fmt.Sprint(m)}
					}
					if err := br.Send(ctx, "sq", msgs); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				start := time.Now()
				stats := drainSessions(b, br, "sq", tc.sessions, receivers, batch, sessions*perSession)
				total += time.Since(start)
				agg.add(stats)
				br.Close()
				st.Close()
			}
			n := float64(b.N * sessions * perSession)
			b.ReportMetric(n/total.Seconds(), "msgs/s")
			b.ReportMetric(agg.minShare/float64(b.N), "recv-min-%")
			b.ReportMetric(agg.maxShare/float64(b.N), "recv-max-%")
			if tc.sessions {
				b.ReportMetric(float64(agg.displace), "order-displace")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

type sessionBenchStats struct {
	minShare, maxShare float64
	displace           int
}

func (a *sessionBenchStats) add(s sessionBenchStats) {
	a.minShare += s.minShare
	a.maxShare += s.maxShare
	a.displace = max(a.displace, s.displace)
}

// drainSessions drains path with concurrent (session) receivers until
// want messages were completed and reports the fairness figures.
func drainSessions(b *testing.B, br *Broker, path string, sessions bool, receivers, batch, want int) sessionBenchStats {
	var (
		mu       sync.Mutex
		done     int
		perRecv  = make([]int, receivers)
		accepted []string // sessions in the order they were accepted
		wg       sync.WaitGroup
	)
	for i := range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if done >= want {
					mu.Unlock()
					return
				}
				mu.Unlock()
				var r *Receiver
				var err error
				if sessions {
					c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
					r, err = br.AcceptNextSession(c, path, PeekLock)
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						continue
					}
				} else {
					r, err = br.OpenReceiver(path, PeekLock)
				}
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				accepted = append(accepted, r.SessionID())
				mu.Unlock()
				for {
					ds, err := r.TryReceive(batch)
					if err != nil {
						b.Error(err)
						return
					}
					if len(ds) == 0 {
						break
					}
					for _, d := range ds {
						if err := br.Complete(ctx, path, d.LockToken); err != nil {
							b.Error(err)
							return
						}
					}
					mu.Lock()
					done += len(ds)
					perRecv[i] += len(ds)
					mu.Unlock()
				}
				r.Close()
			}
		}()
	}
	wg.Wait()
	var st sessionBenchStats
	st.minShare, st.maxShare = 100, 0
	for _, n := range perRecv {
		share := 100 * float64(n) / float64(want)
		st.minShare = min(st.minShare, share)
		st.maxShare = max(st.maxShare, share)
	}
	if !sessions {
		return st
	}
	// Sessions got their first message in the order session-000, 001, ….
	seen := map[string]bool{}
	rank := 0
	for _, id := range accepted {
		if seen[id] {
			continue
		}
		seen[id] = true
		var first int
		fmt.Sscanf(id, "session-%d", &first)
		st.displace = max(st.displace, abs(rank-first))
		rank++
	}
	return st
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// TestSessionEmptyID: "" is a session id of its own, as in Service Bus: a
// message sent with it is accepted by a session-enabled queue and
// subscription (one without any session id is not), delivered to the
// receiver of session "", and kept across a restart (Meta opt bit 2).
func TestSessionEmptyID(t *testing.T) {
	stores(t, func(t *testing.T, e *env, reopen func()) {
		e.queue("sq", sessionQueue)
		empty := func(body string) *message.Message {
			m := smsg("", body)
			m.EmptySessionID = true
			return m
		}
		if err := e.b.Send(ctx, "sq", []*message.Message{{Body: []byte("none")}}); KindOf(err) != KindInvalidArgument {
			t.Fatalf("send without a session id: %v", err)
		}
		e.send("sq", empty("1"), smsg("a", "2"), empty("3"))
		r := e.accept("sq", "")
		if got := take(t, r, 10); !slices.Equal(bodies(got), []string{"1", "3"}) || !got[0].Message.EmptySessionID {
			t.Fatalf("session \"\": %v", bodies(got))
		}
		r.Close()
		reopen()
		if ids, _ := e.b.ListSessions(ctx, "sq", time.Time{}, 0, 0); !slices.Equal(ids, []string{"", "a"}) {
			t.Fatalf("sessions after restart %q", ids)
		}
		r = e.accept("sq", "")
		if got := take(t, r, 10); !slices.Equal(bodies(got), []string{"1", "3"}) {
			t.Fatalf("session \"\" after restart: %v", bodies(got))
		}
	})
}
