package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/store"
)

// The catalog (docs/design/cluster.md §17 stage 2): every unit row
// carries its queue's or topic's name in name_key (NameKey), and
// bb_catalog.version grows with every unit created or deleted (in the
// same transaction), so a node caches the names and reads them again only
// when the version moved. Owners are read with the names; the cluster
// node's poller has fresher ones.

var _ store.Catalog = (*Store)(nil)

// NameKey is the catalog key of a queue or topic name: names are
// case-insensitive.
func NameKey(name string) string { return strings.ToLower(name) }

// CatalogEntry is one unit of the catalog.
type CatalogEntry struct {
	Unit  uint64
	Name  string // NameKey of the queue's or topic's name
	Owner string // the owner node, "" when free
}

// catalogCache is the names cached at a version of bb_catalog.
type catalogCache struct {
	mu      sync.Mutex
	version int64 // -1: nothing cached
	byName  map[string]CatalogEntry
}

// NewEntityID implements store.Catalog: the next value of
// bb_entity_id_seq.
func (s *Store) NewEntityID(ctx context.Context) (uint64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT nextval('bb_entity_id_seq')`).Scan(&id); err != nil {
		return 0, fmt.Errorf("%w: allocating an entity id: %w", store.ErrUnavailable, err)
	}
	return uint64(id), nil
}

// CatalogVersion reads bb_catalog.version.
func (s *Store) CatalogVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT version FROM bb_catalog WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("%w: reading the catalog version: %w", store.ErrUnavailable, err)
	}
	return v, nil
}

// CatalogList reads every unit of the catalog and the version it was
// read at, in one snapshot.
func (s *Store) CatalogList(ctx context.Context) ([]CatalogEntry, int64, error) {
	var out []CatalogEntry
	var version int64
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT version FROM bb_catalog WHERE id = 1`).Scan(&version); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT unit_id, name_key, coalesce(owner_node, '') FROM bb_unit ORDER BY unit_id`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var e CatalogEntry
			var u int64
			if err := rows.Scan(&u, &e.Name, &e.Owner); err != nil {
				return err
			}
			e.Unit = uint64(u)
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%w: reading the catalog: %w", store.ErrUnavailable, err)
	}
	return out, version, nil
}

// Lookup returns the unit named name (any case) from the cached catalog,
// read again first when bb_catalog.version moved: one small query when
// nothing changed.
func (s *Store) Lookup(ctx context.Context, name string) (CatalogEntry, bool, error) {
	v, err := s.CatalogVersion(ctx)
	if err != nil {
		return CatalogEntry{}, false, err
	}
	c := &s.catalog
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil || c.version != v {
		list, at, err := s.CatalogList(ctx)
		if err != nil {
			return CatalogEntry{}, false, err
		}
		c.byName = make(map[string]CatalogEntry, len(list))
		for _, e := range list {
			c.byName[e.Name] = e
		}
		c.version = at
	}
	e, ok := c.byName[NameKey(name)]
	return e, ok, nil
}

// UnitCount implements store.Catalog from the cached catalog, read
// again first when bb_catalog.version moved.
func (s *Store) UnitCount(ctx context.Context) (int, error) {
	if _, _, err := s.Lookup(ctx, ""); err != nil {
		return 0, err
	}
	s.catalog.mu.Lock()
	defer s.catalog.mu.Unlock()
	return len(s.catalog.byName), nil
}

// UnitSpec returns the stored spec of the queue or topic of unit (its
// entity's id is the unit's), whichever node serves it; ok false when
// there is none. It implements store.Outbox too.
func (s *Store) UnitSpec(ctx context.Context, unit uint64) ([]byte, bool, error) {
	var spec []byte
	err := s.pool.QueryRow(ctx, `SELECT spec FROM bb_entity WHERE unit_id = $1 AND entity_id = $1`, int64(unit)).Scan(&spec)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w: reading an entity's spec: %w", store.ErrUnavailable, err)
	}
	return spec, true, nil
}

// UnitNamed implements store.Catalog.
func (s *Store) UnitNamed(ctx context.Context, name string) (uint64, bool, error) {
	e, ok, err := s.Lookup(ctx, name)
	return e.Unit, ok, err
}

// UnitOwner reads the owner of unit from its row, "" while it is free
// (being handed off or taken over) or gone: fresher than the cached
// catalog's owners, for a node whose own view of the unit is stale.
func (s *Store) UnitOwner(ctx context.Context, unit uint64) (string, error) {
	var owner string
	err := s.pool.QueryRow(ctx, `SELECT coalesce(owner_node, '') FROM bb_unit WHERE unit_id = $1`, int64(unit)).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: reading the owner of unit %d: %w", store.ErrUnavailable, unit, err)
	}
	return owner, nil
}
