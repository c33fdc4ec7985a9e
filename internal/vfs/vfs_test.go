package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
)

func write(t *testing.T, f File, off int64, s string) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, fsys FS, name string) string {
	t.Helper()
	f, err := fsys.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, _ := f.Size()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		t.Fatal(err)
	}
	return string(b)
}

// testFS checks behaviour every FS shares.
func testFS(t *testing.T, fsys FS, dir string) {
	if err := fsys.MkdirAll(dir + "/sub"); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Create(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	write(t, f, 0, "hello")
	write(t, f, 10, "world") // leaves a hole of zeros
	if n, _ := f.Size(); n != 15 {
		t.Fatalf("size %d", n)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 20)
	n, err := f.ReadAt(buf, 0)
	if n != 15 || !errors.Is(err, io.EOF) || string(buf[:15]) != "hello\x00\x00\x00\x00\x00world" {
		t.Fatalf("ReadAt = %d %v %q", n, err, buf[:n])
	}
	write(t, f, 12, "XYZWV") // overlaps the end and extends
	if n, _ := f.Size(); n != 17 {
		t.Fatalf("size %d", n)
	}
	if err := f.Truncate(5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := read(t, fsys, dir+"/a"); got != "hello" {
		t.Fatalf("after truncate: %q", got)
	}
	ro, _ := fsys.Open(dir + "/a")
	if _, err := ro.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("write to a read-only file succeeded")
	}
	ro.Close()
	if err := fsys.Rename(dir+"/a", dir+"/b"); err != nil {
		t.Fatal(err)
	}
	names, err := fsys.ReadDir(dir)
	if err != nil || !slices.Equal(names, []string{"b", "sub"}) {
		t.Fatalf("ReadDir = %v, %v", names, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Open(dir + "/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open renamed-away name: %v", err)
	}
	rw, err := fsys.OpenReadWrite(dir + "/b")
	if err != nil {
		t.Fatal(err)
	}
	write(t, rw, 5, "!")
	rw.Close()
	if got := read(t, fsys, dir+"/b"); got != "hello!" {
		t.Fatalf("after OpenReadWrite: %q", got)
	}
	// An open file stays readable after its name is removed.
	h, _ := fsys.Open(dir + "/b")
	if err := fsys.Remove(dir + "/b"); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	if _, err := h.ReadAt(b, 0); err != nil || string(b) != "hello!" {
		t.Fatalf("read after remove: %q %v", b, err)
	}
	h.Close()
	l, err := fsys.Lock(dir + "/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Lock(dir + "/LOCK"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v", err)
	}
	l.Close()
	l, err = fsys.Lock(dir + "/LOCK")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	l.Close()
}

func TestOS(t *testing.T)  { testFS(t, OS(), filepath.ToSlash(t.TempDir())) }
func TestMem(t *testing.T) { testFS(t, NewMem(), "/d") }

// An OS file starts writeback of a range it wrote (a hint; the bytes are
// there to read either way), and one with nothing dirty is no error.
func TestOSWriteback(t *testing.T) {
	f, err := OS().Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wb, ok := f.(Writebacker)
	if !ok {
		t.Fatal("an OS file is not a Writebacker")
	}
	if _, err := f.WriteAt(make([]byte, 1<<16), 0); err != nil {
		t.Fatal(err)
	}
	if err := wb.StartWriteback(0, 1<<16); err != nil {
		t.Fatal(err)
	}
	if err := wb.StartWriteback(1<<16, 1<<16); err != nil {
		t.Fatal(err)
	}
	if _, ok := any(&memFile{}).(Writebacker); ok {
		t.Fatal("a Mem file claims writeback")
	}
}

// An OS file's Sync reports a failing fdatasync (on a pipe) as a
// PathError.
func TestOSSyncError(t *testing.T) {
	r, w, err := os.Pipe() // fdatasync on a pipe fails (EINVAL)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p, _ := wrapOS(r, nil)
	var pe *fs.PathError
	if err := p.Sync(); !errors.As(err, &pe) || pe.Op != "fdatasync" {
		t.Fatalf("Sync on a pipe = %v; want an fdatasync PathError", err)
	}
}

func TestCrashCloneKeepsOnlySynced(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/f")
	write(t, f, 0, "synced")
	f.Sync()
	write(t, f, 6, "-unsynced")
	// The file exists but its name was never synced: a crash loses it.
	if _, err := m.CrashClone(CrashOptions{}).Open("/d/f"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unsynced name survived: %v", err)
	}
	m.SyncDir("/d")
	c := m.CrashClone(CrashOptions{})
	if got := read(t, c, "/d/f"); got != "synced" {
		t.Fatalf("after crash: %q", got)
	}
	// The original is untouched and usable.
	if got := read(t, m, "/d/f"); got != "synced-unsynced" {
		t.Fatalf("original: %q", got)
	}
	// An overwrite of synced bytes is lost too.
	write(t, f, 0, "SY")
	if got := read(t, m.CrashClone(CrashOptions{}), "/d/f"); got != "synced" {
		t.Fatalf("unsynced overwrite survived: %q", got)
	}
	f.Sync()
	if got := read(t, m.CrashClone(CrashOptions{}), "/d/f"); got != "SYnced-unsynced" {
		t.Fatalf("after second sync: %q", got)
	}
	// Truncation is a write too.
	f.Truncate(2)
	if got := read(t, m.CrashClone(CrashOptions{}), "/d/f"); got != "SYnced-unsynced" {
		t.Fatalf("unsynced truncate survived: %q", got)
	}
	f.Sync()
	if got := read(t, m.CrashClone(CrashOptions{}), "/d/f"); got != "SY" {
		t.Fatalf("synced truncate lost: %q", got)
	}
	f.Close()
}

func TestCrashCloneNames(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	for _, n := range []string{"a", "b"} {
		f, _ := m.Create("/d/" + n)
		write(t, f, 0, n)
		f.Sync()
		f.Close()
	}
	m.SyncDir("/d")
	m.Rename("/d/a", "/d/c")
	m.Remove("/d/b")
	c := m.CrashClone(CrashOptions{})
	if names, _ := c.ReadDir("/d"); !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("unsynced rename/remove survived: %v", names)
	}
	// With Rand, a prefix of the changes may survive, never a later one
	// without an earlier one.
	seen := map[string]bool{}
	for i := range 50 {
		c := m.CrashClone(CrashOptions{Rand: rand.New(rand.NewSource(int64(i)))})
		names, _ := c.ReadDir("/d")
		key := string(bytes.Join(toBytes(names), []byte(",")))
		seen[key] = true
		if key != "a,b" && key != "b,c" && key != "c" {
			t.Fatalf("crash left %v", names)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("saw %v, want all three prefixes", seen)
	}
	m.SyncDir("/d")
	if names, _ := m.CrashClone(CrashOptions{}).ReadDir("/d"); !slices.Equal(names, []string{"c"}) {
		t.Fatalf("after SyncDir: %v", names)
	}
	if got := read(t, m.CrashClone(CrashOptions{}), "/d/c"); got != "a" {
		t.Fatalf("renamed file holds %q", got)
	}
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func TestCrashCloneTornTail(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/f")
	write(t, f, 0, "base")
	f.Sync()
	m.SyncDir("/d")
	write(t, f, 4, "0123456789")
	lens := map[int]bool{}
	for i := range 200 {
		got := read(t, m.CrashClone(CrashOptions{Rand: rand.New(rand.NewSource(int64(i)))}), "/d/f")
		if got != ("base0123456789")[:len(got)] || len(got) < 4 {
			t.Fatalf("torn copy %q is not a prefix", got)
		}
		lens[len(got)] = true
	}
	if len(lens) < 8 {
		t.Fatalf("only %d distinct torn lengths", len(lens))
	}
}

func TestErrorFS(t *testing.T) {
	var armed atomic.Bool
	var seen []Op
	inner := NewMem()
	fsys := WithErrors(inner, func(op Op) error {
		seen = append(seen, op)
		return FailOn(OpSync, func(p string) bool { return p == "/d/f" }, &armed)(op)
	})
	fsys.MkdirAll("/d")
	f, err := fsys.Create("/d/f")
	if err != nil {
		t.Fatal(err)
	}
	write(t, f, 3, "abc")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("Sync: %v", err)
	}
	g, _ := fsys.Create("/d/g")
	if err := g.Sync(); err != nil {
		t.Fatalf("Sync of another file: %v", err)
	}
	want := []Op{{Kind: OpMkdir, Path: "/d"}, {Kind: OpCreate, Path: "/d/f"}, {Kind: OpWrite, Path: "/d/f", Off: 3, Len: 3},
		{Kind: OpSync, Path: "/d/f"}, {Kind: OpSync, Path: "/d/f"}, {Kind: OpCreate, Path: "/d/g"}, {Kind: OpSync, Path: "/d/g"}}
	if !slices.Equal(seen, want) {
		t.Fatalf("ops seen:\n%v\nwant\n%v", seen, want)
	}
	if OpSync.String() != "sync" || OpKind(99).String() != "op?" {
		t.Fatal("OpKind.String")
	}
}

func TestCrashCloneTornOverwrite(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	f, _ := m.Create("/d/f")
	write(t, f, 0, "0000000000") // preallocated
	f.Sync()
	m.SyncDir("/d")
	write(t, f, 3, "abcd")
	seen := map[string]bool{}
	for i := range 100 {
		got := read(t, m.CrashClone(CrashOptions{Rand: rand.New(rand.NewSource(int64(i)))}), "/d/f")
		seen[got] = true
	}
	want := map[string]bool{"0000000000": true, "000a000000": true, "000ab00000": true, "000abc0000": true, "000abcd000": true}
	if len(seen) != len(want) {
		t.Fatalf("crash images %v, want %v", seen, want)
	}
	for k := range seen {
		if !want[k] {
			t.Fatalf("crash image %q", k)
		}
	}
}

func TestMemCapacity(t *testing.T) {
	m := NewMem()
	if _, _, err := m.Space("/"); !errors.Is(err, ErrNoSpaceInfo) {
		t.Fatalf("Space without capacity: %v", err)
	}
	m.SetCapacity(100)
	f, err := m.Create("/a")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt(make([]byte, 60), 0); n != 60 || err != nil {
		t.Fatalf("write 60: %d %v", n, err)
	}
	// Overwriting takes no space; growing past the capacity writes what fits.
	if n, err := f.WriteAt(make([]byte, 80), 30); n != 70 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past capacity: %d %v, want 70 and ENOSPC", n, err)
	}
	if sz, _ := f.Size(); sz != 100 {
		t.Fatalf("size %d, want 100", sz)
	}
	if free, total, _ := m.Space("/"); free != 0 || total != 100 {
		t.Fatalf("space %d/%d", free, total)
	}
	if n, err := f.WriteAt([]byte{1}, 200); n != 0 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write into a hole on a full disk: %d %v", n, err)
	}
	if err := f.Truncate(40); err != nil {
		t.Fatal(err)
	}
	g, _ := m.Create("/b")
	g.WriteAt(make([]byte, 50), 0)
	if free, _, _ := m.Space("/"); free != 10 {
		t.Fatalf("free %d after truncate and write, want 10", free)
	}
	if err := m.Rename("/b", "/a"); err != nil { // replaces a: its 40 bytes are freed
		t.Fatal(err)
	}
	if free, _, _ := m.Space("/"); free != 50 {
		t.Fatalf("free %d after rename over a file, want 50", free)
	}
	m.Remove("/a")
	if free, _, _ := m.Space("/"); free != 100 {
		t.Fatalf("free %d after remove, want 100", free)
	}
}

func TestShortWrite(t *testing.T) {
	m := NewMem()
	fs := WithErrors(m, func(op Op) error {
		if op.Kind == OpWrite {
			return &ShortWrite{N: 3, Err: syscall.ENOSPC}
		}
		return nil
	})
	f, _ := fs.Create("/a")
	if n, err := f.WriteAt([]byte("hello"), 0); n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("short write: %d %v", n, err)
	}
	if sz, _ := f.Size(); sz != 3 {
		t.Fatalf("size %d, want 3", sz)
	}
}

// A Mem file reserves a range by growing with zeros: the space is taken
// (ENOSPC past the capacity, the file unchanged), a range within the file
// changes nothing, and the growth is a write that only a sync keeps
// across a crash.
func TestMemAllocate(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	m.SetCapacity(100)
	f, _ := m.Create("/d/f")
	m.SyncDir("/d")
	write(t, f, 0, "head")
	f.Sync()
	a, ok := f.(Allocator)
	if !ok {
		t.Fatal("a Mem file is not an Allocator")
	}
	if err := a.Allocate(0, 64); err != nil {
		t.Fatal(err)
	}
	if got := read(t, m, "/d/f"); got != "head"+string(make([]byte, 60)) {
		t.Fatalf("after Allocate: %q", got)
	}
	if got := read(t, m.CrashClone(CrashOptions{}), "/d/f"); got != "head" {
		t.Fatalf("unsynced reservation survived a crash: %q", got)
	}
	f.Sync()
	if got := read(t, m.CrashClone(CrashOptions{}), "/d/f"); len(got) != 64 {
		t.Fatalf("synced reservation lost: %d bytes", len(got))
	}
	if err := a.Allocate(10, 20); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := m.Space("/"); free != 36 {
		t.Fatalf("free %d; want 36", free)
	}
	if err := a.Allocate(0, 200); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Allocate past the capacity: %v; want ENOSPC", err)
	}
	if sz, _ := f.Size(); sz != 64 {
		t.Fatalf("size %d after a refused reservation; want 64", sz)
	}
	var pe *fs.PathError
	if err := a.Allocate(-1, 10); !errors.As(err, &pe) || pe.Op != "fallocate" {
		t.Fatalf("Allocate(-1) = %v; want a fallocate PathError", err)
	}
}
