package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Mem is an in-memory FS that remembers what was synced, so CrashClone can
// produce the state a power loss would leave. It is safe for concurrent
// use.
type Mem struct {
	mu    sync.Mutex
	names map[string]*memNode // live namespace: path -> file
	// durable is the namespace a crash would leave for sure; pending are
	// the namespace changes since, in order (a crash may keep a prefix).
	durable map[string]*memNode
	pending []nsOp
	dirs    map[string]bool
	locks   map[string]bool
	space   *memSpace
}

// memSpace is the space accounting of a Mem with a capacity (SetCapacity):
// the bytes of every linked file count, a removed file's bytes are freed
// at once.
type memSpace struct {
	capacity atomic.Int64 // 0: unlimited
	used     atomic.Int64
}

// grow reserves up to want more bytes and returns how many it got.
func (sp *memSpace) grow(want int64) int64 {
	for {
		used, limit := sp.used.Load(), sp.capacity.Load()
		got := want
		if limit > 0 {
			got = max(0, min(want, limit-used))
		}
		if sp.used.CompareAndSwap(used, used+got) {
			return got
		}
	}
}

// nsOp is a namespace change not yet made durable by SyncDir.
type nsOp struct {
	name    string   // created or removed name; rename source
	newname string   // rename target ("" otherwise)
	node    *memNode // created or renamed file; nil for a removal
}

func (op nsOp) applyTo(names map[string]*memNode) {
	switch {
	case op.newname != "":
		delete(names, op.name)
		names[op.newname] = op.node
	case op.node != nil:
		names[op.name] = op.node
	default:
		delete(names, op.name)
	}
}

func (op nsOp) inDir(dir string) bool {
	return path.Dir(op.name) == dir || op.newname != "" && path.Dir(op.newname) == dir
}

// memNode is one file (an inode). Its own mutex guards its bytes.
type memNode struct {
	mu     sync.Mutex
	data   []byte // live contents
	synced []byte // contents as of the last Sync
	// dirtyLow is the lowest offset changed since the last Sync
	// (len(synced) when only appends happened).
	dirtyLow int64
	// sp counts len(data) while the node is linked (nil once removed).
	sp *memSpace
}

// release stops counting n's bytes (it was removed or replaced).
func (n *memNode) release() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sp != nil {
		n.sp.used.Add(-int64(len(n.data)))
		n.sp = nil
	}
}

// resize accounts for n.data changing from old to new bytes; growth is
// limited by the capacity: it returns the size the data may have.
// n.mu is held.
func (n *memNode) resize(old, size int64) int64 {
	if n.sp == nil {
		return size
	}
	if size <= old {
		n.sp.used.Add(size - old)
		return size
	}
	return old + n.sp.grow(size-old)
}

// NewMem returns an empty in-memory file system with a root directory "/"
// and the current directory ".".
func NewMem() *Mem {
	return &Mem{
		names:   make(map[string]*memNode),
		durable: make(map[string]*memNode),
		dirs:    map[string]bool{"/": true, ".": true},
		locks:   make(map[string]bool),
		space:   &memSpace{},
	}
}

// SetCapacity limits the bytes all files together may hold (0: no limit).
// A write that would go past it writes what fits and fails with
// syscall.ENOSPC, as a full disk does; Space reports the capacity. A
// capacity below what is already used lets nothing grow.
func (m *Mem) SetCapacity(bytes int64) { m.space.capacity.Store(bytes) }

// Space implements Spacer. Without a capacity it fails (the space is
// unknown).
func (m *Mem) Space(string) (free, total uint64, err error) {
	limit := m.space.capacity.Load()
	if limit <= 0 {
		return 0, 0, ErrNoSpaceInfo
	}
	return uint64(max(0, limit-m.space.used.Load())), uint64(limit), nil
}

func clean(name string) string { return path.Clean(name) }

func notExist(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

func (m *Mem) checkParentLocked(op, name string) error {
	if !m.dirs[path.Dir(name)] {
		return notExist(op, path.Dir(name))
	}
	return nil
}

// Create creates or truncates name. Truncating an existing file is a
// write to that file: it is not durable until Sync.
func (m *Mem) Create(name string) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkParentLocked("create", name); err != nil {
		return nil, err
	}
	if n, ok := m.names[name]; ok {
		n.mu.Lock()
		n.resize(int64(len(n.data)), 0)
		n.data = n.data[:0:0]
		n.dirtyLow = 0
		n.mu.Unlock()
		return &memFile{name: name, n: n}, nil
	}
	n := &memNode{sp: m.space}
	m.names[name] = n
	m.pending = append(m.pending, nsOp{name: name, node: n})
	return &memFile{name: name, n: n}, nil
}

// Open opens name read-only.
func (m *Mem) Open(name string) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[name]
	if !ok {
		return nil, notExist("open", name)
	}
	return &memFile{name: name, n: n, readOnly: true}, nil
}

// OpenReadWrite opens an existing file for reading and writing.
func (m *Mem) OpenReadWrite(name string) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[name]
	if !ok {
		return nil, notExist("open", name)
	}
	return &memFile{name: name, n: n}, nil
}

// Remove deletes name from the live namespace.
func (m *Mem) Remove(name string) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[name]
	if !ok {
		return notExist("remove", name)
	}
	n.release()
	delete(m.names, name)
	m.pending = append(m.pending, nsOp{name: name})
	return nil
}

// Rename moves oldname to newname in the live namespace.
func (m *Mem) Rename(oldname, newname string) error {
	oldname, newname = clean(oldname), clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.names[oldname]
	if !ok {
		return notExist("rename", oldname)
	}
	if err := m.checkParentLocked("rename", newname); err != nil {
		return err
	}
	delete(m.names, oldname)
	if old, ok := m.names[newname]; ok && old != n {
		old.release()
	}
	m.names[newname] = n
	m.pending = append(m.pending, nsOp{name: oldname, newname: newname, node: n})
	return nil
}

// MkdirAll creates dir and its parents. Directories are durable at once.
func (m *Mem) MkdirAll(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := dir; !m.dirs[d]; d = path.Dir(d) {
		if _, ok := m.names[d]; ok {
			return &fs.PathError{Op: "mkdir", Path: d, Err: fs.ErrExist}
		}
		m.dirs[d] = true
	}
	return nil
}

// ReadDir lists the files and directories directly inside dir.
func (m *Mem) ReadDir(dir string) ([]string, error) {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, notExist("readdir", dir)
	}
	var out []string
	for name := range m.names {
		if path.Dir(name) == dir {
			out = append(out, path.Base(name))
		}
	}
	for d := range m.dirs {
		if d != dir && path.Dir(d) == dir {
			out = append(out, path.Base(d))
		}
	}
	slices.Sort(out)
	return out, nil
}

// SyncDir makes the live entries of dir durable.
func (m *Mem) SyncDir(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return notExist("syncdir", dir)
	}
	keep := m.pending[:0]
	for _, op := range m.pending {
		if op.inDir(dir) {
			op.applyTo(m.durable)
		} else {
			keep = append(keep, op)
		}
	}
	clear(m.pending[len(keep):])
	m.pending = keep
	return nil
}

type memLock struct {
	m    *Mem
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		delete(l.m.locks, l.name)
		l.m.mu.Unlock()
	})
	return nil
}

// Lock takes an in-process lock on name. The lock file itself is not
// created (locks do not survive a crash anyway).
func (m *Mem) Lock(name string) (io.Closer, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkParentLocked("lock", name); err != nil {
		return nil, err
	}
	if m.locks[name] {
		return nil, fmt.Errorf("%s: %w", name, ErrLocked)
	}
	m.locks[name] = true
	return &memLock{m: m, name: name}, nil
}

// CrashOptions tune CrashClone.
type CrashOptions struct {
	// Rand, if set, keeps a random prefix, in file order, of the bytes
	// written to each file since its last Sync, over the old contents (as
	// a disk that wrote part of the last writes before power was lost),
	// and a random prefix of the unsynced namespace changes (as a
	// journaling file system that committed some of them). Without it
	// every unsynced byte and name change is dropped.
	Rand *rand.Rand
	// AnySubset (with Rand) keeps a random subset of the unsynced
	// namespace changes instead of a prefix: the weakest ordering POSIX
	// allows, where a later rename or removal may survive an earlier one
	// that was lost.
	AnySubset bool
}

// CrashClone returns a new Mem holding what a power loss at this instant
// would leave: the durable names, each with its synced contents (see
// CrashOptions for torn writes). Locks are not carried over. m is
// unchanged and stays usable.
func (m *Mem) CrashClone(opts CrashOptions) *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := NewMem()
	for d := range m.dirs {
		c.dirs[d] = true
	}
	// A node reachable under two durable names (only possible through
	// renames) stays one node.
	durable := make(map[string]*memNode, len(m.durable))
	for name, n := range m.durable {
		durable[name] = n
	}
	if opts.Rand != nil {
		keep := opts.Rand.Intn(len(m.pending) + 1)
		for i, op := range m.pending {
			if opts.AnySubset && opts.Rand.Intn(2) == 0 || !opts.AnySubset && i < keep {
				op.applyTo(durable)
			}
		}
	}
	nodes := make(map[*memNode]*memNode)
	names := make([]string, 0, len(durable))
	for name := range durable {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic use of opts.Rand
	for _, name := range names {
		n := durable[name]
		cn, ok := nodes[n]
		if !ok {
			cn = n.crashCopy(opts.Rand)
			cn.sp = c.space
			c.space.used.Add(int64(len(cn.data)))
			nodes[n] = cn
		}
		c.names[name] = cn
		c.durable[name] = cn
	}
	return c
}

func (n *memNode) crashCopy(rng *rand.Rand) *memNode {
	n.mu.Lock()
	defer n.mu.Unlock()
	data := slices.Clone(n.synced)
	if low := int(n.dirtyLow); rng != nil && low < len(n.data) {
		// The bytes written since the last sync reached the disk in order,
		// up to a random point; past it the old contents remain.
		k := rng.Intn(len(n.data) - low + 1)
		if low+k > len(data) {
			data = append(data, make([]byte, low+k-len(data))...)
		}
		copy(data[low:], n.data[low:low+k])
	}
	if data == nil {
		data = []byte{}
	}
	return &memNode{data: data, synced: slices.Clone(data), dirtyLow: int64(len(data))}
}

// String lists the live files and their sizes, for debugging.
func (m *Mem) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.names))
	for name := range m.names {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		n := m.names[name]
		n.mu.Lock()
		fmt.Fprintf(&b, "%s %d (synced %d)\n", name, len(n.data), len(n.synced))
		n.mu.Unlock()
	}
	return b.String()
}

type memFile struct {
	name     string
	n        *memNode
	readOnly bool
	mu       sync.Mutex
	closed   bool
}

func (f *memFile) check(op string, write bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
	}
	if write && f.readOnly {
		return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrPermission}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrInvalid}
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	k := copy(p, f.n.data[off:])
	if k < len(p) {
		return k, io.EOF
	}
	return k, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: fs.ErrInvalid}
	}
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	end := off + int64(len(p))
	var short error
	if end > int64(len(n.data)) {
		if fit := n.resize(int64(len(n.data)), end); fit < end {
			short = &fs.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
			if fit <= off {
				n.resize(fit, int64(len(n.data))) // give back what a hole would take
				return 0, short
			}
			end, p = fit, p[:fit-off]
		}
		if end > int64(cap(n.data)) {
			grown := make([]byte, len(n.data), max(end, 2*int64(cap(n.data))))
			copy(grown, n.data)
			n.data = grown
		}
		old := int64(len(n.data))
		n.data = n.data[:end]
		if off > old {
			clear(n.data[old:off]) // a hole reads as zeros
		}
	}
	copy(n.data[off:], p)
	n.dirtyLow = min(n.dirtyLow, off)
	return len(p), short
}

func (f *memFile) Sync() error {
	if err := f.check("sync", false); err != nil {
		return err
	}
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	low := min(n.dirtyLow, int64(len(n.synced)), int64(len(n.data)))
	n.synced = append(n.synced[:low], n.data[low:]...)
	n.dirtyLow = int64(len(n.synced))
	return nil
}

func (f *memFile) Truncate(size int64) error {
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: fs.ErrInvalid}
	}
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if size <= int64(len(n.data)) {
		n.resize(int64(len(n.data)), size)
		n.data = n.data[:size]
		n.dirtyLow = min(n.dirtyLow, size)
		return nil
	}
	if !n.growLocked(size) {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: syscall.ENOSPC}
	}
	return nil
}

// growLocked makes n's data size bytes long, more than it is, with zeros
// that are unsynced (a crash loses or tears them like a write's); false,
// and nothing changed, if the space is not there. n.mu is held.
func (n *memNode) growLocked(size int64) bool {
	old := int64(len(n.data))
	if fit := n.resize(old, size); fit < size {
		n.resize(fit, old)
		return false
	}
	n.data = append(n.data, make([]byte, size-old)...)
	n.dirtyLow = min(n.dirtyLow, old)
	return true
}

// Allocate implements Allocator: a file shorter than off+n grows to it
// with zeros, taking the space as a write would (and, unsynced, lost or
// torn by a crash like one).
func (f *memFile) Allocate(off, n int64) error {
	if err := f.check("fallocate", true); err != nil {
		return err
	}
	if off < 0 || n <= 0 {
		return &fs.PathError{Op: "fallocate", Path: f.name, Err: fs.ErrInvalid}
	}
	nd := f.n
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if off+n > int64(len(nd.data)) && !nd.growLocked(off+n) {
		return &fs.PathError{Op: "fallocate", Path: f.name, Err: syscall.ENOSPC}
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	if err := f.check("stat", false); err != nil {
		return 0, err
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	return int64(len(f.n.data)), nil
}

func (f *memFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}
