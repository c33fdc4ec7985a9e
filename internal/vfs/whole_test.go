package vfs

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestWriteFileAtomic: after a crash at any point of a replacement the
// file holds the old contents or the new ones, whole; once the call
// returned, the new ones.
func TestWriteFileAtomic(t *testing.T) {
	old, new := []byte("old contents"), bytes.Repeat([]byte("new contents, longer "), 20)
	for seed := range int64(200) {
		m := NewMem()
		if err := m.MkdirAll("d"); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileAtomic(m, "d/f", old); err != nil {
			t.Fatal(err)
		}
		// The replacement, cut short after a random number of its
		// operations (create, write, sync, close, rename, sync dir).
		stop := int(seed % 7)
		n := 0
		inj := func(Op) error {
			n++
			if stop < 6 && n > stop {
				return ErrInjected
			}
			return nil
		}
		err := WriteFileAtomic(WithErrors(m, inj), "d/f", new)
		if stop == 6 && err != nil {
			t.Fatalf("uncut write: %v", err)
		}
		for _, opts := range []CrashOptions{{}, {Rand: rand.New(rand.NewSource(seed))}, {Rand: rand.New(rand.NewSource(seed)), AnySubset: true}} {
			c := m.CrashClone(opts)
			got, err := ReadFile(c, "d/f", 1<<20)
			if err != nil {
				t.Fatalf("seed %d: after the crash: %v", seed, err)
			}
			if !bytes.Equal(got, old) && !bytes.Equal(got, new) || stop == 6 && !bytes.Equal(got, new) {
				t.Fatalf("seed %d (stopped after %d ops): after the crash the file holds %q", seed, stop, got)
			}
		}
	}
}

func TestReadFileLimit(t *testing.T) {
	m := NewMem()
	if err := WriteFileAtomic(m, "f", make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(m, "f", 99); err == nil {
		t.Fatal("a file over the limit was read")
	}
	if b, err := ReadFile(m, "f", 100); err != nil || len(b) != 100 {
		t.Fatalf("ReadFile = %d bytes, %v", len(b), err)
	}
}
