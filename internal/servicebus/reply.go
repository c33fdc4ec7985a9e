package servicebus

import (
	"bytes"
	"errors"
	"strings"
	"sync"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Request/response plumbing shared by $cbs and <entity>/$management: the
// client attaches a sender link to the node (requests) and a receiver link
// from it (replies); each request carries message-id and reply-to, and
// the reply goes back with correlation-id = message-id.

// replyLink is a client receiver link of a request/response node.
type replyLink struct {
	l    *amqp.OutgoingLink
	node address

	mu      sync.Mutex
	pending []pendingReply // replies waiting for credit
	gone    bool
}

// pendingReply is an encoded reply: payload, then parts (a peek of large
// messages streams their bodies; see peekParts).
type pendingReply struct {
	payload []byte
	parts   []amqp.Part
}

// closeParts closes the streams of parts that will not be sent.
func closeParts(parts []amqp.Part) {
	for _, p := range parts {
		if p.Stream != nil {
			p.Stream.Close()
		}
	}
}

// attachReply accepts a reply link and registers it for routing.
func (c *conn) attachReply(l *amqp.OutgoingLink, a address) {
	rl := &replyLink{l: l, node: a}
	l.OnFlow = func(credit uint32, drain bool) { rl.flush() }
	l.OnDisposition = func(d *amqp.OutgoingDelivery, state frames.DeliveryState, settled bool) {
		if !settled {
			d.Settle(&frames.Accepted{})
		}
	}
	l.OnDetach = func(error, []*amqp.OutgoingDelivery) {
		rl.mu.Lock()
		for _, p := range rl.pending {
			closeParts(p.parts)
		}
		rl.gone, rl.pending = true, nil
		rl.mu.Unlock()
		c.mu.Lock()
		delete(c.replies, l)
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.replies[l] = rl
	c.mu.Unlock()
}

// sendParts sends an encoded reply that may continue in parts, or keeps
// it until the client grants credit; the link owns (closes) the parts'
// streams from now on.
func (rl *replyLink) sendParts(payload []byte, parts []amqp.Part) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.gone {
		closeParts(parts)
		return
	}
	rl.pending = append(rl.pending, pendingReply{payload: payload, parts: parts})
	rl.flushLocked()
}

func (rl *replyLink) flush() {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.flushLocked()
}

func (rl *replyLink) flushLocked() {
	for len(rl.pending) > 0 {
		p := rl.pending[0]
		err := rl.l.Send(&amqp.OutgoingDelivery{Payload: p.payload, Parts: p.parts, Settled: true})
		if errors.Is(err, amqp.ErrNoCredit) {
			return
		}
		if err != nil {
			closeParts(p.parts) // not taken by the endpoint
		}
		// Sent, or impossible to send (link closing, reply too large):
		// either way it leaves the queue.
		rl.pending[0] = pendingReply{}
		rl.pending = rl.pending[1:]
	}
}

// route finds the link for a reply (docs/wire/amqp.md §0.5): the receiver link
// whose target address equals reply-to; else the one whose name equals
// reply-to (the JS $cbs receiver has no target address); else a receiver
// of the same node in the same session.
func (c *conn) route(replyTo string, node address, session *amqp.Session) *replyLink {
	var byTarget, byName *amqp.OutgoingLink
	if replyTo != "" {
		byTarget = c.c.OutgoingLinkByTarget(replyTo)
		byName = c.c.OutgoingLink(replyTo)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range []*amqp.OutgoingLink{byTarget, byName} {
		if rl := c.replies[l]; l != nil && rl != nil {
			return rl
		}
	}
	var fallback *replyLink
	for l, rl := range c.replies {
		if rl.node.kind == node.kind && strings.EqualFold(rl.node.String(), node.String()) {
			if l.Session() == session {
				return rl
			}
			if fallback == nil {
				fallback = rl
			}
		}
	}
	return fallback
}

// attachRequests accepts a request link to $cbs or a management node.
// Each request is accepted at once (the Go SDK waits for that) and served
// on its own goroutine.
func (c *conn) attachRequests(l *amqp.IncomingLink, node address) error {
	l.Credit = 100
	l.OnDelivery = func(d *amqp.IncomingDelivery) {
		var txnID []byte
		if ts, ok := d.State.(*frames.TransactionalState); ok {
			// txn.go: the operations txnManagementOp names run in
			// the transaction; any other request is refused.
			if node.kind == nodeCBS || !txnManagementOp(d.Payload) {
				d.Settle(c.txnRequest(ts, node))
				return
			}
			txnID = bytes.Clone(ts.TxnID)
			d.Settle(&frames.TransactionalState{TxnID: ts.TxnID, Outcome: &frames.Accepted{}})
		} else if id := c.relayedRequestTxn(d.Payload); id != nil { // relaytxn.go
			if !txnManagementOp(d.Payload) {
				d.Settle(c.txnRequest(&frames.TransactionalState{TxnID: id}, node))
				return
			}
			txnID = id
			d.Settle(&frames.Accepted{})
		} else {
			d.Settle(&frames.Accepted{})
		}
		payload := d.Payload
		session := l.Session()
		var mark amqp.DispositionMark
		if node.kind != nodeCBS {
			// Settlements the client sent before this request are
			// applied before it runs (settleorder.go).
			mark = c.c.DispositionMark()
		}
		c.spawn(func() { c.serveRequest(payload, node, session, mark, txnID) })
	}
	return nil
}

// serveRequest decodes one request, runs it and routes the reply.
// txnID is the transaction a management request was sent in (nil: none).
func (c *conn) serveRequest(payload []byte, node address, session *amqp.Session, mark amqp.DispositionMark, txnID []byte) {
	var req frames.Message
	if err := req.UnmarshalBinary(payload); err != nil {
		c.log.Info("undecodable request", "node", node.String(), "err", err)
		return
	}
	if req.Properties == nil {
		req.Properties = &frames.Properties{}
	}
	if node.kind == nodeManagement && c.remote(node) {
		c.serveRelayed(payload, &req, node, session, txnID) // router.go
		return
	}
	var resp *response
	if node.kind == nodeCBS {
		resp = c.cbsRequest(&req)
	} else {
		resp = c.managementRequest(&req, node, mark, txnID)
	}
	if resp == nil {
		return // dropped by an injected fault
	}
	rl := c.route(req.Properties.ReplyTo, node, session)
	if rl == nil {
		closeParts(resp.parts)
		c.log.Info("no link to reply on", "node", node.String(), "replyTo", req.Properties.ReplyTo)
		return
	}
	out, err := resp.encode(&req)
	if err != nil {
		closeParts(resp.parts)
		c.log.Error("cannot encode reply", "node", node.String(), "err", err)
		return
	}
	rl.sendParts(out, resp.parts)
}

// response is the outcome of a request.
type response struct {
	status int32
	desc   string
	cond   frames.Symbol // error condition; "" on success
	body   any           // amqp-value body; nil for none
	// raw, if set, is the encoded body section instead of body, and parts
	// its continuation (streamed message bodies: see peekParts).
	raw   []byte
	parts []amqp.Part
}

func ok(body any) *response {
	return &response{status: statusOK, desc: "OK", body: body}
}

func failed(f failure) *response {
	return &response{status: f.status, desc: f.desc, cond: f.cond}
}

// encode builds the reply message: correlation-id = the request's
// message-id with its type (§0.4); status code and description under both
// the CBS (status-code) and management (statusCode) spellings as AMQP int
// and string (§0.3), the error condition likewise (§2.4).
func (r *response) encode(req *frames.Message) ([]byte, error) {
	m := frames.Message{
		Properties: &frames.Properties{
			CorrelationID: req.Properties.MessageID,
			To:            req.Properties.ReplyTo,
		},
		ApplicationProperties: map[string]any{
			"statusCode":         r.status,
			"statusDescription":  r.desc,
			"status-code":        r.status,
			"status-description": r.desc,
		},
	}
	if r.cond != "" {
		m.ApplicationProperties["errorCondition"] = encoding.Symbol(r.cond)
		m.ApplicationProperties["error-condition"] = encoding.Symbol(r.cond)
	}
	if r.raw != nil {
		m.RawBody = r.raw
	} else if r.body != nil {
		var err error
		if m.RawBody, err = frames.AppendValueSection(nil, r.body); err != nil {
			return nil, err
		}
	}
	return m.MarshalBinary()
}
