package cluster

import (
	"testing"
)

// A draining unit whose broker reports nothing outstanding (DrainWatcher)
// is handed off at the next poll, without waiting out the drain.
func TestDrainedUnitHandedOffEarly(t *testing.T) {
	const units = 40
	c := newCluster(t, units)
	for _, id := range []string{"a", "b", "c"} {
		c.add(id).b.empty = true
	}
	c.settle()
	c.add("d")
	c.round() // the others start draining what d wins
	for range 12 {
		c.round() // no time passes: the 3 s drain never elapses
	}
	c.placed(units, "a", "b", "c", "d")
	if d := c.nodes["d"]; len(d.n.Owned()) == 0 {
		t.Fatal("d took nothing")
	}
}
