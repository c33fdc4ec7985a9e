package relay

import (
	"context"
	"errors"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Parking (docs/design/cluster.md §8.3). An attach for a unit that is
// moving — no owner with an address yet (its owner's session expired and
// no node took it yet, or it was released and not taken), an owner that
// cannot be reached, or an owner that answers it no longer serves the
// unit (server-busy, detach-forced) — is held: the attach is tried again,
// every 50 ms at first and at most every 500 ms, until it succeeds, fails
// otherwise, or Park has passed; then the last refusal (retriable) is the
// answer. A unit this node serves by then is attached through this node's
// own internal listener (GatewayConfig.Addr; without it the attach fails
// retriably and the client's retry attaches here). The client sees a slow attach, not an error.
// The attaches held are bounded (MaxParked, MaxParkedPerConn); past
// those an attach fails at once, retriably.
const (
	DefaultPark             = 15 * time.Second
	DefaultMaxParked        = 1024
	DefaultMaxParkedPerConn = 64

	parkFirstRetry = 50 * time.Millisecond
	parkMaxRetry   = 500 * time.Millisecond
)

// attachParked attaches an internal link for client connection c to
// unit's owner with attach (each try given wait), parking it while the
// unit moves. A failure of the internal connection (not the owner's
// answer) drops it.
func (g *Gateway) attachParked(ctx context.Context, c *amqp.Conn, unit string, wait time.Duration, attach func(context.Context, *peerConn) error) error {
	var deadline time.Time
	held := false
	defer func() {
		if held {
			g.unpark(c)
		}
	}()
	delay := parkFirstRetry
	for {
		actx, cancel := context.WithTimeout(ctx, wait)
		o, remote := g.cfg.OwnerOf(unit)
		if !remote && g.cfg.Addr != "" {
			// Served here now (or gone): through this node's own
			// internal listener, where the local broker answers.
			o, remote = Owner{Node: g.cfg.Node, Addr: g.cfg.Addr}, true
		}
		var p *peerConn
		err := errMoved(unit)
		if remote {
			p, err = g.peerAt(actx, c, unit, o)
		}
		if err == nil {
			if err = attach(actx, p); err != nil && !isRemote(err) {
				g.forget(c, p)
			}
		}
		cancel()
		if err == nil || ctx.Err() != nil || !moving(err) {
			return err
		}
		if !remote {
			return err // served here now: the client's retry attaches here
		}
		now := time.Now()
		if !held {
			if !g.park(c) {
				return &amqp.Error{Condition: condServerBusy, Description: "Too many attaches are waiting for entities that move between nodes; try again."}
			}
			held, deadline = true, now.Add(g.cfg.Park)
		}
		if !now.Before(deadline) {
			return err
		}
		t := time.NewTimer(min(delay, deadline.Sub(now)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		delay = min(2*delay, parkMaxRetry)
	}
}

// moving says whether an attach failed because its unit is moving: the
// gateway's own server-busy (no owner known, or it cannot be reached), or
// the owner's server-busy or detach-forced (it no longer serves the
// unit).
func moving(err error) bool {
	var own *amqp.Error
	if errors.As(err, &own) {
		return own.Condition == condServerBusy
	}
	if !isRemote(err) {
		return true // the internal connection failed
	}
	e := amqpError(err)
	return e.Condition == condServerBusy || e.Condition == frames.Symbol(goamqp.ErrCondDetachForced)
}

// park counts one more held attach of c; false past the bounds.
func (g *Gateway) park(c *amqp.Conn) bool {
	g.parkMu.Lock()
	defer g.parkMu.Unlock()
	if g.parked >= g.cfg.MaxParked || g.parkedConn[c] >= g.cfg.MaxParkedPerConn {
		return false
	}
	g.parked++
	g.parkedConn[c]++
	return true
}

func (g *Gateway) unpark(c *amqp.Conn) {
	g.parkMu.Lock()
	defer g.parkMu.Unlock()
	g.parked--
	if g.parkedConn[c]--; g.parkedConn[c] <= 0 {
		delete(g.parkedConn, c)
	}
}

// Parked is the number of attaches held now.
func (g *Gateway) Parked() int {
	g.parkMu.Lock()
	defer g.parkMu.Unlock()
	return g.parked
}
