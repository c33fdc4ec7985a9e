package cluster

import (
	"context"
	"slices"

	"github.com/busbarmq/busbar/internal/store"
)

// Lander is the broker as the landing loop drives it: it lands transfers
// into a unit it serves (broker.LandTransfers) and says how many it landed
// before a failure.
type Lander interface {
	LandTransfers(ctx context.Context, unit uint64, xs []store.Transfer) (int, error)
}

// Bounds of one landing round.
const (
	landBatch      = 256     // transfers read and landed at once
	landBatchBytes = 4 << 20 // and their Data, about
	landRounds     = 16      // batches per unit per poll, so every unit gets its turn
)

// The node lands, every LandPoll (Node.landLoop), the transfers waiting
// for the units this node serves (docs/design/cluster.md §9.3), and at
// once those of a unit a source node woke it for (wake.go): the poll is
// the guarantee, the wake a hint.

// land is one landing round over the units this node serves and trusts.
func (n *Node) land(ctx context.Context) {
	if !n.Trusted() {
		return
	}
	n.mu.Lock()
	var units []uint64
	for u, o := range n.units {
		if o.phase == serving {
			units = append(units, u)
		}
	}
	n.mu.Unlock()
	if len(units) == 0 {
		return
	}
	slices.Sort(units)
	targets, err := n.o.Outbox.TransferTargets(ctx, units)
	if err != nil {
		n.o.Log.Warn("cluster: looking for transfers failed", "node", n.o.ID, "err", err)
		return
	}
	for _, u := range targets {
		n.landUnit(ctx, u)
	}
}

// landUnit lands unit's pending transfers, then the orphans it takes
// back, a bounded number of batches each.
func (n *Node) landUnit(ctx context.Context, u uint64) {
	read := []func() ([]store.Transfer, error){
		func() ([]store.Transfer, error) {
			return n.o.Outbox.PendingTransfers(ctx, u, landBatch, landBatchBytes)
		},
		func() ([]store.Transfer, error) { return n.o.Outbox.OrphanTransfers(ctx, []uint64{u}, landBatch) },
	}
	for _, next := range read {
		for range landRounds {
			if ctx.Err() != nil || !n.serves(u) {
				return
			}
			xs, err := next()
			if err != nil {
				n.o.Log.Warn("cluster: reading transfers failed", "node", n.o.ID, "unit", u, "err", err)
				return
			}
			if len(xs) == 0 {
				break
			}
			if landed, err := n.o.Lander.LandTransfers(ctx, u, xs); err != nil {
				n.o.Log.Warn("cluster: landing transfers failed; retrying at the next poll", "node", n.o.ID, "unit", u, "landed", landed, "err", err)
				return
			}
		}
	}
}

// serves reports whether the node serves u now (not handing it off).
func (n *Node) serves(u uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.units[u]
	return ok && o.phase == serving && n.trustedLocked()
}
