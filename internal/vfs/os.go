package vfs

import (
	"os"
	"slices"
)

// OS returns the real file system. What durability needs of the operating
// system — sync a file's data, sync a directory's entries, lock a file,
// tell the free space — lives in os_linux.go (fdatasync, sync_file_range,
// flock, statfs: the platform Busbar is built and tested on), os_unix.go
// (the other Unixes: fsync, which is F_FULLFSYNC on macOS) and
// os_windows.go (FlushFileBuffers, LockFileEx, GetDiskFreeSpaceEx).
func OS() FS { return osFS{} }

type osFS struct{}

type osFile struct {
	*os.File
	fd int
}

func wrapOS(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &osFile{File: f, fd: int(f.Fd())}, nil
}

func (f *osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (osFS) Create(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644))
}

func (osFS) Open(name string) (File, error) { return wrapOS(os.Open(name)) }

func (osFS) OpenReadWrite(name string) (File, error) {
	return wrapOS(os.OpenFile(name, os.O_RDWR, 0))
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o755) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	slices.Sort(names)
	return names, nil
}
