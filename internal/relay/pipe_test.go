package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

const condTestRefused = "com.busbar:test-refused"

// heldOwner serves relayed links with the owner's handler but holds the
// transfers of sender links to "q" at the owner, unsettled, until hold
// of them have arrived: that many are in flight from the gateway at
// once. Then (unless keep) it passes them on in order, and every later
// one as it comes; a transfer whose body is "refuse" it rejects itself
// with condTestRefused.
type heldOwner struct {
	relayOwner
	hold int
	keep bool

	mu      sync.Mutex
	arrived int
	held    []heldDelivery
	reached chan struct{} // closed when hold transfers arrived
	conns   []*amqp.Conn
}

type heldDelivery struct {
	d    *amqp.IncomingDelivery
	pass func(*amqp.IncomingDelivery)
}

// twoNodesHeld is twoNodesWrapped whose owner holds transfers as a
// heldOwner(hold, keep) does; it returns that owner too.
func twoNodesHeld(t *testing.T, hold int, keep bool) (owner *heldOwner, connStr string, b *servicebustest.Server) {
	t.Helper()
	connStr, b, _ = twoNodesWrapped(t, &servicebustest.Options{}, func(o relayOwner) relayOwner {
		owner = &heldOwner{relayOwner: o, hold: hold, keep: keep, reached: make(chan struct{})}
		return owner
	})
	return owner, connStr, b
}

func (h *heldOwner) ConnectRelayed(c *amqp.Conn) (amqp.ConnHandler, error) {
	ch, err := h.relayOwner.ConnectRelayed(c)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
	return &heldConn{ConnHandler: ch, h: h}, nil
}

type heldConn struct {
	amqp.ConnHandler
	h *heldOwner
}

func (hc *heldConn) AttachIncoming(l *amqp.IncomingLink) error {
	err := hc.ConnHandler.AttachIncoming(l)
	if inner := l.OnDelivery; inner != nil && l.TargetAddress() == "q" {
		l.OnDelivery = func(d *amqp.IncomingDelivery) { hc.h.deliver(d, inner) }
	}
	return err
}

// deliver runs on the owner's session goroutine.
func (h *heldOwner) deliver(d *amqp.IncomingDelivery, pass func(*amqp.IncomingDelivery)) {
	h.mu.Lock()
	h.arrived++
	if h.arrived <= h.hold || h.keep {
		h.held = append(h.held, heldDelivery{d, pass})
		if h.arrived < h.hold {
			h.mu.Unlock()
			return
		}
		if h.arrived == h.hold {
			close(h.reached)
		}
		if h.keep {
			h.mu.Unlock()
			return
		}
	}
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, hd := range held {
		h.pass(hd.d, hd.pass)
	}
	if len(held) == 0 {
		h.pass(d, pass)
	}
}

func (h *heldOwner) pass(d *amqp.IncomingDelivery, pass func(*amqp.IncomingDelivery)) {
	var m goamqp.Message
	if err := m.UnmarshalBinary(d.Payload); err == nil && string(m.GetData()) == "refuse" {
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condTestRefused, Description: "refused by the test's owner"}})
		return
	}
	pass(d)
}

// Transfers on one relayed sender link are pipelined: the owner holds
// the first ones unsettled until eight are in flight at once (with one
// transfer at a time it would never get a second), and then every
// transfer is settled with the owner's own outcome, in order, and the
// messages are stored in the order sent.
func TestRelaySendPipelined(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	const hold, n, refused = 8, 200, 77
	owner, connStr, b := twoNodesHeld(t, hold, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := dialWithToken(ctx, t, connStr, "q")
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	receipts := make([]goamqp.SendReceipt, n)
	for i := range n {
		body := fmt.Sprint("m", i)
		if i == refused {
			body = "refuse"
		}
		if receipts[i], err = snd.SendWithReceipt(ctx, goamqp.NewMessage([]byte(body)), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	select {
	case <-owner.reached:
	case <-ctx.Done():
		owner.mu.Lock()
		defer owner.mu.Unlock()
		t.Fatalf("the owner got %d transfers in flight at once, want %d", owner.arrived, hold)
	}
	for i := range receipts {
		state, err := receipts[i].Wait(ctx)
		if err != nil {
			t.Fatalf("outcome %d: %v", i, err)
		}
		rej, isRej := state.(*goamqp.StateRejected)
		switch {
		case i == refused && (!isRej || rej.Error == nil || rej.Error.Condition != condTestRefused):
			t.Fatalf("outcome %d: %#v, want the owner's rejection", i, state)
		case i != refused && !isAccepted(state):
			t.Fatalf("outcome %d: %#v, want accepted", i, state)
		}
	}
	if info, err := b.Broker.GetQueue("q"); err != nil || info.Counts.Total != n-1 {
		t.Fatalf("owner holds %+v, %v; want %d messages", info.Counts, err, n-1)
	}
	c := newClient(t, b.ConnectionString)
	rcv, err := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < n-1 {
		ms, err := rcv.ReceiveMessages(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			got = append(got, string(m.Body))
		}
	}
	for i, j := 0, 0; i < n; i++ {
		if i == refused {
			continue
		}
		if want := fmt.Sprint("m", i); got[j] != want {
			t.Fatalf("message %d is %q, want %q (order lost)", j, got[j], want)
		}
		j++
	}
}

func isAccepted(s goamqp.DeliveryState) bool {
	_, ok := s.(*goamqp.StateAccepted)
	return ok
}

// When the internal connection fails with transfers in flight, every one
// of them is rejected com.microsoft:server-busy (its outcome is
// unknown), none is reported as sent, and the client link is detached.
func TestRelaySendInFlightFailure(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	const hold = 12
	owner, connStr, b := twoNodesHeld(t, hold, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := dialWithToken(ctx, t, connStr, "q")
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	receipts := make([]goamqp.SendReceipt, hold)
	for i := range hold {
		if receipts[i], err = snd.SendWithReceipt(ctx, goamqp.NewMessage([]byte(fmt.Sprint("m", i))), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	select {
	case <-owner.reached:
	case <-ctx.Done():
		t.Fatal("the transfers did not all reach the owner")
	}
	// Each is failed: rejected server-busy, or (go-amqp's Wait picks at
	// random between an outcome and the link's end when both are there)
	// the link's detach-forced, which the gateway sent after the
	// rejections.
	outcomes := make([]error, hold)
	var wg sync.WaitGroup
	for i := range receipts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			state, err := receipts[i].Wait(ctx)
			var le *goamqp.LinkError
			switch rej, ok := state.(*goamqp.StateRejected); {
			case err == nil && ok && rej.Error != nil && rej.Error.Condition == condServerBusy:
			case errors.As(err, &le) && le.RemoteErr != nil && le.RemoteErr.Condition == goamqp.ErrCondDetachForced:
			default:
				outcomes[i] = fmt.Errorf("%#v, %v; want server-busy", state, err)
			}
		}()
	}
	owner.mu.Lock()
	for _, c := range owner.conns {
		c.Close(nil)
	}
	owner.mu.Unlock()
	wg.Wait()
	for i, err := range outcomes {
		if err != nil {
			t.Errorf("outcome %d: %v", i, err)
		}
	}
	err = snd.Send(ctx, goamqp.NewMessage([]byte("after")), nil)
	var le *goamqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != goamqp.ErrCondDetachForced {
		t.Fatalf("send after the failure: %v, want the link detached", err)
	}
	if info, err := b.Broker.GetQueue("q"); err != nil || info.Counts.Total != 0 {
		t.Fatalf("owner holds %+v, %v; want none", info.Counts, err)
	}
}

// Plain and transactional transfers sent on one relayed link without
// waiting for outcomes (they use different internal links) each get
// their own outcome, and the transaction's message is applied by the
// commit only.
func TestRelaySendPipelinedTxn(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	tc := startTxnCluster(t)
	c := txnclient.Dial(t, tc.a.Addr)
	c.AttachCoordinator()
	c.AttachSender(2, "in", "")
	id := c.Declare()
	type out struct {
		id  uint32
		txn bool
	}
	var sentIDs []out
	for _, body := range []string{"p1", "t1", "p2", "t2", "p3"} {
		var st frames.DeliveryState
		if body[0] == 't' {
			st = &frames.TransactionalState{TxnID: id}
		}
		did := c.Post(txnclient.ChEntities, 2, txnclient.MessagePayload(t, body), st)
		sentIDs = append(sentIDs, out{did, st != nil})
	}
	states := map[uint32]frames.DeliveryState{}
	for len(states) < len(sentIDs) {
		f := c.Await("disposition", func(f frames.Frame) bool {
			d, ok := f.Body.(*frames.Disposition)
			return ok && f.Channel == txnclient.ChEntities && d.Role == frames.RoleReceiver
		})
		d := f.Body.(*frames.Disposition)
		last := d.First
		if d.Last != nil {
			last = *d.Last
		}
		for i := d.First; i <= last; i++ {
			states[i] = d.State
		}
	}
	for _, s := range sentIDs {
		st := states[s.id]
		if _, isTxn := st.(*frames.TransactionalState); isTxn != s.txn {
			t.Fatalf("delivery %d answered %v", s.id, st)
		}
		txnAccepted(t, st)
	}
	holds(t, tc.b, "in", "p1", "p2", "p3")
	txnAccepted(t, c.Discharge(id, false))
	holds(t, tc.b, "in", "p1", "p2", "p3", "t1", "t2")
}

// The credit of a relayed sender link keeps what the gateway may hold for
// it (credit × the entity's max-message-size) within senderBudget.
func TestRelayCredit(t *testing.T) {
	for _, tc := range []struct {
		max  uint64
		want uint32
	}{
		{256 << 10, senderCredit}, // Standard's 256 KB: the full credit
		{1 << 20, senderCredit},
		{4 << 20, 64},
		{100 << 20, 2}, // Premium's 100 MB
		{senderBudget, 1},
		{0, 1}, // no limit given
	} {
		got := relayCredit(tc.max)
		if got != tc.want {
			t.Errorf("relayCredit(%d) = %d, want %d", tc.max, got, tc.want)
		}
		if tc.max != 0 && uint64(got)*tc.max > senderBudget && got > 1 {
			t.Errorf("relayCredit(%d) = %d holds more than the budget", tc.max, got)
		}
	}
}
