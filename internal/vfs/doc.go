// Package vfs is the file-system seam of the storage layer: every byte the
// filestore reads or writes goes through an FS, so tests can swap the real
// disk for an in-memory file system that loses what was never synced, or
// for a wrapper that fails chosen operations.
//
// Three implementations:
//
//   - OS: the real file system. File.Sync is fdatasync(2); SyncDir opens
//     the directory and fsyncs it, which makes created, renamed and removed
//     names durable. Its files are also Writebackers (sync_file_range(2)
//     starts writing a range without waiting or flushing the device) and,
//     on Linux, VectorWriters (pwritev(2)) and (amd64, arm64)
//     CacheDroppers (posix_fadvise(2) POSIX_FADV_DONTNEED).
//   - Mem (NewMem): an in-memory file system that tracks, for every file,
//     the bytes as of its last Sync and, for every directory, the names as
//     of its last SyncDir. CrashClone returns the file system a power loss
//     would leave behind: only synced file contents under synced names
//     (optionally plus a random prefix of each file's unsynced appended
//     tail, to model a torn write).
//   - ErrorFS (WithErrors): wraps any FS and asks an Injector before every
//     operation whether it should fail.
//
// WriteFileAtomic and ReadFile handle small whole files (a side file
// such as the test clock's offset) on any FS: replaced through a synced
// temporary file, a rename and a synced directory.
//
// Durability model of Mem (the weakest behaviour POSIX allows that a sane
// file system shows):
//
//	                 live view (what reads see)      after CrashClone
//	file bytes       every WriteAt/Truncate          as of the file's last Sync
//	directory names  every Create/Rename/Remove      as of the directory's last SyncDir
//	directories      MkdirAll                        always kept (treated as durable)
//
// With CrashOptions.Rand, a crash also keeps a random prefix (in file
// order) of each file's bytes written since its last Sync, over the old
// contents (a torn write, appended or overwriting preallocated space) and a random prefix, in time
// order, of the unsynced Create/Rename/Remove calls (as a journaling file
// system commits metadata in order).
//
// A file created and synced but whose directory was not synced disappears
// in a crash; a rename not followed by SyncDir is undone; a removed file
// comes back. Open handles keep working after their name is removed.
//
// Names are slash-separated paths; Mem cleans them with path.Clean and
// does not resolve "..". The package has no on-disk format of its own.
package vfs
