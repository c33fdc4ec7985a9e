package filestore

import (
	"maps"
	"slices"
	"sort"
)

// entry locates one live message. It holds no pointers, so a chunk's
// entries are a single allocation the garbage collector does not scan.
type entry struct {
	seq  uint64
	seg  uint32 // segment holding Data
	off  uint32 // offset of Data in that segment
	size uint32 // len(Data)
	crc  uint32 // CRC-32C of Data, checked by ReadData and compaction
	moff uint32 // Meta is chunk.arena[moff : moff+mlen]
	mlen uint32
}

// chunkCap is the most entries a chunk holds.
const chunkCap = 256

// chunk is a run of an entity's messages, sorted by seq, with their Metas
// packed in one arena. Chunks are shared with snapshots: a chunk whose gen
// is older than the index's gen may be referenced by a snapshot and is
// copied before it is changed (copy on write).
type chunk struct {
	gen   uint64
	ents  []entry
	arena []byte
	dead  int // arena bytes no entry refers to
}

func (c *chunk) last() uint64 { return c.ents[len(c.ents)-1].seq }

func (c *chunk) meta(i int) []byte {
	e := &c.ents[i]
	return c.arena[e.moff : e.moff+e.mlen : e.moff+e.mlen]
}

// search returns the position of seq in c (or where it would go).
func (c *chunk) search(seq uint64) (int, bool) {
	i := sort.Search(len(c.ents), func(i int) bool { return c.ents[i].seq >= seq })
	return i, i < len(c.ents) && c.ents[i].seq == seq
}

// clone copies c into generation gen, dropping dead arena bytes.
func (c *chunk) clone(gen uint64) *chunk {
	n := &chunk{gen: gen, ents: make([]entry, len(c.ents), max(len(c.ents), 4))}
	copy(n.ents, c.ents)
	total := 0
	for i := range c.ents {
		total += int(c.ents[i].mlen)
	}
	n.arena = make([]byte, 0, total)
	for i := range n.ents {
		e := &n.ents[i]
		m := c.arena[e.moff : e.moff+e.mlen]
		e.moff = uint32(len(n.arena))
		n.arena = append(n.arena, m...)
	}
	return n
}

// compact drops dead arena bytes in place (c must be writable).
func (c *chunk) compact() {
	arena := make([]byte, 0, len(c.arena)-c.dead)
	for i := range c.ents {
		e := &c.ents[i]
		m := c.arena[e.moff : e.moff+e.mlen]
		e.moff = uint32(len(arena))
		arena = append(arena, m...)
	}
	c.arena, c.dead = arena, 0
}

func (c *chunk) setMeta(i int, meta []byte) {
	e := &c.ents[i]
	if len(meta) <= int(e.mlen) {
		copy(c.arena[e.moff:], meta)
		c.dead += int(e.mlen) - len(meta)
		e.mlen = uint32(len(meta))
	} else {
		c.dead += int(e.mlen)
		e.moff, e.mlen = uint32(len(c.arena)), uint32(len(meta))
		c.arena = append(c.arena, meta...)
	}
	c.maybeCompact()
}

func (c *chunk) maybeCompact() {
	if c.dead > 256 && c.dead > len(c.arena)/2 {
		c.compact()
	}
}

// entity is one entity with its messages and values.
type entity struct {
	id      uint64
	name    string
	spec    []byte
	lastSeq uint64
	chunks  []*chunk
	values  map[string][]byte
	nmsgs   int
}

// index is the in-memory state. All access goes through Store.mu.
type index struct {
	gen      uint64 // current copy-on-write generation
	entities map[uint64]*entity
	// Totals, for Stats and the checkpoint size estimate.
	nmsgs     int
	nvalues   int
	dataBytes int64
	metaBytes int64
}

func newIndex() *index { return &index{gen: 1, entities: make(map[uint64]*entity)} }

// findChunk returns the first chunk whose last seq is >= seq.
func (e *entity) findChunk(seq uint64) int {
	return sort.Search(len(e.chunks), func(i int) bool { return e.chunks[i].last() >= seq })
}

// lookup finds message seq without changing anything.
func (e *entity) lookup(seq uint64) (*chunk, int, bool) {
	ci := e.findChunk(seq)
	if ci == len(e.chunks) {
		return nil, 0, false
	}
	c := e.chunks[ci]
	i, ok := c.search(seq)
	return c, i, ok
}

// writable returns chunk ci of e, copying it first if a snapshot may
// share it.
func (ix *index) writable(e *entity, ci int) *chunk {
	c := e.chunks[ci]
	if c.gen != ix.gen {
		c = c.clone(ix.gen)
		e.chunks[ci] = c
	}
	return c
}

// lookupMut finds message seq in a writable chunk.
func (ix *index) lookupMut(e *entity, seq uint64) (*chunk, int, bool) {
	ci := e.findChunk(seq)
	if ci == len(e.chunks) {
		return nil, 0, false
	}
	if _, ok := e.chunks[ci].search(seq); !ok {
		return nil, 0, false
	}
	c := ix.writable(e, ci)
	i, _ := c.search(seq)
	return c, i, true
}

// insert adds message ent (Meta meta) to e. If seq already exists its
// old entry is replaced and returned with replaced set.
func (ix *index) insert(e *entity, ent entry, meta []byte) (old entry, replaced bool) {
	ent.mlen = uint32(len(meta))
	// Fast path: appending past the end, as queues do.
	if n := len(e.chunks); n == 0 || ent.seq > e.chunks[n-1].last() {
		var c *chunk
		if n > 0 && len(e.chunks[n-1].ents) < chunkCap {
			c = ix.writable(e, n-1)
		} else {
			c = &chunk{gen: ix.gen}
			if n > 0 {
				// The entity already filled a chunk: this one will most
				// likely fill too, so it is not grown by doubling.
				c.ents = make([]entry, 0, chunkCap)
				prev := e.chunks[n-1]
				c.arena = make([]byte, 0, len(prev.arena)-prev.dead)
			}
			e.chunks = append(e.chunks, c)
		}
		ent.moff = uint32(len(c.arena))
		c.arena = append(c.arena, meta...)
		c.ents = append(c.ents, ent)
		if len(c.ents) == chunkCap && cap(c.arena) > len(c.arena)+len(c.arena)/8 {
			c.compact() // full chunks rarely grow again: drop append slack
		}
		e.nmsgs++
		ix.count(ent, 1)
		return entry{}, false
	}
	ci := e.findChunk(ent.seq)
	c := ix.writable(e, ci)
	i, found := c.search(ent.seq)
	if found {
		old = c.ents[i]
		ix.count(old, -1)
		c.dead += int(old.mlen)
		ent.moff = uint32(len(c.arena))
		c.arena = append(c.arena, meta...)
		c.ents[i] = ent
		ix.count(ent, 1)
		c.maybeCompact()
		return old, true
	}
	ent.moff = uint32(len(c.arena))
	c.arena = append(c.arena, meta...)
	c.ents = slices.Insert(c.ents, i, ent)
	e.nmsgs++
	ix.count(ent, 1)
	if len(c.ents) > chunkCap {
		ix.split(e, ci)
	}
	return entry{}, false
}

// split halves the over-full chunk ci.
func (ix *index) split(e *entity, ci int) {
	c := e.chunks[ci]
	half := len(c.ents) / 2
	a := &chunk{ents: c.ents[:half:half], arena: c.arena}
	b := &chunk{ents: c.ents[half:], arena: c.arena}
	a, b = a.clone(ix.gen), b.clone(ix.gen)
	e.chunks[ci] = a
	e.chunks = slices.Insert(e.chunks, ci+1, b)
}

// remove deletes message seq and returns its entry.
func (ix *index) remove(e *entity, seq uint64) (entry, bool) {
	ci := e.findChunk(seq)
	if ci == len(e.chunks) {
		return entry{}, false
	}
	if _, ok := e.chunks[ci].search(seq); !ok {
		return entry{}, false
	}
	if len(e.chunks[ci].ents) == 1 {
		old := e.chunks[ci].ents[0]
		e.chunks = slices.Delete(e.chunks, ci, ci+1)
		e.nmsgs--
		ix.count(old, -1)
		return old, true
	}
	c := ix.writable(e, ci)
	i, _ := c.search(seq)
	old := c.ents[i]
	c.ents = slices.Delete(c.ents, i, i+1)
	c.dead += int(old.mlen)
	e.nmsgs--
	ix.count(old, -1)
	// Merge a thin chunk into its successor when both fit in one.
	if len(c.ents) < chunkCap/8 && ci+1 < len(e.chunks) && len(c.ents)+len(e.chunks[ci+1].ents) <= chunkCap/2 {
		next := e.chunks[ci+1]
		m := &chunk{ents: append(slices.Clone(c.ents), next.ents...)}
		for j := range m.ents {
			src := c
			if j >= len(c.ents) {
				src = next
			}
			ent := &m.ents[j]
			meta := src.arena[ent.moff : ent.moff+ent.mlen]
			ent.moff = uint32(len(m.arena))
			m.arena = append(m.arena, meta...)
		}
		m.gen = ix.gen
		e.chunks[ci] = m
		e.chunks = slices.Delete(e.chunks, ci+1, ci+2)
	} else {
		c.maybeCompact()
	}
	return old, true
}

func (ix *index) count(ent entry, sign int) {
	ix.nmsgs += sign
	ix.dataBytes += int64(sign) * int64(ent.size)
	ix.metaBytes += int64(sign) * int64(ent.mlen)
}

// snapEntity is an entity frozen by a snapshot. Its chunks must not be
// changed (the index copies them before writing once its gen moved on).
type snapEntity struct {
	id      uint64
	name    string
	spec    []byte
	lastSeq uint64
	chunks  []*chunk
	values  map[string][]byte // nil unless the snapshot asked for values
	nmsgs   int
}

// snapshot is a consistent, immutable view of the index.
type snapshot struct {
	entities []snapEntity // by ID
	nmsgs    int
}

// snapshot freezes the current state. It is O(entities + chunks (+ values
// if withValues)); afterwards the first change to each chunk copies it.
func (ix *index) snapshot(withValues bool) *snapshot {
	ix.gen++
	s := &snapshot{entities: make([]snapEntity, 0, len(ix.entities)), nmsgs: ix.nmsgs}
	for _, e := range ix.entities {
		se := snapEntity{id: e.id, name: e.name, spec: e.spec, lastSeq: e.lastSeq,
			chunks: slices.Clone(e.chunks), nmsgs: e.nmsgs}
		if withValues {
			se.values = maps.Clone(e.values)
		}
		s.entities = append(s.entities, se)
	}
	slices.SortFunc(s.entities, func(a, b snapEntity) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return s
}
