//go:build unix && !linux

package vfs

import (
	"os"
	"syscall"
)

// Sync is fsync (os.File.Sync, which is fcntl(F_FULLFSYNC) on macOS: a
// plain fsync there does not flush the drive's cache). The other Unixes
// have no fdatasync worth the difference.
func (f *osFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return &os.PathError{Op: "fsync", Path: f.Name(), Err: err}
	}
	return nil
}

// Space implements Spacer with statfs(2).
func (osFS) Space(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), nil
}
