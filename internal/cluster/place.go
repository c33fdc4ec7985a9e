package cluster

import (
	"encoding/binary"
	"hash/fnv"
	"sort"
)

// score is the rendezvous weight of node for unit: FNV-1a 64 over the
// unit id and the node id, finished with a 64-bit mixer so that close
// ids spread.
func score(unit uint64, node string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], unit)
	h.Write(b[:])
	h.Write([]byte(node))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Rank orders nodes for unit, the owner-to-be first (highest score; ties
// by node id). It does not change nodes.
func Rank(unit uint64, nodes []string) []string {
	out := append([]string(nil), nodes...)
	sort.Slice(out, func(i, j int) bool {
		si, sj := score(unit, out[i]), score(unit, out[j])
		if si != sj {
			return si > sj
		}
		return out[i] < out[j]
	})
	return out
}

// Winner is the node unit belongs to among nodes, "" if there are none.
func Winner(unit uint64, nodes []string) string {
	best, bestScore := "", uint64(0)
	for _, n := range nodes {
		s := score(unit, n)
		if best == "" || s > bestScore || (s == bestScore && n < best) {
			best, bestScore = n, s
		}
	}
	return best
}
