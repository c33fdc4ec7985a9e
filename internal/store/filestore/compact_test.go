package filestore

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// queueLoad appends n messages of size bytes to entity 1, then removes all
// but every keepEvery-th (the long-lived deferred or dead-lettered ones).
func queueLoad(t *testing.T, s *Store, n, size, keepEvery int) *storetest.State {
	t.Helper()
	m := storetest.NewState()
	appendQueue(t, s, m, n, size)
	drainQueue(t, s, m, n, keepEvery)
	return m
}

func commitTo(t *testing.T, s *Store, m *storetest.State, sync bool, ops ...store.Op) {
	t.Helper()
	b := &store.Batch{Ops: ops}
	if err := s.Commit(b, sync); err != nil {
		t.Fatal(err)
	}
	m.Apply(b)
}

func appendQueue(t *testing.T, s *Store, m *storetest.State, n, size int) {
	t.Helper()
	commitTo(t, s, m, true, store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"})
	data := make([]byte, size)
	for i := 1; i <= n; i++ {
		copy(data, fmt.Sprintf("message %d ", i))
		commitTo(t, s, m, i%10 == 0, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i), Meta: []byte(fmt.Sprint(i)), Data: data})
	}
}

func drainQueue(t *testing.T, s *Store, m *storetest.State, n, keepEvery int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if keepEvery == 0 || i%keepEvery != 0 {
			commitTo(t, s, m, i%10 == 0, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: uint64(i)})
		}
	}
}

func (s *Store) segmentCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.mu.segs)
}

func TestCompactMovesStragglers(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 16 << 10
	s := mustOpen(t, opts)
	m := queueLoad(t, s, 2000, 200, 100) // 20 stragglers spread over ~30 segments
	before, peak := s.segmentCount(), s.Stats().DiskBytes
	if before < 20 {
		t.Fatalf("only %d segments", before)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	after := s.segmentCount()
	if after > 2 {
		t.Fatalf("%d segments before Compact, %d after; want at most 2", before, after)
	}
	if disk := s.Stats().DiskBytes; disk > peak/10 {
		t.Fatalf("disk %d bytes after Compact, peak %d", disk, peak)
	}
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
	s.Close()
	reopenHolds(t, opts, m, "after reopen")
}

// reopenHolds opens a store with opts and checks that it holds m.
func reopenHolds(t *testing.T, opts Options, m *storetest.State, when string) {
	t.Helper()
	s := mustOpen(t, opts)
	defer s.Close()
	if d := storetest.Diff(m, storetest.MustDump(t, s)); d != "" {
		t.Fatalf("%s: %s", when, d)
	}
}

func TestBackgroundCompactionIsRateLimited(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 16 << 10
	opts.CompactRate = 1 // one message per pass
	s := mustOpen(t, opts)
	defer s.Close()
	queueLoad(t, s, 1000, 200, 100)
	moved := func() int {
		s.mu.RLock()
		defer s.mu.RUnlock()
		n := 0
		for _, c := range s.mu.ix.entities[1].chunks {
			for _, e := range c.ents {
				if e.seg == s.mu.active.id {
					n++
				}
			}
		}
		return n
	}
	s.maintMu.Lock()
	err := s.maintain(false)
	s.maintMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if n := moved(); n != 1 {
		t.Fatalf("one rate-limited pass moved %d messages, want 1", n)
	}
}

func TestBackgroundReclaimsAfterDrain(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentSize: 64 << 10, BackgroundInterval: 10 * time.Millisecond, CompactRate: 1 << 30}
	s := mustOpen(t, opts)
	defer s.Close()
	m := storetest.NewState()
	appendQueue(t, s, m, 5000, 1000) // 5 MB
	peak := s.Stats().DiskBytes
	t0 := time.Now()
	drainQueue(t, s, m, 5000, 500) // all but 10 stragglers
	t.Logf("drained in %v", time.Since(t0))
	deadline := time.Now().Add(20 * time.Second)
	for {
		disk := s.Stats().DiskBytes
		if disk < peak/10 {
			t.Logf("disk %d -> %d bytes (%d segments) %v after the drain", peak, disk, s.segmentCount(), time.Since(t0))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("disk still %d bytes (peak %d, %d segments)", disk, peak, s.segmentCount())
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := s.Stats()
	if st.Messages != 10 {
		t.Fatalf("%d messages", st.Messages)
	}
}

func TestReadDataDuringCompaction(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOpts(mem)
	opts.SegmentSize = 8 << 10
	s := mustOpen(t, opts)
	defer s.Close()
	m := queueLoad(t, s, 600, 150, 20)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				seq := uint64(20 * (1 + (i*7+r)%30))
				got, err := s.ReadData(1, seq)
				if err != nil || !bytes.Equal(got, m.Entities[1].Msgs[seq].Data) {
					errc <- fmt.Errorf("ReadData(1, %d) = %.20q, %v", seq, got, err)
					return
				}
			}
		}()
	}
	// Writers keep the log moving while compaction runs.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 300; i++ {
			b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: uint64(10000 + i), Data: make([]byte, 150)},
				{Kind: store.OpRemove, EntityID: 1, Seq: uint64(10000 + i)}}}
			if err := s.Commit(b, i%5 == 0); err != nil {
				errc <- err
				return
			}
		}
	}()
	for range 10 {
		if err := s.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}
