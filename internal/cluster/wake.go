package cluster

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Waking the landing owner (docs/design/cluster.md §9.3). After a commit
// that put transfers in the outbox returns, the broker tells the node
// their target units (Transferred); the node's waker goroutine sends
// wake(units) to the node that serves each of them, as its last poll
// knows it (unknown, free or moving: skipped), through Options.SendWake.
// A node that receives one (Wake) lands those of the units it serves at
// once, on its landing goroutine, instead of at the next LandPoll.
//
// Wakes are hints: polling stays the guarantee, so a wake lost, late or
// repeated costs latency only. Both sides keep a set of units, not a
// queue of wakes: the commits made while a wake is on its way coalesce
// into the next one (debounced per unit), a burst of wakes into one
// landing per unit (the landing goroutine lands one unit at a time), and
// past maxWakeUnits units pending a wake is dropped (a poll lands it).

// WakeSender sends wake(units) to node at its internal address addr.
type WakeSender func(ctx context.Context, node, addr string, units []uint64) error

const (
	// maxWakeUnits bounds the units waiting to be woken, on each side.
	maxWakeUnits = 4096
	// wakeTimeout bounds one wake's send.
	wakeTimeout = 2 * time.Second
)

// wakeState is a node's two sets of units to wake.
type wakeState struct {
	mu      sync.Mutex
	out     map[uint64]struct{} // to wake on their owners (Transferred)
	in      map[uint64]struct{} // woken here (Wake)
	outCh   chan struct{}       // cap 1: out has units
	inCh    chan struct{}       // cap 1: in has units
	dropped uint64              // wakes dropped (a full set)
}

func newWakeState() wakeState {
	return wakeState{out: map[uint64]struct{}{}, in: map[uint64]struct{}{}, outCh: make(chan struct{}, 1), inCh: make(chan struct{}, 1)}
}

// add puts units in set and signals ch, dropping what does not fit.
func (w *wakeState) add(set map[uint64]struct{}, ch chan struct{}, units []uint64) {
	w.mu.Lock()
	added := false
	for _, u := range units {
		if _, ok := set[u]; ok {
			continue
		}
		if len(set) >= maxWakeUnits {
			w.dropped++
			continue
		}
		set[u] = struct{}{}
		added = true
	}
	w.mu.Unlock()
	if added {
		select {
		case ch <- struct{}{}:
		default: // a signal is pending already
		}
	}
}

// take empties set and returns its units, sorted.
func (w *wakeState) take(set map[uint64]struct{}) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	units := make([]uint64, 0, len(set))
	for u := range set {
		units = append(units, u)
	}
	clear(set)
	slices.Sort(units)
	return units
}

// Transferred tells the node that a commit put transfers to units in the
// outbox: their owners are woken (the broker's hook, called after the
// commit returned; it never blocks). Without Options.SendWake it does
// nothing but wake this node for the units it serves itself.
func (n *Node) Transferred(units []uint64) {
	n.wake.add(n.wake.out, n.wake.outCh, units)
}

// Wake is a wake received from another node: the units it serves among
// units are landed now, on the landing goroutine (coalescing with a
// landing in progress); the others are ignored.
func (n *Node) Wake(units []uint64) {
	if n.o.Outbox == nil || n.o.Lander == nil {
		return
	}
	mine := units[:0:0]
	for _, u := range units {
		if n.serves(u) {
			mine = append(mine, u)
		}
	}
	if len(mine) > 0 {
		n.wake.add(n.wake.in, n.wake.inCh, mine)
	}
}

// WakesDropped is how many wakes were dropped because too many units
// waited to be woken.
func (n *Node) WakesDropped() uint64 {
	n.wake.mu.Lock()
	defer n.wake.mu.Unlock()
	return n.wake.dropped
}

// landLoop lands every LandPoll, and at once the units woken.
func (n *Node) landLoop(ctx context.Context) {
	defer n.wg.Done()
	tick, stop := n.o.NewTicker(n.o.LandPoll)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			n.land(ctx)
		case <-n.wake.inCh:
			for _, u := range n.wake.take(n.wake.in) {
				if ctx.Err() != nil {
					return
				}
				if n.serves(u) {
					n.landUnit(ctx, u)
				}
			}
		}
	}
}

// wakeLoop sends the wakes Transferred asked for, one batch per owner
// at a time, until ctx ends.
func (n *Node) wakeLoop(ctx context.Context) {
	defer n.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake.outCh:
		}
		byNode := map[string][]uint64{}
		addrs := map[string]string{}
		var self []uint64
		for _, u := range n.wake.take(n.wake.out) {
			node, addr, ok := n.OwnerOf(u)
			switch {
			case !ok || node == "":
				// Unknown or free: its next owner's poll lands it.
			case node == n.o.ID:
				self = append(self, u)
			case addr != "" && n.o.SendWake != nil:
				byNode[node] = append(byNode[node], u)
				addrs[node] = addr
			}
		}
		if len(self) > 0 {
			n.Wake(self)
		}
		var wg sync.WaitGroup
		for node, units := range byNode {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, wakeTimeout)
				defer cancel()
				if err := n.o.SendWake(sctx, node, addrs[node], units); err != nil {
					n.o.Log.Debug("cluster: wake not sent; the target's poll lands the transfers", "node", n.o.ID, "to", node, "units", len(units), "err", err)
				}
			})
		}
		wg.Wait()
	}
}
