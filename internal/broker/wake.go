package broker

import (
	"slices"

	"github.com/busbarmq/busbar/internal/store"
)

// SetTransferred sets f, which the broker calls after each commit that
// put transfers in the outbox (a forward, a dead-letter forward, a send
// through a via entity, a bounce: transfer.go), once the commit has
// returned, with the distinct target units of those transfers: a cluster
// node wakes their owners (docs/design/cluster.md §9.3). f must not block;
// nil turns it off.
func (b *Broker) SetTransferred(f func(units []uint64)) {
	if f == nil {
		b.transferred.Store(nil)
		return
	}
	b.transferred.Store(&f)
}

// wakeTargets tells the SetTransferred hook the target units of the
// transfers among ops, a batch that has committed.
func (b *Broker) wakeTargets(ops []store.Op) {
	f := b.transferred.Load()
	if f == nil {
		return
	}
	var units []uint64
	for i := range ops {
		if ops[i].Kind == store.OpTransfer && ops[i].Transfer != nil && !slices.Contains(units, ops[i].Transfer.TargetUnit) {
			units = append(units, ops[i].Transfer.TargetUnit)
		}
	}
	if len(units) > 0 {
		(*f)(units)
	}
}
