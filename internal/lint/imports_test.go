// Package lint holds repository-wide checks that run as ordinary tests.
package lint

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/busbarmq/busbar"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// rule forbids packages under From from depending on any of Forbidden: our
// own packages (internal/...) at any depth, standard library packages
// directly (google/uuid, for one, imports net itself).
type rule struct {
	From      string
	Forbidden []string
	// StdlibOnly restricts From to the standard library plus Allowed.
	StdlibOnly bool
	Allowed    []string
	// Indirect are packages under a Forbidden one that From may depend on
	// through another package but not import itself.
	Indirect []string
}

// amqpCodec are the AMQP packages that only encode and decode (no I/O, no
// goroutines): the type system and the section codec. Service Bus
// messages are made of AMQP values, so the message model (internal/message)
// uses them, and everything that knows messages links them through it;
// the AMQP endpoint (internal/amqp itself) stays out of reach.
var amqpCodec = []string{"internal/amqp/encoding", "internal/amqp/frames"}

var rules = []rule{
	// The core knows nothing of protocols or transports.
	{From: "internal/broker", Forbidden: []string{"internal/amqp", "internal/servicebus", "internal/server", "internal/admin", "internal/config", "internal/metrics", "internal/tracing", "net/http", "net"}, Indirect: amqpCodec},
	{From: "internal/store", Forbidden: []string{"internal/broker", "internal/amqp", "internal/servicebus", "internal/server", "internal/admin", "internal/metrics", "net/http"}, Indirect: amqpCodec},
	// The PostgreSQL store: the store contract over pgx, below the broker
	// and everything that speaks to clients.
	{From: "internal/store/pgstore", Forbidden: []string{"internal/broker", "internal/amqp", "internal/servicebus", "internal/server", "internal/admin", "internal/metrics", "internal/config", "internal/cli", "net/http"}, Indirect: amqpCodec},
	// The cluster node: sessions, placement, unit leases. It drives the
	// broker and the store; only the server wires it (nothing else may
	// import it: see TestClusterImporters).
	{From: "internal/cluster", Forbidden: []string{"internal/amqp", "internal/relay", "internal/servicebus", "internal/server", "internal/admin", "internal/config", "internal/metrics", "internal/cli", "internal/store/pgstore", "net/http"}, Indirect: amqpCodec},
	{From: "internal/vfs", StdlibOnly: true},
	// The Service Bus message model and its codecs (record and AMQP form).
	{From: "internal/message", StdlibOnly: true, Allowed: amqpCodec},
	{From: "internal/clock", StdlibOnly: true},
	{From: "internal/version", StdlibOnly: true},
	// The one entity-name rule; everything that takes a name may import it.
	{From: "internal/names", StdlibOnly: true},
	{From: "internal/filter", StdlibOnly: true, Allowed: []string{"internal/message", "internal/amqp/encoding", "internal/amqp/frames"}, Indirect: amqpCodec, Forbidden: []string{"internal/amqp"}},
	{From: "internal/config", StdlibOnly: true, Allowed: []string{"internal/names"}},
	// The protocol layer knows nothing of the broker.
	{From: "internal/amqp", Forbidden: []string{"internal/broker", "internal/store", "internal/servicebus", "internal/server", "internal/admin"}},
	// The WebSocket transport carries bytes; it knows nothing of AMQP's
	// endpoint or anything above it.
	{From: "internal/amqpws", Forbidden: []string{"internal/amqp", "internal/broker", "internal/store", "internal/servicebus", "internal/server", "internal/admin"}},
	{From: "internal/amqp/encoding", StdlibOnly: true},
	{From: "internal/amqp/frames", StdlibOnly: true, Allowed: []string{"internal/amqp/encoding"}},
	{From: "internal/auth", StdlibOnly: true, Allowed: []string{"internal/clock"}},
	// The admin API speaks HTTP to the broker; it knows nothing of AMQP.
	{From: "internal/admin", Forbidden: []string{"internal/amqp", "internal/servicebus", "internal/server"}, Indirect: amqpCodec},
	{From: "internal/servicebus", Forbidden: []string{"internal/server", "internal/admin", "internal/metrics", "internal/tracing", "internal/relay", "net/http"}},
	// The relay between nodes: it proves nodes to each other and
	// proxies links (to servicebus's Router interface); the server
	// wires it to the cluster node and the store, which it never sees.
	{From: "internal/relay", Forbidden: []string{"internal/server", "internal/admin", "internal/cluster", "internal/store/pgstore", "internal/config", "internal/cli", "internal/metrics"}, Indirect: amqpCodec},
	// The web console is a front end of the broker beside the admin API:
	// no AMQP endpoint (only the body encoding), no server. It links the
	// frame codec only through package message.
	{From: "internal/console", Forbidden: []string{"internal/servicebus", "internal/server", "internal/amqpws", "internal/amqp/frames"}, Indirect: []string{"internal/amqp/frames"}},
	// Metrics read the broker and the store; the layers that report to
	// them know them only as an observer interface of their own.
	{From: "internal/metrics", Forbidden: []string{"internal/amqp", "internal/servicebus", "internal/server", "internal/admin"}, Indirect: amqpCodec},
	// Message histories are a leaf the broker records into: they know
	// nothing of the broker, the store or any protocol.
	{From: "internal/history", Forbidden: []string{"internal/broker", "internal/store", "internal/amqp", "internal/servicebus", "internal/server", "internal/admin", "internal/metrics", "net/http"}},
	// Tracing owns the tracer provider and knows nothing of Busbar.
	{From: "internal/faults", Forbidden: []string{"internal/broker", "internal/amqp", "internal/servicebus", "internal/server", "internal/admin", "internal/metrics", "net/http"}},
	{From: "internal/tracing", Forbidden: []string{"internal/broker", "internal/store", "internal/amqp", "internal/servicebus", "internal/server", "internal/admin", "internal/metrics"}},
}

func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		// The cluster node is wired by the server alone.
		if slices.Contains(p.Imports, module+"/internal/cluster") && rel != "internal/server" {
			t.Errorf("%s must not import internal/cluster: only internal/server wires it", rel)
		}
		for _, r := range rules {
			if rel != r.From && !strings.HasPrefix(rel, r.From+"/") {
				continue
			}
			for _, d := range p.Deps {
				drel, ours := strings.CutPrefix(d, module+"/")
				for _, f := range r.Forbidden {
					target := f
					if strings.HasPrefix(f, "internal/") {
						if ours && (drel == f || strings.HasPrefix(drel, f+"/")) && !strings.HasPrefix(drel, r.From) &&
							(!slices.Contains(r.Indirect, drel) || slices.Contains(p.Imports, d)) {
							t.Errorf("%s must not import %s (via %s)", rel, f, d)
						}
						continue
					}
					if d == target && slices.Contains(p.Imports, d) {
						t.Errorf("%s must not import %s", rel, target)
					}
				}
				if r.StdlibOnly && !isStdlib(d) {
					ok := false
					for _, a := range r.Allowed {
						if ours && (drel == a || strings.HasPrefix(drel, a+"/")) {
							ok = true
						}
					}
					if !ok {
						t.Errorf("%s may import only the standard library%s, not %s", rel, allowedText(r.Allowed), d)
					}
				}
			}
		}
	}
}

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func allowedText(a []string) string {
	if len(a) == 0 {
		return ""
	}
	return " and " + strings.Join(a, ", ")
}
