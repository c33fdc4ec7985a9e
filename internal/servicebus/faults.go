package servicebus

import (
	"context"
	"time"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/message"
)

// Fault injection (Config.Faults, package faults). Each hook asks the
// rules about its operation, cheaply when none is armed for it, and
// applies what they say:
//
//	attach      entity sender and receiver links: refused (server-busy,
//	            detach: the chosen condition), or the connection closed
//	send        a transfer: rejected with server-busy, the link detached,
//	            or the connection closed (nothing of it is stored)
//	receive     a peek-lock delivery: not sent (drop-frame: the message
//	            stays locked until its lock expires), the link detached or
//	            the connection closed (the message is released)
//	settle      a disposition: rejected with message-lock-lost or
//	            server-busy (the message keeps its lock), answered after a
//	            delay, or the link detached / the connection closed
//	            without an answer
//	management  a request: 503 server-busy, answered after a delay, not
//	            answered at all (drop-frame), or the connection closed
//
// Errors go through classify like any other, so a server-busy fault is
// counted as a throttled request.

// inject returns the fault to inject into p, nil for none.
func (c *conn) inject(p faults.Point) *faults.Fault {
	if !c.ns().Faults.Armed(p.Op) {
		return nil
	}
	return c.ns().Faults.Take(p)
}

// faultError is f as the AMQP error a detach or close carries (logged
// and counted like any failure).
func (c *conn) faultError(op, entity string, f *faults.Fault) *amqp.Error {
	return c.fail(op, entity, f.Err()).amqpError()
}

// faultClose closes the connection with f's condition.
func (c *conn) faultClose(op, entity string, f *faults.Fault) {
	c.c.Close(c.faultError(op, entity, f))
}

// faultWait waits out a delay fault, or until ctx ends.
func faultWait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// propsOf lists the application properties of msgs, for rules with a
// property condition.
func propsOf(msgs []*message.Message) []map[string]any {
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		if m.ApplicationProperties != nil {
			out = append(out, m.ApplicationProperties)
		}
	}
	return out
}

// attachFault applies an attach fault to an entity link: the error to
// refuse it with, nil to go on.
func (c *conn) attachFault(path, link string) error {
	f := c.inject(faults.Point{Op: faults.OpAttach, Entity: path, Link: link})
	if f == nil {
		return nil
	}
	if f.Kind == faults.CloseConnection {
		c.faultClose("attach", path, f)
	}
	return c.refuse("attach", path, f.Err())
}
