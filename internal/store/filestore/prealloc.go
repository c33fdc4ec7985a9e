package filestore

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/busbarmq/busbar/internal/vfs"
)

// prepared is a zero-filled, synced file waiting under prepName to become
// the next segment, or the error that prevented it.
type prepared struct {
	f   vfs.File
	err error
}

// prepLoop is the preparer goroutine, owned by the writer: for each
// request it creates prepName, fills it with SegmentSize zero bytes,
// syncs it and hands it over on prepc. It exits when prepReq is closed,
// removing a file nobody took.
func (s *Store) prepLoop(done chan struct{}) {
	defer close(done)
	var seen logSample
	for range s.prepReq {
		s.dropCachedSegments()
		f, err := s.preallocate(true, seen.largeSyncs(s))
		if err != nil && !errors.Is(err, errStopping) {
			s.log.Warn("preallocating the next segment failed; will create it on demand", "err", err)
		}
		s.prepc <- prepared{f: f, err: err}
	}
	select {
	case p := <-s.prepc:
		if p.f != nil {
			p.f.Close()
			s.fs.Remove(s.path(prepName))
			s.prepBytes.Store(0)
		}
	default:
	}
	s.dropRecycled() // maintenance has stopped: nothing recycles a segment any more
}

// dropCachedSegments gives the page-cache pages of sealed segments beyond
// the newest CachedLogBytes of the log back to the kernel, each segment
// once (they are synced when sealed, so their pages are clean and all of
// them go). A log that keeps what it is sent (a queue with a backlog)
// would otherwise fill memory with pages that are written once and rarely
// read, and every page of the next segment's zeros would be memory the
// kernel has to find: on the benchmark machine (a VM) fresh pages cost 3–4
// times the CPU of recently freed ones, and zero-filling new segments took
// 60–75 % of the broker's CPU in a 64 KB send profile. PostgreSQL drops
// its WAL segments' pages as it closes them for the same reason. The
// writer asks for the next segment before it installs it, so the segment
// being sealed may still count as the active one here: it is dropped at
// the next preparation.
func (s *Store) dropCachedSegments() {
	if s.opts.CachedLogBytes < 0 {
		return
	}
	var cold []*segment
	s.mu.Lock()
	if s.mu.active != nil {
		if s.uncachedTo == 0 && len(s.mu.segs) > 0 {
			// First pass: start below the oldest segment, not at id 1.
			s.uncachedTo = max(min(s.mu.active.id, slices.Min(slices.Collect(maps.Keys(s.mu.segs)))), 1) - 1
		}
		kept := int64(0)
		for id := s.mu.active.id; id > s.uncachedTo+1; id-- {
			seg := s.mu.segs[id-1]
			if seg == nil {
				continue
			}
			if kept += seg.diskSize(); kept <= s.opts.CachedLogBytes {
				continue
			}
			seg.refs.Add(1) // released below; deleteSegments cannot close f meanwhile
			cold = append(cold, seg)
		}
		if len(cold) > 0 {
			s.uncachedTo = cold[0].id
		}
	}
	s.mu.Unlock()
	for _, seg := range cold {
		if cd, ok := seg.f.(vfs.CacheDropper); ok {
			if err := cd.DropCache(0, 0); err != nil {
				s.log.Debug("dropping a segment's cached pages failed", "file", seg.path, "err", err)
			} else {
				s.nUncached.Add(1)
			}
		}
		seg.release()
	}
}

// The preparer shares the disk with the log's fdatasyncs, each of which
// flushes the device's cache and so waits for every byte written before
// it. Zero-filling a whole segment at once made the log's syncs of the
// next 26 ms wait for up to 32 MB of zeros (appends paced at 5k/s took up
// to 17 ms; BenchmarkPacedCommit's p99.9 was 10–18 ms). So the preparer
// writes prepChunk at a time, starts each chunk's writeback at once
// (vfs.Writebacker; a log sync then finds at most a few chunks in its
// way, and the final Sync little left to write) and paces itself by the
// active segment: it never has more than prepLead times the active
// segment's fill written, so it is done when that is half full. The
// writer marks the active segment full when it needs the prepared one
// (rotate), which ends the pacing. (Of the chunk sizes measured, 64 KB
// cost closed-loop throughput and 1 MB stalled syncs.)
const (
	prepChunk = 256 << 10
	prepLead  = 2
	prepPoll  = 5 * time.Millisecond
)

// errStopping: the store closed while the preparer paced itself.
var errStopping = errors.New("filestore: closing")

// Reserving and zero-filling. A new segment file's blocks are reserved
// first (vfs.Allocator, fallocate(2)); they then read as zeros without
// having been written, but the file system records which blocks were
// written since (ext4's and XFS's unwritten extents), so the first
// fdatasync after an append into such blocks also commits the file
// system's journal. Zero-filling them as well spares the log's
// fdatasyncs that commit: it is what the preparer does while they are
// small (a paced sender's 1 KB commits waited some 0.1 ms longer without
// it on this machine). It writes every byte of the log twice, though,
// and once the log's fdatasyncs cover RoundBytes or more each on average
// (a stream of large messages), one journal commit per fdatasync costs
// less than the zeros: a segment of a new file is then only reserved
// (64 KB messages: 5 % more throughput at 8 % less broker CPU). With the
// blocks reserved, the zeros cost a third less CPU than without (ext4
// no longer reserves blocks page by page). A recycled file holds an old
// log and is always zero-filled; a file system that cannot reserve gets
// the zeros.

// logSample is the preparer's view of the log's writing at its last
// preparation.
type logSample struct{ bytes, syncs int64 }

// largeSyncs reports whether the log's fdatasyncs since the previous call
// covered Options.RoundBytes or more each on average, and samples anew.
func (l *logSample) largeSyncs(s *Store) bool {
	now := logSample{s.loggedBytes.Load(), s.nSyncs.Load()}
	b, n := now.bytes-l.bytes, now.syncs-l.syncs
	*l = now
	return n > 0 && b/n >= int64(s.opts.RoundBytes)
}

// preallocate makes prepName (a new file, or the recycled one: prepFile)
// a segment of SegmentSize bytes that read as zeros and syncs it: it
// reserves the file's blocks and writes zeros over them, or, with
// reserveOnly set, only reserves a new file's blocks where the file
// system can (see above). The zeros are paced by the active segment when
// paced is set.
func (s *Store) preallocate(paced, reserveOnly bool) (vfs.File, error) {
	p := s.path(prepName)
	f, recycled, err := s.prepFile(p)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (vfs.File, error) {
		f.Close()
		s.fs.Remove(p)
		return nil, err
	}
	reserved := false
	if a, ok := f.(vfs.Allocator); ok {
		reserved = a.Allocate(0, s.opts.SegmentSize) == nil // else the writes below allocate
	}
	if reserveOnly && reserved && !recycled {
		if !s.opts.NoSync {
			if err := f.Sync(); err != nil {
				return fail(err)
			}
		}
		s.nReserved.Add(1)
		s.prepBytes.Store(s.opts.SegmentSize)
		return f, nil
	}
	wb, _ := f.(vfs.Writebacker)
	var poll <-chan time.Time // nil (never ready) unless paced
	if paced {
		t := time.NewTicker(prepPoll)
		defer t.Stop()
		poll = t.C
	}
	zero := make([]byte, min(s.opts.SegmentSize, prepChunk))
	for off := int64(0); off < s.opts.SegmentSize; off += int64(len(zero)) {
		for paced && off > prepLead*s.activeOff.Load() {
			select {
			case <-poll:
			case <-s.stopWriter:
				return fail(errStopping)
			}
		}
		n := min(int64(len(zero)), s.opts.SegmentSize-off)
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			return fail(err)
		}
		if wb != nil && !s.opts.NoSync {
			if err := wb.StartWriteback(off, n); err != nil {
				return fail(err)
			}
		}
	}
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	s.prepBytes.Store(s.opts.SegmentSize)
	return f, nil
}

// prepFile opens the file to prepare as p: the recycled segment file if
// deleteSegments kept one (SegmentSize bytes of old log, to be
// overwritten; recycled is then set), else a new empty file.
func (s *Store) prepFile(p string) (f vfs.File, recycled bool, err error) {
	s.recycleMu.Lock()
	defer s.recycleMu.Unlock()
	if s.recycleBytes.Load() != 0 {
		err := s.fs.Rename(s.path(recycleName), p)
		s.recycleBytes.Store(0)
		if err == nil {
			if f, err := s.fs.OpenReadWrite(p); err == nil {
				s.nRecycled.Add(1)
				return f, true, nil
			}
			s.fs.Remove(p)
		} else {
			s.fs.Remove(s.path(recycleName))
		}
	}
	f, err = s.fs.Create(p)
	return f, false, err
}

// takePrepared turns the prepared file into segment id: it writes the
// header, syncs it, renames the file into place and syncs the directory.
// ok is false if there was no usable prepared file.
func (s *Store) takePrepared(id uint32, firstLSN uint64) (seg *segment, ok bool, err error) {
	return s.installPrepared(<-s.prepc, id, firstLSN)
}

// newSegment creates segment id, preallocated unless NoPreallocate (or
// preallocation fails).
func (s *Store) newSegment(id uint32, firstLSN uint64) (*segment, error) {
	if !s.opts.NoPreallocate {
		f, err := s.preallocate(false, false)
		if err != nil {
			s.log.Warn("preallocating a segment failed; creating it plainly", "err", err)
		}
		seg, ok, err := s.installPrepared(prepared{f: f, err: err}, id, firstLSN)
		if ok || err != nil {
			return seg, err
		}
	}
	return s.createSegment(id, firstLSN)
}

func (s *Store) installPrepared(p prepared, id uint32, firstLSN uint64) (seg *segment, ok bool, err error) {
	if p.err != nil {
		return nil, false, nil
	}
	s.prepBytes.Store(0)
	name := segName(s.opts.Dir, id)
	fail := func(err error) (*segment, bool, error) {
		p.f.Close()
		return nil, true, err
	}
	if _, err := p.f.WriteAt(appendSegHeader(nil, id, firstLSN), 0); err != nil {
		return fail(fmt.Errorf("write %s: %w", name, err))
	}
	if !s.opts.NoSync {
		if err := p.f.Sync(); err != nil {
			return fail(fmt.Errorf("sync %s: %w", name, err))
		}
	}
	if err := s.fs.Rename(s.path(prepName), name); err != nil {
		return fail(fmt.Errorf("rename to %s: %w", name, err))
	}
	if !s.opts.NoSync {
		if err := s.fs.SyncDir(s.opts.Dir); err != nil {
			s.fs.Remove(name) // not a segment yet: recovery must not find it
			return fail(fmt.Errorf("sync dir %s: %w", s.opts.Dir, err))
		}
	}
	seg = newSegment(id, name, p.f)
	seg.firstLSN = firstLSN
	seg.size = segHeaderSize
	seg.alloc = s.opts.SegmentSize
	return seg, true, nil
}
