package memstore

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/busbarmq/busbar/internal/store"
)

type message struct {
	meta []byte
	data []byte
}

type entity struct {
	name    string
	spec    []byte
	lastSeq uint64
	msgs    map[uint64]*message
	values  map[string][]byte
}

// Store is an in-memory store.Store. The zero value is not usable; call New.
type Store struct {
	mu       sync.RWMutex
	closed   bool
	entities map[uint64]*entity
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{entities: make(map[uint64]*entity)}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// Commit applies b atomically. Operations on a missing entity or message
// are no-ops (see the store package documentation). sync is ignored.
func (s *Store) Commit(b *store.Batch, sync bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if b == nil {
		return nil
	}
	var tails map[int][]byte
	for i, op := range b.Ops {
		if op.Kind < store.OpPutEntity || op.Kind > store.OpDeleteValue {
			return fmt.Errorf("memstore: op %d: unknown kind %d", i, op.Kind)
		}
		if err := op.CheckRest(); err != nil {
			return fmt.Errorf("memstore: op %d: %w", i, err)
		}
		if op.HasRest() {
			d, err := op.ReadTail()
			if err != nil {
				return fmt.Errorf("memstore: op %d: %w", i, err)
			}
			if tails == nil {
				tails = make(map[int][]byte)
			}
			tails[i] = d
		}
	}
	for i := range b.Ops {
		if d, ok := tails[i]; ok {
			op := b.Ops[i]
			op.Data, op.More, op.Tail = d, nil, nil
			s.apply(&op)
			continue
		}
		s.apply(&b.Ops[i])
	}
	return nil
}

func (s *Store) apply(op *store.Op) {
	switch op.Kind {
	case store.OpPutEntity:
		if e, ok := s.entities[op.EntityID]; ok {
			e.name, e.spec = op.Name, clone(op.Data)
			return
		}
		s.entities[op.EntityID] = &entity{
			name:   op.Name,
			spec:   clone(op.Data),
			msgs:   make(map[uint64]*message),
			values: make(map[string][]byte),
		}
	case store.OpDeleteEntity:
		delete(s.entities, op.EntityID)
	case store.OpAppend:
		e, ok := s.entities[op.EntityID]
		if !ok {
			return
		}
		e.msgs[op.Seq] = &message{meta: clone(op.Meta), data: clone(op.Data)}
		if op.Seq > e.lastSeq {
			e.lastSeq = op.Seq
		}
	case store.OpSetMeta:
		if m := s.msg(op); m != nil {
			m.meta = clone(op.Meta)
		}
	case store.OpRewrite:
		if m := s.msg(op); m != nil {
			m.meta, m.data = clone(op.Meta), clone(op.Data)
		}
	case store.OpRemove:
		if e, ok := s.entities[op.EntityID]; ok {
			delete(e.msgs, op.Seq)
		}
	case store.OpPutValue:
		if e, ok := s.entities[op.EntityID]; ok {
			e.values[op.Key] = clone(op.Data)
		}
	case store.OpDeleteValue:
		if e, ok := s.entities[op.EntityID]; ok {
			delete(e.values, op.Key)
		}
	}
}

func (s *Store) msg(op *store.Op) *message {
	e, ok := s.entities[op.EntityID]
	if !ok {
		return nil
	}
	return e.msgs[op.Seq]
}

// Recover replays the current state to v: entities in ID order, messages in
// (EntityID, Seq) order, values in (EntityID, Key) order. It collects the
// state under the lock and calls v without it, so v may call the store.
func (s *Store) Recover(v store.Visitor) error {
	var (
		ents []store.Entity
		msgs []store.Message
		vals []store.Value
	)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	ids := make([]uint64, 0, len(s.entities))
	for id := range s.entities {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := s.entities[id]
		// Stored slices are never modified in place, only replaced, so
		// they may be handed out after the lock is released.
		ents = append(ents, store.Entity{ID: id, Name: e.name, Spec: e.spec, LastSeq: e.lastSeq})
		if v.Message != nil {
			start := len(msgs)
			for seq, m := range e.msgs {
				msgs = append(msgs, store.Message{EntityID: id, Seq: seq, Meta: m.meta, Size: len(m.data)})
			}
			slices.SortFunc(msgs[start:], func(a, b store.Message) int { return cmp.Compare(a.Seq, b.Seq) })
		}
		if v.Value != nil {
			start := len(vals)
			for k, val := range e.values {
				vals = append(vals, store.Value{EntityID: id, Key: k, Value: val})
			}
			slices.SortFunc(vals[start:], func(a, b store.Value) int { return cmp.Compare(a.Key, b.Key) })
		}
	}
	s.mu.RUnlock()
	if v.Entity != nil {
		for _, e := range ents {
			if err := v.Entity(e); err != nil {
				return err
			}
		}
	}
	if v.Message != nil {
		for _, m := range msgs {
			if err := v.Message(m); err != nil {
				return err
			}
		}
	}
	if v.Value != nil {
		for _, val := range vals {
			if err := v.Value(val); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReadDataBatch reads each ref with ReadData.
func (s *Store) ReadDataBatch(refs []store.DataRef) ([][]byte, []error) {
	datas, errs := make([][]byte, len(refs)), make([]error, len(refs))
	for i, r := range refs {
		datas[i], errs[i] = s.ReadData(r.EntityID, r.Seq)
	}
	return datas, errs
}

// ReadData returns a copy of the Data of message (entityID, seq).
func (s *Store) ReadData(entityID, seq uint64) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	e, ok := s.entities[entityID]
	if !ok {
		return nil, store.ErrNotFound
	}
	m, ok := e.msgs[seq]
	if !ok {
		return nil, store.ErrNotFound
	}
	return append(make([]byte, 0, len(m.data)), m.data...), nil
}

// Sync does nothing but report ErrClosed after Close.
func (s *Store) Sync() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// Close drops the state. Further calls return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	s.entities = nil
	return nil
}

var _ store.StatsReporter = (*Store)(nil)

// Stats counts the live state. DiskBytes is 0.
func (s *Store) Stats() store.Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var st store.Stats
	for _, e := range s.entities {
		st.Entities++
		st.Messages += len(e.msgs)
		st.Values += len(e.values)
		for _, m := range e.msgs {
			st.DataBytes += int64(len(m.data))
		}
	}
	return st
}
