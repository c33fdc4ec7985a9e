package relay

// txnClient is a raw-frame transaction client on Busbar's own AMQP codec,
// the same as internal/servicebus's (txnclient_test.go there): no SDK that
// can be installed here speaks transactions. It sends the frames the .NET
// SDK sends (docs/wire/transactions.md): the coordinator on a session of
// its own, declare and discharge as amqp-value bodies, transfers and
// dispositions carrying transactional-state, send-via as a link property.
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

const (
	chEntities    uint16 = 0 // the session of the entity links
	chCoordinator uint16 = 1 // the coordinator's own session, as .NET opens it
	hCoordinator  uint32 = 0 // the coordinator link's handle on its session
)

type txnClient struct {
	t       testing.TB
	nc      net.Conn
	br      *bufio.Reader
	backlog []frames.Frame
	nextID  [2]uint32         // next delivery-id per session
	handles map[uint32]uint32 // the broker's handle of each entity link, by ours
	tag     uint64
}

func dialTxn(t testing.TB, addr string) *txnClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &txnClient{t: t, nc: nc, br: bufio.NewReader(nc), handles: map[uint32]uint32{}}
	c.write([]byte("AMQP\x00\x01\x00\x00")) // no SASL: CBS alone (here AllowAnyKey)
	hdr := make([]byte, 8)
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.br.Read(hdr); err != nil || string(hdr) != "AMQP\x00\x01\x00\x00" {
		t.Fatalf("protocol header: %q %v", hdr, err)
	}
	c.send(0, &frames.Open{ContainerID: uuid.NewString(), Hostname: "localhost", MaxFrameSize: 65536, ChannelMax: 16})
	c.await("open", func(f frames.Frame) bool { _, ok := f.Body.(*frames.Open); return ok })
	for _, ch := range []uint16{chEntities, chCoordinator} {
		c.send(ch, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 255})
		c.await("begin", func(f frames.Frame) bool { _, ok := f.Body.(*frames.Begin); return ok && f.Channel == ch })
	}
	return c
}

func (c *txnClient) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *txnClient) send(ch uint16, body frames.Body) {
	c.t.Helper()
	b, err := frames.AppendFrame(nil, ch, body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

// await returns the first frame (kept back earlier or read now) that
// matches; others are kept for later calls.
func (c *txnClient) await(what string, match func(frames.Frame) bool) frames.Frame {
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

// attach attaches a link and returns the reply; a sender link also waits
// for its credit (unless refused).
func (c *txnClient) attach(ch uint16, a *frames.Attach) *frames.Attach {
	c.t.Helper()
	c.send(ch, a)
	f := c.await("attach reply", func(f frames.Frame) bool {
		r, ok := f.Body.(*frames.Attach)
		return ok && f.Channel == ch && r.Name == a.Name
	})
	reply := f.Body.(*frames.Attach)
	if ch == chEntities {
		c.handles[a.Handle] = reply.Handle
	}
	if a.Role == frames.RoleSender && (reply.Target != nil || reply.Coordinator != nil) {
		c.await("credit", func(f frames.Frame) bool {
			fl, ok := f.Body.(*frames.Flow)
			return ok && f.Channel == ch && fl.Handle != nil && *fl.Handle == reply.Handle // the broker's handle
		})
	}
	return reply
}

// attachCoordinator attaches the controller link as .NET does: a source
// with a random address, a coordinator target, unsettled transfers.
func (c *txnClient) attachCoordinator() *frames.Attach {
	name := uuid.New().String()
	return c.attach(chCoordinator, &frames.Attach{
		Name: name, Handle: hCoordinator, Role: frames.RoleSender,
		Source:               &frames.Source{Address: name},
		Coordinator:          &frames.Coordinator{},
		InitialDeliveryCount: new(uint32),
	})
}

// attachSender attaches a sender link to target; dest makes it a send-via
// link to dest through target.
func (c *txnClient) attachSender(handle uint32, target, dest string) *frames.Attach {
	a := &frames.Attach{
		Name: uuid.NewString(), Handle: handle, Role: frames.RoleSender,
		Source:               &frames.Source{Address: uuid.NewString()},
		Target:               &frames.Target{Address: target},
		InitialDeliveryCount: new(uint32),
	}
	if dest != "" {
		a.Properties = map[frames.Symbol]any{"com.microsoft:transfer-destination-address": dest}
	}
	return c.attach(chEntities, a)
}

// attachReceiver attaches a peek-lock receiver (settle on dispose:
// receiver settle mode second) and grants credit.
func (c *txnClient) attachReceiver(handle uint32, source string, credit uint32) *frames.Attach {
	c.t.Helper()
	second := frames.ReceiverSettleModeSecond
	r := c.attach(chEntities, &frames.Attach{
		Name: uuid.NewString(), Handle: handle, Role: frames.RoleReceiver,
		Source:        &frames.Source{Address: source},
		Target:        &frames.Target{Address: uuid.NewString()},
		RcvSettleMode: &second,
	})
	if r.Source == nil {
		c.t.Fatalf("receiver on %s refused", source)
	}
	zero := uint32(0)
	c.send(chEntities, &frames.Flow{NextIncomingID: &zero, IncomingWindow: 5000, NextOutgoingID: c.nextID[chEntities], OutgoingWindow: 5000,
		Handle: &handle, DeliveryCount: &zero, LinkCredit: &credit})
	return r
}

// transfer sends one message (unsettled) and waits for its disposition.
func (c *txnClient) transfer(ch uint16, handle uint32, payload []byte, state frames.DeliveryState) frames.DeliveryState {
	c.t.Helper()
	id := c.nextID[ch]
	c.nextID[ch]++
	c.tag++
	format := uint32(0)
	c.send(ch, &frames.Transfer{Handle: handle, DeliveryID: &id, DeliveryTag: binary.LittleEndian.AppendUint64(nil, c.tag),
		MessageFormat: &format, State: state, Payload: payload})
	f := c.await("disposition", func(f frames.Frame) bool {
		d, ok := f.Body.(*frames.Disposition)
		return ok && f.Channel == ch && d.Role == frames.RoleReceiver && d.First <= id && (d.Last == nil && d.First == id || d.Last != nil && *d.Last >= id)
	})
	return f.Body.(*frames.Disposition).State
}

func (c *txnClient) command(fields ...any) frames.DeliveryState {
	c.t.Helper()
	code := uint64(0x31) // declare()
	if len(fields) > 0 {
		code = 0x32 // discharge(txn-id, fail)
	}
	return c.transfer(chCoordinator, hCoordinator, txnCommandPayload(c.t, code, fields...), nil)
}

func txnCommandPayload(t testing.TB, code uint64, fields ...any) []byte {
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

// declare declares a transaction and returns its id.
func (c *txnClient) declare() []byte {
	c.t.Helper()
	st := c.command()
	d, ok := st.(*frames.Declared)
	if !ok {
		c.t.Fatalf("declare answered %v", st)
	}
	return d.TxnID
}

// discharge commits (fail=false) or rolls back a transaction.
func (c *txnClient) discharge(id []byte, fail bool) frames.DeliveryState {
	c.t.Helper()
	return c.command(id, fail)
}

func msgPayload(t testing.TB, body string) []byte {
	t.Helper()
	b, err := (&frames.Message{Properties: &frames.Properties{MessageID: uuid.NewString()}, RawBody: frames.AppendDataSection(nil, []byte(body))}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendTxn sends body on a sender link inside transaction id.
func (c *txnClient) sendTxn(handle uint32, body string, id []byte) frames.DeliveryState {
	c.t.Helper()
	var st frames.DeliveryState
	if id != nil {
		st = &frames.TransactionalState{TxnID: id}
	}
	return c.transfer(chEntities, handle, msgPayload(c.t, body), st)
}

type received struct {
	id   uint32
	tag  []byte
	body string
}

// receive waits for n transfers on a receiver link.
func (c *txnClient) receive(handle uint32, n int) []received {
	c.t.Helper()
	var out []received
	for len(out) < n {
		f := c.await("message", func(f frames.Frame) bool {
			tr, ok := f.Body.(*frames.Transfer)
			return ok && f.Channel == chEntities && tr.Handle == c.handles[handle]
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
		out = append(out, received{id: *tr.DeliveryID, tag: append([]byte(nil), tr.DeliveryTag...), body: string(data[0])})
	}
	return out
}

// dispose settles a received message with outcome inside transaction id
// (nil: outside any) and returns the broker's answer.
func (c *txnClient) dispose(m received, outcome frames.DeliveryState, id []byte) frames.DeliveryState {
	c.t.Helper()
	st := outcome
	if id != nil {
		st = &frames.TransactionalState{TxnID: id, Outcome: outcome}
	}
	c.send(chEntities, &frames.Disposition{Role: frames.RoleReceiver, First: m.id, State: st, Batchable: true})
	f := c.await("disposition", func(f frames.Frame) bool {
		d, ok := f.Body.(*frames.Disposition)
		return ok && f.Channel == chEntities && d.Role == frames.RoleSender && d.First <= m.id && (d.Last == nil && d.First == m.id || d.Last != nil && *d.Last >= m.id)
	})
	return f.Body.(*frames.Disposition).State
}

// mgmtTxn sends a $management request (operation, amqp-value body) on
// sender handle inside transaction id and returns the transfer's
// disposition and, unless it was refused, the reply's status-code, read
// on receiver handle replies (attached to the same management node).
func (c *txnClient) mgmtTxn(handle, replies uint32, op string, body encoding.Map, id []byte) (frames.DeliveryState, any) {
	c.t.Helper()
	st, reply := c.mgmtTxnReply(handle, replies, op, body, id)
	if reply == nil {
		return st, nil
	}
	return st, reply.ApplicationProperties["statusCode"]
}

// mgmtTxnReply is mgmtTxn returning the whole reply (nil when the
// request was refused).
func (c *txnClient) mgmtTxnReply(handle, replies uint32, op string, body encoding.Map, id []byte) (frames.DeliveryState, *frames.Message) {
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
	st := c.transfer(chEntities, handle, payload, &frames.TransactionalState{TxnID: id})
	if _, ok := st.(*frames.Rejected); ok {
		return st, nil
	}
	f := c.await("reply", func(f frames.Frame) bool {
		tr, ok := f.Body.(*frames.Transfer)
		return ok && f.Channel == chEntities && tr.Handle == c.handles[replies]
	})
	var m frames.Message
	if err := m.UnmarshalBinary(f.Body.(*frames.Transfer).Payload); err != nil {
		c.t.Fatal(err)
	}
	return st, &m
}
