package memunits

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store"
)

var ctx = context.Background()

// TestRules walks the rules pgstore's SQL has too: one live session per
// node id, renewals scoped to the session, takeover only of a dead
// owner (killing its session for good), the epoch raised on every
// acquire, a released unit reserved for its next owner for a while, and
// the fence on writes.
func TestRules(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	db := New(clk)
	db.CreateUnit(1)
	a, a2, b, c := db.Node("a"), db.Node("a"), db.Node("b"), db.Node("c")
	reg := func(h *Handle) {
		t.Helper()
		if _, err := h.Register(ctx, store.NodeRegistration{TTL: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	reg(a)
	if _, err := a2.Register(ctx, store.NodeRegistration{TTL: time.Second}); !errors.Is(err, store.ErrNodeLive) {
		t.Fatalf("second live registration: %v", err)
	}
	reg(b)
	reg(c)
	if ep, err := a.Acquire(ctx, 1); err != nil || ep != 1 {
		t.Fatalf("acquire a free unit: %d, %v", ep, err)
	}
	if _, err := b.Acquire(ctx, 1); !errors.Is(err, store.ErrNotEligible) {
		t.Fatalf("acquire a live node's unit: %v", err)
	}
	if _, err := b.Acquire(ctx, 9); !errors.Is(err, store.ErrNotEligible) {
		t.Fatalf("acquire a unit that does not exist: %v", err)
	}
	if err := a.Write(1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(4 * time.Second)
	if err := b.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second) // a expired, b and c live
	if ep, err := b.Acquire(ctx, 1); err != nil || ep != 2 {
		t.Fatalf("takeover: %d, %v", ep, err)
	}
	if err := a.Renew(ctx); !errors.Is(err, store.ErrSessionLost) {
		t.Fatalf("renewal of a killed session: %v", err)
	}
	if err := a.Write(1); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("write of the old owner: %v", err)
	}
	if u := <-a.Lost(); u != 1 {
		t.Fatalf("lost %d", u)
	}
	if s, err := a.Register(ctx, store.NodeRegistration{TTL: 5 * time.Second}); err != nil || s != 2 {
		t.Fatalf("re-register: %d, %v", s, err)
	}
	if err := b.Release(ctx, 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(1); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("write after release: %v", err)
	}
	if _, err := c.Acquire(ctx, 1); !errors.Is(err, store.ErrNotEligible) {
		t.Fatalf("acquire of a unit reserved for another node: %v", err)
	}
	if ep, err := a.Acquire(ctx, 1); err != nil || ep != 3 {
		t.Fatalf("acquire by the chosen node: %d, %v", ep, err)
	}
	if ep, err := a.Acquire(ctx, 1); err != nil || ep != 4 {
		t.Fatalf("re-take of an own unit: %d, %v", ep, err)
	}
	units, _, err := c.Units(ctx, time.Time{})
	if err != nil || len(units) != 1 || units[0].Owner != "a" || units[0].Epoch != 4 || units[0].State != store.UnitOwned {
		t.Fatalf("units %+v, %v", units, err)
	}
	db.SetDown(true)
	if err := a.Renew(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("renew with the database down: %v", err)
	}
	db.SetDown(false)
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := c.Nodes(ctx); nodes[0].ID != "a" || nodes[0].Live {
		t.Fatalf("nodes after a left: %+v", nodes)
	}
	if ep, err := c.Acquire(ctx, 1); err != nil || ep != 5 {
		t.Fatalf("takeover after a left: %d, %v", ep, err)
	}
}
