package clock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTestClockAdvanceAndSet(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := NewFake(start)
	c := NewTest(base)
	moves := 0
	c.OnMove(func() { moves++ })

	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	base.Advance(time.Second) // follows its base
	if got := c.Now(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("Now = %v after base moved", got)
	}
	now, err := c.Advance(2 * time.Hour)
	if err != nil || !now.Equal(start.Add(2*time.Hour+time.Second)) || !c.Now().Equal(now) {
		t.Fatalf("Advance = %v, %v; Now %v", now, err, c.Now())
	}
	if c.Offset() != 2*time.Hour || moves != 1 {
		t.Fatalf("offset %v, moves %d", c.Offset(), moves)
	}
	to := start.Add(48 * time.Hour)
	if got, err := c.Set(to); err != nil || !got.Equal(to) || !c.Now().Equal(to) {
		t.Fatalf("Set = %v, %v; Now %v", got, err, c.Now())
	}
	if moves != 2 {
		t.Fatalf("moves = %d", moves)
	}
	if _, err := c.Set(to); err != nil { // setting the current time is no move back
		t.Fatalf("Set(now) = %v", err)
	}
	if _, err := c.Set(to.Add(-time.Nanosecond)); !errors.Is(err, ErrBackwards) {
		t.Fatalf("Set back = %v, want ErrBackwards", err)
	}
	if _, err := c.Advance(-time.Minute); !errors.Is(err, ErrBackwards) {
		t.Fatalf("Advance back = %v, want ErrBackwards", err)
	}
	if _, err := c.Advance(MaxOffset); !errors.Is(err, ErrTooFar) {
		t.Fatalf("Advance too far = %v, want ErrTooFar", err)
	}
	if _, err := c.Set(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, ErrTooFar) {
		t.Fatalf("Set too far = %v, want ErrTooFar", err)
	}
	if !c.Now().Equal(to) || moves != 3 {
		t.Fatalf("refused moves changed the clock: %v, moves %d", c.Now(), moves)
	}
}

func TestTestClockDefaultsToWallClock(t *testing.T) {
	c := NewTest(nil)
	if d := time.Until(c.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("test clock without offset is %v from the wall clock", d)
	}
}

// TestTestClockSaves: every move is saved before it takes effect, a
// failed save leaves the clock where it was, and a clock restored from
// the saved offset reads the same time.
func TestTestClockSaves(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := NewFake(start)
	c := NewTest(base)
	var saved []time.Duration
	var fail error
	c.OnSave(func(off time.Duration) error {
		if fail != nil {
			return fail
		}
		if c.Offset() == off {
			t.Errorf("offset %v in effect before it was saved", off)
		}
		saved = append(saved, off)
		return nil
	})
	moves := 0
	c.OnMove(func() { moves++ })
	if _, err := c.Advance(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(start.Add(3 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(saved) != 2 || saved[0] != time.Hour || saved[1] != 3*time.Hour {
		t.Fatalf("saved %v", saved)
	}
	if _, err := c.Set(start); !errors.Is(err, ErrBackwards) || len(saved) != 2 {
		t.Fatalf("a refused move: %v, saved %v", err, saved)
	}

	fail = errors.New("disk full")
	if _, err := c.Advance(time.Minute); !errors.Is(err, ErrNotSaved) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Advance with a failing save = %v", err)
	}
	if _, err := c.Set(start.Add(5 * time.Hour)); !errors.Is(err, ErrNotSaved) {
		t.Fatalf("Set with a failing save = %v", err)
	}
	if c.Offset() != 3*time.Hour || moves != 2 {
		t.Fatalf("unsaved moves took effect: offset %v, moves %d", c.Offset(), moves)
	}

	r, err := NewTestFrom(base, saved[len(saved)-1])
	if err != nil || !r.Now().Equal(c.Now()) {
		t.Fatalf("restored clock %v, %v; want %v", r.Now(), err, c.Now())
	}
	for _, bad := range []time.Duration{-time.Second, MaxOffset + 1} {
		if _, err := NewTestFrom(base, bad); err == nil {
			t.Errorf("NewTestFrom(%v) accepted", bad)
		}
	}
}
