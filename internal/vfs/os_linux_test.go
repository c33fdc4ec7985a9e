package vfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// An OS file writes a vector of buffers back to back, more of them than
// one pwritev takes and empty ones among them, and reports a failure as a
// PathError.
func TestOSWritevAt(t *testing.T) {
	f, err := OS().Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vw, ok := f.(VectorWriter)
	if !ok {
		t.Fatal("an OS file is not a VectorWriter")
	}
	var bufs [][]byte
	var want []byte
	for i := range 3000 {
		b := bytes.Repeat([]byte{byte(i)}, i%7) // every 7th is empty
		if i == 1500 {
			b = bytes.Repeat([]byte{0xab}, 1<<20)
		}
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	n, err := vw.WritevAt(bufs, 100)
	if err != nil || n != len(want) {
		t.Fatalf("WritevAt = %d, %v; want %d, nil", n, err, len(want))
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the file does not hold the buffers back to back")
	}

	r, w, err := os.Pipe() // pwritev on a pipe fails (ESPIPE)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p, _ := wrapOS(w, nil)
	var pe *fs.PathError
	if _, err := p.(VectorWriter).WritevAt([][]byte{[]byte("x")}, 0); !errors.As(err, &pe) || pe.Op != "pwritev" {
		t.Fatalf("WritevAt on a pipe = %v; want a pwritev PathError", err)
	}
}

// An OS file reserves a range: it grows to cover it, reads zeros there,
// keeps what it held before, and a write into the range reads back.
func TestOSAllocate(t *testing.T) {
	f, err := OS().Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, ok := f.(Allocator)
	if !ok {
		t.Fatal("an OS file is not an Allocator")
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	const n = 1 << 20
	if err := a.Allocate(0, n); err != nil {
		t.Fatal(err)
	}
	if size, err := f.Size(); err != nil || size != n {
		t.Fatalf("Size = %d, %v; want %d", size, err, n)
	}
	got := make([]byte, n)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if string(got[:4]) != "head" || !bytes.Equal(got[4:], make([]byte, n-4)) {
		t.Fatal("the reserved range does not read as the old bytes then zeros")
	}
	if _, err := f.WriteAt([]byte("tail"), n-4); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(got[:4], n-4); err != nil || string(got[:4]) != "tail" {
		t.Fatalf("read back %q, %v", got[:4], err)
	}
	var pe *fs.PathError
	if err := a.Allocate(-1, 10); !errors.As(err, &pe) || pe.Op != "fallocate" {
		t.Fatalf("Allocate(-1) = %v; want a fallocate PathError", err)
	}
}
