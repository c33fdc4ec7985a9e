package filestore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

var _ store.DiskChecker = (*Store)(nil)

// spaceRefresh is how long a looked-up free space is reused.
const spaceRefresh = 250 * time.Millisecond

// Default low-disk watermark: the smaller of these.
const (
	defaultMinFreeBytes   = 1 << 30
	defaultMinFreePercent = 5
)

// spaceCache remembers the last statfs of the store's file system. It is
// read on every send (CheckGrowth), so reads take no lock.
type spaceCache struct {
	mu          sync.Mutex   // serialises lookups
	at          atomic.Int64 // time of the last lookup (Unix ns), 0 for none
	free, total atomic.Uint64
	err         atomic.Pointer[error]
}

// forget makes the next freeSpace look again.
func (c *spaceCache) forget() { c.at.Store(0) }

// freeSpace returns the file system's free and total bytes, looked up at
// most every spaceRefresh.
func (s *Store) freeSpace() (free, total uint64, err error) {
	c := &s.space
	now := time.Now().UnixNano()
	if at := c.at.Load(); at == 0 || now-at >= int64(spaceRefresh) {
		c.mu.Lock()
		if at := c.at.Load(); at == 0 || now-at >= int64(spaceRefresh) {
			f, t, err := vfs.Space(s.fs, s.opts.Dir)
			c.free.Store(f)
			c.total.Store(t)
			c.err.Store(&err)
			c.at.Store(now)
		}
		c.mu.Unlock()
	}
	if p := c.err.Load(); p != nil && *p != nil {
		return 0, 0, *p
	}
	return c.free.Load(), c.total.Load(), nil
}

// minFree is the low-disk watermark for a file system of total bytes; 0
// when there is none.
func (s *Store) minFree(total uint64) uint64 {
	b, p := s.opts.MinFreeBytes, s.opts.MinFreePercent
	if b < 0 || total == 0 {
		return 0
	}
	if b == 0 && p == 0 {
		b, p = defaultMinFreeBytes, defaultMinFreePercent
	}
	var w uint64
	if b > 0 {
		w = uint64(b)
	}
	if p > 0 {
		pw := uint64(float64(total) * p / 100)
		if w == 0 || pw < w {
			w = pw
		}
	}
	return w
}

// noSpaceError is the refusal for a write that failed with err (ENOSPC),
// with the free space as it is now.
func (s *Store) noSpaceError(err error) *store.NoSpaceError {
	s.space.forget() // look again: it changed
	free, total, _ := s.freeSpace()
	return &store.NoSpaceError{Free: free, Total: total, Err: err}
}

// CheckGrowth implements store.DiskChecker: it refuses new data while the
// free space is below the low-disk watermark (Options.MinFreeBytes,
// MinFreePercent) or the store is stopped.
func (s *Store) CheckGrowth() error {
	if err := s.failure(); err != nil {
		return err
	}
	free, total, err := s.freeSpace()
	if err != nil {
		return nil // unknown: the writes will tell
	}
	if w := s.minFree(total); free < w {
		return &store.NoSpaceError{Free: free, Total: total, MinFree: w}
	}
	return nil
}

// Health implements store.DiskChecker.
func (s *Store) Health() error {
	if err := s.failure(); err != nil {
		return err
	}
	if ns := s.noSpace.Load(); ns != nil {
		// Still full? A write will clear it; until one comes, look.
		free, total, err := s.freeSpace()
		if err != nil || free <= ns.Free || free < s.minFree(total) {
			return ns
		}
	}
	return s.CheckGrowth()
}
