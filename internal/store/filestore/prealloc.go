package filestore

import (
	"fmt"

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
	for range s.prepReq {
		f, err := s.preallocate()
		if err != nil {
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
}

func (s *Store) preallocate() (vfs.File, error) {
	p := s.path(prepName)
	f, err := s.fs.Create(p)
	if err != nil {
		return nil, err
	}
	zero := make([]byte, min(s.opts.SegmentSize, 1<<20))
	for off := int64(0); off < s.opts.SegmentSize; off += int64(len(zero)) {
		n := min(int64(len(zero)), s.opts.SegmentSize-off)
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			f.Close()
			s.fs.Remove(p)
			return nil, err
		}
	}
	if !s.opts.NoSync {
		if err := f.Sync(); err != nil {
			f.Close()
			s.fs.Remove(p)
			return nil, err
		}
	}
	s.prepBytes.Store(s.opts.SegmentSize)
	return f, nil
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
		f, err := s.preallocate()
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
			return fail(fmt.Errorf("sync dir %s: %w", s.opts.Dir, err))
		}
	}
	seg = newSegment(id, name, p.f)
	seg.firstLSN = firstLSN
	seg.size = segHeaderSize
	seg.alloc = s.opts.SegmentSize
	return seg, true, nil
}
