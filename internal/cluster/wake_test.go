package cluster

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/store"
)

// countingLander lands as fakeLander does, tells landed of every call
// and records the most calls in progress at once for one unit; gate, if
// set, holds each call until it is closed.
type countingLander struct {
	fakeLander
	landed  chan uint64
	gate    chan struct{}
	mu      sync.Mutex
	running map[uint64]int
	most    int
}

func (l *countingLander) LandTransfers(ctx context.Context, u uint64, xs []store.Transfer) (int, error) {
	l.mu.Lock()
	l.running[u]++
	l.most = max(l.most, l.running[u])
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		<-gate
	}
	n, err := l.fakeLander.LandTransfers(ctx, u, xs)
	l.mu.Lock()
	l.running[u]--
	l.mu.Unlock()
	l.landed <- u
	return n, err
}

func never(time.Duration) (<-chan time.Time, func()) { return nil, func() {} }

// TestWake: a commit's Transferred wakes the node serving the target
// unit (SendWake to its address, from the last poll), which lands it
// without waiting for its landing poll (the tickers never tick here); a
// unit this node serves is landed here without a send; an unknown unit
// is skipped. Transfers committed while a wake is on its way coalesce
// into one more wake. A node ignores a wake for a unit it does not serve,
// and a burst of wakes lands a unit one call at a time. The loops stop
// with the node's context (goleak).
func TestWake(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newCluster(t, 8)
	a, b := c.add("a"), c.add("b")
	c.settle()
	c.round()
	var ua, ub uint64
	for u := range a.n.Owned() {
		ua = u
	}
	for u := range b.n.Owned() {
		ub = u
	}
	if ua == 0 || ub == 0 {
		t.Fatalf("units not shared: a %v, b %v", a.n.Owned(), b.n.Owned())
	}
	o := &fakeOutbox{pending: map[uint64][]store.Transfer{}, orphans: map[uint64][]store.Transfer{}}
	lander := func() *countingLander {
		return &countingLander{fakeLander: fakeLander{o: o, landed: map[uint64][]uint64{}}, landed: make(chan uint64, 64), running: map[uint64]int{}}
	}
	la, lb := lander(), lander()
	type sent struct {
		node, addr string
		units      []uint64
	}
	sends := make(chan sent, 64)
	var sendGate atomic.Pointer[chan struct{}]
	a.n.o.SendWake = func(ctx context.Context, node, addr string, units []uint64) error {
		sends <- sent{node, addr, slices.Clone(units)}
		if g := sendGate.Load(); g != nil {
			<-*g
		}
		c.nodes[node].n.Wake(units)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, m := range []*member{a, b} {
		m.n.o.Outbox, m.n.o.NewTicker = o, never
		m.n.wg.Add(2)
		go m.n.landLoop(ctx)
		go m.n.wakeLoop(ctx)
	}
	a.n.o.Lander, b.n.o.Lander = la, lb
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			a.n.wg.Wait()
			b.n.wg.Wait()
		}
	}
	defer stop()
	wait := func(ch <-chan uint64, want uint64) {
		t.Helper()
		select {
		case u := <-ch:
			if u != want {
				t.Fatalf("landed unit %d, want %d", u, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("unit %d not landed after a wake", want)
		}
	}
	o.mu.Lock()
	o.pending[ub] = transfers(ub, ua, 1, 2)
	o.pending[ua] = transfers(ua, ub, 3)
	o.mu.Unlock()
	a.n.Transferred([]uint64{ub, ua, 999})
	wait(lb.landed, ub)
	wait(la.landed, ua)
	if s := <-sends; s.node != "b" || s.addr != "b:1" || !slices.Equal(s.units, []uint64{ub}) {
		t.Fatalf("wake sent %+v, want b at b:1 for unit %d only", s, ub)
	}
	if !slices.Equal(lb.fakeLander.landed[ub], []uint64{1, 2}) {
		t.Fatalf("b landed %v", lb.fakeLander.landed[ub])
	}

	// Commits while a wake is on its way: one more wake, not one each.
	g := make(chan struct{})
	sendGate.Store(&g)
	a.n.Transferred([]uint64{ub})
	<-sends
	for range 1000 {
		a.n.Transferred([]uint64{ub})
	}
	close(g)
	select {
	case <-sends:
	case <-time.After(10 * time.Second):
		t.Fatal("the commits made during a wake did not wake again")
	}
	sendGate.Store(nil)

	// A wake for a unit b does not serve is ignored.
	b.n.Wake([]uint64{ua, 999})
	b.n.wake.mu.Lock()
	_, kept := b.n.wake.in[ua]
	_, kept2 := b.n.wake.in[999]
	ignored := !kept && !kept2
	b.n.wake.mu.Unlock()
	if !ignored {
		t.Fatal("a wake for a unit the node does not serve was kept")
	}

	// A burst of wakes while a landing is in progress: one landing at a
	// time, and at most one more afterwards.
	hold := make(chan struct{})
	lb.mu.Lock()
	lb.gate = hold
	lb.mu.Unlock()
	o.mu.Lock()
	o.pending[ub] = transfers(ub, ua, 4)
	o.mu.Unlock()
	b.n.Wake([]uint64{ub})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				b.n.Wake([]uint64{ub})
			}
		})
	}
	wg.Wait()
	b.n.wake.mu.Lock()
	queued := len(b.n.wake.in)
	b.n.wake.mu.Unlock()
	if queued > 1 {
		t.Fatalf("a burst of wakes for one unit holds %d entries", queued)
	}
	close(hold)
	wait(lb.landed, ub)
	lb.mu.Lock()
	most := lb.most
	lb.mu.Unlock()
	if most != 1 {
		t.Fatalf("a unit was landed by %d calls at once", most)
	}
	stop()
	if n := len(sends); n != 0 {
		t.Fatalf("%d more wakes sent than the two asked for", n)
	}
}

// TestWakeBounded: past maxWakeUnits units waiting, wakes are dropped
// and counted, and the set does not grow.
func TestWakeBounded(t *testing.T) {
	w := newWakeState()
	units := make([]uint64, maxWakeUnits+100)
	for i := range units {
		units[i] = uint64(i + 1)
	}
	w.add(w.out, w.outCh, units)
	w.add(w.out, w.outCh, units)
	if len(w.out) != maxWakeUnits || w.dropped != 200 {
		t.Fatalf("%d units held, %d dropped", len(w.out), w.dropped)
	}
	if got := w.take(w.out); len(got) != maxWakeUnits || len(w.out) != 0 || got[0] != 1 {
		t.Fatalf("take: %d units, %d left", len(got), len(w.out))
	}
}

func TestWakeMessage(t *testing.T) {
	for _, units := range [][]uint64{{0}, {17}, {1, 4294967298, ^uint64(0)}} {
		got, err := ParseWake(AppendWake(nil, units))
		if err != nil || !slices.Equal(got, units) {
			t.Fatalf("%v: %v, %v", units, got, err)
		}
	}
	many := make([]uint64, MaxWakeUnits)
	for i := range many {
		many[i] = ^uint64(0) - uint64(i)
	}
	if b := AppendWake(nil, many); len(b) != MaxWakeBytes {
		t.Fatalf("the longest message is %d bytes, MaxWakeBytes %d", len(b), MaxWakeBytes)
	}
	for _, bad := range []string{"", " ", "1 ", " 1", "1  2", "01", "-1", "1,2", "18446744073709551616", "x"} {
		if _, err := ParseWake([]byte(bad)); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if _, err := ParseWake(AppendWake(nil, append(make([]uint64, MaxWakeUnits), 1))); err == nil {
		t.Fatal("a message naming too many units accepted")
	}
}

// FuzzParseWake: any input is refused or read back to the same bytes.
func FuzzParseWake(f *testing.F) {
	for _, s := range []string{"1", "17 4294967298", "18446744073709551615", "01", "1 ", "", "1  2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		units, err := ParseWake(b)
		if err != nil {
			return
		}
		if len(units) == 0 || len(units) > MaxWakeUnits {
			t.Fatalf("%d units", len(units))
		}
		if got := AppendWake(nil, units); string(got) != string(b) {
			t.Fatalf("%q read back as %q", b, got)
		}
	})
}
