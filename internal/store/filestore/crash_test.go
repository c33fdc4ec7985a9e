package filestore

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// crashWorker commits random batches to its own range of entities and
// records the model state after each batch.
type crashWorker struct {
	base   uint64 // entity IDs are base+1, base+2, ...
	gen    *storetest.Gen
	models []*storetest.State // models[k] = state after k batches
	// issued is the number of batches handed to Commit so far; durable the
	// number known durable (every batch up to the last synced one that
	// returned, since the log keeps commit order per worker).
	issued, durable atomic.Int64
	// s is the store the workload runs on (for batches that read it).
	s *Store
}

// crashImage is the file system at one simulated power loss.
type crashImage struct {
	fs      *vfs.Mem
	op      vfs.Op
	issued  []int64
	durable []int64
}

// runCrashWorkload runs workers concurrently against a store on a Mem FS
// and takes a CrashClone before every FS operation selected by crashAt.
// Worker 0 also checkpoints and compacts from time to time.
func runCrashWorkload(t *testing.T, seed int64, workers, batches int, crashAt func(n int64, op vfs.Op) bool, tune ...func(*Options)) ([]*crashWorker, []crashImage, Options) {
	t.Helper()
	return runCrashWorkloadOf(t, seed, workers, batches, nil, crashAt, tune...)
}

// runCrashWorkloadOf is runCrashWorkload with the batches made by next
// (worker, batch number) instead of the worker's random generator.
func runCrashWorkloadOf(t *testing.T, seed int64, workers, batches int, next func(w *crashWorker, k int) *store.Batch, crashAt func(n int64, op vfs.Op) bool, tune ...func(*Options)) ([]*crashWorker, []crashImage, Options) {
	t.Helper()
	mem := vfs.NewMem()
	var (
		ws     []*crashWorker
		mu     sync.Mutex
		images []crashImage
		nops   atomic.Int64
		armed  atomic.Bool
	)
	crng := rand.New(rand.NewSource(seed * 7919))
	inject := func(op vfs.Op) error {
		n := nops.Add(1)
		if !armed.Load() || !crashAt(n, op) {
			return nil
		}
		// Read the counters before cloning: a batch acknowledged after this
		// point may be in the image or not, both are fine.
		img := crashImage{op: op}
		for _, w := range ws {
			img.durable = append(img.durable, w.durable.Load())
		}
		mu.Lock()
		img.fs = mem.CrashClone(vfs.CrashOptions{Rand: rand.New(rand.NewSource(crng.Int63())), AnySubset: crng.Intn(2) == 0})
		mu.Unlock()
		for _, w := range ws {
			img.issued = append(img.issued, w.issued.Load())
		}
		mu.Lock()
		images = append(images, img)
		mu.Unlock()
		return nil
	}
	opts := Options{Dir: "/db", FS: vfs.WithErrors(mem, inject), SegmentSize: 16 << 10, BackgroundInterval: -1, MaxGroupBytes: 8 << 10}
	for _, f := range tune {
		f(&opts)
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range workers {
		w := &crashWorker{s: s, base: uint64(i+1) * 1_000_000,
			gen: &storetest.Gen{Rng: rand.New(rand.NewSource(seed*100 + int64(i))), MaxData: 400}}
		w.models = []*storetest.State{storetest.NewState()}
		// Seed the worker's entity range.
		b := &store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: w.base + 1, Name: "e"}}}
		if err := s.Commit(b, true); err != nil {
			t.Fatal(err)
		}
		m := storetest.NewState()
		m.Apply(b)
		w.models = []*storetest.State{m}
		ws = append(ws, w)
	}
	armed.Store(true)
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := w.gen.Rng
			for k := range batches {
				var b *store.Batch
				if next != nil {
					b = next(w, k)
				} else {
					b = w.gen.Batch(w.models[len(w.models)-1], 5)
				}
				next := w.models[len(w.models)-1].Clone()
				next.Apply(b)
				w.models = append(w.models, next)
				sync := rng.Intn(3) == 0
				w.issued.Add(1)
				if err := s.Commit(b, sync); err != nil {
					errc <- err
					return
				}
				if sync {
					w.durable.Store(w.issued.Load())
				}
				if i == 0 && k%40 == 39 {
					var err error
					if rng.Intn(2) == 0 {
						err = s.Compact()
					} else {
						err = s.Checkpoint()
					}
					if err != nil {
						errc <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	armed.Store(false)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The clean shutdown is one more image, with everything durable.
	final := crashImage{fs: mem.CrashClone(vfs.CrashOptions{}), op: vfs.Op{Path: "after Close"}}
	for _, w := range ws {
		final.issued = append(final.issued, w.issued.Load())
		final.durable = append(final.durable, w.issued.Load())
	}
	images = append(images, final)
	return ws, images, opts
}

// checkImage opens img and checks that each worker's entities are in the
// state after some prefix of its batches that includes every durable one.
func checkImage(t *testing.T, ws []*crashWorker, img crashImage, opts Options) {
	t.Helper()
	opts.FS = img.fs
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("crash before %v %s: reopen: %v\nfiles:\n%s", img.op.Kind, img.op.Path, err, img.fs)
	}
	defer s.Close()
	got := storetest.MustDump(t, s)
	for i, w := range ws {
		mine := storetest.NewState()
		for id, e := range got.Entities {
			if id > w.base && id < w.base+1_000_000 {
				mine.Entities[id] = e
			}
		}
		lo, hi := img.durable[i], img.issued[i]
		ok := false
		for k := hi; k >= lo && !ok; k-- {
			ok = storetest.Diff(w.models[k], mine) == ""
		}
		if !ok {
			t.Fatalf("crash before %v %s: worker %d matches no state after %d..%d batches; vs the durable one:\n%s",
				img.op.Kind, img.op.Path, i, lo, hi, storetest.Diff(w.models[lo], mine))
		}
	}
	// The reopened store keeps working and reopens again.
	b := &store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "after crash"}}}
	if err := s.Commit(b, true); err != nil {
		t.Fatal(err)
	}
}

func TestCrashAtRandomPoints(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			var mu sync.Mutex
			ws, images, opts := runCrashWorkload(t, seed, 4, 150, func(n int64, op vfs.Op) bool {
				mu.Lock()
				defer mu.Unlock()
				return rng.Intn(12) == 0
			})
			if len(images) < 20 {
				t.Fatalf("only %d crash points", len(images))
			}
			for _, img := range images {
				checkImage(t, ws, img, opts)
			}
			t.Logf("%d crash points checked", len(images))
		})
	}
}

// TestCrashDuringMaintenance crashes before every file-system operation
// made by checkpoints and compaction (creating, writing, syncing and
// renaming checkpoint files, deleting segments).
func TestCrashDuringMaintenance(t *testing.T) {
	ws, images, opts := runCrashWorkload(t, 9, 2, 200, func(n int64, op vfs.Op) bool {
		switch op.Kind {
		case vfs.OpRename, vfs.OpRemove, vfs.OpSyncDir:
			return true
		case vfs.OpCreate, vfs.OpWrite, vfs.OpSync:
			return len(op.Path) > 5 && (op.Path[len(op.Path)-4:] == ".tmp")
		}
		return false
	})
	kinds := map[vfs.OpKind]int{}
	for _, img := range images {
		kinds[img.op.Kind]++
		checkImage(t, ws, img, opts)
	}
	if kinds[vfs.OpRename] == 0 || kinds[vfs.OpRemove] == 0 {
		t.Fatalf("crash points by kind: %v; want renames and removes", kinds)
	}
	t.Logf("%d crash points checked: %v", len(images), kinds)
}

// TestCrashWithRecycledSegments runs a queue (each batch appends a
// message and removes the one ten before it, so segments die behind the
// writer) through checkpoints that delete segments, whose files the
// preparer reuses for new ones, and crashes at random points of it.
func TestCrashWithRecycledSegments(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	var mu sync.Mutex
	var reused atomic.Int64
	data := make([]byte, 700)
	ws, images, opts := runCrashWorkloadOf(t, 5, 2, 300, func(w *crashWorker, k int) *store.Batch {
		b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: w.base + 1, Seq: uint64(k + 1), Meta: []byte("m"), Data: data}}}
		if k >= 10 {
			b.Add(store.Op{Kind: store.OpRemove, EntityID: w.base + 1, Seq: uint64(k - 9)})
		}
		return b
	}, func(n int64, op vfs.Op) bool {
		if op.Kind == vfs.OpRename && strings.HasSuffix(op.Path, recycleName) {
			reused.Add(1)
		}
		mu.Lock()
		defer mu.Unlock()
		return rng.Intn(10) == 0
	})
	if reused.Load() == 0 {
		t.Fatal("no segment file was reused")
	}
	for _, img := range images {
		checkImage(t, ws, img, opts)
	}
	t.Logf("%d crash points checked, %d segment files reused", len(images), reused.Load())
}

// TestCrashWithBackgroundWork lets the background goroutine checkpoint,
// forward-copy and delete segments on its own schedule while power fails.
func TestCrashWithBackgroundWork(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	var mu sync.Mutex
	ws, images, opts := runCrashWorkload(t, 42, 3, 200, func(n int64, op vfs.Op) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.Intn(15) == 0
	}, func(o *Options) {
		o.BackgroundInterval = time.Millisecond
		o.CheckpointInterval = 3 * time.Millisecond
		o.CompactRate = 1 << 30
		o.CompactLiveRatio = 0.5
	})
	for _, img := range images {
		checkImage(t, ws, img, opts)
	}
	t.Logf("%d crash points checked", len(images))
}

// TestCrashWithSegmentDeletion runs the random workload with few live
// messages per entity (storetest.Gen.MaxLive), so that most segments die
// behind the writer, are deleted by checkpoints and compaction (worker
// 0's, or the background goroutine's) and have their files reused by the
// preparer. It crashes at random points and before every segment
// deletion and reuse, and fails unless segments were both removed and
// kept for reuse, and a kept file reused.
func TestCrashWithSegmentDeletion(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		for _, background := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed%d/background=%v", seed, background), func(t *testing.T) {
				rng := rand.New(rand.NewSource(seed))
				var mu sync.Mutex
				var removed, kept, reused atomic.Int64
				ws, images, opts := runCrashWorkloadOf(t, seed, 4, 300, func(w *crashWorker, k int) *store.Batch {
					w.gen.MaxLive = 4 // each worker's gen is its goroutine's alone
					return w.gen.Batch(w.models[len(w.models)-1], 5)
				}, func(n int64, op vfs.Op) bool {
					deletion := true
					switch {
					case op.Kind == vfs.OpRemove && strings.HasSuffix(op.Path, segSuffix):
						removed.Add(1)
					case op.Kind == vfs.OpRename && strings.HasSuffix(op.Path, segSuffix):
						kept.Add(1) // deleteSegments keeps the file for the preparer
					case op.Kind == vfs.OpRename && strings.HasSuffix(op.Path, recycleName):
						reused.Add(1)
					default:
						deletion = false
					}
					mu.Lock()
					defer mu.Unlock()
					return rng.Intn(15) == 0 || deletion
				}, func(o *Options) {
					o.SegmentSize = 8 << 10
					if background {
						o.BackgroundInterval = time.Millisecond
						o.CheckpointInterval = 3 * time.Millisecond
						o.CompactRate = 1 << 30
						o.CompactLiveRatio = 0.5
					}
				})
				t.Logf("%d segments removed, %d kept for reuse, %d kept files reused", removed.Load(), kept.Load(), reused.Load())
				if removed.Load() == 0 || kept.Load() == 0 || reused.Load() == 0 {
					t.Fatal("want segments both removed and kept for reuse, and a kept file reused")
				}
				for _, img := range images {
					checkImage(t, ws, img, opts)
				}
				t.Logf("%d crash points checked", len(images))
			})
		}
	}
}

// TestCrashWithReservedSegments runs batches large enough that the log's
// fdatasyncs cover RoundBytes each, so that the preparer only reserves
// the blocks of most new segments instead of zero-filling them, and
// crashes at random points and before every reservation and every sync
// of a segment being prepared. It fails unless segments were prepared
// both ways.
func TestCrashWithReservedSegments(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	var mu sync.Mutex
	var allocs, zeroFills atomic.Int64
	ws, images, opts := runCrashWorkloadOf(t, 11, 2, 200, func(w *crashWorker, k int) *store.Batch {
		b := &store.Batch{}
		for i := range 3 {
			data := bytes.Repeat([]byte{byte(k + i)}, 1500)
			b.Add(store.Op{Kind: store.OpAppend, EntityID: w.base + 1, Seq: uint64(3*k + i + 1), Meta: []byte("m"), Data: data})
		}
		if k >= 4 {
			for i := range 3 {
				b.Add(store.Op{Kind: store.OpRemove, EntityID: w.base + 1, Seq: uint64(3*(k-4) + i + 1)})
			}
		}
		return b
	}, func(n int64, op vfs.Op) bool {
		prep := strings.HasSuffix(op.Path, prepName)
		switch {
		case prep && op.Kind == vfs.OpAllocate:
			allocs.Add(1)
			return true
		case prep && op.Kind == vfs.OpWrite && op.Len >= 16<<10:
			zeroFills.Add(1)
		case prep && op.Kind == vfs.OpSync:
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		return rng.Intn(15) == 0
	}, func(o *Options) { o.RoundBytes = 2 << 10 })
	if a, z := allocs.Load(), zeroFills.Load(); a == 0 || z == 0 || z >= a {
		t.Fatalf("%d segments reserved, %d zero-filled; want some only reserved and some zero-filled", a, z)
	}
	for _, img := range images {
		checkImage(t, ws, img, opts)
	}
	t.Logf("%d crash points checked; %d segments reserved, %d of them zero-filled", len(images), allocs.Load(), zeroFills.Load())
}
