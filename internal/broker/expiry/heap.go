// Package expiry holds the timer structure of a broker entity: one min-heap
// of deadlines per entity drives lock expiry, message time-to-live and
// scheduled enqueue, instead of a time.Timer per message.
//
// A Heap is a plain data structure: it never reads a clock and starts no
// goroutine. Its owner pushes (deadline, id, kind) entries, asks for the
// earliest deadline, and pops what is due at a "now" it supplies. Entries are
// never removed or updated in place: when the thing an entry refers to
// changes (a lock is renewed, a message is completed), the owner leaves the
// old entry where it is and checks, when it pops, whether it still applies
// ("lazy deletion"). Filter compacts the heap when too many entries have
// gone stale.
//
// Layout: a 4-ary implicit heap in one slice of 24-byte entries. A 4-ary
// heap is shallower than a binary one (log4 n levels), which keeps pushes
// cheap and its sift-down touches adjacent entries.
//
//	index:    0
//	        / | | \
//	       1  2 3  4          children of i: 4i+1 … 4i+4
//	     /|||\ ...            parent of i:   (i-1)/4
package expiry

// Entry is one timer: at At (Unix nanoseconds), something identified by ID
// (a sequence number, an entity id) of the owner-defined Kind is due.
type Entry struct {
	At   int64
	ID   int64
	Kind uint8
}

// Heap is a min-heap of entries ordered by At, then ID, then Kind. The zero
// value is an empty heap ready to use. It is not safe for concurrent use.
type Heap struct {
	items []Entry
}

func less(a, b *Entry) bool {
	if a.At != b.At {
		return a.At < b.At
	}
	if a.ID != b.ID {
		return a.ID < b.ID
	}
	return a.Kind < b.Kind
}

// Len is the number of entries, stale ones included.
func (h *Heap) Len() int { return len(h.items) }

// Push adds an entry.
func (h *Heap) Push(e Entry) {
	h.items = append(h.items, e)
	h.up(len(h.items) - 1)
}

// Min returns the earliest entry without removing it.
func (h *Heap) Min() (Entry, bool) {
	if len(h.items) == 0 {
		return Entry{}, false
	}
	return h.items[0], true
}

// Next returns the earliest deadline, or false if the heap is empty.
func (h *Heap) Next() (int64, bool) {
	if len(h.items) == 0 {
		return 0, false
	}
	return h.items[0].At, true
}

// Pop removes and returns the earliest entry. It panics on an empty heap.
func (h *Heap) Pop() Entry {
	e := h.items[0]
	n := len(h.items) - 1
	h.items[0] = h.items[n]
	h.items = h.items[:n]
	if n > 0 {
		h.down(0)
	}
	if n == 0 && cap(h.items) > 1024 {
		h.items = nil // give back the memory of a burst
	}
	return e
}

// PopDue pops entries with At <= now, in order, passing each to fn, and
// stops after max entries (max <= 0 means no limit). It returns how many it
// popped. fn may Push onto the heap; a pushed entry that is already due is
// popped by the same call.
func (h *Heap) PopDue(now int64, max int, fn func(Entry)) int {
	n := 0
	for len(h.items) > 0 && h.items[0].At <= now && (max <= 0 || n < max) {
		fn(h.Pop())
		n++
	}
	return n
}

// Init replaces the contents with items (taking ownership of the slice) and
// establishes the heap order in O(n). Recovery uses it to avoid n pushes.
func (h *Heap) Init(items []Entry) {
	h.items = items
	if len(items) < 2 {
		return
	}
	for i := (len(items) - 2) / 4; i >= 0; i-- {
		h.down(i)
	}
}

// Filter keeps only the entries for which keep returns true and restores
// the heap order, in O(n). Owners call it when stale entries pile up.
func (h *Heap) Filter(keep func(Entry) bool) {
	kept := h.items[:0]
	for _, e := range h.items {
		if keep(e) {
			kept = append(kept, e)
		}
	}
	clear(h.items[len(kept):])
	if cap(kept) > 1024 && len(kept) < cap(kept)/4 {
		kept = append([]Entry(nil), kept...)
	}
	h.Init(kept)
}

// Reset removes every entry.
func (h *Heap) Reset() { h.items = nil }

func (h *Heap) up(i int) {
	items := h.items
	e := items[i]
	for i > 0 {
		p := (i - 1) / 4
		if !less(&e, &items[p]) {
			break
		}
		items[i] = items[p]
		i = p
	}
	items[i] = e
}

func (h *Heap) down(i int) {
	items := h.items
	n := len(items)
	e := items[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		end := min(c+4, n)
		for j := c + 1; j < end; j++ {
			if less(&items[j], &items[m]) {
				m = j
			}
		}
		if !less(&items[m], &e) {
			break
		}
		items[i] = items[m]
		i = m
	}
	items[i] = e
}
