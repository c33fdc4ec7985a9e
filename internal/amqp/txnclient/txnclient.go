// Package txnclient is a test client for Service Bus transactions written
// on Busbar's own AMQP frame codec: no SDK that can be installed here
// speaks them. It sends exactly the frames the .NET SDK
// (Azure.Messaging.ServiceBus on Microsoft.Azure.Amqp) sends, as
// docs/wire/transactions.md records them: the coordinator on a session of
// its own, declare and discharge as amqp-value bodies, transfers and
// dispositions carrying transactional-state, send-via as a sender link
// property. Tests of internal/servicebus, internal/relay and
// internal/server use it; it fails the test it is given on any surprise.
package txnclient

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// The sessions and the coordinator link a Client opens.
const (
	ChEntities    uint16 = 0 // the session of the entity links
	ChCoordinator uint16 = 1 // the coordinator's own session, as .NET opens it
	HCoordinator  uint32 = 0 // the coordinator link's handle on its session
)

// Client is one AMQP connection (no SASL: the broker must allow any key
// or take the client's CBS token on its own) with the two sessions the
// .NET SDK opens.
type Client struct {
	t       testing.TB
	nc      net.Conn
	br      *bufio.Reader
	backlog []frames.Frame
	nextID  [2]uint32         // next delivery-id per session
	handles map[uint32]uint32 // the broker's handle of each entity link, by ours
	tag     uint64
}

// Dial connects to addr, opens the connection and both sessions, and
// closes it when t ends.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &Client{t: t, nc: nc, br: bufio.NewReader(nc), handles: map[uint32]uint32{}}
	c.Write([]byte("AMQP\x00\x01\x00\x00")) // no SASL: CBS alone (here AllowAnyKey)
	hdr := make([]byte, 8)
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.br.Read(hdr); err != nil || string(hdr) != "AMQP\x00\x01\x00\x00" {
		t.Fatalf("protocol header: %q %v", hdr, err)
	}
	c.Send(0, &frames.Open{ContainerID: uuid.NewString(), Hostname: "localhost", MaxFrameSize: 65536, ChannelMax: 16})
	c.Await("open", func(f frames.Frame) bool { _, ok := f.Body.(*frames.Open); return ok })
	for _, ch := range []uint16{ChEntities, ChCoordinator} {
		c.Send(ch, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 255})
		c.Await("begin", func(f frames.Frame) bool { _, ok := f.Body.(*frames.Begin); return ok && f.Channel == ch })
	}
	return c
}

// Write writes raw bytes on the connection.
func (c *Client) Write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// Send sends one frame on channel ch.
func (c *Client) Send(ch uint16, body frames.Body) {
	c.t.Helper()
	b, err := frames.AppendFrame(nil, ch, body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.Write(b)
}

// Await returns the first frame (kept back earlier or read now) that
// matches; others are kept for later calls.
func (c *Client) Await(what string, match func(frames.Frame) bool) frames.Frame {
	c.t.Helper()
	for i, f := range c.backlog {
		if match(f) {
			c.backlog = append(c.backlog[:i], c.backlog[i+1:]...)
			return f
		}
	}
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := frames.ReadFrame(c.br, 0)
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", what, err)
		}
		if f.Body == nil {
			continue // heartbeat
		}
		if cl, ok := f.Body.(*frames.Close); ok {
			c.t.Fatalf("waiting for %s: connection closed: %v", what, cl.Error)
		}
		if match(f) {
			return f
		}
		c.backlog = append(c.backlog, f)
	}
}

// Attach attaches a link and returns the reply; a sender link also waits
// for its credit (unless refused).
func (c *Client) Attach(ch uint16, a *frames.Attach) *frames.Attach {
	c.t.Helper()
	c.Send(ch, a)
	f := c.Await("attach reply", func(f frames.Frame) bool {
		r, ok := f.Body.(*frames.Attach)
		return ok && f.Channel == ch && r.Name == a.Name
	})
	reply := f.Body.(*frames.Attach)
	if ch == ChEntities {
		c.handles[a.Handle] = reply.Handle
	}
	if a.Role == frames.RoleSender && (reply.Target != nil || reply.Coordinator != nil) {
		c.Await("credit", func(f frames.Frame) bool {
			fl, ok := f.Body.(*frames.Flow)
			return ok && f.Channel == ch && fl.Handle != nil && *fl.Handle == reply.Handle // the broker's handle
		})
	}
	return reply
}

// AttachCoordinator attaches the controller link as .NET does: a source
// with a random address, a coordinator target, unsettled transfers.
func (c *Client) AttachCoordinator() *frames.Attach {
	name := uuid.New().String()
	return c.Attach(ChCoordinator, &frames.Attach{
		Name: name, Handle: HCoordinator, Role: frames.RoleSender,
		Source:               &frames.Source{Address: name},
		Coordinator:          &frames.Coordinator{},
		InitialDeliveryCount: new(uint32),
	})
}

// AttachSender attaches a sender link to target; dest makes it a send-via
// link to dest through target.
func (c *Client) AttachSender(handle uint32, target, dest string) *frames.Attach {
	a := &frames.Attach{
		Name: uuid.NewString(), Handle: handle, Role: frames.RoleSender,
		Source:               &frames.Source{Address: uuid.NewString()},
		Target:               &frames.Target{Address: target},
		InitialDeliveryCount: new(uint32),
	}
	if dest != "" {
		a.Properties = map[frames.Symbol]any{"com.microsoft:transfer-destination-address": dest}
	}
	return c.Attach(ChEntities, a)
}

// AttachReceiver attaches a peek-lock receiver (settle on dispose:
// receiver settle mode second) and grants credit.
func (c *Client) AttachReceiver(handle uint32, source string, credit uint32) *frames.Attach {
	c.t.Helper()
	second := frames.ReceiverSettleModeSecond
	r := c.Attach(ChEntities, &frames.Attach{
		Name: uuid.NewString(), Handle: handle, Role: frames.RoleReceiver,
		Source:        &frames.Source{Address: source},
		Target:        &frames.Target{Address: uuid.NewString()},
		RcvSettleMode: &second,
	})
	if r.Source == nil {
		c.t.Fatalf("receiver on %s refused", source)
	}
	zero := uint32(0)
	c.Send(ChEntities, &frames.Flow{NextIncomingID: &zero, IncomingWindow: 5000, NextOutgoingID: c.nextID[ChEntities], OutgoingWindow: 5000,
		Handle: &handle, DeliveryCount: &zero, LinkCredit: &credit})
	return r
}

// AttachSessionReceiver attaches a peek-lock session receiver for
// session id of source (the session filter as the .NET SDK sends it,
// plain) and grants credit.
func (c *Client) AttachSessionReceiver(handle uint32, source, id string, credit uint32) *frames.Attach {
	c.t.Helper()
	second := frames.ReceiverSettleModeSecond
	r := c.Attach(ChEntities, &frames.Attach{
		Name: uuid.NewString(), Handle: handle, Role: frames.RoleReceiver,
		Source:        &frames.Source{Address: source, Filter: map[frames.Symbol]any{"com.microsoft:session-filter": id}},
		Target:        &frames.Target{Address: uuid.NewString()},
		RcvSettleMode: &second,
	})
	if r.Source == nil {
		c.t.Fatalf("session receiver on %s refused", source)
	}
	zero := uint32(0)
	c.Send(ChEntities, &frames.Flow{NextIncomingID: &zero, IncomingWindow: 5000, NextOutgoingID: c.nextID[ChEntities], OutgoingWindow: 5000,
		Handle: &handle, DeliveryCount: &zero, LinkCredit: &credit})
	return r
}

// Transfer sends one message (unsettled) and waits for its disposition.
func (c *Client) Transfer(ch uint16, handle uint32, payload []byte, state frames.DeliveryState) frames.DeliveryState {
	c.t.Helper()
	id := c.Post(ch, handle, payload, state)
	f := c.Await("disposition", func(f frames.Frame) bool {
		d, ok := f.Body.(*frames.Disposition)
		return ok && f.Channel == ch && d.Role == frames.RoleReceiver && d.First <= id && (d.Last == nil && d.First == id || d.Last != nil && *d.Last >= id)
	})
	return f.Body.(*frames.Disposition).State
}

// Command sends a coordinator command (declare without fields,
// discharge(txn-id, fail) with them) and returns the broker's outcome.
func (c *Client) Command(fields ...any) frames.DeliveryState {
	c.t.Helper()
	code := uint64(0x31) // declare()
	if len(fields) > 0 {
		code = 0x32 // discharge(txn-id, fail)
	}
	return c.Transfer(ChCoordinator, HCoordinator, CommandPayload(c.t, code, fields...), nil)
}

// CommandPayload encodes a coordinator command (descriptor code, fields)
// as a message with an amqp-value body.
func CommandPayload(t testing.TB, code uint64, fields ...any) []byte {
	t.Helper()
	body, err := frames.AppendValueSection(nil, encoding.Described{Descriptor: code, Value: fields})
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&frames.Message{RawBody: body}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Declare declares a transaction and returns its id.
func (c *Client) Declare() []byte {
	c.t.Helper()
	st := c.Command()
	d, ok := st.(*frames.Declared)
	if !ok {
		c.t.Fatalf("declare answered %v", st)
	}
	return d.TxnID
}

// Discharge commits (fail=false) or rolls back a transaction.
func (c *Client) Discharge(id []byte, fail bool) frames.DeliveryState {
	c.t.Helper()
	return c.Command(id, fail)
}

// MessagePayload encodes a message with a new message-id and body as its
// one data section.
func MessagePayload(t testing.TB, body string) []byte {
	t.Helper()
	b, err := (&frames.Message{Properties: &frames.Properties{MessageID: uuid.NewString()}, RawBody: frames.AppendDataSection(nil, []byte(body))}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SendWithID sends body with message-id mid on a sender link, outside
// any transaction.
func (c *Client) SendWithID(handle uint32, body, mid string) frames.DeliveryState {
	c.t.Helper()
	b, err := (&frames.Message{Properties: &frames.Properties{MessageID: mid}, RawBody: frames.AppendDataSection(nil, []byte(body))}).MarshalBinary()
	if err != nil {
		c.t.Fatal(err)
	}
	return c.Transfer(ChEntities, handle, b, nil)
}

// Post sends one message (unsettled) without waiting for its
// disposition and returns its delivery-id.
func (c *Client) Post(ch uint16, handle uint32, payload []byte, state frames.DeliveryState) uint32 {
	c.t.Helper()
	id := c.nextID[ch]
	c.nextID[ch]++
	c.tag++
	format := uint32(0)
	c.Send(ch, &frames.Transfer{Handle: handle, DeliveryID: &id, DeliveryTag: binary.LittleEndian.AppendUint64(nil, c.tag),
		MessageFormat: &format, State: state, Payload: payload})
	return id
}

// SendTxn sends body on a sender link inside transaction id.
func (c *Client) SendTxn(handle uint32, body string, id []byte) frames.DeliveryState {
	c.t.Helper()
	var st frames.DeliveryState
	if id != nil {
		st = &frames.TransactionalState{TxnID: id}
	}
	return c.Transfer(ChEntities, handle, MessagePayload(c.t, body), st)
}

// Received is a message a receiver link delivered: its delivery-id, tag
// (the lock token) and body.
type Received struct {
	ID   uint32
	Tag  []byte
	Body string
}

// Receive waits for n transfers on a receiver link.
func (c *Client) Receive(handle uint32, n int) []Received {
	c.t.Helper()
	var out []Received
	for len(out) < n {
		f := c.Await("message", func(f frames.Frame) bool {
			tr, ok := f.Body.(*frames.Transfer)
			return ok && f.Channel == ChEntities && tr.Handle == c.handles[handle]
		})
		tr := f.Body.(*frames.Transfer)
		var m frames.Message
		if err := m.UnmarshalBinary(tr.Payload); err != nil {
			c.t.Fatalf("%v: %x more=%v", err, tr.Payload, tr.More)
		}
		data, err := frames.DataSections(m.RawBody)
		if err != nil || len(data) != 1 {
			c.t.Fatalf("body %v %v", data, err)
		}
		out = append(out, Received{ID: *tr.DeliveryID, Tag: append([]byte(nil), tr.DeliveryTag...), Body: string(data[0])})
	}
	return out
}

// Dispose settles a Received message with outcome inside transaction id
// (nil: outside any) and returns the broker's answer.
func (c *Client) Dispose(m Received, outcome frames.DeliveryState, id []byte) frames.DeliveryState {
	c.t.Helper()
	st := outcome
	if id != nil {
		st = &frames.TransactionalState{TxnID: id, Outcome: outcome}
	}
	c.Send(ChEntities, &frames.Disposition{Role: frames.RoleReceiver, First: m.ID, State: st, Batchable: true})
	f := c.Await("disposition", func(f frames.Frame) bool {
		d, ok := f.Body.(*frames.Disposition)
		return ok && f.Channel == ChEntities && d.Role == frames.RoleSender && d.First <= m.ID && (d.Last == nil && d.First == m.ID || d.Last != nil && *d.Last >= m.ID)
	})
	return f.Body.(*frames.Disposition).State
}

// MgmtTxn sends a $management request (operation, amqp-value body) on
// sender handle inside transaction id (nil: outside any) and returns the transfer's
// disposition and, unless it was refused, the reply's status-code, read
// on receiver handle replies (attached to the same management node).
func (c *Client) MgmtTxn(handle, replies uint32, op string, body encoding.Map, id []byte) (frames.DeliveryState, any) {
	c.t.Helper()
	st, reply := c.MgmtTxnReply(handle, replies, op, body, id)
	if reply == nil {
		return st, nil
	}
	return st, reply.ApplicationProperties["statusCode"]
}

// MgmtTxnReply is mgmtTxn returning the whole reply (nil when the
// request was refused).
func (c *Client) MgmtTxnReply(handle, replies uint32, op string, body encoding.Map, id []byte) (frames.DeliveryState, *frames.Message) {
	c.t.Helper()
	raw, err := frames.AppendValueSection(nil, body)
	if err != nil {
		c.t.Fatal(err)
	}
	payload, err := (&frames.Message{Properties: &frames.Properties{MessageID: uuid.NewString(), ReplyTo: "replies"},
		ApplicationProperties: map[string]any{"operation": op}, RawBody: raw}).MarshalBinary()
	if err != nil {
		c.t.Fatal(err)
	}
	var state frames.DeliveryState // outside any transaction when id is nil
	if id != nil {
		state = &frames.TransactionalState{TxnID: id}
	}
	st := c.Transfer(ChEntities, handle, payload, state)
	if _, ok := st.(*frames.Rejected); ok {
		return st, nil
	}
	f := c.Await("reply", func(f frames.Frame) bool {
		tr, ok := f.Body.(*frames.Transfer)
		return ok && f.Channel == ChEntities && tr.Handle == c.handles[replies]
	})
	var m frames.Message
	if err := m.UnmarshalBinary(f.Body.(*frames.Transfer).Payload); err != nil {
		c.t.Fatal(err)
	}
	return st, &m
}
