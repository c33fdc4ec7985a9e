//go:build windows

package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/windows"
)

// Sync is FlushFileBuffers (os.File.Sync): the file's data and metadata
// reach the disk.
func (f *osFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return &os.PathError{Op: "FlushFileBuffers", Path: f.Name(), Err: err}
	}
	return nil
}

// Space implements Spacer with GetDiskFreeSpaceEx.
func (osFS) Space(dir string) (free, total uint64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, &os.PathError{Op: "GetDiskFreeSpaceEx", Path: dir, Err: err}
	}
	var avail, tot, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &tot, &totalFree); err != nil {
		return 0, 0, &os.PathError{Op: "GetDiskFreeSpaceEx", Path: dir, Err: err}
	}
	return avail, tot, nil
}

// SyncDir does nothing: NTFS journals directory changes itself, and a
// directory handle cannot be flushed.
func (osFS) SyncDir(dir string) error {
	_, err := os.Stat(dir)
	return err
}

type osLock struct{ f *os.File }

func (l osLock) Close() error { return l.f.Close() } // closing the handle releases the lock

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	ol := new(windows.Overlapped)
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	if err != nil {
		f.Close()
		if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return nil, fmt.Errorf("%s: %w", name, ErrLocked)
		}
		return nil, &os.PathError{Op: "LockFileEx", Path: name, Err: err}
	}
	return osLock{f}, nil
}
