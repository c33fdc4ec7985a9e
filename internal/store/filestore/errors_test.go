package filestore

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/storetest"
	"github.com/busbarmq/busbar/internal/vfs"
)

func TestIOErrorFailsTheStore(t *testing.T) {
	for _, kind := range []vfs.OpKind{vfs.OpSync, vfs.OpWrite} {
		t.Run(kind.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			var armed atomic.Bool
			fs := vfs.WithErrors(mem, vfs.FailOn(kind, nil, &armed))
			s := mustOpen(t, memOpts(fs))
			want := fill(t, s, 1, 20, true)
			armed.Store(true)
			b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: 100, Data: []byte("x")}}}
			err := s.Commit(b, true)
			if !errors.Is(err, vfs.ErrInjected) || !errors.Is(err, store.ErrFailed) {
				t.Fatalf("Commit: %v, want the injected error and ErrFailed", err)
			}
			if err := s.Health(); !errors.Is(err, store.ErrFailed) {
				t.Fatalf("Health: %v, want ErrFailed", err)
			}
			armed.Store(false)
			// The store stays failed: fsync errors cannot be retried.
			if err := s.Commit(b, true); !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("Commit after failure: %v", err)
			}
			if err := s.Sync(); !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("Sync after failure: %v", err)
			}
			if err := s.Close(); !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("Close after failure: %v", err)
			}
			// Power loss, reopen: every acknowledged batch is there.
			s = mustOpen(t, memOpts(mem.CrashClone(vfs.CrashOptions{})))
			got := storetest.MustDump(t, s)
			delete(got.Entities[1].Msgs, 100) // may or may not have made it
			got.Entities[1].LastSeq = want.Entities[1].LastSeq
			if d := storetest.Diff(want, got); d != "" {
				t.Fatal(d)
			}
			s.Close()
		})
	}
}

func TestCheckpointErrorIsNotFatal(t *testing.T) {
	mem := vfs.NewMem()
	var armed atomic.Bool
	fs := vfs.WithErrors(mem, vfs.FailOn(vfs.OpRename, nil, &armed))
	s := mustOpen(t, memOpts(fs))
	want := fill(t, s, 1, 20, true)
	armed.Store(true)
	if err := s.Checkpoint(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Checkpoint: %v", err)
	}
	// Commits go on.
	more := fill(t, s, 21, 5, true)
	for seq, m := range more.Entities[1].Msgs {
		want.Entities[1].Msgs[seq] = m
	}
	want.Entities[1].LastSeq = 25
	// Its checkpoint fails too, but the log is synced: Close succeeds.
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	armed.Store(false)
	s = mustOpen(t, memOpts(mem.CrashClone(vfs.CrashOptions{})))
	defer s.Close()
	if d := storetest.Diff(want, storetest.MustDump(t, s)); d != "" {
		t.Fatal(d)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}
