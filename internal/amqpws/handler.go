package amqpws

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// Path is where Service Bus, and Busbar, serve AMQP over WebSockets. The
// handler also answers it with a trailing slash (the Python SDK's form).
const Path = "/$servicebus/websocket"

// Subprotocols are the WebSocket subprotocols accepted, in order of
// preference: the AMQP WebSocket binding's name and its draft name.
var Subprotocols = []string{"amqp", "AMQPWSB10"}

// Handler upgrades requests to WebSockets and hands each one to its serve
// function. Create it with NewHandler.
type Handler struct {
	serve func(net.Conn)
	log   *slog.Logger

	mu       sync.Mutex // guards closed and the Add side of inflight
	closed   bool
	inflight sync.WaitGroup // ServeHTTP calls in progress
}

// NewHandler returns a handler that gives every upgraded connection to
// serve, which owns it from then on (it must Close it) and should return
// soon: it runs on the request's goroutine. log receives refused upgrades
// at debug level; nil discards.
func NewHandler(serve func(net.Conn), log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{serve: serve, log: log}
}

// ServeHTTP upgrades a WebSocket request offering an AMQP subprotocol;
// anything else gets an HTTP error that says what is expected.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.enter() {
		http.Error(w, "Busbar is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer h.inflight.Done()

	const expect = "this is Busbar's AMQP-over-WebSocket endpoint: connect with a WebSocket client (GET with Upgrade: websocket) offering the subprotocol \"amqp\""
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, fmt.Sprintf("method %s not allowed; %s", r.Method, expect), http.StatusMethodNotAllowed)
		return
	}
	if !hasToken(r.Header, "Connection", "upgrade") || !hasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		http.Error(w, "not a WebSocket upgrade; "+expect, http.StatusUpgradeRequired)
		return
	}
	offered := tokens(r.Header, "Sec-WebSocket-Protocol")
	if !acceptable(offered) {
		msg := "no WebSocket subprotocol offered"
		if len(offered) > 0 {
			msg = fmt.Sprintf("unsupported WebSocket subprotocol %q", strings.Join(offered, ", "))
		}
		h.log.Debug("amqpws: upgrade refused", "remote", r.RemoteAddr, "reason", msg)
		http.Error(w, msg+"; Busbar carries AMQP here and needs the subprotocol \"amqp\" (or \"AMQPWSB10\")", http.StatusBadRequest)
		return
	}

	rec := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(rec, r, &websocket.AcceptOptions{
		Subprotocols: Subprotocols,
		// AMQP authorises through $cbs inside the tunnel; a browser holds
		// no ambient credential for it, so other origins are fine.
		InsecureSkipVerify: true,
	})
	if err != nil { // Accept answered the request
		h.log.Debug("amqpws: upgrade failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	if rec.conn == nil { // cannot happen: Accept hijacks before it succeeds
		_ = ws.CloseNow()
		return
	}
	c := NewConn(ws, rec.conn)
	c.host = r.Host
	h.serve(c)
}

func (h *Handler) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.inflight.Add(1)
	return true
}

// Shutdown refuses further upgrades with 503 and waits for the requests
// in progress (the connections already handed to serve are serve's to
// close), or until ctx is done.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hijackRecorder keeps the connection Accept hijacks, for its addresses
// and to bound Conn.Close.
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.conn = c
	return c, brw, err
}

// tokens returns the comma-separated tokens of every header line named
// key.
func tokens(hdr http.Header, key string) []string {
	var out []string
	for _, v := range hdr.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

func hasToken(hdr http.Header, key, want string) bool {
	for _, t := range tokens(hdr, key) {
		if strings.EqualFold(t, want) {
			return true
		}
	}
	return false
}

func acceptable(offered []string) bool {
	for _, o := range offered {
		for _, s := range Subprotocols {
			if strings.EqualFold(o, s) {
				return true
			}
		}
	}
	return false
}
