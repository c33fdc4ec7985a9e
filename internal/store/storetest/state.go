package storetest

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
)

// State is the whole content of a store, as Recover and ReadData show it.
// nil and empty byte slices are not distinguished.
type State struct {
	Entities map[uint64]*EntityState
}

// EntityState is one entity with its messages and values.
type EntityState struct {
	Name    string
	Spec    []byte
	LastSeq uint64
	Msgs    map[uint64]MsgState
	Values  map[string][]byte
}

// MsgState is one message.
type MsgState struct {
	Meta, Data []byte
}

// NewState returns an empty State.
func NewState() *State { return &State{Entities: make(map[uint64]*EntityState)} }

// Messages counts the messages of all entities.
func (s *State) Messages() int {
	n := 0
	for _, e := range s.Entities {
		n += len(e.Msgs)
	}
	return n
}

// Clone returns a deep copy.
func (s *State) Clone() *State {
	c := NewState()
	for id, e := range s.Entities {
		ce := &EntityState{Name: e.Name, Spec: bytes.Clone(e.Spec), LastSeq: e.LastSeq,
			Msgs: make(map[uint64]MsgState, len(e.Msgs)), Values: make(map[string][]byte, len(e.Values))}
		for seq, m := range e.Msgs {
			ce.Msgs[seq] = MsgState{Meta: bytes.Clone(m.Meta), Data: bytes.Clone(m.Data)}
		}
		for k, v := range e.Values {
			ce.Values[k] = bytes.Clone(v)
		}
		c.Entities[id] = ce
	}
	return c
}

// Apply applies b to s following the store package's operation rules. It
// is the reference semantics the suite checks implementations against.
func (s *State) Apply(b *store.Batch) {
	for _, op := range b.Ops {
		e := s.Entities[op.EntityID]
		switch op.Kind {
		case store.OpPutEntity:
			if e != nil {
				e.Name, e.Spec = op.Name, bytes.Clone(op.Data)
			} else {
				s.Entities[op.EntityID] = &EntityState{Name: op.Name, Spec: bytes.Clone(op.Data),
					Msgs: map[uint64]MsgState{}, Values: map[string][]byte{}}
			}
			continue
		}
		if e == nil {
			continue
		}
		switch op.Kind {
		case store.OpDeleteEntity:
			delete(s.Entities, op.EntityID)
		case store.OpAppend:
			e.Msgs[op.Seq] = MsgState{Meta: bytes.Clone(op.Meta), Data: fullData(&op)}
			e.LastSeq = max(e.LastSeq, op.Seq)
		case store.OpSetMeta:
			if m, ok := e.Msgs[op.Seq]; ok {
				e.Msgs[op.Seq] = MsgState{Meta: bytes.Clone(op.Meta), Data: m.Data}
			}
		case store.OpRewrite:
			if _, ok := e.Msgs[op.Seq]; ok {
				e.Msgs[op.Seq] = MsgState{Meta: bytes.Clone(op.Meta), Data: fullData(&op)}
			}
		case store.OpRemove:
			delete(e.Msgs, op.Seq)
		case store.OpPutValue:
			e.Values[op.Key] = bytes.Clone(op.Data)
		case store.OpDeleteValue:
			delete(e.Values, op.Key)
		}
	}
}

// fullData is op's Data followed by its More or its Tail's bytes, a
// copy. A Tail that cannot be read is a broken test: it panics.
func fullData(op *store.Op) []byte {
	if !op.HasRest() {
		return bytes.Clone(op.Data)
	}
	d, err := op.ReadTail()
	if err != nil {
		panic(fmt.Sprintf("storetest: reading an op's Tail: %v", err))
	}
	return bytes.Clone(d)
}

// Dump reads the whole state of s through Recover and ReadData, checking
// on the way that Recover keeps its documented order and that every
// recovered message's Data can be read back with the announced Size.
func Dump(s store.Store) (*State, error) {
	st := NewState()
	var (
		phase   int
		lastEnt uint64
		lastMsg [2]uint64
		lastVal struct {
			id  uint64
			key string
		}
		seenEnt, seenMsg, seenVal bool
	)
	err := s.Recover(store.Visitor{
		Entity: func(e store.Entity) error {
			if phase > 0 {
				return fmt.Errorf("entity %d visited after messages or values", e.ID)
			}
			if seenEnt && e.ID <= lastEnt {
				return fmt.Errorf("entity %d visited after %d", e.ID, lastEnt)
			}
			seenEnt, lastEnt = true, e.ID
			st.Entities[e.ID] = &EntityState{Name: e.Name, Spec: bytes.Clone(e.Spec), LastSeq: e.LastSeq,
				Msgs: map[uint64]MsgState{}, Values: map[string][]byte{}}
			return nil
		},
		Message: func(m store.Message) error {
			if phase > 1 {
				return fmt.Errorf("message %d/%d visited after values", m.EntityID, m.Seq)
			}
			phase = 1
			k := [2]uint64{m.EntityID, m.Seq}
			if seenMsg && (k[0] < lastMsg[0] || k[0] == lastMsg[0] && k[1] <= lastMsg[1]) {
				return fmt.Errorf("message %v visited after %v", k, lastMsg)
			}
			seenMsg, lastMsg = true, k
			e := st.Entities[m.EntityID]
			if e == nil {
				return fmt.Errorf("message %d/%d of unknown entity", m.EntityID, m.Seq)
			}
			if m.Seq > e.LastSeq {
				return fmt.Errorf("message %d/%d above lastSeq %d", m.EntityID, m.Seq, e.LastSeq)
			}
			e.Msgs[m.Seq] = MsgState{Meta: bytes.Clone(m.Meta), Data: make([]byte, m.Size)}
			return nil
		},
		Value: func(v store.Value) error {
			phase = 2
			if seenVal && (v.EntityID < lastVal.id || v.EntityID == lastVal.id && v.Key <= lastVal.key) {
				return fmt.Errorf("value %d/%q visited after %d/%q", v.EntityID, v.Key, lastVal.id, lastVal.key)
			}
			seenVal = true
			lastVal.id, lastVal.key = v.EntityID, v.Key
			e := st.Entities[v.EntityID]
			if e == nil {
				return fmt.Errorf("value %d/%q of unknown entity", v.EntityID, v.Key)
			}
			e.Values[v.Key] = bytes.Clone(v.Value)
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	for id, e := range st.Entities {
		for seq, m := range e.Msgs {
			data, err := s.ReadData(id, seq)
			if err != nil {
				return nil, fmt.Errorf("ReadData(%d, %d): %w", id, seq, err)
			}
			if len(data) != len(m.Data) {
				return nil, fmt.Errorf("ReadData(%d, %d): %d bytes, Recover said %d", id, seq, len(data), len(m.Data))
			}
			e.Msgs[seq] = MsgState{Meta: m.Meta, Data: data}
		}
	}
	return st, nil
}

// MustDump is Dump that fails the test on error.
func MustDump(t testing.TB, s store.Store) *State {
	t.Helper()
	st, err := Dump(s)
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return st
}

// Diff describes the differences between want and got ("" if equal).
func Diff(want, got *State) string {
	var b strings.Builder
	const maxLines = 20
	lines := 0
	add := func(format string, args ...any) {
		if lines < maxLines {
			fmt.Fprintf(&b, format+"\n", args...)
		}
		lines++
	}
	ids := slices.Sorted(maps.Keys(want.Entities))
	for id := range got.Entities {
		if want.Entities[id] == nil {
			add("entity %d: unexpected", id)
		}
	}
	for _, id := range ids {
		w, g := want.Entities[id], got.Entities[id]
		if g == nil {
			add("entity %d: missing", id)
			continue
		}
		if w.Name != g.Name || !bytes.Equal(w.Spec, g.Spec) || w.LastSeq != g.LastSeq {
			add("entity %d: want {%q %q last %d}, got {%q %q last %d}", id, w.Name, w.Spec, w.LastSeq, g.Name, g.Spec, g.LastSeq)
		}
		for _, seq := range slices.Sorted(maps.Keys(w.Msgs)) {
			gm, ok := g.Msgs[seq]
			wm := w.Msgs[seq]
			switch {
			case !ok:
				add("message %d/%d: missing", id, seq)
			case !bytes.Equal(wm.Meta, gm.Meta):
				add("message %d/%d: meta want %q, got %q", id, seq, short(wm.Meta), short(gm.Meta))
			case !bytes.Equal(wm.Data, gm.Data):
				add("message %d/%d: data want %q (%d B), got %q (%d B)", id, seq, short(wm.Data), len(wm.Data), short(gm.Data), len(gm.Data))
			}
		}
		for seq := range g.Msgs {
			if _, ok := w.Msgs[seq]; !ok {
				add("message %d/%d: unexpected", id, seq)
			}
		}
		for k, wv := range w.Values {
			gv, ok := g.Values[k]
			if !ok {
				add("value %d/%q: missing", id, k)
			} else if !bytes.Equal(wv, gv) {
				add("value %d/%q: want %q, got %q", id, k, short(wv), short(gv))
			}
		}
		for k := range g.Values {
			if _, ok := w.Values[k]; !ok {
				add("value %d/%q: unexpected", id, k)
			}
		}
	}
	if lines > maxLines {
		fmt.Fprintf(&b, "... and %d more differences\n", lines-maxLines)
	}
	return b.String()
}

func short(b []byte) []byte {
	if len(b) > 24 {
		return b[:24]
	}
	return b
}

// Gen makes random batches that exercise every operation, aimed mostly at
// entities and messages that exist in the model so that few ops are
// no-ops. It is deterministic for a given seed.
type Gen struct {
	Rng *rand.Rand
	// MaxData bounds the Data length of appended and rewritten messages.
	MaxData int
	// MaxLive, when positive, caps the messages of an entity: an append
	// drawn for an entity that already holds MaxLive of them removes its
	// oldest (mostly) or a random one instead. Live data then stays small
	// while the log keeps growing, as in a queue that is being drained,
	// so old segments die behind the writer. Zero leaves the mix (and the
	// batches a seed makes) as they always were.
	MaxLive int
	// Split, when set, cuts the Data of each append and rewrite at a
	// random point into Data and More (store.Op.More), the second piece
	// sometimes empty. False leaves the batches a seed makes as they
	// always were.
	Split  bool
	nextID uint64
}

// split cuts op's Data into Data and More if g.Split is set.
func (g *Gen) split(op store.Op) store.Op {
	if g.Split {
		at := g.Rng.Intn(len(op.Data) + 1)
		op.Data, op.More = op.Data[:at:at], op.Data[at:]
	}
	return op
}

// Batch returns a random batch of 1..maxOps operations, valid against
// model (which Batch does not modify).
func (g *Gen) Batch(model *State, maxOps int) *store.Batch {
	r := g.Rng
	if g.MaxData == 0 {
		g.MaxData = 300
	}
	// Track what this batch will have created or removed, so later ops in
	// the batch stay mostly meaningful.
	m := model.Clone()
	b := &store.Batch{}
	n := 1 + r.Intn(maxOps)
	ids := func() []uint64 { return slices.Sorted(maps.Keys(m.Entities)) }
	for range n {
		var op store.Op
		all := ids()
		if g.nextID == 0 {
			g.nextID = 1
			for _, id := range all {
				g.nextID = max(g.nextID, id+1)
			}
		}
		p := r.Intn(100)
		switch {
		case len(all) == 0 || p < 3:
			op = store.Op{Kind: store.OpPutEntity, EntityID: g.nextID, Name: fmt.Sprintf("q%d", g.nextID), Data: randBytes(r, 20)}
			g.nextID++
		case p < 4:
			op = store.Op{Kind: store.OpDeleteEntity, EntityID: all[r.Intn(len(all))]}
		case p < 5:
			op = store.Op{Kind: store.OpPutEntity, EntityID: all[r.Intn(len(all))], Name: fmt.Sprintf("renamed%d", r.Intn(9)), Data: randBytes(r, 20)}
		case p < 6:
			// An op on an entity that does not exist: must be a no-op.
			op = store.Op{Kind: store.OpAppend, EntityID: g.nextID + 1000, Seq: 1, Meta: []byte("ghost"), Data: []byte("ghost")}
		default:
			id := all[r.Intn(len(all))]
			e := m.Entities[id]
			seqs := slices.Sorted(maps.Keys(e.Msgs))
			pick := func() uint64 {
				if len(seqs) == 0 || r.Intn(20) == 0 {
					return uint64(r.Intn(int(e.LastSeq) + 2)) // maybe missing
				}
				if r.Intn(2) == 0 {
					return seqs[r.Intn(min(len(seqs), 4))] // near the head, like a queue
				}
				return seqs[r.Intn(len(seqs))]
			}
			q := r.Intn(100)
			switch {
			case q < 45 && g.MaxLive > 0 && len(seqs) >= g.MaxLive:
				seq := seqs[0]
				if r.Intn(4) == 0 {
					seq = seqs[r.Intn(len(seqs))]
				}
				op = store.Op{Kind: store.OpRemove, EntityID: id, Seq: seq}
			case q < 45:
				seq := e.LastSeq + 1 + uint64(r.Intn(2))
				op = g.split(store.Op{Kind: store.OpAppend, EntityID: id, Seq: seq, Meta: randBytes(r, 40), Data: randBytes(r, g.MaxData)})
			case q < 60:
				op = store.Op{Kind: store.OpSetMeta, EntityID: id, Seq: pick(), Meta: randBytes(r, 40)}
			case q < 65:
				op = g.split(store.Op{Kind: store.OpRewrite, EntityID: id, Seq: pick(), Meta: randBytes(r, 40), Data: randBytes(r, g.MaxData)})
			case q < 90:
				op = store.Op{Kind: store.OpRemove, EntityID: id, Seq: pick()}
			case q < 96:
				op = store.Op{Kind: store.OpPutValue, EntityID: id, Key: fmt.Sprintf("k%d", r.Intn(5)), Data: randBytes(r, 50)}
			default:
				op = store.Op{Kind: store.OpDeleteValue, EntityID: id, Key: fmt.Sprintf("k%d", r.Intn(6))}
			}
		}
		b.Add(op)
		m.Apply(&store.Batch{Ops: []store.Op{op}})
	}
	return b
}

func randBytes(r *rand.Rand, maxLen int) []byte {
	b := make([]byte, r.Intn(maxLen+1))
	r.Read(b)
	return b
}
