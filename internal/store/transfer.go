package store

import "context"

// The outbox of a cluster (docs/design/cluster.md §9.3): a message on its
// way from a unit to a unit another node owns. The source's owner removes
// the message from its entity and inserts the transfer in ONE fenced
// transaction of the source unit (OpTransfer beside its OpRemove); the
// target's owner later lands it: in ONE fenced transaction of the target
// unit it deletes the claimed transfer rows (OpLand, every claimed row
// must still be there or nothing is applied) and appends the message with
// its own sequence numbers. After each commit the message is in exactly
// one place: the source entity, the outbox, or the target entity.
//
// Only a store that implements Outbox takes OpTransfer and OpLand (pgstore
// in cluster mode); a single node never builds them.

// TransferKind says what a transfer carries.
type TransferKind uint8

// The kinds of a transfer (bb_transfer.kind).
const (
	// TransferForward is an auto-forwarded message (ForwardTo).
	TransferForward TransferKind = 1
	// TransferDeadLetterForward is a message forwarded out of a
	// dead-letter queue (ForwardDeadLetteredMessagesTo).
	TransferDeadLetterForward TransferKind = 2
	// TransferSendVia is reserved for a transaction's send to a
	// destination owned elsewhere (not built yet).
	TransferSendVia TransferKind = 3
	// TransferBounce is a message the target refused, on its way back to
	// its source's transfer dead-letter queue.
	TransferBounce TransferKind = 4
)

// TransferKey names one row of the outbox. IDs grow per source unit
// ((source epoch << 32) | counter), so a target lands one source's
// transfers in the order they were made.
type TransferKey struct {
	TargetUnit, SourceUnit, ID uint64
}

// Transfer is one row of the outbox.
//
// In an OpTransfer, the op's EntityID is an entity of the source unit (it
// decides the fence), Meta and Data (with More or Tail) are the transfer's, and of
// Transfer only TargetUnit, TargetEntity and Kind are read: the store
// assigns SourceUnit and ID. In an OpLand, the op's EntityID is an entity
// of the unit that lands (the fence), and Transfer's key names the row to
// delete.
type Transfer struct {
	TransferKey
	TargetEntity uint64
	Kind         TransferKind
	Meta         []byte // the broker's transfer header, opaque here
	Data         []byte // the message's record
}

// Outbox is the transfer side of a cluster store (pgstore in cluster
// mode).
type Outbox interface {
	// PendingTransfers reads, oldest first in (source unit, id) order, up
	// to max transfers into unit, and at most about maxBytes of Data
	// (always at least one).
	PendingTransfers(ctx context.Context, unit uint64, max int, maxBytes int64) ([]Transfer, error)
	// OrphanTransfers reads, in (source unit, id) order, up to max
	// transfers out of the given source units whose target unit no longer
	// exists (deleted after the transfer was made): their sources take
	// them back.
	OrphanTransfers(ctx context.Context, sources []uint64, max int) ([]Transfer, error)
	// TransferTargets lists which of units have transfers waiting for
	// them, or orphans of theirs waiting to be taken back.
	TransferTargets(ctx context.Context, units []uint64) ([]uint64, error)
	// TransferBacklog counts the transfers waiting for unit, counting no
	// further than limit+1.
	TransferBacklog(ctx context.Context, unit uint64, limit int) (int, error)
	// UnitSpec reads the Spec of unit's queue or topic as its owner last
	// committed it (ok false: the unit does not exist), for the checks a
	// source makes before it forwards.
	UnitSpec(ctx context.Context, unit uint64) (spec []byte, ok bool, err error)
}
