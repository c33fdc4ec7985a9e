package admin

// A Handler on a cluster node (docs/cluster.md) answers for every unit
// of the cluster, not only the ones its broker serves:
//
//   - a request scoped to one queue or topic (the entity, its
//     subscriptions and rules, its $history, the REST data plane on it)
//     whose unit another node serves is authenticated here and then
//     forwarded to that node (Cluster.Forward), which runs it with the
//     principal authenticated here and answers; its answer goes back to
//     the client unchanged;
//   - the queue and topic lists merge this broker's entities with the
//     ones each other node serves, asked of those nodes (a "local list",
//     below), so that every entry carries its owner's runtime counts.
//
// A forwarded request reaches the owner's Handler with its principal in
// the request's context (WithPrincipal), which only the internal
// listener sets. Such a request is never forwarded again: when the unit
// is not served by this node (it moved), the answer is 421 Misdirected
// Request, on which the gateway asks for the owner again and retries
// once. A request that could not be answered by an owner (the unit is
// moving, the owner cannot be reached) is 503 with Retry-After
// (UnavailableError, mapped in httpStatus).
//
// A queue or topic is created on the node placement gives it, so that it
// does not move right after its creation: the node a creating PUT (no
// If-Match, a name no node serves) reaches allocates the entity id from
// the catalog (Cluster.Place) and, when placement gives that id to
// another node, forwards the PUT to that node with the id in
// EntityIDHeader; that node creates the entity with that id. When the
// chosen node cannot be reached, this node creates it with the id itself
// and hands it off later. The header is honoured on forwarded requests
// only (a client's is dropped).
//
// A local list is GET $Resources/Queues or $Resources/Topics with the
// LocalListHeader, from another node: the answer is JSON,
//
//	{"units":   [the NameKey of every queue and topic this broker serves],
//	 "entries": [{"name": "...", "xml": "<entry>…</entry>"}, …]}
//
// with the first $top entries of the kind asked for, in list order and
// without the page-size cap (the gateway pages the merged list). A unit
// of the catalog that its node does not list as served is moving (as is
// one no node holds, or whose node did not answer): the gateway asks the
// catalog and the nodes again, a little later each time, until every
// unit is listed by a node or Cluster.MoveWait has passed; only then is
// the list 503, rather than silently short or with made-up counts. A
// waiting list holds its request and nothing else: the answers gathered
// are dropped before each wait.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// Cluster is how a Handler on a cluster node reaches the units other
// nodes serve. Implementations are safe for concurrent use.
type Cluster interface {
	// Remote reports whether the queue or topic named unit is served by
	// another node (or by none at the moment, being moved): false when
	// this node serves it or no unit has that name. An error means the
	// catalog could not be read.
	Remote(ctx context.Context, unit string) (bool, error)
	// Forward sends r to the node serving unit, on behalf of g, and
	// returns its answer, whose body the caller closes. An error means
	// no node answered.
	Forward(ctx context.Context, unit string, r *http.Request, g auth.Grant) (*http.Response, error)
	// Units lists the catalog's units this node does not serve, each
	// with the node serving it ("" while none does).
	Units(ctx context.Context) ([]RemoteUnit, error)
	// ForwardNode sends r to node, as Forward does.
	ForwardNode(ctx context.Context, node string, r *http.Request, g auth.Grant) (*http.Response, error)
	// Place allocates the entity id of a new queue or topic and names
	// the node placement gives it, "" for this node. An error means the
	// catalog could not be read.
	Place(ctx context.Context) (id uint64, node string, err error)
	// MoveWait is how long a queue or topic list waits for the units
	// that are moving to be served again (--cluster-park) before it
	// answers 503.
	MoveWait() time.Duration
}

// EntityIDHeader carries, on a creating PUT forwarded to the node
// placement chose, the entity id the forwarding node allocated.
const EntityIDHeader = "Busbar-Entity-Id"

// RemoteUnit is a unit another node serves.
type RemoteUnit struct {
	Name string // its queue's or topic's name, lower-case
	Node string // the node serving it; "" while none does
}

// LocalListHeader asks a node, on the internal listener, for its local
// list (see above).
const LocalListHeader = "Busbar-Local-List"

// maxLocalList bounds a local list's answer as read by the gateway.
const maxLocalList = 256 << 20

// SetCluster makes h answer for the units other nodes serve through c.
func (h *Handler) SetCluster(c Cluster) { h.cluster.Store(&c) }

// clusterOf is the Cluster set, nil if none.
func (h *Handler) clusterOf() Cluster {
	if c := h.cluster.Load(); c != nil {
		return *c
	}
	return nil
}

type principalKey struct{}

// WithPrincipal marks a request forwarded by another cluster node, whose
// principal (authenticated by that node) is g: h runs it without
// authenticating it again and never forwards it. Only the internal
// listener's handler may call it.
func WithPrincipal(ctx context.Context, g auth.Grant) context.Context {
	return context.WithValue(ctx, principalKey{}, g)
}

func principalOf(ctx context.Context) (auth.Grant, bool) {
	g, ok := ctx.Value(principalKey{}).(auth.Grant)
	return g, ok
}

// authenticate returns the grant of rq's token for resource, or the
// principal a forwarding node authenticated.
func (h *Handler) authenticate(rq *request, resource string) (auth.Grant, error) {
	if g, ok := principalOf(rq.r.Context()); ok {
		return g, nil
	}
	return h.auth.AuthenticateHeader(rq.r.Context(), rq.r.Header.Get("Authorization"), resource, rq.r.Host)
}

// UnavailableError is a request for a unit of another node that no node
// answered: the unit is moving, or its node cannot be reached. It is 503
// with Retry-After.
type UnavailableError struct {
	Unit string
	Err  error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("The node serving '%s' cannot answer at the moment (%v); try again.", e.Unit, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// retryAfterSeconds is the Retry-After of an UnavailableError: about the
// time a unit takes to move.
const retryAfterSeconds = 1

// notOwner is the 421 of a forwarded request for a unit this node does
// not serve.
func notOwner(unit string) *Error {
	return errorf(http.StatusMisdirectedRequest, "This node does not serve '%s'.", unit)
}

// unitOf is the queue or topic an entity path belongs to.
func unitOf(entity string) string {
	p, err := broker.ParsePath(entity)
	if err != nil {
		return entity
	}
	return p.Entity
}

// unitScoped reports whether requests for resources of kind belong to
// one queue or topic.
func unitScoped(kind resourceKind) bool {
	switch kind {
	case resEntity, resSubscriptions, resSubscription, resRules, resRule, resHistory:
		return true
	}
	return false
}

// forward answers rq on the node serving unit, when that is another
// node: ok false means this node answers it. A forwarded request that is
// for a unit this node does not serve is refused 421.
func (h *Handler) forward(rq *request, unit string) (rep *reply, ok bool, err error) {
	cl := h.clusterOf()
	if cl == nil || unit == "" {
		return nil, false, nil
	}
	ctx := rq.r.Context()
	remote, err := cl.Remote(ctx, unit)
	if err != nil {
		return nil, true, &UnavailableError{Unit: unit, Err: err}
	}
	if !remote {
		return nil, false, nil
	}
	if _, trusted := principalOf(ctx); trusted {
		return nil, true, notOwner(unit)
	}
	resp, err := cl.Forward(ctx, unit, rq.r, rq.grant)
	if err != nil {
		return nil, true, &UnavailableError{Unit: unit, Err: err}
	}
	return &reply{passthrough: resp}, true, nil
}

// creating tells whether rq creates a queue or topic (a PUT of an entity
// without If-Match).
func creating(rq *request) bool {
	return rq.res.kind == resEntity && rq.r.Method == http.MethodPut && rq.r.Header.Get("If-Match") == ""
}

// place creates rq's queue or topic on the node placement gives it (see
// above): ok true when another node answered. Otherwise rq.entityID is
// the id to create it with here (0: allocate one).
func (h *Handler) place(rq *request) (rep *reply, ok bool, err error) {
	ctx := rq.r.Context()
	if _, trusted := principalOf(ctx); trusted {
		if v := rq.r.Header.Get(EntityIDHeader); v != "" {
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil || id == 0 {
				return nil, true, badRequest("%s: %q is not an entity id.", EntityIDHeader, v)
			}
			rq.entityID = id
		}
		return nil, false, nil
	}
	rq.r.Header.Del(EntityIDHeader)
	cl := h.clusterOf()
	if cl == nil {
		return nil, false, nil
	}
	if _, here := h.broker.EntityStoreID(unitOf(rq.res.entity)); here {
		return nil, false, nil // a conflict, answered here
	}
	// The body is read first: it goes to the chosen node, or is
	// parsed here if that node cannot be reached.
	body, err := io.ReadAll(io.LimitReader(rq.r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, true, badRequest("Reading the request body: %v", err)
	}
	rq.r.Body.Close()
	setBody := func() {
		rq.r.Body = io.NopCloser(bytes.NewReader(body))
		rq.r.ContentLength = int64(len(body))
	}
	setBody()
	if len(body) > maxBodyBytes {
		return nil, false, nil // refused as too large here
	}
	id, node, err := cl.Place(ctx)
	if err != nil {
		return nil, true, &UnavailableError{Unit: unitOf(rq.res.entity), Err: err}
	}
	rq.entityID = id
	if node == "" {
		return nil, false, nil
	}
	out := rq.r.Clone(ctx)
	out.Header.Set(EntityIDHeader, strconv.FormatUint(id, 10))
	resp, err := cl.ForwardNode(ctx, node, out, rq.grant)
	if err != nil {
		h.log.Warn("the node placement chose for a new entity did not answer; creating it here",
			"entity", rq.res.entity, "node", node, "err", err)
		setBody()
		return nil, false, nil
	}
	return &reply{passthrough: resp}, true, nil
}

// listed is one entry of a list, rendered.
type listed struct {
	Name string `json:"name"`
	XML  string `json:"xml"`
}

// localList is the JSON answer to a local list.
type localList struct {
	Units   []string `json:"units"`
	Entries []listed `json:"entries"`
}

// listEntries renders this broker's entities of kind ("Queues" or
// "Topics") as list entries, in list order: the first n of them (all
// with n < 0).
func (h *Handler) listEntries(kind string, s *site, skip, n int) []listed {
	var out []listed
	if kind == "Queues" {
		infos := h.broker.ListQueues()
		infos = infos[min(skip, len(infos)):]
		if n >= 0 {
			infos = infos[:min(n, len(infos))]
		}
		for _, info := range infos {
			var w xmlWriter
			queueEntry(&w, false, queueOf(info), s)
			out = append(out, listed{Name: info.Name, XML: string(w.bytes())})
		}
		return out
	}
	infos := h.broker.ListTopics()
	infos = infos[min(skip, len(infos)):]
	if n >= 0 {
		infos = infos[:min(n, len(infos))]
	}
	for _, info := range infos {
		var w xmlWriter
		topicEntry(&w, false, topicOf(info), s)
		out = append(out, listed{Name: info.Name, XML: string(w.bytes())})
	}
	return out
}

// listReply answers a list of kind on h: this broker's entities, and
// on a cluster node the other nodes' too; or a local list.
func (h *Handler) listReply(rq *request, kind string) (*reply, error) {
	o, err := listOptions(rq.r.URL.Query())
	if err != nil {
		return nil, err
	}
	if _, trusted := principalOf(rq.r.Context()); trusted && rq.r.Header.Get(LocalListHeader) != "" {
		ll := localList{Units: []string{}, Entries: h.listEntries(kind, rq.site, 0, max(o.Top, 0))}
		if ll.Entries == nil {
			ll.Entries = []listed{}
		}
		for _, q := range h.broker.ListQueues() {
			ll.Units = append(ll.Units, strings.ToLower(q.Name))
		}
		for _, t := range h.broker.ListTopics() {
			ll.Units = append(ll.Units, strings.ToLower(t.Name))
		}
		b, err := json.Marshal(ll)
		if err != nil {
			return nil, err
		}
		return &reply{status: http.StatusOK, contentType: "application/json", body: b}, nil
	}
	cl := h.clusterOf()
	if cl == nil {
		// One broker: render the page only.
		page := h.listEntries(kind, rq.site, max(o.Skip, 0), o.pageSize()+1)
		more := len(page) > o.pageSize()
		page = page[:min(len(page), o.pageSize())]
		return feedReply(rq.site, kind, "$Resources/"+kind, o, len(page), more, func(w *xmlWriter) {
			for _, e := range page {
				w.buf = append(w.buf, e.XML...)
			}
		}), nil
	}
	// Each node's first n entries hold the page and tell whether more
	// remain.
	// This broker's entries are rendered before and after the other
	// nodes': a unit that moved here or away while they answered is in
	// one of the three (the freshest first).
	n := min(max(o.Skip, 0), 1<<30) + o.pageSize() + 1
	entries, err := h.clusterEntries(rq, cl, kind, n)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(entries, func(a, b listed) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	// A unit that moved while the nodes answered is listed twice.
	entries = slices.CompactFunc(entries, func(a, b listed) bool { return strings.EqualFold(a.Name, b.Name) })
	page, more := pageOf(entries, o)
	return feedReply(rq.site, kind, "$Resources/"+kind, o, len(page), more, func(w *xmlWriter) {
		for _, e := range page {
			w.buf = append(w.buf, e.XML...)
		}
	}), nil
}

// Retry intervals of a list waiting for moving units: the first,
// doubled after each try up to the last.
const (
	listRetryFirst = 50 * time.Millisecond
	listRetryMax   = 500 * time.Millisecond
)

// clusterEntries is this broker's first n entries of kind and every
// other node's (remoteEntries), asked again while a unit is moving or its
// node does not answer (an UnavailableError), until cl.MoveWait has
// passed: then that error is the answer. Nothing is kept across a wait.
//
// This broker's entries are rendered before and after the other nodes':
// a unit that moved here or away while they answered is in one of the
// three (the freshest first; the caller keeps the first of a name).
func (h *Handler) clusterEntries(rq *request, cl Cluster, kind string, n int) ([]listed, error) {
	ctx := rq.r.Context()
	deadline := time.Now().Add(cl.MoveWait())
	wait := listRetryFirst
	for {
		before := h.listEntries(kind, rq.site, 0, n)
		remote, err := h.remoteEntries(rq, cl, kind, n)
		if err == nil {
			return append(append(h.listEntries(kind, rq.site, 0, n), remote...), before...), nil
		}
		var ue *UnavailableError
		left := time.Until(deadline)
		if !errors.As(err, &ue) || left <= 0 {
			return nil, err
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, listRetryMax)
	}
}

// remoteEntries asks every other node serving units for its first n
// entries of kind.
func (h *Handler) remoteEntries(rq *request, cl Cluster, kind string, n int) ([]listed, error) {
	ctx := rq.r.Context()
	units, err := cl.Units(ctx)
	if err != nil {
		return nil, &UnavailableError{Unit: "$Resources/" + kind, Err: err}
	}
	byNode := map[string][]string{}
	for _, u := range units {
		if u.Node == "" {
			return nil, &UnavailableError{Unit: u.Name, Err: fmt.Errorf("it is moving")}
		}
		byNode[u.Node] = append(byNode[u.Node], u.Name)
	}
	var out []listed
	for node, names := range byNode {
		q := url.Values{"$top": {strconv.Itoa(n)}}
		if rq.site.apiVersion != "" {
			q.Set("api-version", rq.site.apiVersion)
		}
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://node/$Resources/"+kind+"?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		r.Host = rq.r.Host
		r.Header.Set(LocalListHeader, "1")
		resp, err := cl.ForwardNode(ctx, node, r, rq.grant)
		if err != nil {
			return nil, &UnavailableError{Unit: names[0], Err: err}
		}
		var ll localList
		func() {
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("node %s answered %s", node, resp.Status)
				return
			}
			err = json.NewDecoder(io.LimitReader(resp.Body, maxLocalList)).Decode(&ll)
		}()
		if err != nil {
			return nil, &UnavailableError{Unit: names[0], Err: err}
		}
		for _, name := range names {
			if !slices.Contains(ll.Units, name) {
				return nil, &UnavailableError{Unit: name, Err: fmt.Errorf("it is moving from node %s", node)}
			}
		}
		out = append(out, ll.Entries...)
	}
	return out, nil
}

// writePassthrough writes a forwarded request's answer as the owner gave
// it.
func writePassthrough(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, v := range resp.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Trailer", "Upgrade":
			continue
		}
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	// A failure past the header can only cut the answer short.
	_, _ = io.Copy(w, resp.Body)
}
