package relay

// Drop closes every internal connection now: the relayed links and
// management requests on them end with an error the client retries
// (through another node, or later through this one); later links dial
// again. A node that lost contact with the database calls it: until it
// renews its session it serves nothing, relayed or not.
func (g *Gateway) Drop() {
	g.mu.Lock()
	var all []*peerConn
	for c, m := range g.peers {
		for _, p := range m {
			all = append(all, p)
		}
		if len(m) > 0 {
			g.peers[c] = make(map[string]*peerConn) // its watcher stays
		}
	}
	g.mu.Unlock()
	for _, p := range all {
		// A dial in progress finishes first (p.close waits for it): not
		// on the caller's goroutine. A closed gateway closed them all.
		g.spawn(p.close)
	}
}
