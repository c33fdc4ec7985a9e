package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// Message sessions on the wire (docs/wire/amqp.md §7).
//
// A receiver link whose source carries the filter
// com.microsoft:session-filter is a session receiver: the value names the
// session (a string) or asks for the next available one (null). The Go SDK
// sends it described with 0x00000137000000C, the JS SDK plain; the attach
// reply echoes the filter in the client's encoding holding the session
// actually locked (§0.6), and carries com.microsoft:locked-until-utc, the
// session lock's expiry in .NET ticks as an AMQP long (§0.7).
//
//	named session, free           attach(filter echo, locked-until-utc)
//	named session, locked         null-source attach + detach com.microsoft:session-cannot-be-locked
//	next available                the attach is deferred until a session with an available
//	                              message can be locked, up to com.microsoft:timeout (uint ms;
//	                              default 60 s); then null-source attach + detach
//	                              com.microsoft:timeout (Go CodeTimeout, JS ServiceTimeout)
//	non-session entity            amqp:not-allowed
//	session lock expires          detach com.microsoft:session-lock-lost (Go relinks)
//	link closed by the client     the session is released, delivery counts unchanged
//
// Management operations find the session from the request's
// associated-link-name (a session receiver link of this connection; the
// Go SDK sends nothing else for peek and receive-by-sequence-number) or
// the body's session-id (the JS SDK; both SDKs for the session-lock and
// session-state operations). With the link, the session must be held by
// that link; with the id alone, by any receiver. Without the lock the
// answer is 410 com.microsoft:session-lock-lost.
//
// A send without SessionId to a session-enabled queue is rejected with
// amqp:not-allowed (docs/wire/amqp.md §11.6 leaves the cloud's condition open; this
// is the condition both SDKs treat as final, and the description is the
// cloud's "The SessionId was not set on a message, and it cannot be sent
// to the entity …").

const (
	sessionFilterKey frames.Symbol = "com.microsoft:session-filter"
	lockedUntilKey   frames.Symbol = "com.microsoft:locked-until-utc"
	acceptTimeoutKey frames.Symbol = "com.microsoft:timeout"

	opRenewSessionLock = "com.microsoft:renew-session-lock"
	opGetSessionState  = "com.microsoft:get-session-state"
	opSetSessionState  = "com.microsoft:set-session-state"

	// defaultAcceptTimeout is the next-available wait when the client
	// sends no com.microsoft:timeout (the Go SDK without a context
	// deadline); the cloud waits about a minute.
	defaultAcceptTimeout = 60 * time.Second

	// epochTicks is the Unix epoch in .NET ticks (100 ns since 0001-01-01).
	epochTicks = int64(621355968000000000)

	// maxDateTimeMillis is .NET DateTime.MaxValue in Unix ms: a
	// get-message-sessions last-updated-time at or beyond it (the Go SDK
	// sends 10000-01-01) means "sessions with messages or state".
	maxDateTimeMillis = 253402300799999
)

// toTicks converts t to .NET ticks.
func toTicks(t time.Time) int64 { return epochTicks + t.UnixNano()/100 }

// sessionFilter is a receiver's session request.
type sessionFilter struct {
	id    string // the session asked for; "" with next
	next  bool   // the next available session
	descr any    // the descriptor of a described filter value (Go), nil for a plain one (JS)
}

// sessionFilterOf reads a receiver link's session filter; ok is false when
// it has none.
func sessionFilterOf(l *amqp.OutgoingLink) (f sessionFilter, ok bool, err error) {
	src := l.Source()
	if src == nil || src.Filter == nil {
		return f, false, nil
	}
	v, ok := src.Filter[sessionFilterKey]
	if !ok {
		return f, false, nil
	}
	if d, isDescribed := v.(frames.Described); isDescribed {
		f.descr, v = d.Descriptor, d.Value
		if f.descr == nil {
			f.descr = uint64(0x137000000c)
		}
	}
	switch x := v.(type) {
	case nil:
		f.next = true
	case string:
		f.id = x
	case encoding.Symbol:
		f.id = string(x)
	default:
		return f, true, badRequest("The filter %s must hold a session id (string) or null, not %T.", sessionFilterKey, v)
	}
	return f, true, nil
}

// echo returns the filter value that tells the client which session it
// got, in the encoding it used.
func (f sessionFilter) echo(id string) any {
	if f.descr != nil {
		return frames.Described{Descriptor: f.descr, Value: id}
	}
	return id
}

// acceptTimeout reads com.microsoft:timeout (ms, any integer type) and
// returns how long to wait: a little less (5%, at most 500 ms), so that
// the timeout detach reaches the client before its own deadline. The Go
// SDK derives the value from its context's deadline minus a random jitter
// that can be as small as nothing; answering exactly at the timeout would
// race the client's context and turn CodeTimeout into a context error.
func acceptTimeout(props map[frames.Symbol]any) time.Duration {
	d := defaultAcceptTimeout
	if v, ok := props[acceptTimeoutKey]; ok {
		if n, err := toInt64(v); err == nil && n > 0 {
			d = time.Duration(n) * time.Millisecond
		}
	}
	return d - min(d/20, 500*time.Millisecond)
}

// attachSessionReceiver accepts a session receiver link: at once for a
// named session, deferred (long poll) for the next available one.
func (c *conn) attachSessionReceiver(l *amqp.OutgoingLink, a address, f sessionFilter, mode broker.ReceiveMode) error {
	path := a.path()
	rl := c.newReceiverLink(l, path, mode)
	if !f.next {
		r, err := c.ns().Broker.AcceptSession(path, f.id, mode)
		if err != nil {
			if broker.KindOf(err) == broker.KindNotFound {
				err = notFound(c.entityURI(path))
			}
			return c.refuse("attach", path, err)
		}
		l.OnDetach = rl.onDetach
		if err := c.startSessionLink(rl, r, f); err != nil {
			return err
		}
		c.guard(&l.Link, rl.done, path, auth.Listen)
		return nil
	}
	timeout := acceptTimeout(l.Properties())
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	// The client may detach while we wait: that ends the wait. OnDetach
	// is set once, here, before the attach is deferred.
	l.OnDetach = func(err error, unsent []*amqp.OutgoingDelivery) {
		cancel()
		rl.onDetach(err, unsent)
	}
	ok := c.spawn(func() {
		defer cancel()
		r, err := c.ns().Broker.AcceptNextSession(ctx, path, mode)
		if err != nil {
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				//lint:ignore ST1005 Service Bus's own wording, which clients show as it is
				err = fmt.Errorf("No session of '%s' became available to accept within %v: %w", path, timeout.Round(time.Millisecond), err)
			case broker.KindOf(err) == broker.KindNotFound:
				err = notFound(c.entityURI(path))
			}
			l.CompleteAttach(c.refuse("attach", path, err))
			return
		}
		err = c.startSessionLink(rl, r, f)
		if err == nil {
			c.guard(&l.Link, rl.done, path, auth.Listen)
		}
		l.CompleteAttach(err)
	})
	if !ok {
		cancel()
		return c.refuse("attach", path, &broker.Error{Kind: broker.KindClosed, Msg: "The connection is closing."})
	}
	return amqp.ErrAttachDeferred
}

// startSessionLink fills in the attach reply of a session receiver that
// holds its session and starts its pump. On failure the session is
// released and the error refuses the link.
func (c *conn) startSessionLink(rl *receiverLink, r *broker.Receiver, f sessionFilter) error {
	l := rl.l
	rl.r = r
	rl.held.Store(r)
	r.SetHolder(c.lockHolder(l))
	r.StreamBodies(c.h.streamFrom)
	until := r.SessionLockedUntil()
	if until.IsZero() { // lost already (a lock duration shorter than this attach)
		r.Close()
		return c.refuse("attach", rl.path, &broker.Error{Kind: broker.KindSessionLockLost,
			Msg: "The session lock of session '" + r.SessionID() + "' expired before the link was attached."})
	}
	src := *l.Reply.Source // the client's, shallow: replace its maps, never modify them
	filter := make(map[frames.Symbol]any, len(src.Filter))
	for k, v := range src.Filter {
		filter[k] = v
	}
	filter[sessionFilterKey] = f.echo(r.SessionID())
	src.Filter = filter
	l.Reply.Source = &src
	l.Reply.Properties = map[frames.Symbol]any{lockedUntilKey: toTicks(until)}
	l.OnFlow = rl.onFlow
	l.OnDisposition = rl.onDisposition
	name := l.Name()
	c.sessionLinks.Store(name, r)
	if !c.spawn(func() {
		defer c.sessionLinks.CompareAndDelete(name, r)
		rl.pump()
	}) {
		c.sessionLinks.CompareAndDelete(name, r)
		r.Close()
		return c.refuse("attach", rl.path, &broker.Error{Kind: broker.KindClosed, Msg: "The connection is closing."})
	}
	return nil
}

// ---- management operations ----

type assocLinkKey struct{}

// withAssociatedLink records a request's associated-link-name for the
// operations that need it.
func withAssociatedLink(ctx context.Context, name string) context.Context {
	if name == "" {
		return ctx
	}
	return context.WithValue(ctx, assocLinkKey{}, name)
}

// sessionOf finds the session a management request is about: the
// session receiver link named by associated-link-name (holder) if it is
// one of this connection's on path, and the body's session-id (id, ""
// if absent).
func (c *conn) sessionOf(ctx context.Context, path string, b body) (holder *broker.Receiver, id string, err error) {
	id, err = b.str("session-id")
	if err != nil {
		return nil, "", err
	}
	name, _ := ctx.Value(assocLinkKey{}).(string)
	if name == "" {
		return nil, id, nil
	}
	v, ok := c.sessionLinks.Load(name)
	if !ok {
		return nil, id, nil
	}
	r := v.(*broker.Receiver)
	if !samePath(r.Path(), path) || (id != "" && id != r.SessionID()) {
		return nil, id, nil
	}
	return r, r.SessionID(), nil
}

// samePath compares entity paths as the broker does (case-insensitively).
func samePath(a, b string) bool { return strings.EqualFold(a, b) }

// needSession is the error of a session operation that names no session.
func needSession(op string) error {
	return badRequest("The operation '%s' needs a session: the request names none (session-id) and its associated-link-name is not a session receiver of this connection.", op)
}

// renewSessionLock: session-id → expiration (timestamp). Inside a
// transaction it renews at once, as Service Bus does (txn.go).
func (c *conn) renewSessionLock(ctx context.Context, path string, b body) (*response, error) {
	holder, id, err := c.sessionOf(ctx, path, b)
	if err != nil {
		return nil, err
	}
	var until time.Time
	switch {
	case holder != nil:
		until, err = holder.RenewSessionLock(ctx)
	case id != "":
		until, err = c.ns().Broker.RenewSessionLock(ctx, path, id)
	default:
		return nil, needSession(opRenewSessionLock)
	}
	if err != nil {
		return nil, err
	}
	return ok(encoding.Map{{Key: "expiration", Value: until}}), nil
}

// getSessionState: session-id → session-state (binary, or null for none).
// Inside a transaction it answers at once with the committed state (a
// state the same transaction sets shows only after its commit).
func (c *conn) getSessionState(ctx context.Context, path string, b body) (*response, error) {
	holder, id, err := c.sessionOf(ctx, path, b)
	if err != nil {
		return nil, err
	}
	var state []byte
	switch {
	case holder != nil:
		state, err = holder.SessionState(ctx)
	case id != "":
		state, err = c.ns().Broker.GetSessionState(ctx, path, id)
	default:
		return nil, needSession(opGetSessionState)
	}
	if err != nil {
		return nil, err
	}
	var v any // null when there is none
	if state != nil {
		v = state
	}
	return ok(encoding.Map{{Key: "session-state", Value: v}}), nil
}

// setSessionState: session-id, session-state (binary; empty or null
// clears it). Inside a transaction it is recorded and applied on commit
// (txnSetSessionState).
func (c *conn) setSessionState(ctx context.Context, path string, b body) (*response, error) {
	holder, id, err := c.sessionOf(ctx, path, b)
	if err != nil {
		return nil, err
	}
	var state []byte
	if v, given := b.get("session-state"); given {
		bs, isBinary := v.([]byte)
		if !isBinary {
			return nil, badRequest("The request field 'session-state' must be binary or null, not %T.", v)
		}
		state = bs
	}
	if tid := txnFrom(ctx); tid != nil {
		if holder == nil && id == "" {
			return nil, needSession(opSetSessionState)
		}
		return c.txnSetSessionState(tid, path, holder, id, state)
	}
	switch {
	case holder != nil:
		err = holder.SetSessionState(ctx, state)
	case id != "":
		err = c.ns().Broker.SetSessionState(ctx, path, id, state)
	default:
		return nil, needSession(opSetSessionState)
	}
	if err != nil {
		return nil, err
	}
	return ok(nil), nil
}

// getMessageSessions: last-updated-time (timestamp; at or beyond .NET's
// DateTime.MaxValue, or absent: sessions with messages or state), skip,
// top → skip, sessions-ids (array of string); 204 when there are none.
func (c *conn) getMessageSessions(ctx context.Context, path string, b body) (*response, error) {
	after, given, err := b.timestamp("last-updated-time")
	if err != nil {
		return nil, err
	}
	if !given || after.UnixMilli() >= maxDateTimeMillis {
		after = time.Time{}
	}
	skip, _, err := b.integer("skip")
	if err != nil {
		return nil, err
	}
	top, _, err := b.integer("top")
	if err != nil {
		return nil, err
	}
	ids, err := c.ns().Broker.ListSessions(ctx, path, after, int(max(0, min(skip, 1<<30))), int(max(0, min(top, 1<<30))))
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return noContent(), nil
	}
	return ok(encoding.Map{
		{Key: "skip", Value: int32(min(skip+int64(len(ids)), 1<<31-1))},
		{Key: "sessions-ids", Value: ids},
	}), nil
}
