package filestore

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

// Blobs: the Data of a large message lives in a file of its own under
// blobs/, referenced from the log by a small record (see doc.go, "Blob
// files"). An index entry whose seg is blobSeg has its Data in blob
// entry.off.

const (
	// blobSeg is the segment number of an entry whose Data is a blob
	// (segments are numbered from 1).
	blobSeg = 0
	// blobDirName is the directory of the blob files, under Options.Dir.
	blobDirName = "blobs"
	blobSuffix  = ".blob"
	// defaultBlobThreshold is Options.BlobThreshold's default.
	defaultBlobThreshold = 256 << 10
	// blobWriteChunk is how much of a blob one write call takes.
	blobWriteChunk = 1 << 20
)

// blobInfo is what the store knows about a live blob.
type blobInfo struct {
	refs int32  // index entries referring to it
	size uint32 // its length
}

// deadBlob is a blob no entry refers to any more. It is deleted once the
// record that dropped the last reference is durable: lsn is an LSN at
// least as high as that record's (stamped the first time a sweep sees
// it; 0 until then).
type deadBlob struct {
	id  uint32
	lsn uint64
}

func (s *Store) blobDir() string { return s.path(blobDirName) }

func blobName(dir string, id uint32) string {
	return path.Join(dir, fmt.Sprintf("%010d%s", id, blobSuffix))
}

// isBlobOp says whether op's Data goes to a blob file.
func (s *Store) isBlobOp(op *store.Op) bool {
	return s.opts.BlobThreshold > 0 && (op.Kind == store.OpAppend || op.Kind == store.OpRewrite) &&
		(len(op.Data)+len(op.More) >= s.opts.BlobThreshold || op.Tail != nil)
}

// readTails checks that each op's Data continues only where it may
// (store.Op.CheckRest) and returns b, or a copy of it in which the Tails
// of the ops that do not go to blobs are read into their Data (the log
// takes a Tail's bytes whole; More it takes as it is, see
// encodeBatchBlobs).
func (s *Store) readTails(b *store.Batch) (*store.Batch, error) {
	var out *store.Batch
	for i := range b.Ops {
		op := &b.Ops[i]
		if err := op.CheckRest(); err != nil {
			return nil, fmt.Errorf("filestore: op %d: %w", i, err)
		}
		if op.Tail == nil || s.isBlobOp(op) {
			continue
		}
		if out == nil {
			out = &store.Batch{Ops: slices.Clone(b.Ops), Follower: b.Follower}
		}
		d, err := op.ReadTail()
		if err != nil {
			return nil, fmt.Errorf("filestore: op %d: %w", i, err)
		}
		out.Ops[i].Data, out.Ops[i].Tail = d, nil
	}
	if out == nil {
		return b, nil
	}
	return out, nil
}

// blobRef is the blob an op's Data was written to.
type blobRef struct {
	id   uint32
	size uint32
	crc  uint32
	base uint32 // a composite's base, pinned until the commit is done; 0: none
}

// pinnedBases lists the bases refs pinned, once per composite.
func pinnedBases(refs []blobRef) []uint32 {
	var ids, seen []uint32
	for _, r := range refs {
		if r.base != 0 && !slices.Contains(seen, r.id) {
			seen = append(seen, r.id)
			ids = append(ids, r.base)
		}
	}
	return ids
}

// writeBlobs writes the Data of b's large ops to new blob files, each
// synced, then syncs the blob directory, so that the log record that
// refers to them is written only once they are durable. refs[i] is op i's
// blob (id 0: none); ops whose Data (and More) are the same slices share
// one blob. An
// op whose Tail is the body of a blob of this store gets a composite blob
// holding only its Data (composite.go), its base pinned until the caller
// unpins it (pinnedBases). On error the files written are removed again.
func (s *Store) writeBlobs(b *store.Batch) (refs []blobRef, err error) {
	type key struct {
		p, mp *byte
		n, mn int
		tail  store.DataReader
	}
	var seen map[key]blobRef
	var made []uint32
	var pins []uint32 // bases of the composites written
	defer func() {
		if err != nil {
			s.unpinBases(pins)
			s.forgetComposites(made)
			s.removeBlobs(made)
			refs = nil
		}
	}()
	for i := range b.Ops {
		op := &b.Ops[i]
		if !s.isBlobOp(op) {
			continue
		}
		if refs == nil {
			refs = make([]blobRef, len(b.Ops))
			seen = make(map[key]blobRef)
		}
		size := op.DataLen()
		if size > 1<<32-1 {
			return nil, fmt.Errorf("filestore: op %d: data of %d bytes is too large", i, size)
		}
		k := key{unsafe.SliceData(op.Data), unsafe.SliceData(op.More), len(op.Data), len(op.More), op.Tail}
		if r, ok := seen[k]; ok {
			refs[i] = r
			continue
		}
		id := s.nextBlob.Add(1)
		if id == 0 || id == 1<<32-1 {
			return nil, errors.New("filestore: blob ids exhausted")
		}
		made = append(made, id)
		if c, br, ok := s.compositeTail(op); ok {
			sum, ok, err := s.writeComposite(id, c, op.Data, br)
			if err != nil {
				return nil, err
			}
			if ok {
				pins = append(pins, c.base)
				r := blobRef{id: id, size: uint32(size), crc: sum, base: c.base}
				refs[i], seen[k] = r, r
				continue
			}
		}
		sum, err := s.writeBlob(id, op.Data, op.More, op.Tail)
		if err != nil {
			return nil, err
		}
		r := blobRef{id: id, size: uint32(size), crc: sum}
		refs[i], seen[k] = r, r
	}
	if len(made) > 0 {
		if err := s.fs.SyncDir(s.blobDir()); err != nil {
			return nil, s.blobWriteError(err)
		}
	}
	return refs, nil
}

// writeBlob creates blob id holding data, then more, then tail's bytes
// (if tail is set; copied a piece at a time), syncs it and returns its
// CRC.
func (s *Store) writeBlob(id uint32, data, more []byte, tail store.DataReader) (uint32, error) {
	f, err := s.fs.Create(blobName(s.blobDir(), id))
	if err != nil {
		return 0, s.blobWriteError(err)
	}
	fail := func(err error) (uint32, error) {
		f.Close()
		return 0, err
	}
	var at int64
	var sum uint32
	for _, p := range [][]byte{data, more} {
		for off := 0; off < len(p); off += blobWriteChunk {
			end := min(off+blobWriteChunk, len(p))
			if _, err := f.WriteAt(p[off:end], at+int64(off)); err != nil {
				return fail(s.blobWriteError(err))
			}
		}
		sum = crc32.Update(sum, castagnoli, p)
		at += int64(len(p))
	}
	if tail != nil {
		buf := make([]byte, blobWriteChunk)
		n := tail.Size()
		for off := int64(0); off < n; {
			p := buf[:min(int64(len(buf)), n-off)]
			if k, err := tail.ReadAt(p, off); k < len(p) {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return fail(fmt.Errorf("filestore: reading the message's tail: %w", err))
			}
			if _, err := f.WriteAt(p, at+off); err != nil {
				return fail(s.blobWriteError(err))
			}
			sum = crc32.Update(sum, castagnoli, p)
			off += int64(len(p))
		}
	}
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			return fail(s.blobWriteError(err))
		}
	}
	if err := f.Close(); err != nil {
		return 0, s.blobWriteError(err)
	}
	return sum, nil
}

// blobWriteError gives a failed blob write its kind: a full disk is a
// store.NoSpaceError (the commit is refused, the store goes on); any other
// failure only fails this commit, since nothing refers to the blob yet.
func (s *Store) blobWriteError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return s.noSpaceError(err)
	}
	return fmt.Errorf("filestore: blob: %w", err)
}

// removeBlobs deletes blob files no record refers to, plain or
// composite (best effort: what is left is found by the next Open).
func (s *Store) removeBlobs(ids []uint32) {
	for _, id := range ids {
		for _, name := range []string{blobName(s.blobDir(), id), refName(s.blobDir(), id)} {
			if err := s.fs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("cannot remove blob file", "file", name, "err", err)
			}
		}
	}
}

// forgetComposites drops what the store knows of blobs about to be
// removed.
func (s *Store) forgetComposites(ids []uint32) {
	s.mu.Lock()
	for _, id := range ids {
		delete(s.mu.composites, id)
	}
	s.mu.Unlock()
}

// blobRefLocked and blobUnrefLocked count an entry's reference to its
// blob; the last one gone makes the blob dead. A composite that comes to
// life (or back to it) takes a reference to its base, and gives it back
// when it dies. mu is held exclusively.
func (s *Store) blobRefLocked(ent entry) {
	b := s.mu.blobs[ent.off]
	if b.refs == 0 {
		if c, ok := s.mu.composites[ent.off]; ok {
			base := s.mu.blobs[c.base]
			base.refs++
			base.size = c.baseSize()
			s.mu.blobs[c.base] = base
		}
	}
	b.refs++
	b.size = ent.size
	s.mu.blobs[ent.off] = b
}

func (s *Store) blobUnrefLocked(ent entry) { s.unrefBlobLocked(ent.off) }

// unusedBlobLocked notes a blob a record named but that no entry took
// (an append to a deleted entity, a rewrite of a removed message): it is
// dead unless something refers to it.
func (s *Store) unusedBlobLocked(id uint32) {
	s.mu.deadBlobs = append(s.mu.deadBlobs, deadBlob{id: id})
	s.nDeadBlobs.Store(int64(len(s.mu.deadBlobs)))
}

// sweepBlobs deletes the dead blobs whose death is durable. The first
// sweep to see a dead blob stamps it with the applied LSN (at least that
// of the record that killed it); it goes once the log is synced that far.
func (s *Store) sweepBlobs() {
	if s.nDeadBlobs.Load() == 0 {
		return // the common case, without the lock: no blob died
	}
	s.mu.Lock()
	if len(s.mu.deadBlobs) == 0 {
		s.mu.Unlock()
		return
	}
	synced := s.syncedLSN.Load()
	if s.opts.NoSync {
		synced = s.mu.applied
	}
	var del []uint32
	keep := s.mu.deadBlobs[:0]
	for _, d := range s.mu.deadBlobs {
		if d.lsn == 0 {
			d.lsn = max(s.mu.applied, 1)
		}
		switch {
		case s.mu.blobs[d.id].refs > 0:
			// Referred to again (a shared blob one op of a batch did not
			// take): not dead.
		case d.lsn <= synced:
			del = append(del, d.id)
			delete(s.mu.composites, d.id)
		default:
			keep = append(keep, d)
		}
	}
	clear(s.mu.deadBlobs[len(keep):])
	s.mu.deadBlobs = keep
	s.nDeadBlobs.Store(int64(len(keep)))
	s.mu.Unlock()
	s.removeBlobs(del)
}

// sweepOrphanBlobs runs at Open, after the log is replayed: it deletes
// every blob file the index does not refer to (written before a crash
// whose record never made it to the log, or dead before it) and sets the
// next blob id past every file found.
func (s *Store) sweepOrphanBlobs() error {
	dir := s.blobDir()
	if err := s.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	// The directory's own entry must be durable before a blob in it is
	// referenced from the log.
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	names, err := s.fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	var top uint32
	for id := range s.mu.blobs {
		top = max(top, id)
	}
	removed := 0
	for _, name := range names {
		if strings.HasSuffix(name, spoolSuffix) {
			// A message that was arriving when the broker stopped.
			if err := s.fs.Remove(path.Join(dir, name)); err != nil {
				return fmt.Errorf("filestore: %w", err)
			}
			continue
		}
		v, ok := parseName(name, blobSuffix, 32)
		if !ok {
			if v, ok = parseName(name, refSuffix, 32); !ok {
				continue
			}
		}
		id := uint32(v)
		top = max(top, id)
		if s.mu.blobs[id].refs > 0 {
			continue
		}
		if err := s.fs.Remove(path.Join(dir, name)); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		removed++
	}
	if removed > 0 {
		s.log.Info("removed blob files nothing refers to", "files", removed)
		if err := s.fs.SyncDir(dir); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
	}
	for id := range s.mu.composites {
		if s.mu.blobs[id].refs == 0 {
			delete(s.mu.composites, id)
		}
	}
	s.mu.deadBlobs = nil
	s.nDeadBlobs.Store(0)
	s.nextBlob.Store(top)
	return nil
}

// checkBlobsLocked makes sure every blob the index refers to has a file
// of its recorded length: a missing or short one is corruption (or, with
// Salvage, its messages are dropped).
func (s *Store) checkBlobsLocked() error {
	bad := slices.Clone(s.mu.badRefs)
	s.mu.badRefs = nil
	for id, b := range s.mu.blobs {
		if slices.Contains(bad, id) {
			continue
		}
		name, want := blobName(s.blobDir(), id), int64(b.size)
		c, isComp := s.mu.composites[id]
		if isComp {
			name, want = refName(s.blobDir(), id), refHeaderLen+int64(c.headLen)
			if uint64(c.headLen)+uint64(c.baseLen) != uint64(b.size) {
				why := fmt.Sprintf("composite blob %d holds %d+%d bytes, the log says %d", id, c.headLen, c.baseLen, b.size)
				if cerr := s.corrupt(name, 0, why); cerr != nil {
					return cerr
				}
				bad = append(bad, id)
				continue
			}
		}
		f, err := s.fs.Open(name)
		var size int64
		if err == nil {
			size, err = f.Size()
			f.Close()
		}
		switch {
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("filestore: %w", err)
		case err != nil || size != want:
			why := fmt.Sprintf("blob %d is missing", id)
			if err == nil {
				why = fmt.Sprintf("blob %d holds %d bytes, the log says %d", id, size, want)
			}
			if cerr := s.corrupt(name, 0, why); cerr != nil {
				return cerr
			}
			bad = append(bad, id)
		}
	}
	// A composite whose base is bad has lost its body.
	for id, c := range s.mu.composites {
		if slices.Contains(bad, c.base) && !slices.Contains(bad, id) && s.mu.blobs[id].refs > 0 {
			if cerr := s.corrupt(refName(s.blobDir(), id), 0, fmt.Sprintf("composite blob %d lost its base %d", id, c.base)); cerr != nil {
				return cerr
			}
			bad = append(bad, id)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	ix := s.mu.ix
	for _, e := range ix.entities {
		var lost []uint64
		for _, c := range e.chunks {
			for _, ent := range c.ents {
				if ent.seg == blobSeg && ent.size > 0 && containsID(bad, ent.off) {
					lost = append(lost, ent.seq)
				}
			}
		}
		for _, seq := range lost {
			if old, ok := ix.remove(e, seq); ok {
				s.unrefLocked(old)
			}
		}
		if len(lost) > 0 {
			s.log.Error("salvage: dropped messages whose blob was lost", "entity", e.id, "messages", len(lost))
		}
	}
	s.mu.deadBlobs = nil
	s.nDeadBlobs.Store(0)
	return nil
}

func containsID(ids []uint32, id uint32) bool {
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}

// errBlobMoved says that a blob file was gone because its message no
// longer refers to it (removed, or its Data replaced, since it was looked
// up): look the message up again.
var errBlobMoved = errors.New("filestore: the message's blob changed")

// maxBlobRetries bounds the lookups of a message whose Data keeps changing
// under a reader.
const maxBlobRetries = 4

// readBlobData is ReadData for a message whose Data was found in blob
// ent: if the blob went meanwhile it looks the message up again.
func (s *Store) readBlobData(entityID, seq uint64, ent entry) ([]byte, error) {
	for try := 0; ; try++ {
		d, err := s.readBlob(entityID, seq, ent)
		if err != errBlobMoved {
			return d, err
		}
		if try == maxBlobRetries {
			return nil, store.ErrNotFound
		}
		s.mu.RLock()
		seg, next, perr := s.pinDataLocked(entityID, seq)
		s.mu.RUnlock()
		switch {
		case perr == errIsBlob:
			ent = next
		case seg != nil:
			defer seg.release()
			return readData(seg, next)
		default:
			return emptyData(perr)
		}
	}
}

// openBlobFile opens blob ent of message (entityID, seq): errBlobMoved if
// it is gone and the message no longer refers to it, corruption if it is
// gone while the message still does.
func (s *Store) openBlobFile(entityID, seq uint64, ent entry) (vfs.File, string, error) {
	name := blobName(s.blobDir(), ent.off)
	f, err := s.fs.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !s.stillRefers(entityID, seq, ent) {
			return nil, name, errBlobMoved
		}
		return nil, name, fmt.Errorf("filestore: %s: %w", name, errors.Join(err, store.ErrCorrupt))
	}
	return f, name, nil
}

// readBlob reads the Data of ent (a blob entry) and checks its length and
// checksum (errBlobMoved: see openBlobFile).
func (s *Store) readBlob(entityID, seq uint64, ent entry) ([]byte, error) {
	r, err := s.openBlobReader(entityID, seq, ent)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := make([]byte, ent.size)
	if _, err := r.ReadAt(buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}

// openBlobReader opens the blob of ent, plain or composite (errBlobMoved:
// see openBlobFile).
func (s *Store) openBlobReader(entityID, seq uint64, ent entry) (*blobReader, error) {
	s.mu.RLock()
	c, isComp := s.mu.composites[ent.off]
	s.mu.RUnlock()
	if isComp {
		return s.openComposite(entityID, seq, ent, c)
	}
	f, name, err := s.openBlobFile(entityID, seq, ent)
	if err != nil {
		return nil, err
	}
	return &blobReader{s: s, id: ent.off, f: f, name: name, size: int64(ent.size), want: ent.crc}, nil
}

// stillRefers says whether message (entityID, seq) still has ent's blob.
func (s *Store) stillRefers(entityID, seq uint64, ent entry) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.mu.ix.entities[entityID]
	if e == nil {
		return false
	}
	c, i, ok := e.lookup(seq)
	return ok && c.ents[i].seg == blobSeg && c.ents[i].off == ent.off
}

// blobDiskBytesLocked is the space the live blobs take.
func (s *Store) blobDiskBytesLocked() int64 {
	var n int64
	for id, b := range s.mu.blobs {
		if c, ok := s.mu.composites[id]; ok {
			n += refHeaderLen + int64(c.headLen)
		} else {
			n += int64(b.size)
		}
	}
	return n
}

var _ store.DataOpener = (*Store)(nil)

// OpenData implements store.DataOpener: a blob is read from its file a
// piece at a time (the reader keeps the file open, so it outlives the
// message's removal); Data in the log is read whole.
func (s *Store) OpenData(entityID, seq uint64) (store.DataReader, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	for try := 0; try <= maxBlobRetries; try++ {
		s.mu.RLock()
		seg, ent, err := s.pinDataLocked(entityID, seq)
		s.mu.RUnlock()
		if err != errIsBlob {
			if seg != nil {
				seg.release()
			}
			d, err := s.readDataLocked(entityID, seq)
			if err != nil {
				return nil, err
			}
			return store.BytesReader(d), nil
		}
		r, err := s.openBlobReader(entityID, seq, ent)
		if err == errBlobMoved {
			continue // its Data changed: look again
		}
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, store.ErrNotFound
}

// blobReader reads a blob, plain or composite. It checks the blob's CRC
// as long as each read starts within what was read before (reads in
// order, re-reads allowed), failing the read that reaches the end if it
// does not match.
type blobReader struct {
	s    *Store
	id   uint32
	f    vfs.File // the blob file, or a composite's .ref file
	name string
	size int64
	want uint32
	sum  uint32 // CRC of [0, next)
	next int64  // -1 once a read left a gap

	// A composite's: what it is, and its base's file.
	comp     *composite
	base     vfs.File
	baseName string
}

func (r *blobReader) Size() int64 { return r.size }

func (r *blobReader) ReadAt(p []byte, off int64) (int, error) {
	if r.f == nil {
		return 0, fmt.Errorf("filestore: %s: %w", r.name, fs.ErrClosed)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := len(p)
	if rest := r.size - off; int64(want) > rest {
		want = int(rest)
	}
	var n int
	var err error
	if r.comp != nil {
		if n, err = r.readComposite(p[:want], off); err != nil {
			return n, err
		}
	} else if n, err = r.f.ReadAt(p[:want], off); n < want {
		if err == nil || err == io.EOF {
			return n, fmt.Errorf("filestore: %s: blob shorter than recorded (%d bytes): %w", r.name, r.size, store.ErrCorrupt)
		}
		return n, fmt.Errorf("filestore: %w", err)
	}
	switch end := off + int64(n); {
	case r.next < 0:
	case off <= r.next && end > r.next:
		// Extends what was read from the start: follow the checksum.
		r.sum = crc32.Update(r.sum, castagnoli, p[r.next-off:n])
		r.next = end
		if r.next == r.size && r.sum != r.want {
			return n, fmt.Errorf("filestore: %s: blob checksum mismatch: %w", r.name, store.ErrCorrupt)
		}
	case off > r.next:
		r.next = -1 // a gap: the checksum can no longer be followed
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *blobReader) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if r.base != nil {
		err = errors.Join(err, r.base.Close())
		r.base = nil
	}
	return err
}

// spoolSuffix names the spool files (store.Spooler) in the blob
// directory: a large message being received, deleted once it is stored
// (copied into a blob) or refused, and by Open.
const spoolSuffix = ".spool"

var _ store.Spooler = (*Store)(nil)

// NewSpool implements store.Spooler.
func (s *Store) NewSpool() (store.Spool, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	name := path.Join(s.blobDir(), fmt.Sprintf("%010d%s", s.nextSpool.Add(1), spoolSuffix))
	f, err := s.fs.Create(name)
	if err != nil {
		return nil, s.blobWriteError(err)
	}
	return &spoolFile{s: s, f: f, name: name}, nil
}

// spoolFile is a spool: a file in the blob directory.
type spoolFile struct {
	s    *Store
	f    vfs.File
	name string
	size int64
}

func (sp *spoolFile) Write(p []byte) error {
	if sp.f == nil {
		return fmt.Errorf("filestore: %s: %w", sp.name, fs.ErrClosed)
	}
	if _, err := sp.f.WriteAt(p, sp.size); err != nil {
		return sp.s.blobWriteError(err)
	}
	sp.size += int64(len(p))
	return nil
}

func (sp *spoolFile) ReadAt(p []byte, off int64) (int, error) {
	if sp.f == nil {
		return 0, fmt.Errorf("filestore: %s: %w", sp.name, fs.ErrClosed)
	}
	if off >= sp.size {
		return 0, io.EOF
	}
	short := int64(len(p)) > sp.size-off
	if short {
		p = p[:sp.size-off]
	}
	n, err := sp.f.ReadAt(p, off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

func (sp *spoolFile) Size() int64 { return sp.size }

func (sp *spoolFile) Close() error {
	if sp.f == nil {
		return nil
	}
	sp.f.Close()
	sp.f = nil
	if err := sp.s.fs.Remove(sp.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
