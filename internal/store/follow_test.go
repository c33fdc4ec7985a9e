package store

import "testing"

func TestGate(t *testing.T) {
	g, other := NewGate(), NewGate()
	var f Follower
	f.Idle() // not awaited: nothing happens
	if g.Answer(&f) {
		t.Fatal("Answer of a follower nobody awaits reported true")
	}
	if g.Waits(&f) {
		t.Fatal("Waits before Await")
	}
	if !g.Await(&f) || g.Pending() != 1 {
		t.Fatalf("Await: pending %d, want 1", g.Pending())
	}
	if !g.Waits(&f) || other.Waits(&f) {
		t.Fatal("Waits does not tell which gate awaits the follower")
	}
	if g.Await(&f) || other.Await(&f) || g.Pending() != 1 || other.Pending() != 0 {
		t.Fatal("a follower was awaited twice")
	}
	if other.Answer(&f) {
		t.Fatal("another gate's Answer took the follower")
	}
	if !g.Answer(&f) || g.Pending() != 0 || g.Waits(&f) {
		t.Fatalf("Answer: pending %d, want 0", g.Pending())
	}
	select {
	case <-g.Wake():
	default:
		t.Fatal("an answer did not wake the gate")
	}
	g.Await(&f)
	f.Idle()
	if g.Pending() != 0 || g.Answer(&f) {
		t.Fatal("Idle did not answer")
	}
	if f.Promised() {
		t.Fatal("a new follower has promised")
	}
	f.Promise(true)
	if !f.Promised() {
		t.Fatal("Promise(true) not kept")
	}
	var nilF *Follower
	nilF.Idle() // a nil follower is nobody
}

func TestGateGiveUp(t *testing.T) {
	g := NewGate()
	var f Follower
	if !f.Trusted() {
		t.Fatal("a new follower is not trusted")
	}
	if g.GiveUp(&f) || !f.Trusted() {
		t.Fatal("GiveUp on a follower nobody awaits changed it")
	}
	g.Await(&f)
	if !g.GiveUp(&f) || g.Pending() != 0 {
		t.Fatalf("GiveUp: pending %d, want 0", g.Pending())
	}
	if f.Trusted() {
		t.Fatal("a follower given up on is still trusted")
	}
	if g.Answer(&f) || f.Trusted() {
		t.Fatal("an answer after the give-up restored trust")
	}
	g.Await(&f)
	if !g.Answer(&f) || !f.Trusted() {
		t.Fatal("an answer in time did not restore trust")
	}
	g.Await(&f)
	g.GiveUp(&f)
	g.Await(&f)
	f.Idle()
	if !f.Trusted() {
		t.Fatal("Idle in time did not restore trust")
	}
}
