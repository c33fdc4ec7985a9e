package filestore

import (
	"errors"
	"log/slog"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

// Options configure a Store. Only Dir is required.
type Options struct {
	// Dir is the directory holding the log and checkpoints. It is created
	// if missing and locked against a second opener.
	Dir string
	// FS is the file system; nil means the real one (vfs.OS()).
	FS vfs.FS
	// SegmentSize is the size at which the log moves to a new segment file
	// (a batch is never split, so a segment may end up larger). Default
	// 32 MiB; between 4 KiB and 1 GiB. With preallocation the log never
	// takes less than two segments (the active one and the next), so this
	// also sets the floor the disk comes back to after a drain.
	SegmentSize int64
	// Salvage opens a log with mid-log corruption or a bad checkpoint by
	// skipping what cannot be read, logging each loss at Error level.
	// Without it such a store refuses to open with store.ErrCorrupt.
	Salvage bool
	// Logger receives recovery and background-work reports; nil discards.
	Logger *slog.Logger
	// CheckpointInterval is how often the index is checkpointed while the
	// log grows, bounding the log tail replayed after a crash. Checkpoints
	// are also written when they let segments be deleted, and on Close.
	// Default 1 minute; negative disables the periodic trigger.
	CheckpointInterval time.Duration
	// BackgroundInterval is how often the background goroutine looks for
	// work (checkpoint, forward-copy, segment deletion). Default 1 second;
	// negative disables the goroutine (tests then call Compact or
	// Checkpoint themselves).
	BackgroundInterval time.Duration
	// CompactLiveRatio: a sealed segment whose live Data is at most this
	// fraction of its size has its live messages copied forward so it can
	// be deleted. Default 0.10.
	CompactLiveRatio float64
	// CompactRate bounds background forward-copying, in bytes per second.
	// Default 32 MiB/s.
	CompactRate int64
	// MaxGroupBytes bounds the bytes one group commit writes before it
	// syncs. Default 4 MiB.
	MaxGroupBytes int
	// NoPreallocate turns off preallocation. By default the next segment
	// is created ahead of time, filled with zeros and synced by a
	// background goroutine, so that appending to it changes no file
	// metadata and fdatasync has only data to flush (markedly faster group
	// commits on ext4), at the cost of writing each segment twice.
	NoPreallocate bool
	// CachedLogBytes: the newest this many bytes of sealed log segments
	// keep their pages in the OS page cache; each time the next segment is
	// prepared, the pages of the sealed segments beyond it are given back
	// to the kernel (vfs.CacheDropper), and the preparer's zeros then go
	// to pages just freed instead of memory the kernel has to find. Reads
	// of those older segments go to the disk. Default 256 MiB; negative
	// leaves the page cache to the kernel. Only with preallocation.
	CachedLogBytes int64
	// FollowerWait bounds how long an fdatasync waits for the next
	// commits of the followers (store.Follower) the previous one released.
	// Default 500 µs; negative never waits.
	FollowerWait time.Duration
	// RoundBytes ends that wait early: once the records an fdatasync is
	// to cover add up to this many bytes, it starts without waiting for
	// the followers still to answer (they are awaited by the next one).
	// Such an fdatasync costs mostly the bytes it writes, so more of them
	// would save little of its fixed cost and hold back what it covers.
	// Default 512 KiB: a round of 1 KB messages never comes near it, one
	// of 64 KB messages closes after eight.
	RoundBytes int
	// SyncObserver, if set, is told of every fsync round: its duration
	// and the number of commits it made durable.
	SyncObserver store.SyncObserver
	// MinFreeBytes and MinFreePercent set the low-disk watermark: while
	// the file system holding Dir has less free space, CheckGrowth refuses
	// new data (the broker refuses sends and new entities) so that the
	// space left serves settlements, which free space. With both zero the
	// watermark is 1 GiB or 5 % of the file system, whichever is smaller;
	// with one set, that one; with both, the smaller. A negative
	// MinFreeBytes turns the watermark off.
	MinFreeBytes   int64
	MinFreePercent float64
	// BlobThreshold: the Data of an OpAppend or OpRewrite of at least
	// this many bytes is written to a blob file of its own (synced before
	// the log record that refers to it) instead of into the log, so that
	// compaction never copies it and its removal frees its space at once.
	// Default 256 KiB; negative keeps all Data in the log.
	BlobThreshold int
	// NoSync never calls fsync: Commit(b, true) returns once b is written
	// to the OS. For benchmarks of a non-durable tier only.
	NoSync bool
}

const (
	defaultCachedLogBytes = 256 << 20
	defaultSegmentSize    = 32 << 20
	minSegmentSize        = 4 << 10
	maxSegmentSize        = 1 << 30
)

func (o *Options) setDefaults() error {
	if o.Dir == "" {
		return errors.New("filestore: Options.Dir is required")
	}
	if o.FS == nil {
		o.FS = vfs.OS()
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = defaultSegmentSize
	}
	if o.SegmentSize < minSegmentSize || o.SegmentSize > maxSegmentSize {
		return errors.New("filestore: SegmentSize must be between 4 KiB and 1 GiB")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = time.Minute
	}
	if o.BackgroundInterval == 0 {
		o.BackgroundInterval = time.Second
	}
	if o.CompactLiveRatio == 0 {
		o.CompactLiveRatio = 0.10
	}
	if o.CompactLiveRatio < 0 || o.CompactLiveRatio >= 1 {
		return errors.New("filestore: CompactLiveRatio must be in [0, 1)")
	}
	if o.CompactRate <= 0 {
		o.CompactRate = 32 << 20
	}
	if o.FollowerWait == 0 {
		o.FollowerWait = 500 * time.Microsecond
	}
	if o.RoundBytes <= 0 {
		o.RoundBytes = 512 << 10
	}
	if o.MinFreePercent < 0 || o.MinFreePercent > 100 {
		return errors.New("filestore: MinFreePercent must be in [0, 100]")
	}
	if o.CachedLogBytes == 0 {
		o.CachedLogBytes = defaultCachedLogBytes
	}
	if o.BlobThreshold == 0 {
		o.BlobThreshold = defaultBlobThreshold
	}
	if o.MaxGroupBytes <= 0 {
		o.MaxGroupBytes = 4 << 20
	}
	return nil
}
