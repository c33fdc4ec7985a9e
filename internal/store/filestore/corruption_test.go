package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// fill commits n single-message batches to entity 1 (creating it) and
// returns the model.
func fill(t *testing.T, s *Store, from, n int, sync bool) *storetest.State {
	t.Helper()
	m := storetest.NewState()
	b := &store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}
	if err := s.Commit(b, true); err != nil {
		t.Fatal(err)
	}
	m.Apply(b)
	for i := from; i < from+n; i++ {
		b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i), Meta: []byte(fmt.Sprint("meta", i)), Data: bytes.Repeat([]byte{byte(i)}, 100)}}}
		if err := s.Commit(b, sync); err != nil {
			t.Fatal(err)
		}
		m.Apply(b)
	}
	return m
}

func memOpts(fs vfs.FS) Options {
	return Options{Dir: "/db", FS: fs, SegmentSize: 4 << 10, BackgroundInterval: -1}
}

func mustOpen(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// patch overwrites bytes of a file in fs.
func patch(t *testing.T, fs vfs.FS, name string, off int64, b []byte) {
	t.Helper()
	f, err := fs.OpenReadWrite(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	f.Close()
}

func fileSize(t *testing.T, fs vfs.FS, name string) int64 {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, _ := f.Size()
	return n
}

func segFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.ReadDir("/db")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, segSuffix) {
			out = append(out, "/db/"+n)
		}
	}
	return out
}

func TestTornTailIsTruncated(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 64 << 10
	// Without preallocation the synced length is the file length, which
	// this test uses to cut. (The crash tests tear preallocated segments.)
	opts.NoPreallocate = true
	s := mustOpen(t, opts)
	want := fill(t, s, 10, 10, true)
	// Ten more records, never synced, all the same size.
	fill(t, s, 20, 10, false)
	seg := segFiles(t, mem)
	if len(seg) != 1 {
		t.Fatalf("segments: %v", seg)
	}
	last := seg[0]
	f, _ := mem.Open(last)
	liveSize, _ := f.Size()
	live := make([]byte, liveSize)
	f.ReadAt(live, 0)
	f.Close()
	synced := fileSize(t, mem.CrashClone(vfs.CrashOptions{}), last)
	recSize := (liveSize - synced) / 10
	if synced >= liveSize || (liveSize-synced)%10 != 0 {
		t.Fatalf("synced %d, live %d", synced, liveSize)
	}
	check := func(name string, img *vfs.Mem, wantExtra int, torn bool) {
		t.Helper()
		var logs bytes.Buffer
		opts := memOpts(img)
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		s2, err := Open(opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer s2.Close()
		got := storetest.MustDump(t, s2)
		w := want.Clone()
		for i := 20; i < 20+wantExtra; i++ {
			w.Apply(&store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i), Meta: []byte(fmt.Sprint("meta", i)), Data: bytes.Repeat([]byte{byte(i)}, 100)}}})
		}
		if d := storetest.Diff(w, got); d != "" {
			t.Fatalf("%s: %s", name, d)
		}
		if torn != strings.Contains(logs.String(), "truncating torn tail") {
			t.Fatalf("%s: torn=%v, log:\n%s", name, torn, logs.String())
		}
	}
	// Power loss after part of the unsynced bytes reached the disk.
	for cut := int64(0); cut <= liveSize-synced; cut += recSize/3 + 1 {
		img := mem.CrashClone(vfs.CrashOptions{})
		patch(t, img, last, synced, live[synced:synced+cut])
		check(fmt.Sprint("cut ", cut), img, int(cut/recSize), cut%recSize != 0)
	}
	// All unsynced bytes written but one sector garbled (out-of-order
	// writes): the records after the damage were never synced, so it is a
	// torn tail too, and they go with it.
	img := mem.CrashClone(vfs.CrashOptions{})
	damaged := bytes.Clone(live[synced:])
	damaged[recSize*4+50] ^= 0xff
	patch(t, img, last, synced, damaged)
	check("garbled", img, 4, true)
	s.Close()
}

// corruptMiddle flips a byte inside the first record of the first segment.
func TestCorruptionInTheMiddleIsRefused(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, memOpts(mem))
	fill(t, s, 1, 200, true) // several segments
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segFiles(t, mem)
	if len(segs) < 3 {
		t.Fatalf("want several segments, have %d", len(segs))
	}
	// Remove checkpoints so the whole log is replayed.
	names, _ := mem.ReadDir("/db")
	for _, n := range names {
		if strings.HasSuffix(n, ckptSuffix) {
			mem.Remove("/db/" + n)
		}
	}
	mem.SyncDir("/db")
	for _, tc := range []struct {
		name string
		file string
		off  int64
	}{
		// (Not the first record: it creates the entity, and without it
		// salvage would have nothing to keep.)
		{"first segment", segs[0], segHeaderSize + 600},
		{"first segment, elsewhere", segs[0], segHeaderSize + 900},
		{"middle segment", segs[1], segHeaderSize + 40},
		// In the last segment, but followed by records written after it was
		// synced: not a torn write.
		{"last segment, synced", segs[len(segs)-1], segHeaderSize + 3},
		{"segment header", segs[1], 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := mem.CrashClone(vfs.CrashOptions{})
			f, _ := img.Open(tc.file)
			var b [1]byte
			f.ReadAt(b[:], tc.off)
			f.Close()
			patch(t, img, tc.file, tc.off, []byte{b[0] ^ 0x55})

			_, err := Open(memOpts(img))
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), tc.file) || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error does not name the file and offset: %v", err)
			}
			t.Logf("refused: %v", err)

			var logs bytes.Buffer
			opts := memOpts(img)
			opts.Salvage = true
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			s, err := Open(opts)
			if err != nil {
				t.Fatalf("Open with Salvage: %v", err)
			}
			st := storetest.MustDump(t, s)
			if st.Messages() == 0 || st.Messages() >= 200 {
				t.Fatalf("salvaged %d messages, want some but not all", st.Messages())
			}
			if !strings.Contains(logs.String(), "salvage") {
				t.Fatalf("salvage logged nothing:\n%s", logs.String())
			}
			// Salvage wrote a checkpoint: the next plain open works.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, memOpts(img))
			if got := storetest.MustDump(t, s); storetest.Diff(st, got) != "" {
				t.Fatalf("after salvage and reopen:\n%s", storetest.Diff(st, got))
			}
			s.Close()
		})
	}
}

func TestCorruptCheckpoint(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, memOpts(mem))
	want := fill(t, s, 1, 50, true)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	more := fill(t, s, 51, 5, true)
	if err := s.Close(); err != nil { // writes a second checkpoint
		t.Fatal(err)
	}
	for _, m := range more.Entities[1].Msgs {
		_ = m
	}
	for seq, m := range more.Entities[1].Msgs {
		want.Entities[1].Msgs[seq] = m
	}
	want.Entities[1].LastSeq = 55
	var ckpts []string
	names, _ := mem.ReadDir("/db")
	for _, n := range names {
		if strings.HasSuffix(n, ckptSuffix) {
			ckpts = append(ckpts, "/db/"+n)
		}
	}
	if len(ckpts) != 1 {
		t.Fatalf("checkpoints: %v", ckpts)
	}
	patch(t, mem, ckpts[0], ckptHeaderSize+20, []byte{0xff, 0xfe})
	_, err := Open(memOpts(mem))
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), ckpts[0]) {
		t.Fatalf("Open with a corrupt checkpoint: %v", err)
	}
	// Salvage sets the checkpoint aside. The log before it is gone
	// (segments were deleted), so messages may be lost, but it opens.
	opts := memOpts(mem)
	opts.Salvage = true
	s, err = Open(opts)
	if err != nil {
		t.Fatalf("salvage: %v", err)
	}
	s.Close()
}

// A crash while a checkpoint is being written (the .tmp file exists,
// complete or not) falls back to the previous checkpoint and the log.
func TestCrashDuringCheckpointFallsBack(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, memOpts(mem))
	want := fill(t, s, 1, 30, true)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	more := fill(t, s, 31, 30, true)
	for seq, m := range more.Entities[1].Msgs {
		want.Entities[1].Msgs[seq] = m
	}
	want.Entities[1].LastSeq = 60
	// Write part of a newer checkpoint by hand, as a crash would leave it.
	f, _ := mem.Create("/db/" + fmt.Sprintf("%020d", 999) + ckptSuffix + tmpSuffix)
	f.WriteAt([]byte("BUSBARCK partial"), 0)
	f.Sync()
	f.Close()
	mem.SyncDir("/db")
	img := mem.CrashClone(vfs.CrashOptions{})
	s.Close()
	s2 := mustOpen(t, memOpts(img))
	defer s2.Close()
	if d := storetest.Diff(want, storetest.MustDump(t, s2)); d != "" {
		t.Fatal(d)
	}
	names, _ := img.ReadDir("/db")
	for _, n := range names {
		if strings.HasSuffix(n, ckptSuffix+tmpSuffix) {
			t.Fatalf("leftover %s", n)
		}
	}
}

func TestReadDataDetectsBitRot(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, memOpts(mem))
	defer s.Close()
	fill(t, s, 1, 3, true)
	s.mu.RLock()
	c, i, _ := s.mu.ix.entities[1].lookup(2)
	ent := c.ents[i]
	path := s.mu.segs[ent.seg].path
	s.mu.RUnlock()
	patch(t, mem, path, int64(ent.off)+10, []byte{0})
	_, err := s.ReadData(1, 2)
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("ReadData of a damaged message: %v", err)
	}
	if _, err := s.ReadData(1, 1); err != nil {
		t.Fatal(err)
	}
}

func TestSegmentWithTornHeaderIsRemoved(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, memOpts(mem))
	want := fill(t, s, 1, 5, true)
	s.Close()
	segs := segFiles(t, mem)
	last := segs[len(segs)-1]
	var id uint32
	fmt.Sscanf(last[len("/db/"):], "%d", &id)
	// A segment created just before a crash: half a header.
	next := segName("/db", id+1)
	f, _ := mem.Create(next)
	f.WriteAt(appendSegHeader(nil, id+1, 99)[:20], 0)
	f.Sync()
	f.Close()
	mem.SyncDir("/db")
	s = mustOpen(t, memOpts(mem))
	if d := storetest.Diff(want, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	fill(t, s, 6, 5, true)
	s.Close()
	s = mustOpen(t, memOpts(mem))
	if n := storetest.MustDump(t, s).Messages(); n != 10 {
		t.Fatalf("%d messages", n)
	}
	s.Close()
}

// TestReadDataBatchChecksEachMessage: a batch read fetches neighbouring
// messages with one read but checks each one's checksum — a damaged
// message fails alone, its neighbours are delivered.
func TestReadDataBatchChecksEachMessage(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, memOpts(mem)) // 4 KB segments: the three messages share one
	defer s.Close()
	ops := []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}
	for i, b := range []string{"a", "b", "c"} {
		ops = append(ops, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i + 1), Meta: []byte("m"), Data: bytes.Repeat([]byte(b), 300)})
	}
	if err := s.Commit(&store.Batch{Ops: ops}, true); err != nil {
		t.Fatal(err)
	}
	// Damage one byte of the second message's data in the live segment.
	f, err := mem.OpenReadWrite(segName("/db", s.mu.active.id))
	if err != nil {
		t.Fatal(err)
	}
	size, _ := f.Size()
	buf := make([]byte, size)
	f.ReadAt(buf, 0)
	at := bytes.Index(buf, bytes.Repeat([]byte("b"), 300))
	if at < 0 {
		t.Fatal("data not found in the segment")
	}
	f.WriteAt([]byte("X"), int64(at+150))
	f.Close()
	datas, errs := s.ReadDataBatch([]store.DataRef{{EntityID: 1, Seq: 1}, {EntityID: 1, Seq: 2}, {EntityID: 1, Seq: 3}})
	if !errors.Is(errs[1], store.ErrCorrupt) || datas[1] != nil {
		t.Fatalf("damaged message: %q, %v", datas[1], errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil || !bytes.Equal(datas[i], bytes.Repeat([]byte{"abc"[i]}, 300)) {
			t.Fatalf("neighbour %d: %.10q, %v", i, datas[i], errs[i])
		}
	}
}
