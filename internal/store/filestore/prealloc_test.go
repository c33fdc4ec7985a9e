package filestore

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// The preparer never has more than prepLead times the active segment's
// fill written (plus the chunk it started), and a rotation that needs the
// prepared segment ends the pacing at once.
func TestPreparerPacesItself(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(plainFS{mem}) // the zeros show in the file's size
	opts.SegmentSize = 16 * prepChunk
	s := mustOpen(t, opts)
	defer s.Close()
	prepared := func() int64 {
		f, err := mem.Open(s.path(prepName))
		if err != nil {
			return 0
		}
		defer f.Close()
		n, _ := f.Size()
		return n
	}
	// waitFor polls until cond holds (the preparer is a goroutine of its
	// own, paced by real time).
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (prepared %d bytes, active segment at %d)", what, prepared(), s.activeOff.Load())
			}
		}
	}
	bound := func() int64 { return prepLead*s.activeOff.Load() + prepChunk }
	if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}, true); err != nil {
		t.Fatal(err)
	}
	waitFor("the first chunk", func() bool { return prepared() >= prepChunk })
	time.Sleep(10 * prepPoll) // (what must not happen takes its time)
	if got, max := prepared(), bound(); got > max {
		t.Fatalf("prepared %d bytes with the active segment at %d; want at most %d", got, s.activeOff.Load(), max)
	}

	data := make([]byte, 1000)
	seq := uint64(0)
	commit := func(n int) error {
		var b store.Batch
		for range n {
			seq++
			b.Add(store.Op{Kind: store.OpAppend, EntityID: 1, Seq: seq, Data: data})
		}
		return s.Commit(&b, true)
	}
	if err := commit(4 * prepChunk / 1000); err != nil { // the active segment grows by about four chunks
		t.Fatal(err)
	}
	waitFor("the preparer to follow the writer", func() bool { return prepared() >= prepLead*s.activeOff.Load()-prepChunk })
	time.Sleep(10 * prepPoll)
	if got, max := prepared(), bound(); got > max {
		t.Fatalf("prepared %d bytes with the active segment at %d; want at most %d", got, s.activeOff.Load(), max)
	}

	// Past the end of the segment the writer needs the prepared one now:
	// the commit must not wait for the pacing (which, with the active
	// segment no fuller, would never let the preparer finish).
	active := func() uint32 {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.mu.active.id
	}
	id := active()
	done := make(chan error, 1)
	go func() { done <- commit(int(opts.SegmentSize) / 1000) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the rotating commit still waits for the preparer (prepared %d bytes)", prepared())
	}
	if active() == id {
		t.Fatalf("no new segment after %d bytes", opts.SegmentSize)
	}
}

// keptSegmentStore opens a store on a Mem FS whose segments (16 KB) have
// all died and been deleted by a checkpoint, one kept for reuse; m is its
// content.
func keptSegmentStore(t *testing.T) (*Store, *vfs.Mem, Options, *storetest.State) {
	t.Helper()
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 16 << 10
	s := mustOpen(t, opts)
	m := queueLoad(t, s, 400, 200, 0) // ≈ 6 segments, all dead
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if s.recycleBytes.Load() != opts.SegmentSize {
		t.Fatalf("no segment file kept for reuse (recycleBytes %d)", s.recycleBytes.Load())
	}
	if names, _ := mem.ReadDir("/db"); !slices.Contains(names, recycleName) {
		t.Fatalf("no %s in %v", recycleName, names)
	}
	return s, mem, opts, m
}

// A deleted segment's file is kept (one at most, counted in DiskBytes) and
// the preparer overwrites it instead of creating a file; the log reads
// back the same after a clean reopen and after a crash.
func TestSegmentsAreRecycled(t *testing.T) {
	s, mem, opts, m := keptSegmentStore(t)
	disk := s.Stats().DiskBytes
	appendQueue(t, s, m, 400, 200) // rotations take the kept file (and, after the next deletions, others)
	drainQueue(t, s, m, 400, 7)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendQueue(t, s, m, 200, 200)
	if got := s.LogStats().Recycled; got == 0 {
		t.Fatal("no segment was prepared from a kept file")
	}
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	if disk < opts.SegmentSize {
		t.Fatalf("DiskBytes %d with a kept segment file", disk)
	}
	img := mem.CrashClone(vfs.CrashOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := mem.ReadDir("/db"); slices.Contains(names, recycleName) {
		t.Fatalf("%s left after Close: %v", recycleName, names)
	}
	reopenHolds(t, opts, m, "after reopen")
	opts.FS = img
	reopenHolds(t, opts, m, "after a crash")
}

// A kept file is prepared exactly as a new one: all zeros, whatever it
// held before.
func TestRecycledFileIsZeroed(t *testing.T) {
	mem := &allocFS{FS: vfs.NewMem()} // blocks can be reserved, and a recycled file is zeroed all the same
	opts := memOpts(mem)
	s := mustOpen(t, opts)
	defer s.Close()
	// The store's own preparer makes a first segment at Open; let it
	// finish and take its file, so that it does not race the direct call
	// below for prepName (it did under -race in CI).
	if p0 := <-s.prepc; p0.f != nil {
		p0.f.Close()
		mem.Remove(s.path(prepName))
		s.prepBytes.Store(0)
	}
	f, err := mem.Create(s.path(recycleName))
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xA5}, int(opts.SegmentSize))
	if _, err := f.WriteAt(junk, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.recycleBytes.Store(opts.SegmentSize)
	p, err := s.preallocate(false, true)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if s.recycleBytes.Load() != 0 || s.LogStats().Recycled != 1 {
		t.Fatalf("the kept file was not used (recycleBytes %d, Recycled %d)", s.recycleBytes.Load(), s.LogStats().Recycled)
	}
	got := make([]byte, opts.SegmentSize+1)
	n, _ := p.ReadAt(got, 0)
	if int64(n) != opts.SegmentSize || !bytes.Equal(got[:n], make([]byte, n)) {
		t.Fatalf("prepared file: %d bytes, not all zero", n)
	}
}

// A kept file that waits recycleIdle without a new segment is removed, so
// that the disk comes back down after a drain.
func TestIdleRecycledFileIsDropped(t *testing.T) {
	s, mem, opts, _ := keptSegmentStore(t)
	defer s.Close()
	s.mu.RLock()
	sealed := s.mu.sealedAt
	s.mu.RUnlock()
	s.dropIdleRecycled(sealed.Add(recycleIdle / 2))
	if s.recycleBytes.Load() == 0 {
		t.Fatal("dropped before it was idle")
	}
	disk := s.Stats().DiskBytes
	s.dropIdleRecycled(sealed.Add(recycleIdle))
	if names, _ := mem.ReadDir("/db"); s.recycleBytes.Load() != 0 || slices.Contains(names, recycleName) {
		t.Fatalf("idle kept file not dropped: %v", names)
	}
	if got := s.Stats().DiskBytes; got != disk-opts.SegmentSize {
		t.Fatalf("DiskBytes %d after the drop, want %d", got, disk-opts.SegmentSize)
	}
}

// On the OS file system the preparer drops the cached pages of sealed
// segments beyond the newest CachedLogBytes, each once, and the log reads
// back the same, before and after a reopen; a negative CachedLogBytes
// drops nothing.
func TestColdSegmentsLeaveTheCache(t *testing.T) {
	f, err := vfs.OS().Create(filepath.Join(t.TempDir(), "probe"))
	if err != nil {
		t.Fatal(err)
	}
	_, dropper := f.(vfs.CacheDropper)
	f.Close()
	for _, keep := range []int64{32 << 10, -1} {
		opts := Options{Dir: t.TempDir(), SegmentSize: 16 << 10, CachedLogBytes: keep, BackgroundInterval: -1}
		s := mustOpen(t, opts)
		m := storetest.NewState()
		appendQueue(t, s, m, 600, 200) // ≈ 8 segments
		if keep > 0 && dropper {
			// The preparer drops as it starts on the next segment: wait
			// for it to have caught up with the last rotation. The writer
			// asks for that segment before it seals the one it leaves,
			// so the preparer may count that one as active still: the
			// bound holds give or take that last sealed segment.
			sealedCached := func() (kept int64, dropped int64, to uint32) {
				s.mu.RLock()
				defer s.mu.RUnlock()
				for id := s.uncachedTo + 1; id < s.mu.active.id; id++ {
					kept += s.mu.segs[id].diskSize()
				}
				return kept, s.LogStats().Uncached, s.uncachedTo
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				kept, dropped, to := sealedCached()
				if dropped > 0 && kept <= keep+opts.SegmentSize {
					if dropped != int64(to) {
						t.Errorf("%d drops for segments 1 to %d", dropped, to)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d bytes of sealed segments still cached after %d drops; want at most %d", kept, dropped, keep+opts.SegmentSize)
				}
			}
		}
		if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
			t.Fatal(d)
		}
		if (keep < 0 || !dropper) && s.LogStats().Uncached != 0 {
			t.Fatalf("%d segments dropped with CachedLogBytes %d", s.LogStats().Uncached, keep)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		reopenHolds(t, opts, m, "after reopen")
	}
}

// plainFS hands out files that cannot reserve blocks (no vfs.Allocator).
type plainFS struct{ vfs.FS }

type plainFile struct{ vfs.File }

func (p plainFS) Create(name string) (vfs.File, error) {
	f, err := p.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return plainFile{f}, nil
}

func (p plainFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := p.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return plainFile{f}, nil
}

// allocFS hands out files that are vfs.Allocators (over an in-memory file
// system), recording for each file prepared for a segment whether its
// blocks were reserved before anything was written to it and how many
// zeros were written to it; with fail set, every reservation fails.
type allocFS struct {
	vfs.FS
	fail bool
	mu   sync.Mutex
	log  []*prepLog
}

type prepLog struct {
	reservedFirst bool  // Allocate(0, SegmentSize) before any write
	written       bool  // anything written
	zeros         int64 // bytes written that were all zeros
}

type allocFile struct {
	vfs.File
	fs  *allocFS
	log *prepLog
}

func (fs *allocFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || filepath.Base(name) != prepName {
		return f, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	l := &prepLog{}
	fs.log = append(fs.log, l)
	return &allocFile{File: f, fs: fs, log: l}, nil
}

func (fs *allocFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return fs.wrap(name, f, err)
}

func (fs *allocFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name)
	return fs.wrap(name, f, err)
}

func (fs *allocFS) logs() []prepLog {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]prepLog, len(fs.log))
	for i, l := range fs.log {
		out[i] = *l
	}
	return out
}

func (f *allocFile) Allocate(off, n int64) error {
	if f.fs.fail {
		return errors.New("allocFS: no reservations")
	}
	f.fs.mu.Lock()
	if !f.log.written {
		f.log.reservedFirst = true
	}
	f.fs.mu.Unlock()
	if size, _ := f.Size(); size < off+n {
		return f.Truncate(off + n)
	}
	return nil
}

func (f *allocFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.log.written = true
	if !slices.ContainsFunc(p, func(b byte) bool { return b != 0 }) {
		f.log.zeros += int64(len(p))
	}
	f.fs.mu.Unlock()
	return f.File.WriteAt(p, off)
}

// The preparer reserves each new segment's blocks first, and zero-fills
// them while the log's fdatasyncs are small; once they cover RoundBytes
// each on average it only reserves the blocks. A recycled file is always
// zero-filled, and so is a segment whose blocks cannot be reserved. The
// log's records come back across a reopen either way.
func TestPreparedSegmentsAreReserved(t *testing.T) {
	const segSize = 256 << 10
	for _, c := range []struct {
		name      string
		fail      bool
		recordLen int
		perSync   int
		zeroOnly  bool // every segment zero-filled
	}{
		{"small syncs", false, 500, 1, true},
		{"large syncs", false, 12 << 10, 2, false},
		{"large syncs, no reservations", true, 12 << 10, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := &allocFS{FS: vfs.NewMem(), fail: c.fail}
			opts := memOpts(fs)
			opts.SegmentSize = segSize
			opts.RoundBytes = 16 << 10
			s := mustOpen(t, opts)
			model := storetest.NewState()
			commit := func(b *store.Batch) {
				t.Helper()
				if err := s.Commit(b, true); err != nil {
					t.Fatal(err)
				}
				model.Apply(b)
			}
			commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}})
			seq := uint64(0)
			for written := 0; written < 5*segSize; written += c.recordLen * c.perSync {
				b := &store.Batch{}
				for range c.perSync {
					seq++
					b.Add(store.Op{Kind: store.OpAppend, EntityID: 1, Seq: seq, Data: bytes.Repeat([]byte{byte(seq)}, c.recordLen)})
				}
				commit(b)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			stats := s.LogStats() // (the preparer may have prepared one more until Close)
			logs := fs.logs()
			if len(logs) < 4 {
				t.Fatalf("%d segments prepared; want 4 or more", len(logs))
			}
			reservedOnly := 0
			for i, l := range logs {
				if !l.written && !l.reservedFirst {
					continue // the last: closed before it was started
				}
				if l.reservedFirst == c.fail {
					t.Fatalf("prepared file %d: reserved first = %v, with reservations failing = %v", i, l.reservedFirst, c.fail)
				}
				switch {
				case l.zeros >= segSize-segHeaderSize: // zero-filled
				case l.zeros == 0 && !c.zeroOnly:
					reservedOnly++
				default:
					t.Fatalf("prepared file %d: %d bytes of zeros written; want %d or, reserved only, none", i, l.zeros, segSize)
				}
			}
			if c.zeroOnly != (reservedOnly == 0) || stats.Reserved != int64(reservedOnly) {
				t.Fatalf("%d segments only reserved (LogStats.Reserved %d); want them %s", reservedOnly, stats.Reserved,
					map[bool]string{true: "all zero-filled", false: "reserved only after the first"}[c.zeroOnly])
			}
			s = mustOpen(t, opts)
			defer s.Close()
			if d := storetest.Diff(model, storetest.MustDump(t, s)); d != "" {
				t.Fatalf("after reopening: %s", d)
			}
		})
	}
}
