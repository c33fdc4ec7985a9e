package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// blobOpts are memOpts with a blob threshold of 1 KiB.
func blobOpts(fs vfs.FS) Options {
	o := memOpts(fs)
	o.BlobThreshold = 1 << 10
	return o
}

func blobFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.ReadDir("/db/" + blobDirName)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func bigData(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestSuiteMemBlobs runs the shared suite with a threshold low enough
// that most messages' Data goes to blob files.
func TestSuiteMemBlobs(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) storetest.Opener {
			fs := vfs.NewMem()
			return func() (store.Store, error) {
				return Open(Options{Dir: "/db", FS: fs, SegmentSize: 8 << 10, BackgroundInterval: -1, BlobThreshold: 3})
			}
		},
		Persistent: true,
	})
}

// TestBlobLifecycle: a large message's Data is one blob file, referenced
// from a small log record; it survives a restart, compaction and
// checkpoints without being rewritten, and is deleted once its removal is
// durable.
func TestBlobLifecycle(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	m := storetest.NewState()
	data := bigData(1, 200<<10)
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"})
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: []byte("m"), Data: data},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 2, Meta: []byte("small"), Data: []byte("tiny")})
	files := blobFiles(t, mem)
	if len(files) != 1 {
		t.Fatalf("blob files %v, want one", files)
	}
	if n := s.Stats().DiskBytes; n < int64(len(data)) {
		t.Fatalf("DiskBytes %d does not count the blob", n)
	}
	// The log holds the reference, not the data.
	var logBytes int64
	for _, f := range segFiles(t, mem) {
		logBytes += fileSize(t, mem, f)
	}
	if logBytes > 100<<10 {
		t.Fatalf("log is %d bytes: the data went into it", logBytes)
	}
	got, err := s.ReadData(1, 1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadData: %v (equal %v)", err, bytes.Equal(got, data))
	}
	datas, errs := s.ReadDataBatch([]store.DataRef{{EntityID: 1, Seq: 2}, {EntityID: 1, Seq: 1}, {EntityID: 1, Seq: 1}})
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || string(datas[0]) != "tiny" || !bytes.Equal(datas[1], data) || !bytes.Equal(datas[2], data) {
		t.Fatalf("ReadDataBatch: %v", errs)
	}
	// Compaction and checkpoints keep the reference and leave the blob.
	for i := 3; i < 200; i++ {
		commitTo(t, s, m, false, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i), Data: make([]byte, 100)})
		commitTo(t, s, m, false, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: uint64(i)})
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if after := blobFiles(t, mem); len(after) != 1 || after[0] != files[0] {
		t.Fatalf("blob files after compaction %v, want %v", after, files)
	}
	s.Close()
	s = mustOpen(t, blobOpts(mem))
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	// SetMeta keeps the blob; Remove deletes it once durable.
	commitTo(t, s, m, true, store.Op{Kind: store.OpSetMeta, EntityID: 1, Seq: 1, Meta: []byte("dead-lettered")})
	if len(blobFiles(t, mem)) != 1 {
		t.Fatal("SetMeta dropped the blob")
	}
	commitTo(t, s, m, false, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1})
	s.sweepBlobs() // the removal is in the log, not yet synced
	if len(blobFiles(t, mem)) != 1 {
		t.Fatal("blob deleted before its removal was durable")
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	commitTo(t, s, m, true) // a synced commit sweeps
	if files := blobFiles(t, mem); len(files) != 0 {
		t.Fatalf("blob files after removal: %v", files)
	}
	s.Close()
}

// TestBlobRewriteAndDeleteEntity: OpRewrite to large Data replaces the
// message's blob (the old one goes), a rewrite to small Data moves it
// back into the log, and deleting the entity deletes its blobs.
func TestBlobRewriteAndDeleteEntity(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	defer s.Close()
	m := storetest.NewState()
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"})
	for i := 1; i <= 3; i++ {
		commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i), Data: bigData(byte(i), 4<<10)})
	}
	commitTo(t, s, m, true, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 1, Meta: []byte("r"), Data: bigData(9, 5<<10)})
	commitTo(t, s, m, true, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 2, Meta: []byte("r"), Data: []byte("small now")})
	commitTo(t, s, m, true, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 99, Data: bigData(3, 5<<10)}) // no such message
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	if files := blobFiles(t, mem); len(files) != 2 {
		t.Fatalf("blob files %v, want 2 (seq 1's new one, seq 3's)", files)
	}
	commitTo(t, s, m, true, store.Op{Kind: store.OpDeleteEntity, EntityID: 1})
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 7, Data: bigData(3, 5<<10)}) // deleted entity
	commitTo(t, s, m, true)
	if files := blobFiles(t, mem); len(files) != 0 {
		t.Fatalf("blob files after deleting the entity: %v", files)
	}
}

// TestBlobSharedInBatch: ops of one batch whose Data is the same slice
// (a topic's fan-out) share one blob, which lives until the last
// reference goes.
func TestBlobSharedInBatch(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	m := storetest.NewState()
	data := bigData(5, 64<<10)
	b := &store.Batch{}
	for id := uint64(1); id <= 3; id++ {
		b.Add(store.Op{Kind: store.OpPutEntity, EntityID: id, Name: fmt.Sprint(id)})
		b.Add(store.Op{Kind: store.OpAppend, EntityID: id, Seq: 1, Data: data})
	}
	commitTo(t, s, m, true, b.Ops...)
	if files := blobFiles(t, mem); len(files) != 1 {
		t.Fatalf("blob files %v, want one shared", files)
	}
	commitTo(t, s, m, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1}, store.Op{Kind: store.OpDeleteEntity, EntityID: 2})
	if files := blobFiles(t, mem); len(files) != 1 {
		t.Fatalf("blob files %v, want the one still referenced", files)
	}
	s.Close()
	s = mustOpen(t, blobOpts(mem))
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	commitTo(t, s, m, true, store.Op{Kind: store.OpRemove, EntityID: 3, Seq: 1})
	if files := blobFiles(t, mem); len(files) != 0 {
		t.Fatalf("blob files %v after the last reference went", files)
	}
	s.Close()
}

// TestBlobOrphansRemovedOnOpen: blob files no record refers to (a crash
// between the blob write and the log record) and spools are deleted by
// Open, and new ids never reuse an existing file's.
func TestBlobOrphansRemovedOnOpen(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	m := storetest.NewState()
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: bigData(1, 2<<10)})
	s.Close()
	for _, id := range []uint32{7, 3} {
		f, err := mem.Create(blobName("/db/"+blobDirName, id))
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("half a blob"), 0)
		f.Close()
	}
	// And a message that was arriving (a spool) when the broker stopped.
	f, err := mem.Create("/db/" + blobDirName + "/0000000001" + spoolSuffix)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("half a message"), 0)
	f.Close()
	s = mustOpen(t, blobOpts(mem))
	defer s.Close()
	if files := blobFiles(t, mem); len(files) != 1 {
		t.Fatalf("blob files %v, want the referenced one only", files)
	}
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	// A spool of this store works and goes when closed.
	sp, err := s.NewSpool()
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Write([]byte("spooled")); err != nil || sp.Size() != 7 || len(blobFiles(t, mem)) != 2 {
		t.Fatalf("spool: %v, %d bytes", err, sp.Size())
	}
	sp.Close()
	if files := blobFiles(t, mem); len(files) != 1 {
		t.Fatalf("blob files %v after closing the spool", files)
	}
	if id := s.nextBlob.Load(); id < 7 {
		t.Fatalf("next blob id %d would reuse an orphan's", id+1)
	}
}

// TestBlobCorruption: a blob whose bytes changed is a clear
// store.ErrCorrupt on read; one missing or cut short at Open is
// corruption, which Salvage gets past by dropping its message.
func TestBlobCorruption(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	m := storetest.NewState()
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: bigData(1, 2<<10)},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 2, Data: bigData(2, 2<<10)})
	files := blobFiles(t, mem)
	patch(t, mem, "/db/"+blobDirName+"/"+files[0], 100, []byte("flipped"))
	if _, err := s.ReadData(1, 1); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("ReadData of a damaged blob: %v", err)
	}
	if _, errs := s.ReadDataBatch([]store.DataRef{{EntityID: 1, Seq: 1}}); !errors.Is(errs[0], store.ErrCorrupt) {
		t.Fatalf("ReadDataBatch of a damaged blob: %v", errs[0])
	}
	if got, err := s.ReadData(1, 2); err != nil || !bytes.Equal(got, bigData(2, 2<<10)) {
		t.Fatalf("the other blob: %v", err)
	}
	s.Close()

	f, _ := mem.OpenReadWrite("/db/" + blobDirName + "/" + files[0])
	f.Truncate(1000)
	f.Close()
	if _, err := Open(blobOpts(mem)); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "the log says") {
		t.Fatalf("Open with a short blob: %v", err)
	}
	mem.Remove("/db/" + blobDirName + "/" + files[0])
	if _, err := Open(blobOpts(mem)); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Open with a missing blob: %v", err)
	}
	o := blobOpts(mem)
	o.Salvage = true
	s = mustOpen(t, o)
	defer s.Close()
	m.Apply(&store.Batch{Ops: []store.Op{{Kind: store.OpRemove, EntityID: 1, Seq: 1}}})
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
}

// TestBlobRefusedCommit: a commit refused for a full disk while its blob
// is written leaves no blob file behind, and the store goes on.
func TestBlobRefusedCommit(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	defer s.Close()
	m := storetest.NewState()
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"})
	mem.SetCapacity(s.Stats().DiskBytes + 64<<10)
	err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: bigData(1, 1<<20)}}}, true)
	if !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("commit on a full disk: %v", err)
	}
	if files := blobFiles(t, mem); len(files) != 0 {
		t.Fatalf("blob files after a refused commit: %v", files)
	}
	mem.SetCapacity(0)
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: bigData(1, 1<<20)})
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
}

// checkBlobFiles checks that the blob files of an open store are exactly
// the ones its index refers to.
func checkBlobFiles(t *testing.T, s *Store) {
	t.Helper()
	names, err := s.fs.ReadDir(s.blobDir())
	if err != nil {
		t.Fatal(err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(names) != len(s.mu.blobs) {
		t.Fatalf("%d blob files, %d referenced", len(names), len(s.mu.blobs))
	}
	for _, n := range names {
		v, _ := parseName(n, blobSuffix, 32)
		if s.mu.blobs[uint32(v)].refs == 0 {
			t.Fatalf("blob file %s not referenced", n)
		}
	}
}

// TestCrashWithBlobs runs the random crash workload with most Data in
// blob files and crashes at random points and before every blob file
// operation (seed 3 with the background pass running): each image
// reopens to a state after a prefix of the batches that includes every
// durable one, with exactly the referenced blobs.
func TestCrashWithBlobs(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		background := seed == 3 // checkpoints, compaction and blob sweeps on their own schedule
		t.Run(fmt.Sprintf("seed%d/background=%v", seed, background), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			var mu sync.Mutex
			var blobOps int
			ws, images, opts := runCrashWorkload(t, seed, 3, 120, func(n int64, op vfs.Op) bool {
				mu.Lock()
				defer mu.Unlock()
				if strings.Contains(op.Path, "/"+blobDirName) {
					blobOps++
					return rng.Intn(3) == 0
				}
				return rng.Intn(12) == 0
			}, func(o *Options) {
				o.BlobThreshold = 150
				if background {
					o.BackgroundInterval = time.Millisecond
					o.CheckpointInterval = 3 * time.Millisecond
					o.CompactRate = 1 << 30
					o.CompactLiveRatio = 0.5
				}
			})
			if blobOps == 0 {
				t.Fatal("no blob file operations")
			}
			for _, img := range images {
				checkImage(t, ws, img, opts)
				o := opts
				o.FS = img.fs
				s, err := Open(o)
				if err != nil {
					t.Fatal(err)
				}
				checkBlobFiles(t, s)
				s.Close()
			}
			t.Logf("%d crash points checked, %d blob file operations", len(images), blobOps)
		})
	}
}

// TestBlobOpenData: OpenData reads a blob a piece at a time, checks its
// CRC at the end, and keeps working after the message is removed and its
// file deleted; Data in the log comes back whole.
func TestBlobOpenData(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	defer s.Close()
	m := storetest.NewState()
	data := bigData(3, 300<<10+17)
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: data},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 2, Data: []byte("small")},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 3, Data: bigData(4, 4<<10)})
	readAll := func(r store.DataReader) ([]byte, error) {
		var out []byte
		buf := make([]byte, 65000)
		for off := int64(0); off < r.Size(); {
			n, err := r.ReadAt(buf, off)
			out = append(out, buf[:n]...)
			off += int64(n)
			if err != nil && !(err == io.EOF && off == r.Size()) {
				return out, err
			}
		}
		return out, nil
	}
	r, err := store.OpenData(s, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	commitTo(t, s, m, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1})
	commitTo(t, s, m, true)
	if len(blobFiles(t, mem)) != 1 {
		t.Fatal("the removed message's blob is still there")
	}
	if got, err := readAll(r); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("streamed read after removal: %v (equal %v)", err, bytes.Equal(got, data))
	}
	r.Close()
	r.Close()
	if r, err := store.OpenData(s, 1, 2); err != nil || r.Size() != 5 {
		t.Fatalf("OpenData of Data in the log: %v", err)
	}
	if _, err := store.OpenData(s, 1, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("OpenData of a removed message: %v", err)
	}
	patch(t, mem, "/db/"+blobDirName+"/"+blobFiles(t, mem)[0], 10, []byte("x"))
	r, err = store.OpenData(s, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := readAll(r); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("streamed read of a damaged blob: %v", err)
	}
}

// TestBlobTail: an op whose Data ends in a Tail (a reader, not memory)
// is written to a blob piece by piece; with blobs off it goes into the
// log whole.
func TestBlobTail(t *testing.T) {
	for _, threshold := range []int{1 << 10, -1} {
		t.Run(fmt.Sprint(threshold), func(t *testing.T) {
			mem := vfs.NewMem()
			o := blobOpts(mem)
			o.BlobThreshold = threshold
			s := mustOpen(t, o)
			defer s.Close()
			head, body := []byte("head"), bigData(9, 3<<20+5)
			b := &store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
				{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: head, Tail: store.BytesReader(body)}}}
			if err := s.Commit(b, true); err != nil {
				t.Fatal(err)
			}
			got, err := s.ReadData(1, 1)
			if err != nil || !bytes.Equal(got, append(head, body...)) {
				t.Fatalf("ReadData: %v (%d bytes)", err, len(got))
			}
			if want := map[int]int{1 << 10: 1, -1: 0}[threshold]; len(blobFiles(t, mem)) != want {
				t.Fatalf("%d blob files, want %d", len(blobFiles(t, mem)), want)
			}
		})
	}
}

// TestBlobReplacedUnderReader: a reader that looked a message up before
// its Data was replaced (and the old blob deleted) reads the new Data,
// not an error; one whose message went reads store.ErrNotFound.
func TestBlobReplacedUnderReader(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	defer s.Close()
	m := storetest.NewState()
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: bigData(1, 4<<10)})
	s.mu.RLock()
	_, old, err := s.pinDataLocked(1, 1)
	s.mu.RUnlock()
	if err != errIsBlob {
		t.Fatal(err)
	}
	commitTo(t, s, m, true, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: bigData(2, 4<<10)})
	commitTo(t, s, m, true)
	if got, err := s.readBlobData(1, 1, old); err != nil || !bytes.Equal(got, bigData(2, 4<<10)) {
		t.Fatalf("read after the Data was replaced: %v", err)
	}
	s.mu.RLock()
	_, old, _ = s.pinDataLocked(1, 1)
	s.mu.RUnlock()
	commitTo(t, s, m, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1})
	commitTo(t, s, m, true)
	if _, err := s.readBlobData(1, 1, old); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("read after the message went: %v", err)
	}
}

// TestBlobSweptByMaintenance: a blob whose removal was committed without
// a sync goes with the next background pass, which syncs the log for it.
func TestBlobSweptByMaintenance(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, blobOpts(mem))
	defer s.Close()
	m := storetest.NewState()
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: bigData(1, 4<<10)})
	commitTo(t, s, m, false, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1})
	if len(blobFiles(t, mem)) != 1 {
		t.Fatal("the blob went before its removal was durable")
	}
	if err := s.Compact(); err != nil { // the background pass, now
		t.Fatal(err)
	}
	if files := blobFiles(t, mem); len(files) != 0 {
		t.Fatalf("blob files %v after the background pass", files)
	}
}
