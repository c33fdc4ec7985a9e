//go:build linux

package vfs

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

func (f *osFile) Sync() error {
	for {
		err := syscall.Fdatasync(f.fd)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// Allocate implements Allocator with fallocate(2) (mode 0).
func (f *osFile) Allocate(off, n int64) error {
	for {
		err := syscall.Fallocate(f.fd, 0, off, n)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// StartWriteback implements Writebacker.
func (f *osFile) StartWriteback(off, n int64) error {
	if err := syscall.SyncFileRange(f.fd, off, n, 2 /* SYNC_FILE_RANGE_WRITE */); err != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: err}
	}
	return nil
}

// Space implements Spacer with statfs(2).
func (osFS) Space(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// maxIOV is the most buffers one pwritev(2) takes (IOV_MAX).
const maxIOV = 1024

// WritevAt implements VectorWriter with pwritev(2), going on after a
// short write until everything is written or a call fails.
func (f *osFile) WritevAt(bufs [][]byte, off int64) (int, error) {
	var iovs [maxIOV]syscall.Iovec
	total := 0
	for len(bufs) > 0 {
		n := 0
		for _, b := range bufs[:min(len(bufs), maxIOV)] {
			if len(b) > 0 {
				iovs[n].Base = &b[0]
				iovs[n].SetLen(len(b))
				n++
			}
		}
		if n == 0 {
			break
		}
		w, err := pwritev(f.fd, iovs[:n], off)
		if err == syscall.EINTR || err == syscall.EAGAIN {
			continue
		}
		if err != nil {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		if w == 0 {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: io.ErrShortWrite}
		}
		total += w
		off += int64(w)
		for w > 0 || (len(bufs) > 0 && len(bufs[0]) == 0) {
			if w < len(bufs[0]) {
				bufs[0] = bufs[0][w:]
				break
			}
			w -= len(bufs[0])
			bufs = bufs[1:]
		}
	}
	return total, nil
}

// pwritev is the system call, its offset split into the two words the
// kernel takes (the high one is 0 on 64-bit platforms).
func pwritev(fd int, iovs []syscall.Iovec, off int64) (int, error) {
	const halfLong = 16 << (^uintptr(0) >> 63) // half the bits of a uintptr
	n, _, errno := syscall.Syscall6(syscall.SYS_PWRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iovs[0])), uintptr(len(iovs)),
		uintptr(off), uintptr(uint64(off)>>halfLong>>halfLong), 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}
