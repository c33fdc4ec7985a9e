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
//
// With Forward set (busbar-null --forward, which busbar-bench uses for
// W3 only) the links that are not $cbs or $management behave
// differently, on every address, and nothing pre-encoded is sent:
//
//   - a transfer on a client sender link to address A is handed, as the
//     client encoded it (its bytes unchanged: no annotations added), to
//     a receiver link attached to A that has credit (round robin when
//     there are several), and the transfer is settled Accepted at once;
//   - when no receiver of A has credit the message is held in A's
//     in-memory FIFO (at most MaxHeld messages; beyond that the transfer
//     is rejected with amqp:resource-limit-exceeded), and handed on, in
//     order, as credit arrives; deliveries a detaching receiver had not
//     yet sent go back to the front of the FIFO;
//   - deliveries carry a 16-byte lock-token-like tag, and dispositions
//     are answered at once, as in the default mode.
//
// Nothing is stored: messages delivered and not yet settled by a
// receiver that goes away are lost.
//
// With a Journal (busbar-null --sync DIR, the target null-durable) the
// broker is durable at the least cost there is: each transfer's payload
// and each settlement the client asks for is appended to one preallocated
// file, and it is settled — and, with Forward, handed on to a receiver —
// only after the fdatasync of a group commit that covers it (see
// Journal). Nothing is read back.
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

	// Forward selects the forwarding mode (see the package comment).
	// Set it, and MaxHeld, before the server starts.
	Forward bool
	// MaxHeld bounds the messages held per address in forwarding mode
	// (DefaultMaxHeld when 0).
	MaxHeld int
	// Journal, when set, makes the broker durable: transfers and the
	// client's settlements are settled only once the journal has synced
	// them (see Journal); with Forward, a message is also handed on only
	// then.
	Journal *Journal

	mu    sync.Mutex
	addrs map[string]*address
}

// DefaultMaxHeld is MaxHeld's default: 100,000 messages per address.
const DefaultMaxHeld = 100000

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
	if c.h.Forward {
		a := c.h.address(l.TargetAddress())
		full := &frames.Rejected{Error: &frames.Error{Condition: frames.ErrCondResourceLimitExceeded, Description: "null broker: address holds the maximum of messages"}}
		if j := c.h.Journal; j != nil {
			// Durable forwarding: handed on only once synced.
			l.OnDelivery = func(d *amqp.IncomingDelivery) {
				p := d.Payload
				j.AcceptThen(d, func() frames.DeliveryState {
					if !a.put(c.h, p) {
						return full
					}
					c.h.Received.Add(1)
					return nil
				})
			}
			return nil
		}
		l.OnDelivery = func(d *amqp.IncomingDelivery) {
			if !a.put(c.h, d.Payload) {
				d.Settle(full)
				return
			}
			c.h.Received.Add(1)
			d.Settle(accepted)
		}
		return nil
	}
	if j := c.h.Journal; j != nil {
		l.OnDelivery = func(d *amqp.IncomingDelivery) {
			c.h.Received.Add(1)
			j.Accept(d)
		}
		return nil
	}
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
	accepted := &frames.Accepted{}
	l.OnDisposition = func(d *amqp.OutgoingDelivery, _ frames.DeliveryState, isSettled bool) {
		c.h.Settled.Add(1)
		switch {
		case isSettled:
		case c.h.Journal != nil:
			c.h.Journal.Complete(d)
		default:
			d.Settle(accepted)
		}
	}
	if c.h.Forward {
		a := c.h.address(l.SourceAddress())
		a.attach(l)
		l.OnFlow = func(uint32, bool) { a.flush(c.h) }
		l.OnDetach = func(_ error, unsent []*amqp.OutgoingDelivery) { a.detach(l, unsent) }
		return nil
	}
	l.OnFlow = func(uint32, bool) {
		// One message per unit of credit; a drain then finds none left.
		for l.Credit() > 0 {
			if err := l.Send(&amqp.OutgoingDelivery{Tag: c.h.tag(), Payload: c.h.payload, Settled: settled}); err != nil {
				return
			}
			c.h.Delivered.Add(1)
		}
	}
	return nil
}

// tag returns a new 16-byte delivery tag shaped like a lock token.
func (h *Handler) tag() []byte {
	tag := make([]byte, 16)
	binary.BigEndian.PutUint64(tag[8:], h.tags.Add(1))
	tag[0] = 0x4e // version-4-looking, never all zero
	return tag
}

// address returns the forwarding state of addr (Service Bus entity
// names are case-insensitive).
func (h *Handler) address(addr string) *address {
	addr = strings.ToLower(addr)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.addrs == nil {
		h.addrs = map[string]*address{}
	}
	a := h.addrs[addr]
	if a == nil {
		n := h.MaxHeld
		if n <= 0 {
			n = DefaultMaxHeld
		}
		a = &address{max: n}
		h.addrs[addr] = a
	}
	return a
}

// address is one address in forwarding mode: its receiver links and
// the messages waiting for credit.
type address struct {
	max int

	mu   sync.Mutex
	recv []*amqp.OutgoingLink
	next int      // round robin over recv
	held [][]byte // FIFO, held[head:] waiting
	head int
}

// put hands p to a receiver with credit, or holds it; false when the
// FIFO is full.
func (a *address) put(h *Handler, p []byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.head == len(a.held) && a.sendLocked(h, p) {
		return true
	}
	if len(a.held)-a.head >= a.max {
		return false
	}
	a.held = append(a.held, p)
	return true
}

// sendLocked sends p on the next receiver that has credit.
func (a *address) sendLocked(h *Handler, p []byte) bool {
	n := len(a.recv)
	for i := 0; i < n; i++ {
		l := a.recv[(a.next+i)%n]
		d := &amqp.OutgoingDelivery{Tag: h.tag(), Payload: p, Settled: l.SenderSettleMode() == frames.SenderSettleModeSettled}
		if l.Send(d) == nil {
			a.next = (a.next + i + 1) % n
			h.Delivered.Add(1)
			return true
		}
	}
	return false
}

// flush hands held messages on, in order, while receivers have credit.
func (a *address) flush(h *Handler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.head < len(a.held) && a.sendLocked(h, a.held[a.head]) {
		a.held[a.head] = nil
		a.head++
	}
	if a.head == len(a.held) {
		a.held, a.head = a.held[:0], 0
	} else if a.head > 4096 && a.head > len(a.held)/2 {
		a.held = append(a.held[:0], a.held[a.head:]...)
		a.head = 0
	}
}

func (a *address) attach(l *amqp.OutgoingLink) {
	a.mu.Lock()
	a.recv = append(a.recv, l)
	a.mu.Unlock()
}

// detach forgets l and puts the deliveries it had not sent back at the
// front of the FIFO.
func (a *address) detach(l *amqp.OutgoingLink, unsent []*amqp.OutgoingDelivery) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, r := range a.recv {
		if r == l {
			a.recv = append(a.recv[:i], a.recv[i+1:]...)
			break
		}
	}
	if len(a.recv) > 0 {
		a.next %= len(a.recv)
	} else {
		a.next = 0
	}
	if len(unsent) > 0 {
		back := make([][]byte, 0, len(unsent)+len(a.held)-a.head)
		for _, d := range unsent {
			back = append(back, d.Payload)
		}
		a.held, a.head = append(back, a.held[a.head:]...), 0
	}
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
