package filestore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/store"
)

// recover rebuilds the state from the directory: newest usable checkpoint,
// then every record after it. It leaves the writer state ready to append
// to the last segment. Its phases, in order:
//
//	scanDir               list segments and checkpoints, drop *.tmp
//	openSegments          open every segment read-only
//	loadNewestCheckpoint  the index as of the newest checkpoint that loads
//	replayPlan            the segments after it, checked for gaps
//	replayLog             apply their records, finding the log's end
//	openActive            reopen the last segment for appending (or start one)
//	installState          writer, LSNs and checkpoint references
//	removeUnreferenced    segments no longer needed by anything
//	linkComposites        composite blobs' references to their bases (composite.go)
//	checkBlobsLocked      every referenced blob file is there, whole
//	sweepOrphanBlobs      blob files nothing refers to (blob.go)
func (s *Store) recover() error {
	start := time.Now()
	segIDs, ckpts, err := s.scanDir()
	if err != nil {
		return err
	}
	if err := s.openSegments(segIDs); err != nil {
		return err
	}
	ck, err := s.loadNewestCheckpoint(ckpts)
	if err != nil {
		return err
	}
	r := replayer{s: s, expected: 1}
	if ck != nil {
		r.expected = ck.lsn + 1
	}
	replay, err := s.replayPlan(ck, segIDs)
	if err != nil {
		return err
	}
	if err := s.replayLog(&r, ck, replay); err != nil {
		return err
	}
	active, err := s.openActive(&r, ck)
	if err != nil {
		return err
	}
	s.installState(active, &r, ck)
	if s.salvaged {
		s.dropDanglingLocked()
	}
	if err := s.removeUnreferenced(active); err != nil {
		return err
	}
	if err := s.linkComposites(); err != nil {
		return err
	}
	if err := s.checkBlobsLocked(); err != nil {
		return err
	}
	if err := s.sweepOrphanBlobs(); err != nil {
		return err
	}
	s.log.Info("recovered", "entities", len(s.mu.ix.entities), "messages", s.mu.ix.nmsgs,
		"checkpoint_lsn", s.mu.ckptLSN, "replayed_records", r.records, "last_lsn", r.expected-1, "took", time.Since(start))
	return nil
}

// scanDir lists the segment ids and checkpoint LSNs in the directory,
// each sorted, and removes unfinished checkpoints left by a crash.
func (s *Store) scanDir() (segIDs []uint32, ckpts []uint64, err error) {
	names, err := s.fs.ReadDir(s.opts.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("filestore: %w", err)
	}
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			// An unfinished checkpoint from before a crash.
			if err := s.fs.Remove(s.path(name)); err != nil {
				return nil, nil, fmt.Errorf("filestore: %w", err)
			}
		case strings.HasSuffix(name, segSuffix):
			if id, ok := parseName(name, segSuffix, 32); ok {
				segIDs = append(segIDs, uint32(id))
			}
		case strings.HasSuffix(name, ckptSuffix):
			if lsn, ok := parseName(name, ckptSuffix, 64); ok {
				ckpts = append(ckpts, lsn)
			}
		}
	}
	slices.Sort(segIDs)
	slices.Sort(ckpts)
	return segIDs, ckpts, nil
}

// openSegments opens every segment read-only into s.mu.segs, with its
// size on disk.
func (s *Store) openSegments(segIDs []uint32) error {
	for _, id := range segIDs {
		p := segName(s.opts.Dir, id)
		f, err := s.fs.Open(p)
		if err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		size, err := f.Size()
		if err != nil {
			f.Close()
			return fmt.Errorf("filestore: %w", err)
		}
		seg := newSegment(id, p, f)
		seg.size = size
		s.mu.segs[id] = seg
	}
	return nil
}

// loadNewestCheckpoint loads the newest checkpoint into the index; nil if
// there is none. A checkpoint that does not load is an error, or with
// Salvage is renamed aside (its partial load undone) and the next older
// one is tried.
func (s *Store) loadNewestCheckpoint(ckpts []uint64) (*ckptInfo, error) {
	for i := len(ckpts) - 1; i >= 0; i-- {
		p := ckptName(s.opts.Dir, ckpts[i])
		ck, err := s.loadCheckpoint(p)
		if err == nil {
			return ck, nil
		}
		if !s.opts.Salvage {
			return nil, err
		}
		s.log.Error("salvage: checkpoint set aside", "file", p, "renamed_to", p+corruptSuffix, "err", err)
		if err := s.fs.Rename(p, p+corruptSuffix); err != nil {
			return nil, fmt.Errorf("filestore: %w", err)
		}
		s.salvaged = true
		s.resetIndex()
	}
	return nil, nil
}

// replayPlan returns the segments to replay: those from the checkpoint's
// on, or the whole log without one. A log that does not start where it
// must (the checkpoint's segment, else segment 1) is corruption.
func (s *Store) replayPlan(ck *ckptInfo, segIDs []uint32) ([]uint32, error) {
	if ck == nil {
		if len(segIDs) > 0 && segIDs[0] != 1 {
			if err := s.corrupt(segName(s.opts.Dir, segIDs[0]), 0, "no checkpoint and the log does not start at segment 1"); err != nil {
				return nil, err
			}
		}
		return segIDs, nil
	}
	var replay []uint32
	for _, id := range segIDs {
		if id >= ck.pos.seg {
			replay = append(replay, id)
		}
	}
	if len(replay) == 0 || replay[0] != ck.pos.seg {
		if err := s.corrupt(ck.path, 0, fmt.Sprintf("the log it continues in (segment %d) is missing", ck.pos.seg)); err != nil {
			return nil, err
		}
	}
	return replay, nil
}

// replayLog applies the records of the replay segments, in order, from
// the checkpoint's position in its segment. A missing segment in the
// sequence, or a checkpoint position outside its segment, is corruption.
func (s *Store) replayLog(r *replayer, ck *ckptInfo, replay []uint32) error {
	for i, id := range replay {
		if i > 0 && id != replay[i-1]+1 {
			if err := s.corrupt(segName(s.opts.Dir, id), 0, fmt.Sprintf("segment %d is missing", replay[i-1]+1)); err != nil {
				return err
			}
		}
		from := int64(segHeaderSize)
		if ck != nil && id == ck.pos.seg {
			from = ck.pos.off
			if seg := s.mu.segs[id]; from > seg.size || from < segHeaderSize {
				if err := s.corrupt(ck.path, 0, fmt.Sprintf("its position %d is outside segment %s", from, seg.path)); err != nil {
					return err
				}
				from = seg.size
			}
		}
		if err := r.segment(s.mu.segs[id], from, i == len(replay)-1); err != nil {
			return err
		}
	}
	return nil
}

// openActive reopens the last replayed segment for appending, cutting a
// torn tail and syncing what a crashed process left in the page cache;
// without one (a new log, or with Salvage nothing usable after the
// checkpoint) it starts a new segment.
func (s *Store) openActive(r *replayer, ck *ckptInfo) (*segment, error) {
	if n := len(r.kept); n == 0 {
		id := uint32(1)
		if ck != nil {
			id = ck.pos.seg
		}
		for _, seg := range s.mu.segs {
			id = max(id, seg.id+1)
		}
		seg, err := s.newSegment(id, r.expected)
		if err != nil {
			return nil, fmt.Errorf("filestore: %w", err)
		}
		s.mu.segs[id] = seg
		return seg, nil
	}
	active := r.kept[len(r.kept)-1]
	f, err := s.fs.OpenReadWrite(active.path)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if r.truncateTo >= 0 {
		if err := f.Truncate(r.truncateTo); err != nil {
			f.Close()
			return nil, fmt.Errorf("filestore: truncate %s: %w", active.path, err)
		}
		active.size = r.truncateTo
	}
	// Make what a crashed process left in the page cache durable, so that
	// the synced LSN installState sets is true.
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("filestore: sync %s: %w", active.path, err)
		}
	}
	active.f.Close()
	active.f = f
	return active, nil
}

// installState points the writer at the end of active and records where
// the log stands: next and synced LSN, the applied position, and the
// checkpoint's LSN, position and references into the segments (removing
// older checkpoint files).
func (s *Store) installState(active *segment, r *replayer, ck *ckptInfo) {
	s.mu.active = active
	s.w.seg, s.w.off = active, active.size
	s.activeOff.Store(active.size)
	s.w.nextLSN = r.expected
	s.syncedLSN.Store(r.expected - 1)
	s.mu.applied = r.expected - 1
	s.mu.appliedPos = logPos{seg: active.id, off: active.size}
	if ck == nil {
		// Nothing to replay from but the log itself: segments before the
		// first one are not needed.
		s.mu.ckpt = logPos{seg: 0}
		return
	}
	s.mu.ckptLSN, s.mu.ckpt, s.mu.ckptBytes = ck.lsn, ck.pos, ck.size
	for id, n := range ck.refs {
		if seg := s.mu.segs[id]; seg != nil {
			seg.ckptRefs = n
		}
	}
	s.removeOldCheckpoints(ck.lsn)
}

// removeUnreferenced removes the segments before the replay start that
// nothing refers to (deleted before a crash, but their removal was not
// yet durable).
func (s *Store) removeUnreferenced(active *segment) error {
	for id, seg := range s.mu.segs {
		if seg != active && id < s.mu.ckpt.seg && seg.live == 0 && seg.ckptRefs == 0 {
			s.log.Info("removing unreferenced segment", "file", seg.path)
			delete(s.mu.segs, id)
			if err := s.fs.Remove(seg.path); err != nil {
				return fmt.Errorf("filestore: %w", err)
			}
			seg.release()
		}
	}
	return nil
}

func (s *Store) resetIndex() {
	s.mu.ix = newIndex()
	s.mu.blobs = make(map[uint32]blobInfo)
	s.mu.deadBlobs = nil
	s.nDeadBlobs.Store(0)
	for _, seg := range s.mu.segs {
		seg.live, seg.liveBytes = 0, 0
	}
}

// corrupt reports corruption at file:off. With Salvage it logs and returns
// nil, and the caller skips what it could not read.
func (s *Store) corrupt(file string, off int64, why string) error {
	err := fmt.Errorf("filestore: %s: offset %d: %s: %w", file, off, why, store.ErrCorrupt)
	if !s.opts.Salvage {
		return err
	}
	s.salvaged = true
	s.log.Error("salvage: skipping corruption", "err", err)
	return nil
}

// replayer applies the log, segment by segment.
type replayer struct {
	s        *Store
	expected uint64 // LSN of the next record
	records  int
	buf      []byte
	// kept lists the replayed segments that remain part of the log.
	kept []*segment
	// truncateTo is where the last segment's valid data ends if bytes after
	// it must go (a torn tail); -1 otherwise.
	truncateTo int64
}

// segment replays seg from offset from. last says whether it is the last
// segment, the only one whose tail may be torn. It checks the header
// (header), then applies record after record (record) until the end of
// the data, handling damage on the way (damage).
func (r *replayer) segment(seg *segment, from int64, last bool) error {
	r.truncateTo = -1
	w := &window{f: seg.f, name: seg.path, size: seg.size, buf: r.buf}
	defer func() { r.buf = w.buf[:0] }()
	from = min(max(from, segHeaderSize), max(seg.size, segHeaderSize))
	if keep, err := r.header(w, seg, from, last); err != nil || !keep {
		return err
	}
	r.kept = append(r.kept, seg)
	for off := from; off < seg.size; {
		h, b, why, err := r.record(w, seg, off)
		if err != nil {
			return err
		}
		if why != "" {
			next, stop, err := r.damage(w, seg, off, why, last)
			if err != nil || stop {
				return err
			}
			off = next
			continue
		}
		if err := r.s.applyRecordLocked(b[recHeaderSize:], seg, off+recHeaderSize); err != nil {
			if cerr := r.s.corrupt(seg.path, off, "undecodable record: "+err.Error()); cerr != nil {
				return cerr
			}
		}
		seg.lastLSN = h.lsn
		r.expected++
		r.records++
		off += recHeaderSize + int64(h.length)
	}
	return nil
}

// header checks seg's header and first LSN; keep is false if the segment
// was removed (a torn header on a segment created just before a crash) or,
// with Salvage, set aside.
func (r *replayer) header(w *window, seg *segment, from int64, last bool) (keep bool, err error) {
	s := r.s
	hdr, err := w.get(0, min(segHeaderSize, seg.size))
	if err != nil {
		return false, err
	}
	id, first, herr := parseSegHeader(hdr)
	if herr == nil && id != seg.id {
		herr = fmt.Errorf("header names segment %d", id)
	}
	if herr != nil {
		if last && from == segHeaderSize {
			// The header is synced before any record is written, so a bad
			// header with no whole record after it is a segment created
			// just before a crash; with records after it, it is damage.
			all, err := w.get(0, seg.size)
			if err != nil {
				return false, err
			}
			if _, next := findRecord(all, 0, r.expected); next < 0 {
				s.log.Warn("removing segment with torn header", "file", seg.path, "size", seg.size)
				delete(s.mu.segs, seg.id)
				seg.release()
				return false, s.fs.Remove(seg.path)
			}
		}
		if err := s.corrupt(seg.path, 0, herr.Error()); err != nil {
			return false, err
		}
		// Salvage: put the whole segment aside.
		delete(s.mu.segs, seg.id)
		seg.release()
		s.log.Error("salvage: segment set aside", "file", seg.path, "renamed_to", seg.path+corruptSuffix)
		return false, s.fs.Rename(seg.path, seg.path+corruptSuffix)
	}
	seg.firstLSN = first
	if from == segHeaderSize && first != r.expected {
		if err := s.corrupt(seg.path, 0, fmt.Sprintf("segment starts at LSN %d, want %d", first, r.expected)); err != nil {
			return false, err
		}
		r.expected = first
	}
	return true, nil
}

// record reads the record at off: its header and its bytes (header
// included), or why it is not the whole record with the expected LSN.
func (r *replayer) record(w *window, seg *segment, off int64) (h recHeader, b []byte, why string, err error) {
	if seg.size-off < recHeaderSize {
		return h, nil, "truncated record header", nil
	}
	if b, err = w.get(off, recHeaderSize); err != nil {
		return h, nil, "", err
	}
	h, ok := parseRecHeader(b)
	switch {
	case !ok:
		return h, nil, "record header checksum mismatch", nil
	case int64(h.length) > seg.size-off-recHeaderSize:
		return h, nil, "record extends past the end of the segment", nil
	}
	if b, err = w.get(off, recHeaderSize+int64(h.length)); err != nil {
		return h, nil, "", err
	}
	switch {
	case crc(b[recHeaderSize:]) != h.pcrc:
		return h, nil, "record payload checksum mismatch", nil
	case h.lsn != r.expected:
		return h, nil, fmt.Sprintf("record has LSN %d, want %d", h.lsn, r.expected), nil
	}
	return h, b, "", nil
}

// damage handles a record at off that is not whole (why). Zeros are the
// preallocated end of the data, and a torn tail of the last segment is
// cut off: both stop the replay of seg. Anything else is corruption; with
// Salvage the replay resumes at next, the next record that checks out, or
// stops if there is none.
func (r *replayer) damage(w *window, seg *segment, off int64, why string, last bool) (next int64, stop bool, err error) {
	s := r.s
	zero, err := w.allZero(off)
	if err != nil {
		return 0, false, err
	}
	if zero {
		// The preallocated, never written part: the clean end.
		seg.alloc, seg.size = seg.size, off
		return 0, true, nil
	}
	// Look at everything after the damage.
	rest, err := w.get(off, seg.size-off)
	if err != nil {
		return 0, false, err
	}
	if last {
		if proof, _ := findRecord(rest, 1, r.expected); proof < 0 {
			s.log.Warn("truncating torn tail", "file", seg.path, "offset", off, "bytes", seg.size-off, "reason", why)
			r.truncateTo = off
			seg.size = off
			return 0, true, nil
		}
	}
	if err := s.corrupt(seg.path, off, why); err != nil {
		return 0, false, err
	}
	// Salvage: resume at the next record that checks out.
	_, skip := findRecord(rest, 1, r.expected)
	if skip < 0 {
		s.log.Error("salvage: dropping the rest of the segment", "file", seg.path, "offset", off, "bytes", seg.size-off)
		if last {
			r.truncateTo = off
			seg.size = off
		}
		return 0, true, nil
	}
	nh, _ := checkRecord(rest, skip)
	s.log.Error("salvage: skipped bytes", "file", seg.path, "offset", off, "bytes", skip, "lost_lsns", fmt.Sprintf("%d-%d", r.expected, nh.lsn-1))
	r.expected = nh.lsn
	return off + skip, false, nil
}

// checkRecord validates the record at off; why is "" if it is whole.
func checkRecord(data []byte, off int64) (recHeader, string) {
	if int64(len(data))-off < recHeaderSize {
		return recHeader{}, "truncated record header"
	}
	h, ok := parseRecHeader(data[off:])
	if !ok {
		return h, "record header checksum mismatch"
	}
	if int64(h.length) > int64(len(data))-off-recHeaderSize {
		return h, "record extends past the end of the segment"
	}
	if crc(data[off+recHeaderSize:off+recHeaderSize+int64(h.length)]) != h.pcrc {
		return h, "record payload checksum mismatch"
	}
	return h, ""
}

// findRecord looks for whole records at or after from with LSN >= want
// (the batch the damage stands in for). next is the first such record's
// offset (-1 if none); proof is the offset of the first one written after
// batch want had been synced (-1 if none). Such a record proves the
// damage is not a torn write, which only ever hits unsynced bytes.
func findRecord(data []byte, from int64, want uint64) (proof, next int64) {
	proof, next = -1, -1
	// A record header is never all zeros, so no record starts after the
	// last non-zero byte (preallocated space is zeros).
	end := int64(len(data))
	for end > 0 && data[end-1] == 0 {
		end--
	}
	end = min(end+recHeaderSize, int64(len(data)))
	for p := from; p+recHeaderSize <= end; p++ {
		h, why := checkRecord(data, p)
		if why != "" || h.lsn < want {
			continue
		}
		if next < 0 {
			next = p
		}
		if h.synced >= want {
			return p, next
		}
	}
	return proof, next
}

// dropDanglingLocked removes (Salvage only) the messages whose Data is in
// a segment that was lost or set aside.
func (s *Store) dropDanglingLocked() {
	ix := s.mu.ix
	for _, e := range ix.entities {
		var lost []uint64
		for _, c := range e.chunks {
			for _, ent := range c.ents {
				if ent.size > 0 && ent.seg != blobSeg && s.mu.segs[ent.seg] == nil {
					lost = append(lost, ent.seq)
				}
			}
		}
		for _, seq := range lost {
			ix.remove(e, seq)
		}
		if len(lost) > 0 {
			s.log.Error("salvage: dropped messages whose data was lost", "entity", e.id, "messages", len(lost))
		}
	}
}
