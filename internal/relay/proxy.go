package relay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/servicebus"
)

// senderCredit is the credit of a relayed sender link: the deliveries a
// gateway holds for it at most, and so the transfers it keeps in flight
// to the owner.
const senderCredit = 256

// senderBudget bounds the bytes a relayed sender link can make the
// gateway hold (it holds each transfer whole): the link's credit is cut
// so that credit × the entity's max-message-size stays within it, down to
// one delivery for an entity whose messages may be as large as this.
const senderBudget = 256 << 20

// relayCredit is the credit of a relayed sender link to an entity whose
// messages may be maxSize bytes (0: no limit given).
func relayCredit(maxSize uint64) uint32 {
	if maxSize == 0 || maxSize >= senderBudget {
		return 1
	}
	return uint32(min(senderBudget/maxSize, senderCredit))
}

// AttachSender implements servicebus.Router: the client's transfers go to
// an internal sender link on the owner, in order and pipelined (up to
// senderCredit in flight), and each is settled with the owner's outcome
// as it arrives (sendPump). A transfer whose outcome is unknown (the
// internal link failed) is rejected server-busy, and so is every other
// one in flight; the client link is detached, and nothing is retried by
// the relay.
func (g *Gateway) AttachSender(l *amqp.IncomingLink, r servicebus.Relayed) error {
	c := l.Conn()
	queue := make(chan *amqp.IncomingDelivery, senderCredit)
	gone := make(chan struct{})
	l.Credit, l.MaxUnsettled = senderCredit, senderCredit
	l.OnDelivery = func(d *amqp.IncomingDelivery) {
		select {
		case queue <- d: // room for every unsettled one: MaxUnsettled
		default: // presettled ones past the credit the gateway gave
			d.Settle(&frames.Rejected{Error: &frames.Error{Condition: frames.Symbol(goamqp.ErrCondResourceLimitExceeded),
				Description: "Too many transfers in flight on a relayed link; wait for their outcomes."}})
		}
	}
	var once sync.Once
	l.OnDetach = func(error) { once.Do(func() { close(gone) }) }
	ok := g.spawn(func() {
		ctx, cancel := g.linkContext(gone)
		defer cancel()
		var p *peerConn
		var snd *goamqp.Sender
		err := g.attachParked(ctx, c, r.Unit, g.cfg.Timeout, func(actx context.Context, q *peerConn) (err error) {
			p = q
			snd, err = q.sess.NewSender(actx, l.TargetAddress(), senderOptions(l.Name(), l.Properties(), r, nil))
			return err
		})
		if err != nil {
			l.CompleteAttach(amqpError(err))
			if r.Refused != nil {
				r.Refused()
			}
			return
		}
		defer closeLink(snd.Close)
		l.Reply.MaxMessageSize = snd.MaxMessageSize()
		l.Reply.Properties = symbolKeys(snd.Properties())
		l.Credit = relayCredit(snd.MaxMessageSize()) // granted once the attach completes
		l.MaxUnsettled = int(l.Credit)
		l.CompleteAttach(nil)
		txs := &txnSenders{p: p, target: l.TargetAddress(), name: l.Name(), r: r}
		defer txs.close()
		sp := &sendPump{g: g, l: l, p: p, snd: snd, txs: txs, queue: queue,
			inflight: make(chan sent, senderCredit), drained: make(chan struct{}, 1)}
		sp.run(ctx)
	})
	if !ok {
		return errors.New("relay: the gateway is closed")
	}
	return amqp.ErrAttachDeferred
}

// errDetachForced detaches a client's relayed link whose internal link
// failed: the client attaches again and is routed to the current owner.
var errDetachForced = &amqp.Error{Condition: frames.Symbol(goamqp.ErrCondDetachForced), Description: "The link to the node serving the entity failed; attach again."}

// sendPump relays one sender link's transfers. Its goroutine (send)
// takes the client's deliveries in order and sends each on the internal
// link without waiting for the owner's outcome; a second goroutine
// (settle, owned and waited for by run) waits for the outcomes in the
// same order and settles the client's deliveries with them:
//
//	queue ──► send ──SendWithReceipt──► owner
//	            │ inflight (FIFO, ≤ senderCredit)
//	            ▼
//	          settle ──Receipt.Wait──► d.Settle(owner's outcome)
//
// Transfers of one internal link reach the owner in order. A transfer
// for another internal link (a transaction's, txn.go) is sent only once
// every earlier one has its outcome, so that the order between links is
// the client's too.
type sendPump struct {
	g     *Gateway
	l     *amqp.IncomingLink
	p     *peerConn
	snd   *goamqp.Sender
	txs   *txnSenders
	queue <-chan *amqp.IncomingDelivery

	inflight chan sent     // sent, outcome not yet given to the client
	pending  atomic.Int64  // entries of inflight not settled yet
	drained  chan struct{} // a token when pending dropped to 0
}

// sent is one client delivery on its way: the receipt of its transfer
// to the owner, or why it could not be sent (err).
type sent struct {
	d   *amqp.IncomingDelivery
	ts  *frames.TransactionalState // the client's, for a transactional transfer
	rc  goamqp.SendReceipt
	err error
}

// run relays until the link or ctx ends, or the internal link fails.
func (sp *sendPump) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sp.settle(ctx, cancel)
	}()
	sp.send(ctx)
	close(sp.inflight)
	wg.Wait()
}

// send is the pump's sending side; it returns when ctx ends.
func (sp *sendPump) send(ctx context.Context) {
	var last *goamqp.Sender // the internal link of the transfers in flight
	var lastTxn string      // the client's txn-id, when last is a transaction's
	for {
		var d *amqp.IncomingDelivery
		select {
		case d = <-sp.queue:
		case <-ctx.Done():
			return
		}
		var m goamqp.Message
		if err := m.UnmarshalBinary(d.Payload); err != nil {
			d.Settle(&frames.Rejected{Error: &frames.Error{Condition: frames.Symbol(goamqp.ErrCondDecodeError), Description: err.Error()}})
			continue
		}
		m.Format = d.MessageFormat
		to := sp.snd
		ts, _ := d.State.(*frames.TransactionalState)
		if ts != nil { // txn.go
			// Getting another transaction's link may close the one in
			// flight (maxTxnSenders): let it finish first.
			if last != nil && last != sp.snd && lastTxn != string(ts.TxnID) && !sp.drain(ctx) {
				return
			}
			var ferr *frames.Error
			if to, ferr = sp.txs.get(ctx, ts.TxnID); ferr != nil {
				d.Settle(&frames.Rejected{Error: ferr})
				continue
			}
		}
		if to != last {
			if !sp.drain(ctx) {
				return
			}
			last, lastTxn = to, ""
			if ts != nil {
				lastTxn = string(ts.TxnID)
			}
		}
		rc, err := to.SendWithReceipt(ctx, &m, nil)
		sp.pending.Add(1)
		sp.inflight <- sent{d: d, ts: ts, rc: rc, err: err} // waits while senderCredit are in flight
	}
}

// drain waits until every transfer sent has its outcome; false when ctx
// ended first.
func (sp *sendPump) drain(ctx context.Context) bool {
	for sp.pending.Load() > 0 {
		select {
		case <-sp.drained:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// settle is the pump's settling side: it returns when inflight is closed
// and empty. When the internal link fails it stops the sending side
// (cancel), fails every delivery in flight and detaches the client link.
func (sp *sendPump) settle(ctx context.Context, cancel context.CancelFunc) {
	for s := range sp.inflight {
		err := s.err
		var state goamqp.DeliveryState
		if err == nil {
			state, err = s.rc.Wait(ctx)
		}
		var ae *goamqp.Error
		switch {
		case err == nil:
			switch state := state.(type) {
			case *goamqp.StateAccepted:
				if s.ts != nil {
					s.d.Settle(&frames.TransactionalState{TxnID: s.ts.TxnID, Outcome: &frames.Accepted{}})
				} else {
					s.d.Settle(&frames.Accepted{})
				}
			case *goamqp.StateRejected:
				e := &frames.Error{Condition: frames.ErrCondInternalError, Description: "The node serving the entity rejected the message."}
				if state.Error != nil {
					e = frameError(state.Error)
				}
				s.d.Settle(&frames.Rejected{Error: e})
			default: // not an outcome the owner gives a transfer: not stored
				s.d.Settle(&frames.Rejected{Error: &frames.Error{Condition: frames.ErrCondInternalError,
					Description: fmt.Sprintf("The node serving the entity answered %T; the message was not sent.", state)}})
			}
		case s.err != nil && errors.As(err, &ae) && ctx.Err() == nil:
			// Refused before it was sent (too large, say).
			s.d.Settle(&frames.Rejected{Error: frameError(err)})
		default:
			// Outcome unknown: fail it and every one in flight, detach,
			// let the client retry.
			stopping := ctx.Err() != nil // the client link or the gateway went
			cancel()
			sp.fail(s.d, err)
			for s := range sp.inflight { // until send returned
				sp.fail(s.d, err)
			}
			if !stopping {
				sp.l.Close(errDetachForced)
				if !isRemote(err) {
					sp.g.forget(sp.l.Conn(), sp.p)
				}
			}
			return
		}
		sp.settled()
	}
}

// settled counts one delivery settled.
func (sp *sendPump) settled() {
	if sp.pending.Add(-1) == 0 {
		select {
		case sp.drained <- struct{}{}:
		default: // a token is there already
		}
	}
}

// fail rejects d, whose outcome is unknown: err is the internal link's
// failure (com.microsoft:server-busy unless it is the owner's detach).
func (sp *sendPump) fail(d *amqp.IncomingDelivery, err error) {
	d.Settle(&frames.Rejected{Error: frameError(err)})
}

// isRemote says whether err is the owner's answer (the connection is
// fine) rather than a failure of the internal connection (which may
// carry the owner's close error: it is shutting down).
func isRemote(err error) bool {
	var ce *goamqp.ConnError
	var se *goamqp.SessionError
	if errors.As(err, &ce) || errors.As(err, &se) {
		return false
	}
	var ae *goamqp.Error
	var le *goamqp.LinkError
	return errors.As(err, &ae) || errors.As(err, &le) && le.RemoteErr != nil
}

func closeLink(f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	_ = f(ctx)
}

// receiverProxy relays one receiver link.
type receiverProxy struct {
	g   *Gateway
	l   *amqp.OutgoingLink
	rcv *goamqp.Receiver
	r   servicebus.Relayed
	p   *peerConn // the internal connection rcv is on

	mu      sync.Mutex
	issued  uint32                                     // internal credit not yet used by the owner
	pending map[*amqp.OutgoingDelivery]*goamqp.Message // sent unsettled to the client
	wake    chan struct{}                              // the client's flow changed
	drain   bool                                       // the client asked to drain
}

// AttachReceiver implements servicebus.Router: the client's credit is
// passed on to an internal receiver link on the owner, its deliveries
// come back with the owner's tags (the lock tokens), and the client's
// dispositions go to the owner, whose answer settles them.
func (g *Gateway) AttachReceiver(l *amqp.OutgoingLink, r servicebus.Relayed) error {
	c := l.Conn()
	rp := &receiverProxy{g: g, l: l, r: r, pending: make(map[*amqp.OutgoingDelivery]*goamqp.Message), wake: make(chan struct{}, 1)}
	gone := make(chan struct{})
	var once sync.Once
	l.OnDetach = func(error, []*amqp.OutgoingDelivery) { once.Do(func() { close(gone) }) }
	l.OnFlow = func(credit uint32, drain bool) {
		if drain {
			l.DeferDrain()
		}
		rp.mu.Lock()
		rp.drain = rp.drain || drain
		rp.mu.Unlock()
		select {
		case rp.wake <- struct{}{}:
		default:
		}
	}
	l.OnDisposition = rp.onDisposition
	ok := g.spawn(func() {
		ctx, cancel := g.linkContext(gone)
		defer cancel()
		err := g.attachParked(ctx, c, r.Unit, attachWait(l.Properties(), g.cfg.Timeout), func(actx context.Context, p *peerConn) (err error) {
			rp.p = p
			rcvMode := goamqp.ReceiverSettleModeFirst
			if l.ReceiverSettleMode() == frames.ReceiverSettleModeSecond {
				rcvMode = goamqp.ReceiverSettleModeSecond
			}
			sndMode := goamqp.SenderSettleModeUnsettled
			if l.SenderSettleMode() == frames.SenderSettleModeSettled {
				sndMode = goamqp.SenderSettleModeSettled
			}
			rp.rcv, err = p.sess.NewReceiver(actx, l.SourceAddress(), &goamqp.ReceiverOptions{
				Name:                      l.Name(),
				Credit:                    -1,
				Properties:                attachProps(l.Properties(), r),
				SettlementMode:            rcvMode.Ptr(),
				RequestedSenderSettleMode: sndMode.Ptr(),
				Filters:                   filters(l.Source()),
			})
			return err
		})
		p := rp.p
		if err != nil {
			l.CompleteAttach(amqpError(err))
			if r.Refused != nil {
				r.Refused()
			}
			return
		}
		defer closeLink(rp.rcv.Close)
		l.Reply.Properties = symbolKeys(rp.rcv.Properties())
		if src := l.Source(); src != nil && len(src.Filter) > 0 {
			echo := *l.Reply.Source
			echo.Filter = make(map[frames.Symbol]any, len(src.Filter))
			for name, v := range src.Filter {
				got := rp.rcv.LinkSourceFilterValue(string(name))
				switch d := v.(type) {
				case *encoding.Described:
					echo.Filter[name] = &encoding.Described{Descriptor: d.Descriptor, Value: got}
				case encoding.Described:
					echo.Filter[name] = encoding.Described{Descriptor: d.Descriptor, Value: got}
				default:
					echo.Filter[name] = got
				}
			}
			l.Reply.Source = &echo
		}
		l.CompleteAttach(nil)
		if err := rp.run(ctx); ctx.Err() == nil {
			if isRemote(err) {
				l.Close(amqpError(err)) // the owner's answer, as it is
			} else {
				// The internal connection failed (the owner died or moved):
				// a detach the SDKs answer by attaching again, which finds
				// the unit's new owner. (With server-busy the Go SDK keeps
				// the detached link and never receives again.)
				l.Close(errDetachForced)
				g.forget(c, p)
			}
		}
	})
	if !ok {
		return errors.New("relay: the gateway is closed")
	}
	return amqp.ErrAttachDeferred
}

// run forwards deliveries and credit until the link or ctx ends, and
// returns why (never nil).
func (rp *receiverProxy) run(ctx context.Context) error {
	for {
		rp.flow()
		rp.mu.Lock()
		drain := rp.drain
		rp.drain = false
		rp.mu.Unlock()
		if drain {
			if err := rp.rcv.DrainCredit(ctx, nil); err != nil {
				return err
			}
			for m := rp.rcv.Prefetched(); m != nil; m = rp.rcv.Prefetched() {
				rp.forward(m)
			}
			rp.mu.Lock()
			rp.issued = 0
			rp.mu.Unlock()
			rp.l.CompleteDrain()
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-rp.wake:
				select { // put it back for the loop
				case rp.wake <- struct{}{}:
				default:
				}
				cancel()
			case <-stop:
			}
		}()
		m, err := rp.rcv.Receive(rctx, nil)
		close(stop)
		woken := rctx.Err() != nil && ctx.Err() == nil
		cancel()
		select {
		case <-rp.wake:
		default:
		}
		switch {
		case err == nil:
			rp.forward(m)
		case woken:
		default:
			return err
		}
	}
}

// flow tops the internal credit up to the client's.
func (rp *receiverProxy) flow() {
	credit := rp.l.Credit()
	rp.mu.Lock()
	var add uint32
	if credit > rp.issued {
		add = credit - rp.issued
		rp.issued = credit
	}
	rp.mu.Unlock()
	if add > 0 {
		_ = rp.rcv.IssueCredit(add)
	}
}

// forward sends an owner's delivery to the client.
func (rp *receiverProxy) forward(m *goamqp.Message) {
	rp.mu.Lock()
	if rp.issued > 0 {
		rp.issued--
	}
	rp.mu.Unlock()
	payload, err := deliveryPayload(m)
	if err != nil {
		_ = rp.rcv.ReleaseMessage(context.Background(), m)
		return
	}
	d := &amqp.OutgoingDelivery{Tag: m.DeliveryTag, Payload: payload, MessageFormat: m.Format}
	settled := rp.l.SenderSettleMode() == frames.SenderSettleModeSettled
	if !settled {
		rp.mu.Lock()
		rp.pending[d] = m
		rp.mu.Unlock()
	}
	if err := rp.l.Send(d); err != nil {
		rp.mu.Lock()
		delete(rp.pending, d)
		rp.mu.Unlock()
		if !settled {
			_ = rp.rcv.ReleaseMessage(context.Background(), m)
		}
	}
}

// onDisposition passes a client's disposition to the owner, on its own
// goroutine, and settles the client's delivery with the owner's answer.
//
// The owner's answer: go-amqp (v1.7) tells of the disposition the owner
// answers a Receiver's AcceptMessage, RejectMessage, ReleaseMessage or
// ModifyMessage with only whether it was rejected with an error (that
// error is returned; any other answer is nil), and calls no
// OnDeliveryStateChanged for it. The relay can still give the client the
// owner's own answer because the owner (internal/servicebus receiver.go
// onDisposition) answers a disposition in exactly two ways:
//
//   - applied: servicebus.SettleReply of the state the gateway sent
//     (servicebus.TxnSettleReply for a transactional one, txn.go), a
//     function of that state alone, which is what the client is told;
//   - not applied: rejected with an error — a lost lock, a failed
//     commit, a refusal (a transaction's, an outcome that settles
//     nothing), or a disposition of a delivery it no longer tracks
//     (AnswerUnknownDispositions) — which go-amqp returns and the client
//     is told as it is.
//
// It never answers released, modified or rejected without an error for
// another requested outcome. TestRelayOwnerOutcomes pins this: every
// outcome a client can send is answered through a gateway as by the
// owner itself, and leaves the message in the same state. A state that
// settles nothing is refused by the gateway without asking the owner
// (as the owner refuses it, Relayed.RefuseOutcome), the lock kept.
func (rp *receiverProxy) onDisposition(d *amqp.OutgoingDelivery, state frames.DeliveryState, settled bool) {
	rp.mu.Lock()
	m := rp.pending[d]
	delete(rp.pending, d)
	rp.mu.Unlock()
	if m == nil || rp.rcv == nil {
		if !settled {
			d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condLockLost, Description: "The lock supplied is invalid."}})
		}
		return
	}
	rp.g.spawn(func() {
		ctx, cancel := context.WithTimeout(rp.g.ctx, rp.g.cfg.Timeout)
		defer cancel()
		var err error
		if ts, ok := state.(*frames.TransactionalState); ok { // txn.go
			reply, ferr := rp.txnDisposition(ctx, m, ts)
			switch {
			case settled:
			case ferr != nil:
				d.Settle(&frames.Rejected{Error: ferr})
			default:
				d.Settle(reply)
			}
			return
		}
		reply, ok := servicebus.SettleReply(state)
		if !ok {
			// Settles nothing: refused here as the owner refuses it, the
			// lock kept.
			if !settled {
				d.Settle(&frames.Rejected{Error: rp.r.RefuseOutcome(state)})
			}
			return
		}
		switch s := state.(type) {
		case *frames.Accepted:
			err = rp.rcv.AcceptMessage(ctx, m)
		case *frames.Rejected:
			var e *goamqp.Error
			if s.Error != nil {
				e = &goamqp.Error{Condition: goamqp.ErrCond(s.Error.Condition), Description: s.Error.Description, Info: stringKeys(s.Error.Info)}
			}
			err = rp.rcv.RejectMessage(ctx, m, e)
		case *frames.Modified:
			err = rp.rcv.ModifyMessage(ctx, m, &goamqp.ModifyMessageOptions{DeliveryFailed: s.DeliveryFailed,
				UndeliverableHere: s.UndeliverableHere, Annotations: annotations(s.MessageAnnotations)})
		default: // released, or no outcome
			err = rp.rcv.ReleaseMessage(ctx, m)
		}
		if settled {
			return
		}
		switch {
		case err == nil:
			d.Settle(reply) // what the owner answered (see above)
		case isRemote(err):
			d.Settle(&frames.Rejected{Error: frameError(err)})
		default:
			d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condLockLost, Description: "The lock supplied is invalid: the node serving the entity could not be reached."}})
		}
	})
}

func stringKeys(m map[frames.Symbol]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}

func annotations(m map[frames.Symbol]any) goamqp.Annotations {
	if m == nil {
		return nil
	}
	out := make(goamqp.Annotations, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}

// Request implements servicebus.Router: the request goes to the owner's
// management node on an internal link pair (one per management node and
// client connection, requests one at a time), with reply-to set to the
// internal reply link; the owner's response is returned as it is.
func (g *Gateway) Request(ctx context.Context, c *amqp.Conn, node string, payload []byte, r servicebus.Relayed) ([]byte, error) {
	out, err := g.request(ctx, c, node, payload, r)
	var ae *amqp.Error
	var or *servicebus.OwnerRefusal
	var re *servicebus.RemoteError
	if err != nil && !errors.As(err, &ae) && !errors.As(err, &or) && !errors.As(err, &re) {
		// The owner could not be asked, or did not answer (its link or
		// the internal connection failed): retriable, as for links. What
		// the owner itself refused keeps its condition.
		err = amqpError(err)
	}
	return out, err
}

func (g *Gateway) request(ctx context.Context, c *amqp.Conn, node string, payload []byte, r servicebus.Relayed) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	p, err := g.peer(ctx, c, r.Unit)
	if err != nil {
		return nil, err
	}
	var txnID []byte
	if r.InTxn != nil { // txn.go: on the connection the transaction is on
		if p != r.InTxn.Peer {
			return nil, errTxnMoved(r.Unit)
		}
		txnID = r.InTxn.ID
	}
	return p.request(ctx, c, node, payload, r, txnID)
}

// request sends one management request on p (in the owner's transaction
// txnID, if not nil) and returns the response.
func (p *peerConn) request(ctx context.Context, c *amqp.Conn, node string, payload []byte, r servicebus.Relayed, txnID []byte) ([]byte, error) {
	g := p.g
	var err error
	p.mgmtMu.Lock()
	defer p.mgmtMu.Unlock()
	mp := p.mgmt[node]
	if mp == nil {
		mp = &mgmtPair{}
		replyTo := node + "-relay"
		props := relayProps(r)
		if mp.snd, err = p.sess.NewSender(ctx, node, &goamqp.SenderOptions{Properties: props}); err == nil {
			mp.rcv, err = p.sess.NewReceiver(ctx, node, &goamqp.ReceiverOptions{TargetAddress: replyTo, Properties: props, Credit: 16})
		}
		if err != nil {
			if mp.snd != nil {
				closeLink(mp.snd.Close)
			}
			if !isRemote(err) {
				g.forget(c, p)
				return nil, err
			}
			e := amqpError(err)
			return nil, &servicebus.OwnerRefusal{Condition: e.Condition, Description: e.Description}
		}
		p.mgmt[node] = mp
	}
	var m goamqp.Message
	if err := m.UnmarshalBinary(payload); err != nil {
		return nil, err
	}
	if m.Properties == nil {
		m.Properties = &goamqp.MessageProperties{}
	}
	m.Properties.ReplyTo = ptr(node + "-relay")
	if txnID != nil {
		if m.ApplicationProperties == nil {
			m.ApplicationProperties = map[string]any{}
		}
		m.ApplicationProperties[servicebus.RelayTxnProperty] = txnID
	}
	if err := mp.snd.Send(ctx, &m, nil); err != nil {
		delete(p.mgmt, node)
		return nil, err
	}
	for {
		resp, err := mp.rcv.Receive(ctx, nil)
		if err != nil {
			delete(p.mgmt, node)
			return nil, err
		}
		_ = mp.rcv.AcceptMessage(ctx, resp)
		if resp.Properties != nil && m.Properties.MessageID != nil && resp.Properties.CorrelationID != nil &&
			!reflect.DeepEqual(resp.Properties.CorrelationID, m.Properties.MessageID) {
			continue // a late answer to an earlier request that timed out
		}
		return resp.MarshalBinary()
	}
}

func ptr[T any](v T) *T { return &v }

// linkContext is the context of one relayed link's goroutine: done when
// the client's link goes (gone is closed) or the gateway stops. Its
// watcher ends with it.
func (g *Gateway) linkContext(gone <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(g.ctx)
	go func() {
		select {
		case <-gone:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}
