package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// appendBatch is one 200-byte message of entity 1.
func appendBatch(seq int) *store.Batch {
	return &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: uint64(seq),
		Meta: []byte(fmt.Sprint("meta", seq)), Data: bytes.Repeat([]byte{byte(seq)}, 200)}}}
}

// commitAll commits seqs from..to-1 from several goroutines (so that
// groups form), adds the acknowledged ones to want and returns how many
// were refused for lack of space. Any other error fails the test.
func commitAll(t *testing.T, s *Store, want *storetest.State, from, to int) int {
	t.Helper()
	var mu sync.Mutex
	var refused int
	var wg sync.WaitGroup
	next := atomic.Int64{}
	next.Store(int64(from))
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seq := int(next.Add(1) - 1)
				if seq >= to {
					return
				}
				b := appendBatch(seq)
				err := s.Commit(b, true)
				mu.Lock()
				switch {
				case err == nil:
					want.Apply(b)
				case errors.Is(err, store.ErrNoSpace):
					refused++
				default:
					t.Errorf("Commit %d: %v", seq, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return refused
}

// checkAfterCrash opens what a power loss would leave of mem (with torn
// unsynced writes) and compares it with want: every acknowledged batch is
// there, no refused one is.
func checkAfterCrash(t *testing.T, mem *vfs.Mem, want *storetest.State, seed int64) {
	t.Helper()
	s := mustOpen(t, memOpts(mem.CrashClone(vfs.CrashOptions{Rand: rand.New(rand.NewSource(seed))})))
	defer s.Close()
	if d := storetest.Diff(want, storetest.MustDump(t, s)); d != "" {
		t.Fatalf("after a crash (seed %d): %s", seed, d)
	}
}

// TestDiskFullAndBack fills a capacity-limited file system until commits
// are refused, checks the refusal (ErrNoSpace, the free space in the
// text, Health), that a crash at that point loses nothing acknowledged and
// brings back nothing refused, and that once space returns the same store
// takes commits again (without reopening) with nothing lost or doubled.
func TestDiskFullAndBack(t *testing.T) {
	for _, prealloc := range []bool{true, false} {
		t.Run(fmt.Sprint("preallocate=", prealloc), func(t *testing.T) {
			mem := vfs.NewMem()
			opts := memOpts(mem)
			opts.SegmentSize = 16 << 10
			opts.NoPreallocate = !prealloc
			opts.MinFreeBytes = -1 // no watermark: fill the disk for real
			s := mustOpen(t, opts)
			want := storetest.NewState()
			b := &store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}
			if err := s.Commit(b, true); err != nil {
				t.Fatal(err)
			}
			want.Apply(b)
			mem.SetCapacity(200 << 10)
			refused := commitAll(t, s, want, 1, 2000)
			if refused == 0 {
				t.Fatal("no commit was refused on a full disk")
			}
			err := s.Commit(appendBatch(5000), true)
			var ns *store.NoSpaceError
			if !errors.As(err, &ns) || !errors.Is(err, syscall.ENOSPC) || ns.Total != 200<<10 {
				t.Fatalf("Commit on a full disk: %v, want a NoSpaceError with the capacity", err)
			}
			if want := fmt.Sprintf("the broker's disk is full: %d bytes free of %d", ns.Free, 200<<10); err.Error() != want {
				t.Fatalf("text %q, want %q", err, want)
			}
			if err := s.Health(); !errors.Is(err, store.ErrNoSpace) {
				t.Fatalf("Health on a full disk: %v", err)
			}
			// Reads go on.
			for seq := range want.Entities[1].Msgs {
				if _, err := s.ReadData(1, seq); err != nil {
					t.Fatalf("ReadData %d on a full disk: %v", seq, err)
				}
				break
			}
			for seed := range int64(5) {
				checkAfterCrash(t, mem, want, seed)
			}

			mem.SetCapacity(1 << 30) // space is back
			s.space.forget()
			if err := s.Health(); err != nil {
				t.Fatalf("Health with space again: %v", err)
			}
			if refused := commitAll(t, s, want, 3000, 3300); refused != 0 {
				t.Fatalf("%d commits refused with space again", refused)
			}
			if err := s.Health(); err != nil {
				t.Fatalf("Health after commits: %v", err)
			}
			if d := storetest.Diff(want, storetest.MustDump(t, s)); d != "" {
				t.Fatalf("live: %s", d)
			}
			checkAfterCrash(t, mem, want, 99)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, memOpts(mem))
			defer s.Close()
			if d := storetest.Diff(want, storetest.MustDump(t, s)); d != "" {
				t.Fatalf("after reopen: %s", d)
			}
		})
	}
}

// TestShortWriteIsUndone: a write that reaches the file only in part (the
// disk filled in the middle of a group) is refused whole, and its bytes are
// gone before the next record is written where it would have been; every
// crash from then on recovers exactly the acknowledged batches.
func TestShortWriteIsUndone(t *testing.T) {
	for _, cut := range []int{1, recHeaderSize, recHeaderSize + 50, 400, 1 << 20} {
		t.Run(fmt.Sprint("cut=", cut), func(t *testing.T) {
			mem := vfs.NewMem()
			var armed atomic.Bool
			fs := vfs.WithErrors(mem, func(op vfs.Op) error {
				// Only the record's write: the preparer zero-fills the next
				// segment in the background a whole chunk (here the 64 KiB
				// segment) at a time, and a cut meant for the record once
				// hit it instead. (Its path cannot tell: a prepared segment
				// is written through the file opened under its .tmp name.)
				if op.Kind == vfs.OpWrite && op.Len > 100 && op.Len < 16<<10 && armed.CompareAndSwap(true, false) {
					return &vfs.ShortWrite{N: min(cut, op.Len), Err: syscall.ENOSPC}
				}
				return nil
			})
			opts := memOpts(fs)
			opts.SegmentSize = 64 << 10
			s := mustOpen(t, opts)
			want := fill(t, s, 1, 10, true)
			armed.Store(true)
			// Two batches in one Commit each; the first write is cut.
			big := &store.Batch{Ops: []store.Op{
				{Kind: store.OpAppend, EntityID: 1, Seq: 11, Data: bytes.Repeat([]byte{11}, 300)},
				{Kind: store.OpAppend, EntityID: 1, Seq: 12, Data: bytes.Repeat([]byte{12}, 300)},
			}}
			if err := s.Commit(big, true); !errors.Is(err, store.ErrNoSpace) {
				t.Fatalf("Commit with a short write: %v", err)
			}
			for seed := range int64(20) {
				checkAfterCrash(t, mem, want, seed)
			}
			// A clean close and open (replaying from the checkpoint's
			// position, where the refused record was) does not find it.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, opts)
			if d := storetest.Diff(want, storetest.MustDump(t, s)); d != "" {
				t.Fatalf("after reopen: %s", d)
			}
			// A smaller record goes where the torn one was.
			small := appendBatch(13)
			if err := s.Commit(small, true); err != nil {
				t.Fatal(err)
			}
			want.Apply(small)
			for seed := range int64(20) {
				checkAfterCrash(t, mem, want, 100+seed)
			}
			if d := storetest.Diff(want, storetest.MustDump(t, s)); d != "" {
				t.Fatalf("live: %s", d)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWatermark: below the low-disk watermark CheckGrowth refuses (and
// Health says why) while commits still succeed; above it all is well.
func TestWatermark(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.MinFreeBytes = 50 << 10
	s := mustOpen(t, opts)
	defer s.Close()
	if err := s.CheckGrowth(); err != nil {
		t.Fatalf("CheckGrowth with the space unknown: %v", err)
	}
	mem.SetCapacity(1 << 20)
	s.space.forget()
	if err := s.CheckGrowth(); err != nil {
		t.Fatalf("CheckGrowth with room: %v", err)
	}
	st := s.Stats()
	mem.SetCapacity(st.DiskBytes + 40<<10)
	s.space.forget()
	err := s.CheckGrowth()
	var ns *store.NoSpaceError
	if !errors.As(err, &ns) || ns.MinFree != 50<<10 || ns.Free >= 50<<10 {
		t.Fatalf("CheckGrowth below the watermark: %v", err)
	}
	if err := s.Health(); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Health below the watermark: %v", err)
	}
	fill(t, s, 1, 5, true) // settlements and the like still go through
}

func TestDefaultWatermark(t *testing.T) {
	s := &Store{}
	for _, c := range []struct {
		bytes   int64
		percent float64
		total   uint64
		want    uint64
	}{
		{0, 0, 100 << 30, 1 << 30}, // 1 GiB < 5 GiB
		{0, 0, 10 << 30, 512 << 20},
		{0, 0, 8 << 20, 8 << 20 * 5 / 100},
		{-1, 0, 8 << 20, 0},
		{4096, 0, 8 << 20, 4096},
		{0, 10, 8 << 20, 8 << 20 / 10},
		{1 << 20, 50, 8 << 20, 1 << 20},
	} {
		s.opts.MinFreeBytes, s.opts.MinFreePercent = c.bytes, c.percent
		if got := s.minFree(c.total); got != c.want {
			t.Errorf("minFree(%d, %v%%, total %d) = %d, want %d", c.bytes, c.percent, c.total, got, c.want)
		}
	}
}

// BenchmarkCheckGrowth is the cost the watermark adds to every send.
func BenchmarkCheckGrowth(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), BackgroundInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.CheckGrowth(); err != nil && !errors.Is(err, store.ErrNoSpace) {
				b.Fatal(err)
			}
		}
	})
}

// TestRotationFailureGoesOn: when the next segment cannot be installed
// (here its rename fails), commits go on in the active segment, later
// rotations are tried again and succeed, and nothing is lost in a crash.
func TestRotationFailureGoesOn(t *testing.T) {
	defer func(d time.Duration) { rotateRetry = d }(rotateRetry)
	rotateRetry = 0 // try again with the next group
	for _, what := range []vfs.OpKind{vfs.OpRename, vfs.OpCreate} {
		t.Run(what.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			var fails atomic.Int32
			fs := vfs.WithErrors(mem, func(op vfs.Op) error {
				if op.Kind == what && (strings.HasSuffix(op.Path, prepName) || strings.HasSuffix(op.Path, segSuffix)) && fails.Add(-1) >= 0 {
					return syscall.ENOSPC
				}
				return nil
			})
			s := mustOpen(t, memOpts(fs))
			want := fill(t, s, 1, 5, true)
			fails.Store(3)
			done := make(chan struct{})
			go func() {
				defer close(done)
				commitAll(t, s, want, 100, 400)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("commits stuck after a failed rotation")
			}
			if len(want.Entities[1].Msgs) != 305 {
				t.Fatalf("%d messages acknowledged, want 305", len(want.Entities[1].Msgs))
			}
			for seed := range int64(5) {
				checkAfterCrash(t, mem, want, seed)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
