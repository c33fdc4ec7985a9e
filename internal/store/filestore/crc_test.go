package filestore

import (
	"encoding/binary"
	"testing"

	"pgregory.net/rapid"

	"github.com/busbarmq/busbar/internal/store"
)

// crcCombine of two parts' checksums is the checksum of the whole.
func TestCRCCombine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "a")
		n := rapid.IntRange(0, 70000).Draw(t, "n")
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*131 + n)
		}
		if n > 0 {
			b[rapid.IntRange(0, n-1).Draw(t, "flip")] ^= 0x5a
		}
		whole := crc(append(append([]byte(nil), a...), b...))
		if got := crcCombine(crc(a), crc(b), len(b)); got != whole {
			t.Fatalf("crcCombine = %08x, want %08x", got, whole)
		}
	})
}

// encodeBatch's payload checksum, combined for large Data, is the
// checksum of the payload's bytes, for any mix of small and large Data.
func TestEncodeBatchPayloadChecksum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b store.Batch
		for i := range rapid.IntRange(1, 6).Draw(t, "ops") {
			n := rapid.SampledFrom([]int{0, 1, 100, combineMin - 1, combineMin, 65536, 70001}).Draw(t, "size")
			data := make([]byte, n)
			for j := range data {
				data[j] = byte(j*7 + i)
			}
			kind := rapid.SampledFrom([]store.OpKind{store.OpAppend, store.OpRewrite, store.OpPutValue, store.OpSetMeta}).Draw(t, "kind")
			b.Add(store.Op{Kind: kind, EntityID: 1, Seq: uint64(i + 1), Key: "k", Meta: []byte("meta"), Data: data})
		}
		rec, err := encodeBatch(nil, &b)
		if err != nil {
			t.Fatal(err)
		}
		p := rec[recHeaderSize:]
		if got, want := binary.LittleEndian.Uint32(rec[24:]), crc(p); got != want {
			t.Fatalf("payload checksum %08x, want %08x", got, want)
		}
		if got := binary.LittleEndian.Uint32(rec[4:]); int(got) != len(p) {
			t.Fatalf("payload length %d, want %d", got, len(p))
		}
	})
}

func BenchmarkEncodeBatch64K(b *testing.B) {
	data := make([]byte, 64<<10)
	batch := store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: make([]byte, 40), Data: data}}}
	var buf []byte
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var err error
		if buf, err = encodeBatch(buf[:0], &batch); err != nil {
			b.Fatal(err)
		}
	}
}
