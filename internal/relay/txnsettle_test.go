package relay

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/message"
)

// settleVia is how a test settles a message: on the receiver link
// (handle 1) or with $management update-disposition (handles 4 and 5).
type settleVia int

const (
	viaLink settleVia = iota
	viaMgmt
)

func (v settleVia) String() string { return [...]string{"link", "management"}[v] }

// complete completes m (of session sid, "" for none) via v inside
// transaction id (nil: outside any) and returns the outcome, unwrapped
// from a transactional state (a management request's is its status
// code: accepted for 200).
func complete(t *testing.T, c *txnclient.Client, v settleVia, m txnclient.Received, sid string, id []byte) frames.DeliveryState {
	t.Helper()
	if v == viaLink {
		st := c.Dispose(m, &frames.Accepted{}, id)
		if ts, ok := st.(*frames.TransactionalState); ok {
			return ts.Outcome
		}
		return st
	}
	body := encoding.Map{
		{Key: "disposition-status", Value: "completed"},
		{Key: "lock-tokens", Value: []any{encoding.UUID(lockToken(m.Tag))}},
	}
	if sid != "" {
		body = append(body, encoding.MapEntry{Key: "session-id", Value: sid})
	}
	st, reply := c.MgmtTxnReply(4, 5, "com.microsoft:update-disposition", body, id)
	if reply == nil {
		return st
	}
	if code := reply.ApplicationProperties["statusCode"]; code != int32(200) {
		cond, _ := reply.ApplicationProperties["errorCondition"].(encoding.Symbol)
		desc, _ := reply.ApplicationProperties["statusDescription"].(string)
		return &frames.Rejected{Error: &frames.Error{Condition: frames.Symbol(fmt.Sprint(cond)), Description: fmt.Sprintf("%v %s", code, desc)}}
	}
	return &frames.Accepted{}
}

// lockToken is the lock token a delivery tag carries (the .NET GUID
// byte order).
func lockToken(tag []byte) uuid.UUID {
	var u uuid.UUID
	u[0], u[1], u[2], u[3] = tag[3], tag[2], tag[1], tag[0]
	u[4], u[5], u[6], u[7] = tag[5], tag[4], tag[7], tag[6]
	copy(u[8:], tag[8:])
	return u
}

// A message completed in a transaction that is rolled back keeps its
// lock: the receiver completes it again, outside a transaction or in a
// new one, through the node that serves the queue and through one that
// relays it alike. Completed first by $management, it is completed again
// by link or by $management; completed first by link (the .NET SDK's
// way: an unsettled disposition carrying transactional-state, which
// the broker answers settled, as Service Bus does), the delivery is
// settled, so the lock is settled again by $management, and a second
// disposition of that delivery is answered message-lock-lost (a .NET
// client's link no longer holds it and reports the same) while the
// lock stays.
func TestRelayTxnSettleAfterRollback(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, node := range []string{"owner", "gateway"} {
		for _, q := range []string{"in", "sin"} { // sin: a session's message
			for _, first := range []settleVia{viaLink, viaMgmt} {
				for _, again := range []settleVia{viaLink, viaMgmt} {
					for _, inTxn := range []bool{false, true} {
						name := fmt.Sprintf("%s/%s/%s-then-%s/txn=%v", node, q, first, again, inTxn)
						t.Run(name, func(t *testing.T) {
							settleAfterRollback(t, node, q, first, again, inTxn)
						})
					}
				}
			}
		}
	}
}

func settleAfterRollback(t *testing.T, node, q string, first, again settleVia, inTxn bool) {
	tc := startTxnCluster(t)
	sid := ""
	if q == "sin" {
		sid = "x"
	}
	msg := &message.Message{Body: frames.AppendDataSection(nil, []byte("a")), SessionID: sid}
	if err := tc.b.Broker.Send(context.Background(), q, []*message.Message{msg}); err != nil {
		t.Fatal(err)
	}
	addr := tc.b.Addr
	if node == "gateway" {
		addr = tc.a.Addr
	}
	c := txnclient.Dial(t, addr)
	c.AttachCoordinator()
	if sid != "" {
		c.AttachSessionReceiver(1, q, sid, 1)
	} else {
		c.AttachReceiver(1, q, 1)
	}
	c.AttachSender(4, q+"/$management", "")
	c.AttachReceiver(5, q+"/$management", 10)
	m := c.Receive(1, 1)[0]
	id := c.Declare()
	txnAccepted(t, complete(t, c, first, m, sid, id))
	txnAccepted(t, c.Discharge(id, true))
	holds(t, tc.b, q, "a")
	if errs, err := tc.b.Broker.CheckLocks(q, []uuid.UUID{lockToken(m.Tag)}); err != nil || errs[0] != nil {
		t.Fatalf("lock after the rollback: %v %v", errs, err)
	}
	var id2 []byte
	if inTxn {
		id2 = c.Declare()
	}
	if first == viaLink && again == viaLink {
		st := complete(t, c, again, m, sid, id2)
		if r, ok := st.(*frames.Rejected); !ok || r.Error == nil || r.Error.Condition != condLockLost {
			t.Fatalf("disposition of a settled delivery answered %v", st)
		}
		again = viaMgmt
	}
	txnAccepted(t, complete(t, c, again, m, sid, id2))
	if inTxn {
		holds(t, tc.b, q, "a")
		txnAccepted(t, c.Discharge(id2, false))
	}
	holds(t, tc.b, q)
}
