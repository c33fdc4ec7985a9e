package filestore

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"
	"unsafe"

	"github.com/busbarmq/busbar/internal/store"
)

func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 32 {
		t.Fatalf("entry is %d bytes, want 32", n)
	}
}

type modelMsg struct {
	meta string
	size uint32
}

// checkEntity compares e with model: order, chunk bounds, metas, counts.
func checkEntity(t *testing.T, chunks []*chunk, model map[uint64]modelMsg) {
	t.Helper()
	var seqs []uint64
	for ci, c := range chunks {
		if len(c.ents) == 0 || len(c.ents) > chunkCap {
			t.Fatalf("chunk %d has %d entries", ci, len(c.ents))
		}
		for i, e := range c.ents {
			seqs = append(seqs, e.seq)
			m, ok := model[e.seq]
			if !ok {
				t.Fatalf("unexpected seq %d", e.seq)
			}
			if string(c.meta(i)) != m.meta || e.size != m.size {
				t.Fatalf("seq %d: meta %q size %d, want %q %d", e.seq, c.meta(i), e.size, m.meta, m.size)
			}
		}
	}
	if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
		t.Fatalf("seqs not strictly increasing")
	}
	if len(seqs) != len(model) {
		t.Fatalf("%d entries, model has %d", len(seqs), len(model))
	}
}

// TestIndexCopyOnWrite applies random inserts, meta changes and removals
// and checks that every snapshot keeps seeing exactly what it froze.
func TestIndexCopyOnWrite(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	ix := newIndex()
	e := &entity{id: 1, values: map[string][]byte{}}
	ix.entities[1] = e
	model := map[uint64]modelMsg{}
	type frozen struct {
		snap  *snapshot
		model map[uint64]modelMsg
	}
	var snaps []frozen
	for step := range 20000 {
		seq := uint64(rng.Intn(3000))
		switch p := rng.Intn(100); {
		case p < 45:
			if rng.Intn(3) > 0 { // mostly appends at the end
				seq = 3000 + uint64(step)
			}
			meta := fmt.Sprint("m", step, bytes.Repeat([]byte("x"), rng.Intn(20)))
			ix.insert(e, entry{seq: seq, size: uint32(step)}, []byte(meta))
			model[seq] = modelMsg{meta: meta, size: uint32(step)}
		case p < 60:
			if c, i, ok := ix.lookupMut(e, seq); ok {
				meta := fmt.Sprint("s", step, bytes.Repeat([]byte("y"), rng.Intn(30)))
				c.setMeta(i, []byte(meta))
				m := model[seq]
				m.meta = meta
				model[seq] = m
			}
		case p < 98:
			if rng.Intn(2) == 0 && len(e.chunks) > 0 {
				seq = e.chunks[0].ents[0].seq // remove at the head, like a queue
			}
			_, ok := ix.remove(e, seq)
			if _, want := model[seq]; ok != want {
				t.Fatalf("remove %d: %v, model %v", seq, ok, want)
			}
			delete(model, seq)
		default:
			snaps = append(snaps, frozen{ix.snapshot(false), maps.Clone(model)})
		}
		if e.nmsgs != len(model) || ix.nmsgs != len(model) {
			t.Fatalf("step %d: counts %d/%d, model %d", step, e.nmsgs, ix.nmsgs, len(model))
		}
	}
	checkEntity(t, e.chunks, model)
	if len(snaps) < 100 {
		t.Fatalf("only %d snapshots", len(snaps))
	}
	for _, f := range snaps {
		checkEntity(t, f.snap.entities[0].chunks, f.model)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	b := &store.Batch{Ops: []store.Op{
		{Kind: store.OpPutEntity, EntityID: 1, Name: "queue", Data: []byte("spec")},
		{Kind: store.OpAppend, EntityID: 1, Seq: 1 << 40, Meta: []byte("meta"), Data: []byte("data")},
		{Kind: store.OpSetMeta, EntityID: 1, Seq: 3, Meta: []byte("m2")},
		{Kind: store.OpRewrite, EntityID: 1, Seq: 4, Meta: []byte("m3"), Data: []byte("d3")},
		{Kind: store.OpRemove, EntityID: 1, Seq: 5},
		{Kind: store.OpPutValue, EntityID: 2, Key: "k", Data: []byte("v")},
		{Kind: store.OpDeleteValue, EntityID: 2, Key: "k"},
		{Kind: store.OpDeleteEntity, EntityID: 9},
	}}
	rec, err := encodeBatch(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	rec = append(rec, encodeMoves(nil, []move{{entity: 7, seq: 8, fromSeg: 3, fromOff: 4096, crc: 42, data: []byte("moved")}})[recHeaderSize:]...)
	finishPayload(rec)
	sealRecHeader(rec, 77, 76)
	h, why := checkRecord(rec, 0)
	if why != "" || h.lsn != 77 || h.synced != 76 || int(h.length) != len(rec)-recHeaderSize {
		t.Fatalf("header %+v, %q", h, why)
	}
	p := rec[recHeaderSize:]
	d := decoder{p: p}
	var got []decOp
	var op decOp
	for d.next(&op) {
		got = append(got, op)
	}
	if d.err != nil || len(got) != 9 {
		t.Fatalf("decoded %d ops, err %v", len(got), d.err)
	}
	if a := got[1]; a.seq != 1<<40 || string(a.meta) != "meta" || string(a.data) != "data" || a.dcrc != crc([]byte("data")) ||
		string(p[a.dataOff:a.dataOff+4]) != "data" {
		t.Fatalf("append decoded as %+v", a)
	}
	if m := got[8]; m.kind != opMove || m.fromSeg != 3 || m.fromOff != 4096 || m.dcrc != 42 || string(m.data) != "moved" {
		t.Fatalf("move decoded as %+v", m)
	}
	// Every truncation of the payload is an error, never a panic.
	for n := range len(p) {
		d := decoder{p: p[:n]}
		for d.next(&op) {
		}
		_ = d.err
	}
	if _, err := encodeBatch(nil, &store.Batch{Ops: []store.Op{{Kind: 99}}}); err == nil {
		t.Fatal("unknown op kind accepted")
	}
}

// TestEncodeBatchGrowsOnce checks batchSizeBound against every op kind
// with the largest varints: the encoding never outgrows the buffer
// encodeBatch reserved for it.
func TestEncodeBatchGrowsOnce(t *testing.T) {
	max := ^uint64(0)
	data := make([]byte, 300)
	ops := []store.Op{
		{Kind: store.OpPutEntity, EntityID: max, Name: "queue", Data: data},
		{Kind: store.OpAppend, EntityID: max, Seq: max, Meta: data[:200], Data: data},
		{Kind: store.OpSetMeta, EntityID: max, Seq: max, Meta: data[:130]},
		{Kind: store.OpRewrite, EntityID: max, Seq: max, Meta: data[:1], Data: data},
		{Kind: store.OpRemove, EntityID: max, Seq: max},
		{Kind: store.OpPutValue, EntityID: max, Key: "key", Data: data},
		{Kind: store.OpDeleteValue, EntityID: max, Key: "key"},
		{Kind: store.OpDeleteEntity, EntityID: max},
	}
	for i := range ops {
		for _, b := range []*store.Batch{{Ops: ops[i : i+1]}, {Ops: ops[:i+1]}} {
			prefix := []byte("prefix")
			rec, err := encodeBatch(prefix, b)
			if err != nil {
				t.Fatal(err)
			}
			if got, bound := len(rec)-len(prefix)-recHeaderSize, batchSizeBound(b, nil); got > bound {
				t.Fatalf("ops %v: payload %d bytes over the bound %d", b.Ops[0].Kind, got, bound)
			}
			if string(rec[:len(prefix)]) != "prefix" {
				t.Fatal("prefix lost")
			}
		}
	}
	// A buffer with room for the bound is never replaced.
	b := &store.Batch{Ops: make([]store.Op, 200)}
	for i := range b.Ops {
		b.Ops[i] = store.Op{Kind: store.OpAppend, EntityID: 3, Seq: uint64(i + 1), Meta: data[:20], Data: data}
	}
	buf := make([]byte, 0, recHeaderSize+batchSizeBound(b, nil))
	if rec, _ := encodeBatch(buf, b); &rec[0] != &buf[:1][0] {
		t.Fatal("encoding a 200-op batch outgrew the room reserved for it")
	}
}

func FuzzDecodePayload(f *testing.F) {
	rec, _ := encodeBatch(nil, &store.Batch{Ops: []store.Op{
		{Kind: store.OpAppend, EntityID: 1, Seq: 2, Meta: []byte("m"), Data: []byte("d")},
		{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: []byte("v")},
	}})
	f.Add(rec[recHeaderSize:])
	b := &store.Batch{Ops: []store.Op{
		{Kind: store.OpAppend, EntityID: 1, Seq: 3, Meta: []byte("m"), Data: make([]byte, 10)},
		{Kind: store.OpRewrite, EntityID: 1, Seq: 2, Meta: []byte("r"), Data: make([]byte, 10)},
	}}
	blobRec, _ := encodeBatchBlobs(nil, b, []blobRef{{id: 7, size: 10, crc: 99}, {id: 8, size: 10, crc: 98}}, nil)
	f.Add(blobRec[recHeaderSize:])
	f.Fuzz(func(t *testing.T, p []byte) {
		d := decoder{p: p}
		var op decOp
		for d.next(&op) {
			if op.dataOff+len(op.data) > len(p) {
				t.Fatal("data out of bounds")
			}
		}
	})
}
