package filestore

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/busbarmq/busbar/internal/vfs"
)

// segment is one log file. Fields other than id, path and f are guarded by
// Store.mu.
type segment struct {
	id   uint32
	path string
	f    vfs.File

	firstLSN uint64
	// lastLSN is the LSN of the last record applied from this segment (0 if
	// none, or if the segment predates the checkpoint recovery started
	// from).
	lastLSN uint64
	size    int64 // bytes of valid log (header + records)
	alloc   int64 // file size when preallocated (zeros after size), else 0

	live      int64 // messages whose Data lives here
	liveBytes int64 // their Data bytes
	ckptRefs  int64 // messages the latest durable checkpoint locates here

	// refs counts users of f: 1 for the Store's segment map plus one per
	// ReadData or compaction read in flight. The last release closes f.
	refs atomic.Int32
}

func newSegment(id uint32, p string, f vfs.File) *segment {
	s := &segment{id: id, path: p, f: f}
	s.refs.Store(1)
	return s
}

// diskSize is the space the segment takes.
func (s *segment) diskSize() int64 { return max(s.size, s.alloc) }

func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		s.f.Close()
	}
}

const (
	segSuffix  = ".seg"
	ckptSuffix = ".ckpt"
	tmpSuffix  = ".tmp"
	// prepName is a preallocated segment file not yet in use.
	prepName = "next-segment.tmp"
	// recycleName is a deleted segment's file kept for the preparer.
	recycleName = "recycled-segment.tmp"
	// corruptSuffix marks a segment Salvage set aside.
	corruptSuffix = ".corrupt"
	lockName      = "LOCK"
)

func segName(dir string, id uint32) string {
	return path.Join(dir, fmt.Sprintf("%010d%s", id, segSuffix))
}

func ckptName(dir string, lsn uint64) string {
	return path.Join(dir, fmt.Sprintf("%020d%s", lsn, ckptSuffix))
}

// parseName recognises "<number><suffix>" file names.
func parseName(name, suffix string, bits int) (uint64, bool) {
	num, ok := strings.CutSuffix(name, suffix)
	if !ok || num == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(num, 10, bits)
	return v, err == nil
}
