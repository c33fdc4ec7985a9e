package cluster

import (
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestRendezvousProperties: every unit has one winner, the same whatever
// the order of the nodes; the winner heads Rank; adding a node moves only
// units to the new node, about 1/(N+1) of them; removing one moves only
// its own units.
func TestRendezvousProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "nodes")
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("node-%d-%s", i, rapid.StringMatching(`[a-z]{0,4}`).Draw(t, "suffix"))
		}
		const units = 3000
		base := uint64(rapid.Uint32().Draw(t, "base"))
		added := append(append([]string(nil), nodes...), "newcomer")
		reversed := make([]string, n)
		for i, v := range nodes {
			reversed[n-1-i] = v
		}
		moved := 0
		for u := base; u < base+units; u++ {
			w := Winner(u, nodes)
			if w != Winner(u, reversed) || Rank(u, reversed)[0] != w {
				t.Fatalf("unit %d: winner depends on the order", u)
			}
			w2 := Winner(u, added)
			if w2 != w {
				if w2 != "newcomer" {
					t.Fatalf("unit %d moved from %s to %s when a node was added", u, w, w2)
				}
				moved++
			}
			if n > 1 {
				gone := nodes[0]
				w3 := Winner(u, nodes[1:])
				if w != gone && w3 != w {
					t.Fatalf("unit %d moved from %s to %s when %s left", u, w, w3, gone)
				}
			}
		}
		want := float64(units) / float64(n+1)
		if math.Abs(float64(moved)-want) > 0.25*want+30 {
			t.Fatalf("%d of %d units moved to the new node, want about %.0f", moved, units, want)
		}
	})
}
