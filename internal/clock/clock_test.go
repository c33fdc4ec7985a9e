package clock

import (
	"errors"
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
