package filestore

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

// Store is the file-backed store.Store. Create it with Open.
type Store struct {
	opts Options
	fs   vfs.FS
	log  *slog.Logger
	lock io.Closer

	// closeMu orders Close after every public call in flight: calls hold
	// it for reading, Close for writing.
	closeMu sync.RWMutex
	closed  bool // guarded by closeMu

	// failed holds the first error the store cannot recover from while
	// running (a failed fsync: the page cache can no longer be trusted);
	// once set, every Commit and Sync fails with it. It wraps
	// store.ErrFailed.
	failed atomic.Pointer[error]
	// noSpace is the refusal of the last group write when it failed for
	// lack of space; nil once a write succeeds again.
	noSpace atomic.Pointer[store.NoSpaceError]
	// space caches the file system's free space (see disk.go).
	space spaceCache

	// mu guards the index, the segment map and the positions below. The
	// writer holds it exclusively while it applies a group; ReadData holds
	// it shared only to find a message.
	mu struct {
		sync.RWMutex
		ix     *index
		segs   map[uint32]*segment
		active *segment
		// applied is the LSN of the last applied record and appliedPos
		// the position just past it: a checkpoint taken now replays from
		// there.
		applied    uint64
		appliedPos logPos
		// ckpt is the latest durable checkpoint.
		ckpt       logPos
		ckptLSN    uint64
		ckptBytes  int64
		ckptTime   time.Time
		ckptLogEnd int64     // total log bytes ever written when it was taken
		sealedAt   time.Time // when the active segment was started
		logWritten int64     // total log bytes ever written (this process)
		// blobs are the live blob files by id, deadBlobs those no entry
		// refers to any more, waiting to be deleted (blob.go).
		blobs     map[uint32]blobInfo
		deadBlobs []deadBlob
		// composites are the composite blobs whose files exist, by id
		// (composite.go); badRefs those whose header Open could not read.
		composites map[uint32]composite
		badRefs    []uint32
	}
	nextBlob  atomic.Uint32 // the last blob id handed out
	nextSpool atomic.Uint64 // the last spool file number handed out
	// nDeadBlobs is len(mu.deadBlobs), read without the lock so that a
	// commit sweeps only when there is something to sweep.
	nDeadBlobs atomic.Int64

	reqc            chan *request
	syncc           chan syncJob
	syncedLSN       atomic.Uint64 // highest LSN known durable
	prepc           chan prepared // the preparer's next preallocated segment
	prepReq         chan struct{} // asks the preparer for one
	prepBytes       atomic.Int64  // size of a prepared, unused segment file
	activeOff       atomic.Int64  // the writer's offset in the active segment (paces the preparer)
	recycleMu       sync.Mutex    // serializes keeping, taking and dropping recycleName
	recycleBytes    atomic.Int64  // size of recycleName, 0 if there is none (see deleteSegments)
	nRecycled       atomic.Int64  // preparations that reused a deleted segment's file
	nReserved       atomic.Int64  // preparations that only reserved blocks (no zeros)
	loggedBytes     atomic.Int64  // bytes the writer appended to the log (the preparer's choice)
	uncachedTo      uint32        // segments up to this id had their pages dropped (written by the preparer under mu)
	nUncached       atomic.Int64  // segments whose pages the preparer dropped
	nGroups         atomic.Int64  // group writes, for benchmarks
	nSyncs          atomic.Int64  // fdatasync calls by the syncer, for benchmarks
	syncNanos       atomic.Int64  // time the syncer spent in them
	gate            *store.Gate   // followers the syncer waits for
	nGatherTimeouts atomic.Int64  // waits for followers that ran out
	nFullRounds     atomic.Int64  // waits for followers ended by RoundBytes
	stopWriter      chan struct{}
	writerDone      chan struct{}
	w               writerState // owned by the writer goroutine

	// maintMu serialises checkpoints and compaction passes.
	maintMu   sync.Mutex
	stopMaint chan struct{}
	maintDone chan struct{}
	lastTick  time.Time // guarded by maintMu

	salvaged bool // recovery skipped something (Salvage); set before Open returns
}

// logPos is a position in the log.
type logPos struct {
	seg uint32
	off int64
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.StatsReporter = (*Store)(nil)
	_ store.Compacter     = (*Store)(nil)
)

// Open opens (creating if needed) the store in opts.Dir and recovers its
// state: it loads the newest checkpoint and replays the log after it.
func Open(opts Options) (*Store, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	s := &Store{
		opts:       opts,
		fs:         opts.FS,
		log:        opts.Logger.With("dir", opts.Dir),
		reqc:       make(chan *request, 4096),
		syncc:      make(chan syncJob, 1),
		gate:       store.NewGate(),
		prepc:      make(chan prepared, 1),
		prepReq:    make(chan struct{}, 1),
		stopWriter: make(chan struct{}),
		writerDone: make(chan struct{}),
		stopMaint:  make(chan struct{}),
		maintDone:  make(chan struct{}),
	}
	s.mu.ix = newIndex()
	s.mu.segs = make(map[uint32]*segment)
	s.mu.blobs = make(map[uint32]blobInfo)
	s.mu.composites = make(map[uint32]composite)
	if err := s.fs.MkdirAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	lock, err := s.fs.Lock(s.path(lockName))
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	s.lock = lock
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.mu.ckptTime = time.Now()
	go s.writeLoop()
	if s.salvaged {
		// Record what was salvaged, so the next open starts from it and
		// does not meet the same damage again.
		s.maintMu.Lock()
		err := s.checkpointForced()
		s.maintMu.Unlock()
		if err != nil {
			close(s.maintDone)
			s.Close()
			return nil, err
		}
	}
	if opts.BackgroundInterval > 0 {
		go s.maintainLoop()
	} else {
		close(s.maintDone)
	}
	return s, nil
}

func (s *Store) path(name string) string { return s.opts.Dir + "/" + name }

func (s *Store) failure() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Store) fail(err error) error {
	err = fmt.Errorf("%w: filestore: %w", store.ErrFailed, err)
	if s.failed.CompareAndSwap(nil, &err) {
		s.log.Error("store stopped after an I/O error; restart the broker to recover (nothing acknowledged is lost)", "err", err)
	}
	return *s.failed.Load()
}

// Commit applies b atomically. With sync it returns once b is durable;
// without, once b is in the log (readable, and durable with the next
// sync). Concurrent commits share one write and one fdatasync.
func (s *Store) Commit(b *store.Batch, sync bool) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	if err := s.failure(); err != nil {
		return err
	}
	r := getRequest()
	defer putRequest(r)
	var blobs []blobRef
	if b != nil && len(b.Ops) > 0 {
		var err error
		if b, err = s.readTails(b); err != nil {
			return err
		}
		if blobs, err = s.writeBlobs(b); err != nil {
			return err
		}
		rec, err := encodeBatchBlobs(r.rec[:0], b, blobs, &r.holes)
		if err != nil {
			s.dropBlobs(blobs)
			s.unpinBases(pinnedBases(blobs))
			return err
		}
		r.rec = rec
	} else if !sync {
		return nil
	}
	r.sync = sync
	if sync && b != nil {
		r.fol = b.Follower
	}
	err := s.submit(r)
	if err != nil && blobs != nil && !errors.Is(err, store.ErrFailed) {
		// Refused, so never in the log: its blobs go. (After ErrFailed
		// the record may be on disk; the next Open decides.)
		s.dropBlobs(blobs)
	}
	s.unpinBases(pinnedBases(blobs)) // the record is applied, or never will be
	if sync {
		s.sweepBlobs()
	}
	return err
}

// dropBlobs removes the blob files of a batch that was not committed.
func (s *Store) dropBlobs(blobs []blobRef) {
	var ids []uint32
	for _, r := range blobs {
		if r.id != 0 && !slices.Contains(ids, r.id) {
			ids = append(ids, r.id)
		}
	}
	s.forgetComposites(ids)
	s.removeBlobs(ids)
}

// submit hands r to the writer and waits for its answer.
func (s *Store) submit(r *request) error {
	s.reqc <- r
	return <-r.done
}

// Sync makes every committed batch durable.
func (s *Store) Sync() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	return s.syncLog()
}

func (s *Store) syncLog() error {
	if err := s.failure(); err != nil {
		return err
	}
	r := getRequest()
	defer putRequest(r)
	r.sync = true
	return s.submit(r)
}

// ReadData reads the Data of message (entityID, seq) from its segment and
// checks its checksum.
func (s *Store) ReadData(entityID, seq uint64) ([]byte, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	return s.readDataLocked(entityID, seq)
}

// readDataLocked is ReadData with closeMu held for reading.
func (s *Store) readDataLocked(entityID, seq uint64) ([]byte, error) {
	s.mu.RLock()
	seg, ent, err := s.pinDataLocked(entityID, seq)
	s.mu.RUnlock()
	if err == errIsBlob {
		return s.readBlobData(entityID, seq, ent)
	}
	if err != nil || seg == nil {
		return emptyData(err)
	}
	defer seg.release()
	return readData(seg, ent)
}

// pinDataLocked finds the Data of message (entityID, seq) and pins its
// segment (the caller releases it once read). A nil segment with a nil
// error is empty Data. mu is held, for reading at least.
func (s *Store) pinDataLocked(entityID, seq uint64) (*segment, entry, error) {
	e := s.mu.ix.entities[entityID]
	if e == nil {
		return nil, entry{}, store.ErrNotFound
	}
	c, i, ok := e.lookup(seq)
	if !ok {
		return nil, entry{}, store.ErrNotFound
	}
	ent := c.ents[i]
	if ent.size == 0 {
		return nil, ent, nil
	}
	if ent.seg == blobSeg {
		return nil, ent, errIsBlob
	}
	seg := s.mu.segs[ent.seg]
	if seg == nil {
		return nil, ent, fmt.Errorf("filestore: message %d/%d: segment %d missing: %w", entityID, seq, ent.seg, store.ErrCorrupt)
	}
	seg.refs.Add(1)
	return seg, ent, nil
}

// errIsBlob is pinDataLocked's answer for Data in a blob file (read
// with readBlob, no segment pinned).
var errIsBlob = errors.New("filestore: data is in a blob")

// emptyData is ReadData's answer when pinDataLocked found nothing to read.
func emptyData(err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	return []byte{}, nil
}

// Limits of one coalesced read in ReadDataBatch: the Data of neighbouring
// messages is read with one pread when the bytes between them (record
// headers and Meta) are at most maxReadGap and the whole span at most
// maxReadSpan.
const (
	maxReadGap  = 4 << 10
	maxReadSpan = 1 << 20
)

// ReadDataBatch reads the Data of several messages, with one pread per
// run of neighbouring data in a segment (a receiver's batch of messages
// sent one after another lies in one run).
func (s *Store) ReadDataBatch(refs []store.DataRef) ([][]byte, []error) {
	datas, errs := make([][]byte, len(refs)), make([]error, len(refs))
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		for i := range errs {
			errs[i] = store.ErrClosed
		}
		return datas, errs
	}
	type want struct {
		i   int
		seg *segment
		ent entry
	}
	ws := make([]want, 0, len(refs))
	var blobs []want
	s.mu.RLock()
	for i, r := range refs {
		seg, ent, err := s.pinDataLocked(r.EntityID, r.Seq)
		if err == errIsBlob {
			blobs = append(blobs, want{i: i, ent: ent})
			continue
		}
		if err != nil || seg == nil {
			datas[i], errs[i] = emptyData(err)
			continue
		}
		ws = append(ws, want{i: i, seg: seg, ent: ent})
	}
	s.mu.RUnlock()
	for _, w := range blobs {
		datas[w.i], errs[w.i] = s.readBlobData(refs[w.i].EntityID, refs[w.i].Seq, w.ent)
	}
	slices.SortFunc(ws, func(a, b want) int {
		if a.seg.id != b.seg.id {
			return cmp.Compare(a.seg.id, b.seg.id)
		}
		return cmp.Compare(a.ent.off, b.ent.off)
	})
	for a := 0; a < len(ws); {
		start := int64(ws[a].ent.off)
		end := start + int64(ws[a].ent.size)
		b := a + 1
		for ; b < len(ws) && ws[b].seg == ws[a].seg; b++ {
			off, next := int64(ws[b].ent.off), int64(ws[b].ent.off)+int64(ws[b].ent.size)
			if off > end+maxReadGap || max(end, next)-start > maxReadSpan {
				break
			}
			end = max(end, next)
		}
		run := ws[a:b]
		a = b
		if len(run) == 1 {
			datas[run[0].i], errs[run[0].i] = readData(run[0].seg, run[0].ent)
			continue
		}
		buf := make([]byte, end-start)
		if _, err := run[0].seg.f.ReadAt(buf, start); err != nil {
			// Let each message report its own error.
			for _, w := range run {
				datas[w.i], errs[w.i] = readData(w.seg, w.ent)
			}
			continue
		}
		var taken int64 // end of the bytes handed out so far
		for _, w := range run {
			from := int64(w.ent.off) - start
			to := from + int64(w.ent.size)
			d := buf[from:to:to]
			if errs[w.i] = checkData(w.seg, w.ent, d); errs[w.i] != nil {
				continue
			}
			if from < taken {
				d = bytes.Clone(d) // the same message twice: slices never overlap
			}
			taken = max(taken, to)
			datas[w.i] = d
		}
	}
	for _, w := range ws {
		w.seg.release()
	}
	return datas, errs
}

func readData(seg *segment, ent entry) ([]byte, error) {
	buf := make([]byte, ent.size)
	if _, err := seg.f.ReadAt(buf, int64(ent.off)); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("filestore: %s: offset %d: data past end of file: %w", seg.path, ent.off, store.ErrCorrupt)
		}
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if err := checkData(seg, ent, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// checkData checks that d, read for ent, has the checksum ent records.
func checkData(seg *segment, ent entry, d []byte) error {
	if crc(d) != ent.crc {
		return fmt.Errorf("filestore: %s: offset %d: data checksum mismatch: %w", seg.path, ent.off, store.ErrCorrupt)
	}
	return nil
}

// snapshot freezes the index (see index.snapshot) and notes the log
// position it corresponds to.
func (s *Store) snapshot(withValues bool) (*snapshot, uint64, logPos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.ix.snapshot(withValues), s.mu.applied, s.mu.appliedPos
}

// Recover replays the live state to v: entities by ID, then messages by
// (EntityID, Seq), then values by (EntityID, Key). It works on a snapshot,
// so v may call any Store method, including Commit.
func (s *Store) Recover(v store.Visitor) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	snap, _, _ := s.snapshot(v.Value != nil)
	if v.Entity != nil {
		for i := range snap.entities {
			e := &snap.entities[i]
			if err := v.Entity(store.Entity{ID: e.id, Name: e.name, Spec: e.spec, LastSeq: e.lastSeq}); err != nil {
				return err
			}
		}
	}
	if v.Message != nil {
		for i := range snap.entities {
			e := &snap.entities[i]
			for _, c := range e.chunks {
				for j := range c.ents {
					ent := &c.ents[j]
					if err := v.Message(store.Message{EntityID: e.id, Seq: ent.seq, Meta: c.meta(j), Size: int(ent.size)}); err != nil {
						return err
					}
				}
			}
		}
	}
	if v.Value != nil {
		for i := range snap.entities {
			e := &snap.entities[i]
			for _, k := range slices.Sorted(maps.Keys(e.values)) {
				if err := v.Value(store.Value{EntityID: e.id, Key: k, Value: e.values[k]}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Stats summarises the store.
func (s *Store) Stats() store.Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := store.Stats{
		Entities:  len(s.mu.ix.entities),
		Messages:  s.mu.ix.nmsgs,
		Values:    s.mu.ix.nvalues,
		DataBytes: s.mu.ix.dataBytes,
		DiskBytes: s.mu.ckptBytes,
	}
	for _, seg := range s.mu.segs {
		st.DiskBytes += seg.diskSize()
	}
	st.DiskBytes += s.prepBytes.Load() + s.recycleBytes.Load() + s.blobDiskBytesLocked()
	return st
}

// Close stops background work, writes a checkpoint (so the next Open need
// not replay the log), syncs and closes every file.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	s.closeMu.Unlock()

	close(s.stopMaint)
	<-s.maintDone
	var err error
	if s.failure() == nil {
		s.maintMu.Lock()
		s.mu.RLock()
		dirty := s.mu.applied != s.mu.ckptLSN
		s.mu.RUnlock()
		if dirty {
			// The checkpoint only saves the next Open a replay: if it
			// cannot be written (a full disk), the synced log has it all.
			if cerr := s.checkpoint(); cerr != nil {
				s.log.Warn("no checkpoint on close; the next start replays the log", "err", cerr)
			}
		}
		s.maintMu.Unlock()
	}
	if s.failure() == nil {
		// The checkpoint (or the final sync below) makes every death
		// durable; the blobs still waiting go now, or at the next Open.
		if err := s.syncLog(); err == nil {
			s.sweepBlobs()
		}
	}
	close(s.stopWriter)
	<-s.writerDone
	if err == nil {
		err = s.w.closeErr
	}
	if ferr := s.failure(); err == nil && ferr != nil {
		err = ferr
	}
	s.closeFiles()
	return err
}

func (s *Store) closeFiles() {
	s.mu.Lock()
	for id, seg := range s.mu.segs {
		seg.release()
		delete(s.mu.segs, id)
	}
	s.mu.Unlock()
	if s.lock != nil {
		s.lock.Close()
	}
}

// LogStats counts the log's group commits since Open: group writes, the
// syncer's fdatasync rounds and the time spent in them, and the waits for
// followers' answers that ran out (Options.FollowerWait) or that a round
// ended on bytes (Options.RoundBytes). Benchmarks report
// them next to their throughput, so that a slow disk is told apart from a
// slow broker (docs/benchmarks.md).
type LogStats struct {
	Groups         int64
	Syncs          int64
	SyncTime       time.Duration
	GatherTimeouts int64
	FullRounds     int64
	Recycled       int64 // segments prepared from a deleted segment's file
	Reserved       int64 // segments prepared by reserving blocks, without zeros (prealloc.go)
	Uncached       int64 // sealed segments whose cached pages were dropped (Options.CachedLogBytes)
}

// LogStats returns the group-commit counters.
func (s *Store) LogStats() LogStats {
	return LogStats{Groups: s.nGroups.Load(), Syncs: s.nSyncs.Load(), SyncTime: time.Duration(s.syncNanos.Load()),
		GatherTimeouts: s.nGatherTimeouts.Load(), FullRounds: s.nFullRounds.Load(), Recycled: s.nRecycled.Load(),
		Uncached: s.nUncached.Load(), Reserved: s.nReserved.Load()}
}
