// Package nullbroker is an AMQP 1.0 server that does no broker work, for
// measuring what the load generator alone costs (busbar-bench target
// "null"). It runs on Busbar's own endpoint (internal/amqp), so the
// connection, session, framing and flow-control costs are Busbar's, and
// everything above them is skipped:
//
//   - $cbs put-token is answered with status 202 at once (the token is
//     not checked); a $management request gets status 200 and an empty
//     map (W1 and W2 need none).
//   - every transfer on a client sender link is settled Accepted at once
//     and dropped (no storage);
//   - a client receiver link gets one pre-encoded message (1 KB body by
//     default, with the annotations a Service Bus peek-lock delivery
//     carries and a 16-byte lock-token delivery tag, as
//     servicebus/delivery.go sends them) for every unit of credit, without
//     end; each disposition the client leaves unsettled is answered at
//     once with a settled Accepted.
package nullbroker

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Handler is the null broker's amqp.Handler.
type Handler struct {
	payload []byte
	tags    atomic.Uint64
	// Counters, for the process's exit line.
	Received  atomic.Int64 // transfers accepted
	Delivered atomic.Int64 // messages sent to receivers
	Settled   atomic.Int64 // dispositions answered
}

// New returns a handler whose receivers get messages with a body of
// size bytes.
func New(size int) (*Handler, error) {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	m := frames.Message{
		Header: &frames.Header{Durable: true, Priority: 4},
		MessageAnnotations: map[frames.Symbol]any{
			"x-opt-sequence-number":         int64(1),
			"x-opt-enqueue-sequence-number": int64(1),
			"x-opt-enqueued-time":           now,
			"x-opt-locked-until":            now.Add(5 * time.Minute),
		},
		Properties: &frames.Properties{MessageID: "null-broker-message"},
		RawBody:    frames.AppendDataSection(nil, body),
	}
	p, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &Handler{payload: p}, nil
}

// Connect implements amqp.Handler.
func (h *Handler) Connect(c *amqp.Conn) (amqp.ConnHandler, error) {
	return &conn{h: h, c: c, replies: map[*amqp.OutgoingLink]*replyLink{}}, nil
}

type conn struct {
	h *Handler
	c *amqp.Conn

	mu      sync.Mutex
	replies map[*amqp.OutgoingLink]*replyLink
}

func (c *conn) Disconnected(error) {}

// isNode reports whether addr is a request/response node ($cbs or an
// entity's $management).
func isNode(addr string) bool {
	return addr == "$cbs" || strings.HasSuffix(strings.ToLower(addr), "$management")
}

func (c *conn) AttachIncoming(l *amqp.IncomingLink) error {
	if isNode(l.TargetAddress()) {
		l.Credit = 100
		l.OnDelivery = func(d *amqp.IncomingDelivery) {
			d.Settle(&frames.Accepted{})
			c.request(d.Payload, l.TargetAddress() == "$cbs")
		}
		return nil
	}
	accepted := &frames.Accepted{}
	l.OnDelivery = func(d *amqp.IncomingDelivery) {
		c.h.Received.Add(1)
		d.Settle(accepted)
	}
	return nil
}

func (c *conn) AttachOutgoing(l *amqp.OutgoingLink) error {
	if isNode(l.SourceAddress()) {
		rl := &replyLink{l: l}
		l.OnFlow = func(uint32, bool) { rl.flush() }
		l.OnDisposition = func(d *amqp.OutgoingDelivery, _ frames.DeliveryState, settled bool) {
			if !settled {
				d.Settle(&frames.Accepted{})
			}
		}
		l.OnDetach = func(error, []*amqp.OutgoingDelivery) {
			c.mu.Lock()
			delete(c.replies, l)
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.replies[l] = rl
		c.mu.Unlock()
		return nil
	}
	settled := l.SenderSettleMode() == frames.SenderSettleModeSettled
	l.OnFlow = func(uint32, bool) {
		// One message per unit of credit; a drain then finds none left.
		for l.Credit() > 0 {
			tag := make([]byte, 16)
			binary.BigEndian.PutUint64(tag[8:], c.h.tags.Add(1))
			tag[0] = 0x4e // version-4-looking, never all zero
			if err := l.Send(&amqp.OutgoingDelivery{Tag: tag, Payload: c.h.payload, Settled: settled}); err != nil {
				return
			}
			c.h.Delivered.Add(1)
		}
	}
	accepted := &frames.Accepted{}
	l.OnDisposition = func(d *amqp.OutgoingDelivery, _ frames.DeliveryState, isSettled bool) {
		c.h.Settled.Add(1)
		if !isSettled {
			d.Settle(accepted)
		}
	}
	return nil
}

// request answers a $cbs or $management request on the reply link
// whose target is the request's reply-to.
func (c *conn) request(payload []byte, cbs bool) {
	var req frames.Message
	if err := req.UnmarshalBinary(payload); err != nil || req.Properties == nil {
		return
	}
	status, desc := int32(200), "OK"
	if cbs {
		status, desc = 202, "Accepted"
	}
	resp := frames.Message{
		Properties: &frames.Properties{CorrelationID: req.Properties.MessageID, To: req.Properties.ReplyTo},
		ApplicationProperties: map[string]any{
			"statusCode": status, "statusDescription": desc,
			"status-code": status, "status-description": desc,
		},
	}
	if !cbs {
		body, err := frames.AppendValueSection(nil, map[string]any{})
		if err != nil {
			return
		}
		resp.RawBody = body
	}
	out, err := resp.MarshalBinary()
	if err != nil {
		return
	}
	target := c.c.OutgoingLinkByTarget(req.Properties.ReplyTo)
	if target == nil {
		target = c.c.OutgoingLink(req.Properties.ReplyTo)
	}
	c.mu.Lock()
	rl := c.replies[target]
	if rl == nil {
		for _, r := range c.replies { // the JS-style fallback: any reply link
			rl = r
			break
		}
	}
	c.mu.Unlock()
	if rl != nil {
		rl.send(out)
	}
}

// replyLink holds replies until the client grants credit.
type replyLink struct {
	l       *amqp.OutgoingLink
	mu      sync.Mutex
	pending [][]byte
}

func (rl *replyLink) send(p []byte) {
	rl.mu.Lock()
	rl.pending = append(rl.pending, p)
	rl.mu.Unlock()
	rl.flush()
}

func (rl *replyLink) flush() {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for len(rl.pending) > 0 {
		err := rl.l.Send(&amqp.OutgoingDelivery{Payload: rl.pending[0], Settled: true})
		if errors.Is(err, amqp.ErrNoCredit) {
			return
		}
		rl.pending = rl.pending[1:]
	}
}
