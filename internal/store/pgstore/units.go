package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/store"
)

// Unit leases in cluster mode: the acquire of docs/design/cluster.md
// §5.3, the release of §5.4 and the per-unit load of §7.

var _ store.UnitStore = (*Store)(nil)

// recoverPage is how many message rows one query of RecoverUnit reads.
const recoverPage = 10000

// Lost delivers units whose commits were fenced off (another node raised
// the epoch). Nothing blocks on a full channel: a unit that does not fit
// is dropped from it, and the cluster's poller finds it.
func (s *Store) Lost() <-chan uint64 { return s.lost }

// Holds reports whether this store writes unit now (store.UnitLeases).
func (s *Store) Holds(unit uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.units[unit]
	return ok
}

func (s *Store) tellLost(units []uint64) {
	for _, u := range units {
		select {
		case s.lost <- u:
		default:
			s.o.Log.Warn("lost-unit hint dropped: the channel is full", "unit", u)
		}
	}
}

// quiesceLocked fails the queued batches touching unit (their memory is
// about to be replaced) and waits until none is in flight. s.mu is held.
func (s *Store) quiesceLocked(unit uint64, fail error) {
	rest := s.queue[:0]
	for _, p := range s.queue {
		if slices.Contains(p.units, unit) {
			p.done <- fail
			continue
		}
		rest = append(rest, p)
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	for s.busy[unit] {
		s.cond.Wait()
	}
}

// flushLocked waits until no batch of unit is queued or in flight. s.mu
// is held.
func (s *Store) flushLocked(unit uint64) {
	for {
		queued := false
		for _, p := range s.queue {
			if slices.Contains(p.units, unit) {
				queued = true
				break
			}
		}
		if !queued && !s.busy[unit] {
			return
		}
		s.cond.Wait()
	}
}

// Acquire takes unit for this node's session (§5.3) in one short
// transaction: both node rows (mine and the owner's) locked in node-id
// order, then the unit row; eligible when the unit is free (and not
// reserved for another node), when its owner's session is no longer live
// (which is then killed for good), or when it is this session's own (a
// re-take after a lapse or an unknown outcome). The epoch is raised; the
// store fences the unit's writes with it from now on.
func (s *Store) Acquire(ctx context.Context, unit uint64) (uint64, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, store.ErrClosed
	}
	s.quiesceLocked(unit, fmt.Errorf("%w (unit %d is being taken again)", store.ErrNotOwner, unit))
	delete(s.units, unit)
	session := s.session
	s.mu.Unlock()
	if session == 0 {
		return 0, fmt.Errorf("pgstore: acquire: %w: not registered", store.ErrSessionLost)
	}
	epoch, err := s.acquire(ctx, unit, session)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.units[unit] = int64(epoch)
	s.counters[unit] = 0
	s.mu.Unlock()
	return epoch, nil
}

func (s *Store) acquire(ctx context.Context, unit uint64, session int64) (uint64, error) {
	me := s.o.NodeID
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
	}
	defer tx.Rollback(ctx)
	// The unit row waits for the old owner's fenced writes in flight
	// (§6.2) while this transaction holds two node rows, which the
	// renewals of both nodes need: never for long. Not acquired now, the
	// unit is tried again at the next poll.
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, millis(s.o.lockWait())); err != nil {
		return 0, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
	}
	nodes, err := lockNodes(ctx, tx, me, unit)
	if err != nil {
		return 0, err
	}
	if mine, ok := nodes[me]; !ok || mine.session != session || !mine.live {
		return 0, fmt.Errorf("pgstore: acquire unit %d: %w", unit, store.ErrSessionLost)
	}
	var owner, handoff *string
	var ownerSession *int64
	var epoch int64
	var state string
	var reserved *bool
	err = tx.QueryRow(ctx, `SELECT owner_node, owner_session, epoch, state, handoff_to, handoff_until > clock_timestamp()
  FROM bb_unit WHERE unit_id = $1 FOR UPDATE`, int64(unit)).Scan(&owner, &ownerSession, &epoch, &state, &handoff, &reserved)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pgstore: acquire unit %d: %w: it does not exist", unit, store.ErrNotEligible)
	} else if err != nil {
		return 0, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
	}
	r := store.Unit{Owner: deref(owner), State: store.UnitState(state), HandoffTo: deref(handoff), Reserved: reserved != nil && *reserved}
	if ownerSession != nil {
		r.OwnerSession = *ownerSession
	}
	eligible := takeable(r, me, session, nodes)
	if !eligible {
		return 0, fmt.Errorf("pgstore: acquire unit %d (owner %q, state %s): %w", unit, deref(owner), state, store.ErrNotEligible)
	}
	if owner != nil && ownerSession != nil && *owner != me {
		if _, err := tx.Exec(ctx, `UPDATE bb_node SET expires_at = '-infinity'
 WHERE node_id = $1 AND session = $2 AND expires_at <= clock_timestamp()`, *owner, *ownerSession); err != nil {
			return 0, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
		}
	}
	if epoch >= 1<<31-1 {
		return 0, fmt.Errorf("pgstore: acquire unit %d: its epoch %d is at the limit of body and transfer ids", unit, epoch)
	}
	if err := tx.QueryRow(ctx, `UPDATE bb_unit SET owner_node = $2, owner_session = $3, epoch = epoch + 1, state = 'owned',
       handoff_to = NULL, handoff_until = NULL, changed_at = clock_timestamp()
 WHERE unit_id = $1 RETURNING epoch`, int64(unit), me, session).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrOutcomeUnknown, err)
	}
	return uint64(epoch), nil
}

type nodeRow struct {
	session int64
	live    bool
}

// lockNodes locks this node's row and the unit owner's, in node-id order
// (two nodes taking each other's units must not deadlock).
func lockNodes(ctx context.Context, tx pgx.Tx, me string, unit uint64) (map[string]nodeRow, error) {
	rows, err := tx.Query(ctx, `SELECT node_id, session, expires_at > clock_timestamp() FROM bb_node
 WHERE node_id = $1 OR node_id = (SELECT owner_node FROM bb_unit WHERE unit_id = $2)
 ORDER BY node_id FOR UPDATE`, me, int64(unit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
	}
	nodes := map[string]nodeRow{}
	for rows.Next() {
		var id string
		var n nodeRow
		if err := rows.Scan(&id, &n.session, &n.live); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
		}
		nodes[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: acquire: %w: %w", store.ErrUnavailable, err)
	}
	return nodes, nil
}

// takeable decides §5.3's eligibility from the locked rows: my own unit
// under my session (a re-take), a free unit not reserved for another
// node, or a unit whose owner's session is gone or no longer live.
func takeable(r store.Unit, me string, session int64, nodes map[string]nodeRow) bool {
	switch {
	case r.Owner == me && r.OwnerSession == session:
		return true
	case r.State == store.UnitFree:
		return r.HandoffTo == "" || r.HandoffTo == me || !r.Reserved
	}
	n, ok := nodes[r.Owner]
	return !ok || n.session != r.OwnerSession || !n.live
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Release waits for the unit's commits queued or in flight, stops
// writing the unit, and frees its row (§5.4), reserving it for next (if
// not "") for a while. A unit that another node took meanwhile is not
// touched: ErrNotOwner.
func (s *Store) Release(ctx context.Context, unit uint64, next string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	s.flushLocked(unit)
	epoch, ok := s.units[unit]
	delete(s.units, unit)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("pgstore: release unit %d: %w", unit, store.ErrNotOwner)
	}
	var nextArg *string
	if next != "" {
		nextArg = &next
	}
	tag, err := s.pool.Exec(ctx, `UPDATE bb_unit SET state = 'free', owner_node = NULL, owner_session = NULL,
       handoff_to = $4, handoff_until = CASE WHEN $4::text IS NULL THEN NULL ELSE clock_timestamp() + $5::interval END,
       changed_at = clock_timestamp()
 WHERE unit_id = $1 AND owner_node = $2 AND epoch = $3`, int64(unit), s.o.NodeID, epoch, nextArg, interval(defaultReserve))
	if err != nil {
		// The row still names this node: its session's expiry frees it.
		return fmt.Errorf("pgstore: release unit %d: %w: %w", unit, store.ErrUnavailable, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgstore: release unit %d: %w", unit, store.ErrNotOwner)
	}
	return nil
}

// RecoverUnit replays one unit (§7) in one REPEATABLE READ, read-only
// snapshot: its entities in id order, its messages in (entity, seq)
// order, read 10,000 rows at a time, then its values. The store's memory
// of the unit's entities is replaced by what was read. The unit must
// have been acquired.
func (s *Store) RecoverUnit(ctx context.Context, unit uint64, v store.Visitor) error {
	s.mu.Lock()
	closed := s.closed
	_, owned := s.units[unit]
	s.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	if !owned {
		return fmt.Errorf("pgstore: recover unit %d: %w: acquire it first", unit, store.ErrNotOwner)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
	}
	defer tx.Rollback(ctx)
	if err := slowReader(ctx, tx); err != nil {
		return fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
	}
	u := int64(unit)
	rows, err := tx.Query(ctx, `SELECT entity_id, name, spec, last_seq FROM bb_entity WHERE unit_id = $1 ORDER BY entity_id`, u)
	if err != nil {
		return fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
	}
	ents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Entity, error) {
		var e store.Entity
		var id, last int64
		err := r.Scan(&id, &e.Name, &e.Spec, &last)
		e.ID, e.LastSeq = uint64(id), uint64(last)
		return e, err
	})
	if err != nil {
		return fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
	}
	for _, e := range ents {
		if v.Entity != nil {
			if err := v.Entity(e); err != nil {
				return err
			}
		}
	}
	chunked, err := recoverMessages(ctx, tx, unit, v.Message)
	if err != nil {
		return err
	}
	if err := recoverValues(ctx, tx, unit, v.Value); err != nil {
		return err
	}
	// The unit's entities as the database has them now.
	s.mu.Lock()
	defer s.mu.Unlock()
	for e, owner := range s.unitOf {
		if owner == unit {
			delete(s.unitOf, e)
			delete(s.live, e)
		}
	}
	for k := range s.chunked {
		if s.unitOf[k.e] == 0 && !s.live[k.e] {
			delete(s.chunked, k)
		}
	}
	for _, e := range ents {
		s.unitOf[e.ID], s.live[e.ID] = unit, true
	}
	for _, k := range chunked {
		s.chunked[k] = struct{}{}
	}
	return nil
}

// recoverMessages visits the unit's messages, keyset-paged, and returns
// those stored in chunks.
func recoverMessages(ctx context.Context, tx pgx.Tx, unit uint64, visit func(store.Message) error) ([]msgKey, error) {
	var chunked []msgKey
	var lastE, lastQ int64 = -1, -1
	for {
		rows, err := tx.Query(ctx, `SELECT entity_id, seq, meta, size, body_id IS NOT NULL FROM bb_msg
 WHERE unit_id = $1 AND (entity_id, seq) > ($2, $3) ORDER BY entity_id, seq LIMIT $4`, int64(unit), lastE, lastQ, recoverPage)
		if err != nil {
			return nil, fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
		}
		n := 0
		for rows.Next() {
			var e, q int64
			var size int32
			var chunk bool
			var m store.Message
			if err := rows.Scan(&e, &q, &m.Meta, &size, &chunk); err != nil {
				rows.Close()
				return nil, fmt.Errorf("pgstore: recover unit %d: %w", unit, err)
			}
			n++
			lastE, lastQ = e, q
			m.EntityID, m.Seq, m.Size = uint64(e), uint64(q), int(size)
			if chunk {
				chunked = append(chunked, msgKey{m.EntityID, m.Seq})
			}
			if visit != nil {
				if err := visit(m); err != nil {
					rows.Close()
					return nil, err
				}
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
		}
		if n < recoverPage {
			return chunked, nil
		}
	}
}

// recoverValues visits the unit's values in (entity, key) order.
func recoverValues(ctx context.Context, tx pgx.Tx, unit uint64, visit func(store.Value) error) error {
	rows, err := tx.Query(ctx, `SELECT entity_id, key, value FROM bb_value WHERE unit_id = $1 ORDER BY entity_id, key COLLATE "C"`, int64(unit))
	if err != nil {
		return fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var val store.Value
		if err := rows.Scan(&id, &val.Key, &val.Value); err != nil {
			return fmt.Errorf("pgstore: recover unit %d: %w", unit, err)
		}
		val.EntityID = uint64(id)
		if visit != nil {
			if err := visit(val); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: recover unit %d: %w: %w", unit, store.ErrUnavailable, err)
	}
	return nil
}

// unknownUnits is a cluster node's answer to a commit whose outcome could
// not be learned (§6.3): instead of refusing every commit until it is
// learned, the store gives up every unit it owns (a superset of the
// transaction's) and reports them on Lost. The node then takes each
// again, raising its epoch, and reloads it: the acquire's row lock waits
// for the lost transaction if it still runs, and the new epoch fences it
// if it has not committed, so the reload sees its outcome either way.
func (s *Store) unknownUnits(cause error) error {
	s.mu.Lock()
	units := make([]uint64, 0, len(s.units))
	for u := range s.units {
		units = append(units, u)
	}
	clear(s.units)
	s.mu.Unlock()
	slices.Sort(units)
	s.o.Log.Error("a commit's outcome is unknown: every unit is given up, to be taken again and reloaded", "units", units, "err", cause)
	s.tellLost(units)
	return fmt.Errorf("pgstore: %w: %w", store.ErrOutcomeUnknown, cause)
}

// slowReader lets the read-only recovery transaction tx stay idle
// between statements for up to longRead (the connections' default is
// lockWait, made for transactions that hold row locks).
func slowReader(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`, millis(longRead))
	return err
}
