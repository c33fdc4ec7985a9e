package filestore

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/busbarmq/busbar/internal/store"
)

// Checkpoint file layout: see doc.go.
const (
	ckptMagic      = "BUSBARCK"
	ckptVersion    = 1
	ckptHeaderSize = 40

	frameEntity = 1
	frameMsgs   = 2
	frameValue  = 3
	frameEnd    = 4

	frameHeaderSize = 8
	maxFrame        = maxPayload
)

// ckptWriter streams frames to a file through a buffer.
type ckptWriter struct {
	buf   []byte
	flush func([]byte) error
	err   error
	frame int // start of the open frame in buf
}

func (w *ckptWriter) begin(kind byte) {
	w.frame = len(w.buf)
	w.buf = append(w.buf, make([]byte, frameHeaderSize)...)
	w.buf = append(w.buf, kind)
}

func (w *ckptWriter) end() {
	body := w.buf[w.frame+frameHeaderSize:]
	binary.LittleEndian.PutUint32(w.buf[w.frame:], uint32(len(body)))
	binary.LittleEndian.PutUint32(w.buf[w.frame+4:], crc(body))
	if len(w.buf) >= 1<<20 && w.err == nil {
		w.err = w.flush(w.buf)
		w.buf = w.buf[:0]
	}
}

func (w *ckptWriter) uvarint(v uint64) { w.buf = binary.AppendUvarint(w.buf, v) }
func (w *ckptWriter) bytes(b []byte)   { w.buf = appendBytes(w.buf, b) }

// checkpoint writes a checkpoint of the current state, then lets segments
// that only it made unnecessary go. maintMu must be held.
func (s *Store) checkpoint() error { return s.writeCheckpoint(false) }

// checkpointForced writes a checkpoint even if nothing was logged since
// the last one.
func (s *Store) checkpointForced() error { return s.writeCheckpoint(true) }

// writeCheckpoint writes the checkpoint of the applied state (unless
// nothing was logged since the last one and !force): it syncs the log,
// writes the file under a temporary name (writeCheckpointFile), renames it
// into place, then records it and lets older checkpoints and segments go.
func (s *Store) writeCheckpoint(force bool) error {
	s.mu.Lock()
	snap := s.mu.ix.snapshot(true)
	lsn, pos, logEnd := s.mu.applied, s.mu.appliedPos, s.mu.logWritten
	same := lsn == s.mu.ckptLSN && !force
	s.mu.Unlock()
	if same {
		return s.deleteSegments()
	}
	// Everything the checkpoint describes must be durable in the log first:
	// a crash must never leave a checkpoint ahead of the log it points into.
	if err := s.syncLog(); err != nil {
		return err
	}
	start := time.Now()
	final := ckptName(s.opts.Dir, lsn)
	size, refs, nmsgs, err := s.writeCheckpointFile(final, snap, lsn, pos)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.ckptLSN, s.mu.ckpt, s.mu.ckptBytes = lsn, pos, size
	s.mu.ckptTime, s.mu.ckptLogEnd = time.Now(), logEnd
	for id, seg := range s.mu.segs {
		seg.ckptRefs = refs[id]
	}
	s.mu.Unlock()
	s.log.Debug("checkpoint written", "file", final, "lsn", lsn, "messages", nmsgs, "bytes", size, "took", time.Since(start))
	s.removeOldCheckpoints(lsn)
	return s.deleteSegments()
}

// writeCheckpointFile writes snap as checkpoint file final: to final.tmp,
// synced, then renamed (and the directory synced). It returns the file's
// size, the messages it refers to per segment and their number. On error
// the temporary file is removed.
func (s *Store) writeCheckpointFile(final string, snap *snapshot, lsn uint64, pos logPos) (size int64, refs map[uint32]int64, nmsgs uint64, err error) {
	tmp := final + tmpSuffix
	f, err := s.fs.Create(tmp)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("filestore: checkpoint: %w", err)
	}
	w := &ckptWriter{buf: make([]byte, 0, 2<<20), flush: func(b []byte) error {
		_, err := f.WriteAt(b, size)
		size += int64(len(b))
		return err
	}}
	refs, nmsgs = w.encode(snap, lsn, pos)
	err = w.err
	if err == nil {
		err = w.flush(w.buf)
	}
	if err == nil && !s.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, final)
	}
	if err == nil && !s.opts.NoSync {
		err = s.fs.SyncDir(s.opts.Dir)
	}
	if err != nil {
		s.fs.Remove(tmp)
		return 0, nil, 0, fmt.Errorf("filestore: checkpoint %s: %w", final, err)
	}
	return size, refs, nmsgs, nil
}

// encode writes the checkpoint of snap: the header, each entity's frames,
// the end frame. It returns the messages referred to per segment and their
// number. Errors of the flushes are in w.err.
func (w *ckptWriter) encode(snap *snapshot, lsn uint64, pos logPos) (refs map[uint32]int64, nmsgs uint64) {
	w.buf = append(w.buf, ckptMagic...)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, ckptVersion)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, pos.seg)
	w.buf = binary.LittleEndian.AppendUint64(w.buf, lsn)
	w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(pos.off))
	w.buf = binary.LittleEndian.AppendUint32(w.buf, 0)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, crc(w.buf[:36]))
	refs = make(map[uint32]int64)
	var nvalues uint64
	for i := range snap.entities {
		e := &snap.entities[i]
		w.begin(frameEntity)
		w.uvarint(e.id)
		w.uvarint(e.lastSeq)
		w.bytes([]byte(e.name))
		w.bytes(e.spec)
		w.end()
		for _, c := range e.chunks {
			w.messages(e.id, c, refs)
			nmsgs += uint64(len(c.ents))
		}
		for _, k := range slices.Sorted(maps.Keys(e.values)) {
			w.begin(frameValue)
			w.uvarint(e.id)
			w.bytes([]byte(k))
			w.bytes(e.values[k])
			w.end()
			nvalues++
		}
	}
	w.begin(frameEnd)
	w.uvarint(uint64(len(snap.entities)))
	w.uvarint(nmsgs)
	w.uvarint(nvalues)
	w.end()
	return refs, nmsgs
}

// messages writes the messages frame of one chunk of entity id, adding
// the messages to refs per segment.
func (w *ckptWriter) messages(id uint64, c *chunk, refs map[uint32]int64) {
	w.begin(frameMsgs)
	w.uvarint(id)
	w.uvarint(uint64(len(c.ents)))
	// Count references per segment run: consecutive messages mostly share
	// a segment, and a map update per message cost a third of writing the
	// checkpoint.
	var runSeg uint32
	var run int64
	for j := range c.ents {
		ent := &c.ents[j]
		w.uvarint(ent.seq)
		w.uvarint(uint64(ent.seg))
		w.uvarint(uint64(ent.off))
		w.uvarint(uint64(ent.size))
		w.buf = binary.LittleEndian.AppendUint32(w.buf, ent.crc)
		w.bytes(c.meta(j))
		if ent.seg != runSeg {
			if run > 0 {
				refs[runSeg] += run
			}
			runSeg, run = ent.seg, 0
		}
		run++
	}
	if run > 0 {
		refs[runSeg] += run
	}
	w.end()
}

// removeOldCheckpoints deletes checkpoint files older than lsn.
func (s *Store) removeOldCheckpoints(lsn uint64) {
	names, err := s.fs.ReadDir(s.opts.Dir)
	if err != nil {
		s.log.Warn("listing checkpoints", "err", err)
		return
	}
	for _, name := range names {
		if l, ok := parseName(name, ckptSuffix, 64); ok && l < lsn {
			if err := s.fs.Remove(s.path(name)); err != nil {
				s.log.Warn("removing old checkpoint", "file", name, "err", err)
			}
		}
	}
}

// deleteSegments deletes the segments neither the index, the latest
// durable checkpoint nor its replay need. maintMu must be held.
func (s *Store) deleteSegments() error {
	s.mu.Lock()
	var victims []*segment
	for id, seg := range s.mu.segs {
		if seg != s.mu.active && id < s.mu.ckpt.seg && seg.live == 0 && seg.ckptRefs == 0 {
			victims = append(victims, seg)
			delete(s.mu.segs, id)
		}
	}
	s.mu.Unlock()
	var err error
	for _, seg := range victims {
		// No directory sync: a segment that comes back after a crash is
		// unreferenced and is deleted again on open (and a recycled one
		// is a .tmp file, removed on open).
		if s.recycle(seg) {
			s.log.Debug("segment kept for reuse", "file", seg.path)
		} else if rerr := s.fs.Remove(seg.path); rerr != nil {
			if err == nil {
				err = fmt.Errorf("filestore: %w", rerr)
			}
		} else {
			s.log.Debug("segment deleted", "file", seg.path)
		}
		seg.release()
	}
	return err
}

// recycle keeps a deleted segment's file under recycleName for the
// preparer, which overwrites it with zeros instead of creating a file:
// its blocks are allocated and its pages most likely cached, so that
// costs about half the CPU and the disk time (the preparer, prealloc.go).
// At most one file is kept, of exactly SegmentSize, and only one no
// reader has open: the segment is already out of the map, so nobody can
// pin it any more, and an in-flight read must not find zeros.
func (s *Store) recycle(seg *segment) bool {
	s.recycleMu.Lock()
	defer s.recycleMu.Unlock()
	if s.opts.NoPreallocate || s.recycleBytes.Load() != 0 || seg.refs.Load() != 1 || seg.diskSize() != s.opts.SegmentSize {
		return false
	}
	if n, err := seg.f.Size(); err != nil || n != s.opts.SegmentSize {
		return false
	}
	if err := s.fs.Rename(seg.path, s.path(recycleName)); err != nil {
		return false
	}
	s.recycleBytes.Store(s.opts.SegmentSize)
	return true
}

// recycleIdle is how long a kept segment file may wait for the preparer:
// a log that has not moved to a new segment for this long is not growing
// fast (or was just drained), and the file would only keep the disk from
// coming back down.
const recycleIdle = 10 * time.Second

// dropIdleRecycled removes the kept segment file when no segment was
// started for recycleIdle.
func (s *Store) dropIdleRecycled(now time.Time) {
	s.mu.RLock()
	idle := now.Sub(s.mu.sealedAt) >= recycleIdle
	s.mu.RUnlock()
	if idle {
		s.dropRecycled()
	}
}

// dropRecycled removes the kept segment file, if there is one.
func (s *Store) dropRecycled() {
	s.recycleMu.Lock()
	defer s.recycleMu.Unlock()
	if s.recycleBytes.Load() != 0 {
		s.fs.Remove(s.path(recycleName))
		s.recycleBytes.Store(0)
	}
}

// ckptInfo is what loadCheckpoint learned besides the index contents.
type ckptInfo struct {
	path string
	lsn  uint64
	pos  logPos
	size int64
	refs map[uint32]int64
}

type ckptReader struct {
	path string
	b    []byte
	off  int64 // of the current frame, for error messages
	pos  int
	err  error
}

func (r *ckptReader) fail(why string) {
	if r.err == nil {
		r.err = fmt.Errorf("filestore: %s: offset %d: %s: %w", r.path, r.off, why, store.ErrCorrupt)
	}
}

func (r *ckptReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		r.fail("truncated frame")
		return 0
	}
	r.pos += n
	return v
}

func (r *ckptReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.pos) {
		r.fail("truncated frame")
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

func (r *ckptReader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.pos < 4 {
		r.fail("truncated frame")
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.pos:])
	r.pos += 4
	return v
}

// loadCheckpoint reads checkpoint file p into s.mu.ix (which must be
// empty), counting references into the segments in s.mu.segs. Messages
// in segments that do not exist are corruption (with Salvage: dropped and
// logged). Its phases: the header (ckptLoader.header), then frame after
// frame (ckptLoader.frame) applied by kind (entity, messages, value) until
// the end frame, whose counts must match what was read (ckptLoader.end).
func (s *Store) loadCheckpoint(p string) (*ckptInfo, error) {
	f, err := s.fs.Open(p)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	l := &ckptLoader{s: s, w: &window{f: f, name: p, size: size}, r: &ckptReader{path: p}, ix: s.mu.ix}
	if err := l.header(p, size); err != nil {
		return nil, err
	}
	for pos := int64(ckptHeaderSize); ; {
		body, next, err := l.frame(pos)
		if err != nil {
			return nil, err
		}
		switch body[0] {
		case frameEntity:
			l.entity()
		case frameMsgs:
			l.messages()
		case frameValue:
			l.value()
		case frameEnd:
			if err := l.end(next == size); err != nil {
				return nil, err
			}
			return l.info, nil
		default:
			l.r.fail(fmt.Sprintf("unknown frame kind %d", body[0]))
		}
		if l.r.err != nil {
			return nil, l.r.err
		}
		pos = next
	}
}

// ckptLoader is loadCheckpoint's state while it reads one checkpoint.
type ckptLoader struct {
	s    *Store
	w    *window
	r    *ckptReader
	ix   *index
	info *ckptInfo
	cur  *entity // the entity the last entity frame declared

	nents, nmsgs, nvals uint64 // what was read, for the end frame
}

// header checks the file header (magic, checksum, version) and reads the
// LSN and log position the checkpoint stands for.
func (l *ckptLoader) header(p string, size int64) error {
	b, err := l.w.get(0, min(ckptHeaderSize, size))
	if err != nil {
		return err
	}
	if len(b) < ckptHeaderSize || string(b[:8]) != ckptMagic || crc(b[:36]) != binary.LittleEndian.Uint32(b[36:]) {
		l.r.fail("bad checkpoint header")
		return l.r.err
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != ckptVersion {
		l.r.fail(fmt.Sprintf("unknown checkpoint version %d", v))
		return l.r.err
	}
	l.info = &ckptInfo{
		path: p,
		lsn:  binary.LittleEndian.Uint64(b[16:]),
		pos:  logPos{seg: binary.LittleEndian.Uint32(b[12:]), off: int64(binary.LittleEndian.Uint64(b[24:]))},
		size: size,
		refs: make(map[uint32]int64),
	}
	return nil
}

// frame reads and checks the frame at pos and points the reader at its
// body (past the kind byte). It returns the body and where the next frame
// starts.
func (l *ckptLoader) frame(pos int64) (body []byte, next int64, err error) {
	size, r := l.w.size, l.r
	r.off = pos
	if size-pos < frameHeaderSize+1 {
		r.fail("checkpoint ends without its end frame")
		return nil, 0, r.err
	}
	fh, err := l.w.get(pos, frameHeaderSize)
	if err != nil {
		return nil, 0, err
	}
	n := int64(binary.LittleEndian.Uint32(fh))
	sum := binary.LittleEndian.Uint32(fh[4:])
	if n < 1 || n > size-pos-frameHeaderSize {
		r.fail("frame length out of range")
		return nil, 0, r.err
	}
	frame, err := l.w.get(pos, frameHeaderSize+n)
	if err != nil {
		return nil, 0, err
	}
	body = frame[frameHeaderSize:]
	if crc(body) != sum {
		r.fail("frame checksum mismatch")
		return nil, 0, r.err
	}
	r.b, r.pos = body, 1
	return body, pos + frameHeaderSize + n, nil
}

// entity reads an entity frame: a new entity, which the messages frames
// after it belong to.
func (l *ckptLoader) entity() {
	r := l.r
	id := r.uvarint()
	e := &entity{id: id, lastSeq: r.uvarint(), values: make(map[string][]byte)}
	e.name = string(r.bytes())
	e.spec = slices.Clone(r.bytes())
	if r.err == nil && l.ix.entities[id] != nil {
		r.fail(fmt.Sprintf("entity %d twice", id))
	}
	l.ix.entities[id] = e
	l.cur = e
	l.nents++
}

// messages reads a messages frame of the current entity into the index,
// referencing the segments the messages' data is in.
func (l *ckptLoader) messages() {
	r, s, cur := l.r, l.s, l.cur
	id := r.uvarint()
	count := r.uvarint()
	if cur == nil || cur.id != id {
		r.fail("messages frame out of place")
		return
	}
	for range count {
		ent := entry{seq: r.uvarint()}
		seg, off, sz := r.uvarint(), r.uvarint(), r.uvarint()
		ent.crc = r.u32()
		meta := r.bytes()
		if r.err != nil {
			return
		}
		if seg > 1<<32-1 || off > 1<<32-1 || sz > 1<<32-1 {
			r.fail("message location out of range")
			return
		}
		ent.seg, ent.off, ent.size = uint32(seg), uint32(off), uint32(sz)
		if n := len(cur.chunks); n > 0 && ent.seq <= cur.chunks[n-1].last() {
			r.fail(fmt.Sprintf("entity %d: messages out of order at seq %d", id, ent.seq))
			return
		}
		if ent.size > 0 && ent.seg != blobSeg && s.mu.segs[ent.seg] == nil {
			why := fmt.Sprintf("message %d/%d is in segment %d, which does not exist", id, ent.seq, ent.seg)
			if !s.opts.Salvage {
				r.fail(why)
				return
			}
			s.log.Error("salvage: dropping message", "file", r.path, "reason", why)
			continue
		}
		l.ix.insert(cur, ent, meta)
		cur.lastSeq = max(cur.lastSeq, ent.seq)
		s.refLocked(ent)
		l.info.refs[ent.seg]++
		l.nmsgs++
	}
}

// value reads a value frame: one key and value of an entity.
func (l *ckptLoader) value() {
	r := l.r
	id := r.uvarint()
	k, v := r.bytes(), r.bytes()
	if r.err != nil {
		return
	}
	e := l.ix.entities[id]
	if e == nil {
		r.fail(fmt.Sprintf("value of unknown entity %d", id))
		return
	}
	e.values[string(k)] = slices.Clone(v)
	l.ix.nvalues++
	l.nvals++
}

// end reads the end frame: its counts must match what was read (messages
// excepted with Salvage, which may have dropped some), and it must be the
// file's last bytes (atEOF).
func (l *ckptLoader) end(atEOF bool) error {
	r := l.r
	ne, nm, nv := r.uvarint(), r.uvarint(), r.uvarint()
	if r.err == nil && (ne != l.nents || (nm != l.nmsgs && !l.s.opts.Salvage) || nv != l.nvals) {
		r.fail("end frame counts do not match")
	}
	if r.err == nil && !atEOF {
		r.fail("data after the end frame")
	}
	return r.err
}
