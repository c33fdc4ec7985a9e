package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/busbarmq/busbar/internal/store"
)

// pending is one Commit call waiting for its transaction.
type pending struct {
	fol   *store.Follower // the closed-loop committer, if it said so
	ops   []store.Op
	units []uint64 // the units its ops touch
	sync  bool
	bytes int
	done  chan error
}

type msgKey struct{ e, s uint64 }

type valKey struct {
	e uint64
	k string
}

// What a transaction does to one message, after coalescing its batches'
// ops in order.
const (
	mPut     = iota + 1 // insert or replace Meta and Data
	mDel                // delete
	mMeta               // replace Meta of an existing message
	mRewrite            // replace Meta and Data of an existing message
)

type msgState struct {
	kind       uint8
	unit       uint64
	meta, data []byte
}

type valState struct {
	del  bool
	unit uint64
	v    []byte
}

type entPut struct {
	unit    uint64
	name    string
	spec    []byte
	created bool
}

// Commit applies b in one SQL transaction, usually shared with other
// Commit calls (group commit), and returns once that transaction
// committed: with sync after its WAL flush, without sync after it was
// ordered (synchronous_commit off; durable with the next synced commit).
// A failure is store.ErrUnavailable (not applied), store.ErrNotOwner
// (fenced off, not applied) or store.ErrOutcomeUnknown.
func (s *Store) Commit(b *store.Batch, sync bool) error {
	b, err := prepare(b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	if err := s.refusalLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	if b == nil || len(b.Ops) == 0 {
		s.mu.Unlock()
		if sync {
			return s.Sync()
		}
		return nil
	}
	p := &pending{ops: b.Ops, sync: sync, done: make(chan error, 1)}
	for _, op := range b.Ops {
		if op.Kind == store.OpPutEntity {
			if _, ok := s.unitOf[op.EntityID]; !ok {
				u := op.Unit
				if u == 0 {
					u = op.EntityID
				}
				s.unitOf[op.EntityID] = u
			}
		}
	}
	for _, op := range b.Ops {
		p.bytes += len(op.Meta) + len(op.Data) + len(op.Key) + len(op.Name) + 32
		if op.Kind == store.OpTransfer || op.Kind == store.OpLand {
			p.bytes += 32
		}
		if u, ok := s.unitOf[op.EntityID]; ok && !slices.Contains(p.units, u) {
			p.units = append(p.units, u)
		}
	}
	if len(p.units) == 0 { // every op names an unknown entity: no-ops
		s.mu.Unlock()
		if sync {
			return s.Sync()
		}
		return nil
	}
	s.queue = append(s.queue, p)
	if p.fol = b.Follower; p.fol != nil {
		// A committer one of the gates waits for has answered: its batch
		// is queued, so the gathering committer may let go of the unit.
		for _, g := range s.gates {
			if g.Answer(p.fol) {
				break
			}
		}
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	return <-p.done
}

// prepare checks b's ops and returns it with the More or Tail of each op
// joined to its Data (a large message's Data continues in More, a body
// left where it arrived, or in a Tail, a spooled body: the rows take it
// in chunks).
func prepare(b *store.Batch) (*store.Batch, error) {
	if b == nil {
		return nil, nil
	}
	tails := false
	for i, op := range b.Ops {
		if op.Kind < store.OpPutEntity || op.Kind > store.OpLand {
			return nil, fmt.Errorf("pgstore: op %d: unknown kind %d", i, op.Kind)
		}
		if (op.Kind == store.OpTransfer || op.Kind == store.OpLand) && op.Transfer == nil {
			return nil, fmt.Errorf("pgstore: op %d: a transfer op without its transfer", i)
		}
		if err := op.CheckRest(); err != nil {
			return nil, fmt.Errorf("pgstore: op %d: %w", i, err)
		}
		tails = tails || op.HasRest()
	}
	if !tails {
		return b, nil
	}
	ops := slices.Clone(b.Ops)
	for i := range ops {
		if !ops[i].HasRest() {
			continue
		}
		d, err := ops[i].ReadTail()
		if err != nil {
			return nil, fmt.Errorf("pgstore: op %d: %w", i, err)
		}
		ops[i].Data, ops[i].More, ops[i].Tail = d, nil, nil
	}
	return &store.Batch{Ops: ops, Follower: b.Follower}, nil
}

// committer runs transactions until the store closes: it takes the oldest
// waiting batches whose units have no transaction in flight (at most one
// per unit, so a unit's batches commit in order), up to the limits, and
// commits them in one pipelined transaction.
func (s *Store) committer(slot int) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		var ps []*pending
		for {
			ps = s.takeLocked()
			if len(ps) > 0 || (s.closed && len(s.queue) == 0) {
				break
			}
			s.cond.Wait()
		}
		if len(ps) == 0 {
			s.mu.Unlock()
			return
		}
		s.inflight++
		s.mu.Unlock()
		if awaited := s.run(slot, ps); len(awaited) > 0 {
			s.gather(s.gates[slot], awaited)
		}
		s.mu.Lock()
		for _, p := range ps {
			for _, u := range p.units {
				delete(s.busy, u)
			}
		}
		s.inflight--
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// takeLocked removes from the queue the batches of the next transaction
// and marks their units busy.
func (s *Store) takeLocked() []*pending {
	if len(s.queue) == 0 {
		return nil
	}
	var take []*pending
	blocked := map[uint64]bool{}
	taken := map[uint64]bool{} // units of this transaction: more of their batches may join it
	units, ops, bytes := 0, 0, 0
	rest := s.queue[:0]
	for _, p := range s.queue {
		ok := true
		for _, u := range p.units {
			if (s.busy[u] && !taken[u]) || blocked[u] {
				ok = false
				break
			}
		}
		if ok && len(take) > 0 && (units+newUnits(p.units, taken) > maxBatchUnits || ops+len(p.ops) > maxBatchOps || bytes+p.bytes > maxBatchBytes) {
			ok = false
		}
		if !ok {
			for _, u := range p.units {
				blocked[u] = true
			}
			rest = append(rest, p)
			continue
		}
		take = append(take, p)
		for _, u := range p.units {
			if !taken[u] {
				taken[u], s.busy[u] = true, true
				units++
			}
		}
		ops += len(p.ops)
		bytes += p.bytes
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	return take
}

// newUnits counts the units of us not in taken.
func newUnits(us []uint64, taken map[uint64]bool) int {
	n := 0
	for _, u := range us {
		if !taken[u] {
			n++
		}
	}
	return n
}

// gather holds the units of the transaction just committed until the
// followers it released (closed-loop committers that promised to answer)
// have committed again or said they are idle, for at most FollowerWait,
// so that their next batches share one transaction instead of the first
// of them going alone (see "Commit pacing" in package store).
func (s *Store) gather(g *store.Gate, awaited []*store.Follower) {
	timer := time.NewTimer(s.o.FollowerWait)
	defer timer.Stop()
	for g.Pending() > 0 {
		select {
		case <-g.Wake():
		case <-timer.C:
			for _, f := range awaited {
				g.GiveUp(f)
			}
			return
		}
	}
}

// run commits ps, retrying serialisation failures and taking out the
// batches of units that turn out not to be this store's. After a
// successful synced commit it returns the followers whose answers the
// committer's gate now awaits.
func (s *Store) run(slot int, ps []*pending) (awaited []*store.Follower) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	for attempt := 0; len(ps) > 0; attempt++ {
		if err := s.refusal(); err != nil {
			answer(ps, err)
			return nil
		}
		t, notOwned := s.build(ps)
		if len(notOwned) > 0 {
			ps = s.failUnits(ps, notOwned)
			continue
		}
		start := s.o.Clock.Now()
		err := s.exec(slot, t)
		if err == nil {
			s.apply(t)
			if obs := s.o.SyncObserver; obs != nil && t.sync {
				obs.Synced(s.o.Clock.Now().Sub(start), len(ps))
			}
			if s.o.FollowerWait > 0 {
				// Await before answering: an answer may come at once.
				for _, p := range ps {
					if p.fol != nil && p.sync && p.fol.Promised() && s.gates[slot].Await(p.fol) {
						awaited = append(awaited, p.fol)
					}
				}
			}
			answer(ps, nil)
			return awaited
		}
		var nf *notOwnerError
		switch {
		case errors.As(err, &nf):
			moved := s.movedUnits(t.units, t.epochs)
			if len(moved) == 0 {
				answer(ps, err)
				return nil
			}
			ps = s.failUnits(ps, moved)
			continue
		case isRetryable(err) && attempt < maxRetries:
			time.Sleep(time.Duration(1+rand.IntN(10*(attempt+1))) * time.Millisecond)
			continue
		}
		answer(ps, err)
		return nil
	}
	return nil
}

// errUnresolved refuses commits while an earlier one's outcome is
// being learned.
var errUnresolved = fmt.Errorf("pgstore: %w: waiting to learn whether an interrupted commit was applied", store.ErrUnavailable)

// refusal is why the store takes no commit now, or nil.
func (s *Store) refusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusalLocked()
}

func (s *Store) refusalLocked() error {
	if s.stopped != nil {
		return s.stopped
	}
	if len(s.unresolved) > 0 {
		return errUnresolved
	}
	return nil
}

func answer(ps []*pending, err error) {
	for _, p := range ps {
		p.done <- err
	}
}

// failUnits answers ErrNotOwner to the batches touching units and
// returns the others; the units are no longer this store's.
func (s *Store) failUnits(ps []*pending, units []uint64) []*pending {
	s.mu.Lock()
	for _, u := range units {
		delete(s.units, u)
	}
	s.mu.Unlock()
	s.tellLost(units)
	s.o.Log.Error("entities fenced off: another process owns them now", "units", units)
	rest := ps[:0]
	for _, p := range ps {
		hit := false
		for _, u := range p.units {
			if slices.Contains(units, u) {
				hit = true
				break
			}
		}
		if hit {
			p.done <- fmt.Errorf("%w (units %v)", store.ErrNotOwner, units)
		} else {
			rest = append(rest, p)
		}
	}
	return rest
}

// movedUnits reads the epochs of units and returns those that differ
// from what this store holds (or are gone).
func (s *Store) movedUnits(units []int64, epochs []int64) []uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.TxnDeadline)
	defer cancel()
	have := map[int64]int64{}
	rows, err := s.pool.Query(ctx, `SELECT unit_id, epoch FROM bb_unit WHERE unit_id = ANY($1::bigint[])`, units)
	if err != nil {
		return nil
	}
	for rows.Next() {
		var u, ep int64
		if rows.Scan(&u, &ep) == nil {
			have[u] = ep
		}
	}
	if rows.Err() != nil {
		return nil
	}
	var moved []uint64
	for i, u := range units {
		if ep, ok := have[u]; !ok || ep != epochs[i] {
			moved = append(moved, uint64(u))
		}
	}
	return moved
}

// txn is one transaction: the coalesced effect of its batches.
type txn struct {
	sync          bool
	units, epochs []int64 // the fence: owned units written, sorted
	newUnits      map[uint64]bool
	delUnits      []int64
	entDelU       []int64
	entDelE       []int64
	entPuts       map[uint64]*entPut
	msgs          map[msgKey]*msgState
	vals          map[valKey]*valState
	lastSeq       map[uint64]uint64
	live          map[uint64]bool // entities created (true) or deleted (false)
	counters      map[uint64]uint32
	xfers         []xferOut           // OpTransfer, in op order
	lands         []store.TransferKey // OpLand
}

// xferOut is one transfer a transaction inserts.
type xferOut struct {
	unit       uint64 // the source unit (fenced)
	x          store.Transfer
	meta, data []byte
}

func (t *txn) isLive(s *Store, e uint64) bool {
	if l, ok := t.live[e]; ok {
		return l
	}
	return s.live[e]
}

// build coalesces the ops of ps, in order, into one transaction's effect,
// applying the no-op rules against the store's live entities. It returns
// the units written that this store does not own, if any.
func (s *Store) build(ps []*pending) (*txn, []uint64) {
	t := &txn{
		newUnits: map[uint64]bool{}, entPuts: map[uint64]*entPut{}, msgs: map[msgKey]*msgState{},
		vals: map[valKey]*valState{}, lastSeq: map[uint64]uint64{}, live: map[uint64]bool{}, counters: map[uint64]uint32{},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fence := map[uint64]bool{}
	var notOwned []uint64
	for _, p := range ps {
		t.sync = t.sync || p.sync
		for i := range p.ops {
			op := &p.ops[i]
			u, ok := s.unitOf[op.EntityID]
			if !ok {
				continue
			}
			e := op.EntityID
			if op.Kind == store.OpPutEntity {
				if !t.isLive(s, e) {
					t.live[e] = true
					ep := &entPut{unit: u, created: true}
					if _, owned := s.units[u]; !owned && !t.newUnits[u] {
						t.newUnits[u] = true
					}
					t.entPuts[e] = ep
				}
				ep, ok := t.entPuts[e]
				if !ok {
					ep = &entPut{unit: u}
					t.entPuts[e] = ep
				}
				ep.name, ep.spec = op.Name, op.Data
			} else if !t.isLive(s, e) {
				continue
			}
			if !t.newUnits[u] {
				if _, owned := s.units[u]; !owned {
					if !slices.Contains(notOwned, u) {
						notOwned = append(notOwned, u)
					}
					continue
				}
				fence[u] = true
			}
			t.add(u, e, op)
		}
	}
	for u := range fence {
		if !t.newUnits[u] {
			t.units = append(t.units, int64(u))
		}
	}
	slices.Sort(t.units)
	for _, u := range t.units {
		t.epochs = append(t.epochs, s.units[uint64(u)])
	}
	for u := range t.newUnits {
		t.counters[u] = 0
	}
	for _, m := range t.msgs {
		if m.kind == mPut || m.kind == mRewrite {
			if _, ok := t.counters[m.unit]; !ok {
				t.counters[m.unit] = s.counters[m.unit]
			}
		}
	}
	for _, x := range t.xfers {
		if _, ok := t.counters[x.unit]; !ok {
			t.counters[x.unit] = s.counters[x.unit]
		}
	}
	return t, notOwned
}

// add coalesces op (of live entity e in unit u) into t.
func (t *txn) add(u, e uint64, op *store.Op) {
	switch op.Kind {
	case store.OpDeleteEntity:
		t.live[e] = false
		delete(t.entPuts, e)
		t.entDelU, t.entDelE = append(t.entDelU, int64(u)), append(t.entDelE, int64(e))
		for k := range t.msgs {
			if k.e == e {
				delete(t.msgs, k)
			}
		}
		for k := range t.vals {
			if k.e == e {
				delete(t.vals, k)
			}
		}
		delete(t.lastSeq, e)
		if u == e {
			if t.newUnits[u] {
				delete(t.newUnits, u)
			} else {
				t.delUnits = append(t.delUnits, int64(u))
			}
		}
	case store.OpAppend:
		t.msgs[msgKey{e, op.Seq}] = &msgState{kind: mPut, unit: u, meta: op.Meta, data: op.Data}
		if op.Seq > t.lastSeq[e] {
			t.lastSeq[e] = op.Seq
		}
	case store.OpRemove:
		t.msgs[msgKey{e, op.Seq}] = &msgState{kind: mDel, unit: u}
	case store.OpSetMeta:
		k := msgKey{e, op.Seq}
		switch m := t.msgs[k]; {
		case m == nil:
			t.msgs[k] = &msgState{kind: mMeta, unit: u, meta: op.Meta}
		case m.kind != mDel:
			m.meta = op.Meta
		}
	case store.OpRewrite:
		k := msgKey{e, op.Seq}
		switch m := t.msgs[k]; {
		case m == nil:
			t.msgs[k] = &msgState{kind: mRewrite, unit: u, meta: op.Meta, data: op.Data}
		case m.kind == mMeta:
			m.kind, m.meta, m.data = mRewrite, op.Meta, op.Data
		case m.kind != mDel:
			m.meta, m.data = op.Meta, op.Data
		}
	case store.OpPutValue:
		t.vals[valKey{e, op.Key}] = &valState{unit: u, v: op.Data}
	case store.OpDeleteValue:
		t.vals[valKey{e, op.Key}] = &valState{unit: u, del: true}
	case store.OpTransfer:
		x := *op.Transfer
		x.SourceUnit = u
		t.xfers = append(t.xfers, xferOut{unit: u, x: x, meta: op.Meta, data: op.Data})
	case store.OpLand:
		t.lands = append(t.lands, op.Transfer.TransferKey)
	}
}

// nextBody is a new body id of unit u: the writer's epoch and a counter,
// so an orphan of an older epoch can never collide with it. The epoch is
// the one the fence was built with (build, under s.mu): the committer
// never reads s.units, which Acquire changes concurrently.
func (t *txn) nextBody(u uint64) int64 {
	c := t.counters[u] + 1
	t.counters[u] = c
	ep := int64(1)
	if i, ok := slices.BinarySearch(t.units, int64(u)); ok && !t.newUnits[u] {
		ep = t.epochs[i]
	}
	return ep<<32 | int64(c)
}

// notOwnerError is the fence's refusal.
type notOwnerError struct{ err error }

func (e *notOwnerError) Error() string {
	return store.ErrNotOwner.Error() + ": the fence refused the commit (another process raised the epoch)"
}
func (e *notOwnerError) Unwrap() []error { return []error{store.ErrNotOwner, e.err} }

func isRetryable(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// The statements of a transaction, in the order they run.
const (
	sqlAsync = `SELECT set_config('synchronous_commit', 'off', true)`
	sqlMark  = `UPDATE bb_commit_mark SET mark = $3 WHERE node_id = $1 AND slot = $2`
	sqlFence = `WITH held AS MATERIALIZED (
  SELECT unit_id, epoch FROM bb_unit WHERE unit_id = ANY($1::bigint[]) ORDER BY unit_id FOR SHARE)
SELECT 1 / (count(*) = cardinality($1::bigint[]))::int
  FROM held JOIN unnest($1::bigint[], $2::bigint[]) AS mine(unit_id, epoch) USING (unit_id)
 WHERE held.epoch = mine.epoch`
	sqlEntDelBodies = `DELETE FROM bb_body b USING bb_msg m, unnest($1::bigint[], $2::bigint[]) AS x(u, e)
 WHERE m.unit_id = x.u AND m.entity_id = x.e AND m.body_id IS NOT NULL AND b.unit_id = m.unit_id AND b.body_id = m.body_id`
	sqlEntDelMsgs   = `DELETE FROM bb_msg m USING unnest($1::bigint[], $2::bigint[]) AS x(u, e) WHERE m.unit_id = x.u AND m.entity_id = x.e`
	sqlEntDelValues = `DELETE FROM bb_value v USING unnest($1::bigint[], $2::bigint[]) AS x(u, e) WHERE v.unit_id = x.u AND v.entity_id = x.e`
	sqlEntDel       = `DELETE FROM bb_entity t USING unnest($1::bigint[], $2::bigint[]) AS x(u, e) WHERE t.unit_id = x.u AND t.entity_id = x.e`
	sqlUnitDel      = `DELETE FROM bb_unit WHERE unit_id = ANY($1::bigint[])`
	sqlUnitNew      = `INSERT INTO bb_unit (unit_id, name_key, owner_node, owner_session, epoch, state, changed_at)
SELECT u, k, $3, $4, 1, 'owned', clock_timestamp() FROM unnest($1::bigint[], $2::text[]) AS x(u, k)`
	sqlCatalogBump = `UPDATE bb_catalog SET version = version + 1 WHERE id = 1`
	sqlEntPut      = `INSERT INTO bb_entity (unit_id, entity_id, name, spec)
SELECT u, e, n, coalesce(s, '\x') FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bytea[]) AS x(u, e, n, s)
ON CONFLICT (unit_id, entity_id) DO UPDATE SET name = EXCLUDED.name, spec = EXCLUDED.spec`
	sqlMsgDel = `WITH d AS (DELETE FROM bb_msg m USING unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(u, e, s)
  WHERE m.unit_id = x.u AND m.entity_id = x.e AND m.seq = x.s RETURNING m.unit_id, m.body_id)
DELETE FROM bb_body b USING d WHERE d.body_id IS NOT NULL AND b.unit_id = d.unit_id AND b.body_id = d.body_id`
	sqlOldBodies = `DELETE FROM bb_body b USING bb_msg m, unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(u, e, s)
 WHERE m.unit_id = x.u AND m.entity_id = x.e AND m.seq = x.s AND m.body_id IS NOT NULL AND b.unit_id = m.unit_id AND b.body_id = m.body_id`
	sqlBodyPut = `INSERT INTO bb_body (unit_id, body_id, part, data)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::bytea[])`
	sqlMsgPut = `INSERT INTO bb_msg (unit_id, entity_id, seq, meta, size, data, body_id)
SELECT u, e, s, coalesce(m, '\x'), z, d, nullif(b, 0)
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bytea[], $5::int[], $6::bytea[], $7::bigint[]) AS x(u, e, s, m, z, d, b)
ON CONFLICT (unit_id, entity_id, seq) DO UPDATE
   SET meta = EXCLUDED.meta, size = EXCLUDED.size, data = EXCLUDED.data, body_id = EXCLUDED.body_id`
	sqlMsgRewrite = `UPDATE bb_msg m SET meta = coalesce(x.mt, '\x'), size = x.z, data = x.d, body_id = nullif(x.b, 0)
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bytea[], $5::int[], $6::bytea[], $7::bigint[]) AS x(u, e, s, mt, z, d, b)
 WHERE m.unit_id = x.u AND m.entity_id = x.e AND m.seq = x.s`
	sqlMsgMeta = `UPDATE bb_msg m SET meta = coalesce(x.mt, '\x')
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bytea[]) AS x(u, e, s, mt)
 WHERE m.unit_id = x.u AND m.entity_id = x.e AND m.seq = x.s`
	sqlLastSeq = `UPDATE bb_entity t SET last_seq = GREATEST(t.last_seq, x.s)
  FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(u, e, s)
 WHERE t.unit_id = x.u AND t.entity_id = x.e`
	sqlValPut = `INSERT INTO bb_value (unit_id, entity_id, key, value)
SELECT u, e, k, coalesce(v, '\x') FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bytea[]) AS x(u, e, k, v)
ON CONFLICT (unit_id, entity_id, key) DO UPDATE SET value = EXCLUDED.value`
	sqlValDel = `DELETE FROM bb_value v USING unnest($1::bigint[], $2::bigint[], $3::text[]) AS x(u, e, k)
 WHERE v.unit_id = x.u AND v.entity_id = x.e AND v.key = x.k`
	// The outbox (§9.3 of docs/design/cluster.md). A landing deletes the
	// claimed rows and divides by zero unless it deleted every one of
	// them, so a transfer is never landed twice.
	sqlXferPut = `INSERT INTO bb_transfer (target_unit, source_unit, id, target_entity, kind, meta, size, data)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::smallint[], $6::bytea[], $7::int[], $8::bytea[])`
	sqlXferBodyPut = `INSERT INTO bb_transfer_body (target_unit, source_unit, id, part, data)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::int[], $5::bytea[])`
	sqlLand = `WITH d AS (DELETE FROM bb_transfer t USING unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(tu, su, id)
  WHERE t.target_unit = x.tu AND t.source_unit = x.su AND t.id = x.id RETURNING 1)
SELECT 1 / (count(*) = $4::int)::int FROM d`
	sqlLandBodies = `DELETE FROM bb_transfer_body b USING unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS x(tu, su, id)
 WHERE b.target_unit = x.tu AND b.source_unit = x.su AND b.id = x.id`
)

// exec sends t as one pipelined transaction and classifies its failure.
func (s *Store) exec(slot int, t *txn) error {
	b := &pgx.Batch{}
	if !t.sync {
		b.Queue(sqlAsync)
	}
	mark := s.marks.Add(1)
	b.Queue(sqlMark, s.o.NodeID, slot, mark)
	fenceAt := -1
	if len(t.units) > 0 && !noFence {
		fenceAt = b.Len()
		b.Queue(sqlFence, t.units, t.epochs)
	}
	if len(t.entDelE) > 0 {
		b.Queue(sqlEntDelBodies, t.entDelU, t.entDelE)
		b.Queue(sqlEntDelMsgs, t.entDelU, t.entDelE)
		b.Queue(sqlEntDelValues, t.entDelU, t.entDelE)
		b.Queue(sqlEntDel, t.entDelU, t.entDelE)
	}
	if len(t.delUnits) > 0 {
		b.Queue(sqlUnitDel, t.delUnits)
	}
	if len(t.newUnits) > 0 {
		var us []int64
		for u := range t.newUnits {
			us = append(us, int64(u))
		}
		slices.Sort(us)
		keys := make([]string, len(us))
		for i, u := range us {
			keys[i] = "#" + strconv.FormatInt(u, 10) // a subscription's unit is never new
			if p := t.entPuts[uint64(u)]; p != nil {
				keys[i] = NameKey(p.name)
			}
		}
		b.Queue(sqlUnitNew, us, keys, s.o.NodeID, s.session)
	}
	if len(t.delUnits) > 0 || len(t.newUnits) > 0 {
		b.Queue(sqlCatalogBump)
	}
	if len(t.entPuts) > 0 {
		var us, es []int64
		var ns []string
		var ss [][]byte
		for e, p := range t.entPuts {
			us, es, ns, ss = append(us, int64(p.unit)), append(es, int64(e)), append(ns, p.name), append(ss, p.spec)
		}
		b.Queue(sqlEntPut, us, es, ns, ss)
	}
	s.queueMsgs(t, b)
	if len(t.lastSeq) > 0 {
		var ls keys3
		s.mu.Lock()
		for e, q := range t.lastSeq {
			ls.add(s.unitOf[e], msgKey{e, q})
		}
		s.mu.Unlock()
		b.Queue(sqlLastSeq, ls.u, ls.e, ls.s)
	}
	var vu, ve, du, de []int64
	var vk, dk []string
	var vv [][]byte
	for k, v := range t.vals {
		if v.del {
			du, de, dk = append(du, int64(v.unit)), append(de, int64(k.e)), append(dk, k.k)
		} else {
			vu, ve, vk, vv = append(vu, int64(v.unit)), append(ve, int64(k.e)), append(vk, k.k), append(vv, v.v)
		}
	}
	if len(du) > 0 {
		b.Queue(sqlValDel, du, de, dk)
	}
	if len(vu) > 0 {
		b.Queue(sqlValPut, vu, ve, vk, vv)
	}
	landAt := -1
	if len(t.lands) > 0 {
		var tu, su, id []int64
		for _, k := range t.lands {
			tu, su, id = append(tu, int64(k.TargetUnit)), append(su, int64(k.SourceUnit)), append(id, int64(k.ID))
		}
		landAt = b.Len()
		b.Queue(sqlLand, tu, su, id, len(t.lands))
		b.Queue(sqlLandBodies, tu, su, id)
	}
	s.queueXfers(t, b)
	return s.send(b, slot, mark, fenceAt, landAt)
}

// queueXfers queues the inserts of t's transfers, each with the next id
// of its source unit (the ids of one unit grow in op order), large Data
// in chunks.
func (s *Store) queueXfers(t *txn, b *pgx.Batch) {
	if len(t.xfers) == 0 {
		return
	}
	var tu, su, id, te []int64
	var kind []int16
	var metas, datas [][]byte
	var size []int32
	var bt, bs, bi []int64
	var bp []int32
	var bd [][]byte
	for i := range t.xfers {
		x := &t.xfers[i]
		xid := t.nextBody(x.unit)
		tu, su, id, te = append(tu, int64(x.x.TargetUnit)), append(su, int64(x.unit)), append(id, xid), append(te, int64(x.x.TargetEntity))
		kind, metas, size = append(kind, int16(x.x.Kind)), append(metas, x.meta), append(size, int32(len(x.data)))
		if len(x.data) <= s.o.InlineLimit {
			datas = append(datas, x.data)
			continue
		}
		datas = append(datas, nil)
		for part, off := int32(0), 0; off < len(x.data); part, off = part+1, off+s.o.ChunkSize {
			bt, bs, bi, bp = append(bt, int64(x.x.TargetUnit)), append(bs, int64(x.unit)), append(bi, xid), append(bp, part)
			bd = append(bd, x.data[off:min(off+s.o.ChunkSize, len(x.data))])
		}
	}
	b.Queue(sqlXferPut, tu, su, id, te, kind, metas, size, datas)
	if len(bt) > 0 {
		b.Queue(sqlXferBodyPut, bt, bs, bi, bp, bd)
	}
}

// queueMsgs queues the statements of t's message changes: deletes, old
// chunks of replaced messages, new chunks, inserts, rewrites, Meta updates.
func (s *Store) queueMsgs(t *txn, b *pgx.Batch) {
	var del, old, meta keys3
	var metas [][]byte
	var put, rw msgRows
	var body bodyRows
	s.mu.Lock()
	for k, m := range t.msgs {
		switch m.kind {
		case mDel:
			del.add(m.unit, k)
		case mMeta:
			meta.add(m.unit, k)
			metas = append(metas, m.meta)
		case mPut, mRewrite:
			if _, ok := s.chunked[k]; ok {
				old.add(m.unit, k)
			}
			r := &put
			if m.kind == mRewrite {
				r = &rw
			}
			var bid int64
			data := m.data
			if len(m.data) > s.o.InlineLimit {
				bid = t.nextBody(m.unit)
				for part, off := int32(0), 0; off < len(m.data); part, off = part+1, off+s.o.ChunkSize {
					body.add(m.unit, bid, part, m.data[off:min(off+s.o.ChunkSize, len(m.data))])
				}
				data = nil
			}
			r.add(m.unit, k, m.meta, len(m.data), data, bid)
		}
	}
	s.mu.Unlock()
	if len(del.u) > 0 {
		b.Queue(sqlMsgDel, del.u, del.e, del.s)
	}
	if len(old.u) > 0 {
		b.Queue(sqlOldBodies, old.u, old.e, old.s)
	}
	if len(body.u) > 0 {
		b.Queue(sqlBodyPut, body.u, body.b, body.p, body.d)
	}
	if len(put.u) > 0 {
		b.Queue(sqlMsgPut, put.u, put.e, put.s, put.m, put.z, put.d, put.b)
	}
	if len(rw.u) > 0 {
		b.Queue(sqlMsgRewrite, rw.u, rw.e, rw.s, rw.m, rw.z, rw.d, rw.b)
	}
	if len(meta.u) > 0 {
		b.Queue(sqlMsgMeta, meta.u, meta.e, meta.s, metas)
	}
}

// send runs b on a pooled connection within TxnDeadline and classifies a
// failure (§6.3 of docs/design/cluster.md): a statement error means the
// transaction was rolled back (ErrNotOwner for the fence, else
// ErrUnavailable). A broken connection once the transaction went out is
// resolved on a new connection: every transaction sets its committer's
// row in bb_commit_mark to a new mark, so once that row can be locked
// (the old transaction is over) it tells whether the transaction
// committed. Not learned within ResolveWait, it is ErrOutcomeUnknown.
func (s *Store) send(b *pgx.Batch, slot int, mark int64, fenceAt, landAt int) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.TxnDeadline)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: commit: %w: %w", store.ErrUnavailable, err)
	}
	br := conn.SendBatch(ctx, b)
	var stmtErr error
	failedAt := -1
	for i := range b.Len() {
		if _, stmtErr = br.Exec(); stmtErr != nil {
			failedAt = i
			break
		}
	}
	closeErr := br.Close()
	// Released before any resolution: that needs a connection of its own
	// and must not wait for this broken one.
	conn.Release()
	if stmtErr == nil && closeErr == nil {
		return nil
	}
	err = stmtErr
	if err == nil {
		err = closeErr
	}
	var pe *pgconn.PgError
	if errors.As(stmtErr, &pe) {
		// The server answered a statement with an error (or a FATAL as it
		// shut the session down) before it reached the Sync that commits:
		// the transaction rolled back.
		if failedAt == fenceAt && pe.Code == "22012" {
			return &notOwnerError{err: err}
		}
		if pe.Code == "23505" && pe.TableName == "bb_unit" && strings.Contains(pe.ConstraintName, "name_key") {
			// Another node created a queue or topic of that name
			// since this one looked.
			return fmt.Errorf("pgstore: commit: %w: %w", store.ErrNameTaken, err)
		}
		if failedAt == landAt && pe.Code == "22012" {
			return fmt.Errorf("pgstore: commit: %w: a claimed transfer is no longer in the outbox (landed already): %w", store.ErrUnavailable, err)
		}
		if isRetryable(err) {
			return err
		}
		return fmt.Errorf("pgstore: commit: %w: %w", store.ErrUnavailable, err)
	}
	if pgconn.SafeToRetry(err) {
		return fmt.Errorf("pgstore: commit: %w: %w", store.ErrUnavailable, err)
	}
	switch s.resolve(slot, mark) {
	case "committed":
		return nil
	case "aborted":
		return fmt.Errorf("pgstore: commit: %w: %w", store.ErrUnavailable, err)
	}
	return s.unknown(slot, mark, err)
}

// unknown answers a commit whose outcome could not be learned in time:
// ErrOutcomeUnknown. Until a goroutine learns it, every commit is refused
// (a later transaction of the same committer would hide the mark); if it
// turns out committed, the broker's memory lags the database and the
// store stops until a restart reloads it; if not, the store goes on.
func (s *Store) unknown(slot int, mark int64, cause error) error {
	if s.o.Cluster {
		return s.unknownUnits(cause)
	}
	s.mu.Lock()
	s.unresolved[slot] = mark
	s.mu.Unlock()
	s.wg.Add(1)
	go s.resolveLater(slot, mark, cause)
	return fmt.Errorf("pgstore: %w: %w", store.ErrOutcomeUnknown, cause)
}

// resolveLater asks until it learns what became of (slot, mark) or the
// store closes.
func (s *Store) resolveLater(slot int, mark int64, cause error) {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		switch s.resolve(slot, mark) {
		case "":
			continue
		case "committed":
			s.stop2(fmt.Errorf("pgstore: a commit reported as failed (%w) was applied; no more writes until Busbar restarts and reloads: %w", cause, store.ErrFailed))
		default:
			s.o.Log.Info("an interrupted commit did not apply; taking writes again", "slot", slot)
		}
		s.mu.Lock()
		delete(s.unresolved, slot)
		s.mu.Unlock()
		return
	}
}

// resolve learns, on new connections and within ResolveWait, whether the
// transaction that set slot's mark to mark committed: "committed",
// "aborted" or "" (not learned in time). Locking the row waits for that
// transaction to end if its backend still runs.
func (s *Store) resolve(slot int, mark int64) string {
	deadline := time.Now().Add(s.o.ResolveWait)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var got int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT mark FROM bb_commit_mark WHERE node_id = $1 AND slot = $2 FOR UPDATE`, s.o.NodeID, slot).Scan(&got)
		})
		cancel()
		switch {
		case err != nil:
			select {
			case <-s.stop: // closing: the background resolution gives up
				return ""
			case <-time.After(100 * time.Millisecond):
			}
		case got == mark:
			return "committed"
		default:
			return "aborted"
		}
	}
	return ""
}

// apply records a committed transaction in the store's memory.
func (s *Store) apply(t *txn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !t.sync {
		s.async = true
	}
	for e, l := range t.live {
		if l {
			s.live[e] = true
		} else {
			delete(s.live, e)
			for k := range s.chunked {
				if k.e == e {
					delete(s.chunked, k)
				}
			}
		}
	}
	for u := range t.newUnits {
		s.units[u] = 1
	}
	for _, u := range t.delUnits {
		delete(s.units, uint64(u))
		delete(s.counters, uint64(u))
	}
	for u, c := range t.counters {
		if _, ok := s.units[u]; ok && c > s.counters[u] {
			s.counters[u] = c
		}
	}
	for k, m := range t.msgs {
		if (m.kind == mPut || m.kind == mRewrite) && len(m.data) > s.o.InlineLimit {
			s.chunked[k] = struct{}{}
		} else if m.kind != mMeta {
			delete(s.chunked, k)
		}
	}
}

type keys3 struct{ u, e, s []int64 }

func (k *keys3) add(u uint64, m msgKey) {
	k.u, k.e, k.s = append(k.u, int64(u)), append(k.e, int64(m.e)), append(k.s, int64(m.s))
}

type msgRows struct {
	keys3
	m, d [][]byte
	z    []int32
	b    []int64
}

func (r *msgRows) add(u uint64, k msgKey, meta []byte, size int, data []byte, body int64) {
	r.keys3.add(u, k)
	r.m, r.z, r.d, r.b = append(r.m, meta), append(r.z, int32(size)), append(r.d, data), append(r.b, body)
}

type bodyRows struct {
	u, b []int64
	p    []int32
	d    [][]byte
}

func (r *bodyRows) add(u uint64, b int64, p int32, d []byte) {
	r.u, r.b, r.p, r.d = append(r.u, int64(u)), append(r.b, b), append(r.p, p), append(r.d, d)
}
