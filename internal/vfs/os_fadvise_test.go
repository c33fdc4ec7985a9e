//go:build linux && (amd64 || arm64)

package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"
)

// An OS file drops its synced pages from the page cache (mincore sees none
// resident afterwards) and still reads back every byte; a Mem file does not
// claim to.
func TestOSDropCache(t *testing.T) {
	f, err := OS().Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cd, ok := f.(CacheDropper)
	if !ok {
		t.Fatal("an OS file is not a CacheDropper")
	}
	const n = 1 << 20
	want := bytes.Repeat([]byte("busbar!"), n/7+1)[:n]
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := cd.DropCache(0, 0); err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(f.(*osFile).fd, 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	vec := make([]byte, n/os.Getpagesize())
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	syscall.Munmap(m)
	if errno != 0 {
		t.Fatal(errno)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	if resident != 0 {
		t.Errorf("%d of %d pages still cached after DropCache", resident, len(vec))
	}
	got := make([]byte, n)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes changed by DropCache")
	}
	if _, ok := any(&memFile{}).(CacheDropper); ok {
		t.Fatal("a Mem file claims to drop its cache")
	}
}
