package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/busbarmq/busbar/internal/vfs"
)

// window reads a file sequentially through a reusable buffer, so recovery
// never holds a whole segment or checkpoint in memory.
type window struct {
	f     vfs.File
	name  string
	size  int64
	buf   []byte
	start int64 // file offset of buf[0]
}

const windowSize = 1 << 20

var zeros = make([]byte, windowSize)

// get returns the file's bytes [off, off+n), which must lie inside the
// file. The slice is valid until the next call.
func (w *window) get(off int64, n int64) ([]byte, error) {
	if off >= w.start && off+n <= w.start+int64(len(w.buf)) {
		return w.buf[off-w.start : off-w.start+n], nil
	}
	want := min(max(n, windowSize), w.size-off)
	if int64(cap(w.buf)) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	if k, err := w.f.ReadAt(w.buf, off); err != nil && !(errors.Is(err, io.EOF) && int64(k) == want) {
		w.buf = w.buf[:0]
		return nil, fmt.Errorf("filestore: read %s: %w", w.name, err)
	}
	w.start = off
	return w.buf[:n], nil
}

// allZero reports whether the file is all zero bytes from off to its end.
func (w *window) allZero(off int64) (bool, error) {
	for off < w.size {
		n := min(windowSize, w.size-off)
		b, err := w.get(off, n)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(b, zeros[:n]) {
			return false, nil
		}
		off += n
	}
	return true, nil
}
