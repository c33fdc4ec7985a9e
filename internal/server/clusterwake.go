package server

import (
	"context"
	"io"
	"net/http"

	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/relay"
)

// Waking the node that lands a transfer (docs/design/cluster.md §9.3):
// the broker tells the node the target units of each commit that put
// transfers in the outbox (broker.SetTransferred -> cluster.Node.
// Transferred); the node's waker sends wake(units) to the node serving
// them (sendWake): a POST of the units (cluster.AppendWake) to wakePath
// on that node's internal listener, over the HTTP forwarder's
// node-proven connections. The internal listener serves it (wakeHTTP)
// only on a proven connection (relay.Mux) and without a client principal
// (a forwarded client request always has one), and the node lands the
// units it serves at once (cluster.Node.Wake). Polling stays the
// guarantee: a wake that fails costs a poll, and is logged at debug.

// wakePath is the internal listener's path for a wake.
const wakePath = relay.NodePathPrefix + "wake"

// sendWake is the node's cluster.WakeSender.
func (c *clusterPart) sendWake(ctx context.Context, node, addr string, units []uint64) error {
	return c.fwd.Notify(ctx, relay.Owner{Node: node, Addr: addr}, wakePath, cluster.AppendWake(nil, units))
}

// wakeHTTP serves the wakes on the internal listener's HTTP side and
// hands every other request to next.
func (c *clusterPart) wakeHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != wakePath || r.Header.Get(relay.PrincipalHeader) != "" {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "a wake is a POST", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cluster.MaxWakeBytes))
		if err != nil {
			http.Error(w, "a wake's body is too long or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		units, err := cluster.ParseWake(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.node.Wake(units)
		w.WriteHeader(http.StatusNoContent)
	})
}
