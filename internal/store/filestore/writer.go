package filestore

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

// request is one Commit (rec set) or sync (rec nil) handed to the writer.
type request struct {
	rec []byte // record: header (completed by the writer) + payload
	// holes are the large Data sections of rec left out of the buffer
	// (encodeBatchBlobs), in order; the committer's batch holds them
	// until it is answered.
	holes []hole
	sync  bool
	fol   *store.Follower // the committer, if it is a follower (sync only)
	done  chan error

	// Set by the writer for records.
	seg *segment
	off int64 // offset of the record in seg
	lsn uint64
}

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan error, 1)} }}

// largeRecs keeps large record buffers (vecMin to maxPooledRec) across
// garbage collections, which empty requestPool: 64 KB messages make
// collections frequent, and a fresh buffer is cleared by the runtime
// before encodeBatch overwrites it (about 6 % of the broker's CPU in a
// 64 KB send profile when a sender link's groups of up to 4 MiB were not
// kept). Shared by a process's stores; at most largeRecBudget bytes wait
// here.
var (
	largeRecs      = make(chan []byte, 16)
	largeRecBytes  atomic.Int64 // capacity of the buffers in largeRecs
	largeRecBudget = int64(16 << 20)
)

func getRequest() *request {
	r := requestPool.Get().(*request)
	if cap(r.rec) < vecMin {
		select {
		case b := <-largeRecs:
			largeRecBytes.Add(-int64(cap(b)))
			r.rec = b
		default:
		}
	}
	return r
}

// maxPooledRec bounds the record buffers kept: a sender link's group (up
// to 4 MiB of messages, internal/servicebus) reuses its buffer, a batch
// of larger messages does not pin one.
const maxPooledRec = 5 << 20

func putRequest(r *request) {
	switch c := cap(r.rec); {
	case c > maxPooledRec:
		r.rec = nil
	case c >= vecMin:
		if largeRecBytes.Add(int64(c)) <= largeRecBudget {
			select {
			case largeRecs <- r.rec[:0]:
				r.rec = nil
			default:
				largeRecBytes.Add(-int64(c))
				r.rec = nil // a large buffer does not go to requestPool
			}
		} else {
			largeRecBytes.Add(-int64(c))
			r.rec = nil
		}
	}
	r.rec = r.rec[:0]
	clear(r.holes)
	r.holes = r.holes[:0]
	r.sync, r.fol, r.seg, r.off, r.lsn = false, nil, nil, 0, 0
	requestPool.Put(r)
}

// syncJob asks the syncer to make the log durable up to lsn (all of it in
// seg or in older, already synced segments) and then release waiters.
type syncJob struct {
	seg     *segment
	lsn     uint64
	waiters []*request
	bytes   int // record bytes written since the previous job
}

// writerState is owned by the writer goroutine (and by recover, before the
// writer starts).
type writerState struct {
	seg      *segment // active segment
	off      int64    // end of what has been written to seg
	nextLSN  uint64
	buf      []byte
	pieces   []piece
	iov      [][]byte
	group    []*request
	closeErr error
	// dirtyEnd is the end of the bytes a failed write may have left past
	// off (see writeFailed); 0 when there are none.
	dirtyEnd int64
	// noRotateUntil: after a failure to start a new segment, the active
	// one grows until then before the next attempt.
	noRotateUntil time.Time
	// unsynced is the record bytes written since the last sync job.
	unsynced int
}

// The log pipeline has three goroutines:
//
//	committers --reqc--> writer --syncc--> syncer --relc--> releaser
//
// The writer takes the first pending request, drains whatever else is
// queued (group commit), writes all records with one write, applies them
// to the index and releases the unsynced committers. The synced ones go to
// the syncer as one job, and the writer moves on to the next group while
// the syncer runs fdatasync: the next group's write overlaps this group's
// sync. The syncer drains all pending jobs, syncs once, hands the jobs to
// the releaser and starts the next sync at once; the releaser answers
// every waiter of the round (so waking them overlaps the next sync).
// Before syncing, the syncer may wait for followers (commit pacing: see
// the package doc).
//
// syncedLSN (written by the syncer and by rotation, read by the writer for
// record headers) only grows.

func (s *Store) writeLoop() {
	defer close(s.writerDone)
	syncerDone := make(chan struct{})
	go s.syncLoop(syncerDone)
	prepDone := make(chan struct{})
	go s.prepLoop(prepDone)
	if !s.opts.NoPreallocate {
		s.prepReq <- struct{}{}
	}
	defer func() {
		close(s.prepReq)
		<-prepDone
		close(s.syncc)
		<-syncerDone
		// Close holds closeMu exclusively and stopped maintenance, so
		// nothing can be queued any more; make the tail durable.
		if s.failure() == nil && !s.opts.NoSync && s.syncedLSN.Load() < s.w.nextLSN-1 {
			if err := s.w.seg.f.Sync(); err != nil {
				s.w.closeErr = s.fail(err)
			}
		}
	}()
	for {
		var first *request
		select {
		case first = <-s.reqc:
		case <-s.stopWriter:
			return
		}
		group := append(s.w.group[:0], first)
		size := len(first.rec)
	drain:
		for size < s.opts.MaxGroupBytes {
			select {
			case r := <-s.reqc:
				group = append(group, r)
				size += len(r.rec)
			default:
				break drain
			}
		}
		s.processGroup(group)
		s.nGroups.Add(1)
		clear(group)
		s.w.group = group[:0]
	}
}

func (s *Store) processGroup(group []*request) {
	if err := s.failure(); err != nil {
		for _, r := range group {
			r.done <- err
		}
		return
	}
	if n, err := s.writeGroup(group); err != nil {
		// group[:n] is written and applied; the rest is refused, and its
		// bytes are gone from the log again (see writeFailed).
		err = s.writeFailed(err)
		for _, r := range group[n:] {
			r.done <- err
		}
		group = group[:n]
	} else {
		s.noSpace.Store(nil)
	}
	// Everything is written and applied: unsynced committers may go. A
	// released request is recycled at once, so pick out the syncers first.
	var syncers []*request
	for _, r := range group {
		s.w.unsynced += len(r.rec)
		if r.sync {
			syncers = append(syncers, r)
		}
	}
	for _, r := range group {
		if !r.sync {
			r.done <- nil
		}
	}
	if len(syncers) == 0 {
		return
	}
	if s.opts.NoSync {
		for _, r := range syncers {
			r.done <- nil
		}
		return
	}
	s.w.seg.refs.Add(1) // released by the syncer
	s.syncc <- syncJob{seg: s.w.seg, lsn: s.w.nextLSN - 1, waiters: syncers, bytes: s.w.unsynced}
	s.w.unsynced = 0
}

// errFatal marks a writer error the store cannot recover from in-process
// (a failed fsync).
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

// writeFailed handles a failed write of records to the active segment:
// the records were not applied (their committers are refused), but some
// of their bytes may be in the file, where a later replay would find them
// (a whole record, or a torn one followed by new records, which replay
// would take for corruption). So the bytes from the end of the last good
// record to the end of the failed write are zeroed (within the
// preallocated size: overwriting takes no new space) or cut off
// (truncate, which frees space), and that is synced before anything else
// is written; the next record goes where the failed one would have. A
// failed write for lack of space becomes a *store.NoSpaceError and the
// store goes on; any other failure, or a failed repair, stops the store
// (ErrFailed).
func (s *Store) writeFailed(err error) error {
	var fatal errFatal
	if errors.As(err, &fatal) {
		return s.fail(fatal.err)
	}
	if rerr := s.repairTail(); rerr != nil {
		s.log.Error("cannot undo a failed write", "write", err, "err", rerr)
		return s.fail(fmt.Errorf("%w (undoing it: %w)", err, rerr))
	}
	if errors.Is(err, syscall.ENOSPC) {
		ns := s.noSpaceError(err)
		if s.noSpace.Swap(ns) == nil {
			s.log.Error("disk full: refusing writes until space is freed", "err", err, "free", ns.Free, "total", ns.Total)
		}
		return ns
	}
	return s.fail(err)
}

// repairTail zeroes or truncates the active segment from the writer's
// offset to the end of the failed writes (w.dirtyEnd) and syncs it.
func (s *Store) repairTail() error {
	seg, off, end := s.w.seg, s.w.off, s.w.dirtyEnd
	s.w.dirtyEnd = 0
	if end <= off {
		return nil
	}
	if zeroEnd := min(end, seg.alloc); zeroEnd > off {
		if _, err := seg.f.WriteAt(make([]byte, zeroEnd-off), off); err != nil {
			return fmt.Errorf("zero %s: %w", seg.path, err)
		}
	}
	if end > max(off, seg.alloc) {
		if err := seg.f.Truncate(max(off, seg.alloc)); err != nil {
			return fmt.Errorf("truncate %s: %w", seg.path, err)
		}
	}
	if s.opts.NoSync {
		return nil
	}
	if err := seg.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", seg.path, err)
	}
	return nil
}

// syncLoop is the syncer goroutine; it exits when syncc is closed.
//
// It hands each round's waiters to a releaser goroutine and goes straight
// on to the next fdatasync: waking the waiters (often close to a hundred
// committers) here left the disk idle between syncs for a good part of
// each round (docs/benchmarks.md: durable sends, in process).
func (s *Store) syncLoop(done chan struct{}) {
	relc := make(chan syncRound, 64)
	relDone := make(chan struct{})
	go releaseLoop(relc, relDone)
	defer func() {
		close(relc)
		<-relDone
		close(done)
	}()
	var (
		awaited []*store.Follower // released by the last round, answers awaited
		timer   *time.Timer
	)
	for job := range s.syncc {
		jobs := s.drainJobs(s.addJob(make([]syncJob, 0, 4), job))
		if len(awaited) > 0 {
			full := false
			if s.gate.Pending() > 0 {
				if timer == nil {
					timer = time.NewTimer(s.opts.FollowerWait)
				} else {
					timer.Reset(s.opts.FollowerWait)
				}
				jobs, full = s.gatherFollowers(jobs, timer)
				timer.Stop()
			}
			if full {
				// The round closed on bytes, not on a timeout: the
				// followers still awaited are awaited by the next round.
				kept := awaited[:0]
				for _, f := range awaited {
					if s.gate.Waits(f) && !slices.Contains(kept, f) {
						kept = append(kept, f)
					}
				}
				clear(awaited[len(kept):])
				awaited = kept
			} else {
				// Whoever has not answered is not waited for any more.
				for _, f := range awaited {
					s.gate.GiveUp(f)
				}
				clear(awaited)
				awaited = awaited[:0]
			}
		}
		var lsn uint64
		var segs []*segment
		for _, j := range jobs {
			lsn = max(lsn, j.lsn)
			if !slices.Contains(segs, j.seg) {
				segs = append(segs, j.seg)
			}
		}
		err := s.failure()
		if err == nil && s.syncedLSN.Load() < lsn {
			slices.SortFunc(segs, func(a, b *segment) int { return int(a.id) - int(b.id) })
			s.nSyncs.Add(1)
			t0 := time.Now()
			for _, seg := range segs {
				if serr := seg.f.Sync(); serr != nil {
					err = s.fail(fmt.Errorf("sync %s: %w", seg.path, serr))
					break
				}
			}
			d := time.Since(t0)
			s.syncNanos.Add(int64(d))
			if o := s.opts.SyncObserver; o != nil && err == nil {
				o.Synced(d, countWaiters(jobs))
			}
			if err == nil {
				s.raiseSynced(lsn)
			}
		}
		if err == nil && s.opts.FollowerWait > 0 {
			// Await before the releaser wakes them (a request is recycled
			// once answered).
			for _, j := range jobs {
				for _, r := range j.waiters {
					if r.fol != nil && r.fol.Promised() && s.gate.Await(r.fol) {
						awaited = append(awaited, r.fol)
					}
				}
			}
		}
		rd := syncRound{jobs: jobs, err: err}
		if len(relc) == 0 && countWaiters(jobs) <= inlineRelease {
			// A small round (a paced sender's one or two commits):
			// waking its waiters here costs less than handing them to
			// the releaser, one goroutine hand-off fewer per commit.
			release(rd)
		} else {
			relc <- rd
		}
	}
}

// inlineRelease is the largest round the syncer releases itself rather
// than through the releaser, which exists so that the next fdatasync
// need not wait for a large round's wake-ups.
const inlineRelease = 2

// drainJobs appends the sync jobs already queued to jobs.
func (s *Store) drainJobs(jobs []syncJob) []syncJob {
	for {
		select {
		case j, ok := <-s.syncc:
			if !ok {
				return jobs
			}
			jobs = s.addJob(jobs, j)
		default:
			return jobs
		}
	}
}

// gatherFollowers waits until every awaited follower has answered, the
// round holds Options.RoundBytes of records (full, a round closed on
// bytes), or the timer fires, taking the sync jobs that arrive meanwhile.
// A closed syncc ends the wait (the loop then sees it closed).
func (s *Store) gatherFollowers(jobs []syncJob, timer *time.Timer) (_ []syncJob, full bool) {
	bytes := 0
	for _, j := range jobs {
		bytes += j.bytes
	}
	for s.gate.Pending() > 0 {
		if bytes >= s.opts.RoundBytes {
			s.nFullRounds.Add(1)
			return s.drainJobs(jobs), true
		}
		select {
		case j, ok := <-s.syncc:
			if !ok {
				return jobs, false
			}
			jobs = s.addJob(jobs, j)
			bytes += j.bytes
		case <-s.gate.Wake():
		case <-timer.C:
			s.nGatherTimeouts.Add(1)
			return jobs, false
		}
	}
	return s.drainJobs(jobs), false
}

// addJob appends job to jobs and records the followers among its
// committers as answered.
func (s *Store) addJob(jobs []syncJob, job syncJob) []syncJob {
	for _, r := range job.waiters {
		if r.fol != nil {
			s.gate.Answer(r.fol)
		}
	}
	return append(jobs, job)
}

// syncRound is one fdatasync's outcome for the releaser.
type syncRound struct {
	jobs []syncJob
	err  error
}

// releaseLoop is the releaser goroutine: it answers the waiters of each
// sync round (in order) and drops the round's segment references. It
// exits when relc is closed.
func releaseLoop(relc chan syncRound, done chan struct{}) {
	defer close(done)
	for rd := range relc {
		release(rd)
	}
}

// release answers a round's waiters and lets go of its segments.
func release(rd syncRound) {
	for i := range rd.jobs {
		for _, r := range rd.jobs[i].waiters {
			r.done <- rd.err
		}
		rd.jobs[i].seg.release()
	}
}

func (s *Store) raiseSynced(lsn uint64) {
	for {
		cur := s.syncedLSN.Load()
		if cur >= lsn || s.syncedLSN.CompareAndSwap(cur, lsn) {
			return
		}
	}
}

// piece is a run of the bytes one write puts in the log: buf[lo:hi] of
// the writer's buffer (rec nil), where small records are gathered, or a
// large record written from the committer's own buffer (rec).
type piece struct {
	rec    []byte
	lo, hi int
}

// vecMin is the smallest record written from its committer's buffer, as
// one buffer of a vectored write (vfs.VectorWriter), instead of being
// copied into the writer's: for a 64 KB message the copy cost more than
// the extra iovec. Smaller records are still gathered, so that a group of
// a few hundred 1 KB messages is one buffer.
const vecMin = 16 << 10

// writeGroup lays the group's records out in the log (moving to a new
// segment when the active one is full), writes them and applies them to
// the index. It returns how many requests (a prefix of group) are written
// and applied: all of them, or, with an error, those before the part whose
// write failed (the records up to a segment change are written and applied
// before it).
func (s *Store) writeGroup(group []*request) (int, error) {
	buf, pieces := s.w.buf[:0], s.w.pieces[:0]
	partStart := s.w.off
	partLen := 0 // bytes of the part laid out so far
	part := 0    // first request of the part
	synced := s.syncedLSN.Load()
	_, vector := s.w.seg.f.(vfs.VectorWriter)
	defer func() {
		s.w.buf = buf[:0]
		if cap(buf) > 4*s.opts.MaxGroupBytes {
			s.w.buf = nil
		}
		clear(pieces)
		s.w.pieces = pieces[:0]
	}()
	for i, r := range group {
		if len(r.rec) == 0 {
			continue
		}
		if s.w.off+int64(partLen)+int64(len(r.rec)) > s.opts.SegmentSize && s.w.off+int64(partLen) > segHeaderSize &&
			!s.w.noRotateUntil.After(time.Now()) {
			if err := s.writePart(group[part:i], buf, pieces, partStart, partLen); err != nil {
				return part, err
			}
			part = i
			if err := s.rotate(); err != nil {
				var fatal errFatal
				if errors.As(err, &fatal) {
					return part, err
				}
				// No new segment (the disk is full, say): the active one
				// grows past SegmentSize meanwhile.
				s.log.Warn("cannot start a new log segment; the current one grows meanwhile", "err", err)
				s.w.noRotateUntil = time.Now().Add(rotateRetry)
			}
			clear(pieces)
			buf, pieces, partStart, partLen = buf[:0], pieces[:0], s.w.off, 0
			synced = s.syncedLSN.Load()
			_, vector = s.w.seg.f.(vfs.VectorWriter)
		}
		r.seg = s.w.seg
		r.off = partStart + int64(partLen)
		r.lsn = s.w.nextLSN
		s.w.nextLSN++
		sealRecHeader(r.rec, r.lsn, synced)
		partLen += len(r.rec)
		if vector && len(r.rec) >= vecMin {
			at := 0
			for _, h := range r.holes {
				if h.at > at {
					pieces = append(pieces, piece{rec: r.rec[at:h.at]})
				}
				pieces = append(pieces, piece{rec: h.data})
				at = h.at + len(h.data)
			}
			if at < len(r.rec) {
				pieces = append(pieces, piece{rec: r.rec[at:]})
			}
			continue
		}
		if n := len(pieces); n > 0 && pieces[n-1].rec == nil && pieces[n-1].hi == len(buf) {
			pieces[n-1].hi += len(r.rec)
		} else {
			pieces = append(pieces, piece{lo: len(buf), hi: len(buf) + len(r.rec)})
		}
		rec := len(buf)
		buf = append(buf, r.rec...)
		for _, h := range r.holes {
			copy(buf[rec+h.at:], h.data)
		}
	}
	if err := s.writePart(group[part:], buf, pieces, partStart, partLen); err != nil {
		return part, err
	}
	return len(group), nil
}

// writePart writes the records of part, n bytes laid out as pieces (of
// buf or their own), at off in the active segment and applies them. If
// the write fails, their LSNs are given back.
func (s *Store) writePart(part []*request, buf []byte, pieces []piece, off int64, n int) error {
	if err := s.flush(buf, pieces, off, n); err != nil {
		for _, r := range part {
			if len(r.rec) != 0 {
				s.w.nextLSN = r.lsn
				break
			}
		}
		return err
	}
	var last *request
	for _, r := range part {
		if len(r.rec) != 0 {
			last = r
		}
	}
	if last == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range part {
		if len(r.rec) == 0 {
			continue
		}
		if err := s.applyRecordLocked(r.rec[recHeaderSize:], r.seg, r.off+recHeaderSize); err != nil {
			return errFatal{fmt.Errorf("apply lsn %d: %w", r.lsn, err)} // a bug: we encoded it
		}
		r.seg.size = r.off + int64(len(r.rec))
		r.seg.lastLSN = r.lsn
		s.mu.logWritten += int64(len(r.rec))
	}
	s.mu.applied = last.lsn
	s.mu.appliedPos = logPos{seg: last.seg.id, off: last.off + int64(len(last.rec))}
	return nil
}

// rotateRetry is how long the active segment grows past SegmentSize after
// a failure to start the next one, before the next attempt (a variable
// for tests).
var rotateRetry = time.Second

// flush writes the n bytes of pieces at off in the active segment: with
// one vectored write when the file takes one (only then does writeGroup
// leave records in their own buffers), else buf with one WriteAt.
func (s *Store) flush(buf []byte, pieces []piece, off int64, n int) error {
	if n == 0 {
		return nil
	}
	var err error
	if len(pieces) == 1 {
		b := pieces[0].rec
		if b == nil {
			b = buf[pieces[0].lo:pieces[0].hi]
		}
		_, err = s.w.seg.f.WriteAt(b, off)
	} else {
		iov := s.w.iov[:0]
		for _, p := range pieces {
			if p.rec != nil {
				iov = append(iov, p.rec)
			} else {
				iov = append(iov, buf[p.lo:p.hi])
			}
		}
		_, err = s.w.seg.f.(vfs.VectorWriter).WritevAt(iov, off)
		clear(iov)
		s.w.iov = iov[:0]
	}
	if err != nil {
		s.w.dirtyEnd = max(s.w.dirtyEnd, off+int64(n))
		return fmt.Errorf("write %s: %w", s.w.seg.path, err)
	}
	s.w.off = off + int64(n)
	s.activeOff.Store(s.w.off)
	s.loggedBytes.Add(int64(n))
	return nil
}

// rotate seals the active segment (syncing it, so that only the last
// segment can ever have a torn tail) and starts the next one.
func (s *Store) rotate() error {
	old := s.w.seg
	if !s.opts.NoSync && s.syncedLSN.Load() < s.w.nextLSN-1 {
		if err := old.f.Sync(); err != nil {
			return errFatal{fmt.Errorf("sync %s: %w", old.path, err)}
		}
		s.raiseSynced(s.w.nextLSN - 1)
	}
	var seg *segment
	var err error
	ok := false
	if !s.opts.NoPreallocate {
		s.activeOff.Store(s.opts.SegmentSize) // full: the preparer stops pacing itself
		seg, ok, err = s.takePrepared(old.id+1, s.w.nextLSN)
		// Ask for the one after (or another try) even on failure: the
		// next rotation waits for it.
		s.prepReq <- struct{}{}
		if err != nil {
			return err
		}
	}
	if !ok {
		if seg, err = s.createSegment(old.id+1, s.w.nextLSN); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.mu.segs[seg.id] = seg
	s.mu.active = seg
	s.mu.sealedAt = time.Now()
	s.mu.Unlock()
	s.w.seg, s.w.off = seg, segHeaderSize
	s.activeOff.Store(segHeaderSize)
	return nil
}

// createSegment creates segment id whose first record will be firstLSN,
// durably (file and directory entry) unless NoSync.
func (s *Store) createSegment(id uint32, firstLSN uint64) (*segment, error) {
	p := segName(s.opts.Dir, id)
	f, err := s.fs.Create(p)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	// A segment file that is not complete must not stay behind: recovery
	// would take it for the next segment.
	fail := func(err error) (*segment, error) {
		f.Close()
		s.fs.Remove(p)
		return nil, err
	}
	if _, err := f.WriteAt(appendSegHeader(nil, id, firstLSN), 0); err != nil {
		return fail(fmt.Errorf("write %s: %w", p, err))
	}
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			return fail(fmt.Errorf("sync %s: %w", p, err))
		}
		if err := s.fs.SyncDir(s.opts.Dir); err != nil {
			return fail(fmt.Errorf("sync dir %s: %w", s.opts.Dir, err))
		}
	}
	seg := newSegment(id, p, f)
	seg.firstLSN = firstLSN
	seg.size = segHeaderSize
	return seg, nil
}

// countWaiters is the number of commits a sync round makes durable.
func countWaiters(jobs []syncJob) int {
	n := 0
	for _, j := range jobs {
		n += len(j.waiters)
	}
	return n
}
