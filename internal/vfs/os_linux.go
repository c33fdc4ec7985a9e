//go:build linux

package vfs

import (
	"os"
	"syscall"
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
