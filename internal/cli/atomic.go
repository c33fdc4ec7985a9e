package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic replaces path with data so that a reader, or a crash,
// sees the old file or the new one whole, never an empty or partial one:
// the data goes to a temporary file in the same directory, is synced, and
// is renamed over path; the directory is then synced so that the rename
// survives a crash. A file already at path keeps its permissions; a new
// one gets perm. On failure path is untouched and the temporary file is
// removed.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		perm = fi.Mode().Perm()
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename is done. Syncing the directory is best effort: some
	// systems cannot open or sync one, and the file is in place either way.
	d, derr := os.Open(dir)
	if derr != nil {
		return nil
	}
	defer d.Close()
	_ = d.Sync()
	return nil
}
