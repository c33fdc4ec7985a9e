package vfs

import (
	"fmt"
	"io"
	"path/filepath"
)

// WriteFileAtomic replaces name with data so that a reader, or a crash,
// finds the old contents whole or the new ones whole, never a mix or an
// empty file: data goes to name+".tmp", which is synced and renamed over
// name, and the directory is synced. When it returns nil the new contents
// are durable. When it fails before the rename, name is untouched and
// the temporary file is removed; when only the directory's sync fails,
// name reads the new contents, which a crash may still undo.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err != nil {
		fs.Remove(tmp)
		return err
	}
	return fs.SyncDir(filepath.Dir(name))
}

// ReadFile returns the whole contents of name, at most limit bytes: a
// longer file is an error.
func ReadFile(fs FS, name string, limit int64) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("vfs: %s holds %d bytes, more than the %d expected", name, size, limit)
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); err != nil && !(err == io.EOF && int64(n) == size) {
		return nil, err
	}
	return b, nil
}
