package broker

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

func TestRecSize(t *testing.T) {
	if n := unsafe.Sizeof(rec{}); n != 48 {
		t.Fatalf("rec is %d bytes; the memory budget assumes 48", n)
	}
}

// TestIndexModel drives the index with random inserts (mostly appends, some
// in the middle), removals and lookups and checks it against a sorted
// slice.
func TestIndexModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var x index
	var model []int64
	next := int64(1)
	// insert must return the record get finds, whichever path it took.
	insert := func(seq int64) {
		t.Helper()
		got := x.insert(rec{seq: seq, size: int32(seq)})
		if want := x.get(seq); got != want || got.seq != seq || got.size != int32(seq) {
			t.Fatalf("insert(%d) returned %p (%+v), get finds %p", seq, got, *got, want)
		}
	}
	check := func() {
		t.Helper()
		var got []int64
		x.ascend(0, func(rc *rec) bool { got = append(got, rc.seq); return true })
		if !slices.Equal(got, model) || x.Len() != len(model) {
			t.Fatalf("index holds %d records, model %d", len(got), len(model))
		}
	}
	for step := range 60000 {
		switch op := r.IntN(10); {
		case op < 5: // append
			insert(next)
			model = append(model, next)
			next += 1 + int64(r.IntN(3))
		case op < 6 && next > 1: // insert in the middle (a dead-letter move)
			s := r.Int64N(next)
			if i, found := slices.BinarySearch(model, s); !found {
				insert(s)
				model = slices.Insert(model, i, s)
			}
		case op < 7 && next > 1: // insert just behind the tail (fan-out copies)
			s := next - 1 - r.Int64N(min(next-1, 600))
			if i, found := slices.BinarySearch(model, s); !found {
				insert(s)
				model = slices.Insert(model, i, s)
			}
		case len(model) > 0: // remove, biased to the head
			var i int
			if r.IntN(2) == 0 {
				i = r.IntN(min(len(model), 10))
			} else {
				i = r.IntN(len(model))
			}
			if !x.remove(model[i]) {
				t.Fatalf("remove(%d) failed", model[i])
			}
			if x.remove(model[i]) {
				t.Fatal("double remove succeeded")
			}
			model = slices.Delete(model, i, i+1)
		}
		if len(model) > 0 && step%97 == 0 {
			s := model[r.IntN(len(model))]
			if rc := x.get(s); rc == nil || rc.seq != s || rc.size != int32(s) {
				t.Fatalf("get(%d) = %+v", s, rc)
			}
			from := s - int64(r.IntN(3))
			var got []int64
			x.ascend(from, func(rc *rec) bool { got = append(got, rc.seq); return len(got) < 5 })
			i, _ := slices.BinarySearch(model, from)
			if want := model[i:min(i+5, len(model))]; !slices.Equal(got, want) {
				t.Fatalf("ascend(%d) = %v, want %v", from, got, want)
			}
		}
		if step%10000 == 0 {
			check()
		}
	}
	check()
	for _, s := range slices.Clone(model) {
		x.remove(s)
	}
	if x.Len() != 0 || len(x.blocks) != 0 {
		t.Fatalf("emptied index keeps %d records in %d blocks", x.Len(), len(x.blocks))
	}
}

// TestIndexSparseMemory: stragglers left after a drain must not pin full
// blocks.
func TestIndexSparseMemory(t *testing.T) {
	var x index
	const n = 256 * 400
	for s := int64(1); s <= n; s++ {
		x.insert(rec{seq: s})
	}
	for s := int64(1); s <= n; s++ {
		if s%100 != 0 {
			x.remove(s)
		}
	}
	capRecs := 0
	for _, b := range x.blocks {
		capRecs += cap(b.recs)
	}
	if live := x.Len(); capRecs > 8*live+blockCap {
		t.Fatalf("%d live records hold capacity for %d", live, capRecs)
	}
}

func TestSeqHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	var h seqHeap
	var all []int64
	for range 1000 {
		v := r.Int64N(500)
		h.push(v)
		all = append(all, v)
	}
	slices.Sort(all)
	for i, want := range all {
		if got := h.pop(); got != want {
			t.Fatalf("pop %d = %d, want %d", i, got, want)
		}
	}
}

func TestMetaRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		sub SubQueue
		r   rec
	}{
		{SubQueueMain, rec{dc: 0, enq: 1, ttl: 0, state: StateActive}},
		{SubQueueDeadLetter, rec{dc: 7, enq: -5, ttl: 1 << 62, state: StateDeferred}},
		{SubQueueTransferDeadLetter, rec{dc: 1<<32 - 1, enq: 1 << 62, ttl: 1, state: StateScheduled, flags: flagWasScheduled}},
	} {
		b := appendMeta(nil, tc.sub, &tc.r)
		var got rec
		sub, err := decodeMeta(b, &got)
		if err != nil || sub != tc.sub || got != tc.r {
			t.Fatalf("round trip of %+v: %+v %v %v", tc.r, got, sub, err)
		}
		if len(b) > 24 {
			t.Fatalf("meta is %d bytes", len(b))
		}
		for i := range len(b) {
			if _, err := decodeMeta(b[:i], &got); err == nil {
				t.Fatalf("truncated meta (%d of %d bytes) decoded", i, len(b))
			}
		}
	}
	for _, bad := range [][]byte{{2, 0, 0, 0, 0, 0}, {1, 3, 0, 0, 0, 0}, {1, 12, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 1}, {1, 0, 0, 0, 0, 0, 0}} {
		var r rec
		if _, err := decodeMeta(bad, &r); err == nil {
			t.Fatalf("bad meta %x decoded", bad)
		}
	}
}

// TestIndexOutOfOrderTailStaysDense: records arriving slightly out of
// order at the tail (concurrent fan-outs publishing a subscription's
// copies) keep blocks full instead of splitting them in halves.
func TestIndexOutOfOrderTailStaysDense(t *testing.T) {
	var x index
	const n = 256 * 100
	r := rand.New(rand.NewPCG(2, 2))
	for base := int64(1); base <= n; base += 8 {
		group := []int64{base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 6, base + 7}
		r.Shuffle(len(group), func(i, j int) { group[i], group[j] = group[j], group[i] })
		for _, s := range group {
			x.insert(rec{seq: s})
		}
	}
	var prev int64
	x.ascend(0, func(r *rec) bool {
		if r.seq != prev+1 {
			t.Fatalf("seq %d after %d", r.seq, prev)
		}
		prev = r.seq
		return true
	})
	if x.Len() != n || len(x.blocks) > n/blockCap*11/10+1 {
		t.Fatalf("%d records in %d blocks (full blocks would be %d)", x.Len(), len(x.blocks), n/blockCap)
	}
}
