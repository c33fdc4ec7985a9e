package broker

import (
	"slices"
	"sort"
)

// index is the ordered set of one sub-queue's messages, keyed by sequence
// number: a one-level B+tree. Records sit by value in blocks of at most
// blockCap, blocks are ordered and never overlap, and a removal leaves a
// tombstone (flagDead) that is compacted away once a block is half dead.
//
//	blocks: [ b0: 1 2 3 ✝ 5 … ] [ b1: 260 261 … ] … [ bn: … last ]
//
// Sends append to the last block; a dead-letter move may insert in the
// middle (splitting a full block). A *rec returned by get or passed to
// ascend stays valid only until the next insert or remove.
//
// Memory: 48 bytes per record plus ~1/256 of a pointer; a block that drops
// below a quarter of its capacity is reallocated smaller and merged with
// its successor when both fit in half a block, so long-lived stragglers
// (deferred, DLQ) do not pin mostly empty blocks.
type index struct {
	blocks []*block
	n      int // live records
}

const blockCap = 256

type block struct {
	recs []rec // ordered by seq; may hold tombstones
	live int
}

func (x *index) Len() int { return x.n }

// blockFor returns the index of the block that holds or would hold seq:
// the last block whose first seq is <= seq, or 0.
func (x *index) blockFor(seq int64) int {
	i := sort.Search(len(x.blocks), func(i int) bool { return x.blocks[i].recs[0].seq > seq })
	if i > 0 {
		i--
	}
	return i
}

func searchRecs(recs []rec, seq int64) int {
	lo, hi := 0, len(recs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if recs[m].seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// get returns the live record seq, or nil.
func (x *index) get(seq int64) *rec {
	if len(x.blocks) == 0 {
		return nil
	}
	b := x.blocks[x.blockFor(seq)]
	i := searchRecs(b.recs, seq)
	if i < len(b.recs) && b.recs[i].seq == seq && b.recs[i].flags&flagDead == 0 {
		return &b.recs[i]
	}
	return nil
}

// lastSeq is the highest sequence number held (live or not), or 0.
func (x *index) lastSeq() int64 {
	if len(x.blocks) == 0 {
		return 0
	}
	b := x.blocks[len(x.blocks)-1]
	return b.recs[len(b.recs)-1].seq
}

// insert adds r and returns where it now sits (valid until the next
// insert or remove). A live record with the same seq is replaced.
func (x *index) insert(r rec) *rec {
	r.flags &^= flagDead
	if len(x.blocks) == 0 || r.seq > x.lastSeq() {
		return x.appendTail(r)
	}
	bi := x.blockFor(r.seq)
	b := x.blocks[bi]
	i := searchRecs(b.recs, r.seq)
	if i < len(b.recs) && b.recs[i].seq == r.seq {
		if b.recs[i].flags&flagDead != 0 {
			b.live++
			x.n++
		}
		b.recs[i] = r
		return &b.recs[i]
	}
	if len(b.recs) >= blockCap {
		switch {
		case b.live < len(b.recs):
			b.compact()
		case bi == len(x.blocks)-1 && i > blockCap/2:
			// Slightly out of order at the tail (concurrent sends to a
			// topic publish their copies so): move only the records above
			// r to a new tail block, so that this one stays full.
			x.splitAt(bi, i)
		case bi < len(x.blocks)-1 && i > blockCap/2 && len(x.blocks[bi+1].recs) < blockCap:
			// Likewise just behind the tail: spill the last record into
			// the next block, which has room.
			// (If r itself goes after this block's last record, it is r
			// that goes there.)
			nb := x.blocks[bi+1]
			if i == len(b.recs) {
				nb.recs = slices.Insert(nb.recs, 0, r)
				nb.live++
				x.n++
				return &nb.recs[0]
			}
			last := b.recs[len(b.recs)-1]
			b.recs = b.recs[:len(b.recs)-1]
			b.live--
			nb.recs = slices.Insert(nb.recs, 0, last)
			nb.live++
		default:
			x.split(bi)
			if r.seq >= x.blocks[bi+1].recs[0].seq {
				bi++
			}
		}
		b = x.blocks[bi]
		i = searchRecs(b.recs, r.seq)
	}
	b.recs = slices.Insert(b.recs, i, r)
	b.live++
	x.n++
	return &b.recs[i]
}

func (x *index) appendTail(r rec) *rec {
	var b *block
	if len(x.blocks) > 0 {
		b = x.blocks[len(x.blocks)-1]
	}
	if b == nil || len(b.recs) >= blockCap {
		b = &block{recs: make([]rec, 0, blockCap)}
		x.blocks = append(x.blocks, b)
	}
	b.recs = append(b.recs, r)
	b.live++
	x.n++
	return &b.recs[len(b.recs)-1]
}

// split moves the upper half of full block bi into a new block after it.
func (x *index) split(bi int) { x.splitAt(bi, len(x.blocks[bi].recs)/2) }

// splitAt moves the records of block bi from position h on into a new
// block after it.
func (x *index) splitAt(bi, h int) {
	b := x.blocks[bi]
	nb := &block{recs: make([]rec, 0, blockCap)}
	nb.recs = append(nb.recs, b.recs[h:]...)
	for i := range nb.recs {
		if nb.recs[i].flags&flagDead == 0 {
			nb.live++
		}
	}
	clear(b.recs[h:])
	b.recs = b.recs[:h]
	b.live -= nb.live
	x.blocks = slices.Insert(x.blocks, bi+1, nb)
}

// remove deletes seq and reports whether it was there.
func (x *index) remove(seq int64) bool {
	if len(x.blocks) == 0 {
		return false
	}
	bi := x.blockFor(seq)
	b := x.blocks[bi]
	i := searchRecs(b.recs, seq)
	if i >= len(b.recs) || b.recs[i].seq != seq || b.recs[i].flags&flagDead != 0 {
		return false
	}
	b.recs[i].flags |= flagDead
	b.live--
	x.n--
	switch {
	case b.live == 0:
		x.blocks[bi] = nil
		if bi == 0 {
			x.blocks = x.blocks[1:]
		} else {
			x.blocks = slices.Delete(x.blocks, bi, bi+1)
		}
		if len(x.blocks) == 0 {
			x.blocks = nil
		}
	case b.live*2 < len(b.recs) && len(b.recs) >= 16 && bi < len(x.blocks)-1:
		// Compact interior blocks only: the tail block is still growing.
		b.compact()
		if nb := x.blocks[bi+1]; b.live+nb.live <= blockCap/2 {
			x.merge(bi)
		}
		if bi > 0 && x.blocks[bi-1].live+b.live <= blockCap/2 {
			x.merge(bi - 1)
		}
	}
	return true
}

// compact drops tombstones, reallocating when the block got sparse.
func (b *block) compact() {
	inPlace := b.live >= cap(b.recs)/4
	keep := b.recs[:0]
	if !inPlace {
		keep = make([]rec, 0, max(b.live*2, 8))
	}
	for _, r := range b.recs {
		if r.flags&flagDead == 0 {
			keep = append(keep, r)
		}
	}
	if inPlace {
		clear(b.recs[len(keep):])
	}
	b.recs = keep
}

// merge joins block bi+1 into block bi (both compacted).
func (x *index) merge(bi int) {
	b, nb := x.blocks[bi], x.blocks[bi+1]
	b.compact()
	nb.compact()
	recs := make([]rec, 0, max(len(b.recs)+len(nb.recs), 8))
	recs = append(recs, b.recs...)
	recs = append(recs, nb.recs...)
	b.recs = recs
	b.live += nb.live
	x.blocks = slices.Delete(x.blocks, bi+1, bi+2)
}

// ascend calls fn for every live record with seq >= from, in order, until
// fn returns false. fn may change the record's fields but not its seq, and
// must not insert or remove.
func (x *index) ascend(from int64, fn func(*rec) bool) {
	if len(x.blocks) == 0 {
		return
	}
	bi := x.blockFor(from)
	i := searchRecs(x.blocks[bi].recs, from)
	for ; bi < len(x.blocks); bi, i = bi+1, 0 {
		recs := x.blocks[bi].recs
		for ; i < len(recs); i++ {
			if recs[i].flags&flagDead != 0 {
				continue
			}
			if !fn(&recs[i]) {
				return
			}
		}
	}
}

// reset drops everything.
func (x *index) reset() { *x = index{} }

// seqHeap is a min-heap of sequence numbers: a sub-queue's "ready" list of
// messages that became available again behind the receive cursor.
type seqHeap []int64

func (h *seqHeap) push(v int64) {
	*h = append(*h, v)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p] <= v {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = v
}

func (h *seqHeap) min() int64 { return (*h)[0] }

func (h *seqHeap) pop() int64 {
	s := *h
	top := s[0]
	n := len(s) - 1
	v := s[n]
	s = s[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s[c+1] < s[c] {
			c++
		}
		if v <= s[c] {
			break
		}
		s[i] = s[c]
		i = c
	}
	if n > 0 {
		s[i] = v
	}
	if n == 0 && cap(s) > 1024 {
		s = nil
	}
	*h = s
	return top
}
