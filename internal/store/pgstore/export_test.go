package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LoseAnswer makes s handle a commit whose answer was lost and could not
// be learned, as send does after ResolveWait (tests cannot cut a
// connection after its COMMIT went out without a proxy).
func LoseAnswer(s *Store, cause error) error { return s.unknown(0, s.marks.Load(), cause) }

// MigrateTo brings the database at url to schema version n only, as an
// older binary did.
func MigrateTo(ctx context.Context, url string, n int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrateTo(ctx, pool, ms[:n], "test")
}
