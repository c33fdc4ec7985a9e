package store

import "sync/atomic"

// A Follower is one closed-loop committer's side of commit pacing (see
// "Commit pacing" in the package doc): its promise, whether a store still
// trusts it, and the store waiting for its answer. The zero value is ready
// (and trusted).
type Follower struct {
	promised atomic.Bool
	missed   atomic.Bool          // a store gave up waiting for an answer
	awaited  atomic.Pointer[Gate] // the store waiting for an answer, if any
}

// Promise says whether f answers the return of its next commits (until
// the next Promise). Call it between commits.
func (f *Follower) Promise(p bool) { f.promised.Store(p) }

// Promised reports the last Promise.
func (f *Follower) Promised() bool { return f.promised.Load() }

// Trusted reports that no store has given up waiting for f since f last
// answered one in time (a new follower is trusted).
func (f *Follower) Trusted() bool { return !f.missed.Load() }

// Idle tells a store waiting for f's answer that f has nothing to commit
// now. It is safe to call at any time and does nothing when no store
// waits for f.
func (f *Follower) Idle() {
	if f == nil {
		return
	}
	if g := f.awaited.Swap(nil); g != nil {
		f.missed.Store(false)
		g.done()
	}
}

// Gate is a store's side of Follower: it counts the followers the store
// waits for.
type Gate struct {
	pending atomic.Int64
	wake    chan struct{}
}

// NewGate returns a gate that waits for nobody.
func NewGate() *Gate { return &Gate{wake: make(chan struct{}, 1)} }

// Await starts waiting for f's answer. It reports false (and does nothing)
// when f is already awaited.
func (g *Gate) Await(f *Follower) bool {
	if !f.awaited.CompareAndSwap(nil, g) {
		return false
	}
	g.pending.Add(1)
	return true
}

// Answer records that f answered by committing. It reports whether g was
// waiting for f.
func (g *Gate) Answer(f *Follower) bool { return g.end(f, true) }

// GiveUp stops waiting for f without an answer: f is not Trusted until it
// next answers in time. It reports whether g was waiting for f.
func (g *Gate) GiveUp(f *Follower) bool { return g.end(f, false) }

// end stops g's wait for f, answered or not.
func (g *Gate) end(f *Follower, answered bool) bool {
	if !f.awaited.CompareAndSwap(g, nil) {
		return false
	}
	f.missed.Store(!answered)
	g.done()
	return true
}

func (g *Gate) done() {
	g.pending.Add(-1)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Waits reports whether g awaits f's answer.
func (g *Gate) Waits(f *Follower) bool { return f.awaited.Load() == g }

// Pending is the number of awaited followers that have not answered.
func (g *Gate) Pending() int64 { return g.pending.Load() }

// Wake receives (at least once) after an answer; check Pending after.
func (g *Gate) Wake() <-chan struct{} { return g.wake }
