//go:build unix

package vfs

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// What every Unix shares: fsync of a directory, and flock.

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osLock struct{ f *os.File }

func (l osLock) Close() error { return l.f.Close() } // closing the fd drops the flock

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("%s: %w", name, ErrLocked)
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return osLock{f}, nil
}
