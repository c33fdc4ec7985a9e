package servicebus

// Large messages arriving: a sender link's transfer that grows past
// Config.StreamFrom goes to a spool file of the store's as its frames
// arrive (amqp.IncomingLink.Spool), is decoded from its first bytes with
// its body left in the file (message.DecodeAMQPHead) and reaches the
// store as an Op.Tail read from the file, so the broker never holds it
// whole. What a client can make the broker hold this way is bounded:
// spools per connection (Config.MaxSpoolsPerConnection) and spool bytes
// in all (Config.MaxSpoolBytes); past either, the transfer is rejected
// with amqp:resource-limit-exceeded and its frames dropped.

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Defaults of the spool limits.
const (
	DefaultMaxSpoolsPerConnection = 16
	DefaultMaxSpoolBytes          = 4 << 30
	// spoolHead is how much of a spooled message is read to decode it
	// (more if its sections before the body need it, up to maxSpoolHead).
	spoolHead    = 64 << 10
	maxSpoolHead = 1 << 20
)

// spoolLimits are the handler's spool bounds and usage.
type spoolLimits struct {
	perConn  int64
	maxBytes int64
	bytes    atomic.Int64 // spooled bytes of every connection
}

// spool is a sender link's spool for one delivery: the store's file, with
// the connection's and the handler's accounting.
type spool struct {
	c      *conn
	path   string // the entity, for errors
	f      store.Spool
	bytes  int64 // counted in spoolLimits.bytes
	closed bool
}

// newSpool is the sender link's amqp.IncomingLink.Spool. Batches (at
// most 1 MB) and transactional sends stay in memory.
func (s *senderLink) newSpool(d *amqp.IncomingDelivery) (amqp.Spool, error) {
	if d.MessageFormat != 0 {
		return nil, nil
	}
	if _, ok := d.State.(*frames.TransactionalState); ok || s.relayTxn != nil {
		return nil, nil
	}
	c := s.c
	lim := &c.h.spool
	if c.spools.Add(1) > lim.perConn {
		c.spools.Add(-1)
		return nil, c.fail("send", s.path, &broker.Error{Kind: broker.KindQuotaExceeded,
			Msg: fmt.Sprintf("The connection is sending %d large messages already; send at most that many at once.", lim.perConn)}).amqpError()
	}
	f, err := c.ns().Broker.NewSpool()
	if err != nil {
		c.spools.Add(-1)
		return nil, c.fail("send", s.path, err).amqpError()
	}
	if f == nil { // a store without spools (memory, PostgreSQL): kept in memory
		c.spools.Add(-1)
		return nil, nil
	}
	return &spool{c: c, path: s.path, f: f}, nil
}

func (sp *spool) Write(p []byte) error {
	lim := &sp.c.h.spool
	if lim.bytes.Add(int64(len(p))) > lim.maxBytes {
		lim.bytes.Add(-int64(len(p)))
		return sp.c.fail("send", sp.path, &broker.Error{Kind: broker.KindQuotaExceeded,
			Msg: fmt.Sprintf("The broker is receiving %d bytes of large messages already; try again later.", lim.maxBytes)}).amqpError()
	}
	sp.bytes += int64(len(p))
	if err := sp.f.Write(p); err != nil {
		return sp.c.fail("send", sp.path, err).amqpError()
	}
	return nil
}

// Abort drops a delivery that will not complete.
func (sp *spool) Abort() { sp.close() }

// close deletes the spool and gives back what it counted. Safe to call
// more than once.
func (sp *spool) close() {
	if sp.closed {
		return
	}
	sp.closed = true
	sp.f.Close()
	sp.c.h.spool.bytes.Add(-sp.bytes)
	sp.c.spools.Add(-1)
}

// decodeSpooled decodes a spooled delivery: its head from the spool, its
// body left there (Message.BodyTail), or, for a message whose body cannot
// be left out (message.ErrNotStreamable), the whole message read into
// memory.
func decodeSpooled(sp *spool) (*message.Message, error) {
	size := sp.f.Size()
	for n := min(size, spoolHead); ; n = min(size, 4*n) {
		head := make([]byte, n)
		if k, err := sp.f.ReadAt(head, 0); int64(k) < n {
			return nil, fmt.Errorf("reading the spooled message: %w", err)
		}
		m := new(message.Message)
		off, err := message.DecodeAMQPHead(m, head, size, sp.f)
		switch {
		case err == nil:
			m.BodyTail = io.NewSectionReader(sp.f, off, size-off)
			return m, nil
		case errors.Is(err, message.ErrNotStreamable) && n < min(size, maxSpoolHead):
			continue
		case errors.Is(err, message.ErrNotStreamable):
			whole := make([]byte, size)
			if k, err := sp.f.ReadAt(whole, 0); int64(k) < size {
				return nil, fmt.Errorf("reading the spooled message: %w", err)
			}
			return decodeMessage(whole)
		}
		return nil, err
	}
}
