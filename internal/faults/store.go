package faults

import (
	"fmt"
	"slices"
	"syscall"

	"github.com/busbarmq/busbar/internal/store"
)

// WrapStore returns st with store-error faults injected into its synced
// commits: a commit that a client waits on (sync) and that writes
// messages or values of a matching entity fails, before st sees it, with
// an I/O error (store.ErrFailed), which the broker reports as it reports
// a failing disk. Background commits (lock expiry, sync=false) and
// entity changes are never failed. st itself is not stopped: the next
// commit goes through. With s nil, st is returned as it is.
func WrapStore(st store.Store, s *Set) store.Store {
	if s == nil {
		return st
	}
	return &faultyStore{Store: st, set: s}
}

type faultyStore struct {
	store.Store
	set *Set
}

var _ store.DiskChecker = (*faultyStore)(nil)

func (f *faultyStore) Commit(b *store.Batch, sync bool) error {
	if sync && f.set.Armed(OpStore) {
		var ids []uint64
		for i := range b.Ops {
			switch b.Ops[i].Kind {
			case store.OpAppend, store.OpSetMeta, store.OpRewrite, store.OpRemove, store.OpPutValue, store.OpDeleteValue:
				if !slices.Contains(ids, b.Ops[i].EntityID) {
					ids = append(ids, b.Ops[i].EntityID)
				}
			}
		}
		if len(ids) > 0 {
			if flt := f.set.Take(Point{Op: OpStore, StoreIDs: ids}); flt != nil {
				return fmt.Errorf("%w: %s: %w", store.ErrFailed, flt.Err().Msg, syscall.EIO)
			}
		}
	}
	return f.Store.Commit(b, sync)
}

// CheckGrowth and Health pass the wrapped store's answers on (nil if it
// keeps no disk).
func (f *faultyStore) CheckGrowth() error {
	if d, ok := f.Store.(store.DiskChecker); ok {
		return d.CheckGrowth()
	}
	return nil
}

func (f *faultyStore) Health() error {
	if d, ok := f.Store.(store.DiskChecker); ok {
		return d.Health()
	}
	return nil
}

// Armed reports cheaply whether any rule waits for op (false for a nil
// Set), so that callers build a Point only when one may match.
func (s *Set) Armed(op Op) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.armed[op] > 0
}

// OpenData passes the wrapped store's streaming reads on.
func (f *faultyStore) OpenData(entityID, seq uint64) (store.DataReader, error) {
	return store.OpenData(f.Store, entityID, seq)
}

// NewSpool passes the wrapped store's spools on.
func (f *faultyStore) NewSpool() (store.Spool, error) {
	if sp, ok := f.Store.(store.Spooler); ok {
		return sp.NewSpool()
	}
	return nil, store.ErrNoSpools
}
