package vfs

import (
	"errors"
	"io"
)

// File is an open file. ReadAt and WriteAt may be called concurrently with
// each other; the filestore never writes the same range from two
// goroutines.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data (and its size) durable: fdatasync(2).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size returns the file's current size.
	Size() (int64, error)
}

// Writebacker is implemented by files that can start writing their
// dirty bytes to the device ahead of a Sync, without waiting for them and
// without flushing the device's cache (sync_file_range(2) with
// SYNC_FILE_RANGE_WRITE on the OS file system): a later Sync then has
// little left to write. It is only a hint and promises no durability;
// the in-memory file systems do not implement it.
type Writebacker interface {
	StartWriteback(off, n int64) error
}

// Allocator is implemented by files that can reserve the blocks of a
// range ahead of writing it (fallocate(2) on the OS file system on Linux):
// the file grows to at least off+n bytes, which read as zeros until
// written, and later writes into the range need no new space. A file
// system that cannot reserve reports an error; a caller that needs the
// space then writes the range itself.
// A Mem file implements it by growing with zeros.
type Allocator interface {
	Allocate(off, n int64) error
}

// CacheDropper is implemented by files whose cached pages can be given
// back to the kernel (posix_fadvise(2) POSIX_FADV_DONTNEED on the OS file
// system on Linux amd64 and arm64): clean pages from off for n bytes (to the end of the
// file when n is 0) leave the page cache, dirty ones are not dropped.
// Reads still see every byte; later reads of the range go to the device.
// It is only a hint; the in-memory file systems do not implement it.
type CacheDropper interface {
	DropCache(off, n int64) error
}

// VectorWriter is implemented by files that write several buffers, back
// to back from off, with one call (pwritev(2) on the OS file system on
// Linux), so that a caller need not copy them into one buffer first. Like
// WriteAt it returns an error when it writes less than all of them. It
// may change the slice headers in bufs, never the bytes.
type VectorWriter interface {
	WritevAt(bufs [][]byte, off int64) (int, error)
}

// FS is a file system.
type FS interface {
	// Create creates or truncates name and opens it for reading and writing.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	// Remove deletes a file.
	Remove(name string) error
	// Rename renames a file, replacing newname if it exists.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string) error
	// ReadDir returns the names (not paths) of a directory's entries, sorted.
	ReadDir(dir string) ([]string, error)
	// SyncDir makes the directory's entries durable (creates, renames,
	// removes done so far).
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on name (creating it).
	// It fails with ErrLocked if someone else holds it. Close releases it.
	Lock(name string) (io.Closer, error)
}

// Spacer is implemented by file systems that can tell how much space is
// left: free is what an unprivileged writer may still use (statfs(2)
// f_bavail), total the size of the file system, both in bytes, for the
// file system holding dir.
type Spacer interface {
	Space(dir string) (free, total uint64, err error)
}

// ErrNoSpaceInfo is returned by Space when the file system cannot tell.
var ErrNoSpaceInfo = errors.New("vfs: free space unknown")

// Space asks fs about the space left under dir (see Spacer); it fails
// with ErrNoSpaceInfo if fs cannot tell.
func Space(fs FS, dir string) (free, total uint64, err error) {
	if sp, ok := fs.(Spacer); ok {
		return sp.Space(dir)
	}
	return 0, 0, ErrNoSpaceInfo
}

// ErrLocked is returned by Lock when the lock is already held.
var ErrLocked = errors.New("vfs: locked by another process")
