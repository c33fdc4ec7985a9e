package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/version"
)

// Membership: the node-session statements of docs/design/cluster.md §5.1,
// §5.2 and §5.3 (step 4). Every expiry is computed and compared by the
// database (clock_timestamp(), read when the statement runs, not when its
// transaction began), so the nodes' clocks never enter.

var _ store.Membership = (*Store)(nil)

// Register starts a new session for r.ID (§5.1): the row is inserted, or
// taken over with session + 1 when the previous session has expired.
func (s *Store) Register(ctx context.Context, r store.NodeRegistration) (int64, error) {
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	if r.ID == "" {
		r.ID = s.o.NodeID
	}
	if r.ID != s.o.NodeID {
		return 0, fmt.Errorf("pgstore: register %q: this store was opened for node %q", r.ID, s.o.NodeID)
	}
	if r.TTL <= 0 {
		r.TTL = s.o.SessionTTL
	}
	if r.Version == "" {
		r.Version = version.Version()
	}
	var session int64
	err := s.pool.QueryRow(ctx, `INSERT INTO bb_node (node_id, session, addr, expires_at, started_at, binary_version, schema_max, config_hash)
VALUES ($1, 1, $2, clock_timestamp() + $3::interval, clock_timestamp(), $4, $5, '\x')
ON CONFLICT (node_id) DO UPDATE
   SET session = bb_node.session + 1, addr = EXCLUDED.addr, expires_at = EXCLUDED.expires_at,
       draining = false, started_at = EXCLUDED.started_at, binary_version = EXCLUDED.binary_version,
       schema_max = EXCLUDED.schema_max, config_hash = EXCLUDED.config_hash
 WHERE bb_node.expires_at <= clock_timestamp()
RETURNING session`, r.ID, r.Addr, interval(r.TTL), r.Version, SchemaVersion()).Scan(&session)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pgstore: register node %q: %w", r.ID, store.ErrNodeLive)
	} else if err != nil {
		return 0, fmt.Errorf("pgstore: register node %q: %w: %w", r.ID, store.ErrUnavailable, err)
	}
	s.mu.Lock()
	s.session, s.reg = session, r
	s.mu.Unlock()
	return session, nil
}

// Renew extends this node's session (§5.2), scoped to the session: a
// session that expired or was killed is not revived (ErrSessionLost).
// It runs on the store's renewal connection, never behind the committers
// or the readers (the pool's connections may all be busy or stuck).
// The row is written with synchronous_commit = local: a renewal lost in
// a database fail-over only makes the session expire sooner.
func (s *Store) Renew(ctx context.Context) error {
	s.mu.Lock()
	session, ttl := s.session, s.reg.TTL
	s.mu.Unlock()
	if session == 0 {
		return fmt.Errorf("pgstore: renew: %w: not registered", store.ErrSessionLost)
	}
	tx, err := s.lease.Begin(ctx) // never behind the committers and readers
	if err != nil {
		return fmt.Errorf("pgstore: renew: %w: %w", store.ErrUnavailable, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'local', true)`); err != nil {
		return fmt.Errorf("pgstore: renew: %w: %w", store.ErrUnavailable, err)
	}
	tag, err := tx.Exec(ctx, `UPDATE bb_node SET expires_at = clock_timestamp() + $3::interval
 WHERE node_id = $1 AND session = $2 AND expires_at > clock_timestamp()`, s.o.NodeID, session, interval(ttl))
	if err != nil {
		return fmt.Errorf("pgstore: renew: %w: %w", store.ErrUnavailable, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: renew: %w: %w", store.ErrUnavailable, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgstore: renew node %q session %d: %w", s.o.NodeID, session, store.ErrSessionLost)
	}
	return nil
}

// Nodes lists every node row, with its liveness by the database's clock.
func (s *Store) Nodes(ctx context.Context) ([]store.Node, error) {
	rows, err := s.pool.Query(ctx, `SELECT node_id, session, addr, expires_at > clock_timestamp(), draining FROM bb_node ORDER BY node_id`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: nodes: %w: %w", store.ErrUnavailable, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Node, error) {
		var n store.Node
		err := r.Scan(&n.ID, &n.Session, &n.Addr, &n.Live, &n.Draining)
		return n, err
	})
}

// unitsSlack is how far before the database's current time the next
// watermark of Units is put: a unit row changed in a transaction that
// commits later carries a changed_at older than its commit, by at most
// a transaction's length.
const unitsSlack = 10 * time.Second

// Units lists the unit rows changed since since (all of them for the
// zero time) and the watermark for the next call.
func (s *Store) Units(ctx context.Context, since time.Time) ([]store.Unit, time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return nil, since, fmt.Errorf("pgstore: units: %w: %w", store.ErrUnavailable, err)
	}
	q := `SELECT unit_id, coalesce(owner_node, ''), coalesce(owner_session, 0), epoch, state, coalesce(handoff_to, ''),
       coalesce(handoff_until > clock_timestamp(), false) FROM bb_unit`
	args := []any{}
	if !since.IsZero() {
		q += ` WHERE changed_at >= $1`
		args = append(args, since)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY unit_id`, args...)
	if err != nil {
		return nil, since, fmt.Errorf("pgstore: units: %w: %w", store.ErrUnavailable, err)
	}
	us, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Unit, error) {
		var u store.Unit
		var id, ep int64
		var state string
		err := r.Scan(&id, &u.Owner, &u.OwnerSession, &ep, &state, &u.HandoffTo, &u.Reserved)
		u.ID, u.Epoch, u.State = uint64(id), uint64(ep), store.UnitState(state)
		return u, err
	})
	if err != nil {
		return nil, since, fmt.Errorf("pgstore: units: %w: %w", store.ErrUnavailable, err)
	}
	return us, now.Add(-unitsSlack), nil
}

// Kill ends node's session if it is session and has expired (§5.3 step
// 4): '-infinity' is never renewed.
func (s *Store) Kill(ctx context.Context, node string, session int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE bb_node SET expires_at = '-infinity'
 WHERE node_id = $1 AND session = $2 AND expires_at <= clock_timestamp()`, node, session); err != nil {
		return fmt.Errorf("pgstore: kill: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// SetDraining marks this node's live session as leaving, or not.
func (s *Store) SetDraining(ctx context.Context, draining bool) error {
	s.mu.Lock()
	session := s.session
	s.mu.Unlock()
	tag, err := s.pool.Exec(ctx, `UPDATE bb_node SET draining = $3
 WHERE node_id = $1 AND session = $2 AND expires_at > clock_timestamp()`, s.o.NodeID, session, draining)
	if err != nil {
		return fmt.Errorf("pgstore: draining: %w: %w", store.ErrUnavailable, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgstore: draining: %w", store.ErrSessionLost)
	}
	return nil
}

// Leave ends this node's session now; other nodes may take its units
// at once.
func (s *Store) Leave(ctx context.Context) error {
	s.mu.Lock()
	session := s.session
	s.mu.Unlock()
	if _, err := s.pool.Exec(ctx, `UPDATE bb_node SET expires_at = clock_timestamp()
 WHERE node_id = $1 AND session = $2 AND expires_at > clock_timestamp()`, s.o.NodeID, session); err != nil {
		return fmt.Errorf("pgstore: leave: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}
