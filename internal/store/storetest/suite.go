package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
)

// Opener opens the store under test. Called again after the previous
// instance was closed, it reopens the same persistent state.
type Opener func() (store.Store, error)

// Harness describes an implementation to the suite.
type Harness struct {
	// New prepares a fresh, empty store and returns its Opener.
	New func(t testing.TB) Opener
	// Persistent says whether state survives Close and reopen. If false,
	// the Opener is called only once per test.
	Persistent bool
}

// Run runs the whole suite against h.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Empty", testEmpty},
		{"Entities", testEntities},
		{"Messages", testMessages},
		{"Values", testValues},
		{"LastSeqSurvivesRemoval", testLastSeq},
		{"RecoverOrder", testRecoverOrder},
		{"OpsInBatchApplyInOrder", testBatchOrder},
		{"NoOpRules", testNoOps},
		{"DeleteEntity", testDeleteEntity},
		{"CallerMayReuseBatch", testBatchReuse},
		{"ReadDataReturnsCopy", testReadDataCopy},
		{"ReadDataBatch", testReadDataBatch},
		{"LargeData", testLargeData},
		{"DataWithTail", testTail},
		{"DataWithMore", testMore},
		{"MoreRefusedWhereNotAllowed", testMoreRefused},
		{"VisitorErrorAborts", testVisitorError},
		{"VisitorMayCommit", testVisitorCommits},
		{"UnknownOpKindRejected", testUnknownKind},
		{"ConcurrentCommits", testConcurrent},
		{"ManyMessages", testMany},
		{"RandomAgainstModel", testRandom},
		{"ErrClosed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{t: t, h: h, open: h.New(t)}
			e.s = e.mustOpen()
			t.Cleanup(func() {
				if e.s != nil {
					e.s.Close()
				}
			})
			tc.fn(t, e)
		})
	}
}

type env struct {
	t    *testing.T
	h    Harness
	open Opener
	s    store.Store
}

func (e *env) mustOpen() store.Store {
	e.t.Helper()
	s, err := e.open()
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	return s
}

// reopen closes and reopens a persistent store; for others it does
// nothing. It returns whether a reopen happened.
func (e *env) reopen() bool {
	e.t.Helper()
	if !e.h.Persistent {
		return false
	}
	if err := e.s.Close(); err != nil {
		e.t.Fatalf("close: %v", err)
	}
	e.s = nil
	e.s = e.mustOpen()
	return true
}

func (e *env) commit(sync bool, ops ...store.Op) {
	e.t.Helper()
	if err := e.s.Commit(&store.Batch{Ops: ops}, sync); err != nil {
		e.t.Fatalf("commit: %v", err)
	}
}

// check compares the store with want, then (if persistent) reopens and
// compares again.
func (e *env) check(want *State) {
	e.t.Helper()
	if d := Diff(want, MustDump(e.t, e.s)); d != "" {
		e.t.Fatalf("state differs from model:\n%s", d)
	}
	if e.reopen() {
		if d := Diff(want, MustDump(e.t, e.s)); d != "" {
			e.t.Fatalf("after reopen, state differs from model:\n%s", d)
		}
	}
}

func put(id uint64) store.Op {
	return store.Op{Kind: store.OpPutEntity, EntityID: id, Name: fmt.Sprintf("entity-%d", id), Data: []byte(fmt.Sprintf("spec-%d", id))}
}

func appendOp(id, seq uint64, meta, data string) store.Op {
	return store.Op{Kind: store.OpAppend, EntityID: id, Seq: seq, Meta: []byte(meta), Data: []byte(data)}
}

// model applies ops to a model and to the store (as one batch).
func (e *env) both(m *State, sync bool, ops ...store.Op) {
	e.t.Helper()
	e.commit(sync, ops...)
	m.Apply(&store.Batch{Ops: ops})
}

func testEmpty(t *testing.T, e *env) {
	called := false
	err := e.s.Recover(store.Visitor{
		Entity:  func(store.Entity) error { called = true; return nil },
		Message: func(store.Message) error { called = true; return nil },
		Value:   func(store.Value) error { called = true; return nil },
	})
	if err != nil || called {
		t.Fatalf("Recover on empty store: err %v, called %v", err, called)
	}
	if _, err := e.s.ReadData(1, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadData on empty store: %v, want ErrNotFound", err)
	}
	e.commit(true)  // empty batch is fine
	e.commit(false) // also unsynced
	if err := e.s.Commit(nil, true); err != nil {
		t.Fatalf("Commit(nil): %v", err)
	}
	if err := e.s.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	e.check(NewState())
}

func testEntities(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(3), put(1), put(2))
	e.check(m)
	// Replace name and spec; messages and values stay.
	e.both(m, true, appendOp(2, 1, "m", "d"), store.Op{Kind: store.OpPutValue, EntityID: 2, Key: "k", Data: []byte("v")})
	e.both(m, true, store.Op{Kind: store.OpPutEntity, EntityID: 2, Name: "renamed", Data: []byte("newspec")})
	if m.Entities[2].Name != "renamed" || len(m.Entities[2].Msgs) != 1 {
		t.Fatal("model broken")
	}
	e.check(m)
	e.both(m, true, store.Op{Kind: store.OpDeleteEntity, EntityID: 1})
	e.check(m)
	// Empty name and nil spec round-trip as empty.
	e.both(m, true, store.Op{Kind: store.OpPutEntity, EntityID: 9})
	e.check(m)
}

func testMessages(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1), appendOp(1, 1, "meta1", "data1"), appendOp(1, 2, "meta2", "data2"), appendOp(1, 3, "", ""))
	e.check(m)
	e.both(m, true, store.Op{Kind: store.OpSetMeta, EntityID: 1, Seq: 1, Meta: []byte("meta1-b, now longer than before")})
	e.both(m, false, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 2, Meta: []byte("m2b"), Data: []byte("rewritten data")})
	e.both(m, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 3})
	e.check(m)
	if got, err := e.s.ReadData(1, 2); err != nil || string(got) != "rewritten data" {
		t.Fatalf("ReadData(1,2) = %q, %v", got, err)
	}
	if _, err := e.s.ReadData(1, 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadData of removed message: %v, want ErrNotFound", err)
	}
	if _, err := e.s.ReadData(2, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadData of unknown entity: %v, want ErrNotFound", err)
	}
	// SetMeta keeps Data; several SetMetas in a row keep the latest.
	for i := range 5 {
		e.both(m, i%2 == 0, store.Op{Kind: store.OpSetMeta, EntityID: 1, Seq: 1, Meta: []byte(fmt.Sprintf("dc=%d", i))})
	}
	e.check(m)
	if got, _ := e.s.ReadData(1, 1); string(got) != "data1" {
		t.Fatalf("ReadData after SetMeta = %q", got)
	}
}

func testValues(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1), put(2),
		store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "b", Data: []byte("vb")},
		store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "a", Data: []byte("va")},
		store.Op{Kind: store.OpPutValue, EntityID: 2, Key: "", Data: nil},
	)
	e.check(m)
	e.both(m, true,
		store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "a", Data: []byte("va2")},
		store.Op{Kind: store.OpDeleteValue, EntityID: 1, Key: "b"},
		store.Op{Kind: store.OpDeleteValue, EntityID: 1, Key: "never"},
	)
	e.check(m)
}

func testLastSeq(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1), appendOp(1, 5, "", "x"), appendOp(1, 7, "", "y"))
	e.both(m, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 5}, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 7})
	if m.Entities[1].LastSeq != 7 {
		t.Fatal("model broken")
	}
	e.check(m)
	// A lower seq does not lower lastSeq.
	e.both(m, true, appendOp(1, 3, "", "z"))
	e.check(m)
	if e.reopen() {
		e.check(m)
	}
	// Compaction, where supported, must not lose lastSeq either.
	if c, ok := e.s.(store.Compacter); ok {
		e.both(m, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 3})
		if err := c.Compact(); err != nil {
			t.Fatalf("Compact: %v", err)
		}
		e.check(m)
	}
}

func testRecoverOrder(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(20), put(10))
	// Messages committed out of sequence order, interleaved across entities.
	for _, seq := range []uint64{5, 1, 9, 3, 2, 8} {
		e.both(m, seq%2 == 0, appendOp(20, seq, fmt.Sprint(seq), "d"), appendOp(10, 100-seq, "x", "d"))
	}
	e.both(m, true, store.Op{Kind: store.OpPutValue, EntityID: 20, Key: "z"}, store.Op{Kind: store.OpPutValue, EntityID: 10, Key: "b"},
		store.Op{Kind: store.OpPutValue, EntityID: 10, Key: "a"})
	e.check(m) // Dump verifies the order
	var seqs []uint64
	err := e.s.Recover(store.Visitor{Message: func(msg store.Message) error {
		if msg.EntityID == 20 {
			seqs = append(seqs, msg.Seq)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[1 2 3 5 8 9]" {
		t.Fatalf("entity 20 recovered seqs %v", seqs)
	}
}

func testBatchOrder(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true,
		put(1),
		appendOp(1, 1, "a", "first"),
		store.Op{Kind: store.OpSetMeta, EntityID: 1, Seq: 1, Meta: []byte("b")},
		appendOp(1, 2, "c", "second"),
		store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 2},
		store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 1, Meta: []byte("d"), Data: []byte("third")},
		store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: []byte("v1")},
		store.Op{Kind: store.OpDeleteValue, EntityID: 1, Key: "k"},
		put(2),
		store.Op{Kind: store.OpDeleteEntity, EntityID: 2},
	)
	if len(m.Entities) != 1 || string(m.Entities[1].Msgs[1].Data) != "third" || m.Entities[1].LastSeq != 2 {
		t.Fatal("model broken")
	}
	e.check(m)
}

func testNoOps(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1), appendOp(1, 1, "m", "d"))
	e.both(m, true,
		appendOp(7, 1, "ghost", "ghost"), // unknown entity
		store.Op{Kind: store.OpPutValue, EntityID: 7, Key: "k", Data: []byte("v")},
		store.Op{Kind: store.OpDeleteValue, EntityID: 7, Key: "k"},
		store.Op{Kind: store.OpSetMeta, EntityID: 7, Seq: 1},
		store.Op{Kind: store.OpRewrite, EntityID: 7, Seq: 1},
		store.Op{Kind: store.OpRemove, EntityID: 7, Seq: 1},
		store.Op{Kind: store.OpDeleteEntity, EntityID: 7},
		store.Op{Kind: store.OpSetMeta, EntityID: 1, Seq: 9, Meta: []byte("x")}, // unknown message
		store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 9, Meta: []byte("x"), Data: []byte("x")},
		store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 9},
	)
	if len(m.Entities) != 1 || m.Entities[1].LastSeq != 1 {
		t.Fatal("model broken")
	}
	e.check(m)
	// Appending an existing seq replaces it.
	e.both(m, true, appendOp(1, 1, "m2", "d2"))
	e.check(m)
}

func testDeleteEntity(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1), put(2))
	for i := range uint64(50) {
		e.both(m, i%5 == 0, appendOp(1, i+1, "m", "one"), appendOp(2, i+1, "m", "two"))
	}
	e.both(m, true, store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "s", Data: []byte("state")})
	e.both(m, true, store.Op{Kind: store.OpDeleteEntity, EntityID: 1})
	e.check(m)
	for _, seq := range []uint64{1, 50} {
		if _, err := e.s.ReadData(1, seq); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ReadData of deleted entity's message: %v", err)
		}
	}
}

func testBatchReuse(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1))
	b := &store.Batch{}
	meta, data := []byte("meta-orig"), []byte("data-orig")
	spec := []byte("spec-orig")
	for i := range 2 {
		b.Reset()
		b.Add(store.Op{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i + 1), Meta: meta, Data: data})
		b.Add(store.Op{Kind: store.OpPutEntity, EntityID: 5, Name: "five", Data: spec})
		b.Add(store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: data})
		if err := e.s.Commit(b, i == 0); err != nil {
			t.Fatal(err)
		}
		m.Apply(b)
		m = m.Clone()
		// Scribble over the caller's buffers.
		for _, p := range [][]byte{meta, data, spec} {
			for j := range p {
				p[j] = 'X'
			}
		}
		meta, data, spec = []byte("meta-orig"), []byte("data-orig"), []byte("spec-orig")
	}
	if b.Len() != 3 {
		t.Fatalf("Batch.Len = %d", b.Len())
	}
	e.check(m)
}

func testReadDataCopy(t *testing.T, e *env) {
	e.commit(true, put(1), appendOp(1, 1, "m", "payload"))
	d, err := e.s.ReadData(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	copy(d, "XXXXXXX")
	d2, _ := e.s.ReadData(1, 1)
	if string(d2) != "payload" {
		t.Fatalf("store shares its buffer with the caller: %q", d2)
	}
}

// testReadDataBatch: a batch read answers every ref as ReadData would —
// neighbours, far apart, across entities and batches, removed, unknown,
// empty, repeated — and its slices are the caller's, independent of each
// other and of the store.
func testReadDataBatch(t *testing.T, e *env) {
	ops := []store.Op{put(1), put(2)}
	for seq := uint64(1); seq <= 40; seq++ {
		ops = append(ops, appendOp(1, seq, fmt.Sprint("meta-", seq), fmt.Sprintf("data-1-%d-%s", seq, bytes.Repeat([]byte("x"), int(seq)*37))))
	}
	e.commit(true, ops...)
	// Other batches in between, a big message, an empty one, removals.
	e.commit(true, appendOp(2, 1, "m", "two"), appendOp(2, 2, "m", string(bytes.Repeat([]byte("B"), 200<<10))), appendOp(2, 3, "m", ""))
	e.commit(true, appendOp(1, 41, "m", "after"), store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 7})
	var refs []store.DataRef
	for _, r := range [][2]uint64{{1, 41}, {1, 3}, {1, 1}, {1, 2}, {2, 2}, {1, 7}, {9, 1}, {2, 3}, {1, 40}, {1, 3}, {2, 1}, {1, 99}} {
		refs = append(refs, store.DataRef{EntityID: r[0], Seq: r[1]})
	}
	for seq := uint64(10); seq <= 30; seq += 2 {
		refs = append(refs, store.DataRef{EntityID: 1, Seq: seq})
	}
	datas, errs := e.s.ReadDataBatch(refs)
	if len(datas) != len(refs) || len(errs) != len(refs) {
		t.Fatalf("%d datas and %d errors for %d refs", len(datas), len(errs), len(refs))
	}
	for i, r := range refs {
		want, werr := e.s.ReadData(r.EntityID, r.Seq)
		if !errors.Is(errs[i], werr) && !(errs[i] == nil && werr == nil) {
			t.Fatalf("ref %v: error %v, ReadData says %v", r, errs[i], werr)
		}
		if werr == nil && (!bytes.Equal(datas[i], want) || datas[i] == nil) {
			t.Fatalf("ref %v: %d bytes %.20q, want %d bytes %.20q", r, len(datas[i]), datas[i], len(want), want)
		}
	}
	// The caller owns every slice: writing into one (even one appended
	// to) changes no other, nor the store.
	for i := range datas {
		if datas[i] != nil {
			datas[i] = append(datas[i][:len(datas[i]):len(datas[i])], 'Z')
			clear(datas[i])
		}
	}
	again, _ := e.s.ReadDataBatch(refs)
	for i, r := range refs {
		want, err := e.s.ReadData(r.EntityID, r.Seq)
		if err == nil && !bytes.Equal(again[i], want) {
			t.Fatalf("ref %v changed after the caller wrote into its slices", r)
		}
	}
	if d, errs := e.s.ReadDataBatch(nil); len(d) != 0 || len(errs) != 0 {
		t.Fatal("an empty batch returned something")
	}
}

func testLargeData(t *testing.T, e *env) {
	m := NewState()
	big := make([]byte, 3<<20)
	rand.New(rand.NewSource(1)).Read(big)
	meta := bytes.Repeat([]byte("M"), 4000)
	e.both(m, true, put(1), store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: meta, Data: big}, appendOp(1, 2, "small", "small"))
	e.check(m)
}

// testTail: an Append or Rewrite whose Data continues in a Tail (a
// spooled large message) stores Data followed by the Tail's bytes.
func testTail(t *testing.T, e *env) {
	m := NewState()
	big := make([]byte, 1<<20)
	rand.New(rand.NewSource(2)).Read(big)
	e.commit(true, put(1),
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: []byte("m1"), Data: []byte("head"), Tail: store.BytesReader(big)},
		store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 2, Meta: []byte("m2"), Data: []byte("x")})
	e.commit(true, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 2, Meta: []byte("m2b"), Data: []byte("y"), Tail: store.BytesReader([]byte("-tail"))})
	m.Apply(&store.Batch{Ops: []store.Op{put(1),
		{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: []byte("m1"), Data: append([]byte("head"), big...)},
		{Kind: store.OpAppend, EntityID: 1, Seq: 2, Meta: []byte("m2"), Data: []byte("x")},
		{Kind: store.OpRewrite, EntityID: 1, Seq: 2, Meta: []byte("m2b"), Data: []byte("y-tail")}}})
	e.check(m)
}

// testMore: an Append, Rewrite or transfer whose Data continues in More (a
// body left where it arrived) stores exactly Data followed by More: the
// same bytes as the joined Data, whatever the pieces' sizes (small, of a
// record hole's size and more, of a blob's), an empty head included,
// and two ops sharing one More (a topic's shared data).
func testMore(t *testing.T, e *env) {
	rng := rand.New(rand.NewSource(3))
	piece := func(n int) []byte {
		b := make([]byte, n)
		rng.Read(b)
		return b
	}
	join := func(a, b []byte) []byte { return append(append([]byte{}, a...), b...) }
	head, b20, b64, b300 := piece(90), piece(20<<10), piece(64<<10), piece(300<<10)
	type two struct{ data, more []byte }
	cases := []two{
		{head, []byte("small")},   // small More
		{head, b20},               // a hole's size
		{head, b64},               // the 64 KB message
		{nil, b64},                // an empty head
		{piece(20 << 10), b20},    // both pieces large
		{head, b300},              // a blob's size
		{head, nil},               // no More at all
		{piece(8000), piece(300)}, // joined just over the combine threshold
	}
	m := NewState()
	ops := []store.Op{put(1), put(2)}
	want := []store.Op{put(1), put(2)}
	for i, c := range cases {
		seq := uint64(i + 1)
		meta := []byte(fmt.Sprintf("m%d", seq))
		ops = append(ops, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: seq, Meta: meta, Data: c.data, More: c.more})
		want = append(want, store.Op{Kind: store.OpAppend, EntityID: 1, Seq: seq, Meta: meta, Data: join(c.data, c.more)})
	}
	// One More in two entities (a topic's data shared by its copies).
	ops = append(ops, store.Op{Kind: store.OpAppend, EntityID: 2, Seq: 1, Meta: []byte("s1"), Data: head, More: b64},
		store.Op{Kind: store.OpAppend, EntityID: 2, Seq: 2, Meta: []byte("s2"), Data: head, More: b64})
	want = append(want, store.Op{Kind: store.OpAppend, EntityID: 2, Seq: 1, Meta: []byte("s1"), Data: join(head, b64)},
		store.Op{Kind: store.OpAppend, EntityID: 2, Seq: 2, Meta: []byte("s2"), Data: join(head, b64)})
	e.commit(true, ops...)
	m.Apply(&store.Batch{Ops: want})
	e.check(m)
	// Rewrites, each in a batch of its own and in one batch, unsynced.
	rw := func(seq uint64, data, more []byte) (store.Op, store.Op) {
		meta := []byte(fmt.Sprintf("r%d", seq))
		return store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: seq, Meta: meta, Data: data, More: more},
			store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: seq, Meta: meta, Data: join(data, more)}
	}
	o1, w1 := rw(1, head, b64)
	o2, w2 := rw(2, piece(10), []byte("x"))
	o3, w3 := rw(3, nil, b300)
	e.commit(true, o1)
	e.commit(false, o2, o3)
	e.commit(true)
	m.Apply(&store.Batch{Ops: []store.Op{w1, w2, w3}})
	e.check(m)
	// The pieces belong to the caller again after Commit.
	clear(b64)
	clear(head)
	e.check(m)
}

// testMoreRefused: More together with a Tail, or on an op that has no
// message Data, is refused and nothing of its batch applied.
func testMoreRefused(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1))
	for i, bad := range []store.Op{
		{Kind: store.OpAppend, EntityID: 1, Seq: 1, Data: []byte("h"), More: []byte("more"), Tail: store.BytesReader([]byte("tail"))},
		{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: []byte("v"), More: []byte("more")},
		{Kind: store.OpSetMeta, EntityID: 1, Seq: 1, Meta: []byte("m"), More: []byte("more")},
	} {
		err := e.s.Commit(&store.Batch{Ops: []store.Op{appendOp(1, 9, "m", "d"), bad}}, true)
		if err == nil {
			t.Fatalf("case %d: Commit accepted %+v", i, bad)
		}
	}
	e.check(m)
}

func testVisitorError(t *testing.T, e *env) {
	e.commit(true, put(1), put(2), appendOp(1, 1, "", ""), store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "k"})
	boom := errors.New("boom")
	for i, v := range []store.Visitor{
		{Entity: func(store.Entity) error { return boom }},
		{Message: func(store.Message) error { return boom }},
		{Value: func(store.Value) error { return boom }},
	} {
		if err := e.s.Recover(v); !errors.Is(err, boom) {
			t.Fatalf("visitor %d: Recover returned %v, want the visitor's error", i, err)
		}
	}
	// Nil callbacks are skipped.
	if err := e.s.Recover(store.Visitor{}); err != nil {
		t.Fatal(err)
	}
}

func testUnknownKind(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1))
	bad := &store.Batch{Ops: []store.Op{appendOp(1, 1, "m", "d"), {Kind: 200, EntityID: 1}}}
	if err := e.s.Commit(bad, true); err == nil {
		t.Fatal("Commit accepted an unknown op kind")
	}
	e.check(m) // and applied nothing of that batch
}

func testConcurrent(t *testing.T, e *env) {
	const (
		writers = 16
		perW    = 100
	)
	m := NewState()
	for w := range uint64(writers) {
		e.both(m, true, put(w+1))
	}
	// What the concurrent reader reads; writer 0 rewrites it with the same bytes.
	e.both(m, true, appendOp(1, 1, "m", "w0-i0"))
	var wg sync.WaitGroup
	errc := make(chan error, writers*2)
	for w := range uint64(writers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := w + 1
			for i := range uint64(perW) {
				data := []byte(fmt.Sprintf("w%d-i%d", w, i))
				ops := []store.Op{{Kind: store.OpAppend, EntityID: id, Seq: i + 1, Meta: []byte("m"), Data: data}}
				if i%3 == 2 {
					ops = append(ops, store.Op{Kind: store.OpRemove, EntityID: id, Seq: i})
				}
				if err := e.s.Commit(&store.Batch{Ops: ops}, i%4 != 0); err != nil {
					errc <- err
					return
				}
				got, err := e.s.ReadData(id, i+1)
				if err != nil || !bytes.Equal(got, data) {
					errc <- fmt.Errorf("ReadData(%d,%d) right after Commit = %q, %v", id, i+1, got, err)
					return
				}
			}
		}()
	}
	// A concurrent reader of data that stays.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range perW * 2 {
			if _, err := e.s.ReadData(1, 1); err != nil {
				errc <- fmt.Errorf("concurrent ReadData: %w", err)
				return
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for w := range uint64(writers) {
		id := w + 1
		for i := range uint64(perW) {
			m.Apply(&store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: id, Seq: i + 1, Meta: []byte("m"), Data: []byte(fmt.Sprintf("w%d-i%d", w, i))}}})
			if i%3 == 2 {
				m.Apply(&store.Batch{Ops: []store.Op{{Kind: store.OpRemove, EntityID: id, Seq: i}}})
			}
		}
	}
	e.check(m)
}

// testMany pushes enough data through to rotate small segments, removes
// most of it (leaving stragglers, like deferred messages) and compacts if
// the store can.
func testMany(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1), put(2))
	rng := rand.New(rand.NewSource(7))
	data := make([]byte, 2000)
	const n = 600
	for i := uint64(1); i <= n; i++ {
		rng.Read(data)
		e.both(m, i%10 == 0, store.Op{Kind: store.OpAppend, EntityID: 1 + i%2, Seq: i, Meta: []byte(fmt.Sprint(i)), Data: data})
	}
	for i := uint64(1); i <= n; i++ {
		if i%50 != 0 { // keep every 50th, remove the rest
			e.both(m, i%7 == 0, store.Op{Kind: store.OpRemove, EntityID: 1 + i%2, Seq: i})
		}
	}
	e.check(m)
	if c, ok := e.s.(store.Compacter); ok {
		for range 2 {
			if err := c.Compact(); err != nil {
				t.Fatalf("Compact: %v", err)
			}
		}
		e.check(m)
		e.both(m, true, appendOp(1, n+1, "after", "compaction"))
		e.check(m)
	}
	if sr, ok := e.s.(store.StatsReporter); ok {
		st := sr.Stats()
		if st.Entities != 2 || st.Messages != m.Messages() {
			t.Fatalf("Stats = %+v, model has %d messages", st, m.Messages())
		}
	}
}

func testRandom(t *testing.T, e *env) {
	for _, seed := range []int64{1, 2, 3} {
		if seed > 1 {
			// Start each seed from an empty store.
			e.s.Close()
			e.open = e.h.New(t)
			e.s = e.mustOpen()
		}
		g := &Gen{Rng: rand.New(rand.NewSource(seed)), MaxData: 200, Split: seed != 1}
		m := NewState()
		for i := range 300 {
			b := g.Batch(m, 6)
			if err := e.s.Commit(b, g.Rng.Intn(3) > 0); err != nil {
				t.Fatalf("seed %d batch %d: %v", seed, i, err)
			}
			m.Apply(b)
			if i%100 == 99 {
				if d := Diff(m, MustDump(t, e.s)); d != "" {
					t.Fatalf("seed %d after batch %d:\n%s", seed, i, d)
				}
				if e.h.Persistent && g.Rng.Intn(2) == 0 {
					e.reopen()
				}
			}
		}
		e.check(m)
	}
}

func testClosed(t *testing.T, e *env) {
	e.commit(true, put(1), appendOp(1, 1, "m", "d"))
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s := e.s
	e.s = nil
	if err := s.Commit(&store.Batch{Ops: []store.Op{put(2)}}, true); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	if err := s.Commit(&store.Batch{}, false); !errors.Is(err, store.ErrClosed) {
		t.Errorf("empty Commit after Close: %v", err)
	}
	if _, err := s.ReadData(1, 1); !errors.Is(err, store.ErrClosed) {
		t.Errorf("ReadData after Close: %v", err)
	}
	if err := s.Recover(store.Visitor{}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Recover after Close: %v", err)
	}
	if err := s.Sync(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Sync after Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if c, ok := s.(store.Compacter); ok {
		if err := c.Compact(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Compact after Close: %v", err)
		}
	}
}

// testVisitorCommits checks that a Visitor may call the store (the broker
// may, for example, expire messages while it rebuilds its index).
func testVisitorCommits(t *testing.T, e *env) {
	m := NewState()
	e.both(m, true, put(1), appendOp(1, 1, "m", "d1"), appendOp(1, 2, "m", "d2"))
	var extra []store.Op
	err := e.s.Recover(store.Visitor{Message: func(msg store.Message) error {
		if _, err := e.s.ReadData(msg.EntityID, msg.Seq); err != nil {
			return err
		}
		op := store.Op{Kind: store.OpRemove, EntityID: msg.EntityID, Seq: msg.Seq}
		extra = append(extra, op)
		return e.s.Commit(&store.Batch{Ops: []store.Op{op}}, false)
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.Apply(&store.Batch{Ops: extra})
	e.check(m)
}
