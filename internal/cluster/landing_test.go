package cluster

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/store"
)

// fakeOutbox is an outbox in memory: pending transfers per target unit
// (in their order), and orphans per source unit.
type fakeOutbox struct {
	mu      sync.Mutex
	pending map[uint64][]store.Transfer
	orphans map[uint64][]store.Transfer
	fail    error
}

func (o *fakeOutbox) PendingTransfers(_ context.Context, u uint64, max int, _ int64) ([]store.Transfer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	xs := o.pending[u]
	return slices.Clone(xs[:min(max, len(xs))]), o.fail
}

func (o *fakeOutbox) OrphanTransfers(_ context.Context, us []uint64, max int) ([]store.Transfer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	xs := o.orphans[us[0]]
	return slices.Clone(xs[:min(max, len(xs))]), o.fail
}

func (o *fakeOutbox) TransferTargets(_ context.Context, us []uint64) ([]uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []uint64
	for _, u := range us {
		if len(o.pending[u]) > 0 || len(o.orphans[u]) > 0 {
			out = append(out, u)
		}
	}
	return out, o.fail
}

func (o *fakeOutbox) UnitSpec(context.Context, uint64) ([]byte, bool, error) { return nil, false, nil }

func (o *fakeOutbox) TransferBacklog(_ context.Context, u uint64, _ int) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending[u]), o.fail
}

// fakeLander lands by taking the transfers out of the outbox, recording
// the ids it landed per unit; refuse makes one unit's landings fail.
type fakeLander struct {
	o      *fakeOutbox
	mu     sync.Mutex
	landed map[uint64][]uint64
	refuse uint64
}

func (l *fakeLander) LandTransfers(_ context.Context, u uint64, xs []store.Transfer) (int, error) {
	if u == l.refuse {
		return 0, errors.New("refused")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	for _, x := range xs {
		l.landed[u] = append(l.landed[u], x.ID)
		list := &l.o.pending
		if x.TargetUnit != u {
			list = &l.o.orphans
		}
		(*list)[u] = slices.DeleteFunc((*list)[u], func(y store.Transfer) bool { return y.TransferKey == x.TransferKey })
	}
	return len(xs), nil
}

func transfers(target, source uint64, ids ...uint64) []store.Transfer {
	var xs []store.Transfer
	for _, id := range ids {
		xs = append(xs, store.Transfer{TransferKey: store.TransferKey{TargetUnit: target, SourceUnit: source, ID: id}})
	}
	return xs
}

// TestLanding: a node lands the transfers into the units it serves, more
// than one batch of them, in the outbox's order, then the orphans it
// takes back; never those of a unit it does not serve; a unit whose
// landing fails keeps its transfers for the next poll and does not stop
// the others; a node whose trust window ended lands nothing.
func TestLanding(t *testing.T) {
	c := newCluster(t, 4)
	a := c.add("a")
	c.settle()
	o := &fakeOutbox{pending: map[uint64][]store.Transfer{}, orphans: map[uint64][]store.Transfer{}}
	l := &fakeLander{o: o, landed: map[uint64][]uint64{}}
	a.n.o.Outbox, a.n.o.Lander = o, l
	ids := make([]uint64, landBatch+10)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	o.pending[1] = transfers(1, 9, ids...)
	o.orphans[1] = transfers(7, 1, 1000, 1001)
	o.pending[2] = transfers(2, 9, 5)
	o.pending[99] = transfers(99, 9, 1) // not a's
	l.refuse = 2
	ctx := context.Background()
	a.n.land(ctx)
	want := append(slices.Clone(ids), 1000, 1001)
	if got := l.landed[1]; !slices.Equal(got, want) {
		t.Fatalf("landed into unit 1: %d transfers, want %d in order", len(got), len(want))
	}
	if len(o.pending[2]) != 1 || len(l.landed[99]) != 0 || len(o.pending[99]) != 1 {
		t.Fatalf("unit 2 (refused) left %v, unit 99 (not served) landed %v", o.pending[2], l.landed[99])
	}
	l.refuse = 0
	a.n.land(ctx)
	if !slices.Equal(l.landed[2], []uint64{5}) {
		t.Fatalf("unit 2 at the next poll: %v", l.landed[2])
	}
	// The trust window ends: nothing lands.
	o.pending[3] = transfers(3, 9, 1)
	a.clk.Advance(10 * time.Second)
	a.n.land(ctx)
	if len(l.landed[3]) != 0 {
		t.Fatal("a node past its trust window landed transfers")
	}
	// An outbox that cannot be read: nothing happens, nothing breaks.
	o.fail = errors.New("database down")
	a.n.land(ctx)
}

// TestLandingLoopStops: the landing loop runs on the poll ticker and
// stops with the node (Halt, as Stop does); no goroutine is left.
func TestLandingLoopStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newCluster(t, 2)
	h := c.db.Node("a")
	ab := newLoader(h)
	o := &fakeOutbox{pending: map[uint64][]store.Transfer{}, orphans: map[uint64][]store.Transfer{}}
	l := &fakeLander{o: o, landed: map[uint64][]uint64{}}
	// Each loop gets its own ticker; a round ticks every one of them.
	var tmu sync.Mutex
	var ticks []chan time.Time
	n, err := New(Options{ID: "a", Membership: h, Leases: h, Units: ab, Clock: c.dbClk, Outbox: o, Lander: l,
		Heartbeat: time.Second, TTL: 5 * time.Second, Margin: time.Second, Poll: 2 * time.Second,
		NewTicker: func(time.Duration) (<-chan time.Time, func()) {
			tmu.Lock()
			defer tmu.Unlock()
			ch := make(chan time.Time)
			ticks = append(ticks, ch)
			return ch, func() {}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Tick the renewer, the poller and the landing loop until the node
	// serves its units, then until they are landed into.
	tickUntil := func(what string, cond func() bool) {
		for i := 0; !cond(); i++ {
			if i == 100 {
				n.Halt()
				t.Fatalf("after 100 rounds: not %s  (owned %v)", what, n.Owned())
			}
			var chs []chan time.Time
			for len(chs) < 3 { // the three loops have started
				runtime.Gosched()
				tmu.Lock()
				chs = slices.Clone(ticks)
				tmu.Unlock()
			}
			for _, ch := range chs {
				ch <- time.Time{}
			}
		}
	}
	tickUntil("serving", func() bool { return len(n.Owned()) == 2 })
	o.mu.Lock()
	for u := range n.Owned() {
		o.pending[u] = transfers(u, 9, 1, 2)
	}
	o.mu.Unlock()
	tickUntil("landed", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.landed) == 2 && len(l.landed[1]) == 2 && len(l.landed[2]) == 2
	})
	n.Halt()
}
