package relay

// HTTP between nodes: the admin API and the REST data plane of a unit
// another node serves are forwarded to that node as HTTP requests over
// the internal listener (see the package doc, "HTTP between nodes").

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/clock"
)

const (
	// httpMagic opens a node's HTTP connection to the internal listener
	// (an AMQP connection opens with "AMQP").
	httpMagic = "BBH1"
	// maxPreamble bounds the preamble line: magic, space, node id,
	// space, proof, newline.
	maxPreamble = len(httpMagic) + 1 + MaxNodeID + 1 + maxPassword + 1
	// sniffTimeout bounds how long a new internal connection may take
	// to say what it is (and, for HTTP, to prove its node).
	sniffTimeout = 10 * time.Second

	// PrincipalHeader carries the principal the gateway authenticated
	// (EncodePrincipal); it is read on the internal listener only.
	PrincipalHeader = "Busbar-Principal"
	// maxPrincipal bounds the header's value.
	maxPrincipal = 2048

	// replayLimit is the largest request body the gateway keeps so that
	// it can send the request again after a not-owner answer; larger
	// bodies are streamed and not retried.
	replayLimit = 1 << 20
)

// ErrNotOwner is the error of a forwarded request whose node answered,
// twice, that it does not serve the unit: the unit is moving.
var ErrNotOwner = errors.New("relay: the node asked does not serve the unit (it is moving)")

// FormatPreamble is the line a node sends first on an HTTP connection to
// the internal listener: "BBH1 <node-id> <proof>\n" (proof as in the
// package doc's node proof).
func FormatPreamble(user, pass string) string {
	return httpMagic + " " + user + " " + pass + "\n"
}

// ParsePreamble splits a preamble line (without its newline) into the
// PLAIN user and password of its node proof, checking its form only.
func ParsePreamble(line string) (user, pass string, err error) {
	if len(line) > maxPreamble {
		return "", "", badProof("preamble of %d bytes", len(line))
	}
	rest, ok := strings.CutPrefix(line, httpMagic+" ")
	if !ok {
		return "", "", badProof("preamble does not start with %q", httpMagic)
	}
	user, pass, ok = strings.Cut(rest, " ")
	if !ok {
		return "", "", badProof("preamble has no proof")
	}
	if _, err := ParseProof(user, pass); err != nil {
		return "", "", err
	}
	return user, pass, nil
}

// principal is the wire form of an auth.Grant.
type principal struct {
	KeyName  string `json:"k"`
	Rights   uint8  `json:"r"`
	Resource string `json:"s,omitempty"`
	Audience string `json:"a,omitempty"`
	Expires  int64  `json:"e,omitempty"` // unix milliseconds; 0: none
}

// EncodePrincipal is the PrincipalHeader value of g: base64url (no
// padding) of the JSON object {"k": key name, "r": rights bits, "s":
// resource, "a": audience, "e": expiry in unix milliseconds}.
func EncodePrincipal(g auth.Grant) string {
	p := principal{KeyName: g.KeyName, Rights: uint8(g.Rights), Resource: g.Resource, Audience: g.Audience}
	if !g.ExpiresAt.IsZero() {
		p.Expires = g.ExpiresAt.UnixMilli()
	}
	b, _ := json.Marshal(p)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodePrincipal reads a PrincipalHeader value.
func DecodePrincipal(s string) (auth.Grant, error) {
	if s == "" {
		return auth.Grant{}, errors.New("relay: the forwarded request carries no principal")
	}
	if len(s) > maxPrincipal {
		return auth.Grant{}, fmt.Errorf("relay: principal of %d bytes (at most %d)", len(s), maxPrincipal)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return auth.Grant{}, fmt.Errorf("relay: principal is not base64url: %w", err)
	}
	var p principal
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return auth.Grant{}, fmt.Errorf("relay: principal: %w", err)
	}
	if d.More() {
		return auth.Grant{}, errors.New("relay: principal: data after the object")
	}
	if p.Rights&^uint8(auth.Send|auth.Listen|auth.Manage) != 0 {
		return auth.Grant{}, fmt.Errorf("relay: principal: unknown rights bits %#x", p.Rights)
	}
	g := auth.Grant{KeyName: p.KeyName, Rights: auth.Rights(p.Rights), Resource: p.Resource, Audience: p.Audience}
	if p.Expires != 0 {
		g.ExpiresAt = time.UnixMilli(p.Expires)
	}
	return g, nil
}

// Mux splits the internal listener's connections by their first bytes:
// AMQP connections go to AMQP() (the internal amqp.Server proves them
// itself), HTTP connections to HTTP() once their preamble's node proof
// verified and the owner proved itself back with the line
// "BBH1 <hex of OwnerProof>\n".
type Mux struct {
	ln     net.Listener
	secret []byte
	self   string
	verify *Verifier
	log    *slog.Logger
	amqp   *subListener
	http   *subListener

	wg       sync.WaitGroup
	mu       sync.Mutex
	sniffing map[net.Conn]struct{} // connections not sorted yet
}

// NewMux returns the Mux of ln for the listener l; Serve runs it.
func NewMux(ln net.Listener, l *Listener) *Mux {
	m := &Mux{ln: ln, secret: l.secret, self: l.self, verify: l.verifier, log: l.log, sniffing: make(map[net.Conn]struct{})}
	m.amqp = &subListener{m: m, ch: make(chan net.Conn), done: make(chan struct{})}
	m.http = &subListener{m: m, ch: make(chan net.Conn), done: make(chan struct{})}
	return m
}

// AMQP is the listener of the AMQP connections.
func (m *Mux) AMQP() net.Listener { return m.amqp }

// HTTP is the listener of the proven HTTP connections.
func (m *Mux) HTTP() net.Listener { return m.http }

// Serve accepts connections until ln is closed, then closes the
// connections not sorted yet and waits for their goroutines.
func (m *Mux) Serve() error {
	defer m.wg.Wait()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.mu.Lock()
			for c := range m.sniffing {
				c.Close()
			}
			m.mu.Unlock()
			return err
		}
		m.mu.Lock()
		m.sniffing[c] = struct{}{}
		m.mu.Unlock()
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.sort(c) }()
	}
}

// sort reads what c is and hands it on, or closes it.
func (m *Mux) sort(c net.Conn) {
	defer func() {
		m.mu.Lock()
		delete(m.sniffing, c)
		m.mu.Unlock()
	}()
	_ = c.SetDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, maxPreamble+16)
	head, err := br.Peek(4)
	if err != nil {
		c.Close()
		return
	}
	switch string(head) {
	case "AMQP":
		_ = c.SetDeadline(time.Time{})
		m.amqp.hand(&bufConn{Conn: c, r: br})
	case httpMagic:
		line, err := readLine(br, maxPreamble)
		if err == nil {
			var user, pass string
			if user, pass, err = ParsePreamble(line); err == nil {
				var p Proof
				if p, err = m.verify.Check(user, pass); err == nil {
					_, err = io.WriteString(c, httpMagic+" "+hex.EncodeToString(OwnerProof(m.secret, m.self, p.Nonce))+"\n")
				}
			}
		}
		if err != nil {
			m.log.Warn("internal HTTP connection refused", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
		_ = c.SetDeadline(time.Time{})
		m.http.hand(&bufConn{Conn: c, r: br})
	default:
		c.Close()
	}
}

// readLine reads a line of at most limit bytes before its '\n'.
func readLine(br *bufio.Reader, limit int) (string, error) {
	var b []byte
	for {
		c, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return string(b), nil
		}
		if len(b) == limit {
			return "", badProof("preamble longer than %d bytes", limit)
		}
		b = append(b, c)
	}
}

// bufConn is a connection whose first bytes were read into r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// subListener is one kind of the Mux's connections as a net.Listener.
type subListener struct {
	m    *Mux
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *subListener) hand(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops handing connections to this listener (the Mux's own
// listener stays open).
func (l *subListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *subListener) Addr() net.Addr { return l.m.ln.Addr() }

// OwnerHTTP is the handler of the internal listener's HTTP connections:
// it decodes the principal the gateway authenticated and calls serve
// with it; a request without a valid one is answered 400.
func OwnerHTTP(serve func(w http.ResponseWriter, r *http.Request, g auth.Grant)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, err := DecodePrincipal(r.Header.Get(PrincipalHeader))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Header.Del(PrincipalHeader)
		serve(w, r, g)
	})
}

// HTTPConfig configures an HTTPForwarder.
type HTTPConfig struct {
	Secret  []byte
	Node    string       // this node
	Session func() int64 // this node's live session, asked at each dial
	Clock   clock.Clock
	Logger  *slog.Logger
	// DialTimeout bounds a dial with its proofs. Default 10 s.
	DialTimeout time.Duration
}

// HTTPForwarder sends HTTP requests to other nodes' internal listeners,
// over connections it keeps per node (each proven once, when dialled).
type HTTPForwarder struct {
	cfg HTTPConfig
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	nodes  map[string]*nodeClient
}

type nodeClient struct {
	addr string
	tr   *http.Transport
}

// NewHTTPForwarder returns an HTTPForwarder; Close closes its
// connections.
func NewHTTPForwarder(cfg HTTPConfig) (*HTTPForwarder, error) {
	if len(cfg.Secret) == 0 || cfg.Node == "" || cfg.Session == nil {
		return nil, errors.New("relay: HTTPConfig needs Secret, Node and Session")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	log := cfg.Logger
	if log == nil {
		log = discard()
	}
	return &HTTPForwarder{cfg: cfg, log: log, nodes: make(map[string]*nodeClient)}, nil
}

// Close closes the idle connections and refuses further requests (those
// in progress finish on their own connections).
func (f *HTTPForwarder) Close() {
	f.mu.Lock()
	f.closed = true
	nodes := f.nodes
	f.nodes = map[string]*nodeClient{}
	f.mu.Unlock()
	for _, n := range nodes {
		n.tr.CloseIdleConnections()
	}
}

// client returns the transport to node o, made anew when its address
// changed.
func (f *HTTPForwarder) client(o Owner) (*http.Transport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("relay: the forwarder is closed")
	}
	n := f.nodes[o.Node]
	if n != nil && n.addr == o.Addr {
		return n.tr, nil
	}
	if n != nil {
		n.tr.CloseIdleConnections()
	}
	owner := o.Node
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return f.dial(ctx, addr, owner)
		},
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0, // data plane receives wait as long as the client asked
		DisableCompression:    true,
	}
	f.nodes[o.Node] = &nodeClient{addr: o.Addr, tr: tr}
	return tr, nil
}

// dial opens an HTTP connection to owner at addr and proves both ends.
func (f *HTTPForwarder) dial(ctx context.Context, addr, owner string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var nonce [nonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		c.Close()
		return nil, err
	}
	user, pass := MakeProof(f.cfg.Secret, f.cfg.Node, owner, f.cfg.Session(), f.cfg.Clock.Now(), nonce)
	if _, err := io.WriteString(c, FormatPreamble(user, pass)); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 256)
	line, err := readLine(br, len(httpMagic)+1+2*macLen)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("relay: %s (%s) did not prove itself: %w", owner, addr, err)
	}
	want := httpMagic + " " + hex.EncodeToString(OwnerProof(f.cfg.Secret, owner, nonce))
	if !hmac.Equal([]byte(line), []byte(want)) {
		c.Close()
		return nil, fmt.Errorf("relay: %s (%s) did not prove itself: its proof does not match", owner, addr)
	}
	_ = c.SetDeadline(time.Time{})
	return &bufConn{Conn: c, r: br}, nil
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Forward sends the client's request r to the node ownerOf names, on
// behalf of g, and returns that node's answer (the caller closes its
// body). A node that answers 421 Misdirected Request does not serve the
// unit (any more): ownerOf is asked again and the request sent once
// more when its body could be kept (at most 1 MiB); a second 421 is
// ErrNotOwner. Any error means the request was not answered: a request
// with a body may or may not have been carried out (the owner's own
// answers, whatever their status, are returned as responses).
func (f *HTTPForwarder) Forward(ctx context.Context, ownerOf func() (Owner, error), r *http.Request, g auth.Grant) (*http.Response, error) {
	var body []byte
	replayable := r.Body == nil || r.Body == http.NoBody || (r.ContentLength >= 0 && r.ContentLength <= replayLimit)
	if replayable && r.Body != nil && r.Body != http.NoBody {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, replayLimit+1)); err != nil {
			return nil, fmt.Errorf("relay: reading the request body: %w", err)
		}
		if len(body) > replayLimit {
			return nil, errors.New("relay: the request body is longer than its Content-Length")
		}
	}
	for attempt := 0; ; attempt++ {
		o, err := ownerOf()
		if err != nil {
			return nil, err
		}
		if o.Addr == "" {
			return nil, ErrNotOwner
		}
		tr, err := f.client(o)
		if err != nil {
			return nil, err
		}
		var rb io.Reader
		switch {
		case !replayable:
			rb = r.Body
		case len(body) > 0:
			rb = strings.NewReader(string(body))
		}
		out, err := http.NewRequestWithContext(ctx, r.Method, "http://"+o.Addr+"/", rb)
		if err != nil {
			return nil, err
		}
		out.URL.Path, out.URL.RawPath, out.URL.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
		out.Host = r.Host
		out.Header = r.Header.Clone()
		for _, h := range hopHeaders {
			out.Header.Del(h)
		}
		out.Header.Set(PrincipalHeader, EncodePrincipal(g)) // replaces any the client sent
		if replayable {
			out.ContentLength = int64(len(body))
		} else {
			out.ContentLength = r.ContentLength
		}
		resp, err := tr.RoundTrip(out)
		if err != nil {
			return nil, fmt.Errorf("relay: forwarding to %s (%s): %w", o.Node, o.Addr, err)
		}
		if resp.StatusCode != http.StatusMisdirectedRequest {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if attempt > 0 || !replayable {
			return nil, ErrNotOwner
		}
		f.log.Debug("relay: not the owner, asking again", "node", o.Node)
	}
}
