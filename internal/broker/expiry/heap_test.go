package expiry

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func sorted(es []Entry) []Entry {
	s := slices.Clone(es)
	slices.SortFunc(s, func(a, b Entry) int {
		if less(&a, &b) {
			return -1
		}
		if less(&b, &a) {
			return 1
		}
		return 0
	})
	return s
}

func drain(h *Heap) []Entry {
	var out []Entry
	for h.Len() > 0 {
		out = append(out, h.Pop())
	}
	return out
}

func TestHeapOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Heap
	var all []Entry
	for i := range 5000 {
		e := Entry{At: r.Int64N(1000), ID: int64(i), Kind: uint8(r.IntN(3))}
		all = append(all, e)
		h.Push(e)
	}
	if got, want := drain(&h), sorted(all); !slices.Equal(got, want) {
		t.Fatal("pop order differs from sorted order")
	}
	if _, ok := h.Min(); ok {
		t.Fatal("Min on empty heap reported an entry")
	}
	if _, ok := h.Next(); ok {
		t.Fatal("Next on empty heap reported a deadline")
	}
}

func TestHeapInitAndFilter(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var all []Entry
	for i := range 3000 {
		all = append(all, Entry{At: r.Int64N(500), ID: int64(i)})
	}
	var h Heap
	h.Init(slices.Clone(all))
	h.Filter(func(e Entry) bool { return e.ID%3 != 0 })
	var want []Entry
	for _, e := range all {
		if e.ID%3 != 0 {
			want = append(want, e)
		}
	}
	if got := drain(&h); !slices.Equal(got, sorted(want)) {
		t.Fatal("Init+Filter order wrong")
	}
}

func TestPopDue(t *testing.T) {
	var h Heap
	for i := range 10 {
		h.Push(Entry{At: int64(i * 10), ID: int64(i)})
	}
	var got []int64
	n := h.PopDue(45, 0, func(e Entry) {
		got = append(got, e.ID)
		if e.ID == 0 {
			h.Push(Entry{At: 1, ID: 100}) // already due: popped by this call
		}
	})
	if n != 6 || !slices.Equal(got, []int64{0, 100, 1, 2, 3, 4}) {
		t.Fatalf("PopDue = %d %v", n, got)
	}
	if at, _ := h.Next(); at != 50 {
		t.Fatalf("Next = %d, want 50", at)
	}
	if n := h.PopDue(1000, 2, func(Entry) {}); n != 2 || h.Len() != 3 {
		t.Fatalf("PopDue with max: popped %d, left %d", n, h.Len())
	}
}

func BenchmarkPushPop(b *testing.B) {
	var h Heap
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 1 << 16 {
		h.Push(Entry{At: r.Int64N(1 << 30), ID: int64(i)})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.Push(Entry{At: r.Int64N(1 << 30), ID: int64(i)})
		h.Pop()
	}
}

func TestInitSmall(t *testing.T) {
	for n := range 3 {
		var h Heap
		items := make([]Entry, n)
		for i := range items {
			items[i] = Entry{At: int64(n - i)}
		}
		h.Init(items)
		if h.Len() != n {
			t.Fatalf("Init(%d items): Len %d", n, h.Len())
		}
		h.Filter(func(Entry) bool { return true })
		if got := drain(&h); len(got) != n {
			t.Fatalf("drained %d of %d", len(got), n)
		}
	}
}
