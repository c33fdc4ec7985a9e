package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/metrics"
)

// consoleTotals reads each entity's incoming and outgoing message counters
// from the metrics registry, for the console's rates: those of the
// namespace labelled namespace, or with no such label when it is "".
func consoleTotals(m *metrics.Metrics, namespace string) func() map[string]console.Totals {
	return func() map[string]console.Totals {
		fams, err := m.Registry().Gather()
		if err != nil {
			return nil
		}
		out := map[string]console.Totals{}
		for _, f := range fams {
			in := f.GetName() == "busbar_incoming_messages_total"
			if !in && f.GetName() != "busbar_outgoing_messages_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				var entity, ns string
				for _, l := range mt.GetLabel() {
					switch l.GetName() {
					case "entity":
						entity = l.GetValue()
					case "namespace":
						ns = l.GetValue()
					}
				}
				if ns != namespace {
					continue
				}
				t := out[entity]
				if in {
					t.In = mt.GetCounter().GetValue()
				} else {
					t.Out = mt.GetCounter().GetValue()
				}
				out[entity] = t
			}
		}
		return out
	}
}

// consoles serves the web console of every namespace under
// console.Prefix, each with its own sessions and sign-in (its
// namespace's keys):
//
//	/$console/…             the namespace the Host header selects: the
//	                        default one here; another one is redirected
//	                        to its own path below
//	/$console/ns/NAME/…     namespace NAME (the default one without a
//	                        name is "$default"), whatever the Host
//
// The consoles of the paths below are made on first use and closed (their
// bulk jobs cancelled and waited for) when their namespace is deleted or
// the server shuts down. With several namespaces the header's switcher
// lists the ones the signed-in principal may manage (switcher).
type consoles struct {
	reg      *nsRegistry
	root     *console.Console // the default namespace's, at console.Prefix
	metrics  *metrics.Metrics
	httpAddr net.Addr
	o        Options
	log      *slog.Logger

	mu     sync.Mutex
	closed bool
	byNS   map[*namespace]*console.Console
}

// nsRef is a namespace's name in console paths.
func nsRef(n *namespace) string {
	if n.name == "" {
		return "$default"
	}
	return n.name
}

// nsConsolePrefix is where a namespace's own console is served.
func nsConsolePrefix(n *namespace) string {
	return console.Prefix + "ns/" + url.PathEscape(nsRef(n)) + "/"
}

// byRef is the namespace a console path names, nil for none.
func (r *nsRegistry) byRef(ref string) *namespace {
	if ref == "$default" {
		if r.def.name == "" {
			return r.def
		}
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[strings.ToLower(ref)]
}

// options are the console options of namespace n served at prefix
// ("" for console.Prefix).
func (cs *consoles) options(n *namespace, prefix string) console.Options {
	label := ""
	if cs.reg.labelled {
		label = nsLabel(n.name)
	}
	o := console.Options{Broker: n.broker, Auth: n.auth, Clock: cs.o.Clock, Prefix: prefix, TestClock: n.testClk, Faults: n.faults,
		AutoSignIn: consoleAutoSignIn(n.auth, cs.httpAddr), Totals: consoleTotals(cs.metrics, label),
		Logger: cs.log.With("component", "console", "namespace", nsLabel(n.name))}
	if cs.reg.multi() {
		o.Namespace = nsLabel(n.name)
		o.Switcher = cs.switcher(n)
	}
	return o
}

func (cs *consoles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, console.Prefix)
	after, ok := strings.CutPrefix(rest, "ns/")
	if !ok || !cs.reg.multi() {
		n := cs.reg.byHost(r.Host)
		if n == nil || n == cs.reg.def {
			cs.root.ServeHTTP(w, r)
			return
		}
		cs.redirect(w, r, nsConsolePrefix(n)+rest)
		return
	}
	ref, tail, slash := strings.Cut(after, "/")
	n := cs.reg.byRef(ref)
	if n == nil {
		http.Error(w, fmt.Sprintf("This broker has no namespace %q.", ref), http.StatusNotFound)
		return
	}
	if !slash || ref != nsRef(n) {
		cs.redirect(w, r, nsConsolePrefix(n)+tail)
		return
	}
	c, err := cs.forNamespace(n)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	c.ServeHTTP(w, r)
}

// redirect sends the browser to path with the request's query: a GET
// stays a GET, a POST stays a POST.
func (cs *consoles) redirect(w http.ResponseWriter, r *http.Request, path string) {
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	code := http.StatusFound
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		code = http.StatusTemporaryRedirect
	}
	http.Redirect(w, r, path, code)
}

// forNamespace is namespace n's console at its own path, made on first
// use.
func (cs *consoles) forNamespace(n *namespace) (*console.Console, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := cs.byNS[n]; c != nil {
		return c, nil
	}
	if cs.closed || n.noConsole {
		return nil, errors.New("the namespace's console is closed: the broker is shutting down or the namespace was deleted")
	}
	c, err := console.New(cs.options(n, nsConsolePrefix(n)))
	if err != nil {
		return nil, err
	}
	cs.byNS[n] = c
	return c, nil
}

// drop closes the console of a namespace being deleted, waiting for its
// bulk jobs; its broker is still open.
func (cs *consoles) drop(n *namespace) {
	cs.mu.Lock()
	c := cs.byNS[n]
	delete(cs.byNS, n)
	n.noConsole = true
	cs.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// close closes every console, waiting for their bulk jobs.
func (cs *consoles) close() {
	cs.mu.Lock()
	cs.closed = true
	all := make([]*console.Console, 0, len(cs.byNS)+1)
	for _, c := range cs.byNS {
		all = append(all, c)
	}
	cs.byNS = map[*namespace]*console.Console{}
	cs.mu.Unlock()
	if cs.root != nil {
		all = append(all, cs.root)
	}
	for _, c := range all {
		c.Close()
	}
}

// switcher lists, for the console of namespace cur, the namespaces a
// request signed in with grant g may switch to: cur itself; every one
// for a principal managing the whole default namespace (the broker's
// operator, who may list and delete them: /$namespaces); and every one
// whose console signs a browser on loopback in automatically with
// Manage (the development key). Nothing when that leaves only cur.
func (cs *consoles) switcher(cur *namespace) func(*http.Request, auth.Grant) []console.NamespaceLink {
	return func(r *http.Request, g auth.Grant) []console.NamespaceLink {
		operator := cur == cs.reg.def && g.Rights.Has(auth.Manage) && g.Resource == ""
		loopback := console.IsLoopback(r.RemoteAddr)
		hostDefault := cs.reg.byHost(r.Host) == nil
		var out []console.NamespaceLink
		for _, n := range cs.reg.list() {
			visible := n == cur || operator
			if !visible && loopback {
				a := consoleAutoSignIn(n.auth, cs.httpAddr)
				visible = a != nil && a.Rights.Has(auth.Manage)
			}
			if !visible {
				continue
			}
			href := nsConsolePrefix(n)
			if n == cs.reg.def && hostDefault {
				href = console.Prefix
			}
			out = append(out, console.NamespaceLink{Name: nsLabel(n.name), Href: href, Origin: n.origin(), Current: n == cur})
		}
		if len(out) < 2 {
			return nil
		}
		return out
	}
}
