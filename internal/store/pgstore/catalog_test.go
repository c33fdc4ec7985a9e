package pgstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/pgstore"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// A database made by schema version 1 (name_key '#'||unit_id, no id
// sequence) is brought to version 2: its units carry their names, and
// the id sequence starts past every id version 1 handed out.
func TestCatalogMigration(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	if err := pgstore.MigrateTo(ctx, url, 1); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO bb_unit (unit_id, name_key) VALUES (1, '#1'), (5, '#5')`,
		`INSERT INTO bb_entity (unit_id, entity_id, name, spec) VALUES (1, 1, '$namespace', '\x'), (5, 5, 'Orders', '\x'), (5, 7, 'Orders/Subscriptions/s', '\x')`,
		`INSERT INTO bb_value (unit_id, entity_id, key, value) VALUES (1, 1, 'next-entity-id', '\x000000000000000c')`,
	} {
		if err := pgtest.Exec(url, q); err != nil {
			t.Fatal(err)
		}
	}
	o := testOptions()
	o.Cluster, o.NodeID = true, "a"
	s := open(t, url, o)
	defer s.Close()
	if v := queryInt(t, url, `SELECT max(version) FROM bb_schema_migration`); v != int64(pgstore.SchemaVersion()) {
		t.Fatalf("schema version %d, want %d", v, pgstore.SchemaVersion())
	}
	e, ok, err := s.Lookup(ctx, "ORDERS")
	if err != nil || !ok || e.Unit != 5 || e.Name != "orders" {
		t.Fatalf("Lookup(ORDERS) = %+v, %v, %v", e, ok, err)
	}
	if _, ok, _ := s.Lookup(ctx, "Orders/Subscriptions/s"); ok {
		t.Fatal("a subscription is not a unit of the catalog")
	}
	id, err := s.NewEntityID(ctx)
	if err != nil || id <= 12 {
		t.Fatalf("first id after the migration %d, %v; want > 12 (version 1's counter)", id, err)
	}
}

// Two nodes allocate entity ids at once and never collide; a queue one
// node creates is in the other's catalog with its owner, a second
// creation of its name (any case) is refused at commit, and deleting it
// removes it from the catalog (the version moves each time).
func TestCatalogCluster(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a, b := openNode(t, url, "a"), openNode(t, url, "b")

	var mu sync.Mutex
	var ids []uint64
	var wg sync.WaitGroup
	for _, s := range []*pgstore.Store{a, b} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					id, err := s.NewEntityID(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					ids = append(ids, id)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	slices.Sort(ids)
	if len(slices.Compact(slices.Clone(ids))) != 200 {
		t.Fatalf("ids collide: %d distinct of %d", len(slices.Compact(ids)), 200)
	}

	v0, err := b.CatalogVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.Lookup(ctx, "jobs"); ok || err != nil {
		t.Fatalf("jobs before creation: %v, %v", ok, err)
	}
	qid, _ := a.NewEntityID(ctx)
	if err := a.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: qid, Name: "Jobs"}}}, true); err != nil {
		t.Fatal(err)
	}
	e, ok, err := b.Lookup(ctx, "jobs")
	if err != nil || !ok || e.Unit != qid || e.Owner != "a" {
		t.Fatalf("b.Lookup(jobs) = %+v, %v, %v; want unit %d owned by a", e, ok, err, qid)
	}
	if u, ok, err := b.UnitNamed(ctx, "JOBS"); !ok || u != qid || err != nil {
		t.Fatalf("b.UnitNamed(JOBS) = %d, %v, %v", u, ok, err)
	}
	if n, err := b.UnitCount(ctx); n != 1 || err != nil {
		t.Fatalf("b.UnitCount() = %d, %v; want 1", n, err)
	}
	if o, err := b.UnitOwner(ctx, qid); o != "a" || err != nil {
		t.Fatalf("b.UnitOwner(jobs) = %q, %v; want a", o, err)
	}
	if v, _ := b.CatalogVersion(ctx); v <= v0 {
		t.Fatalf("catalog version %d after a creation, was %d", v, v0)
	}
	other, _ := b.NewEntityID(ctx)
	if err := b.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: other, Name: "JOBS"}}}, true); err == nil {
		t.Fatal("a second unit named JOBS was committed")
	}
	list, _, err := a.CatalogList(ctx)
	if err != nil || len(list) != 1 || list[0].Unit != qid {
		t.Fatalf("CatalogList = %+v, %v", list, err)
	}
	if err := a.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpDeleteEntity, EntityID: qid}}}, true); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.Lookup(ctx, "jobs"); ok || err != nil {
		t.Fatalf("jobs after deletion: %v, %v", ok, err)
	}
	if n, err := b.UnitCount(ctx); n != 0 || err != nil {
		t.Fatalf("b.UnitCount() after deletion = %d, %v; want 0", n, err)
	}
	if o, err := b.UnitOwner(ctx, qid); o != "" || err != nil {
		t.Fatalf("b.UnitOwner(jobs) after deletion = %q, %v; want none", o, err)
	}
}
