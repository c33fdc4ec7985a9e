package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/pgstore"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// openNode opens a cluster-mode store for node id and registers it.
func openNode(t *testing.T, url, id string) *pgstore.Store {
	t.Helper()
	o := testOptions()
	o.Cluster, o.NodeID = true, id
	s := open(t, url, o)
	t.Cleanup(func() { s.Close() })
	if _, err := s.Register(context.Background(), store.NodeRegistration{ID: id, Addr: id + ":1", TTL: 30 * time.Second}); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return s
}

// expire ends node's session by the database's clock, as if it had not
// renewed for a TTL (the tests do not wait for it).
func expire(t *testing.T, url, node string) {
	t.Helper()
	if err := pgtest.Exec(url, `UPDATE bb_node SET expires_at = clock_timestamp() - interval '1 second' WHERE node_id = $1`, node); err != nil {
		t.Fatal(err)
	}
}

func epochOf(t *testing.T, url string, unit uint64) int64 {
	return queryInt(t, url, `SELECT epoch FROM bb_unit WHERE unit_id = $1`, int64(unit))
}

// TestMembership: a node registers once (a second live process with the
// same id is refused), renews, is listed live; a session that expired is
// not renewed (ErrSessionLost) and a new registration gets session + 1.
func TestMembership(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNode(t, url, "a")
	o := testOptions()
	o.Cluster, o.NodeID = true, "a"
	a2 := open(t, url, o)
	defer a2.Close()
	if _, err := a2.Register(ctx, store.NodeRegistration{ID: "a", TTL: time.Second}); !errors.Is(err, store.ErrNodeLive) {
		t.Fatalf("second registration of a live node id: %v, want ErrNodeLive", err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	openNode(t, url, "b")
	nodes, err := a.Nodes(ctx)
	if err != nil || len(nodes) != 2 || nodes[0].ID != "a" || !nodes[0].Live || nodes[1].Addr != "b:1" || !nodes[1].Live {
		t.Fatalf("nodes = %+v, %v", nodes, err)
	}
	if err := a.SetDraining(ctx, true); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := a.Nodes(ctx); !nodes[0].Draining {
		t.Fatalf("a not draining: %+v", nodes)
	}
	expire(t, url, "a")
	if err := a.Renew(ctx); !errors.Is(err, store.ErrSessionLost) {
		t.Fatalf("renew after expiry: %v, want ErrSessionLost", err)
	}
	s1 := a.Session()
	s2, err := a.Register(ctx, store.NodeRegistration{ID: "a", TTL: time.Minute})
	if err != nil || s2 != s1+1 {
		t.Fatalf("re-register: session %d, %v (was %d)", s2, err, s1)
	}
	if nodes, _ := a.Nodes(ctx); nodes[0].Draining || !nodes[0].Live {
		t.Fatalf("re-registered a: %+v", nodes[0])
	}
	// Kill only ends an expired session, and only the one named.
	if err := a.Kill(ctx, "b", 1); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := a.Nodes(ctx); !nodes[1].Live {
		t.Fatal("Kill ended a live session")
	}
	expire(t, url, "b")
	if err := a.Kill(ctx, "b", 1); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_node WHERE node_id = 'b' AND expires_at = '-infinity'`); n != 1 {
		t.Fatal("Kill did not end b's expired session")
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := a.Nodes(ctx); nodes[0].Live {
		t.Fatal("a still live after Leave")
	}
}

// TestAcquireTakeover: a unit owned by a live node cannot be taken; once
// its session expired, another node takes it (epoch + 1, the old session
// killed for good), loads what the old owner committed, and the old
// owner's next commit is fenced off (ErrNotOwner, nothing written, the
// unit reported on Lost).
func TestAcquireTakeover(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNode(t, url, "a")
	b := openNode(t, url, "b")
	if err := commit(a, true, putOp(1), appendOp(1, 1, "one"), store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, 1); !errors.Is(err, store.ErrNotEligible) {
		t.Fatalf("acquire of a live node's unit: %v, want ErrNotEligible", err)
	}
	if _, err := b.Acquire(ctx, 99); !errors.Is(err, store.ErrNotEligible) {
		t.Fatalf("acquire of a unit that does not exist: %v, want ErrNotEligible", err)
	}
	if err := b.RecoverUnit(ctx, 1, store.Visitor{}); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("recover before acquire: %v, want ErrNotOwner", err)
	}
	expire(t, url, "a")
	ep, err := b.Acquire(ctx, 1)
	if err != nil || ep != 2 {
		t.Fatalf("takeover: epoch %d, %v; want 2", ep, err)
	}
	if err := a.Renew(ctx); !errors.Is(err, store.ErrSessionLost) {
		t.Fatalf("old owner's renewal after the takeover: %v, want ErrSessionLost", err)
	}
	var got []string
	err = b.RecoverUnit(ctx, 1, store.Visitor{
		Entity:  func(e store.Entity) error { got = append(got, "e:"+e.Name); return nil },
		Message: func(m store.Message) error { got = append(got, "m:"+string(m.Meta)); return nil },
		Value:   func(v store.Value) error { got = append(got, "v:"+v.Key+"="+string(v.Value)); return nil },
	})
	if err != nil || len(got) != 3 || got[0] != "e:q1" || got[1] != "m:m" || got[2] != "v:k=v" {
		t.Fatalf("recover unit: %v, %v", got, err)
	}
	if d, err := b.ReadData(1, 1); err != nil || string(d) != "one" {
		t.Fatalf("new owner reads %q, %v", d, err)
	}
	if err := commit(a, true, appendOp(1, 2, "stale")); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("old owner's commit: %v, want ErrNotOwner", err)
	}
	select {
	case u := <-a.Lost():
		if u != 1 {
			t.Fatalf("lost unit %d", u)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fenced unit was not reported lost")
	}
	if err := commit(b, true, appendOp(1, 2, "two")); err != nil {
		t.Fatalf("new owner's commit: %v", err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = 1 AND data = 'stale'`); n != 0 {
		t.Fatal("the old owner wrote after the takeover")
	}
}

// TestReleaseHandoff: a release flushes, frees the row reserved for the
// chosen node: a third node cannot take it while the reservation lasts,
// the chosen one can (epoch + 1). The releasing node's later writes are
// refused. A node re-takes its own unit with a higher epoch.
func TestReleaseHandoff(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNode(t, url, "a")
	b := openNode(t, url, "b")
	c := openNode(t, url, "c")
	if err := commit(a, true, putOp(1), putOp(2)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- commit(a, true, appendOp(1, 1, "before release")) }()
	if err := a.Release(ctx, 1, "b"); err != nil {
		t.Fatalf("release: %v", err)
	}
	// The racing commit was either queued before the release (then the
	// release waited for it: acknowledged and present) or came after it
	// (refused, absent); never acknowledged and missing.
	err := <-done
	n := queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE unit_id = 1`)
	if (err == nil) != (n == 1) || (err != nil && !errors.Is(err, store.ErrNotOwner)) {
		t.Fatalf("commit racing the release: %v, %d rows", err, n)
	}
	if err := commit(a, true, appendOp(1, 2, "after release")); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("commit after release: %v, want ErrNotOwner", err)
	}
	if _, err := c.Acquire(ctx, 1); !errors.Is(err, store.ErrNotEligible) {
		t.Fatalf("acquire of a unit reserved for another node: %v, want ErrNotEligible", err)
	}
	if ep, err := b.Acquire(ctx, 1); err != nil || ep != 2 {
		t.Fatalf("acquire by the chosen node: %d, %v", ep, err)
	}
	if err := a.Release(ctx, 1, ""); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("second release: %v, want ErrNotOwner", err)
	}
	if ep, err := a.Acquire(ctx, 2); err != nil || ep != 2 || epochOf(t, url, 2) != 2 {
		t.Fatalf("re-take of an own unit: %d, %v", ep, err)
	}
	if err := commit(a, true, appendOp(2, 1, "x")); err != nil {
		t.Fatalf("commit after the re-take: %v", err)
	}
	// Units lists the rows; the watermark lists changes only.
	all, next, err := c.Units(ctx, time.Time{})
	if err != nil || len(all) != 2 || all[0].Owner != "b" || all[0].Epoch != 2 || all[1].Owner != "a" || all[1].State != store.UnitOwned {
		t.Fatalf("units = %+v, %v", all, err)
	}
	if _, _, err := c.Units(ctx, next); err != nil {
		t.Fatal(err)
	}
}

// TestCrossAcquireNoDeadlock: two live nodes trying to take each other's
// units at the same time lock both node rows in one order: every attempt
// ends with ErrNotEligible, none with a deadlock (40P01) or a wait.
func TestCrossAcquireNoDeadlock(t *testing.T) {
	url := newDB(t)
	a := openNode(t, url, "a")
	b := openNode(t, url, "b")
	if err := commit(a, true, putOp(1)); err != nil {
		t.Fatal(err)
	}
	if err := commit(b, true, putOp(2)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, x := range []struct {
		s    *pgstore.Store
		unit uint64
	}{{a, 2}, {b, 1}} {
		go func() {
			for range 50 {
				if _, err := x.s.Acquire(ctx, x.unit); !errors.Is(err, store.ErrNotEligible) {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("cross acquire: %v, want ErrNotEligible every time", err)
		}
	}
}

// TestTakeoverRacesRenewal: a takeover and the owner's renewal racing at
// the moment the owner's session expires never both win: the renewal came
// first (the takeover is refused), or the session was killed (the
// renewal fails, for good), or it expired before either (the owner
// registers anew).
func TestTakeoverRacesRenewal(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNode(t, url, "a")
	b := openNode(t, url, "b")
	if err := commit(a, true, putOp(1)); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := pgtest.Exec(url, `UPDATE bb_node SET expires_at = clock_timestamp() + interval '2 milliseconds' WHERE node_id = 'a'`); err != nil {
			t.Fatal(err)
		}
		renewed := make(chan error, 1)
		go func() { renewed <- a.Renew(ctx) }()
		_, takeErr := b.Acquire(ctx, 1)
		renewErr := <-renewed
		taken := takeErr == nil
		if taken && renewErr == nil {
			t.Fatalf("round %d: both the takeover and the renewal succeeded", i)
		}
		if taken {
			if err := a.Renew(ctx); !errors.Is(err, store.ErrSessionLost) {
				t.Fatalf("round %d: the unit was taken but a's session renews: %v", i, err)
			}
			return
		}
		if !errors.Is(takeErr, store.ErrNotEligible) {
			t.Fatalf("round %d: takeover %v", i, takeErr)
		}
		if renewErr != nil { // expired before the renewal ran: a registers anew
			if !errors.Is(renewErr, store.ErrSessionLost) {
				t.Fatalf("round %d: renewal %v", i, renewErr)
			}
			if _, err := a.Register(ctx, store.NodeRegistration{ID: "a", TTL: 30 * time.Second}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Acquire(ctx, 1); err != nil {
				t.Fatalf("round %d: a re-takes its unit: %v", i, err)
			}
		}
	}
}

// TestOutcomeUnknownInCluster: in cluster mode a commit whose outcome
// could not be learned makes the store give up its units (reported on
// Lost, later commits ErrNotOwner) instead of refusing every commit; the
// node takes them again with a higher epoch and goes on writing.
func TestOutcomeUnknownInCluster(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	a := openNode(t, url, "a")
	if err := commit(a, true, putOp(1), putOp(2)); err != nil {
		t.Fatal(err)
	}
	err := pgstore.LoseAnswer(a, errors.New("connection reset after COMMIT"))
	if !errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("lost answer: %v", err)
	}
	got := []uint64{<-a.Lost(), <-a.Lost()}
	if got[0] != 1 || got[1] != 2 {
		t.Fatalf("lost %v, want [1 2]", got)
	}
	if err := commit(a, true, appendOp(1, 1, "x")); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("commit before the re-take: %v, want ErrNotOwner", err)
	}
	if err := a.Health(); err != nil {
		t.Fatalf("the store stopped: %v", err)
	}
	if ep, err := a.Acquire(ctx, 1); err != nil || ep != 2 {
		t.Fatalf("re-take: %d, %v", ep, err)
	}
	if err := commit(a, true, appendOp(1, 1, "x")); err != nil {
		t.Fatalf("commit after the re-take: %v", err)
	}
}
