package relay

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// dispositions are the outcomes a client can settle a peek-locked
// message with, as TestRelayOwnerOutcomes sends them.
var dispositions = []struct {
	name  string
	state frames.DeliveryState
}{
	{"accepted", &frames.Accepted{}},
	{"released", &frames.Released{}},
	{"no outcome", nil},
	{"modified", &frames.Modified{}},
	{"modified delivery-failed", &frames.Modified{DeliveryFailed: true,
		MessageAnnotations: map[frames.Symbol]any{"x": "y"}}},
	{"modified undeliverable-here", &frames.Modified{UndeliverableHere: true}},
	{"modified both", &frames.Modified{DeliveryFailed: true, UndeliverableHere: true}},
	{"rejected", &frames.Rejected{}},
	{"rejected dead-letter", deadLetter},
	{"rejected other condition", &frames.Rejected{Error: &frames.Error{Condition: "app:bad", Description: "no"}}},
	{"received", &frames.Received{SectionNumber: 0, SectionOffset: 0}},
}

// outcomeSeen is what one disposition did: the answer (a rejection by
// its condition only; the text carries a tracking id) and the message's
// state afterwards.
type outcomeSeen struct {
	answer string
	queue  string
}

func settleOnce(t *testing.T, node string, state frames.DeliveryState, txn bool) outcomeSeen {
	t.Helper()
	tc := startTxnCluster(t)
	seedTxn(t, tc.b, "in", "a")
	addr := tc.b.Addr
	if node == "gateway" {
		addr = tc.a.Addr
	}
	c := txnclient.Dial(t, addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 1)
	m := c.Receive(1, 1)[0]
	var id []byte
	if txn {
		id = c.Declare()
	}
	st := c.Dispose(m, state, id)
	if txn {
		c.Discharge(id, false)
	}
	q := queueState(t, tc.b)
	if errs, err := tc.b.Broker.CheckLocks("in", []uuid.UUID{lockToken(m.Tag)}); err != nil {
		t.Fatal(err)
	} else if errs[0] == nil {
		q += "; still locked"
	}
	return outcomeSeen{answer: describe(st), queue: q}
}

func describe(st frames.DeliveryState) string {
	if ts, ok := st.(*frames.TransactionalState); ok {
		return "txn:" + describe(ts.Outcome)
	}
	if r, ok := st.(*frames.Rejected); ok && r.Error != nil {
		return "rejected " + string(r.Error.Condition)
	}
	return fmt.Sprintf("%#v", st)
}

func queueState(t *testing.T, s *servicebustest.Server) string {
	t.Helper()
	var out []string
	for _, path := range []string{"in", "in/$DeadLetterQueue"} {
		ds, err := s.Broker.Peek(context.Background(), path, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%s: count %d, state %v, props %v", path, d.DeliveryCount, d.State,
				d.Message.ApplicationProperties))
		}
	}
	return strings.Join(out, "; ")
}

// The owner answers a relayed disposition with the outcome the client
// asked for (without its annotations or error) or with rejected carrying
// an error, never with another outcome: the gateway, which learns from
// go-amqp only whether the owner's answer was a rejection with an error
// (proxy.go: onDisposition), tells the client what the owner would have
// told it directly. This pins both: every outcome a client can send,
// outside and inside a transaction, is answered through the gateway as
// by the node serving the queue, and leaves the message in the same
// state.
func TestRelayOwnerOutcomes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, txn := range []bool{false, true} {
		for _, d := range dispositions {
			t.Run(fmt.Sprintf("%s/txn=%v", d.name, txn), func(t *testing.T) {
				direct := settleOnce(t, "owner", d.state, txn)
				relayed := settleOnce(t, "gateway", d.state, txn)
				if !reflect.DeepEqual(direct, relayed) {
					t.Fatalf("through the gateway:\n  %+v\nthe owner itself:\n  %+v", relayed, direct)
				}
			})
		}
	}
}
