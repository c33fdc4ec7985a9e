package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/version"
)

// Store is a store.Store on PostgreSQL. Open returns one; it is safe for
// concurrent use.
type Store struct {
	o       Options
	pool    *pgxpool.Pool
	lease   *pgxpool.Pool // one connection of its own for the session renewals
	session int64
	catalog catalogCache // catalog.go

	// gate: commit transactions hold it shared; re-taking the units after
	// a lapsed session holds it exclusively.
	gate sync.RWMutex

	mu         sync.Mutex
	cond       *sync.Cond
	closed     bool
	queue      []*pending
	busy       map[uint64]bool // units with a transaction in flight
	inflight   int             // transactions in flight
	unitOf     map[uint64]uint64
	live       map[uint64]bool
	units      map[uint64]int64 // units this store owns -> epoch
	counters   map[uint64]uint32
	chunked    map[msgKey]struct{} // messages that may have bb_body rows (a superset)
	async      bool                // a transaction committed without waiting for its WAL flush since the last flush
	stopped    error               // set when the store takes no more writes
	renewErr   error               // the last session renewal's failure, nil once one succeeds
	gates      []*store.Gate       // per committer: the followers it awaits (commit pacing)
	marks      atomic.Int64        // the last commit mark (bb_commit_mark)
	unresolved map[int]int64       // committer slot -> mark of a commit whose outcome is not known yet

	// Cluster mode (membership.go, units.go): the session is registered
	// through Membership and units are taken one by one.
	reg  store.NodeRegistration
	lost chan uint64

	statsMu sync.Mutex
	stats   store.Stats
	statsAt time.Time

	stop chan struct{}
	wg   sync.WaitGroup
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.StatsReporter = (*Store)(nil)
	_ store.DiskChecker   = (*Store)(nil)
)

// Open connects to the database named by url (a postgres:// URL or a
// key=value connection string), applies the schema migrations, registers
// this node's session, takes every unit and starts the renewer and the
// committers. It refuses while another live process holds the session of
// the same node id or owns a unit.
func Open(ctx context.Context, url string, o Options) (*Store, error) {
	o.defaults()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	cfg.MaxConns = int32(2*o.Conns + 2) // committers, their resolutions, readers
	cfg.MinConns = 1
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > o.TxnDeadline {
		cfg.ConnConfig.ConnectTimeout = o.TxnDeadline
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "busbar"
	}
	// A transaction whose client went silent (a node cut off from the
	// database with its sockets still open) would hold its row locks for
	// ever: an acquire stuck that way holds two node rows, and the
	// renewals of those nodes would wait behind it until their sessions
	// expired. The server ends such a transaction after lockWait.
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = millis(o.lockWait())
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	// Renewals never queue behind commits or reads for a connection: a
	// busy store must not look like a dead one.
	// More than one: a renewal abandoned mid-way (its deadline passed)
	// keeps its slot while pgx cancels its query on a new connection,
	// which takes up to 15 s when the database is out of reach; the next
	// renewals must not wait for that.
	lcfg := cfg.Copy()
	lcfg.MaxConns, lcfg.MinConns = 3, 0
	lease, err := pgxpool.NewWithConfig(ctx, lcfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	s := &Store{
		o: o, pool: pool, lease: lease,
		busy: map[uint64]bool{}, unitOf: map[uint64]uint64{}, live: map[uint64]bool{},
		units: map[uint64]int64{}, counters: map[uint64]uint32{}, chunked: map[msgKey]struct{}{}, unresolved: map[int]int64{},
		stop: make(chan struct{}), lost: make(chan uint64, lostBuffer),
	}
	s.cond = sync.NewCond(&s.mu)
	for range o.Conns {
		s.gates = append(s.gates, store.NewGate())
	}
	if err := s.open(ctx); err != nil {
		pool.Close()
		lease.Close()
		return nil, err
	}
	s.wg.Add(o.Conns)
	if !o.Cluster {
		s.wg.Add(1)
		go s.renewer()
	}
	for i := range o.Conns {
		go s.committer(i)
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pgstore: connect: %w: %w", store.ErrUnavailable, err)
	}
	if err := s.createSchema(ctx); err != nil {
		return err
	}
	if err := migrate(ctx, s.pool, s.o.NodeID+" "+version.Version()); err != nil {
		return err
	}
	if !s.o.Cluster {
		if err := s.register(ctx); err != nil {
			return err
		}
		if err := s.acquireAll(ctx); err != nil {
			return err
		}
	}
	// One commit-mark row per committer, reset for this session.
	if _, err := s.pool.Exec(ctx, `INSERT INTO bb_commit_mark (node_id, slot, mark)
SELECT $1, g, 0 FROM generate_series(0, $2::int - 1) AS g
ON CONFLICT (node_id, slot) DO UPDATE SET mark = 0`, s.o.NodeID, s.o.Conns); err != nil {
		return fmt.Errorf("pgstore: commit marks: %w", err)
	}
	return s.loadModel(ctx)
}

// createSchema creates the first schema of the URL's search_path, if
// the URL names one (postgres://…?search_path=busbar keeps Busbar's
// tables apart from others in the database).
func (s *Store) createSchema(ctx context.Context) error {
	sp := s.pool.Config().ConnConfig.RuntimeParams["search_path"]
	first, _, _ := strings.Cut(sp, ",")
	first = strings.Trim(strings.TrimSpace(first), `"`)
	if first == "" || first == "$user" {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", first).Scan(&exists); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{first}.Sanitize()); err != nil {
		return fmt.Errorf("pgstore: create schema %s (the first of search_path): %w", first, err)
	}
	return nil
}

// register inserts or renews this node's row with a new session (§5.1 of
// docs/design/cluster.md). While a live process holds the row it waits up to
// StartWait for it to expire, then refuses.
func (s *Store) register(ctx context.Context) error {
	deadline := time.Now().Add(s.o.StartWait)
	for {
		err := s.pool.QueryRow(ctx, `INSERT INTO bb_node (node_id, session, addr, expires_at, started_at, binary_version, schema_max, config_hash)
VALUES ($1, 1, '', clock_timestamp() + $2::interval, clock_timestamp(), $3, $4, '\x')
ON CONFLICT (node_id) DO UPDATE
   SET session = bb_node.session + 1, addr = EXCLUDED.addr, expires_at = EXCLUDED.expires_at,
       draining = false, started_at = EXCLUDED.started_at, binary_version = EXCLUDED.binary_version,
       schema_max = EXCLUDED.schema_max, config_hash = EXCLUDED.config_hash
 WHERE bb_node.expires_at <= clock_timestamp()
RETURNING session`, s.o.NodeID, interval(s.o.SessionTTL), version.Version(), SchemaVersion()).Scan(&s.session)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgstore: register node %q: %w", s.o.NodeID, err)
		}
		if time.Now().After(deadline) {
			var started time.Time
			var ver string
			_ = s.pool.QueryRow(ctx, `SELECT started_at, binary_version FROM bb_node WHERE node_id = $1`, s.o.NodeID).Scan(&started, &ver)
			return fmt.Errorf("pgstore: another Busbar process (node %q, version %s, started %s) is using this database and is alive; only one may run on it: stop it first",
				s.o.NodeID, ver, started.UTC().Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.o.Heartbeat):
		}
	}
}

// acquireAll takes every unit for this session, raising each epoch (§5.3):
// on a single node every queue and topic is this node's. It refuses when a
// unit is owned by another node's live session.
func (s *Store) acquireAll(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: acquire: %w", err)
	}
	defer tx.Rollback(ctx)
	var other string
	err = tx.QueryRow(ctx, `SELECT u.owner_node FROM bb_unit u JOIN bb_node n ON n.node_id = u.owner_node
 WHERE u.owner_node <> $1 AND n.session = u.owner_session AND n.expires_at > clock_timestamp()
 ORDER BY u.unit_id LIMIT 1`, s.o.NodeID).Scan(&other)
	if err == nil {
		return fmt.Errorf("pgstore: node %q owns entities in this database and is alive; only one Busbar process may run on it", other)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: acquire: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT unit_id FROM bb_unit ORDER BY unit_id FOR UPDATE`); err != nil {
		return fmt.Errorf("pgstore: acquire: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE bb_node SET expires_at = '-infinity'
 WHERE node_id <> $1 AND expires_at <= clock_timestamp() AND expires_at <> '-infinity'`, s.o.NodeID); err != nil {
		return fmt.Errorf("pgstore: acquire: %w", err)
	}
	rows, err := tx.Query(ctx, `UPDATE bb_unit SET owner_node = $1, owner_session = $2, epoch = epoch + 1, state = 'owned',
       handoff_to = NULL, handoff_until = NULL, changed_at = clock_timestamp()
RETURNING unit_id, epoch`, s.o.NodeID, s.session)
	if err != nil {
		return fmt.Errorf("pgstore: acquire: %w", err)
	}
	units := map[uint64]int64{}
	for rows.Next() {
		var u, ep int64
		if err := rows.Scan(&u, &ep); err != nil {
			return fmt.Errorf("pgstore: acquire: %w", err)
		}
		units[uint64(u)] = ep
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: acquire: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: acquire: %w", err)
	}
	s.units = units
	return nil
}

// loadModel reads what the commit path keeps in memory: each entity's
// unit, the live entities and the messages stored in chunks.
func (s *Store) loadModel(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT unit_id, entity_id FROM bb_entity`)
	if err != nil {
		return fmt.Errorf("pgstore: load: %w", err)
	}
	for rows.Next() {
		var u, e int64
		if err := rows.Scan(&u, &e); err != nil {
			return fmt.Errorf("pgstore: load: %w", err)
		}
		s.unitOf[uint64(e)] = uint64(u)
		s.live[uint64(e)] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: load: %w", err)
	}
	rows, err = s.pool.Query(ctx, `SELECT entity_id, seq FROM bb_msg WHERE body_id IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("pgstore: load: %w", err)
	}
	for rows.Next() {
		var e, q int64
		if err := rows.Scan(&e, &q); err != nil {
			return fmt.Errorf("pgstore: load: %w", err)
		}
		s.chunked[msgKey{uint64(e), uint64(q)}] = struct{}{}
	}
	return rows.Err()
}

// renewer keeps the node's session live (§5.2): every Heartbeat it moves
// expires_at forward, scoped to its session. When the session has lapsed
// (the database was unreachable for longer than the TTL) it registers
// again and re-takes its units if their epochs did not move meanwhile
// (nobody wrote them); otherwise the store stops with ErrNotOwner.
func (s *Store) renewer() {
	defer s.wg.Done()
	t := time.NewTicker(s.o.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		err := s.renew()
		if err != nil {
			s.o.Log.Warn("session renewal failed", "node", s.o.NodeID, "err", err)
			err = fmt.Errorf("pgstore: the database does not answer: %w: %w", store.ErrUnavailable, err)
		}
		s.mu.Lock()
		s.renewErr = err
		s.mu.Unlock()
	}
}

func (s *Store) renew() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Heartbeat*2)
	defer cancel()
	tag, err := s.lease.Exec(ctx, `UPDATE bb_node SET expires_at = clock_timestamp() + $3::interval
 WHERE node_id = $1 AND session = $2 AND expires_at > clock_timestamp()`, s.o.NodeID, s.session, interval(s.o.SessionTTL))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if s.stoppedErr() != nil {
		return nil
	}
	return s.retake(ctx)
}

// retake registers a new session after a lapse and moves every unit to
// it, raising the epoch, provided each is still (this node, the old
// session, the epoch this store holds).
func (s *Store) retake(ctx context.Context) error {
	s.gate.Lock()
	defer s.gate.Unlock()
	tx, err := s.lease.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var session int64
	err = tx.QueryRow(ctx, `UPDATE bb_node SET session = session + 1, expires_at = clock_timestamp() + $3::interval, started_at = clock_timestamp()
 WHERE node_id = $1 AND session = $2 AND expires_at <= clock_timestamp() AND expires_at <> '-infinity'
RETURNING session`, s.o.NodeID, s.session, interval(s.o.SessionTTL)).Scan(&session)
	if errors.Is(err, pgx.ErrNoRows) {
		// Killed or taken by another process: it may have written.
		s.stop2(fmt.Errorf("%w: this process's session in the database was taken over by another", store.ErrNotOwner))
		return errors.New("session lost to another process")
	} else if err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT unit_id, owner_node, owner_session, epoch FROM bb_unit ORDER BY unit_id FOR UPDATE`)
	if err != nil {
		return err
	}
	s.mu.Lock()
	want := make(map[uint64]int64, len(s.units))
	for u, ep := range s.units {
		want[u] = ep
	}
	s.mu.Unlock()
	moved := false
	for rows.Next() {
		var u, sess, ep int64
		var node string
		if err := rows.Scan(&u, &node, &sess, &ep); err != nil {
			return err
		}
		if w, ok := want[uint64(u)]; !ok || w != ep || node != s.o.NodeID || sess != s.session {
			moved = true
		}
		delete(want, uint64(u))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if moved || len(want) > 0 {
		s.stop2(fmt.Errorf("%w: another process changed this database while this one's session had lapsed", store.ErrNotOwner))
		return errors.New("units moved while the session had lapsed")
	}
	rows, err = tx.Query(ctx, `UPDATE bb_unit SET owner_session = $2, epoch = epoch + 1, changed_at = clock_timestamp()
 WHERE owner_node = $1 RETURNING unit_id, epoch`, s.o.NodeID, session)
	if err != nil {
		return err
	}
	units := map[uint64]int64{}
	for rows.Next() {
		var u, ep int64
		if err := rows.Scan(&u, &ep); err != nil {
			return err
		}
		units[uint64(u)] = ep
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.session, s.units = session, units
	s.mu.Unlock()
	s.o.Log.Info("session renewed after a lapse; units re-taken", "node", s.o.NodeID, "session", session)
	return nil
}

// stop2 stops the store taking writes with err (the first reason wins).
func (s *Store) stop2(err error) {
	s.mu.Lock()
	if s.stopped == nil {
		s.stopped = err
		s.o.Log.Error("store stopped taking writes", "err", err)
	}
	s.mu.Unlock()
}

func (s *Store) stoppedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// CheckGrowth is why the store takes no commit now, if anything: new data
// is refused at once then.
func (s *Store) CheckGrowth() error { return s.refusal() }

// Health is nil while the store takes writes; otherwise why not: it
// stopped (an unknown commit outcome, the units taken by another process)
// or the database did not answer the last session renewal.
func (s *Store) Health() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refusalLocked(); err != nil {
		return err
	}
	return s.renewErr
}

// Recover replays the live state in one REPEATABLE READ snapshot:
// entities in id order, then each entity's messages in seq order, then
// values. Rows stream to v; v may call the store.
func (s *Store) Recover(v store.Visitor) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	ctx := context.Background()
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("pgstore: recover: %w: %w", store.ErrUnavailable, err)
	}
	defer tx.Rollback(ctx)
	if err := slowReader(ctx, tx); err != nil {
		return fmt.Errorf("pgstore: recover: %w: %w", store.ErrUnavailable, err)
	}
	type ent struct {
		unit, id int64
	}
	var ents []ent
	rows, err := tx.Query(ctx, `SELECT unit_id, entity_id, name, spec, last_seq FROM bb_entity ORDER BY entity_id`)
	if err != nil {
		return fmt.Errorf("pgstore: recover: %w", err)
	}
	var visitErr error
	for rows.Next() {
		var e store.Entity
		var u, id, last int64
		if err := rows.Scan(&u, &id, &e.Name, &e.Spec, &last); err != nil {
			return fmt.Errorf("pgstore: recover: %w", err)
		}
		e.ID, e.LastSeq = uint64(id), uint64(last)
		ents = append(ents, ent{u, id})
		if v.Entity != nil && visitErr == nil {
			visitErr = v.Entity(e)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: recover: %w", err)
	}
	if visitErr != nil {
		return visitErr
	}
	if v.Message != nil {
		for _, e := range ents {
			rows, err := tx.Query(ctx, `SELECT seq, meta, size FROM bb_msg WHERE unit_id = $1 AND entity_id = $2 ORDER BY seq`, e.unit, e.id)
			if err != nil {
				return fmt.Errorf("pgstore: recover: %w", err)
			}
			for rows.Next() {
				var seq int64
				var size int32
				m := store.Message{EntityID: uint64(e.id)}
				if err := rows.Scan(&seq, &m.Meta, &size); err != nil {
					rows.Close()
					return fmt.Errorf("pgstore: recover: %w", err)
				}
				m.Seq, m.Size = uint64(seq), int(size)
				if visitErr = v.Message(m); visitErr != nil {
					rows.Close()
					return visitErr
				}
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("pgstore: recover: %w", err)
			}
		}
	}
	if v.Value != nil {
		rows, err := tx.Query(ctx, `SELECT entity_id, key, value FROM bb_value ORDER BY entity_id, key COLLATE "C"`)
		if err != nil {
			return fmt.Errorf("pgstore: recover: %w", err)
		}
		for rows.Next() {
			var id int64
			var val store.Value
			if err := rows.Scan(&id, &val.Key, &val.Value); err != nil {
				rows.Close()
				return fmt.Errorf("pgstore: recover: %w", err)
			}
			val.EntityID = uint64(id)
			if visitErr = v.Value(val); visitErr != nil {
				rows.Close()
				return visitErr
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("pgstore: recover: %w", err)
		}
	}
	return nil
}

// ReadData returns the Data of message (entityID, seq): a primary-key
// lookup, plus its chunks when it is stored in bb_body.
func (s *Store) ReadData(entityID, seq uint64) ([]byte, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, store.ErrClosed
	}
	unit, ok := s.unitOf[entityID]
	s.mu.Unlock()
	if !ok {
		return nil, store.ErrNotFound
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.TxnDeadline)
	defer cancel()
	var data []byte
	var body *int64
	err := s.pool.QueryRow(ctx, `SELECT data, body_id FROM bb_msg WHERE unit_id = $1 AND entity_id = $2 AND seq = $3`,
		int64(unit), int64(entityID), int64(seq)).Scan(&data, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	} else if err != nil {
		return nil, fmt.Errorf("pgstore: read data: %w: %w", store.ErrUnavailable, err)
	}
	if body == nil {
		return data, nil
	}
	return s.readBody(ctx, unit, *body)
}

func (s *Store) readBody(ctx context.Context, unit uint64, body int64) ([]byte, error) {
	rows, err := s.pool.Query(ctx, `SELECT data FROM bb_body WHERE unit_id = $1 AND body_id = $2 ORDER BY part`, int64(unit), body)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read data: %w: %w", store.ErrUnavailable, err)
	}
	var out []byte
	for rows.Next() {
		var part []byte
		if err := rows.Scan(&part); err != nil {
			return nil, fmt.Errorf("pgstore: read data: %w", err)
		}
		out = append(out, part...)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: read data: %w: %w", store.ErrUnavailable, err)
	}
	return out, nil
}

// ReadDataBatch reads the inline Data of all refs with one statement and
// the chunked ones one by one.
func (s *Store) ReadDataBatch(refs []store.DataRef) ([][]byte, []error) {
	datas, errs := make([][]byte, len(refs)), make([]error, len(refs))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for i := range errs {
			errs[i] = store.ErrClosed
		}
		return datas, errs
	}
	us, es, qs := make([]int64, len(refs)), make([]int64, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		u, ok := s.unitOf[r.EntityID]
		if !ok {
			u = 0 // no row matches: ErrNotFound below
		}
		us[i], es[i], qs[i] = int64(u), int64(r.EntityID), int64(r.Seq)
	}
	s.mu.Unlock()
	for i := range errs {
		errs[i] = store.ErrNotFound
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.TxnDeadline)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT x.i, m.data, m.body_id FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS x(u, e, s, i)
  JOIN bb_msg m ON m.unit_id = x.u AND m.entity_id = x.e AND m.seq = x.s`, us, es, qs)
	if err != nil {
		err = fmt.Errorf("pgstore: read data: %w: %w", store.ErrUnavailable, err)
		for i := range errs {
			errs[i] = err
		}
		return datas, errs
	}
	type chunkedRef struct {
		i    int
		body int64
	}
	var chunked []chunkedRef
	for rows.Next() {
		var i int64
		var data []byte
		var body *int64
		if err := rows.Scan(&i, &data, &body); err != nil {
			rows.Close()
			break
		}
		if body != nil {
			chunked = append(chunked, chunkedRef{int(i - 1), *body})
			continue
		}
		datas[i-1], errs[i-1] = data, nil
	}
	if err := rows.Err(); err != nil {
		err = fmt.Errorf("pgstore: read data: %w: %w", store.ErrUnavailable, err)
		for i := range errs {
			datas[i], errs[i] = nil, err
		}
		return datas, errs
	}
	for _, c := range chunked {
		datas[c.i], errs[c.i] = s.readBody(ctx, uint64(us[c.i]), c.body)
	}
	return datas, errs
}

// Sync waits until every queued commit is done and then makes the ones
// committed without waiting for their WAL flush durable (a synchronous
// write of this node's row flushes the WAL up to it).
func (s *Store) Sync() error {
	s.mu.Lock()
	for len(s.queue) > 0 || s.inflight > 0 {
		s.cond.Wait()
	}
	closed, stopped, async := s.closed, s.stopped, s.async
	s.async = false
	s.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	if stopped != nil {
		return stopped
	}
	if !async {
		return nil
	}
	if err := s.flush(); err != nil {
		s.mu.Lock()
		s.async = true
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *Store) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.TxnDeadline)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `UPDATE bb_node SET binary_version = binary_version WHERE node_id = $1 AND session = $2`, s.o.NodeID, s.session); err != nil {
		return fmt.Errorf("pgstore: sync: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close waits for the commits in flight, makes them durable, ends the
// session (so the next start need not wait for it to expire), stops the
// goroutines and closes the connections.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	for len(s.queue) > 0 || s.inflight > 0 {
		s.cond.Wait()
	}
	async, stopped := s.async, s.stopped
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	var err error
	if async && stopped == nil {
		err = s.flush()
	}
	if stopped == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.o.TxnDeadline)
		_, _ = s.pool.Exec(ctx, `UPDATE bb_node SET expires_at = clock_timestamp() WHERE node_id = $1 AND session = $2 AND expires_at > clock_timestamp()`, s.o.NodeID, s.session)
		cancel()
	}
	s.pool.Close()
	s.lease.Close()
	return err
}

// Stats counts the live state with SQL (at most once a second; a
// failure keeps the last figures).
func (s *Store) Stats() store.Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if time.Since(s.statsAt) < time.Second || s.isClosed() {
		return s.stats
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var st store.Stats
	var ents, msgs, vals int64
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM bb_entity), (SELECT count(*) FROM bb_msg),
       (SELECT coalesce(sum(size), 0) FROM bb_msg), (SELECT count(*) FROM bb_value),
       pg_total_relation_size('bb_msg') + pg_total_relation_size('bb_body') + pg_total_relation_size('bb_value') + pg_total_relation_size('bb_entity')`).
		Scan(&ents, &msgs, &st.DataBytes, &vals, &st.DiskBytes)
	if err == nil {
		st.Entities, st.Messages, st.Values = int(ents), int(msgs), int(vals)
		s.stats, s.statsAt = st, time.Now()
	}
	return s.stats
}

// Session is this node's current session number (for tests and logs).
func (s *Store) Session() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session
}

// interval is d as a PostgreSQL interval literal.
func interval(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}
