package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/store"
)

// The outbox between owners (store.Outbox, docs/design/cluster.md §9.3).
// The rows are written by Commit (OpTransfer inserts one in the source
// unit's fenced transaction, OpLand deletes claimed ones in the landing
// unit's, asserting the count); these are the reads of the landing loop
// and of the source's backlog bound. Reads need no fence.

var _ store.Outbox = (*Store)(nil)

// PendingTransfers implements store.Outbox: one source's transfers come
// in id order, sources in unit order.
func (s *Store) PendingTransfers(ctx context.Context, unit uint64, max int, maxBytes int64) ([]store.Transfer, error) {
	rows, err := s.pool.Query(ctx, `SELECT source_unit, id, target_entity, kind, meta, size, data FROM bb_transfer
 WHERE target_unit = $1 ORDER BY source_unit, id LIMIT $2`, int64(unit), max)
	if err != nil {
		return nil, fmt.Errorf("%w: reading transfers: %w", store.ErrUnavailable, err)
	}
	xs, err := scanTransfers(rows, unit, maxBytes)
	if err != nil {
		return nil, err
	}
	return xs, s.readTransferBodies(ctx, xs)
}

// OrphanTransfers implements store.Outbox, by source
// (bb_transfer_by_source).
func (s *Store) OrphanTransfers(ctx context.Context, sources []uint64, max int) ([]store.Transfer, error) {
	rows, err := s.pool.Query(ctx, `SELECT t.target_unit, t.source_unit, t.id, t.target_entity, t.kind, t.meta, t.size, t.data
  FROM bb_transfer t
 WHERE t.source_unit = ANY($1::bigint[]) AND NOT EXISTS (SELECT 1 FROM bb_unit u WHERE u.unit_id = t.target_unit)
 ORDER BY t.source_unit, t.id LIMIT $2`, toInt64s(sources), max)
	if err != nil {
		return nil, fmt.Errorf("%w: reading orphaned transfers: %w", store.ErrUnavailable, err)
	}
	var xs []store.Transfer
	for rows.Next() {
		var x store.Transfer
		var tu, su, id, te int64
		var kind int16
		var size int32
		if err := rows.Scan(&tu, &su, &id, &te, &kind, &x.Meta, &size, &x.Data); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%w: reading orphaned transfers: %w", store.ErrUnavailable, err)
		}
		x.TargetUnit, x.SourceUnit, x.ID, x.TargetEntity, x.Kind = uint64(tu), uint64(su), uint64(id), uint64(te), store.TransferKind(kind)
		if x.Data == nil && size > 0 {
			x.Data = make([]byte, 0, size) // marks a chunked body to read
		}
		xs = append(xs, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading orphaned transfers: %w", store.ErrUnavailable, err)
	}
	return xs, s.readTransferBodies(ctx, xs)
}

// scanTransfers reads rows of bb_transfer into unit, stopping after the
// row that reaches maxBytes.
func scanTransfers(rows pgx.Rows, unit uint64, maxBytes int64) ([]store.Transfer, error) {
	defer rows.Close()
	var xs []store.Transfer
	var bytes int64
	for rows.Next() {
		var x store.Transfer
		var su, id, te int64
		var kind int16
		var size int32
		if err := rows.Scan(&su, &id, &te, &kind, &x.Meta, &size, &x.Data); err != nil {
			return nil, fmt.Errorf("%w: reading transfers: %w", store.ErrUnavailable, err)
		}
		x.TargetUnit, x.SourceUnit, x.ID, x.TargetEntity, x.Kind = unit, uint64(su), uint64(id), uint64(te), store.TransferKind(kind)
		if x.Data == nil && size > 0 {
			x.Data = make([]byte, 0, size) // marks a chunked body to read
		}
		xs = append(xs, x)
		if bytes += int64(size); bytes >= maxBytes {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading transfers: %w", store.ErrUnavailable, err)
	}
	return xs, nil
}

// readTransferBodies fills in the Data of chunked transfers (an empty
// slice with capacity: see the scans).
func (s *Store) readTransferBodies(ctx context.Context, xs []store.Transfer) error {
	for i := range xs {
		x := &xs[i]
		if x.Data == nil || len(x.Data) > 0 || cap(x.Data) == 0 {
			continue
		}
		rows, err := s.pool.Query(ctx, `SELECT data FROM bb_transfer_body
 WHERE target_unit = $1 AND source_unit = $2 AND id = $3 ORDER BY part`, int64(x.TargetUnit), int64(x.SourceUnit), int64(x.ID))
		if err != nil {
			return fmt.Errorf("%w: reading a transfer's body: %w", store.ErrUnavailable, err)
		}
		for rows.Next() {
			var part []byte
			if err := rows.Scan(&part); err != nil {
				rows.Close()
				return fmt.Errorf("%w: reading a transfer's body: %w", store.ErrUnavailable, err)
			}
			x.Data = append(x.Data, part...)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%w: reading a transfer's body: %w", store.ErrUnavailable, err)
		}
		if len(x.Data) != cap(x.Data) {
			return fmt.Errorf("pgstore: %w: transfer (%d, %d, %d) has %d of its %d bytes", store.ErrCorrupt, x.TargetUnit, x.SourceUnit, x.ID, len(x.Data), cap(x.Data))
		}
	}
	return nil
}

// TransferTargets implements store.Outbox: two index probes per poll.
func (s *Store) TransferTargets(ctx context.Context, units []uint64) ([]uint64, error) {
	if len(units) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT u FROM unnest($1::bigint[]) AS x(u)
 WHERE EXISTS (SELECT 1 FROM bb_transfer t WHERE t.target_unit = x.u)
    OR EXISTS (SELECT 1 FROM bb_transfer t WHERE t.source_unit = x.u
                 AND NOT EXISTS (SELECT 1 FROM bb_unit n WHERE n.unit_id = t.target_unit))
 ORDER BY u`, toInt64s(units))
	if err != nil {
		return nil, fmt.Errorf("%w: looking for transfers: %w", store.ErrUnavailable, err)
	}
	var out []uint64
	for rows.Next() {
		var u int64
		if err := rows.Scan(&u); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%w: looking for transfers: %w", store.ErrUnavailable, err)
		}
		out = append(out, uint64(u))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: looking for transfers: %w", store.ErrUnavailable, err)
	}
	return out, nil
}

// TransferBacklog implements store.Outbox.
func (s *Store) TransferBacklog(ctx context.Context, unit uint64, limit int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM bb_transfer WHERE target_unit = $1 LIMIT $2) AS b`,
		int64(unit), limit+1).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%w: counting transfers: %w", store.ErrUnavailable, err)
	}
	return n, nil
}

func toInt64s(us []uint64) []int64 {
	out := make([]int64, len(us))
	for i, u := range us {
		out[i] = int64(u)
	}
	return out
}
