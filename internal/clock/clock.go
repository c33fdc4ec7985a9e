// Package clock is the source of time for the broker core.
//
// The core never calls time.Now directly: it takes a Clock, so tests drive
// time with a Fake and never sleep. Real returns the wall clock. Test is
// the clock a broker started with --test-clock runs on: the wall clock
// plus an offset that users move forward through the admin API.
package clock

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Fake is a manually advanced clock for tests. The zero value starts at the
// zero time; use NewFake for a realistic start.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Set moves the fake time to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Test is the controllable clock of a broker started with --test-clock:
// it runs at the pace of a base clock (the wall clock in production
// builds) plus an offset that Advance and Set move forward. Time never
// goes back, as in Azure: Advance refuses a negative duration and Set an
// instant before the current test time. Every move calls the function
// given to OnMove, so a timer loop sleeping until the next deadline (the
// broker's Run, woken by Broker.Wake) re-reads the time at once.
//
// A clock restored with NewTestFrom resumes at an offset a previous run
// stored through the function given to OnSave: each move is saved before
// it takes effect, so a broker restarted on the same data does not see
// its test time go back.
type Test struct {
	base   Clock
	moveMu sync.Mutex // serialises moves across their save
	mu     sync.Mutex
	offset time.Duration
	onMove func()
	save   func(time.Duration) error
}

// ErrBackwards is returned by Advance and Set when asked to move the test
// clock back.
var ErrBackwards = errors.New("the test clock only moves forward")

// MaxOffset is how far ahead of its base clock a Test clock may be moved
// (about a century), so that every instant stays representable in the
// nanoseconds since 1970 the broker stores.
const MaxOffset = 100 * 365 * 24 * time.Hour

// ErrTooFar is returned by Advance and Set when asked to move the test
// clock more than MaxOffset ahead of its base clock.
var ErrTooFar = errors.New("the test clock may be at most 100 years ahead of the wall clock")

// NewTest returns a test clock following base (nil: the wall clock) with
// no offset.
func NewTest(base Clock) *Test {
	if base == nil {
		base = Real{}
	}
	return &Test{base: base}
}

// ErrNotSaved is returned by Advance and Set when the function given to
// OnSave failed: the clock was not moved.
var ErrNotSaved = errors.New("the test clock's new offset could not be saved")

// NewTestFrom returns a test clock following base (nil: the wall clock)
// offset ahead of it: the offset a previous run saved. It fails if the
// offset is negative or more than MaxOffset.
func NewTestFrom(base Clock, offset time.Duration) (*Test, error) {
	if offset < 0 || offset > MaxOffset {
		return nil, fmt.Errorf("test clock offset %v is outside 0 to %v", offset, MaxOffset)
	}
	c := NewTest(base)
	c.offset = offset
	return c, nil
}

// OnSave sets the function that makes a new offset durable. Each move
// calls it, one at a time, before the move takes effect; if it fails the
// move fails with ErrNotSaved and the clock stays where it was. nil saves
// nothing.
func (c *Test) OnSave(f func(offset time.Duration) error) {
	c.moveMu.Lock()
	c.save = f
	c.moveMu.Unlock()
}

// commit saves offset, then makes it the clock's and calls the OnMove
// function. moveMu must be held; commit releases it.
func (c *Test) commit(offset time.Duration) (time.Time, error) {
	defer c.moveMu.Unlock()
	if c.save != nil {
		if err := c.save(offset); err != nil {
			return time.Time{}, fmt.Errorf("%w: %v", ErrNotSaved, err)
		}
	}
	c.mu.Lock()
	c.offset = offset
	now := c.base.Now().Add(offset)
	f := c.onMove
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return now, nil
}

// OnMove sets the function called (outside the clock's lock) after each
// Advance or Set; nil calls none.
func (c *Test) OnMove(f func()) {
	c.mu.Lock()
	c.onMove = f
	c.mu.Unlock()
}

// Now returns the base clock's time plus the offset.
func (c *Test) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Now().Add(c.offset)
}

// Offset is how far the test clock is ahead of its base clock.
func (c *Test) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Advance moves the test clock forward by d (0 is allowed and only
// wakes the listener) and returns the new time.
func (c *Test) Advance(d time.Duration) (time.Time, error) {
	if d < 0 {
		return time.Time{}, fmt.Errorf("%w: cannot advance by %v", ErrBackwards, d)
	}
	c.moveMu.Lock()
	c.mu.Lock()
	offset := c.offset
	c.mu.Unlock()
	if d > MaxOffset-offset {
		c.moveMu.Unlock()
		return time.Time{}, fmt.Errorf("%w: cannot advance by %v", ErrTooFar, d)
	}
	return c.commit(offset + d)
}

// Set moves the test clock to t, which must not be before its current
// time, and returns t.
func (c *Test) Set(t time.Time) (time.Time, error) {
	c.moveMu.Lock()
	c.mu.Lock()
	base := c.base.Now()
	offset := c.offset
	c.mu.Unlock()
	if now := base.Add(offset); t.Before(now) {
		c.moveMu.Unlock()
		return time.Time{}, fmt.Errorf("%w: %s is before the current test time %s",
			ErrBackwards, t.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	if off := t.Sub(base); off > MaxOffset {
		c.moveMu.Unlock()
		return time.Time{}, fmt.Errorf("%w: cannot set it to %s", ErrTooFar, t.UTC().Format(time.RFC3339Nano))
	}
	if _, err := c.commit(t.Sub(base)); err != nil {
		return time.Time{}, err
	}
	return t, nil
}
