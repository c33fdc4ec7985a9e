package vfs

import (
	"errors"
	"io"
	"io/fs"
	"sync/atomic"
)

// OpKind names an operation ErrorFS can fail.
type OpKind uint8

// The operations ErrorFS reports to its Injector.
const (
	OpCreate OpKind = iota + 1
	OpOpen
	OpRemove
	OpRename
	OpMkdir
	OpReadDir
	OpSyncDir
	OpLock
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpSize
	OpClose
	OpAllocate
)

var opNames = [...]string{
	OpCreate: "create", OpOpen: "open", OpRemove: "remove", OpRename: "rename",
	OpMkdir: "mkdir", OpReadDir: "readdir", OpSyncDir: "syncdir", OpLock: "lock",
	OpRead: "read", OpWrite: "write", OpSync: "sync", OpTruncate: "truncate",
	OpSize: "size", OpClose: "close", OpAllocate: "allocate",
}

func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return "op?"
}

// Op describes one operation about to run.
type Op struct {
	Kind OpKind
	Path string // the file or directory (for Rename, the old name)
	Off  int64  // OpRead, OpWrite, OpAllocate: offset; OpTruncate: size
	Len  int    // OpRead, OpWrite, OpAllocate: length
}

// Injector decides whether an operation fails: a non-nil error is returned
// instead of running it. It is called concurrently.
type Injector func(Op) error

// ErrInjected is the error the helper injectors return.
var ErrInjected = errors.New("vfs: injected error")

// FailOn returns an injector that fails every operation of kind k whose
// path satisfies match (nil matches all), once armed is set to true.
func FailOn(k OpKind, match func(path string) bool, armed *atomic.Bool) Injector {
	return func(op Op) error {
		if op.Kind == k && armed.Load() && (match == nil || match(op.Path)) {
			return ErrInjected
		}
		return nil
	}
}

// ShortWrite, returned by an Injector for an OpWrite, makes the write
// happen in part: its first N bytes are written and Err is returned, as
// write(2) does when the disk fills up in the middle of a write.
type ShortWrite struct {
	N   int
	Err error
}

func (e *ShortWrite) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ShortWrite) Unwrap() error { return e.Err }

// WithErrors wraps fs so that inject is consulted before every operation.
func WithErrors(fs FS, inject Injector) FS { return &errorFS{fs: fs, inject: inject} }

type errorFS struct {
	fs     FS
	inject Injector
}

type errorFile struct {
	f      File
	path   string
	inject Injector
}

func (e *errorFS) wrap(name string, f File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &errorFile{f: f, path: name, inject: e.inject}, nil
}

func (e *errorFS) Create(name string) (File, error) {
	if err := e.inject(Op{Kind: OpCreate, Path: name}); err != nil {
		return nil, err
	}
	f, err := e.fs.Create(name)
	return e.wrap(name, f, err)
}

func (e *errorFS) Open(name string) (File, error) {
	if err := e.inject(Op{Kind: OpOpen, Path: name}); err != nil {
		return nil, err
	}
	f, err := e.fs.Open(name)
	return e.wrap(name, f, err)
}

func (e *errorFS) OpenReadWrite(name string) (File, error) {
	if err := e.inject(Op{Kind: OpOpen, Path: name}); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenReadWrite(name)
	return e.wrap(name, f, err)
}

func (e *errorFS) Remove(name string) error {
	if err := e.inject(Op{Kind: OpRemove, Path: name}); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

func (e *errorFS) Rename(oldname, newname string) error {
	if err := e.inject(Op{Kind: OpRename, Path: oldname}); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

func (e *errorFS) MkdirAll(dir string) error {
	if err := e.inject(Op{Kind: OpMkdir, Path: dir}); err != nil {
		return err
	}
	return e.fs.MkdirAll(dir)
}

func (e *errorFS) ReadDir(dir string) ([]string, error) {
	if err := e.inject(Op{Kind: OpReadDir, Path: dir}); err != nil {
		return nil, err
	}
	return e.fs.ReadDir(dir)
}

func (e *errorFS) SyncDir(dir string) error {
	if err := e.inject(Op{Kind: OpSyncDir, Path: dir}); err != nil {
		return err
	}
	return e.fs.SyncDir(dir)
}

// Space passes through to the wrapped file system (see Spacer); it is not
// an injectable operation.
func (e *errorFS) Space(dir string) (free, total uint64, err error) { return Space(e.fs, dir) }

func (e *errorFS) Lock(name string) (io.Closer, error) {
	if err := e.inject(Op{Kind: OpLock, Path: name}); err != nil {
		return nil, err
	}
	return e.fs.Lock(name)
}

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.inject(Op{Kind: OpRead, Path: f.path, Off: off, Len: len(p)}); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.inject(Op{Kind: OpWrite, Path: f.path, Off: off, Len: len(p)}); err != nil {
		var sw *ShortWrite
		if errors.As(err, &sw) && sw.N > 0 {
			n, werr := f.f.WriteAt(p[:min(sw.N, len(p))], off)
			if werr != nil {
				return n, werr
			}
			return n, sw.Err
		}
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

func (f *errorFile) Sync() error {
	if err := f.inject(Op{Kind: OpSync, Path: f.path}); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.inject(Op{Kind: OpTruncate, Path: f.path, Off: size}); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

// Allocate implements Allocator: it reports the reservation to the
// injector and passes it on, or fails where the underlying file cannot
// reserve.
func (f *errorFile) Allocate(off, n int64) error {
	if err := f.inject(Op{Kind: OpAllocate, Path: f.path, Off: off, Len: int(n)}); err != nil {
		return err
	}
	a, ok := f.f.(Allocator)
	if !ok {
		return &fs.PathError{Op: "fallocate", Path: f.path, Err: errors.ErrUnsupported}
	}
	return a.Allocate(off, n)
}

func (f *errorFile) Size() (int64, error) {
	if err := f.inject(Op{Kind: OpSize, Path: f.path}); err != nil {
		return 0, err
	}
	return f.f.Size()
}

func (f *errorFile) Close() error {
	if err := f.inject(Op{Kind: OpClose, Path: f.path}); err != nil {
		f.f.Close()
		return err
	}
	return f.f.Close()
}
