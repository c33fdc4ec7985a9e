// Package memunits is an in-memory store.Membership and store.UnitLeases:
// the node sessions and unit leases of a cluster (docs/design/cluster.md
// §5) kept in maps instead of PostgreSQL rows, with the same rules as the
// SQL of pgstore, for tests of the cluster logic on an injected clock.
//
// One DB is the shared "database"; each node gets a Handle from DB.Node.
// The DB's clock plays the database's clock (expiry is computed and
// compared only with it). Write is the fence: a handle may write a unit
// only with the epoch its own Acquire returned.
//
//	node  (id)   -> session, addr, expires, draining   (expires = -inf: killed)
//	unit  (id)   -> owner, owner session, epoch, state, handoff to/until, changed
package memunits

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store"
)

// Reserve is how long a released unit stays reserved for its chosen next
// owner.
const Reserve = 10 * time.Second

// lostBuffer bounds each handle's Lost channel.
const lostBuffer = 64

// DB is the shared state of the cluster. Safe for concurrent use.
type DB struct {
	clock clock.Clock

	mu    sync.Mutex
	nodes map[string]*nodeRow
	units map[uint64]*unitRow
	down  bool
}

type nodeRow struct {
	session  int64
	addr     string
	expires  time.Time
	killed   bool
	draining bool
}

type unitRow struct {
	owner        string
	ownerSession int64
	epoch        uint64
	state        store.UnitState
	handoffTo    string
	handoffUntil time.Time
	changed      time.Time
}

// New returns an empty DB on clock c (the "database's clock").
func New(c clock.Clock) *DB {
	return &DB{clock: c, nodes: map[string]*nodeRow{}, units: map[uint64]*unitRow{}}
}

// SetDown makes every call of every handle fail with store.ErrUnavailable
// (the database unreachable) until SetDown(false).
func (d *DB) SetDown(down bool) {
	d.mu.Lock()
	d.down = down
	d.mu.Unlock()
}

// CreateUnit adds a free unit (a queue or topic created).
func (d *DB) CreateUnit(unit uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.units[unit]; !ok {
		d.units[unit] = &unitRow{state: store.UnitFree, changed: d.clock.Now()}
	}
}

// DeleteUnit removes a unit row (its entity was deleted).
func (d *DB) DeleteUnit(unit uint64) {
	d.mu.Lock()
	delete(d.units, unit)
	d.mu.Unlock()
}

// BumpEpoch raises unit's epoch as a takeover by a process outside the
// test would (pgstore's tests do the same with an UPDATE); false when
// there is no such unit.
func (d *DB) BumpEpoch(unit uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.units[unit]
	if ok {
		r.epoch++
		r.changed = d.clock.Now()
	}
	return ok
}

// Unit returns the row of unit.
func (d *DB) Unit(unit uint64) (store.Unit, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.units[unit]
	if !ok {
		return store.Unit{}, false
	}
	return d.rowLocked(unit, r), true
}

func (d *DB) rowLocked(id uint64, r *unitRow) store.Unit {
	return store.Unit{ID: id, Owner: r.owner, OwnerSession: r.ownerSession, Epoch: r.epoch, State: r.state,
		HandoffTo: r.handoffTo, Reserved: r.handoffTo != "" && r.handoffUntil.After(d.clock.Now())}
}

func (d *DB) liveLocked(n *nodeRow) bool { return !n.killed && n.expires.After(d.clock.Now()) }

// Node returns the handle of node id (a process of the cluster).
func (d *DB) Node(id string) *Handle {
	return &Handle{db: d, id: id, epochs: map[uint64]uint64{}, lost: make(chan uint64, lostBuffer)}
}

// Handle is one node's connection to the DB: its Membership and
// UnitLeases.
type Handle struct {
	db   *DB
	id   string
	lost chan uint64

	mu      sync.Mutex
	session int64
	ttl     time.Duration
	epochs  map[uint64]uint64 // units this handle may write -> epoch
}

var (
	_ store.Membership = (*Handle)(nil)
	_ store.UnitLeases = (*Handle)(nil)
)

func (h *Handle) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memunits: %w: %w", store.ErrUnavailable, err)
	}
	if h.db.down {
		return fmt.Errorf("memunits: %w: the database is down", store.ErrUnavailable)
	}
	return nil
}

// Register starts a new session unless a live one holds the id.
func (h *Handle) Register(ctx context.Context, r store.NodeRegistration) (int64, error) {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return 0, err
	}
	n, ok := d.nodes[h.id]
	if ok && d.liveLocked(n) {
		return 0, fmt.Errorf("memunits: register %q: %w", h.id, store.ErrNodeLive)
	}
	if !ok {
		n = &nodeRow{}
		d.nodes[h.id] = n
	}
	n.session++
	n.addr, n.expires, n.killed, n.draining = r.Addr, d.clock.Now().Add(r.TTL), false, false
	h.mu.Lock()
	h.session, h.ttl = n.session, r.TTL
	h.mu.Unlock()
	return n.session, nil
}

// Renew extends the session if it is still live.
func (h *Handle) Renew(ctx context.Context) error {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	session, ttl := h.session, h.ttl
	h.mu.Unlock()
	n, ok := d.nodes[h.id]
	if !ok || n.session != session || !d.liveLocked(n) {
		return fmt.Errorf("memunits: renew %q: %w", h.id, store.ErrSessionLost)
	}
	n.expires = d.clock.Now().Add(ttl)
	return nil
}

// Nodes lists the node rows in id order.
func (h *Handle) Nodes(ctx context.Context) ([]store.Node, error) {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return nil, err
	}
	out := make([]store.Node, 0, len(d.nodes))
	for id, n := range d.nodes {
		out = append(out, store.Node{ID: id, Session: n.session, Addr: n.addr, Live: d.liveLocked(n), Draining: n.draining})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Units lists the unit rows changed at or after since.
func (h *Handle) Units(ctx context.Context, since time.Time) ([]store.Unit, time.Time, error) {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return nil, since, err
	}
	var out []store.Unit
	for id, r := range d.units {
		if since.IsZero() || !r.changed.Before(since) {
			out = append(out, d.rowLocked(id, r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, d.clock.Now(), nil
}

// Kill ends node's session if it is session and has expired.
func (h *Handle) Kill(ctx context.Context, node string, session int64) error {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return err
	}
	if n, ok := d.nodes[node]; ok && n.session == session && !d.liveLocked(n) {
		n.killed = true
	}
	return nil
}

// SetDraining marks this node's live session as leaving, or not.
func (h *Handle) SetDraining(ctx context.Context, draining bool) error {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return err
	}
	n, ok := d.nodes[h.id]
	if !ok || n.session != h.Session() || !d.liveLocked(n) {
		return fmt.Errorf("memunits: draining: %w", store.ErrSessionLost)
	}
	n.draining = draining
	return nil
}

// Leave ends this node's session now.
func (h *Handle) Leave(ctx context.Context) error {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return err
	}
	if n, ok := d.nodes[h.id]; ok && n.session == h.Session() && d.liveLocked(n) {
		n.expires = d.clock.Now()
	}
	return nil
}

// Session is the handle's current session.
func (h *Handle) Session() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.session
}

// Acquire takes unit with the rules of pgstore's Acquire.
func (h *Handle) Acquire(ctx context.Context, unit uint64) (uint64, error) {
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return 0, err
	}
	session := h.Session()
	h.mu.Lock()
	delete(h.epochs, unit)
	h.mu.Unlock()
	me, ok := d.nodes[h.id]
	if !ok || me.session != session || !d.liveLocked(me) {
		return 0, fmt.Errorf("memunits: acquire %d: %w", unit, store.ErrSessionLost)
	}
	r, ok := d.units[unit]
	if !ok {
		return 0, fmt.Errorf("memunits: acquire %d: %w: it does not exist", unit, store.ErrNotEligible)
	}
	now := d.clock.Now()
	eligible := false
	switch {
	case r.owner == h.id && r.ownerSession == session:
		eligible = true
	case r.state == store.UnitFree:
		eligible = r.handoffTo == "" || r.handoffTo == h.id || !r.handoffUntil.After(now)
	default:
		o, ok := d.nodes[r.owner]
		eligible = !ok || o.session != r.ownerSession || !d.liveLocked(o)
	}
	if !eligible {
		return 0, fmt.Errorf("memunits: acquire %d (owner %q): %w", unit, r.owner, store.ErrNotEligible)
	}
	if o, ok := d.nodes[r.owner]; ok && r.owner != h.id && o.session == r.ownerSession && !d.liveLocked(o) {
		o.killed = true
	}
	r.owner, r.ownerSession, r.epoch, r.state = h.id, session, r.epoch+1, store.UnitOwned
	r.handoffTo, r.handoffUntil, r.changed = "", time.Time{}, now
	h.mu.Lock()
	h.epochs[unit] = r.epoch
	h.mu.Unlock()
	return r.epoch, nil
}

// CreateOwned adds unit as created by this handle's node, as pgstore
// does in the transaction that creates a queue or topic: owned by its
// session at epoch 1, and writable by the handle at once.
func (h *Handle) CreateOwned(unit uint64) {
	session := h.Session()
	d := h.db
	d.mu.Lock()
	d.units[unit] = &unitRow{owner: h.id, ownerSession: session, epoch: 1, state: store.UnitOwned, changed: d.clock.Now()}
	d.mu.Unlock()
	h.mu.Lock()
	h.epochs[unit] = 1
	h.mu.Unlock()
}

// Release frees unit, reserved for next, if this handle still owns it at
// the epoch it acquired.
func (h *Handle) Release(ctx context.Context, unit uint64, next string) error {
	h.mu.Lock()
	epoch, ok := h.epochs[unit]
	delete(h.epochs, unit)
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("memunits: release %d: %w", unit, store.ErrNotOwner)
	}
	d := h.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := h.check(ctx); err != nil {
		return err
	}
	r, ok := d.units[unit]
	if !ok || r.owner != h.id || r.epoch != epoch {
		return fmt.Errorf("memunits: release %d: %w", unit, store.ErrNotOwner)
	}
	now := d.clock.Now()
	r.owner, r.ownerSession, r.state, r.handoffTo, r.changed = "", 0, store.UnitFree, next, now
	r.handoffUntil = time.Time{}
	if next != "" {
		r.handoffUntil = now.Add(Reserve)
	}
	return nil
}

// Lost delivers units whose writes were fenced off.
func (h *Handle) Lost() <-chan uint64 { return h.lost }

// Holds reports whether this handle writes unit now (store.UnitLeases).
func (h *Handle) Holds(unit uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.epochs[unit]
	return ok
}

// Write is a fenced write of unit: it succeeds only while the unit's
// epoch is the one this handle acquired; otherwise it fails with
// store.ErrNotOwner, forgets the unit and reports it on Lost.
func (h *Handle) Write(unit uint64) error {
	h.mu.Lock()
	epoch, ok := h.epochs[unit]
	h.mu.Unlock()
	d := h.db
	d.mu.Lock()
	r, exists := d.units[unit]
	fenced := !ok || !exists || r.epoch != epoch
	down := d.down
	d.mu.Unlock()
	if down {
		return fmt.Errorf("memunits: %w: the database is down", store.ErrUnavailable)
	}
	if !fenced {
		return nil
	}
	if ok {
		h.mu.Lock()
		delete(h.epochs, unit)
		h.mu.Unlock()
		select {
		case h.lost <- unit:
		default:
		}
	}
	return fmt.Errorf("memunits: write %d: %w", unit, store.ErrNotOwner)
}

// Owned lists the units this handle may write, in id order.
func (h *Handle) Owned() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]uint64, 0, len(h.epochs))
	for u := range h.epochs {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}
