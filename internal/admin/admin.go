package admin

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/faults"
)

// Options configure a Handler.
type Options struct {
	// Broker is the queue engine. Required.
	Broker *broker.Broker
	// Auth validates the token of every request — a SAS token, or an
	// Entra ID JWT as "Bearer <jwt>" or bare — (Manage rights required)
	// and the supplementary tokens for forwarding targets. Required.
	Auth *auth.Authenticator
	// Namespace is the namespace name in entries' <author> and in
	// $namespaceinfo. Default "busbar".
	Namespace string
	// Clock tells the time for error timestamps and the namespace's
	// creation time; nil is the wall clock.
	Clock clock.Clock
	// Logger receives failed requests (each with the tracking id the
	// client sees); nil discards them.
	Logger *slog.Logger
	// Observer is told of every failed request (metrics); nil tells no
	// one.
	Observer Observer
	// Faults is the fault injector /$faults manages (faults.go); nil: the
	// endpoint answers 404.
	Faults *faults.Set
	// TestClock is the broker's test clock /$time moves (testclock.go);
	// nil: the endpoint answers 404.
	TestClock *clock.Test
	// Namespaces, set on the default namespace's Handler, lists and
	// deletes the server's namespaces (/$namespaces, namespaces.go);
	// nil: the endpoint answers 404.
	Namespaces NamespaceManager
}

// Observer is told of failed requests: the request's path and the HTTP
// status it was answered with (cond is always empty here; the AMQP
// endpoint's observer has the same method).
type Observer interface {
	RequestFailed(path, cond string, status int32)
}

// Handler serves the management API (see the package documentation for
// its URL space). Its exported methods other than ServeHTTP are the data
// functions the endpoints wrap. It is safe for concurrent use.
type Handler struct {
	broker     *broker.Broker
	auth       *auth.Authenticator
	namespace  string
	clock      clock.Clock
	log        *slog.Logger
	obs        Observer      // nil: none
	started    time.Time     // the namespace's CreatedTime and ModifiedTime
	waiters    *waiters      // the data plane's waiting receives (dataplane.go)
	dataSpools chan struct{} // the data plane's large sends in progress (dpstream.go)
	faults     *faults.Set
	testClock  *clock.Test
	namespaces NamespaceManager        // nil: /$namespaces answers 404
	cluster    atomic.Pointer[Cluster] // nil: not a cluster node (cluster.go)
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler for o.
func New(o Options) (*Handler, error) {
	if o.Broker == nil {
		return nil, errors.New("admin: Options.Broker is required")
	}
	if o.Auth == nil {
		return nil, errors.New("admin: Options.Auth is required")
	}
	h := &Handler{broker: o.Broker, auth: o.Auth, namespace: o.Namespace, clock: o.Clock, log: o.Logger, obs: o.Observer, waiters: newWaiters(), dataSpools: make(chan struct{}, maxDataSpools), faults: o.Faults, testClock: o.TestClock, namespaces: o.Namespaces}
	if h.namespace == "" {
		h.namespace = "busbar"
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.started = h.clock.Now().UTC()
	return h, nil
}

// request is one HTTP request on its way through the handler.
type request struct {
	r     *http.Request
	path  string // decoded, without leading and trailing '/'
	res   resource
	grant auth.Grant // what the Authorization header's token grants
	site  *site
	// entityID is the id a creating PUT creates its queue or topic
	// with on a cluster node (cluster.go, place); 0 allocates one.
	entityID uint64
}

// reply is an endpoint's answer.
type reply struct {
	status      int
	contentType string // empty for an empty body
	body        []byte
	header      http.Header // more response headers (the data plane's); nil if none
	// stream, if set, is the body instead of body: streamLen bytes read
	// from it as they are written (a large message's payload, from the
	// store). ServeHTTP closes it, whatever happens.
	stream    io.ReadCloser
	streamLen int64
	// passthrough, if set, is the whole answer: another node's, to a
	// forwarded request (cluster.go).
	passthrough *http.Response
}

// site is what rendering needs to know of the request: how the client
// reached the namespace, and when.
type site struct {
	scheme     string // http or https, as the request came in
	host       string // the request's Host: host[:port]
	apiVersion string // echoed into ids and links; empty if not sent
	namespace  string
	now        time.Time
}

// url is the absolute URL of a namespace-relative path (its segments
// escaped here), with query (raw, already escaped) and api-version as its
// query.
func (s *site) url(path, query string) string {
	u := s.scheme + "://" + s.host + "/" + escapePath(path)
	if s.apiVersion != "" {
		if query != "" {
			query += "&"
		}
		query += "api-version=" + url.QueryEscape(s.apiVersion)
	}
	if query != "" {
		u += "?" + query
	}
	return u
}

// escapePath percent-escapes each segment of a path that needs it (names
// may hold spaces and other characters a URL cannot carry as they are);
// '$' stays as it is, so $Resources and $Default read as the service
// writes them. A "." or ".." segment (names from before the naming rule)
// is written %2E or %2E%2E, so that no client resolves it to another path.
func escapePath(path string) string {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		switch seg {
		case ".", "..":
			segs[i] = strings.Repeat("%2E", len(seg))
		default:
			segs[i] = url.PathEscape(seg)
		}
	}
	return strings.Join(segs, "/")
}

// forwardURI is how a forwarding target is written back: the absolute
// sb:// URI the service stores (§1.13). Empty stays empty.
func (s *site) forwardURI(entity, addr string) string {
	if entity == "" {
		return ""
	}
	if addr != "" && strings.EqualFold(config.ForwardEntityName(addr), entity) {
		return addr // as the client wrote it
	}
	return "sb://" + s.host + "/" + entity
}

func (s *site) entry(status int, m entryMeta, content func(*xmlWriter)) *reply {
	var w xmlWriter
	writeEntry(&w, true, m, content)
	return &reply{status: status, contentType: contentTypeEntry, body: w.bytes()}
}

// ServeHTTP authenticates the request, routes it to its endpoint and
// writes the endpoint's reply, or the error.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rq := h.newRequest(r)
	rep, err := h.serve(rq)
	if err != nil {
		h.writeError(w, rq, err)
		return
	}
	if rep.passthrough != nil {
		writePassthrough(w, rep.passthrough)
		return
	}
	if rep.stream != nil {
		defer rep.stream.Close()
	}
	for k, v := range rep.header {
		w.Header()[k] = v
	}
	if rep.contentType != "" {
		w.Header().Set("Content-Type", rep.contentType)
	}
	if rep.stream != nil {
		w.Header().Set("Content-Length", strconv.FormatInt(rep.streamLen, 10))
		w.WriteHeader(rep.status)
		// A read error past the header can only cut the response short
		// (the client sees fewer bytes than Content-Length says).
		_, _ = io.Copy(w, io.LimitReader(rep.stream, rep.streamLen))
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(rep.body)))
	w.WriteHeader(rep.status)
	_, _ = w.Write(rep.body)
}

// Protect puts next (GET /metrics) behind the API's own check: a SAS token
// granting Manage in the Authorization header, a failure answered as the
// API answers it (401 with an <Error> body).
func (h *Handler) Protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := h.newRequest(r)
		if err := h.authorize(rq); err != nil {
			h.writeError(w, rq, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// WriteError answers r with err as the API answers its own failures (the
// status httpStatus maps it to, with an <Error> body): for a server that
// fails a request before it reaches the handler, such as choosing its
// namespace.
func (h *Handler) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	h.writeError(w, h.newRequest(r), err)
}

func (h *Handler) newRequest(r *http.Request) *request {
	rq := &request{
		r:    r,
		path: strings.Trim(r.URL.Path, "/"),
		site: &site{
			scheme:     "http",
			host:       r.Host,
			apiVersion: queryParam(r.URL.Query(), "api-version"),
			namespace:  h.namespace,
			now:        h.clock.Now().UTC(),
		},
	}
	if r.TLS != nil {
		rq.site.scheme = "https"
	}
	if rq.site.host == "" { // HTTP/1.0 without a Host header
		rq.site.host = h.namespace
	}
	return rq
}

// authorize checks the request's token: valid, and granting Manage. (The
// admin API's own requests check Manage after parsing the resource, as
// Azure answers "not found" before "unauthorized": see serve.)
func (h *Handler) authorize(rq *request) error {
	g, err := h.authenticate(rq, rq.path)
	if err != nil {
		return err
	}
	if !g.Rights.Has(auth.Manage) {
		return errorf(http.StatusUnauthorized, "Unauthorized access. 'Manage' claim(s) are required to perform this operation; the key '%s' grants %s.", g.KeyName, g.Rights)
	}
	rq.grant = g
	return nil
}

func (h *Handler) serve(rq *request) (*reply, error) {
	if dr, ok := parseDataPath(rq.r.Method, rq.path); ok {
		return h.serveData(rq, dr) // dataplane.go
	}
	g, err := h.authenticate(rq, rq.path)
	if err != nil {
		return nil, err
	}
	if rq.res, err = parseResource(rq.path); err != nil {
		return nil, err
	}
	if !g.Rights.Has(auth.Manage) {
		return nil, h.withoutManage(rq) // not found, or Azure's text for the operation
	}
	rq.grant = g
	methods := routes[rq.res.kind]
	ep := methods[rq.r.Method]
	if ep == nil {
		return nil, methodNotAllowed(rq.r.Method, rq.path, methods)
	}
	if unitScoped(rq.res.kind) {
		if rep, ok, err := h.forward(rq, unitOf(rq.res.entity)); ok {
			return rep, err
		}
	}
	if creating(rq) {
		if rep, ok, err := h.place(rq); ok {
			return rep, err
		}
	}
	return ep(h, rq)
}

// authorizeForwarding checks that the client may forward to target (an
// entity path; empty means no forwarding): its token must grant Send on
// the target, or the supplementary header (ServiceBusSupplementaryAuthorization,
// ServiceBusDlqSupplementaryAuthorization) must carry one that does (§1.4).
// The SDKs sign that second token for different resources (the target,
// the namespace host), all of which cover the target.
func (h *Handler) authorizeForwarding(rq *request, target, header string) error {
	if target == "" || (rq.grant.Rights.Has(auth.Send) && rq.grant.Covers(target)) {
		return nil
	}
	tok := rq.r.Header.Get(header)
	if tok == "" {
		return errorf(http.StatusUnauthorized, "Forwarding to '%s' requires Send rights on it: the request's token does not grant them, and it has no %s header.", target, header)
	}
	g, err := h.auth.AuthenticateHeader(rq.r.Context(), tok, target, rq.r.Host)
	if err != nil {
		var ae *auth.Error
		if errors.As(err, &ae) {
			return errorf(http.StatusUnauthorized, "%s: %s", header, ae.Msg)
		}
		return err
	}
	if !g.Rights.Has(auth.Send) {
		return errorf(http.StatusUnauthorized, "%s: the key '%s' grants %s, not the Send rights forwarding to '%s' requires.", header, g.KeyName, g.Rights, target)
	}
	return nil
}

// writeError writes err as the service does (§1.5): the status from
// httpStatus and <Error><Code>…</Code><Detail>…</Detail></Error>, the detail
// ending in a tracking id that is also logged.
func (h *Handler) writeError(w http.ResponseWriter, rq *request, err error) {
	status, subCode, msg := httpStatus(err)
	if h.obs != nil {
		h.obs.RequestFailed(rq.path, "", int32(status))
	}
	tracking := uuid.NewString()
	detail := msg
	if subCode != 0 {
		detail = fmt.Sprintf("SubCode=%d. %s", subCode, msg)
	}
	detail += fmt.Sprintf(" TrackingId:%s, SystemTracker:%s:%s, Timestamp:%s",
		tracking, rq.site.host, rq.path, rq.site.now.Format("2006-01-02T15:04:05"))

	// One line per failure: client mistakes at info, the broker's own
	// failures at error (the AMQP side does the same).
	level := slog.LevelInfo
	if status >= http.StatusInternalServerError {
		level = slog.LevelError
	}
	h.log.Log(rq.r.Context(), level, "management request failed",
		"method", rq.r.Method, "path", rq.path, "status", status, "trackingId", tracking, "err", err)

	var xw xmlWriter
	xw.open("Error")
	xw.int("Code", int64(status))
	xw.text("Detail", detail)
	xw.close("Error")
	var ae *Error
	if errors.As(err, &ae) && ae.Allow != "" {
		w.Header().Set("Allow", ae.Allow)
	}
	var ue *UnavailableError
	if errors.As(err, &ue) {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	w.Header().Set("Content-Type", contentTypeError)
	w.Header().Set("Content-Length", strconv.Itoa(len(xw.bytes())))
	w.WriteHeader(status)
	_, _ = w.Write(xw.bytes())
}

// queryParam returns the first value of a query parameter, its name
// matched exactly, else case-insensitively; "" if absent. (The URL parser
// has already decoded %24skip to $skip.)
func queryParam(q url.Values, name string) string {
	if v, ok := q[name]; ok && len(v) > 0 {
		return v[0]
	}
	for k, v := range q {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// readBody parses a request body as XML, at most maxBodyBytes of it.
func readBody(r io.ReadCloser) (*element, error) {
	return parseXML(http.MaxBytesReader(nil, r, maxBodyBytes))
}
