package broker

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// spyStore wraps a memstore: it records how each batch was committed and
// can hold commits at a gate.
type spyStore struct {
	*memstore.Store
	mu      sync.Mutex
	commits []spyCommit
	gate    chan struct{} // non-nil: Commit waits for it to close
	inside  atomic.Int32  // commits in progress
	peak    atomic.Int32
	fail    error
}

type spyCommit struct {
	sync  bool
	kinds []store.OpKind
}

func (s *spyStore) Commit(b *store.Batch, sync bool) error {
	s.mu.Lock()
	c := spyCommit{sync: sync}
	for _, op := range b.Ops {
		c.kinds = append(c.kinds, op.Kind)
	}
	s.commits = append(s.commits, c)
	gate, fail := s.gate, s.fail
	s.mu.Unlock()
	n := s.inside.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if gate != nil {
		<-gate
	}
	s.inside.Add(-1)
	if fail != nil {
		return fail
	}
	return s.Store.Commit(b, sync)
}

// last returns the last commit that holds an op of kind k.
func (s *spyStore) last(k store.OpKind) (spyCommit, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.commits) - 1; i >= 0; i-- {
		for _, kk := range s.commits[i].kinds {
			if kk == k {
				return s.commits[i], true
			}
		}
	}
	return spyCommit{}, false
}

func TestSendsShareCommitsAndAreDurable(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("q")
	gate := make(chan struct{})
	spy.mu.Lock()
	spy.gate = gate
	spy.mu.Unlock()

	// Many senders reach the store at the same time: no entity lock is
	// held across Commit, so they can share one group commit.
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := e.b.Send(ctx, "q", []*message.Message{msg(string(rune('a' + i)))}); err != nil {
				t.Error(err)
			}
		})
	}
	deadline := time.After(10 * time.Second)
	for spy.inside.Load() < n {
		select {
		case <-deadline:
			t.Fatalf("only %d of %d sends reached the store together", spy.inside.Load(), n)
		default:
		}
		runtime.Gosched()
	}
	// Not visible before durable.
	if ps := e.peek("q", 0, 100); len(ps) != 0 {
		t.Fatalf("%d messages visible before their commit returned", len(ps))
	}
	close(gate)
	wg.Wait()
	if c, _ := spy.last(store.OpAppend); !c.sync {
		t.Fatal("a send was committed without sync")
	}
	if e.counts("q").Active != n {
		t.Fatal("messages missing after the commits")
	}
}

func TestSettlementDurability(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("q")
	e.sendN("q", 4)
	ds := e.recv("q", PeekLock, 4)

	e.abandon("q", ds[0].LockToken, nil)
	if c, _ := spy.last(store.OpSetMeta); !c.sync {
		t.Fatal("abandon's delivery count was not synced")
	}
	e.complete("q", ds[1].LockToken)
	if c, _ := spy.last(store.OpRemove); !c.sync {
		t.Fatal("complete was not synced")
	}
	if err := e.b.DeadLetter(ctx, "q", ds[2].LockToken, "r", "", nil); err != nil {
		t.Fatal(err)
	}
	if c, _ := spy.last(store.OpRewrite); !c.sync {
		t.Fatal("dead-letter was not synced")
	}
	// A lock expiry's count piggybacks on the next group commit.
	spy.mu.Lock()
	spy.commits = nil
	spy.mu.Unlock()
	e.advance(time.Minute)
	e.b.Tick()
	if c, ok := spy.last(store.OpSetMeta); !ok || c.sync {
		t.Fatalf("lock expiry commit: found %v, sync %v (want an unsynced commit)", ok, c.sync)
	}
	// ReceiveAndDelete removes durably before returning.
	e.recv("q", ReceiveAndDelete, 1)
	if c, _ := spy.last(store.OpRemove); !c.sync {
		t.Fatal("ReceiveAndDelete removal was not synced")
	}
}

func TestStoreFailures(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.queue("q", func(p *QueueProperties) { p.RequiresDuplicateDetection = true })
	e.sendN("q", 2)
	d := e.recv1("q")
	boom := errString("disk on fire")
	spy.mu.Lock()
	spy.fail = boom
	spy.mu.Unlock()

	// A failed send is not visible and does not poison duplicate detection.
	wantKind(t, e.b.Send(ctx, "q", []*message.Message{msgID("x", "id")}), ErrInternal)
	// A failed complete keeps the lock: the retry below succeeds.
	wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrInternal)
	wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrInternal)
	// A failed ReceiveAndDelete returns nothing and removes nothing.
	r := e.receiver("q", ReceiveAndDelete)
	_, err := r.TryReceive(5)
	wantKind(t, err, ErrInternal)

	spy.mu.Lock()
	spy.fail = nil
	spy.mu.Unlock()
	e.complete("q", d.LockToken)
	e.send("q", msgID("x", "id"))
	ds := e.recv("q", PeekLock, 10)
	if got := bodies(ds); len(got) != 2 || got[1] != "x" {
		t.Fatalf("after failures: %v", got)
	}
	if ds[0].DeliveryCount != 1 {
		t.Fatalf("a failed receive raised the count to %d", ds[0].DeliveryCount)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
