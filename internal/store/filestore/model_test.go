package filestore

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

// TestAgainstMemstore drives a filestore and a memstore with the same
// random batches and compares them after random reopens, compactions,
// checkpoints and clean crashes (everything synced first, so no batch may
// be lost).
func TestAgainstMemstore(t *testing.T) {
	for _, seed := range []int64{11, 12, 13, 14} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			mem := vfs.NewMem()
			opts := Options{Dir: "/db", FS: mem, SegmentSize: int64(4<<10) << rng.Intn(4), BackgroundInterval: -1}
			fs := mustOpen(t, opts)
			defer func() { fs.Close() }()
			model := memstore.New()
			defer model.Close()
			g := &storetest.Gen{Rng: rng, MaxData: 1 + rng.Intn(800)}
			state := storetest.NewState()
			compare := func(when string) {
				t.Helper()
				want := storetest.MustDump(t, model)
				if d := storetest.Diff(want, storetest.MustDump(t, fs)); d != "" {
					t.Fatalf("%s: filestore differs from memstore:\n%s", when, d)
				}
			}
			for i := range 600 {
				b := g.Batch(state, 8)
				sync := rng.Intn(2) == 0
				if err := fs.Commit(b, sync); err != nil {
					t.Fatal(err)
				}
				if err := model.Commit(b, sync); err != nil {
					t.Fatal(err)
				}
				state.Apply(b)
				switch p := rng.Intn(100); {
				case p < 3:
					if err := fs.Close(); err != nil {
						t.Fatal(err)
					}
					fs = mustOpen(t, opts)
					compare(fmt.Sprintf("batch %d, reopen", i))
				case p < 5:
					if err := fs.Sync(); err != nil {
						t.Fatal(err)
					}
					img := mem.CrashClone(vfs.CrashOptions{})
					fs.Close()
					mem = img
					opts.FS = mem
					fs = mustOpen(t, opts)
					compare(fmt.Sprintf("batch %d, crash after sync", i))
				case p < 8:
					if err := fs.Compact(); err != nil {
						t.Fatal(err)
					}
					compare(fmt.Sprintf("batch %d, compact", i))
				case p < 10:
					if err := fs.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
			}
			compare("end")
			st := fs.Stats()
			if want := model.Stats(); st.Messages != want.Messages || st.Entities != want.Entities ||
				st.Values != want.Values || st.DataBytes != want.DataBytes {
				t.Fatalf("Stats %+v, memstore %+v", st, want)
			}
		})
	}
}

var _ store.Store = (*memstore.Store)(nil)
