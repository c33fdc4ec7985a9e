package broker

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// folStore records the follower of every synced commit.
type folStore struct {
	*memstore.Store
	mu   sync.Mutex
	fols []*store.Follower
}

func (s *folStore) Commit(b *store.Batch, sync bool) error {
	if sync {
		s.mu.Lock()
		s.fols = append(s.fols, b.Follower)
		s.mu.Unlock()
	}
	return s.Store.Commit(b, sync)
}

func (s *folStore) take() []*store.Follower {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fols
	s.fols = nil
	return f
}

// A handle's calls carry its follower to the store; the Broker's plain
// calls carry none.
func TestHandlesPassTheirPacingToTheStore(t *testing.T) {
	st := &folStore{Store: memstore.New()}
	e := newEnvOn(t, st)
	e.queue("q")
	ctx := context.Background()
	st.take()

	s := e.b.NewSender("q")
	defer s.Close()
	if err := s.Send(ctx, []*message.Message{msg("a")}); err != nil {
		t.Fatal(err)
	}
	if got := st.take(); len(got) != 1 || got[0] != &s.pace.f {
		t.Fatalf("Sender.Send committed as %v, want its follower", got)
	}
	if err := e.b.Send(ctx, "q", []*message.Message{msg("b")}); err != nil {
		t.Fatal(err)
	}
	if got := st.take(); len(got) != 1 || got[0] != nil {
		t.Fatalf("Broker.Send committed as %v, want no follower", got)
	}

	ds := e.recv("q", PeekLock, 2)
	c := e.b.NewSettler("q")
	defer c.Close()
	st.take()
	for _, err := range c.CompleteBatch(ctx, []uuid.UUID{ds[0].LockToken}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := st.take(); len(got) != 1 || got[0] != &c.pace.f {
		t.Fatalf("Settler.CompleteBatch committed as %v, want its follower", got)
	}
	for _, err := range e.b.CompleteBatch(ctx, "q", []uuid.UUID{ds[1].LockToken}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := st.take(); len(got) != 1 || got[0] != nil {
		t.Fatalf("Broker.CompleteBatch committed as %v, want no follower", got)
	}
}

// A handle promises its next commit while the store trusts it, and only
// for a window's worth at once, in deliveries or in bytes, after the store
// waited for it in vain.
func TestPacePromisesWhileTrusted(t *testing.T) {
	var s Sender
	s.Pace(1, 1024)
	if !s.Promised() {
		t.Fatal("a trusted handle did not promise")
	}
	g := store.NewGate()
	g.Await(&s.pace.f)
	g.GiveUp(&s.pace.f) // the store's wait ran out
	s.Pace(PaceWindow-1, PaceBytes-1)
	if s.Promised() {
		t.Fatal("a handle the store gave up on promised a small commit")
	}
	s.Pace(PaceWindow, PaceWindow*1024)
	if !s.Promised() {
		t.Fatal("a window's worth did not promise")
	}
	s.Pace(3, PaceBytes) // three large messages
	if !s.Promised() {
		t.Fatal("a window's worth of bytes did not promise")
	}
	g.Await(&s.pace.f)
	g.Answer(&s.pace.f) // answered in time
	s.Pace(1, 1024)
	if !s.Promised() {
		t.Fatal("a handle that answered in time is not trusted again")
	}
	g.Await(&s.pace.f)
	s.Close() // Idle: the store stops waiting
	if g.Pending() != 0 {
		t.Fatal("Close left the store waiting")
	}
}
