package broker

import (
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// collect takes s and returns the values and depths, in take order.
func collect(s *pubStack[int]) (vals []int, depths []int32) {
	for n := s.take(); n != nil; n = n.next {
		vals = append(vals, n.v)
		depths = append(depths, n.depth)
	}
	return vals, depths
}

func TestPubStackTakesOldestFirst(t *testing.T) {
	var s pubStack[int]
	if s.pending() || s.take() != nil {
		t.Fatal("a new stack is not empty")
	}
	for i := range 3 {
		if d := s.push(&pubNode[int]{v: i}); d != int32(i) {
			t.Fatalf("push %d: depth %d, want %d", i, d, i)
		}
	}
	if !s.pending() {
		t.Fatal("pushed, not pending")
	}
	vals, depths := collect(&s)
	if len(vals) != 3 || vals[0] != 0 || vals[1] != 1 || vals[2] != 2 || depths[2] != 2 {
		t.Fatalf("took %v (depths %v), want [0 1 2]", vals, depths)
	}
	if s.pending() || s.take() != nil {
		t.Fatal("taken, still pending")
	}
	s.push(&pubNode[int]{v: 9})
	if vals, depths := collect(&s); len(vals) != 1 || vals[0] != 9 || depths[0] != 0 {
		t.Fatalf("after a take: %v %v, want [9] depth 0", vals, depths)
	}
}

// The stack's invariant against a model (a slice): any sequence of pushes
// and takes returns what was pushed since the last take, oldest first,
// each with the depth it was pushed at.
func TestPubStackModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s pubStack[int]
		var model []int
		next := 0
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				d := s.push(&pubNode[int]{v: next})
				if int(d) != len(model) {
					t.Fatalf("push: depth %d, model has %d", d, len(model))
				}
				model = append(model, next)
				next++
			},
			"take": func(t *rapid.T) {
				vals, depths := collect(&s)
				if len(vals) != len(model) {
					t.Fatalf("took %v, model %v", vals, model)
				}
				for i := range vals {
					if vals[i] != model[i] || int(depths[i]) != i {
						t.Fatalf("took %v (depths %v), model %v", vals, depths, model)
					}
				}
				model = model[:0]
			},
			"": func(t *rapid.T) {
				if s.pending() != (len(model) > 0) {
					t.Fatalf("pending %v with %d in the model", s.pending(), len(model))
				}
			},
		})
	})
}

// Under concurrency every pushed node is taken exactly once, and each
// pusher's nodes come out in its order. Run with -race.
func TestPubStackConcurrent(t *testing.T) {
	const pushers, per = 4, 2000
	var s pubStack[int]
	var wg sync.WaitGroup
	for p := range pushers {
		wg.Go(func() {
			for i := range per {
				s.push(&pubNode[int]{v: p*per + i})
			}
		})
	}
	seen := make([]bool, pushers*per)
	last := make([]int, pushers)
	for i := range last {
		last[i] = -1
	}
	check := func() {
		for n := s.take(); n != nil; n = n.next {
			if seen[n.v] {
				t.Fatalf("%d taken twice", n.v)
			}
			seen[n.v] = true
			p, i := n.v/per, n.v%per
			if i <= last[p] {
				t.Fatalf("pusher %d: %d after %d", p, i, last[p])
			}
			last[p] = i
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		check()
	}
	check()
	for v, ok := range seen {
		if !ok {
			t.Fatalf("%d never taken", v)
		}
	}
}

// No wakeup is lost: when a sender pushes while a receiver gets ready to
// wait, the receiver's take finds the batch or the sender sees the
// waiter (publication's handshake). Run with -race.
func TestPublicationLosesNoWakeup(t *testing.T) {
	for range 2000 {
		var p publication
		var sawWaiter bool
		var found bool
		var wg sync.WaitGroup
		wg.Go(func() { _, sawWaiter = p.push(&pubBatch{}) })
		wg.Go(func() {
			p.waiting.Add(1) // as Receiver.Ready does, under the entity's mutex
			found = p.stack.take() != nil
		})
		wg.Wait()
		if !sawWaiter && !found {
			t.Fatal("the sender saw no waiter and the receiver found no batch")
		}
	}
}
