package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store"
)

// Units is the broker as a node drives it: LoadUnit rebuilds one unit
// from the store after it was acquired and serves it; UnloadUnit stops
// serving it, failing what waits on it with err.
type Units interface {
	LoadUnit(ctx context.Context, unit uint64) error
	UnloadUnit(unit uint64, err error)
}

// Serving is implemented by a broker that can tell whether it serves a
// unit now. A unit the broker serves that the node has not acquired is one
// the broker created here (the store took it for this node's session at
// epoch 1 in the creating transaction): the node adopts it as it is
// instead of taking it again and reloading it, which would drop the
// locks and fail the operations of its first moments.
type Serving interface {
	ServesUnit(unit uint64) bool
}

// Drainer is implemented by a broker that can stop admitting new work for
// a unit before it is handed off (new sends wait, receivers get no new
// deliveries, settlements still go through).
type Drainer interface {
	DrainUnit(unit uint64)
}

// DrainWatcher is implemented by a Drainer that can tell when a draining
// unit holds nothing a client could still settle (no message or session
// locks): its hand-off then goes ahead at the next poll instead of
// waiting out the whole drain.
type DrainWatcher interface {
	UnitDrained(unit uint64) bool
}

// Errors a node gives the broker when it unloads a unit. Both match
// store.ErrNotOwner, which the broker reports as a move.
var (
	// ErrMoved: the unit was taken over by another node, or handed off.
	ErrMoved = fmt.Errorf("cluster: %w: the entity moved to another node", store.ErrNotOwner)
	// ErrLapsed: this node's trust window ended without a renewal of its
	// session; it serves nothing until it renews and re-takes its units.
	ErrLapsed = fmt.Errorf("cluster: %w: this node lost contact with the database", store.ErrNotOwner)
)

// Options configure a Node. Zero durations and counts take the defaults
// of docs/design/cluster.md §5.
type Options struct {
	ID   string // --node-id
	Addr string // --cluster-advertise
	// Membership and Leases are the cluster's store (pgstore in cluster
	// mode); Units the broker.
	Membership store.Membership
	Leases     store.UnitLeases
	Units      Units
	// Outbox and Lander, when both are set, run the landing loop
	// (landing.go): the store's transfers into the units this node serves
	// are handed to the broker every Poll.
	Outbox store.Outbox
	Lander Lander
	// SendWake, if set, wakes the node serving a unit that a commit here
	// put transfers for (wake.go); nil: the target's LandPoll alone
	// lands them.
	SendWake WakeSender
	// Clock measures the trust window; it must be monotonic (the real
	// clock's readings are). Default the wall clock.
	Clock clock.Clock
	Log   *slog.Logger

	Heartbeat time.Duration // renewal interval (1 s)
	TTL       time.Duration // session lifetime without a renewal (5 s)
	Margin    time.Duration // how long before the database's expiry the node stops serving (1 s)
	Poll      time.Duration // placement poll interval (1 s)
	LandPoll  time.Duration // how often the node looks for transfers to land without a wake (Poll)
	Drain     time.Duration // how long a unit drains before it is handed off (5 s)
	FullEvery int           // a full listing of the units every this many polls (30)
	MaxLoads  int           // units acquired and loaded per poll (8)
	MaxMoves  int           // hand-offs started per poll (4)
	Version   string        // the binary version, registered with the session

	// OnLapse, if set, is called when the trust window ends without a
	// renewal, before the units are unloaded (the server stops relaying:
	// a node out of touch with the database serves nothing).
	OnLapse func()

	// NewTicker makes the tickers of the renewer and the poller; default
	// time.NewTicker. Tests drive the loops with their own channels.
	NewTicker func(time.Duration) (<-chan time.Time, func())
}

// Defaults of §5.
const (
	DefaultHeartbeat = time.Second
	DefaultTTL       = 5 * time.Second
	DefaultMargin    = time.Second
	DefaultPoll      = time.Second
	DefaultDrain     = 5 * time.Second
)

func (o *Options) defaults() error {
	if o.ID == "" {
		return errors.New("cluster: a node needs an id (--node-id)")
	}
	if o.Membership == nil || o.Leases == nil || o.Units == nil {
		return errors.New("cluster: a node needs a membership, leases and units")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Heartbeat, DefaultHeartbeat)
	def(&o.TTL, DefaultTTL)
	def(&o.Margin, DefaultMargin)
	def(&o.Poll, DefaultPoll)
	def(&o.Drain, DefaultDrain)
	def(&o.LandPoll, o.Poll)
	if o.FullEvery <= 0 {
		o.FullEvery = 30
	}
	if o.MaxLoads <= 0 {
		o.MaxLoads = 8
	}
	if o.MaxMoves <= 0 {
		o.MaxMoves = 4
	}
	if o.NewTicker == nil {
		o.NewTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	return CheckTimings(o.Heartbeat, o.TTL, o.Margin)
}

// CheckTimings checks the rules between the session timings: TTL at least
// three heartbeats, a margin of at least one heartbeat and below the TTL.
func CheckTimings(heartbeat, ttl, margin time.Duration) error {
	switch {
	case heartbeat <= 0 || ttl <= 0 || margin <= 0:
		return errors.New("cluster: the heartbeat, lease TTL and trust margin must be positive")
	case ttl < 3*heartbeat:
		return fmt.Errorf("cluster: the lease TTL (%v) must be at least three heartbeats (%v)", ttl, 3*heartbeat)
	case margin < heartbeat:
		return fmt.Errorf("cluster: the trust margin (%v) must be at least one heartbeat (%v)", margin, heartbeat)
	case margin >= ttl:
		return fmt.Errorf("cluster: the trust margin (%v) must be below the lease TTL (%v)", margin, ttl)
	}
	return nil
}

// unit states on this node.
type phase uint8

const (
	serving  phase = iota + 1
	draining       // handing off: waits for Drain, then unload and release
)

type owned struct {
	epoch uint64
	phase phase
	since time.Time // when draining started
	next  string    // the node it is handed to
}

// Node is one node of the cluster. Start it, Stop it.
type Node struct {
	o Options

	// step serialises renew, poll and the hand-offs: the goroutines and
	// the tests call them one at a time.
	step sync.Mutex

	mu         sync.Mutex
	session    int64
	trustUntil time.Time // zero: never trusted yet
	lapsed     bool      // the window ended; units unloaded
	units      map[uint64]*owned
	rows       map[uint64]store.Unit
	nodes      map[string]store.Node // the last poll's membership
	orphan     map[uint64]time.Time  // units seen takeable but untaken, since
	since      time.Time             // the Units watermark
	polls      int
	lastNodes  []string // live, non-draining node ids, sorted
	gen        uint64   // +1 at every unloadAll: a load racing it is undone
	stopping   bool
	halted     bool // Halt ran: Stop does nothing

	wake wakeState // wake.go

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New checks o and returns a node that has not started.
func New(o Options) (*Node, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return &Node{o: o, units: map[uint64]*owned{}, rows: map[uint64]store.Unit{}, orphan: map[uint64]time.Time{},
		wake: newWakeState()}, nil
}

// Start registers the node's session and starts its renewer and poller.
// It fails when another live process holds the node id (after one TTL,
// the wait for a crashed predecessor's session to expire).
func (n *Node) Start(ctx context.Context) error {
	if err := n.register(ctx); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go n.every(lctx, n.o.Heartbeat, n.renew)
	go n.pollLoop(lctx)
	if n.o.Outbox != nil && n.o.Lander != nil {
		n.wg.Add(1)
		go n.landLoop(lctx)
	}
	n.wg.Add(1)
	go n.wakeLoop(lctx)
	return nil
}

func (n *Node) register(ctx context.Context) error {
	sent := n.o.Clock.Now()
	session, err := n.o.Membership.Register(ctx, store.NodeRegistration{ID: n.o.ID, Addr: n.o.Addr, TTL: n.o.TTL, Version: n.o.Version})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.session, n.trustUntil, n.lapsed = session, sent.Add(n.o.TTL-n.o.Margin), false
	n.mu.Unlock()
	n.o.Log.Info("cluster session registered", "node", n.o.ID, "session", session)
	return nil
}

// every calls f every period until ctx ends: the node's renewer (a
// goroutine of the node's WaitGroup).
func (n *Node) every(ctx context.Context, period time.Duration, f func(context.Context)) {
	defer n.wg.Done()
	tick, stop := n.o.NewTicker(period)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		f(ctx)
	}
}

func (n *Node) pollLoop(ctx context.Context) {
	defer n.wg.Done()
	tick, stop := n.o.NewTicker(n.o.Poll)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-n.o.Leases.Lost():
			n.lost(u)
		case <-tick:
			n.poll(ctx)
		}
	}
}

// renew is one heartbeat: renew the session (or register a new one when
// it was lost), then check the trust window. It waits for the database
// until the end of the window (TTL - Margin when it has ended), not
// beyond, and it does not wait for the poller (a long load must not make
// the session lapse). It does not give up after one heartbeat: a renewal
// that waited for a row lock for a while still extends the window from
// when it was sent, and one abandoned mid-way costs the connection, which
// a loaded machine may not rebuild within a heartbeat, again and again.
func (n *Node) renew(ctx context.Context) {
	sent := n.o.Clock.Now()
	wait := n.o.TTL - n.o.Margin
	n.mu.Lock()
	if rem := n.trustUntil.Sub(sent); rem > 0 {
		wait = rem
	}
	n.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := n.o.Membership.Renew(rctx)
	switch {
	case err == nil:
		n.mu.Lock()
		n.trustUntil = sent.Add(n.o.TTL - n.o.Margin)
		lapsed := n.lapsed
		n.lapsed = false
		n.mu.Unlock()
		if lapsed {
			n.o.Log.Warn("cluster session renewed after the trust window ended; units are taken again and reloaded", "node", n.o.ID)
		}
	case errors.Is(err, store.ErrSessionLost):
		n.o.Log.Warn("cluster session lost; registering again", "node", n.o.ID, "err", err)
		n.unloadAll(ErrLapsed)
		gctx, cancel := context.WithTimeout(ctx, n.o.Heartbeat)
		defer cancel()
		if err := n.register(gctx); err != nil {
			n.o.Log.Warn("cluster registration failed", "node", n.o.ID, "err", err)
		}
	default:
		n.o.Log.Warn("cluster session renewal failed", "node", n.o.ID, "err", err)
	}
	n.checkTrust()
}

// checkTrust unloads every unit once the trust window has ended.
func (n *Node) checkTrust() {
	if n.Trusted() {
		return
	}
	n.mu.Lock()
	already := n.lapsed
	n.lapsed = true
	n.mu.Unlock()
	if !already {
		n.o.Log.Error("cluster trust window ended without a renewal: serving no unit", "node", n.o.ID)
		if n.o.OnLapse != nil {
			n.o.OnLapse()
		}
	}
	n.unloadAll(ErrLapsed)
}

// Trusted tells whether the node may serve its units now: its last
// renewal is recent enough that its session is surely still live.
func (n *Node) Trusted() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.trustedLocked()
}

func (n *Node) trustedLocked() bool {
	return !n.trustUntil.IsZero() && n.o.Clock.Now().Before(n.trustUntil)
}

// unloadAll stops serving every unit (they stay owned in the database;
// the node takes them again with a higher epoch once it is trusted).
func (n *Node) unloadAll(err error) {
	n.mu.Lock()
	n.gen++
	units := make([]uint64, 0, len(n.units))
	for u := range n.units {
		units = append(units, u)
	}
	clear(n.units)
	n.mu.Unlock()
	slices.Sort(units)
	// All at once: an unload waits for the unit's commits in flight,
	// which a database out of reach holds for a while; the other units
	// must not go on being served from memory meanwhile.
	var wg sync.WaitGroup
	for _, u := range units {
		wg.Go(func() { n.o.Units.UnloadUnit(u, err) })
	}
	wg.Wait()
}

// lost handles a unit the store was fenced off from.
func (n *Node) lost(u uint64) {
	n.step.Lock()
	defer n.step.Unlock()
	if n.o.Leases.Holds(u) {
		// A stale hint: a poll has taken the unit back (a higher epoch)
		// and reloaded it since the fenced commit; unloading now would
		// drop that fresh load.
		return
	}
	n.mu.Lock()
	_, ok := n.units[u]
	delete(n.units, u)
	n.mu.Unlock()
	if ok {
		n.o.Log.Warn("unit taken over by another node", "node", n.o.ID, "unit", u)
		n.o.Units.UnloadUnit(u, ErrMoved)
	}
}

// poll is one round of placement (see the package doc).
func (n *Node) poll(ctx context.Context) {
	n.step.Lock()
	defer n.step.Unlock()
	n.checkTrust()
	pctx, cancel := context.WithTimeout(ctx, 2*n.o.Poll+n.o.TTL)
	defer cancel()
	nodes, err := n.o.Membership.Nodes(pctx)
	if err != nil {
		n.o.Log.Warn("cluster poll: nodes", "err", err)
		return
	}
	byID := map[string]store.Node{}
	var live []string
	for _, nd := range nodes {
		byID[nd.ID] = nd
		if nd.Live && !nd.Draining {
			live = append(live, nd.ID)
		}
	}
	n.mu.Lock()
	full := n.polls%n.o.FullEvery == 0 || !slices.Equal(live, n.lastNodes)
	n.polls++
	since := n.since
	n.mu.Unlock()
	if full {
		since = time.Time{}
	}
	rows, next, err := n.o.Membership.Units(pctx, since)
	if err != nil {
		n.o.Log.Warn("cluster poll: units", "err", err)
		return
	}
	n.mu.Lock()
	n.lastNodes, n.since, n.nodes = live, next, byID
	if full {
		clear(n.rows)
	}
	for _, r := range rows {
		n.rows[r.ID] = r
	}
	for u := range n.orphan {
		if _, ok := n.rows[u]; !ok {
			delete(n.orphan, u)
		}
	}
	// Units served here whose row moved on (or is gone).
	var moved []uint64
	for u, o := range n.units {
		r, ok := n.rows[u]
		if (full && !ok) || (ok && (r.Owner != n.o.ID || r.Epoch != o.epoch)) {
			moved = append(moved, u)
			delete(n.units, u)
		}
	}
	n.mu.Unlock()
	slices.Sort(moved)
	for _, u := range moved {
		n.o.Log.Warn("unit no longer this node's", "node", n.o.ID, "unit", u)
		n.o.Units.UnloadUnit(u, ErrMoved)
	}
	if !n.Trusted() {
		return
	}
	n.acquire(pctx, live, byID)
	n.handoffs(pctx, live)
}

// takeable tells whether r may be acquired by this node now.
func (n *Node) takeable(r store.Unit, byID map[string]store.Node) bool {
	switch {
	case r.Owner == n.o.ID:
		return true // ours in the database, not served: re-take
	case r.State == store.UnitFree:
		return r.HandoffTo == "" || r.HandoffTo == n.o.ID || !r.Reserved
	}
	o, ok := byID[r.Owner]
	return !ok || o.Session != r.OwnerSession || !o.Live
}

func (n *Node) acquire(ctx context.Context, live []string, byID map[string]store.Node) {
	now := n.o.Clock.Now()
	n.mu.Lock()
	draining := n.stopping || !slices.Contains(live, n.o.ID)
	var todo []uint64
	ids := make([]uint64, 0, len(n.rows))
	for u := range n.rows {
		ids = append(ids, u)
	}
	slices.Sort(ids)
	for _, u := range ids {
		r := n.rows[u]
		if _, ok := n.units[u]; ok {
			delete(n.orphan, u)
			continue
		}
		if !n.takeable(r, byID) {
			delete(n.orphan, u)
			continue
		}
		first, ok := n.orphan[u]
		if !ok {
			n.orphan[u], first = now, now
		}
		if draining {
			continue
		}
		rank := Rank(u, live)
		mine := len(rank) > 0 && rank[0] == n.o.ID
		// The winner did not take it for two polls: the runner-up may.
		late := len(rank) > 1 && rank[1] == n.o.ID && now.Sub(first) >= 2*n.o.Poll
		// Reserved for this node by a hand-off: take it whoever wins.
		handed := r.State == store.UnitFree && r.HandoffTo == n.o.ID && r.Reserved
		// Still this node's in the database but not served (after a lapse,
		// or created here): re-take it; a hand-off moves it on if another
		// node wins it.
		ours := r.Owner == n.o.ID
		if ours && n.createdHereLocked(r) {
			// Created here and served already: adopt it at its epoch.
			n.units[u] = &owned{epoch: r.Epoch, phase: serving}
			delete(n.orphan, u)
			n.o.Log.Info("unit created here adopted", "node", n.o.ID, "unit", u, "epoch", r.Epoch)
			continue
		}
		if mine || late || handed || ours {
			todo = append(todo, u)
		}
		if len(todo) >= n.o.MaxLoads {
			break
		}
	}
	n.mu.Unlock()
	for _, u := range todo {
		n.mu.Lock()
		gen := n.gen
		n.mu.Unlock()
		epoch, err := n.o.Leases.Acquire(ctx, u)
		if err != nil {
			n.o.Log.Info("cluster: unit not acquired", "node", n.o.ID, "unit", u, "err", err)
			continue
		}
		if !n.Trusted() {
			// The window ended while acquiring: the next trusted poll re-takes it.
			return
		}
		if err := n.o.Units.LoadUnit(ctx, u); err != nil {
			n.o.Log.Error("cluster: unit acquired but not loaded; releasing it", "node", n.o.ID, "unit", u, "err", err)
			n.o.Units.UnloadUnit(u, err)
			_ = n.o.Leases.Release(ctx, u, "")
			continue
		}
		n.mu.Lock()
		if gen != n.gen || !n.trustedLocked() {
			// The window ended while loading: undone; re-taken later.
			n.mu.Unlock()
			n.o.Units.UnloadUnit(u, ErrLapsed)
			return
		}
		n.units[u] = &owned{epoch: epoch, phase: serving}
		delete(n.orphan, u)
		if r, ok := n.rows[u]; ok {
			r.Owner, r.Epoch, r.State, r.HandoffTo, r.Reserved = n.o.ID, epoch, store.UnitOwned, "", false
			n.rows[u] = r
		}
		n.mu.Unlock()
		n.o.Log.Info("unit acquired and loaded", "node", n.o.ID, "unit", u, "epoch", epoch)
	}
}

// createdHereLocked tells whether r, a unit row this node owns but has not
// acquired, is one its broker created and serves: owned by this session,
// held by the store (which fences its writes with r.Epoch) and loaded. A
// unit left over from a lapse is not loaded (unloadAll unloaded it), so
// it is taken again with a higher epoch. n.mu is held.
func (n *Node) createdHereLocked(r store.Unit) bool {
	s, ok := n.o.Units.(Serving)
	return ok && r.OwnerSession == n.session && r.State == store.UnitOwned && !n.stopping &&
		n.o.Leases.Holds(r.ID) && s.ServesUnit(r.ID)
}

// handoffs starts hand-offs of units another live node wins and finishes
// those whose drain has elapsed.
func (n *Node) handoffs(ctx context.Context, live []string) {
	now := n.o.Clock.Now()
	n.mu.Lock()
	moves := 0
	var start, finish []uint64
	ids := make([]uint64, 0, len(n.units))
	for u := range n.units {
		ids = append(ids, u)
	}
	slices.Sort(ids)
	watcher, _ := n.o.Units.(DrainWatcher)
	for _, u := range ids {
		o := n.units[u]
		if o.phase == draining {
			moves++
			if now.Sub(o.since) >= n.o.Drain || watcher != nil && watcher.UnitDrained(u) {
				finish = append(finish, u)
			}
			continue
		}
		w := Winner(u, live)
		if w != "" && w != n.o.ID {
			start = append(start, u)
		}
	}
	var started []uint64
	for _, u := range start {
		if moves >= n.o.MaxMoves {
			break
		}
		moves++
		o := n.units[u]
		o.phase, o.since, o.next = draining, now, Winner(u, live)
		started = append(started, u)
	}
	n.mu.Unlock()
	if d, ok := n.o.Units.(Drainer); ok {
		for _, u := range started {
			d.DrainUnit(u)
		}
	}
	for _, u := range finish {
		n.handOff(ctx, u)
	}
}

// handOff unloads u and releases it to the node chosen when its drain
// began.
func (n *Node) handOff(ctx context.Context, u uint64) {
	n.mu.Lock()
	o, ok := n.units[u]
	delete(n.units, u)
	n.mu.Unlock()
	if !ok {
		return
	}
	n.o.Units.UnloadUnit(u, ErrMoved)
	if err := n.o.Leases.Release(ctx, u, o.next); err != nil {
		// Not released: its row still names this node until the session
		// ends; the next owner takes it then.
		n.o.Log.Warn("cluster: unit unloaded but not released", "node", n.o.ID, "unit", u, "err", err)
		return
	}
	n.o.Log.Info("unit handed off", "node", n.o.ID, "unit", u, "to", o.next)
}

// Owned lists the units this node serves, with their epochs.
func (n *Node) Owned() map[uint64]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[uint64]uint64, len(n.units))
	for u, o := range n.units {
		out[u] = o.epoch
	}
	return out
}

// OwnerOf answers, from the last poll, the node whose session owns unit
// and the internal address it registered; ok false when the unit row was
// not seen, node "" when it is free.
func (n *Node) OwnerOf(unit uint64) (node, addr string, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.rows[unit]
	if !ok {
		return "", "", false
	}
	if nd, live := n.nodes[r.Owner]; live && nd.Live && nd.Session == r.OwnerSession {
		return r.Owner, nd.Addr, true
	}
	return r.Owner, "", true // owned by a session that is gone, or free
}

// Placement is the node placement gives unit to among the live nodes of
// the last poll, and the internal address it registered; "" before the
// first poll.
func (n *Node) Placement(unit uint64) (node, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	node = Winner(unit, n.lastNodes)
	if nd, ok := n.nodes[node]; ok && nd.Live {
		addr = nd.Addr
	}
	return node, addr
}

// Live is the live nodes of the last poll (those placement chooses
// among), sorted.
func (n *Node) Live() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(slices.Values(n.lastNodes))
}

// Halt stops the renewer and the poller without handing anything off or
// leaving: the node's units stay its own in the database until its
// session expires, as after a crash. Stop after Halt does nothing.
func (n *Node) Halt() {
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	n.mu.Lock()
	n.halted = true
	n.mu.Unlock()
}

// Session is the node's current session.
func (n *Node) Session() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.session
}

// Stop leaves the cluster: it stops the renewer and the poller, marks
// the node draining, hands off every unit to its next winner (draining
// each until ctx is done, never skipping the release's flush), and ends
// the session. It returns the first error of those steps.
func (n *Node) Stop(ctx context.Context) error {
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	n.step.Lock()
	defer n.step.Unlock()
	n.mu.Lock()
	halted := n.halted
	n.stopping = true
	n.mu.Unlock()
	if halted {
		return nil
	}
	var first error
	if err := n.o.Membership.SetDraining(ctx, true); err != nil {
		first = err
	}
	var live []string
	if nodes, err := n.o.Membership.Nodes(ctx); err == nil {
		for _, nd := range nodes {
			if nd.Live && !nd.Draining && nd.ID != n.o.ID {
				live = append(live, nd.ID)
			}
		}
	}
	n.mu.Lock()
	ids := make([]uint64, 0, len(n.units))
	for u, o := range n.units {
		ids = append(ids, u)
		o.next = Winner(u, live)
	}
	n.mu.Unlock()
	slices.Sort(ids)
	if d, ok := n.o.Units.(Drainer); ok && n.Trusted() {
		for _, u := range ids {
			d.DrainUnit(u)
		}
		t, stop := n.o.NewTicker(n.o.Drain)
		select {
		case <-t:
		case <-ctx.Done():
		}
		stop()
	}
	// The releases run even when ctx is done: a flush is never skipped.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.o.TTL)
	defer cancel()
	for _, u := range ids {
		n.handOff(rctx, u)
	}
	if err := n.o.Membership.Leave(rctx); err != nil && first == nil {
		first = err
	}
	return first
}
