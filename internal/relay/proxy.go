package relay

import (
	"context"
	"errors"
	"reflect"
	"sync"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/servicebus"
)

// senderCredit is the credit of a relayed sender link: the deliveries a
// gateway holds for it at most.
const senderCredit = 64

// AttachSender implements servicebus.Router: the client's transfers go to
// an internal sender link on the owner, one at a time in order, and each
// is settled with the owner's outcome. A transfer whose outcome is
// unknown (the internal link failed) is rejected server-busy and the
// client link detached, never retried by the relay.
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
		l.CompleteAttach(nil)
		txs := &txnSenders{p: p, target: l.TargetAddress(), name: l.Name(), r: r}
		defer txs.close()
		for {
			var d *amqp.IncomingDelivery
			select {
			case d = <-queue:
			case <-ctx.Done():
				return
			}
			var m goamqp.Message
			if err := m.UnmarshalBinary(d.Payload); err != nil {
				d.Settle(&frames.Rejected{Error: &frames.Error{Condition: frames.Symbol(goamqp.ErrCondDecodeError), Description: err.Error()}})
				continue
			}
			m.Format = d.MessageFormat
			var ts *frames.TransactionalState
			to := snd
			if ts, _ = d.State.(*frames.TransactionalState); ts != nil { // txn.go
				var ferr *frames.Error
				if to, ferr = txs.get(ctx, ts.TxnID); ferr != nil {
					d.Settle(&frames.Rejected{Error: ferr})
					continue
				}
			}
			err := to.Send(ctx, &m, nil)
			var ae *goamqp.Error
			switch {
			case err == nil && ts != nil:
				d.Settle(&frames.TransactionalState{TxnID: ts.TxnID, Outcome: &frames.Accepted{}})
			case err == nil:
				d.Settle(&frames.Accepted{})
			case errors.As(err, &ae):
				d.Settle(&frames.Rejected{Error: frameError(err)})
			default:
				// Outcome unknown: fail it, detach, let the client retry.
				d.Settle(&frames.Rejected{Error: frameError(err)})
				l.Close(errDetachForced)
				if !isRemote(err) {
					g.forget(c, p)
				}
				return
			}
		}
	})
	if !ok {
		return errors.New("relay: the gateway is closed")
	}
	return amqp.ErrAttachDeferred
}

// errDetachForced detaches a client's relayed link whose internal link
// failed: the client attaches again and is routed to the current owner.
var errDetachForced = &amqp.Error{Condition: frames.Symbol(goamqp.ErrCondDetachForced), Description: "The link to the node serving the entity failed; attach again."}

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
		switch s := state.(type) {
		case *frames.Accepted, nil:
			err = rp.rcv.AcceptMessage(ctx, m)
		case *frames.Rejected:
			var e *goamqp.Error
			if s.Error != nil {
				e = &goamqp.Error{Condition: goamqp.ErrCond(s.Error.Condition), Description: s.Error.Description, Info: stringKeys(s.Error.Info)}
			}
			err = rp.rcv.RejectMessage(ctx, m, e)
		case *frames.Released:
			err = rp.rcv.ReleaseMessage(ctx, m)
		case *frames.Modified:
			err = rp.rcv.ModifyMessage(ctx, m, &goamqp.ModifyMessageOptions{DeliveryFailed: s.DeliveryFailed,
				UndeliverableHere: s.UndeliverableHere, Annotations: annotations(s.MessageAnnotations)})
		default:
			err = rp.rcv.ReleaseMessage(ctx, m)
		}
		if settled {
			return
		}
		switch {
		case err == nil:
			d.Settle(ownerOutcome(state))
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
