package pgstore

import (
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one numbered SQL file of migrations/.
type migration struct {
	version  int
	name     string
	sql      string
	checksum []byte
}

// migrations are the embedded migrations in version order.
func migrations() ([]migration, error) {
	ents, err := migrationFS.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range ents {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("pgstore: migration file %q is not named NNNN_name.sql", e.Name())
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		ms = append(ms, migration{version: v, name: name, sql: string(b), checksum: sum[:]})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("pgstore: migrations are not numbered 1, 2, …: %d is %d", i+1, m.version)
		}
	}
	return ms, nil
}

// SchemaVersion is the newest schema version this binary knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrate brings the database's schema to this binary's version, one
// migration per transaction. Concurrent migrators queue on the row lock of
// bb_schema_migration's version 0 (no advisory lock). It refuses a schema
// newer than the binary and an applied migration whose checksum differs.
func migrate(ctx context.Context, pool *pgxpool.Pool, by string) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return migrateTo(ctx, pool, ms, by)
}

// migrateTo applies the migrations ms (a prefix of the binary's).
func migrateTo(ctx context.Context, pool *pgxpool.Pool, ms []migration, by string) error {
	const bookkeeping = `CREATE TABLE IF NOT EXISTS bb_schema_migration (
  version     integer     PRIMARY KEY,
  name        text        NOT NULL,
  checksum    bytea       NOT NULL,
  applied_at  timestamptz NOT NULL DEFAULT now(),
  applied_by  text        NOT NULL)`
	if _, err := pool.Exec(ctx, bookkeeping); err != nil {
		// Two first starts at once can collide in the catalog even with
		// IF NOT EXISTS: retry once.
		if _, err2 := pool.Exec(ctx, bookkeeping); err2 != nil {
			return fmt.Errorf("pgstore: create bb_schema_migration: %w", err)
		}
	}
	for {
		done, err := migrateOne(ctx, pool, ms, by)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next missing migration, if any, in one
// transaction; it reports true when nothing was left to apply.
func migrateOne(ctx context.Context, pool *pgxpool.Pool, ms []migration, by string) (done bool, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO bb_schema_migration (version, name, checksum, applied_by)
VALUES (0, 'lock', '\x', 'bootstrap') ON CONFLICT DO NOTHING`); err != nil {
		return false, fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT version FROM bb_schema_migration WHERE version = 0 FOR UPDATE`); err != nil {
		return false, fmt.Errorf("pgstore: migrate: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT version, checksum FROM bb_schema_migration WHERE version > 0 ORDER BY version`)
	if err != nil {
		return false, fmt.Errorf("pgstore: migrate: %w", err)
	}
	applied := 0
	for rows.Next() {
		var v int
		var sum []byte
		if err := rows.Scan(&v, &sum); err != nil {
			return false, fmt.Errorf("pgstore: migrate: %w", err)
		}
		if v > len(ms) {
			rows.Close()
			return false, fmt.Errorf("pgstore: the database's schema is version %d, newer than this binary's %d: upgrade Busbar", v, len(ms))
		}
		if m := ms[v-1]; string(m.checksum) != string(sum) {
			rows.Close()
			return false, fmt.Errorf("pgstore: migration %d (%s) applied to the database differs from this binary's (checksum mismatch)", v, m.name)
		}
		applied = v
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("pgstore: migrate: %w", err)
	}
	if applied == len(ms) {
		return true, tx.Commit(ctx)
	}
	m := ms[applied]
	if _, err := tx.Conn().PgConn().Exec(ctx, m.sql).ReadAll(); err != nil {
		return false, fmt.Errorf("pgstore: migration %d (%s): %w", m.version, m.name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO bb_schema_migration (version, name, checksum, applied_by) VALUES ($1, $2, $3, $4)`,
		m.version, m.name, m.checksum, by); err != nil {
		return false, fmt.Errorf("pgstore: migration %d (%s): %w", m.version, m.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("pgstore: migration %d (%s): %w", m.version, m.name, err)
	}
	return false, nil
}

// pgCode is the SQLSTATE of err, "" if it is not a server error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

var _ = pgx.ErrNoRows
