//go:build linux && (amd64 || arm64)

package vfs

import (
	"os"
	"syscall"
)

// DropCache implements CacheDropper (fadvise64(2); on these architectures
// it takes the offset and length as whole registers).
func (f *osFile) DropCache(off, n int64) error {
	const dontNeed = 4 // POSIX_FADV_DONTNEED
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(f.fd), uintptr(off), uintptr(n), dontNeed, 0, 0); e != 0 {
		return &os.PathError{Op: "fadvise", Path: f.Name(), Err: e}
	}
	return nil
}
