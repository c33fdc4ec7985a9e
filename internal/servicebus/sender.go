package servicebus

import (
	"fmt"
	"sync"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/message"
)

// messageFormatBatch is the message-format of a Service Bus batch: the
// body holds one data section per message, each a complete encoded
// message (docs/wire/amqp.md §3.2).
const messageFormatBatch uint32 = 0x80013700

// Limits of one broker.Send that groups pipelined transfers.
const (
	maxGroupDeliveries = 256
	maxGroupBytes      = 4 << 20
	senderMaxUnsettled = 5000
)

// senderLink is a client sender link to an entity. Its deliveries are
// stored in arrival order by one goroutine: consecutive deliveries are
// grouped into one broker.Send (one store commit), and each delivery is
// settled once its messages are stored.
type senderLink struct {
	c    *conn
	l    *amqp.IncomingLink
	path string
	via  string // a send-via link's via entity (txn.go); "" otherwise
	// remote says that another node of a cluster serves path, the
	// send-via link's destination: its sends are transfers through via
	// (broker.SendVia, or the transaction's commit).
	remote bool
	// relayTxn is the owner's txn-id every transfer of a relayed
	// transactional link is sent in (relaytxn.go); nil otherwise.
	relayTxn []byte
	wake     chan struct{}
	done     chan struct{}
	detach   sync.Once

	// snd is the link's broker handle: a closed-loop committer whose
	// Sends are paced (see run), so the store can wait for it before an
	// fsync.
	snd *broker.Sender

	mu      sync.Mutex
	pending []*amqp.IncomingDelivery

	// Owned by run: spare is the previous batch's slice, given back to
	// pending so that onDelivery does not grow a new one for every batch;
	// msgs, group and ds are store's scratch (see there).
	spare []*amqp.IncomingDelivery
	msgs  []*message.Message
	group []decoded
	ds    []*amqp.IncomingDelivery
}

// propMaxBatchSize is the sender attach reply's link property that tells
// the client the largest batch (ulong, bytes); maxBatchSize is Service
// Bus's cap.
const (
	propMaxBatchSize frames.Symbol = "com.microsoft:max-message-batch-size"
	maxBatchSize     uint64        = 1 << 20
)

func (c *conn) attachSender(l *amqp.IncomingLink, a address) error {
	viaAddr := a.path()
	a, via, err := c.sendVia(l, a) // txn.go: send-via goes to the destination
	if err != nil {
		return c.refuse("attach", viaAddr, err)
	}
	if a.sub != subNone {
		return c.refuse("attach", a.path(), &broker.Error{Kind: broker.KindNotAllowed,
			Msg: fmt.Sprintf("Cannot send messages to '%s': it is a dead-letter sub-queue.", a.path())})
	}
	if err := c.authorize(a.path(), auth.Send); err != nil {
		return c.refuse("attach", a.path(), err)
	}
	name, maxSize, err := c.senderTarget(a, via)
	if err != nil {
		return c.refuse("attach", a.path(), err)
	}
	s := &senderLink{c: c, l: l, path: name, via: via.name, remote: via.remote, wake: make(chan struct{}, 1), done: make(chan struct{}), relayTxn: c.relayLinkTxn(l.Properties())}
	s.snd = c.ns().Broker.NewSender(name)
	s.snd.SetHolder("link " + l.Name() + " on connection " + c.containerOrAddr()) // for message histories
	// §0.2, §3.4: a non-zero max-message-size, the entity's limit; the
	// endpoint rejects larger transfers with message-size-exceeded.
	l.Reply.MaxMessageSize = maxSize
	// The batch limit, which the Go SDK (1.11) prefers to max-message-size
	// when sizing a MessageBatch: Service Bus caps one batch at 1 MB even
	// on entities whose messages may be larger, and at the message limit
	// (256 KB by default) below that.
	l.Reply.Properties = map[frames.Symbol]any{propMaxBatchSize: min(maxSize, maxBatchSize)}
	if via.name != "" {
		l.Reply.Properties[propTransferDestination] = l.Properties()[propTransferDestination]
	}
	l.MaxUnsettled = senderMaxUnsettled
	if c.h.streamFrom > 0 && c.ns().Broker.CanSpool() && !s.remote {
		l.SpoolFrom, l.Spool = int(c.h.streamFrom), s.newSpool // spool.go
	}
	l.OnDelivery = s.onDelivery
	l.OnDetach = func(error) { s.detach.Do(func() { close(s.done) }) }
	if !c.spawn(s.run) {
		return c.refuse("attach", a.path(), &broker.Error{Kind: broker.KindClosed, Msg: "The connection is closing."})
	}
	c.guard(&l.Link, s.done, a.path(), auth.Send)
	return nil
}

// senderTarget is the name and message size limit of the queue or topic
// a sender link to a sends to (via: its send-via resolution), which must
// not be moving to another node. A destination another node serves is
// checked there, at the commit: the link takes the via entity's limit.
func (c *conn) senderTarget(a address, via viaLink) (string, uint64, error) {
	if via.remote {
		return a.path(), via.maxSize, c.ns().Broker.Moving(via.name)
	}
	ref, err := c.checkEntity(a)
	if err != nil {
		return "", 0, err
	}
	name, maxSize, err := c.sendTarget(a, ref) // a queue or a topic
	if err == nil {
		err = c.ns().Broker.Moving(name) // being handed off: retriable
	}
	return name, maxSize, err
}

func (s *senderLink) onDelivery(d *amqp.IncomingDelivery) {
	s.mu.Lock()
	s.pending = append(s.pending, d)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run stores the link's deliveries as they come, each batch paced by the
// number of deliveries it holds and their bytes (broker.Sender.Pace). The handle is closed
// when the link ends.
func (s *senderLink) run() {
	defer s.snd.Close()
	defer func() {
		// Deliveries never stored: their spools go.
		s.mu.Lock()
		for _, d := range s.pending {
			if sp, ok := d.Spooled.(*spool); ok {
				sp.close()
			}
		}
		s.mu.Unlock()
	}()
	for {
		select {
		case <-s.done:
			return
		case <-s.c.ctx.Done():
			return
		case <-s.wake:
		}
		for {
			s.mu.Lock()
			batch := s.pending
			if len(batch) == 0 {
				s.mu.Unlock()
				break
			}
			s.pending, s.spare = s.spare[:0], nil
			s.mu.Unlock()
			var bytes int64
			for _, d := range batch {
				bytes += int64(len(d.Payload))
			}
			s.snd.Pace(len(batch), bytes)
			s.store(batch)
			clear(batch)
			s.spare = batch[:0]
		}
	}
}

// decoded is one transfer's messages, msgs[lo:hi] of the slice store
// decodes a batch into, or why they cannot be sent.
type decoded struct {
	d      *amqp.IncomingDelivery
	lo, hi int
	err    error
}

// store sends the deliveries in order, grouping runs of decodable ones.
// When it returns, every delivery has been stored and settled (or the link
// is closing), and the broker keeps no reference to the decoded messages
// (Send stores what it encodes, and a large body from where it lies in
// the frames, before it returns): the frames' buffers are released for
// reuse.
//
// The messages of all deliveries are decoded into one slice (s.msgs), so
// that a group's messages lie side by side and go to Send as they are;
// that slice and the group's are the link's, reused from batch to batch
// and cleared after each, so that the hot path allocates neither.
func (s *senderLink) store(ds []*amqp.IncomingDelivery) {
	msgs, group := s.msgs[:0], s.group[:0]
	defer func() {
		for _, d := range ds {
			d.Release()
			if sp, ok := d.Spooled.(*spool); ok {
				sp.close() // stored (its bytes copied) or refused
			}
		}
		clear(msgs)
		clear(group)
		s.msgs, s.group = msgs[:0], group[:0]
	}()
	bytes := 0
	flush := func() {
		if len(group) > 0 {
			s.sendGroup(group, msgs)
		}
		group, bytes = group[:0], 0
	}
	for _, d := range ds {
		select {
		case <-s.done:
			return
		default:
		}
		if ts, ok := d.State.(*frames.TransactionalState); ok {
			flush()
			s.txnSend(d, ts, false) // txn.go: recorded, applied on commit
			continue
		}
		if s.relayTxn != nil { // relaytxn.go
			flush()
			s.txnSend(d, &frames.TransactionalState{TxnID: s.relayTxn}, true)
			continue
		}
		lo := len(msgs)
		var err error
		if msgs, err = decodeTransfer(d, msgs); err != nil {
			clear(msgs[lo:])
			msgs = msgs[:lo]
			flush()
			s.settle(decoded{d: d, err: err})
			continue
		}
		if f := s.c.inject(faults.Point{Op: faults.OpSend, Entity: s.path, Link: s.l.Name(), Props: propsOf(msgs[lo:])}); f != nil {
			clear(msgs[lo:])
			msgs = msgs[:lo]
			flush()
			switch f.Kind {
			case faults.Detach:
				s.l.Close(s.c.faultError("send", s.path, f))
				return
			case faults.CloseConnection:
				s.c.faultClose("send", s.path, f)
				return
			}
			s.settle(decoded{d: d, err: f.Err()})
			continue
		}
		size := len(d.Payload)
		if sp, ok := d.Spooled.(*spool); ok {
			size = int(sp.f.Size())
		}
		if len(group) >= maxGroupDeliveries || bytes+size > maxGroupBytes {
			flush()
		}
		group = append(group, decoded{d: d, lo: lo, hi: len(msgs)})
		bytes += size
	}
	flush()
}

// sendGroup stores the group's messages (msgs[group[0].lo:], side by side)
// in one atomic broker.Send. If that fails and the group has several
// deliveries, each is retried on its own so that only the guilty ones are
// rejected.
func (s *senderLink) sendGroup(group []decoded, msgs []*message.Message) {
	err := s.send(msgs[group[0].lo:group[len(group)-1].hi])
	if err == nil {
		ds := s.ds[:0]
		for _, g := range group {
			ds = append(ds, g.d)
		}
		s.l.SettleAll(ds, &frames.Accepted{}) // copies what it keeps
		clear(ds)
		s.ds = ds[:0]
		return
	}
	if len(group) == 1 {
		group[0].err = err
		s.settle(group[0])
		return
	}
	for _, g := range group {
		g.err = s.send(msgs[g.lo:g.hi])
		s.settle(g)
	}
}

// send stores msgs with one broker.Send, traced.
func (s *senderLink) send(msgs []*message.Message) error {
	span := s.c.h.traceSend(s.path, msgs)
	var err error
	if s.remote {
		err = s.c.ns().Broker.SendVia(s.c.ctx, s.via, s.path, msgs)
	} else {
		err = s.snd.Send(s.c.ctx, msgs)
	}
	endSpan(span, err)
	return err
}

// settle answers a delivery: accepted, or rejected with the mapped
// condition (§3.3). Never released or modified: go-amqp would report those
// as success. When the entity is no longer served here (it moved to
// another node of a cluster) the link is detached instead, leaving the
// delivery unsettled: the client's send fails with the link's error,
// and the SDK attaches again (reaching the new owner) and resends; a
// rejection would be retried on this same link, in vain.
func (s *senderLink) settle(g decoded) {
	if g.err == nil {
		g.d.Settle(&frames.Accepted{})
		return
	}
	if s.c.servedElsewhere(g.err) {
		moved := &broker.Error{Kind: broker.KindMoved, Msg: fmt.Sprintf("'%s' is not served by this node any more.", s.path), Err: g.err}
		s.l.Close(detached(s.c.fail("send", s.path, moved)).amqpError())
		return
	}
	f := s.c.fail("send", s.path, g.err)
	g.d.Settle(&frames.Rejected{Error: f.amqpError()})
}

// servedElsewhere tells whether err means that an entity a link is attached to
// is not served here any more: it moved to another node. On a relayed
// connection an entity the broker does not know moved too: the gateway
// routed the link here because this node served it.
func (c *conn) servedElsewhere(err error) bool {
	k := broker.KindOf(err)
	return k == broker.KindMoved || (c.relayed && k == broker.KindNotFound)
}

// decodeTransfer decodes a transfer into its messages — one for format 0,
// one per data section for the batch format — and appends them to msgs.
// On error, some of a batch's messages may have been appended.
func decodeTransfer(d *amqp.IncomingDelivery, msgs []*message.Message) ([]*message.Message, error) {
	switch d.MessageFormat {
	case 0:
		var m *message.Message
		var err error
		if sp, ok := d.Spooled.(*spool); ok {
			m, err = decodeSpooled(sp) // spool.go
		} else {
			m, err = decodeMessage(d.Payload)
		}
		if err != nil {
			return msgs, badRequest("The message could not be decoded: %v", err)
		}
		return append(msgs, m), nil
	case messageFormatBatch:
		if n := len(d.Payload); uint64(n) > maxBatchSize {
			// Even where one message may be larger (up to 100 MB), a
			// batch is at most 1 MB, as in Service Bus.
			return msgs, &broker.Error{Kind: broker.KindMessageTooLarge,
				Msg: fmt.Sprintf("The batch is %d bytes, over the %d-byte (1 MB) limit of one batch; send large messages one by one.", n, maxBatchSize)}
		}
		var env frames.Message
		if err := env.UnmarshalBinary(d.Payload); err != nil {
			return msgs, badRequest("The batch could not be decoded: %v", err)
		}
		parts, err := frames.SplitBatch(env.RawBody)
		if err != nil {
			return msgs, badRequest("The batch could not be decoded: %v", err)
		}
		for i, p := range parts {
			m, err := decodeMessage(p)
			if err != nil {
				return msgs, badRequest("Message %d of the batch could not be decoded: %v", i, err)
			}
			msgs = append(msgs, m)
		}
		return msgs, nil
	}
	return msgs, badRequest("The message format %#x is not supported.", d.MessageFormat)
}
