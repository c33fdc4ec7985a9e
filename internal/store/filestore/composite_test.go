package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

func TestCRC32CCombine(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for range 200 {
		a := make([]byte, rng.Intn(300))
		b := make([]byte, rng.Intn(3000))
		rng.Read(a)
		rng.Read(b)
		ca, cb, cab := crc(a), crc(b), crc(append(slices.Clone(a), b...))
		if got := crc32cCombine(ca, cb, int64(len(b))); got != cab {
			t.Fatalf("combine(%d, %d bytes) = %08x, want %08x", len(a), len(b), got, cab)
		}
		if got := crc32cCombine(ca, cab, int64(len(b))); got != cb {
			t.Fatalf("the CRC of the second part of %d+%d bytes = %08x, want %08x", len(a), len(b), got, cb)
		}
	}
	if crc32.Checksum(nil, castagnoli) != 0 || crc32cCombine(0x1234, 0x1234, 0) != 0 {
		t.Fatal("an empty second part")
	}
}

// sectionTail is an Op.Tail that is a section of Data the store handed
// out, as the broker's dead-letter and forward tails are.
type sectionTail struct {
	rd     store.DataReader
	off, n int64
}

func (t sectionTail) ReadAt(p []byte, off int64) (int, error) {
	return io.NewSectionReader(t.rd, t.off, t.n).ReadAt(p, off)
}
func (t sectionTail) Size() int64  { return t.n }
func (t sectionTail) Close() error { return t.rd.Close() }
func (t sectionTail) DataSection() (store.DataReader, int64, int64) {
	return t.rd, t.off, t.n
}

// bodyOf opens the Data of (entity, seq) and returns its bytes past
// headLen as a Tail.
func bodyOf(t *testing.T, s *Store, entity, seq uint64, headLen int64) sectionTail {
	t.Helper()
	rd, err := store.OpenData(s, entity, seq)
	if err != nil {
		t.Fatal(err)
	}
	return sectionTail{rd: rd, off: headLen, n: rd.Size() - headLen}
}

// checkBlobRefs checks that the blob files of an open store are exactly
// the ones its index refers to, directly or as a composite's base, and
// that each blob counts exactly those references.
func checkBlobRefs(t *testing.T, s *Store) {
	t.Helper()
	names, err := s.fs.ReadDir(s.blobDir())
	if err != nil {
		t.Fatal(err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	want := map[uint32]int32{}
	for _, e := range s.mu.ix.entities {
		for _, c := range e.chunks {
			for _, ent := range c.ents {
				if ent.seg == blobSeg && ent.size > 0 {
					want[ent.off]++
				}
			}
		}
	}
	for id := range want {
		if c, ok := s.mu.composites[id]; ok {
			want[c.base]++
		}
	}
	got := map[uint32]int32{}
	for id, b := range s.mu.blobs {
		got[id] = b.refs
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("blob references %v, want %v", got, want)
	}
	files := map[uint32]bool{}
	for _, n := range names {
		v, ok := parseName(n, blobSuffix, 32)
		if c, isRef := s.mu.composites[uint32(v)]; ok && isRef {
			t.Fatalf("composite %d (of %d) has a plain blob file", v, c.base)
		}
		if !ok {
			if v, ok = parseName(n, refSuffix, 32); !ok {
				t.Fatalf("stray file %s", n)
			}
			if _, isRef := s.mu.composites[uint32(v)]; !isRef {
				t.Fatalf("composite file %s not known as one", n)
			}
		}
		files[uint32(v)] = true
	}
	for id := range want {
		if !files[id] {
			t.Fatalf("blob %d has no file", id)
		}
	}
	if len(files) != len(want) {
		t.Fatalf("blob files %v, referenced %v", names, want)
	}
}

// TestCompositeBlob: a message rewritten or forwarded with its body
// unchanged writes only its new head (a .ref file) and refers to the old
// blob for its body; a composite of a composite refers to the first
// base; the base lives as long as anything uses it, across a restart,
// checkpoints and compaction, and goes with the last user.
func TestCompositeBlob(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	m := storetest.NewState()
	const headLen = 100
	data := bigData(1, 300<<10)
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
		store.Op{Kind: store.OpPutEntity, EntityID: 2, Name: "fwd"})
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: []byte("m"), Data: data})
	files := blobFiles(t, mem)
	if len(files) != 1 {
		t.Fatalf("blob files %v", files)
	}

	// Forward: a new head and the old body, in another entity; the old
	// message goes in the same batch.
	head2 := bytes.Repeat([]byte("F"), 70)
	tail := bodyOf(t, s, 1, 1, headLen)
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 2, Seq: 7, Meta: []byte("fw"), Data: head2, Tail: tail},
		store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1})
	tail.Close()
	commitTo(t, s, m, true) // sweeps
	files = blobFiles(t, mem)
	if len(files) != 2 || !strings.HasSuffix(files[1], refSuffix) {
		t.Fatalf("blob files after the forward %v, want the base and one .ref", files)
	}
	if n := fileSize(t, mem, "/db/"+blobDirName+"/"+files[1]); n != refHeaderLen+int64(len(head2)) {
		t.Fatalf("the composite file is %d bytes: more than its head", n)
	}
	want := append(slices.Clone(head2), data[headLen:]...)
	if got, err := s.ReadData(2, 7); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadData of the composite: %v (equal %v)", err, bytes.Equal(got, want))
	}
	checkBlobRefs(t, s)

	// Dead-letter the forwarded message: a composite of the composite
	// refers to the first base directly.
	head3 := bytes.Repeat([]byte("D"), 90)
	tail = bodyOf(t, s, 2, 7, int64(len(head2)))
	commitTo(t, s, m, true, store.Op{Kind: store.OpRewrite, EntityID: 2, Seq: 7, Meta: []byte("dl"), Data: head3, Tail: tail})
	tail.Close()
	commitTo(t, s, m, true)
	s.mu.RLock()
	ent, _ := s.mu.ix.entities[2].chunks[0], 0
	c, isComp := s.mu.composites[ent.ents[0].off]
	s.mu.RUnlock()
	if !isComp || fmt.Sprintf("%010d%s", c.base, blobSuffix) != blobFiles(t, mem)[0] {
		t.Fatalf("the second composite %+v does not refer to the first base", c)
	}
	if files = blobFiles(t, mem); len(files) != 2 {
		t.Fatalf("blob files after the dead-letter %v, want the base and the new .ref", files)
	}
	checkBlobRefs(t, s)

	// Streamed, and checked: a damaged base is corruption.
	rd, err := store.OpenData(s, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(rd, 0, rd.Size()))
	rd.Close()
	want = append(slices.Clone(head3), data[headLen:]...)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("streamed composite: %v (equal %v)", err, bytes.Equal(got, want))
	}

	// A topic's copies share one composite; the base counts it once.
	tail = bodyOf(t, s, 2, 7, int64(len(head3)))
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 3, Name: "sub1"},
		store.Op{Kind: store.OpPutEntity, EntityID: 4, Name: "sub2"})
	shared := []byte("shared head")
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 3, Seq: 1, Data: shared, Tail: tail},
		store.Op{Kind: store.OpAppend, EntityID: 4, Seq: 1, Data: shared, Tail: tail})
	tail.Close()
	if files = blobFiles(t, mem); len(files) != 3 {
		t.Fatalf("blob files after the fan-out %v", files)
	}
	checkBlobRefs(t, s)

	// Checkpoint, compaction and a restart keep it all.
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, blobOpts(mem))
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	checkBlobRefs(t, s)

	// The base goes with its last user, not before.
	commitTo(t, s, m, true, store.Op{Kind: store.OpRemove, EntityID: 2, Seq: 7}, store.Op{Kind: store.OpRemove, EntityID: 3, Seq: 1})
	commitTo(t, s, m, true)
	if files = blobFiles(t, mem); len(files) != 2 {
		t.Fatalf("blob files with one user left %v", files)
	}
	checkBlobRefs(t, s)
	commitTo(t, s, m, true, store.Op{Kind: store.OpRemove, EntityID: 4, Seq: 1})
	commitTo(t, s, m, true)
	if files = blobFiles(t, mem); len(files) != 0 {
		t.Fatalf("blob files with no user %v", files)
	}
	checkBlobRefs(t, s)

	// A damaged base is corruption of the composite's Data.
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 2, Data: data})
	tail = bodyOf(t, s, 1, 2, headLen)
	commitTo(t, s, m, true, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 2, Data: head2, Tail: tail})
	tail.Close()
	files = blobFiles(t, mem)
	base := "/db/" + blobDirName + "/" + files[0]
	patch(t, mem, base, int64(len(data)-10), []byte("x"))
	if _, err := s.ReadData(1, 2); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("ReadData of a composite with a damaged base: %v", err)
	}
	s.Close()
}

// TestCompositeFallsBack: a Tail that is not the end of a blob of this
// store (another store's, a section short of the end, Data in the log)
// is copied into a plain blob.
func TestCompositeFallsBack(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	defer s.Close()
	other := mustOpen(t, blobOpts(vfs.NewMem()))
	defer other.Close()
	m, mo := storetest.NewState(), storetest.NewState()
	data := bigData(2, 64<<10)
	for _, st := range []struct {
		s *Store
		m *storetest.State
	}{{s, m}, {other, mo}} {
		commitTo(t, st.s, st.m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
			store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: data},
			store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 2, Data: []byte("small data in the log")})
	}
	for i, tail := range []sectionTail{
		bodyOf(t, other, 1, 1, 10),
		{rd: bodyOf(t, s, 1, 1, 10).rd, off: 10, n: 1000},
		bodyOf(t, s, 1, 2, 3),
	} {
		commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: uint64(10 + i), Data: bytes.Repeat([]byte("h"), 2000), Tail: tail})
		tail.Close()
	}
	for _, f := range blobFiles(t, mem) {
		if strings.HasSuffix(f, refSuffix) {
			t.Fatalf("a composite was made: %v", blobFiles(t, mem))
		}
	}
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	checkBlobRefs(t, s)
}

// TestCrashWithComposites: large messages forwarded (a new head and the
// old body in another entity, the old message removed in the same batch)
// and dead-lettered (rewritten in place) as composites, some removed,
// crashed at random points and before every blob file operation: each
// image reopens to a state after a prefix of the batches that includes
// every durable one (so each message is in exactly one place with its
// whole body), with exactly the referenced blob files, each counting its
// references right.
func TestCrashWithComposites(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		background := seed == 2
		t.Run(fmt.Sprintf("seed%d/background=%v", seed, background), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			var mu sync.Mutex
			var refOps int
			const headLen = 40
			// Each batch's Tail is closed once the worker's next batch is
			// made (the workload does not close them).
			var tmu sync.Mutex
			open := map[*crashWorker]io.Closer{}
			defer func() {
				for _, c := range open {
					c.Close()
				}
			}()
			bodyOf := func(w *crashWorker, entity, seq uint64, headLen int64) sectionTail {
				tl := bodyOf(t, w.s, entity, seq, headLen)
				tmu.Lock()
				open[w] = tl
				tmu.Unlock()
				return tl
			}
			ws, images, opts := runCrashWorkloadOf(t, seed, 2, 160, func(w *crashWorker, k int) *store.Batch {
				tmu.Lock()
				if c := open[w]; c != nil {
					c.Close()
					delete(open, w)
				}
				tmu.Unlock()
				src, dst := w.base+1, w.base+2
				seq := uint64(k/4 + 1)
				head := bytes.Repeat([]byte{byte('a' + k%26)}, headLen)
				switch k % 4 {
				case 0:
					ops := []store.Op{{Kind: store.OpAppend, EntityID: src, Seq: seq, Meta: []byte("new"),
						Data: append(head, bigData(byte(k), 600+k)...)}}
					if k == 0 {
						ops = append([]store.Op{{Kind: store.OpPutEntity, EntityID: dst, Name: "dst"}}, ops...)
					}
					return &store.Batch{Ops: ops}
				case 1: // forward seq from src to dst
					return &store.Batch{Ops: []store.Op{
						{Kind: store.OpAppend, EntityID: dst, Seq: seq, Meta: []byte("fw"), Data: head[:headLen-5], Tail: bodyOf(w, src, seq, headLen)},
						{Kind: store.OpRemove, EntityID: src, Seq: seq}}}
				case 2: // dead-letter it in place
					return &store.Batch{Ops: []store.Op{
						{Kind: store.OpRewrite, EntityID: dst, Seq: seq, Meta: []byte("dl"), Data: head[:headLen-9], Tail: bodyOf(w, dst, seq, headLen-5)}}}
				default: // remove every other one
					if seq%2 == 0 {
						return &store.Batch{Ops: []store.Op{{Kind: store.OpRemove, EntityID: dst, Seq: seq}}}
					}
					return &store.Batch{Ops: []store.Op{{Kind: store.OpSetMeta, EntityID: dst, Seq: seq, Meta: []byte("kept")}}}
				}
			}, func(n int64, op vfs.Op) bool {
				mu.Lock()
				defer mu.Unlock()
				if strings.Contains(op.Path, "/"+blobDirName) {
					if strings.HasSuffix(op.Path, refSuffix) {
						refOps++
					}
					return rng.Intn(3) == 0
				}
				return rng.Intn(10) == 0
			}, func(o *Options) {
				o.BlobThreshold = 150
				if background {
					o.BackgroundInterval = time.Millisecond
					o.CheckpointInterval = 3 * time.Millisecond
					o.CompactRate = 1 << 30
					o.CompactLiveRatio = 0.5
				}
			})
			if refOps == 0 {
				t.Fatal("no composite blob file operations")
			}
			for _, img := range images {
				checkImage(t, ws, img, opts)
				o := opts
				o.FS = img.fs
				s, err := Open(o)
				if err != nil {
					t.Fatal(err)
				}
				checkBlobRefs(t, s)
				s.Close()
			}
			t.Logf("%d crash points checked, %d composite file operations", len(images), refOps)
		})
	}
}

// TestCompositeCorruption: a composite whose header is damaged, or whose
// base is missing, fails Open with store.ErrCorrupt; with Salvage its
// messages are dropped and the others kept.
func TestCompositeCorruption(t *testing.T) {
	for _, damage := range []string{"header", "base"} {
		t.Run(damage, func(t *testing.T) {
			mem := vfs.NewMem()
			s := mustOpen(t, blobOpts(mem))
			m := storetest.NewState()
			data := bigData(5, 8<<10)
			commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
				store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: data},
				store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 2, Data: bigData(6, 4<<10)})
			tail := bodyOf(t, s, 1, 1, 64)
			commitTo(t, s, m, true, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 1, Data: []byte("new head"), Tail: tail})
			tail.Close()
			var ref, base string
			for _, f := range blobFiles(t, mem) {
				if strings.HasSuffix(f, refSuffix) {
					ref = "/db/" + blobDirName + "/" + f
				} else if base == "" {
					base = "/db/" + blobDirName + "/" + f
				}
			}
			s.Close()
			if damage == "header" {
				patch(t, mem, ref, 9, []byte{0xff})
			} else {
				mem.Remove(base)
			}
			if _, err := Open(blobOpts(mem)); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Open with a damaged composite: %v", err)
			}
			o := blobOpts(mem)
			o.Salvage = true
			s = mustOpen(t, o)
			defer s.Close()
			m.Apply(&store.Batch{Ops: []store.Op{{Kind: store.OpRemove, EntityID: 1, Seq: 1}}})
			if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
				t.Fatal(d)
			}
			checkBlobRefs(t, s)
		})
	}
}
