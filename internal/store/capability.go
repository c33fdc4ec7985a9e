package store

import "time"

// Optional capabilities. A Store may implement any of these; callers test
// for them with a type assertion, so the base interface stays small.

// Stats is a point-in-time summary of what a store holds.
type Stats struct {
	Entities  int   // live entities
	Messages  int   // live messages
	Values    int   // live values
	DataBytes int64 // sum of len(Data) over live messages
	// DiskBytes is the space the store's files take (segments and
	// checkpoints); 0 for stores that keep nothing on disk.
	DiskBytes int64
}

// StatsReporter is implemented by stores that can summarise their contents.
type StatsReporter interface {
	Stats() Stats
}

// Compacter is implemented by stores that reclaim space in the background
// and can also be asked to do a full pass now (tests, admin commands).
// Compact returns once the pass is done; it does not block concurrent
// Commits for long.
type Compacter interface {
	Compact() error
}

// SyncObserver is told of a store's group commits (for metrics): each
// fsync round, how long its syncs took and how many commits it made
// durable. It is called on the store's syncer goroutine, so it must be
// fast and must not call back into the store.
type SyncObserver interface {
	Synced(d time.Duration, commits int)
}

// DiskChecker is implemented by stores that keep their data on a disk
// that can fill up or fail.
type DiskChecker interface {
	// CheckGrowth tells whether new data (a send, a new entity) should be
	// taken now: nil, or a *NoSpaceError while the disk's free space is
	// below the low-disk watermark, or the error that stopped the store
	// (ErrFailed). Settlements are not asked: they free space. It is cheap
	// (the free space is looked up at most every few hundred
	// milliseconds).
	CheckGrowth() error
	// Health is nil while the store takes writes; otherwise why not: a
	// *NoSpaceError while the disk is full (the last write failed for
	// lack of space) or below the watermark, or the ErrFailed error.
	Health() error
}
