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
