package broker

import (
	"context"
	"errors"
	"testing"
)

// countingCatalog is a store.Catalog that only counts.
type countingCatalog struct {
	n   int
	err error
}

func (c countingCatalog) NewEntityID(context.Context) (uint64, error) { return 0, nil }
func (c countingCatalog) UnitNamed(context.Context, string) (uint64, bool, error) {
	return 0, false, nil
}
func (c countingCatalog) UnitCount(context.Context) (int, error) { return c.n, c.err }

// On a cluster node the tier's entity quota counts every node's queues
// and topics (the catalog's), not only the ones this node serves.
func TestEntityQuotaCountsTheCatalog(t *testing.T) {
	b := &Broker{tier: &Tier{Name: "Test", MaxEntities: 3}}
	b.catalog = countingCatalog{n: 2}
	if err := b.checkEntityCount(); err != nil {
		t.Fatalf("2 of 3 in the catalog: %v", err)
	}
	b.catalog = countingCatalog{n: 3}
	if err := b.checkEntityCount(); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("3 of 3 in the catalog, none here: %v, want quota exceeded", err)
	}
	b.catalog = countingCatalog{err: errors.New("boom")}
	if err := b.checkEntityCount(); err == nil {
		t.Fatal("a catalog that cannot be read let the creation through")
	}
}
