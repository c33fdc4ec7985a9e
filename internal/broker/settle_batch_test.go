package broker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// TestCompleteBatchMixed completes valid, unknown, used, expired and
// repeated tokens in one call: each token gets its own result, the valid
// ones are removed with one synced commit, and the others change nothing.
func TestCompleteBatchMixed(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("q", func(p *QueueProperties) { p.LockDuration = 30 * time.Second })
	e.sendN("q", 6)
	early := e.recv("q", PeekLock, 2) // seq 1, 2: will expire
	e.advance(20 * time.Second)
	ds := e.recv("q", PeekLock, 4) // seq 3..6
	e.complete("q", ds[3].LockToken)
	e.advance(15 * time.Second) // early locks expired, ds still held

	spy.mu.Lock()
	before := len(spy.commits)
	spy.mu.Unlock()
	toks := []uuid.UUID{
		ds[0].LockToken,    // ok
		uuid.New(),         // unknown
		early[0].LockToken, // expired
		ds[1].LockToken,    // ok
		ds[3].LockToken,    // already completed
		ds[0].LockToken,    // repeated in the same call
		early[1].LockToken, // expired
		ds[2].LockToken,    // ok
	}
	errs := e.b.CompleteBatch(ctx, "q", toks)
	if len(errs) != len(toks) {
		t.Fatalf("%d results for %d tokens", len(errs), len(toks))
	}
	for i, want := range []bool{true, false, false, true, false, false, false, true} {
		if want {
			if errs[i] != nil {
				t.Fatalf("token %d: %v", i, errs[i])
			}
			continue
		}
		wantKind(t, errs[i], ErrLockLost)
	}
	spy.mu.Lock()
	commits := spy.commits[before:]
	spy.mu.Unlock()
	// (The expired locks' delivery counts ride on an unsynced commit of
	// their own.)
	var removes []spyCommit
	for _, c := range commits {
		if countKind(c.kinds, store.OpRemove) > 0 {
			removes = append(removes, c)
		}
	}
	if len(removes) != 1 || !removes[0].sync || countKind(removes[0].kinds, store.OpRemove) != 3 {
		t.Fatalf("commits %+v, want one synced commit removing 3 messages", commits)
	}

	// The expired ones are available again; the completed ones are gone,
	// also after a restart (durable).
	e.restart()
	got := e.recv("q", PeekLock, 10)
	if s := seqs(got); !slices.Equal(s, []int64{1, 2}) {
		t.Fatalf("left after the batch: %v", s)
	}
	if got[0].DeliveryCount != 2 {
		t.Fatalf("expired message's delivery count %d", got[0].DeliveryCount)
	}
	if c := e.counts("q"); c.Active != 2 {
		t.Fatalf("counts %+v", c)
	}
}

func countKind(kinds []store.OpKind, k store.OpKind) int {
	n := 0
	for _, kk := range kinds {
		if kk == k {
			n++
		}
	}
	return n
}

// TestCompleteBatchNothingValid commits nothing when no token is valid.
func TestCompleteBatchNothingValid(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("q")
	spy.mu.Lock()
	before := len(spy.commits)
	spy.mu.Unlock()
	errs := e.b.CompleteBatch(ctx, "q", []uuid.UUID{uuid.New(), uuid.New()})
	for _, err := range errs {
		wantKind(t, err, ErrLockLost)
	}
	if got := e.b.CompleteBatch(ctx, "q", nil); len(got) != 0 {
		t.Fatalf("empty batch: %v", got)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if len(spy.commits) != before {
		t.Fatalf("%d commits for lost tokens", len(spy.commits)-before)
	}
}

// TestCompleteBatchWholeCallErrors: an unknown path, a cancelled context
// or a failed commit is every affected token's result; a failed commit
// leaves the messages available again, as Complete does.
func TestCompleteBatchWholeCallErrors(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("q")
	e.sendN("q", 3)
	ds := e.recv("q", PeekLock, 3)
	toks := []uuid.UUID{ds[0].LockToken, ds[1].LockToken}

	for _, err := range e.b.CompleteBatch(ctx, "nope", toks) {
		wantKind(t, err, ErrNotFound)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, err := range e.b.CompleteBatch(cctx, "q", toks) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
	}

	boom := errors.New("disk on fire")
	spy.mu.Lock()
	spy.fail = boom
	spy.mu.Unlock()
	errs := e.b.CompleteBatch(ctx, "q", []uuid.UUID{ds[0].LockToken, uuid.New(), ds[1].LockToken})
	spy.mu.Lock()
	spy.fail = nil
	spy.mu.Unlock()
	if errs[0] == nil || errs[2] == nil || KindOf(errs[0]) == KindLockLost {
		t.Fatalf("failed commit: %v", errs)
	}
	wantKind(t, errs[1], ErrLockLost)
	// The third message's lock is untouched and still completes.
	if errs := e.b.CompleteBatch(ctx, "q", []uuid.UUID{ds[2].LockToken}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// The first two are available again after the retry delay.
	e.advance(time.Minute)
	if s := seqs(e.recv("q", PeekLock, 10)); !slices.Equal(s, []int64{1, 2}) {
		t.Fatalf("after the failed commit: %v", s)
	}
}

// TestCompleteBatchSubscription completes on a subscription path.
func TestCompleteBatchSubscription(t *testing.T) {
	e := newEnv(t)
	if _, err := e.b.CreateTopic("t", DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CreateSubscription("t", "s", DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}
	e.sendN("t", 4)
	ds := e.recv("t/Subscriptions/s", PeekLock, 4)
	if len(ds) != 4 {
		t.Fatalf("received %d", len(ds))
	}
	toks := make([]uuid.UUID, len(ds))
	for i, d := range ds {
		toks[i] = d.LockToken
	}
	for i, err := range e.b.CompleteBatch(ctx, "t/Subscriptions/s", toks) {
		if err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	e.expectEmpty("t/Subscriptions/s")
}
