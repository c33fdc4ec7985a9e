package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memunits"
)

// loader stands in for the broker a node drives: it serves the units
// loaded into it and writes them through the node's fenced handle.
type loader struct {
	h *memunits.Handle

	mu      sync.Mutex
	loaded  map[uint64]bool
	unloads []unload
	drained []uint64
	// empty: UnitDrained answers that every draining unit holds nothing
	// (DrainWatcher); false keeps the whole drain.
	empty bool
}

type unload struct {
	unit uint64
	err  error
}

func newLoader(h *memunits.Handle) *loader { return &loader{h: h, loaded: map[uint64]bool{}} }

func (b *loader) LoadUnit(ctx context.Context, u uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.loaded[u] {
		return fmt.Errorf("unit %d loaded twice", u)
	}
	b.loaded[u] = true
	return nil
}

func (b *loader) UnloadUnit(u uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.loaded, u)
	b.unloads = append(b.unloads, unload{u, err})
}

func (b *loader) UnitDrained(u uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.empty && slices.Contains(b.drained, u)
}

func (b *loader) ServesUnit(u uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loaded[u]
}

// create is the broker creating unit u on its node: the store takes it at
// epoch 1 and the broker serves it at once, without LoadUnit.
func (b *loader) create(u uint64) {
	b.h.CreateOwned(u)
	b.mu.Lock()
	b.loaded[u] = true
	b.mu.Unlock()
}

func (b *loader) DrainUnit(u uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drained = append(b.drained, u)
}

// write is a write the loader makes for a unit it serves: fenced.
func (b *loader) write(u uint64) error {
	b.mu.Lock()
	ok := b.loaded[u]
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("unit %d not served here", u)
	}
	return b.h.Write(u)
}

func (b *loader) served() []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []uint64
	for u := range b.loaded {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// cluster is a memunits DB and its nodes, on one fake clock per node
// (a paused node's clock stands still) and one for the database.
type cluster struct {
	t     *testing.T
	dbClk *clock.Fake
	db    *memunits.DB
	nodes map[string]*member
}

type member struct {
	n   *Node
	b   *loader
	h   *memunits.Handle
	clk *clock.Fake
}

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func newCluster(t *testing.T, units int) *cluster {
	c := &cluster{t: t, dbClk: clock.NewFake(t0), nodes: map[string]*member{}}
	c.db = memunits.New(c.dbClk)
	for u := 1; u <= units; u++ {
		c.db.CreateUnit(uint64(u))
	}
	return c
}

// add registers a node (no goroutines: the test drives its steps).
func (c *cluster) add(id string) *member {
	c.t.Helper()
	h := c.db.Node(id)
	m := &member{h: h, b: newLoader(h), clk: clock.NewFake(c.dbClk.Now())}
	n, err := New(Options{ID: id, Addr: id + ":1", Membership: h, Leases: h, Units: m.b, Clock: m.clk,
		Heartbeat: time.Second, TTL: 5 * time.Second, Margin: time.Second, Poll: time.Second, Drain: 3 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := n.register(context.Background()); err != nil {
		c.t.Fatalf("register %s: %v", id, err)
	}
	m.n = n
	c.nodes[id] = m
	return m
}

// advance moves the database's clock and the clocks of the running
// (not paused) nodes.
func (c *cluster) advance(d time.Duration, paused ...string) {
	c.dbClk.Advance(d)
	for id, m := range c.nodes {
		if !slices.Contains(paused, id) {
			m.clk.Advance(d)
		}
	}
}

// round is one heartbeat and one poll of every running node, in id order.
func (c *cluster) round(paused ...string) {
	ids := make([]string, 0, len(c.nodes))
	for id := range c.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ctx := context.Background()
	for _, id := range ids {
		if !slices.Contains(paused, id) {
			c.nodes[id].n.renew(ctx)
		}
	}
	for _, id := range ids {
		if !slices.Contains(paused, id) {
			c.nodes[id].n.poll(ctx)
		}
	}
}

// settle runs rounds without moving the clocks until no node acquires
// more (each takes at most MaxLoads units per poll).
func (c *cluster) settle() {
	for range 10 {
		c.round()
	}
}

// placed checks that every unit is served by exactly its winner among
// want, with the epoch of its row.
func (c *cluster) placed(units int, want ...string) {
	c.t.Helper()
	for u := uint64(1); u <= uint64(units); u++ {
		w := Winner(u, want)
		row, _ := c.db.Unit(u)
		for id, m := range c.nodes {
			_, has := m.n.Owned()[u]
			if has != (id == w) || slices.Contains(m.b.served(), u) != (id == w) {
				c.t.Fatalf("unit %d: node %s serves it %v, winner %s (row %+v)", u, id, has, w, row)
			}
		}
		if row.Owner != w || c.nodes[w].n.Owned()[u] != row.Epoch {
			c.t.Fatalf("unit %d: row %+v, winner %s with epoch %d", u, row, w, c.nodes[w].n.Owned()[u])
		}
	}
}

func TestTimings(t *testing.T) {
	for _, tc := range []struct {
		hb, ttl, margin time.Duration
		ok              bool
	}{
		{time.Second, 5 * time.Second, time.Second, true},
		{time.Second, 2 * time.Second, time.Second, false},
		{time.Second, 5 * time.Second, 500 * time.Millisecond, false},
		{time.Second, 3 * time.Second, 3 * time.Second, false},
		{0, 5 * time.Second, time.Second, false},
	} {
		if err := CheckTimings(tc.hb, tc.ttl, tc.margin); (err == nil) != tc.ok {
			t.Errorf("CheckTimings(%v, %v, %v) = %v", tc.hb, tc.ttl, tc.margin, err)
		}
	}
}

// TestPlacementAndJoin: three nodes split the units by rendezvous; a
// fourth joins and the units it wins are handed off to it after their
// drain (drained first, released reserved for it, taken with epoch + 1),
// and nothing else moves.
func TestPlacementAndJoin(t *testing.T) {
	const units = 40
	c := newCluster(t, units)
	c.add("a")
	c.add("b")
	c.add("c")
	c.settle()
	c.placed(units, "a", "b", "c")
	before := map[uint64]uint64{}
	for u := uint64(1); u <= units; u++ {
		r, _ := c.db.Unit(u)
		before[u] = r.Epoch
	}
	c.add("d")
	c.round() // the others start draining what d wins
	for _, id := range []string{"a", "b", "c"} {
		m := c.nodes[id]
		if len(m.b.drained) > 4 {
			t.Fatalf("%s drains %d units at once, more than MaxMoves", id, len(m.b.drained))
		}
		for _, u := range m.b.drained {
			if Winner(u, []string{"a", "b", "c", "d"}) != "d" {
				t.Fatalf("%s drains unit %d, which d does not win", id, u)
			}
		}
	}
	for range 4 { // drain 3 s, at most 4 moves per node at a time
		c.advance(time.Second)
		c.round()
	}
	for range 12 {
		c.advance(time.Second)
		c.round()
	}
	c.placed(units, "a", "b", "c", "d")
	moved := 0
	for u := uint64(1); u <= units; u++ {
		r, _ := c.db.Unit(u)
		if r.Owner == "d" {
			moved++
			if r.Epoch != before[u]+1 {
				t.Fatalf("unit %d handed to d with epoch %d, was %d", u, r.Epoch, before[u])
			}
		} else if r.Epoch != before[u] {
			t.Fatalf("unit %d stayed on %s but its epoch moved %d -> %d", u, r.Owner, before[u], r.Epoch)
		}
	}
	if moved == 0 || moved > units/2 {
		t.Fatalf("%d of %d units moved to the new node", moved, units)
	}
}

// TestDeathTakeover: a node that stops renewing stops serving when its
// trust window ends, before the database lets anyone take its units; the
// others take them after the TTL with epoch + 1; its writes are fenced.
func TestDeathTakeover(t *testing.T) {
	const units = 20
	c := newCluster(t, units)
	a, b := c.add("a"), c.add("b")
	c.settle()
	c.placed(units, "a", "b")
	aUnits := a.b.served()
	if len(aUnits) == 0 {
		t.Fatal("a serves nothing")
	}
	// a stops renewing (its process hangs); its clock runs.
	for i := 1; i <= 3; i++ {
		c.advance(time.Second)
		b.n.renew(context.Background())
		b.n.poll(context.Background())
		a.n.checkTrust()
	}
	if len(a.b.served()) == 0 {
		t.Fatal("a stopped serving before its trust window ended")
	}
	c.advance(time.Second) // 4 s = TTL - margin since a's last renewal
	a.n.checkTrust()
	if got := a.b.served(); len(got) != 0 || a.n.Trusted() {
		t.Fatalf("a still serves %v after its trust window", got)
	}
	for _, ev := range a.b.unloads {
		if !errors.Is(ev.err, ErrLapsed) || !errors.Is(ev.err, store.ErrNotOwner) {
			t.Fatalf("unload error %v", ev.err)
		}
	}
	b.n.renew(context.Background())
	b.n.poll(context.Background())
	if len(b.b.served()) != units-len(aUnits) {
		t.Fatal("b took a's units before a's session expired")
	}
	c.advance(time.Second + time.Millisecond) // past a's expiry by the database's clock
	b.n.renew(context.Background())
	b.n.poll(context.Background()) // dead session seen: b acquires
	b.n.poll(context.Background())
	if got := b.b.served(); len(got) != units {
		t.Fatalf("b serves %d units after a's death, want %d", len(got), units)
	}
	for _, u := range aUnits {
		if r, _ := c.db.Unit(u); r.Epoch != 2 || r.Owner != "b" {
			t.Fatalf("unit %d after takeover: %+v", u, r)
		}
		if err := a.h.Write(u); !errors.Is(err, store.ErrNotOwner) {
			t.Fatalf("a's write of unit %d after the takeover: %v", u, err)
		}
		if err := b.b.write(u); err != nil {
			t.Fatalf("b's write of unit %d: %v", u, err)
		}
	}
	// a comes back: its session was killed; it registers anew, and placement
	// gives it back its share through hand-offs.
	if err := a.h.Renew(context.Background()); !errors.Is(err, store.ErrSessionLost) {
		t.Fatalf("a's old session renewed: %v", err)
	}
	for range 20 {
		c.advance(time.Second)
		c.round()
	}
	c.placed(units, "a", "b")
}

// TestPausedOwnerFenced: the owner is paused (its renewals stop and its
// clock stands still, so it still trusts itself); the other node takes its
// unit after the TTL (epoch + 1); the paused owner resumes and its first
// write is fenced off: it unloads the unit on the Lost hint and takes part
// again only with a new session.
func TestPausedOwnerFenced(t *testing.T) {
	c := newCluster(t, 1)
	x := c.add("a")
	y := c.add("b")
	c.round()
	owner, other := x, y
	if Winner(1, []string{"a", "b"}) == "b" {
		owner, other = y, x
	}
	if err := owner.b.write(1); err != nil {
		t.Fatal(err)
	}
	for range 7 { // owner paused for 7 s
		c.advance(time.Second, owner.n.o.ID)
		c.round(owner.n.o.ID)
	}
	r, _ := c.db.Unit(1)
	if r.Owner != other.n.o.ID || r.Epoch != 2 {
		t.Fatalf("unit after the pause: %+v", r)
	}
	if !owner.n.Trusted() || len(owner.b.served()) != 1 {
		t.Fatal("the paused owner's frozen clock should still trust its window")
	}
	// Resumed: whatever it believes, the fence refuses its write.
	if err := owner.b.write(1); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("the resumed owner's write: %v, want ErrNotOwner", err)
	}
	owner.n.lost(<-owner.h.Lost())
	if len(owner.b.served()) != 0 {
		t.Fatal("the fenced unit is still served")
	}
	owner.clk.Set(c.dbClk.Now())
	s := owner.n.Session()
	c.round()
	if owner.n.Session() != s+1 {
		t.Fatalf("session %d after resuming, want %d", owner.n.Session(), s+1)
	}
	if r, _ := c.db.Unit(1); r.Owner != other.n.o.ID || r.Epoch != 2 {
		t.Fatalf("unit moved again at once: %+v", r)
	}
}

// TestLapseRetake: the database is unreachable for longer than the trust
// window but shorter than the TTL: the node unloads everything, and once a
// renewal succeeds it takes its units again with a higher epoch and
// reloads them (never resuming from memory).
func TestLapseRetake(t *testing.T) {
	c := newCluster(t, 3)
	a := c.add("a")
	c.round()
	c.placed(3, "a")
	c.db.SetDown(true)
	for range 4 {
		c.advance(time.Second)
		c.round()
	}
	if got := a.b.served(); len(got) != 0 {
		t.Fatalf("still serving %v after the trust window", got)
	}
	c.db.SetDown(false)
	c.advance(500 * time.Millisecond) // 4.5 s: the session is still live by the database
	c.round()
	c.placed(3, "a")
	for u := uint64(1); u <= 3; u++ {
		if r, _ := c.db.Unit(u); r.Epoch != 2 {
			t.Fatalf("unit %d re-taken with epoch %d, want 2", u, r.Epoch)
		}
	}
	if got := len(a.b.unloads); got != 3 {
		t.Fatalf("%d unloads, want 3", got)
	}
}

// TestCreatedHereAdopted: a unit the broker created (owned at epoch 1,
// served) is adopted by the next poll, not taken again and reloaded
// (which would drop its locks and fail its first operations); when
// another node wins it, it is handed off from epoch 1. A unit left over
// from a lapse is still taken again.
func TestCreatedHereAdopted(t *testing.T) {
	c := newCluster(t, 0)
	a := c.add("a")
	c.round()
	a.b.create(1)
	if err := a.b.write(1); err != nil {
		t.Fatalf("write to a unit just created: %v", err)
	}
	c.round()
	if got := a.n.Owned()[1]; got != 1 {
		t.Fatalf("node owns unit 1 at epoch %d, want 1 (adopted)", got)
	}
	if r, _ := c.db.Unit(1); r.Epoch != 1 || r.Owner != "a" {
		t.Fatalf("row %+v after a poll, want a's at epoch 1", r)
	}
	if len(a.b.unloads) != 0 {
		t.Fatalf("unloads %+v: the created unit was reloaded", a.b.unloads)
	}
	if err := a.b.write(1); err != nil {
		t.Fatalf("write after the poll: %v", err)
	}

	// Another node that wins it: handed off after the drain.
	var u uint64 = 2
	for Winner(u, []string{"a", "b"}) != "b" {
		u++
	}
	a.b.create(u)
	c.add("b")
	c.round()
	c.advance(4 * time.Second) // past the 3 s drain
	c.round()
	c.settle()
	if r, _ := c.db.Unit(u); r.Owner != "b" || r.Epoch != 2 {
		t.Fatalf("unit %d row %+v, want b's at epoch 2", u, r)
	}
	if !slices.Contains(c.nodes["b"].b.served(), u) || slices.Contains(a.b.served(), u) {
		t.Fatalf("unit %d served by a %v, b %v", u, a.b.served(), c.nodes["b"].b.served())
	}
}

// TestRunnerUp: a unit whose winner does not take it (it is slow) is
// taken by the second in its ranking after two polls.
func TestRunnerUp(t *testing.T) {
	c := newCluster(t, 10)
	c.add("a")
	c.add("b")
	// Only the runner-ups poll; every winner's polls are "slow".
	var mine []uint64
	for u := uint64(1); u <= 10; u++ {
		if Winner(u, []string{"a", "b"}) == "a" {
			mine = append(mine, u)
		}
	}
	b := c.nodes["b"]
	b.n.poll(context.Background())
	for _, u := range mine {
		if slices.Contains(b.b.served(), u) {
			t.Fatalf("b took a's unit %d at once", u)
		}
	}
	for range 3 {
		c.advance(time.Second)
		c.nodes["a"].n.renew(context.Background())
		b.n.renew(context.Background())
		b.n.poll(context.Background())
	}
	if got := len(b.b.served()); got != 10 {
		t.Fatalf("b serves %d units after a was slow for 3 polls", got)
	}
}

// TestDeletedUnit: a unit whose row is gone is unloaded at the next full
// listing.
func TestDeletedUnit(t *testing.T) {
	c := newCluster(t, 2)
	a := c.add("a")
	c.round()
	c.db.DeleteUnit(2)
	a.n.mu.Lock()
	a.n.polls = 0 // the next poll lists everything
	a.n.mu.Unlock()
	c.round()
	if got := a.b.served(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("served %v after unit 2 was deleted", got)
	}
}

// TestRunAndStop: the renewer and the poller run on their tickers, the
// Lost hint unloads at once, and Stop hands every unit to the remaining
// node and ends the session; no goroutine is left.
func TestRunAndStop(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newCluster(t, 6)
	b := c.add("b")
	h := c.db.Node("a")
	ab := newLoader(h)
	renewTick, pollTick, drainTick := make(chan time.Time), make(chan time.Time), make(chan time.Time, 1)
	ticker := func(d time.Duration) (<-chan time.Time, func()) {
		switch d {
		case time.Second:
			return renewTick, func() {}
		case 2 * time.Second:
			return pollTick, func() {}
		}
		drainTick <- time.Time{}
		return drainTick, func() {}
	}
	n, err := New(Options{ID: "a", Membership: h, Leases: h, Units: ab, Clock: c.dbClk,
		Heartbeat: time.Second, TTL: 5 * time.Second, Margin: time.Second, Poll: 2 * time.Second, Drain: 3 * time.Second, NewTicker: ticker})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			n.Stop(context.Background())
		}
	}()
	renewTick <- time.Time{}
	pollTick <- time.Time{}
	pollTick <- time.Time{} // the first poll is done once the second is taken
	want := 0
	for u := uint64(1); u <= 6; u++ {
		if Winner(u, []string{"a", "b"}) == "a" {
			want++
		}
	}
	if got := len(n.Owned()); got != want {
		t.Fatalf("a owns %d units, wants %d", got, want)
	}
	// Another node takes one of a's units behind its back: the fenced
	// write's Lost hint unloads it.
	var u0 uint64
	for u := range n.Owned() {
		u0 = u
		break
	}
	if err := forceTake(c, u0); err != nil {
		t.Fatal(err)
	}
	if err := ab.write(u0); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("write after the unit moved: %v", err)
	}
	pollTick <- time.Time{}
	pollTick <- time.Time{}
	// Unloaded, and (its row still naming a) taken again with a higher
	// epoch and reloaded, never served from the old memory.
	ab.mu.Lock()
	unloaded := len(ab.unloads) == 1 && ab.unloads[0].unit == u0 && errors.Is(ab.unloads[0].err, ErrMoved)
	ab.mu.Unlock()
	if r, _ := c.db.Unit(u0); !unloaded || n.Owned()[u0] != 3 || r.Epoch != 3 {
		t.Fatalf("unit %d after it was fenced: owned %v, row %+v, unloads %v", u0, n.Owned(), r, ab.unloads)
	}
	stopped = true
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(ab.served()) != 0 {
		t.Fatal("units still served after Stop")
	}
	nodes, _ := h.Nodes(context.Background())
	if nodes[0].ID != "a" || nodes[0].Live {
		t.Fatalf("a after Stop: %+v", nodes[0])
	}
	c.nodes["b"].n.poll(context.Background())
	c.nodes["b"].n.poll(context.Background())
	if got := len(b.b.served()); got != 6 {
		t.Fatalf("b serves %d units after a left, want 6", got)
	}
}

// forceTake raises unit u's epoch behind its owner's back, as a takeover
// by a process the test does not run would.
func forceTake(c *cluster, u uint64) error {
	if !c.db.BumpEpoch(u) {
		return fmt.Errorf("no unit %d", u)
	}
	return nil
}

// TestOwnerOf: every node answers, from its last poll, the owner of a
// unit and the address it registered; a unit whose owner's session is
// gone has no address; an unknown unit is not known.
func TestOwnerOf(t *testing.T) {
	const units = 6
	c := newCluster(t, units)
	c.add("a")
	c.add("b")
	c.settle()
	for u := uint64(1); u <= units; u++ {
		w := Winner(u, []string{"a", "b"})
		for _, id := range []string{"a", "b"} {
			node, addr, ok := c.nodes[id].n.OwnerOf(u)
			if !ok || node != w || addr != w+":1" {
				t.Fatalf("%s: OwnerOf(%d) = %q %q %v, want %s at %s:1", id, u, node, addr, ok, w, w)
			}
		}
	}
	if _, _, ok := c.nodes["a"].n.OwnerOf(units + 1); ok {
		t.Fatal("an unknown unit is known")
	}
	// b stops renewing; after its TTL a sees its units without an address
	// until it took them.
	var ofB uint64
	for u := uint64(1); u <= units; u++ {
		if Winner(u, []string{"a", "b"}) == "b" {
			ofB = u
		}
	}
	if ofB == 0 {
		t.Fatal("placement gave b nothing")
	}
	c.advance(6*time.Second, "b")
	c.nodes["a"].n.renew(context.Background())
	c.nodes["a"].n.poll(context.Background())
	node, _, ok := c.nodes["a"].n.OwnerOf(ofB)
	if !ok || node != "a" {
		t.Fatalf("after b's death OwnerOf(%d) = %q, %v; want a (taken over)", ofB, node, ok)
	}
}

// TestHalt: Halt stops the loops as a crash would: the units stay the
// node's in the database and its session live until it expires; Stop
// after it hands nothing off and does not leave.
func TestHalt(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newCluster(t, 4)
	h := c.db.Node("a")
	ab := newLoader(h)
	renewTick, pollTick := make(chan time.Time), make(chan time.Time)
	ticker := func(d time.Duration) (<-chan time.Time, func()) {
		if d == time.Second {
			return renewTick, func() {}
		}
		return pollTick, func() {}
	}
	n, err := New(Options{ID: "a", Membership: h, Leases: h, Units: ab, Clock: c.dbClk,
		Heartbeat: time.Second, TTL: 5 * time.Second, Margin: time.Second, Poll: 2 * time.Second, NewTicker: ticker})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	renewTick <- time.Time{}
	pollTick <- time.Time{}
	pollTick <- time.Time{} // the first poll is done once the second is taken
	if len(n.Owned()) != 4 {
		t.Fatalf("a owns %v", n.Owned())
	}
	n.Halt()
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for u := uint64(1); u <= 4; u++ {
		if r, _ := c.db.Unit(u); r.Owner != "a" || r.State != store.UnitOwned {
			t.Fatalf("unit %d after Halt and Stop: %+v, want still a's", u, r)
		}
	}
	if nodes, _ := h.Nodes(context.Background()); !nodes[0].Live || nodes[0].Draining {
		t.Fatalf("a after Halt: %+v, want live until its session expires", nodes[0])
	}
}
