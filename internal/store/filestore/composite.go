package filestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/busbarmq/busbar/internal/store"
)

// Composite blobs: the Data of a message rewritten or forwarded with its
// body unchanged (a large message dead-lettered, auto-forwarded) is a new
// head followed by the body where it already lies, the tail of another
// blob. Commit writes only the head, to blobs/<id>.ref (see doc.go,
// "Composite blobs"):
//
//	+----------+----------+-----------+-----------+-----------+-----------+-----------+------------+
//	| "BUSBARBR" | base u32 | baseOff u32 | baseLen u32 | baseCRC u32 | headLen u32 | hcrc u32 | head ... |
//	+----------+----------+-----------+-----------+-----------+-----------+-----------+------------+
//
// all big-endian; hcrc is the CRC-32C of the 28 bytes before it. The
// Data is head followed by bytes [baseOff, baseOff+baseLen) of blob base,
// which end where base ends; baseCRC is the CRC of base's whole Data.
// The record referring to it is an ordinary AppendBlob or RewriteBlob
// whose size and CRC are those of the whole Data (the CRC is computed
// from the head's, base's and that of base's first baseOff bytes, without
// reading the body). A composite's base is always a plain blob: one made
// from a composite refers to that composite's base.
//
// A live composite holds one reference to its base, so the base lives as
// long as any message uses either. Open learns which live blobs are
// composites from their files (linkComposites), after the log is
// replayed, and counts those references then.

const (
	refSuffix    = ".ref"
	refMagic     = "BUSBARBR"
	refHeaderLen = 32
	// maxBaseHead bounds the bytes of the base read to compute a
	// composite's CRC (the old message's head); a body further in is
	// copied instead.
	maxBaseHead = 1 << 20
)

// composite is what the store knows of a composite blob.
type composite struct {
	base    uint32 // the plain blob holding the body
	baseOff uint32 // where the body starts in base
	baseLen uint32 // the body's length, to base's end
	baseCRC uint32 // CRC of base's whole Data
	headLen uint32 // the head's length, in the .ref file after the header
}

func refName(dir string, id uint32) string {
	return path.Join(dir, fmt.Sprintf("%010d%s", id, refSuffix))
}

func (c composite) header() []byte {
	h := make([]byte, 0, refHeaderLen)
	h = append(h, refMagic...)
	for _, v := range []uint32{c.base, c.baseOff, c.baseLen, c.baseCRC, c.headLen} {
		h = binary.BigEndian.AppendUint32(h, v)
	}
	return binary.BigEndian.AppendUint32(h, crc(h))
}

// parseRefHeader decodes a .ref file's header.
func parseRefHeader(h []byte) (composite, error) {
	if len(h) < refHeaderLen || string(h[:8]) != refMagic {
		return composite{}, errors.New("not a composite blob header")
	}
	if crc(h[:28]) != binary.BigEndian.Uint32(h[28:32]) {
		return composite{}, errors.New("composite blob header checksum mismatch")
	}
	u := func(i int) uint32 { return binary.BigEndian.Uint32(h[8+4*i:]) }
	c := composite{base: u(0), baseOff: u(1), baseLen: u(2), baseCRC: u(3), headLen: u(4)}
	if c.base == 0 || uint64(c.baseOff)+uint64(c.baseLen) > 1<<32-1 || uint64(c.headLen)+uint64(c.baseLen) > 1<<32-1 {
		return composite{}, errors.New("composite blob header out of range")
	}
	return c, nil
}

// baseSize is the length of the composite's base's Data.
func (c composite) baseSize() uint32 { return c.baseOff + c.baseLen }

// compositeTail says whether op's Tail is a section of a blob of this
// store that a composite can refer to: the body part of a composite (or
// of a plain blob) running to the blob's end. It returns the composite
// to write, before its CRC; ok false: copy the Tail.
func (s *Store) compositeTail(op *store.Op) (c composite, r *blobReader, ok bool) {
	ds, isSection := op.Tail.(store.DataSection)
	if !isSection || len(op.Data) == 0 {
		return composite{}, nil, false
	}
	rd, off, n := ds.DataSection()
	br, isBlob := rd.(*blobReader)
	if !isBlob || br.s != s || br.f == nil || off < 0 || n <= 0 || off+n != br.size {
		return composite{}, nil, false
	}
	if br.comp == nil {
		c = composite{base: br.id, baseOff: uint32(off), baseLen: uint32(n), baseCRC: br.want}
	} else {
		// A composite's body: refer to its base directly.
		bc := *br.comp
		if off < int64(bc.headLen) {
			return composite{}, nil, false
		}
		c = composite{base: bc.base, baseOff: bc.baseOff + uint32(off-int64(bc.headLen)), baseLen: uint32(n), baseCRC: bc.baseCRC}
	}
	if c.baseOff > maxBaseHead || uint64(len(op.Data))+uint64(n) > 1<<32-1 {
		return composite{}, nil, false
	}
	c.headLen = uint32(len(op.Data))
	return c, br, true
}

// writeComposite writes composite blob id: c's header and head, synced.
// It pins c.base (a reference released by unpinBases) so that the base
// cannot go before the record referring to the composite is applied,
// and returns the composite Data's CRC, computed from base's first
// baseOff bytes (read through r, which reads the base or a composite of
// it) and the CRCs it has. ok false: the base is gone, copy instead.
func (s *Store) writeComposite(id uint32, c composite, head []byte, r *blobReader) (sum uint32, ok bool, err error) {
	s.mu.Lock()
	b, live := s.mu.blobs[c.base]
	if live && b.refs > 0 {
		b.refs++
		s.mu.blobs[c.base] = b
	}
	s.mu.Unlock()
	if !live || b.refs == 0 {
		return 0, false, nil
	}
	pinned := true
	defer func() {
		if !ok && pinned {
			s.unpinBases([]uint32{c.base})
		}
	}()
	// CRC of the base's bytes before the body.
	pre := make([]byte, c.baseOff)
	if r.comp == nil {
		_, err = r.ReadAt(pre, 0)
	} else {
		err = r.readBase(pre, 0)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, false, fmt.Errorf("filestore: reading the base of a composite blob: %w", err)
	}
	bodyCRC := crc32cCombine(crc(pre), c.baseCRC, int64(c.baseLen))
	sum = crc32cCombine(crc(head), bodyCRC, int64(c.baseLen))

	f, err := s.fs.Create(refName(s.blobDir(), id))
	if err != nil {
		return 0, false, s.blobWriteError(err)
	}
	fail := func(err error) (uint32, bool, error) {
		f.Close()
		return 0, false, err
	}
	if _, err := f.WriteAt(c.header(), 0); err != nil {
		return fail(s.blobWriteError(err))
	}
	if _, err := f.WriteAt(head, refHeaderLen); err != nil {
		return fail(s.blobWriteError(err))
	}
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			return fail(s.blobWriteError(err))
		}
	}
	if err := f.Close(); err != nil {
		return 0, false, s.blobWriteError(err)
	}
	s.mu.Lock()
	s.mu.composites[id] = c
	s.mu.Unlock()
	return sum, true, nil
}

// unpinBases releases the references writeComposite took.
func (s *Store) unpinBases(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	for _, id := range ids {
		s.unrefBlobLocked(id)
	}
	s.mu.Unlock()
}

// unrefBlobLocked drops one reference to blob id; the last one gone
// makes it dead, and a dead composite drops its reference to its base.
func (s *Store) unrefBlobLocked(id uint32) {
	b, ok := s.mu.blobs[id]
	if !ok {
		return
	}
	if b.refs--; b.refs > 0 {
		s.mu.blobs[id] = b
		return
	}
	delete(s.mu.blobs, id)
	s.mu.deadBlobs = append(s.mu.deadBlobs, deadBlob{id: id})
	s.nDeadBlobs.Store(int64(len(s.mu.deadBlobs)))
	if c, ok := s.mu.composites[id]; ok {
		s.unrefBlobLocked(c.base)
	}
}

// linkComposites runs at Open, after the log is replayed: it reads the
// header of every live composite blob and counts its reference to its
// base (recreating the base's entry if no message refers to it
// directly). A .ref file that cannot be read is corruption of its
// messages' Data (with Salvage, checkBlobsLocked drops them).
func (s *Store) linkComposites() error {
	names, err := s.fs.ReadDir(s.blobDir())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("filestore: %w", err)
	}
	for _, name := range names {
		v, ok := parseName(name, refSuffix, 32)
		if !ok {
			continue
		}
		id := uint32(v)
		if s.mu.blobs[id].refs == 0 {
			continue // an orphan: sweepOrphanBlobs removes it
		}
		c, err := s.readRefHeader(id)
		if err != nil {
			if cerr := s.corrupt(refName(s.blobDir(), id), 0, err.Error()); cerr != nil {
				return cerr
			}
			s.mu.badRefs = append(s.mu.badRefs, id)
			continue
		}
		s.mu.composites[id] = c
		b := s.mu.blobs[c.base]
		b.refs++
		b.size = c.baseSize()
		s.mu.blobs[c.base] = b
	}
	return nil
}

// readRefHeader reads and checks the header of composite blob id.
func (s *Store) readRefHeader(id uint32) (composite, error) {
	f, err := s.fs.Open(refName(s.blobDir(), id))
	if err != nil {
		return composite{}, err
	}
	defer f.Close()
	h := make([]byte, refHeaderLen)
	if n, err := f.ReadAt(h, 0); n < len(h) {
		return composite{}, fmt.Errorf("composite blob header: %w", errors.Join(err, io.ErrUnexpectedEOF))
	}
	return parseRefHeader(h)
}

// openComposite opens the two files of composite ent (see openBlobFile
// for errBlobMoved) and returns its reader.
func (s *Store) openComposite(entityID, seq uint64, ent entry, c composite) (*blobReader, error) {
	name := refName(s.blobDir(), ent.off)
	f, err := s.fs.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !s.stillRefers(entityID, seq, ent) {
			return nil, errBlobMoved
		}
		return nil, fmt.Errorf("filestore: %s: %w", name, errors.Join(err, store.ErrCorrupt))
	}
	baseName := blobName(s.blobDir(), c.base)
	bf, err := s.fs.Open(baseName)
	if err != nil {
		f.Close()
		if errors.Is(err, fs.ErrNotExist) && !s.stillRefers(entityID, seq, ent) {
			return nil, errBlobMoved
		}
		return nil, fmt.Errorf("filestore: %s (the base of %s): %w", baseName, name, errors.Join(err, store.ErrCorrupt))
	}
	cc := c
	return &blobReader{s: s, id: ent.off, f: f, name: name, size: int64(ent.size), want: ent.crc,
		comp: &cc, base: bf, baseName: baseName}, nil
}

// readComposite reads len(p) bytes of a composite's Data from off: the
// head from the .ref file, the body from the base.
func (r *blobReader) readComposite(p []byte, off int64) (int, error) {
	c := r.comp
	n := 0
	if off < int64(c.headLen) {
		k := min(int64(len(p)), int64(c.headLen)-off)
		m, err := r.f.ReadAt(p[:k], refHeaderLen+off)
		n += m
		if int64(m) < k {
			return n, r.short(err, r.name)
		}
		off += k
		p = p[k:]
	}
	if len(p) > 0 {
		if err := r.readBase(p, off-int64(c.headLen)+int64(c.baseOff)); err != nil {
			return n, err
		}
		n += len(p)
	}
	return n, nil
}

// readBase reads len(p) bytes of a composite's base Data from off.
func (r *blobReader) readBase(p []byte, off int64) error {
	m, err := r.base.ReadAt(p, off)
	if m < len(p) {
		return r.short(err, r.baseName)
	}
	return nil
}

// short is the error of a read of name that came back short.
func (r *blobReader) short(err error, name string) error {
	if err == nil || err == io.EOF {
		return fmt.Errorf("filestore: %s: blob shorter than recorded: %w", name, store.ErrCorrupt)
	}
	return fmt.Errorf("filestore: %w", err)
}

// crc32cCombine returns the CRC-32C of A followed by B from crcA, crcB
// and len(B) (zlib's crc32_combine, for the Castagnoli polynomial). With
// crcA the CRC of A and crcB that of A followed by B, it returns the CRC
// of B alone.
func crc32cCombine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA ^ crcB
	}
	var even, odd [32]uint32
	odd[0] = 0x82f63b78 // the reflected polynomial
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four
	for {
		gf2Square(&even, &odd) // one zero byte, then two, four, ...
		if lenB&1 != 0 {
			crcA = gf2Times(&even, crcA)
		}
		if lenB >>= 1; lenB == 0 {
			break
		}
		gf2Square(&odd, &even)
		if lenB&1 != 0 {
			crcA = gf2Times(&odd, crcA)
		}
		if lenB >>= 1; lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
