package servicebus

import (
	"context"
	"sync"
)

// Settlements before management requests. A client that settles a
// message and then at once sends a management request on the same
// connection (defer, then receive-by-sequence-number for the deferred
// message; complete, then peek) must find the settlement applied. Two
// things stand in between: the endpoint's session muxes run concurrently
// (amqp.DispositionMark covers that: it waits until every disposition read
// before the request reached OnDisposition), and OnDisposition applies a
// settlement on another goroutine (the link's settler, or one of its own).
// settleOrder covers the second: each settlement takes a ticket when its
// disposition arrives and returns it once the broker applied it; a
// management request waits until every ticket taken before it is back.

// settleOrder tracks a connection's settlements in flight.
type settleOrder struct {
	mu       sync.Mutex
	next     uint64              // the next ticket
	inflight map[uint64]struct{} // tickets taken and not yet returned
	changed  chan struct{}       // closed when a ticket returns; nil if none waits
}

// begin takes a ticket for a settlement that is about to be applied.
func (o *settleOrder) begin() uint64 {
	o.mu.Lock()
	t := o.next
	o.next++
	if o.inflight == nil {
		o.inflight = make(map[uint64]struct{})
	}
	o.inflight[t] = struct{}{}
	o.mu.Unlock()
	return t
}

// end returns ticket t: its settlement was applied (or failed).
func (o *settleOrder) end(t uint64) {
	o.mu.Lock()
	delete(o.inflight, t)
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
	o.mu.Unlock()
}

// wait returns once every ticket taken before the call has returned, or
// ctx is done.
func (o *settleOrder) wait(ctx context.Context) error {
	o.mu.Lock()
	mark := o.next
	for {
		pending := false
		for t := range o.inflight {
			if t < mark {
				pending = true
				break
			}
		}
		if !pending {
			o.mu.Unlock()
			return nil
		}
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		o.mu.Lock()
	}
}
