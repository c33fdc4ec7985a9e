package filestore

import (
	"fmt"
	"math"
	"time"

	"github.com/busbarmq/busbar/internal/store"
)

// maintainLoop is the background goroutine: every BackgroundInterval it
// forward-copies stragglers (rate-limited), checkpoints when that pays and
// deletes segments nobody needs. Close stops it before the writer.
func (s *Store) maintainLoop() {
	defer close(s.maintDone)
	t := time.NewTicker(s.opts.BackgroundInterval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-s.stopMaint:
			return
		case <-t.C:
		}
		s.maintMu.Lock()
		err := s.maintain(false)
		s.maintMu.Unlock()
		if err != nil && err.Error() != lastErr {
			s.log.Error("background maintenance", "err", err)
		}
		if err != nil {
			lastErr = err.Error()
		} else {
			lastErr = ""
		}
	}
}

// Compact runs a full reclamation pass now: it forward-copies the live
// messages of every sealed segment that is at most CompactLiveRatio live,
// writes a checkpoint and deletes every segment that is no longer needed.
func (s *Store) Compact() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	return s.maintain(true)
}

// Checkpoint writes a checkpoint now (if anything changed since the last)
// and deletes the segments it makes unnecessary.
func (s *Store) Checkpoint() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	return s.checkpoint()
}

// newestSealedGrace is how long the newest sealed segment is spared from
// forward-copying.
const newestSealedGrace = 10 * time.Second

// maintain is one pass. maintMu must be held.
func (s *Store) maintain(full bool) error {
	if err := s.failure(); err != nil {
		return err
	}
	if s.nDeadBlobs.Load() > 0 {
		// Dead blobs wait for their removal to be durable: make it so,
		// rather than wait for the next synced commit.
		if err := s.syncLog(); err != nil {
			return err
		}
		s.sweepBlobs()
	}
	now := time.Now()
	budget := int64(math.MaxInt64)
	if !full {
		interval := s.opts.BackgroundInterval
		if interval <= 0 {
			interval = time.Second
		}
		elapsed := now.Sub(s.lastTick)
		if s.lastTick.IsZero() || elapsed > 2*interval {
			elapsed = interval
		}
		budget = max(1, int64(float64(s.opts.CompactRate)*elapsed.Seconds()))
	}
	s.lastTick = now
	if err := s.forwardCopy(full, budget); err != nil {
		return err
	}

	s.mu.RLock()
	changed := s.mu.applied != s.mu.ckptLSN
	var waiting int64 // bytes a checkpoint would let us delete
	for id, seg := range s.mu.segs {
		if seg != s.mu.active && seg.live == 0 && (seg.ckptRefs > 0 || id >= s.mu.ckpt.seg) {
			waiting += seg.diskSize()
		}
	}
	ix := s.mu.ix
	estimate := int64(ix.nmsgs)*24 + ix.metaBytes + int64(ix.nvalues)*64 + int64(len(ix.entities))*64
	sinceCkpt := now.Sub(s.mu.ckptTime)
	grown := s.mu.logWritten - s.mu.ckptLogEnd
	s.mu.RUnlock()

	need := changed && (full ||
		(s.opts.CheckpointInterval > 0 && sinceCkpt >= s.opts.CheckpointInterval) ||
		waiting >= max(s.opts.SegmentSize, 2*estimate) ||
		grown >= max(8*s.opts.SegmentSize, 256<<20))
	if need {
		return s.checkpoint() // deletes segments too
	}
	s.dropIdleRecycled(now)
	return s.deleteSegments()
}

// forwardCopy moves the live messages out of sealed, mostly dead segments
// into the head of the log, through the writer (as unsynced batches: the
// next checkpoint syncs them before the old segment can go). full also
// considers the newest sealed segment and ignores the budget.
func (s *Store) forwardCopy(full bool, budget int64) error {
	now := time.Now()
	s.mu.RLock()
	cands := make(map[uint32]bool)
	activeID := s.mu.active.id
	for id, seg := range s.mu.segs {
		if seg == s.mu.active || seg.live == 0 {
			continue
		}
		// Leave the newest sealed segment alone for a while: its messages
		// are the most likely to be settled soon anyway.
		if !full && id+1 >= activeID && now.Sub(s.mu.sealedAt) < newestSealedGrace {
			continue
		}
		if float64(seg.liveBytes) <= s.opts.CompactLiveRatio*float64(seg.size) {
			cands[id] = true
		}
	}
	s.mu.RUnlock()
	if len(cands) == 0 {
		return nil
	}
	snap, _, _ := s.snapshot(false)
	var (
		batch []move
		bytes int
		moved int
	)
	submit := func() error {
		if len(batch) == 0 {
			return nil
		}
		r := getRequest()
		r.rec = encodeMoves(r.rec[:0], batch)
		err := s.submit(r)
		putRequest(r)
		moved += len(batch)
		clear(batch)
		batch, bytes = batch[:0], 0
		return err
	}
	for i := range snap.entities {
		e := &snap.entities[i]
		for _, c := range e.chunks {
			for j := range c.ents {
				ent := c.ents[j]
				if !cands[ent.seg] {
					continue
				}
				if budget <= 0 {
					return submit()
				}
				s.mu.RLock()
				seg := s.mu.segs[ent.seg]
				if seg != nil {
					seg.refs.Add(1)
				}
				s.mu.RUnlock()
				if seg == nil {
					continue
				}
				var data []byte
				var err error
				if ent.size > 0 {
					data, err = readData(seg, ent)
				}
				seg.release()
				if err != nil {
					return fmt.Errorf("compaction of message %d/%d: %w", e.id, ent.seq, err)
				}
				batch = append(batch, move{entity: e.id, seq: ent.seq, fromSeg: ent.seg, fromOff: ent.off, crc: ent.crc, data: data})
				bytes += len(data) + 32
				budget -= int64(len(data)) + 32
				if bytes >= 1<<20 {
					if err := submit(); err != nil {
						return err
					}
				}
			}
		}
	}
	if err := submit(); err != nil {
		return err
	}
	if moved > 0 {
		s.log.Debug("forward-copied live messages", "messages", moved, "segments", len(cands))
	}
	return nil
}
