// Package console is Busbar's web console: server-rendered HTML pages
// (html/template, assets embedded, no JavaScript needed, no external
// network) served under Prefix on the HTTP and HTTPS listeners. "$" is not
// a character an entity name can have, so the prefix never collides with
// the admin API's entity paths.
//
// Pages: the namespace overview (every queue, topic and subscription with
// its counts; create, edit, delete), an entity's messages (inspect any
// sub-queue by state, sequence number and property or body text; message
// detail; send; purge with confirmation), dead-letter triage (grouped by
// reason; resubmit or delete chosen messages or all that match, as a
// background job with progress), a subscription's rules and the rule
// tester, sessions (list, state), and the scheduled timeline. With the
// testing tools on, Manage rights also get a Time page (Options.TestClock:
// show, advance and set the test clock) and a Faults page (Options.Faults:
// list, add and clear fault rules), tools.go.
//
// # Sign-in and rights
//
// The console signs in with a shared access policy's key name and key, or
// a SAS token, checked by the namespace's auth.Authenticator. What it
// keeps is the grant (key name, rights, the resource it covers, expiry)
// in a server-side session, never the key or the token: the browser holds
// only a random session id in an HttpOnly, SameSite=Strict cookie scoped
// to Prefix. Rights are enforced per request: Listen to look, Send to send,
// Manage to change anything; a token for one entity sees only that entity.
// With Options.AutoSignIn (the server sets it when the HTTP listener is on
// loopback and the well-known development key is in use) a browser on
// loopback opens signed in with that key's rights.
//
//	browser ──GET /$console/login──► form
//	        ──POST key name + key──► Authenticate(token minted for "")
//	        ◄──Set-Cookie: busbar_console=<32 random bytes, base64>──
//	every POST carries the session's CSRF token (hidden field), checked
//	in constant time, and an Origin, if sent, naming the request's host.
//
// Sessions are bounded (maxSessions; the oldest goes first) and expire
// with the grant or after sessionTTL. Keys, tokens and cookies never
// appear in URLs or logs: every form posts, and the log carries the key
// name only.
//
// # Namespaces
//
// A Console shows one namespace (Options.Broker, Auth). A server with
// several runs one per namespace, each under its own Options.Prefix below
// Prefix (its pages link there; its cookie, busbar_console_ns, is scoped
// there, so each namespace's sessions are its own), and fills the header's
// switcher with Options.Switcher.
//
// # Background work
//
// Bulk dead-letter jobs (jobs.go) run in goroutines owned by the Console:
// at most maxRunningJobs at a time, each cancellable from the page and by
// Close, which waits for them. Each step is one broker call that is atomic
// on its own (broker.Resubmit, broker.RemoveMessages), so an interrupted
// job leaves every message in exactly one place.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/faults"
)

// Prefix is where the console is served.
const Prefix = "/$console/"

const (
	cookieName  = "busbar_console"    // the console at Prefix
	nsCookie    = "busbar_console_ns" // a console under Prefix (Options.Prefix)
	maxSessions = 1024
	sessionTTL  = 8 * time.Hour
	maxForm     = 2 << 20 // request body bytes (a test message's body included)
)

//go:embed templates/*.html static/*
var assets embed.FS

// Options configure a Console.
type Options struct {
	Broker *broker.Broker
	Auth   *auth.Authenticator
	// AutoSignIn, when set, opens the console signed in with this grant
	// (the well-known development policy's) for browsers on loopback.
	AutoSignIn *auth.Grant
	// Totals, when set, reads each entity's message counters (by queue
	// name or subscription path) for the overview's rates.
	Totals func() map[string]Totals
	Clock  clock.Clock  // nil: the wall clock
	Logger *slog.Logger // nil: discard

	// Prefix is where this console is served, a path under Prefix ending
	// in "/" ("/$console/ns/orders/"); "" is Prefix. Its pages link
	// there, and its session cookie is scoped there.
	Prefix string
	// Namespace is the name of the namespace shown, for the header; ""
	// shows none.
	Namespace string
	// TestClock is the namespace's test clock (--test-clock): the Time
	// page moves it. nil: no Time page.
	TestClock *clock.Test
	// Faults is the namespace's fault injector (--faults): the Faults
	// page manages its rules. nil: no Faults page.
	Faults *faults.Set

	// Switcher, when set, lists the namespaces the header offers to
	// switch to, for a request signed in with grant g.
	Switcher func(r *http.Request, g auth.Grant) []NamespaceLink
}

// NamespaceLink is one namespace in the header's switcher.
type NamespaceLink struct {
	Name    string
	Href    string // its console
	Origin  string // "config" or "key-name"
	Current bool
}

// Console is the web console's http.Handler.
type Console struct {
	b     *broker.Broker
	auth  *auth.Authenticator
	auto  *auth.Grant
	clk   clock.Clock
	log   *slog.Logger
	pages map[string]*template.Template
	mux   *http.ServeMux
	jobs  *jobs

	totals func() map[string]Totals
	rates  rates

	prefix    string
	cookie    string
	namespace string
	switcher  func(*http.Request, auth.Grant) []NamespaceLink
	testClock *clock.Test // nil: no Time page (tools.go)
	faults    *faults.Set // nil: no Faults page (tools.go)

	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	id      string
	csrf    string
	grant   auth.Grant
	auto    bool
	created time.Time
	expires time.Time
	flash   string
}

// New returns a Console.
func New(o Options) (*Console, error) {
	if o.Broker == nil || o.Auth == nil {
		return nil, errors.New("console: Broker and Auth are required")
	}
	c := &Console{b: o.Broker, auth: o.Auth, auto: o.AutoSignIn, clk: o.Clock, log: o.Logger, totals: o.Totals,
		sessions: make(map[string]*session), prefix: Prefix, cookie: cookieName, namespace: o.Namespace, switcher: o.Switcher,
		testClock: o.TestClock, faults: o.Faults}
	if o.Prefix != "" && o.Prefix != Prefix {
		if !strings.HasPrefix(o.Prefix, Prefix) || !strings.HasSuffix(o.Prefix, "/") {
			return nil, fmt.Errorf("console: Prefix %q is not a path under %s ending in /", o.Prefix, Prefix)
		}
		c.prefix, c.cookie = o.Prefix, nsCookie
	}
	if c.clk == nil {
		c.clk = clock.Real{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.jobs = newJobs(c)
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// Close cancels the running bulk jobs and waits for them.
func (c *Console) Close() { c.jobs.close() }

func (c *Console) parseTemplates() error {
	c.pages = make(map[string]*template.Template)
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).Funcs(template.FuncMap{"base": func() string { return c.prefix }}).ParseFS(assets, "templates/layout.html", n)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", n, err)
		}
		c.pages[base] = t
	}
	return nil
}

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // "no-referrer" would make POSTs carry "Origin: null"
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

func newID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sessionOf returns r's session, nil if it has none (or it expired). On
// loopback with AutoSignIn it makes one.
func (c *Console) sessionOf(w http.ResponseWriter, r *http.Request) *session {
	now := c.clk.Now()
	if ck, err := r.Cookie(c.cookie); err == nil {
		c.mu.Lock()
		s := c.sessions[ck.Value]
		if s != nil && !now.Before(s.expires) {
			delete(c.sessions, s.id)
			s = nil
		}
		c.mu.Unlock()
		if s != nil {
			return s
		}
	}
	if c.auto != nil && IsLoopback(r.RemoteAddr) {
		return c.newSession(w, r, *c.auto, true)
	}
	return nil
}

// IsLoopback reports whether remote (an http.Request's RemoteAddr, or a
// bare host) is a loopback address: auto sign-in is offered only there.
func IsLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Console) newSession(w http.ResponseWriter, r *http.Request, g auth.Grant, auto bool) *session {
	now := c.clk.Now()
	s := &session{id: newID(), csrf: newID(), grant: g, auto: auto, created: now, expires: now.Add(sessionTTL)}
	if !g.ExpiresAt.IsZero() && g.ExpiresAt.Before(s.expires) {
		s.expires = g.ExpiresAt
	}
	c.mu.Lock()
	if len(c.sessions) >= maxSessions {
		var oldest *session
		for _, o := range c.sessions {
			if oldest == nil || o.created.Before(oldest.created) {
				oldest = o
			}
		}
		delete(c.sessions, oldest.id)
	}
	c.sessions[s.id] = s
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: s.id, Path: c.prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}) // a browser-session cookie: the server ends it
	return s
}

func (c *Console) endSession(w http.ResponseWriter, s *session) {
	c.mu.Lock()
	delete(c.sessions, s.id)
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: c.cookie, Value: "", Path: c.prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

func (c *Console) setFlash(s *session, msg string) {
	c.mu.Lock()
	s.flash = msg
	c.mu.Unlock()
}

func (c *Console) takeFlash(s *session) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := s.flash
	s.flash = ""
	return f
}

func tokenEqual(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func urlQuery(s string) string { return url.QueryEscape(s) }

// sameOrigin refuses a cross-site POST: an Origin header, when sent, must
// name the request's host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return o == ""
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// signIn checks a key name and key, or a SAS token, and returns the grant.
// host is the host the browser connected to (the Host header): a key
// signs a token for the whole namespace there; a token must name it.
func (c *Console) signIn(ctx context.Context, host, keyName, key, token string) (auth.Grant, error) {
	if token == "" {
		if keyName == "" || key == "" {
			return auth.Grant{}, errors.New("enter a key name and a key, or a SAS token")
		}
		token = auth.NewToken(keyName, key, "sb://"+host+"/", c.clk.Now().Add(sessionTTL))
	}
	audience := ""
	if t, err := auth.ParseToken(strings.TrimSpace(token)); err == nil {
		audience = t.Resource
	}
	g, err := c.auth.Authenticate(ctx, auth.Presented{Token: strings.TrimSpace(token), Audience: audience, Host: host})
	if err != nil {
		var ae *auth.Error
		if errors.As(err, &ae) {
			return auth.Grant{}, errors.New(ae.Msg)
		}
		return auth.Grant{}, err
	}
	return g, nil
}
