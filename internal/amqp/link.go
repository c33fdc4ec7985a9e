package amqp

import (
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

type linkState uint8

const (
	linkNew       linkState = iota // the Attach callback is running
	linkPending                    // the handler deferred the attach
	linkAttached                   // attach answered; the link works
	linkDetaching                  // we sent detach; waiting for the client's
	linkGone                       // forgotten
)

// AttachReply holds the fields of the attach frame the endpoint sends
// back. An Attach callback may change them (or, for a deferred attach,
// change them before calling CompleteAttach). The role, name, handle and
// settle modes are not here: the endpoint mirrors them, writing the
// client's settle modes out explicitly as go-amqp requires (docs/wire/amqp.md §0.1).
type AttachReply struct {
	// Source is a shallow copy of the client's source; an outgoing link
	// may set Source.Filter to echo a filter with the client's exact
	// encoding (docs/wire/amqp.md §0.6). The maps are shared with the client's
	// attach: replace them rather than modify them. Must stay non-nil on
	// outgoing links.
	Source *frames.Source

	// Target is a shallow copy of the client's target (an empty target if
	// the client sent none). Must stay non-nil on incoming links.
	Target *frames.Target

	// MaxMessageSize defaults to Config.MaxMessageSize on incoming links,
	// where it is also the limit the endpoint enforces (0 advertises no
	// limit, but Config.MaxMessageSize is still enforced), and to 0 (no
	// limit) on outgoing links.
	MaxMessageSize uint64

	// Properties are the link properties of the reply (for example
	// com.microsoft:locked-until-utc as an int64).
	Properties map[frames.Symbol]any

	// OfferedCapabilities of the reply.
	OfferedCapabilities []frames.Symbol

	// Coordinator is a shallow copy of the client's coordinator target
	// on a link to the transaction coordinator (then Target is nil).
	Coordinator *frames.Coordinator
}

// Link is what incoming and outgoing links have in common. Its accessors
// return the client's attach; they are safe from any goroutine.
type Link struct {
	sess   *Session
	attach *frames.Attach // the client's attach; read-only

	// Reply is sent back as the attach reply; see AttachReply.
	Reply AttachReply

	incoming *IncomingLink // exactly one of incoming and outgoing is set
	outgoing *OutgoingLink

	// Owned by the session mux.
	inHandle  uint32
	outHandle uint32
	state     linkState
	counted   bool // holds a slot of Config.MaxLinks
}

func newLink(s *Session, a *frames.Attach, out uint32) *Link {
	var l *Link
	if a.Role == frames.RoleSender {
		in := &IncomingLink{Credit: s.conn.cfg.LinkCredit}
		in.incoming = in
		l = &in.Link
		l.Reply.MaxMessageSize = s.conn.cfg.MaxMessageSize
	} else {
		o := &OutgoingLink{}
		o.outgoing = o
		l = &o.Link
	}
	l.sess = s
	l.attach = a
	l.inHandle = a.Handle
	l.outHandle = out
	if a.Source != nil {
		src := *a.Source
		l.Reply.Source = &src
	}
	if a.Coordinator != nil {
		co := *a.Coordinator
		l.Reply.Coordinator = &co
	} else if a.Target != nil {
		tgt := *a.Target
		l.Reply.Target = &tgt
	} else if l.incoming != nil {
		l.Reply.Target = &frames.Target{}
	}
	return l
}

// reply builds the attach reply; without ok it carries the null terminus
// that precedes a refusing detach. A refusal reads only the client's
// attach, never Reply, which a handler may still be filling in on another
// goroutine while the attach is deferred.
func (l *Link) reply(ok bool) *frames.Attach {
	a := l.attach
	snd, rcv := l.SenderSettleMode(), l.ReceiverSettleMode()
	r := &frames.Attach{
		Name:          a.Name,
		Handle:        l.outHandle,
		Role:          !a.Role,
		SndSettleMode: &snd,
		RcvSettleMode: &rcv,
	}
	if l.outgoing != nil {
		r.InitialDeliveryCount = new(uint32) // 0
	}
	if !ok {
		if l.outgoing != nil {
			r.Target = a.Target
		} else {
			r.Source = a.Source
		}
		return r
	}
	r.Source = l.Reply.Source
	r.Target = l.Reply.Target
	r.MaxMessageSize = l.Reply.MaxMessageSize
	r.OfferedCapabilities = l.Reply.OfferedCapabilities
	r.Properties = l.Reply.Properties
	if l.outgoing != nil && r.Source == nil {
		r.Source = &frames.Source{}
	}
	r.Coordinator = l.Reply.Coordinator
	if l.incoming != nil && r.Target == nil && r.Coordinator == nil {
		r.Target = &frames.Target{}
	}
	return r
}

// release gives back the link's slot of Config.MaxLinks.
func (l *Link) release() {
	if l.counted {
		l.counted = false
		l.sess.conn.releaseLink()
	}
}

// Name returns the link name.
func (l *Link) Name() string { return l.attach.Name }

// Handle returns the client's handle of the link.
func (l *Link) Handle() uint32 { return l.attach.Handle }

// Session returns the link's session.
func (l *Link) Session() *Session { return l.sess }

// Conn returns the link's connection.
func (l *Link) Conn() *Conn { return l.sess.conn }

// PeerAttach returns the client's attach frame. Do not modify it.
func (l *Link) PeerAttach() *frames.Attach { return l.attach }

// Source returns the client's source terminus (nil if it sent none).
func (l *Link) Source() *frames.Source { return l.attach.Source }

// Target returns the client's target terminus (nil if it sent none).
func (l *Link) Target() *frames.Target { return l.attach.Target }

// SourceAddress returns the source address, "" if none: the node an
// outgoing link reads from.
func (l *Link) SourceAddress() string {
	if l.attach.Source == nil {
		return ""
	}
	return l.attach.Source.Address
}

// TargetAddress returns the target address, "" if none: the node an
// incoming link writes to, or the reply address of an outgoing link.
func (l *Link) TargetAddress() string {
	if l.attach.Target == nil {
		return ""
	}
	return l.attach.Target.Address
}

// Properties returns the client's link properties.
func (l *Link) Properties() map[frames.Symbol]any { return l.attach.Properties }

// SenderSettleMode returns the sender settle mode the client asked for
// (mixed when it sent none); the reply echoes it.
func (l *Link) SenderSettleMode() frames.SenderSettleMode {
	if m := l.attach.SndSettleMode; m != nil {
		return *m
	}
	return frames.SenderSettleModeMixed
}

// ReceiverSettleMode returns the receiver settle mode the client asked
// for (first when it sent none); the reply echoes it.
func (l *Link) ReceiverSettleMode() frames.ReceiverSettleMode {
	if m := l.attach.RcvSettleMode; m != nil {
		return *m
	}
	return frames.ReceiverSettleModeFirst
}

// Close detaches the link with closed=true and err (nil for none), and
// runs OnDetach. On a deferred attach it refuses the link instead, with
// err or amqp:link:detach-forced, and OnDetach does not run. It does not
// wait, and calling it again or after the link is gone does nothing.
func (l *Link) Close(err *Error) {
	var e error
	if err != nil {
		e = err
	}
	l.sess.enqueue(op{kind: opClose, link: l, err: e})
}

// CompleteAttach answers an attach the handler deferred by returning
// ErrAttachDeferred: nil accepts the link, an error refuses it. It may be
// called from any goroutine; it does nothing if the link is gone (the
// client detached meanwhile, and OnDetach ran) or was already completed.
// Set Reply and the callbacks before calling it.
func (l *Link) CompleteAttach(err error) {
	l.sess.enqueue(op{kind: opCompleteAttach, link: l, err: err})
}

// IncomingLink is a link on which the client sends and the broker
// receives (the client attached with role sender).
//
// The endpoint manages its credit: it grants Credit right after attach
// and tops it up whenever half is used, as Service Bus does. With
// MaxUnsettled set it grants no more than MaxUnsettled minus the
// deliveries the handler has not settled yet, which pushes back on the
// client (approximately: credit already granted is not withdrawn).
//
// The client's rcv-settle-mode second is treated like first: when the
// handler settles, the endpoint sends a settled disposition at once and
// does not wait for the client to settle first. The Service Bus SDKs only
// use first on sender links.
type IncomingLink struct {
	Link

	// OnDelivery receives every complete delivery, on the session
	// goroutine, in order. Required. It must not block for long; it may
	// keep d and settle it later from any goroutine.
	OnDelivery func(d *IncomingDelivery)

	// OnDetach is called once when the link is gone: err is nil when the
	// client detached it without an error, the client's *Error if it sent
	// one, ErrSessionEnded, the connection's end reason, or what was
	// passed to Close (ErrLinkClosed for nil). Runs on the session
	// goroutine. Optional.
	OnDetach func(err error)

	// Credit is the link credit to maintain. Defaults to
	// Config.LinkCredit; set it in the Attach callback.
	Credit uint32

	// MaxUnsettled bounds the unsettled deliveries the handler holds; 0
	// means no bound. Set it in the Attach callback.
	MaxUnsettled int

	// Spool, if set, is asked for a place to put a delivery whose payload
	// grows past SpoolFrom bytes, so that a large message is never whole
	// in memory: the bytes so far are written to it at once and every
	// later frame's as it arrives. It may return nil to keep the delivery
	// in memory, or an error to refuse it: the rest of its frames are
	// dropped and it is rejected with the error (an *Error keeps its
	// condition). OnDelivery gets a spooled delivery with Spooled set and
	// Payload nil; the handler then owns the spool. A spool whose delivery
	// is aborted, or whose link goes before the last frame, is told with
	// Abort. Runs on the session goroutine. Set both in the Attach
	// callback.
	Spool     func(d *IncomingDelivery) (Spool, error)
	SpoolFrom int

	// Owned by the session mux.
	deliveryCount uint32            // the client's delivery-count as we know it
	linkCredit    uint32            // credit the client still has
	unsettled     int               // deliveries handed over and not settled
	partial       *IncomingDelivery // a multi-frame delivery being assembled
	oversize      bool              // partial exceeded the size limit: discard
	refused       error             // Spool refused partial: discard, reject with this
	spooledBytes  uint64            // bytes of partial written to its spool
	flowQueued    bool              // on Session.linkFlows
}

// maxSize is the size limit enforced on deliveries: the advertised one,
// or Config.MaxMessageSize when the reply advertises none, so that a
// client can never make the endpoint buffer without bound.
func (l *IncomingLink) maxSize() uint64 {
	if l.Reply.MaxMessageSize == 0 {
		return l.sess.conn.cfg.MaxMessageSize
	}
	return l.Reply.MaxMessageSize
}

// deliver hands a complete delivery to the handler.
func (l *IncomingLink) deliver(s *Session, d *IncomingDelivery) {
	if d.Settled {
		d.done = true
	} else {
		l.unsettled++
	}
	l.OnDelivery(d)
	l.grant(s)
}

// grant tops up the client's credit when enough of it was used.
func (l *IncomingLink) grant(s *Session) {
	target, limit := l.Credit, l.Credit
	if l.MaxUnsettled > 0 {
		room := max(l.MaxUnsettled-l.unsettled, 0)
		target = min(target, uint32(min(room, 1<<31)))
		limit = min(limit, uint32(min(l.MaxUnsettled, 1<<31)))
	}
	if target > l.linkCredit && target-l.linkCredit >= max(limit/2, 1) {
		l.linkCredit = target
		s.wantLinkFlow(l)
	}
}

// Spool receives a large delivery's payload as it arrives
// (IncomingLink.Spool). Write and Abort are called on the session
// goroutine.
type Spool interface {
	// Write appends p (which it must not keep). An error refuses the
	// delivery as Spool's error does; the spool is then aborted.
	Write(p []byte) error
	// Abort says the delivery will not complete: the spool may go.
	Abort()
}

// IncomingDelivery is a complete message the client sent.
type IncomingDelivery struct {
	Link          *IncomingLink
	ID            uint32 // delivery-id
	Tag           []byte // delivery-tag
	MessageFormat uint32 // 0, or 0x80013700 for a Service Bus batch
	Settled       bool   // the client sent it settled: no disposition follows
	Payload       []byte // the encoded message; the handler owns it
	// State is the delivery state the client sent with the transfer (the
	// first one of a multi-frame delivery that has one): a
	// *frames.TransactionalState for a send inside a transaction; nil
	// otherwise.
	State frames.DeliveryState
	// Spooled holds the whole payload of a delivery IncomingLink.Spool
	// took (Payload is nil then); the handler owns it.
	Spooled Spool

	done bool           // owned by the session mux: settled
	buf  *frames.Buffer // the frame buffer Payload and Tag live in, or nil
}

// Release tells the endpoint that nothing refers to Payload or Tag, nor
// to anything decoded from them without copying, any more: a later
// transfer may reuse their memory. Calling it is optional (unreleased
// memory is garbage-collected); call it at most once, from the one
// goroutine that owns the delivery, and only when the bytes are truly
// dead — the next frame read overwrites them. Settle may come before or
// after it.
func (d *IncomingDelivery) Release() {
	b := d.buf
	d.buf, d.Payload, d.Tag = nil, nil, nil
	b.Release()
}

// Settle settles the delivery with state (for example &frames.Accepted{},
// or &frames.Rejected{Error: ...}): the client gets
// disposition(role=receiver, settled=true, state). Settlements that
// arrive together go out as one disposition per run of consecutive
// delivery ids. It may be called from any goroutine, in any order; it
// does nothing for a presettled delivery, a second time, or after the
// link is gone.
func (d *IncomingDelivery) Settle(state frames.DeliveryState) {
	if d.Settled {
		return
	}
	d.Link.sess.enqueue(op{kind: opSettleIn, in: d, state: state})
}

// SettleAll settles deliveries of this link with the same state, as
// Settle does for each, but hands them to the session in one step: a
// group settled at once leaves as one disposition per run of consecutive
// ids, never split by the session waking up half-way through the group.
func (l *IncomingLink) SettleAll(ds []*IncomingDelivery, state frames.DeliveryState) {
	l.sess.enqueueMany(func(ops []op) []op {
		for _, d := range ds {
			if !d.Settled {
				ops = append(ops, op{kind: opSettleIn, in: d, state: state})
			}
		}
		return ops
	})
}

// OutgoingLink is a link on which the broker sends and the client
// receives (the client attached with role receiver).
//
// The handler sends with Send, which consumes one unit of credit and
// never blocks. It learns about credit through OnFlow. The endpoint
// transmits queued deliveries as the client's session window allows,
// split into frames of the client's max-frame-size.
type OutgoingLink struct {
	Link

	// OnFlow is called on the session goroutine whenever the client
	// updates the link's flow state: credit is the credit now available
	// to Send, drain whether the client asks to drain. When drain is set
	// the handler should Send what it has at once; after OnFlow returns
	// the endpoint consumes the remaining credit and answers
	// flow(drain=true, link-credit=0) behind the queued deliveries
	// (docs/wire/amqp.md §0.11), unless OnFlow called DeferDrain. Optional.
	OnFlow func(credit uint32, drain bool)

	// OnDisposition is called on the session goroutine for each of the
	// link's deliveries the client disposes of: state is its outcome
	// (*frames.Accepted, *frames.Rejected, *frames.Released,
	// *frames.Modified, or nil), settled whether the client settled it.
	// For an unsettled one the handler answers with d.Settle and the
	// final outcome (docs/wire/amqp.md §0.10). Optional.
	OnDisposition func(d *OutgoingDelivery, state frames.DeliveryState, settled bool)

	// OnDetach is called once when the link is gone, with err as for
	// IncomingLink.OnDetach and the deliveries that were queued but not
	// (completely) sent: their messages never reached the client.
	// Optional.
	OnDetach func(err error, unsent []*OutgoingDelivery)

	mu            sync.Mutex // guards the fields below, shared with Send
	credit        uint32     // credit left for Send
	deliveryCount uint32     // delivery-count including queued deliveries
	draining      bool       // the client's last flow asked to drain
	closed        bool       // Send fails
	queued        bool       // on Session.ready or being pumped
	queue         []outItem  // Send's output, not yet taken by the mux

	// Owned by the session mux.
	local         []outItem // output taken from queue
	localPos      int
	cur           *OutgoingDelivery // a delivery being sent
	curOff        int64             // bytes of cur already sent
	active        bool              // on Session.active
	drainDeferred bool              // DeferDrain was called in OnFlow

	nUnsettled atomic.Int64 // entries in Session.unsettled; written by the mux only
}

// outItem is a queued delivery, or a flow (d == nil) that must follow the
// deliveries queued before it.
type outItem struct {
	d             *OutgoingDelivery
	deliveryCount uint32
	credit        uint32
	drain         bool
}

// OutgoingDelivery is a message the handler sends. Fill in the exported
// fields and pass it to Send; do not change them afterwards. Once an
// unsettled delivery is sent the endpoint drops Payload (sets it to nil),
// so that what it keeps per unsettled delivery is small.
type OutgoingDelivery struct {
	Tag     []byte // delivery-tag, at most 32 bytes (Service Bus: the lock token)
	Payload []byte // the encoded message (with Parts: its first bytes)
	// Parts, if set, are the rest of the message, in order after Payload:
	// bytes in memory, or a Stream of Len bytes read a frame at a time as
	// the client's window and the connection's writer take them, so that a
	// large message is never whole in memory. The endpoint closes the
	// Streams once the last frame is out or the delivery is dropped unsent.
	// A read that fails aborts the delivery (transfer aborted=true): the
	// client never sees it, and an unsettled one is forgotten.
	Parts         []Part
	MessageFormat uint32
	// Settled sends the delivery presettled. Links whose client asked
	// for snd-settle-mode settled (ReceiveAndDelete) always send settled,
	// and links that asked for unsettled never do.
	Settled bool

	link    *OutgoingLink
	settled bool   // the effective setting, fixed by Send
	id      uint32 // delivery-id; owned by the session mux
	sent    bool   // the first frame went out (id is valid); mux-owned
	done    bool   // settled at both ends, or presettled and sent; mux-owned
	forget  bool   // Forget came before the delivery was sent; mux-owned
	asked   bool   // the client disposed of it unsettled: Forget must not drop it; mux-owned
}

// Part is a piece of an OutgoingDelivery's message after its Payload:
// Bytes, or Len bytes read from Stream.
type Part struct {
	Bytes  []byte
	Stream PayloadStream
	Len    int64
}

func (p *Part) size() int64 {
	if p.Stream != nil {
		return p.Len
	}
	return int64(len(p.Bytes))
}

// PayloadStream is a streamed Part of an OutgoingDelivery.
type PayloadStream interface {
	ReadAt(p []byte, off int64) (int, error)
	Close() error
}

// Link returns the link the delivery was sent on.
func (d *OutgoingDelivery) Link() *OutgoingLink { return d.link }

// size is the length of the encoded message.
func (d *OutgoingDelivery) size() int64 {
	n := int64(len(d.Payload))
	for i := range d.Parts {
		n += d.Parts[i].size()
	}
	return n
}

// appendBytes appends the message's bytes [off, off+n) to buf.
func (d *OutgoingDelivery) appendBytes(buf []byte, off int64, n int) ([]byte, error) {
	if p := int64(len(d.Payload)); off < p {
		k := min(int64(n), p-off)
		buf = append(buf, d.Payload[off:off+k]...)
		off, n = off+k, n-int(k)
	}
	start := int64(len(d.Payload)) // of the part below
	for i := 0; i < len(d.Parts) && n > 0; i++ {
		pt := &d.Parts[i]
		size := pt.size()
		if off >= start+size {
			start += size
			continue
		}
		po := off - start
		k := int(min(int64(n), size-po))
		if pt.Stream == nil {
			buf = append(buf, pt.Bytes[po:po+int64(k)]...)
		} else {
			at := len(buf)
			buf = slices.Grow(buf, k)[:at+k]
			got, err := pt.Stream.ReadAt(buf[at:], po)
			if got < k {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return buf[:at], err
			}
			if err != nil && err != io.EOF {
				return buf[:at], err
			}
		}
		off, n = off+int64(k), n-k
		start += size
	}
	return buf, nil
}

// closeStream closes the Streams of the Parts, once.
func (d *OutgoingDelivery) closeStream() {
	for i := range d.Parts {
		if st := d.Parts[i].Stream; st != nil {
			st.Close()
			d.Parts[i].Stream = nil
		}
	}
	d.Parts = nil
}

// Settle sends the final outcome of a delivery the client has not
// settled: disposition(role=sender, settled=true, state). Use
// &frames.Rejected{Error: &Error{Condition: "com.microsoft:message-lock-lost"}}
// for a lost lock. It may be called from any goroutine; it does nothing
// for a presettled delivery, a second time, or after the link is gone.
func (d *OutgoingDelivery) Settle(state frames.DeliveryState) {
	if d.link == nil || d.settled {
		return
	}
	d.link.sess.enqueue(op{kind: opSettleOut, out: d, state: state})
}

// Forget drops the endpoint's state for a delivery the client has not
// settled, without telling the client: for a delivery the client can no
// longer settle successfully (its lock is gone), which the handler does
// not want to keep memory for. If the client disposes of it later, the
// session answers as Conn.AnswerUnknownDispositions says. (Settling it
// instead would tell the client, and go-amqp then drops its routing for
// the delivery, so that its own later disposition is never answered.) A
// delivery not sent yet is forgotten once sent. It may be called from
// any goroutine; it does nothing for a presettled or settled delivery,
// one the client has disposed of already (the handler's Settle answers
// it), or after the link is gone.
func (d *OutgoingDelivery) Forget() {
	if d.link == nil || d.settled {
		return
	}
	d.link.sess.enqueue(op{kind: opForget, out: d})
}

// ForgetAll forgets each of ds (deliveries of this link), as Forget does,
// in one step.
func (l *OutgoingLink) ForgetAll(ds []*OutgoingDelivery) {
	l.sess.enqueueMany(func(ops []op) []op {
		for _, d := range ds {
			if d.link != nil && !d.settled {
				ops = append(ops, op{kind: opForget, out: d})
			}
		}
		return ops
	})
}

// SettleAll settles ds[i] with states[i] (len(states) == len(ds)), as
// Settle does for each, but hands them to the session in one step: a
// batch the handler settles at once leaves as one disposition per run of
// consecutive ids with the same outcome, never split by the session
// waking up half-way through it. Every delivery must be of this link.
func (l *OutgoingLink) SettleAll(ds []*OutgoingDelivery, states []frames.DeliveryState) {
	if len(states) != len(ds) {
		panic("amqp: SettleAll with a state count unlike the delivery count")
	}
	l.sess.enqueueMany(func(ops []op) []op {
		for i, d := range ds {
			if d.link != nil && !d.settled {
				ops = append(ops, op{kind: opSettleOut, out: d, state: states[i]})
			}
		}
		return ops
	})
}

// Send queues d for transmission. It consumes one unit of credit and
// returns ErrNoCredit if there is none, ErrLinkClosed once the link is
// detaching or gone, and an amqp:link:message-size-exceeded *Error if the
// payload exceeds the client's max-message-size. It never blocks and may
// be called from any goroutine, including from the link's callbacks.
func (l *OutgoingLink) Send(d *OutgoingDelivery) error {
	if max := l.attach.MaxMessageSize; max != 0 && uint64(d.size()) > max {
		return Errorf(CondMessageSizeExceeded, "message of %d bytes exceeds the client's max-message-size %d", d.size(), max)
	}
	settled := d.Settled
	switch l.SenderSettleMode() {
	case frames.SenderSettleModeSettled:
		settled = true
	case frames.SenderSettleModeUnsettled:
		settled = false
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrLinkClosed
	}
	if l.credit == 0 {
		l.mu.Unlock()
		return ErrNoCredit
	}
	l.credit--
	l.deliveryCount++
	d.link = l
	d.settled = settled
	l.queue = append(l.queue, outItem{d: d})
	ready := !l.queued
	l.queued = true
	l.mu.Unlock()
	if ready {
		l.sess.markReady(l)
	}
	return nil
}

// Unsettled returns the number of the link's deliveries that were sent
// unsettled and are not settled yet: the state the endpoint keeps for
// them until the client or the handler settles them, or the link goes.
// Safe from any goroutine.
func (l *OutgoingLink) Unsettled() int { return int(l.nUnsettled.Load()) }

// Credit returns the credit available to Send.
func (l *OutgoingLink) Credit() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.credit
}

// Draining reports whether the client's last flow asked to drain and the
// drain is not finished yet.
func (l *OutgoingLink) Draining() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.draining
}

// DeferDrain, called from OnFlow with drain set, keeps the drain open
// after OnFlow returns: the handler sends what it can and then calls
// CompleteDrain. Calling it anywhere else has no effect or races.
func (l *OutgoingLink) DeferDrain() { l.drainDeferred = true }

// CompleteDrain finishes a drain deferred with DeferDrain. It may be
// called from any goroutine; it does nothing if no drain is pending.
func (l *OutgoingLink) CompleteDrain() {
	l.sess.enqueue(op{kind: opCompleteDrain, link: &l.Link})
}

// applyFlow takes the client's flow state and returns the credit now
// available and the drain flag.
func (l *OutgoingLink) applyFlow(f *frames.Flow) (uint32, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f.LinkCredit != nil {
		// link-credit(snd) := delivery-count(rcv) + link-credit(rcv)
		//                     - delivery-count(snd); an absent
		// delivery-count(rcv) is our initial-delivery-count, 0.
		var dc uint32
		if f.DeliveryCount != nil {
			dc = *f.DeliveryCount
		}
		l.credit = uint32(max(int32(dc+*f.LinkCredit-l.deliveryCount), 0))
	}
	l.draining = f.Drain
	return l.credit, l.draining
}

// queueFlow queues a flow with the current state behind the queued
// deliveries (an echo, or with drain the end of a drain). The caller
// activates the link.
func (l *OutgoingLink) queueFlow(drain bool) {
	l.mu.Lock()
	l.queue = append(l.queue, outItem{deliveryCount: l.deliveryCount, credit: l.credit, drain: drain || l.draining})
	l.queued = true
	l.mu.Unlock()
}

// endDrain consumes the remaining credit and queues the drain reply. It
// returns false if no drain is pending (a newer flow cancelled it).
func (l *OutgoingLink) endDrain() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.draining {
		return false
	}
	l.deliveryCount += l.credit
	l.credit = 0
	l.draining = false
	l.queue = append(l.queue, outItem{deliveryCount: l.deliveryCount, drain: true})
	l.queued = true
	return true
}

// peek returns the next queued item without taking it.
func (l *OutgoingLink) peek() (outItem, bool) {
	if l.localPos == len(l.local) {
		clear(l.local)
		l.local = l.local[:0]
		l.localPos = 0
		l.mu.Lock()
		l.local, l.queue = l.queue, l.local
		if len(l.local) == 0 {
			l.queued = false
		}
		l.mu.Unlock()
		if len(l.local) == 0 {
			return outItem{}, false
		}
	}
	return l.local[l.localPos], true
}

func (l *OutgoingLink) pop() {
	l.local[l.localPos] = outItem{}
	l.localPos++
}

// closeQueue makes Send fail and returns the deliveries not yet sent
// completely.
func (l *OutgoingLink) closeQueue() []*OutgoingDelivery {
	l.mu.Lock()
	l.closed = true
	l.credit = 0
	queue := l.queue
	l.queue = nil
	l.mu.Unlock()
	var unsent []*OutgoingDelivery
	if l.cur != nil {
		unsent = append(unsent, l.cur)
		l.cur = nil
	}
	for _, it := range l.local[l.localPos:] {
		if it.d != nil {
			unsent = append(unsent, it.d)
		}
	}
	for _, it := range queue {
		if it.d != nil {
			unsent = append(unsent, it.d)
		}
	}
	l.local, l.localPos = nil, 0
	for _, d := range unsent {
		d.closeStream()
	}
	return unsent
}
