package filestore

import (
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

// followStore opens a store on the in-memory file system with the given
// FollowerWait.
func followStore(t *testing.T, wait time.Duration) *Store {
	t.Helper()
	s, err := Open(Options{Dir: "/db", FS: vfs.NewMem(), BackgroundInterval: -1, NoPreallocate: true, FollowerWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}, true); err != nil {
		t.Fatal(err)
	}
	return s
}

// commitAsync commits one message as f (nil: not a follower) and reports
// the result on the returned channel.
func commitAsync(s *Store, seq uint64, f *store.Follower) <-chan error {
	done := make(chan error, 1)
	go func() {
		b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: seq, Data: []byte("m")}}, Follower: f}
		done <- s.Commit(b, true)
	}()
	return done
}

func wait(t *testing.T, c <-chan error, what string) {
	t.Helper()
	select {
	case err := <-c:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

// waitGroups waits until the writer has processed n groups since Open.
func waitGroups(t *testing.T, s *Store, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.LogStats().Groups < n {
		if time.Now().After(deadline) {
			t.Fatalf("the writer processed %d groups, want %d", s.LogStats().Groups, n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// A follower that promised an answer is waited for: another committer's
// commit is not synced before the follower's next commit, and both share
// one fdatasync.
func TestFollowerAnswerSharesTheNextSync(t *testing.T) {
	s := followStore(t, time.Minute) // no wait ends by running out
	var f store.Follower
	f.Promise(true)
	wait(t, commitAsync(s, 1, &f), "the follower's first commit")
	groups, syncs := s.LogStats().Groups, s.LogStats().Syncs

	other := commitAsync(s, 2, nil)
	waitGroups(t, s, groups+1) // written and handed to the syncer, which now waits for f
	select {
	case err := <-other:
		t.Fatalf("a commit was synced before the awaited follower answered (err %v)", err)
	default:
	}
	wait(t, commitAsync(s, 3, &f), "the follower's answer")
	wait(t, other, "the other commit")
	if got := s.LogStats().Syncs - syncs; got != 1 {
		t.Fatalf("%d fdatasyncs for the two commits, want 1", got)
	}
	if got := s.LogStats().GatherTimeouts; got != 0 {
		t.Fatalf("%d waits ran out, want 0", got)
	}
	f.Idle() // as a link does when it ends (else Close's own commits wait for f)
}

// Idle answers as well: the waiting commit goes at once.
func TestFollowerIdleEndsTheWait(t *testing.T) {
	s := followStore(t, time.Minute)
	var f store.Follower
	f.Promise(true)
	wait(t, commitAsync(s, 1, &f), "the follower's commit")
	groups := s.LogStats().Groups
	other := commitAsync(s, 2, nil)
	waitGroups(t, s, groups+1)
	f.Idle()
	wait(t, other, "the other commit after Idle")
	f.Idle() // a second Idle is harmless
}

// Without a promise nobody waits, and a follower that does not answer is
// waited for once, for FollowerWait, and then no more.
func TestFollowerWaitIsBounded(t *testing.T) {
	t.Run("no promise", func(t *testing.T) {
		s := followStore(t, time.Minute)
		var f store.Follower
		wait(t, commitAsync(s, 1, &f), "the follower's commit")
		wait(t, commitAsync(s, 2, nil), "a commit after a follower that promised nothing")
	})
	t.Run("silent follower", func(t *testing.T) {
		s := followStore(t, 2*time.Millisecond)
		var f store.Follower
		f.Promise(true)
		wait(t, commitAsync(s, 1, &f), "the follower's commit")
		wait(t, commitAsync(s, 2, nil), "a commit while the follower is silent")
		if got := s.LogStats().GatherTimeouts; got != 1 {
			t.Fatalf("%d waits ran out, want 1", got)
		}
		if f.Trusted() {
			t.Fatal("the silent follower is still trusted")
		}
		wait(t, commitAsync(s, 3, nil), "the next commit")
		if got := s.LogStats().GatherTimeouts; got != 1 {
			t.Fatalf("%d waits ran out after the follower was given up, want still 1", got)
		}
		// A late answer counts for nothing and blocks nobody.
		wait(t, commitAsync(s, 4, &f), "the follower's late commit")
		if f.Trusted() {
			t.Fatal("a late answer restored the follower's trust")
		}
	})
	t.Run("off", func(t *testing.T) {
		s := followStore(t, -1)
		var f store.Follower
		f.Promise(true)
		wait(t, commitAsync(s, 1, &f), "the follower's commit")
		wait(t, commitAsync(s, 2, nil), "a commit with FollowerWait off")
	})
}

// Many followers committing in closed loops lose nothing and end with
// nobody awaited.
func TestFollowersClosedLoops(t *testing.T) {
	s := followStore(t, 200*time.Microsecond)
	const n, each = 8, 50
	errs := make(chan error, n)
	fs := make([]store.Follower, n)
	for i := range n {
		go func() {
			f := &fs[i]
			for j := range each {
				f.Promise(j%3 != 0)
				b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: uint64(1000*(i+1) + j), Data: []byte("m")}}, Follower: f}
				if err := s.Commit(b, true); err != nil {
					errs <- err
					return
				}
			}
			f.Idle()
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var got int
	if err := s.Recover(store.Visitor{Message: func(store.Message) error { got++; return nil }}); err != nil {
		t.Fatal(err)
	}
	if got != n*each {
		t.Fatalf("%d messages stored, want %d", got, n*each)
	}
	wait(t, commitAsync(s, 1, nil), "a last commit")
	if p := s.gate.Pending(); p != 0 {
		t.Fatalf("%d followers still awaited", p)
	}
}

// A round closes on bytes: a commit that brings the round to RoundBytes
// is synced at once, without the awaited follower's answer and without a
// timeout (FollowerWait is a minute here), and the follower, not given up
// on, stays trusted and awaited by the next round, which waits for it.
func TestRoundClosesOnBytes(t *testing.T) {
	s, err := Open(Options{Dir: "/db", FS: vfs.NewMem(), BackgroundInterval: -1, NoPreallocate: true,
		FollowerWait: time.Minute, RoundBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}, true); err != nil {
		t.Fatal(err)
	}
	var f store.Follower
	f.Promise(true)
	wait(t, commitAsync(s, 1, &f), "the follower's commit")
	if !s.gate.Waits(&f) {
		t.Fatal("the follower that promised is not awaited after its commit returned")
	}

	large := make(chan error, 1)
	go func() {
		b := &store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: 2, Data: make([]byte, 4<<10)}}}
		large <- s.Commit(b, true)
	}()
	wait(t, large, "a commit of RoundBytes while the follower is awaited")
	st := s.LogStats()
	if st.FullRounds != 1 || st.GatherTimeouts != 0 {
		t.Fatalf("%d rounds closed on bytes and %d waits ran out; want 1 and 0", st.FullRounds, st.GatherTimeouts)
	}
	if !f.Trusted() || !s.gate.Waits(&f) {
		t.Fatalf("after a round closed on bytes the follower is trusted %v, awaited %v; want both", f.Trusted(), s.gate.Waits(&f))
	}

	// A small commit next is synced with the carried follower's answer
	// (which promises nothing more, so that whichever reaches the syncer
	// first, nobody waits for a commit that never comes).
	small := commitAsync(s, 3, nil)
	f.Promise(false)
	wait(t, commitAsync(s, 4, &f), "the follower's answer")
	wait(t, small, "a small commit after the follower answered")
	if st := s.LogStats(); st.GatherTimeouts != 0 || st.FullRounds != 1 {
		t.Fatalf("%d waits ran out, %d rounds closed on bytes; want 0 and 1", st.GatherTimeouts, st.FullRounds)
	}
	if !f.Trusted() {
		t.Fatal("the follower is not trusted after answering")
	}
	if p := s.gate.Pending(); p != 0 {
		t.Fatalf("%d followers still awaited", p)
	}
}
