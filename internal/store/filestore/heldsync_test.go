package filestore

import (
	"runtime"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// TestHeldSyncsDecision: syncs hold the processor while there is more
// than one and the held ones stay under the limit; one that takes the
// limit or more turns them off for heldSyncPause; a negative limit never.
func TestHeldSyncsDecision(t *testing.T) {
	t0 := time.Unix(1000, 0)
	one, two, eight := func() int { return 1 }, func() int { return 2 }, func() int { return 8 }
	h := heldSyncs{limit: time.Millisecond}
	if !h.use(t0, two) || h.use(t0, one) {
		t.Fatal("want held syncs with 2 processors and not with 1")
	}
	h.took(t0, 999*time.Microsecond)
	if !h.use(t0, two) {
		t.Fatal("a sync under the limit turned held syncs off")
	}
	h.took(t0, time.Millisecond)
	if h.use(t0.Add(heldSyncPause-time.Nanosecond), two) {
		t.Fatal("held syncs back before the pause ended")
	}
	if !h.use(t0.Add(heldSyncPause), two) {
		t.Fatal("held syncs not back after the pause")
	}
	never := heldSyncs{limit: -1}
	if never.use(t0, eight) {
		t.Fatal("a negative limit held a sync")
	}
}

// TestHeldSyncsOnOS: on the OS file system the syncer holds its processor
// for its fdatasyncs when there are two or more and a limit is set, and
// not with one or without a limit (the default); the commits are there
// after a reopen either way.
func TestHeldSyncsOnOS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		name  string
		procs int
		limit time.Duration
		held  bool
	}{
		{"2 procs", 2, 5 * time.Millisecond, true},
		{"1 proc", 1, 5 * time.Millisecond, false},
		{"off by default", 2, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GOMAXPROCS(c.procs)
			opts := Options{Dir: t.TempDir(), FS: vfs.OS(), SegmentSize: 1 << 20, HeldSyncLimit: c.limit, BackgroundInterval: -1}
			s := mustOpen(t, opts)
			if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}, true); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i + 1), Data: []byte("m")}}}
				if err := s.Commit(b, true); err != nil {
					t.Fatal(err)
				}
			}
			st := s.LogStats()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if held := st.HeldSyncs > 0; held != c.held || st.HeldSyncs > st.Syncs {
				t.Fatalf("%d of %d syncs held; want held %v", st.HeldSyncs, st.Syncs, c.held)
			}
			s = mustOpen(t, opts)
			defer s.Close()
			if n := storetest.MustDump(t, s).Messages(); n != 20 {
				t.Fatalf("%d messages after reopen; want 20", n)
			}
		})
	}
}
