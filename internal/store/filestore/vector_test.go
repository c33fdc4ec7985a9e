package filestore

import (
	"bytes"
	"runtime"
	"sync"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

// vecData is message seq's Data: large (written from the committer's
// buffer) for every third, small (gathered) otherwise.
func vecData(seq uint64) []byte {
	n := 100 + int(seq)
	if seq%3 == 0 {
		n = vecMin + int(seq)*97
	}
	return bytes.Repeat([]byte{byte(seq), byte(seq >> 8)}, n/2)
}

// Groups that mix large records (written from their own buffers with one
// vectored write) and small ones (gathered into the writer's buffer), on
// the OS file system and across segment changes, read back whole, live
// and after a reopen.
func TestVectoredGroupsReadBack(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentSize: 256 << 10, BackgroundInterval: -1}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}, true); err != nil {
		t.Fatal(err)
	}
	const committers, each = 16, 12
	var wg sync.WaitGroup
	errs := make(chan error, committers)
	for c := range committers {
		wg.Go(func() {
			for i := range each {
				seq := uint64(c*each + i + 1)
				b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: seq, Meta: []byte{byte(seq)}, Data: vecData(seq)}}}
				if err := s.Commit(b, i%2 == 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(s *Store, when string) {
		t.Helper()
		for seq := uint64(1); seq <= committers*each; seq++ {
			got, err := s.ReadData(1, seq)
			if err != nil {
				t.Fatalf("%s: ReadData(%d): %v", when, seq, err)
			}
			if !bytes.Equal(got, vecData(seq)) {
				t.Fatalf("%s: message %d reads back wrong (%d bytes, want %d)", when, seq, len(got), len(vecData(seq)))
			}
		}
	}
	check(s, "live")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Recover(store.Visitor{}); err != nil {
		t.Fatal(err)
	}
	check(s, "after reopening")
}

// A large record's buffer is kept for the next large commit, whatever
// the garbage collector does to the request pool meanwhile.
func TestLargeRecordBufferReused(t *testing.T) {
	r := getRequest()
	r.rec = make([]byte, 0, 2*vecMin)
	putRequest(r)
	for range 2 {
		runtime.GC() // empties requestPool
	}
	seen := false
	var held []*request
	for range cap(largeRecs) + 1 {
		r := getRequest()
		held = append(held, r)
		if cap(r.rec) == 2*vecMin {
			seen = true
		}
	}
	for _, r := range held {
		putRequest(r)
	}
	if !seen {
		t.Fatal("a large record buffer was not handed out again after a collection")
	}
	r = getRequest()
	r.rec = make([]byte, 0, maxPooledRec+1)
	putRequest(r)
	for range cap(largeRecs) + 1 {
		r := getRequest()
		if cap(r.rec) > maxPooledRec {
			t.Fatal("a buffer over maxPooledRec was kept")
		}
		defer putRequest(r)
	}
}

// The kept record buffers never add up to more than largeRecBudget, however
// many large ones are given back.
func TestLargeRecordBufferBudget(t *testing.T) {
	var held []*request
	for range cap(largeRecs) {
		r := getRequest()
		r.rec = make([]byte, 0, maxPooledRec)
		held = append(held, r)
	}
	for _, r := range held {
		putRequest(r)
	}
	if n := largeRecBytes.Load(); n > largeRecBudget {
		t.Fatalf("%d bytes of record buffers kept, budget %d", n, largeRecBudget)
	}
	kept := 0
	for range cap(largeRecs) {
		r := getRequest()
		if cap(r.rec) == maxPooledRec {
			kept++
		}
		defer putRequest(r)
	}
	if want := int(largeRecBudget / maxPooledRec); kept > want || kept == 0 {
		t.Fatalf("%d buffers of %d bytes kept, want 1..%d", kept, maxPooledRec, want)
	}
}

// A record whose large Data are left as holes is, once the holes are
// filled in, byte for byte the record encoded with copies.
func TestHolesMatchCopies(t *testing.T) {
	b := &store.Batch{Ops: []store.Op{
		{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: []byte("m"), Data: vecData(3)},
		{Kind: store.OpAppend, EntityID: 1, Seq: 2, Data: vecData(2)},
		{Kind: store.OpRewrite, EntityID: 1, Seq: 1, Meta: []byte("mm"), Data: vecData(6)},
		{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: vecData(9)},
		{Kind: store.OpAppend, EntityID: 1, Seq: 3, Data: vecData(12)}, // last: no bytes after the hole
	}}
	want, err := encodeBatch(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	var holes []hole
	got, err := encodeBatchBlobs(bytes.Repeat([]byte{0xee}, 7)[:0], b, nil, &holes)
	if err != nil {
		t.Fatal(err)
	}
	if len(holes) != 3 {
		t.Fatalf("%d holes, want 3 (the large OpAppend and OpRewrite Data)", len(holes))
	}
	for _, h := range holes {
		if bytes.Equal(got[h.at:h.at+len(h.data)], h.data) {
			t.Fatal("a hole's Data was copied")
		}
		copy(got[h.at:], h.data)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the record with its holes filled differs from the copied one")
	}
}

// Batches of several large and small Data, committed with and without
// sync, read back whole on the OS file system (the holes written as
// iovecs of their own) and on Mem (copied into the writer's buffer),
// live and after a reopen, though each committer overwrites its Data as
// soon as Commit returns.
func TestHoledBatchesReadBack(t *testing.T) {
	for _, fs := range []string{"os", "mem"} {
		t.Run(fs, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 256 << 10, BackgroundInterval: -1}
			if fs == "mem" {
				opts = memOpts(vfs.NewMem())
				opts.SegmentSize = 256 << 10
			}
			s := mustOpen(t, opts)
			if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}, true); err != nil {
				t.Fatal(err)
			}
			const committers, each = 8, 8
			var wg sync.WaitGroup
			errs := make(chan error, committers)
			for c := range committers {
				wg.Go(func() {
					for i := range each {
						first := uint64(3*(c*each+i) + 1)
						var b store.Batch
						for seq := first; seq < first+3; seq++ {
							b.Add(store.Op{Kind: store.OpAppend, EntityID: 1, Seq: seq, Data: vecData(seq)})
						}
						if err := s.Commit(&b, i%2 == 0); err != nil {
							errs <- err
							return
						}
						for _, op := range b.Ops {
							clear(op.Data) // the caller's buffer is its own again
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			check := func(s *Store, when string) {
				t.Helper()
				for seq := uint64(1); seq <= 3*committers*each; seq++ {
					got, err := s.ReadData(1, seq)
					if err != nil {
						t.Fatalf("%s: ReadData(%d): %v", when, seq, err)
					}
					if !bytes.Equal(got, vecData(seq)) {
						t.Fatalf("%s: message %d reads back wrong", when, seq)
					}
				}
			}
			check(s, "live")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, opts)
			defer s.Close()
			if err := s.Recover(store.Visitor{}); err != nil {
				t.Fatal(err)
			}
			check(s, "after reopening")
		})
	}
}
