package servicebus_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/amqp/txnclient"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// Transactions over the wire, with the .NET SDK's frames (txnclient_test.go).

func startTxnServer(t *testing.T, queues ...string) (*servicebustest.Server, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk, Queues: queues})
	return s, clk
}

func seed(t *testing.T, s *servicebustest.Server, path string, bodies ...string) {
	t.Helper()
	var msgs []*message.Message
	for _, b := range bodies {
		msgs = append(msgs, &message.Message{Body: frames.AppendDataSection(nil, []byte(b))})
	}
	if err := s.Broker.Send(context.Background(), path, msgs); err != nil {
		t.Fatal(err)
	}
}

// contents lists the bodies of path's messages (peek: locked ones too).
func contents(t *testing.T, s *servicebustest.Server, path string) []string {
	t.Helper()
	ds, err := s.Broker.Peek(context.Background(), path, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		data, err := frames.DataSections(d.Message.Body)
		if err != nil || len(data) != 1 {
			t.Fatalf("body %x: %v", d.Message.Body, err)
		}
		out = append(out, string(data[0]))
	}
	return out
}

func want(t *testing.T, s *servicebustest.Server, path string, bodies ...string) {
	t.Helper()
	if got := contents(t, s, path); !slices.Equal(got, bodies) {
		t.Fatalf("%s holds %q; want %q", path, got, bodies)
	}
}

func wantAccepted(t *testing.T, st frames.DeliveryState) {
	t.Helper()
	switch x := st.(type) {
	case *frames.Accepted:
		return
	case *frames.TransactionalState:
		if _, ok := x.Outcome.(*frames.Accepted); ok {
			return
		}
	}
	t.Fatalf("answered %v; want accepted", st)
}

func wantRejected(t *testing.T, st frames.DeliveryState, cond frames.Symbol, text string) {
	t.Helper()
	r, ok := st.(*frames.Rejected)
	if !ok || r.Error == nil || r.Error.Condition != cond || !strings.Contains(r.Error.Description, text) {
		t.Fatalf("answered %v; want rejected %s containing %q", st, cond, text)
	}
}

func TestTxnCoordinatorAttach(t *testing.T) {
	s, _ := startTxnServer(t)
	c := txnclient.Dial(t, s.Addr)
	r := c.AttachCoordinator()
	if r.Coordinator == nil || r.Target != nil {
		t.Fatalf("attach reply target %v coordinator %v; want the coordinator echoed", r.Target, r.Coordinator)
	}
	if !slices.Contains(r.OfferedCapabilities, "amqp:local-transactions") {
		t.Fatalf("offered capabilities %v", r.OfferedCapabilities)
	}
	// A global transaction is refused.
	wantRejected(t, c.Transfer(txnclient.ChCoordinator, txnclient.HCoordinator, txnclient.CommandPayload(t, 0x31, []byte("global")), nil), "amqp:not-implemented", "Global")
}

func TestTxnCommitReceiveCompleteSend(t *testing.T) {
	s, _ := startTxnServer(t, "in")
	seed(t, s, "in", "a", "b")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 2)
	c.AttachSender(2, "in", "")
	ms := c.Receive(1, 2)
	id := c.Declare()

	wantAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	if st := c.Dispose(ms[1], &frames.Rejected{Error: &frames.Error{Condition: "com.microsoft:dead-letter",
		Info: map[frames.Symbol]any{"DeadLetterReason": "bad"}}}, id); st == nil {
		t.Fatal("no answer to the dead-letter")
	} else if ts, ok := st.(*frames.TransactionalState); !ok || ts.Outcome == nil {
		t.Fatalf("dead-letter answered %v", st)
	}
	wantAccepted(t, c.SendTxn(2, "c", id))
	// Nothing is applied before the commit.
	want(t, s, "in", "a", "b")
	want(t, s, "in/$DeadLetterQueue")

	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in", "c")
	want(t, s, "in/$DeadLetterQueue", "b")
	// Discharged: the id is gone.
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:unknown-id", "not open")
}

func TestTxnRollbackLeavesEverything(t *testing.T) {
	s, _ := startTxnServer(t, "in")
	seed(t, s, "in", "a")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 1)
	c.AttachSender(2, "in", "")
	m := c.Receive(1, 1)[0]
	id := c.Declare()
	wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
	wantAccepted(t, c.SendTxn(2, "x", id))
	wantAccepted(t, c.Discharge(id, true))
	want(t, s, "in", "a")
	// As in Service Bus, the receiver still holds the lock: the message
	// can be settled again, and its delivery count did not change.
	ds, err := s.Broker.Peek(context.Background(), "in", 0, 1)
	if err != nil || ds[0].DeliveryCount != 1 {
		t.Fatalf("after rollback: %v %v", ds, err)
	}
	if err := s.Broker.Complete(context.Background(), "in", lockToken(t, m.Tag)); err != nil {
		t.Fatalf("complete after rollback: %v", err)
	}
	want(t, s, "in")
}

func TestTxnSendVia(t *testing.T) {
	s, _ := startTxnServer(t, "in", "out", "other")
	seed(t, s, "in", "a")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 1)
	r := c.AttachSender(2, "in", "out")
	if r.Target == nil || r.Properties["com.microsoft:transfer-destination-address"] != "out" {
		t.Fatalf("send-via attach reply %v", r)
	}
	c.AttachSender(3, "out", "") // a plain sender to another entity
	m := c.Receive(1, 1)[0]
	id := c.Declare()
	wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
	wantAccepted(t, c.SendTxn(2, "x", id))
	wantAccepted(t, c.SendTxn(2, "y", id))
	want(t, s, "out")
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in")
	want(t, s, "out", "x", "y")

	// Without send-via, another entity than the first is refused, and the
	// transaction can then only roll back.
	seed(t, s, "in", "b")
	c.Send(txnclient.ChEntities, &frames.Flow{NextIncomingID: ptr(uint32(1)), IncomingWindow: 5000, NextOutgoingID: 2, OutgoingWindow: 5000,
		Handle: ptr(uint32(1)), DeliveryCount: ptr(uint32(1)), LinkCredit: ptr(uint32(1))})
	m = c.Receive(1, 1)[0]
	id = c.Declare()
	wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
	wantRejected(t, c.SendTxn(3, "z", id), "amqp:not-allowed", "cannot span several top-level entities")
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "cannot span")
	want(t, s, "in", "b")
	want(t, s, "out", "x", "y")
}

// The .NET SDK sends to several final destinations through the via
// entity (the first one the transaction operated on): every send lands
// on commit, in one store batch, and none before.
func TestTxnSendViaSeveralDestinations(t *testing.T) {
	s, _ := startTxnServer(t, "in", "out", "other")
	seed(t, s, "in", "a")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 1)
	c.AttachSender(2, "in", "out")
	c.AttachSender(3, "in", "other")
	c.AttachSender(4, "in", "") // the via entity itself
	m := c.Receive(1, 1)[0]
	id := c.Declare()
	wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
	wantAccepted(t, c.SendTxn(2, "x", id))
	wantAccepted(t, c.SendTxn(3, "y", id))
	wantAccepted(t, c.SendTxn(4, "z", id))
	wantAccepted(t, c.SendTxn(2, "x2", id))
	want(t, s, "out")
	want(t, s, "other")
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in", "z")
	want(t, s, "out", "x", "x2")
	want(t, s, "other", "y")

	// Rolled back: none of the destinations gets anything.
	id = c.Declare()
	wantAccepted(t, c.SendTxn(3, "no", id))
	wantAccepted(t, c.SendTxn(2, "no", id))
	wantAccepted(t, c.Discharge(id, true))
	want(t, s, "out", "x", "x2")
	want(t, s, "other", "y")
}

// Settlement by lock token through $management (update-disposition)
// inside a transaction is recorded like a transactional disposition and
// applied on commit; its reply comes at once, and a refused one makes
// the transaction rollback-only.
func TestTxnUpdateDisposition(t *testing.T) {
	s, _ := startTxnServer(t, "in", "out")
	seed(t, s, "in", "a", "b")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 2)
	c.AttachSender(2, "in", "out")
	c.AttachSender(4, "in/$management", "")
	c.AttachReceiver(5, "in/$management", 10)
	ms := c.Receive(1, 2)
	settle := func(status string, m txnclient.Received, id []byte) (frames.DeliveryState, any) {
		t.Helper()
		return c.MgmtTxn(4, 5, "com.microsoft:update-disposition", encoding.Map{
			{Key: "disposition-status", Value: status},
			{Key: "lock-tokens", Value: []any{encoding.UUID(lockToken(t, m.Tag))}},
			{Key: "deadletter-reason", Value: "why"},
		}, id)
	}

	id := c.Declare()
	st, code := settle("completed", ms[0], id)
	wantAccepted(t, st)
	if code != int32(200) {
		t.Fatalf("update-disposition in a transaction answered %v", code)
	}
	wantAccepted(t, c.SendTxn(2, "x", id))
	want(t, s, "in", "a", "b") // nothing applied yet
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in", "b")
	want(t, s, "out", "x")

	// Rolled back: the message stays, still locked by its receiver.
	id = c.Declare()
	st, code = settle("suspended", ms[1], id)
	wantAccepted(t, st)
	if code != int32(200) {
		t.Fatalf("update-disposition in a transaction answered %v", code)
	}
	wantAccepted(t, c.Discharge(id, true))
	want(t, s, "in", "b")
	want(t, s, "in/$DeadLetterQueue")

	// A lock token that holds no lock: refused, and the transaction can
	// only roll back.
	id = c.Declare()
	_, code = settle("completed", ms[0], id)
	if code != int32(410) {
		t.Fatalf("update-disposition of a settled message answered %v", code)
	}
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "lock")

	// Then dead-lettered by lock token in a transaction that commits.
	id = c.Declare()
	st, _ = settle("suspended", ms[1], id)
	wantAccepted(t, st)
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in")
	want(t, s, "in/$DeadLetterQueue", "b")
}

func TestTxnLimitsAndErrors(t *testing.T) {
	s, clk := startTxnServer(t, "in")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachSender(2, "in", "")

	wantRejected(t, c.Discharge([]byte("nope"), false), "amqp:transaction:unknown-id", "not open")
	wantRejected(t, c.SendTxn(2, "x", []byte("nope")), "amqp:transaction:unknown-id", "not open")

	// A $management request that changes state outside a transaction's
	// operations is refused inside one, and the transaction can only
	// roll back.
	c.AttachSender(4, "in/$management", "")
	id := c.Declare()
	wantAccepted(t, c.SendTxn(2, "x", id))
	st, _ := c.MgmtTxn(4, 5, "com.microsoft:batch-delete-messages", encoding.Map{{Key: "message-count", Value: int32(10)}}, id)
	wantRejected(t, st, "amqp:not-implemented", "inside a transaction")
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "inside a transaction")
	want(t, s, "in")

	// Operation count: 100 per transaction.
	id = c.Declare()
	for i := range broker.MaxTxnOperations {
		wantAccepted(t, c.SendTxn(2, "m", id))
		_ = i
	}
	wantRejected(t, c.SendTxn(2, "one too many", id), "amqp:resource-limit-exceeded", "100 operations")
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "100 operations")
	want(t, s, "in")

	// Timeout: 2 minutes, then rolled back.
	id = c.Declare()
	wantAccepted(t, c.SendTxn(2, "late", id))
	clk.Advance(2*time.Minute + time.Second)
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:timeout", "open longer than")
	want(t, s, "in")

	// A lock that expires inside the transaction rolls it back.
	seed(t, s, "in", "a")
	c.AttachReceiver(1, "in", 1)
	m := c.Receive(1, 1)[0]
	id = c.Declare()
	wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
	wantAccepted(t, c.SendTxn(2, "b", id))
	s.Advance(t, time.Minute+time.Second) // LockDuration is 1 minute
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "lock")
	if got := contents(t, s, "in"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("in holds %q after the rollback", got)
	}

	// At most 32 open transactions per connection.
	for range 32 {
		c.Declare()
	}
	wantRejected(t, c.Command(), "amqp:resource-limit-exceeded", "32 open transactions")
}

// lockToken reads a delivery tag: the lock token in .NET GUID byte order.
func lockToken(t *testing.T, tag []byte) uuid.UUID {
	t.Helper()
	if len(tag) != 16 {
		t.Fatalf("delivery tag %x", tag)
	}
	var u uuid.UUID
	u[0], u[1], u[2], u[3] = tag[3], tag[2], tag[1], tag[0]
	u[4], u[5], u[6], u[7] = tag[5], tag[4], tag[7], tag[6]
	copy(u[8:], tag[8:])
	return u
}

// A subscription and its topic are one top-level entity: receive from the
// subscription, send to the topic, in one transaction.
func TestTxnSubscriptionAndTopic(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk,
		Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	seed(t, s, "t", "a")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "t/Subscriptions/s", 1)
	c.AttachSender(2, "t", "")
	m := c.Receive(1, 1)[0]
	id := c.Declare()
	wantAccepted(t, c.Dispose(m, &frames.Accepted{}, id))
	wantAccepted(t, c.SendTxn(2, "b", id))
	want(t, s, "t/Subscriptions/s", "a")
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "t/Subscriptions/s", "b")
}

// A scheduled message sent in a transaction is scheduled on commit.
func TestTxnScheduledSend(t *testing.T) {
	s, clk := startTxnServer(t, "in")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachSender(2, "in", "")
	id := c.Declare()
	at := clk.Now().Add(time.Hour)
	payload, err := (&frames.Message{
		MessageAnnotations: map[frames.Symbol]any{"x-opt-scheduled-enqueue-time": at},
		Properties:         &frames.Properties{MessageID: "sched"},
		RawBody:            frames.AppendDataSection(nil, []byte("later")),
	}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	wantAccepted(t, c.Transfer(txnclient.ChEntities, 2, payload, &frames.TransactionalState{TxnID: id}))
	if qi, _ := s.Broker.GetQueue("in"); qi.Counts.Scheduled != 0 {
		t.Fatalf("scheduled before the commit: %+v", qi.Counts)
	}
	wantAccepted(t, c.Discharge(id, false))
	if qi, _ := s.Broker.GetQueue("in"); qi.Counts.Scheduled != 1 || qi.Counts.Active != 0 {
		t.Fatalf("after the commit: %+v", qi.Counts)
	}
	s.Advance(t, time.Hour+time.Second)
	want(t, s, "in", "later")
}

// schedulePayload is a message scheduled for at, encoded for a
// schedule-message request.
func schedulePayload(t *testing.T, body string, at time.Time) []byte {
	t.Helper()
	p, err := (&frames.Message{
		MessageAnnotations: map[frames.Symbol]any{"x-opt-scheduled-enqueue-time": at},
		Properties:         &frames.Properties{MessageID: body},
		RawBody:            frames.AppendDataSection(nil, []byte(body)),
	}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// schedule-message through $management inside a transaction (as the
// .NET SDK's ScheduleMessageAsync in a TransactionScope sends it): the
// reply carries the sequence numbers at once, the messages are
// scheduled only on commit, under those numbers; a rollback schedules
// nothing and leaves the numbers unused.
func TestTxnScheduleMessage(t *testing.T) {
	s, clk := startTxnServer(t, "in")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachSender(2, "in", "")
	c.AttachSender(4, "in/$management", "")
	c.AttachReceiver(5, "in/$management", 20)
	schedule := func(id []byte, bodies ...string) (frames.DeliveryState, any, []int64) {
		t.Helper()
		var items []any
		for _, b := range bodies {
			items = append(items, encoding.Map{
				{Key: "message-id", Value: b},
				{Key: "message", Value: schedulePayload(t, b, clk.Now().Add(time.Hour))},
			})
		}
		st, reply := c.MgmtTxnReply(4, 5, "com.microsoft:schedule-message", encoding.Map{{Key: "messages", Value: items}}, id)
		if reply == nil {
			return st, nil, nil
		}
		var seqs []int64
		if v, err := frames.BodyValue(reply.RawBody); err == nil {
			if m, ok := v.(encoding.Map); ok {
				x, _ := m.Get("sequence-numbers")
				seqs, _ = x.([]int64)
			}
		}
		return st, reply.ApplicationProperties["statusCode"], seqs
	}
	scheduled := func() int64 {
		t.Helper()
		qi, err := s.Broker.GetQueue("in")
		if err != nil {
			t.Fatal(err)
		}
		return qi.Counts.Scheduled
	}

	// Commit: the numbers come before it, the messages with it.
	id := c.Declare()
	st, code, seqs := schedule(id, "s1", "s2")
	wantAccepted(t, st)
	if code != int32(200) || !slices.Equal(seqs, []int64{1, 2}) {
		t.Fatalf("schedule in a transaction answered %v %v", code, seqs)
	}
	wantAccepted(t, c.SendTxn(2, "now", id))
	if n := scheduled(); n != 0 {
		t.Fatalf("%d scheduled before the commit", n)
	}
	want(t, s, "in")
	wantAccepted(t, c.Discharge(id, false))
	if n := scheduled(); n != 2 {
		t.Fatalf("%d scheduled after the commit", n)
	}
	want(t, s, "in", "s1", "s2", "now")
	// The numbers the reply gave name the messages.
	if err := s.Broker.CancelScheduled(context.Background(), "in", seqs[1:]); err != nil {
		t.Fatal(err)
	}
	want(t, s, "in", "s1", "now")

	// Rollback: nothing scheduled, the number is a gap.
	id = c.Declare()
	st, code, seqs = schedule(id, "never")
	wantAccepted(t, st)
	if code != int32(200) || len(seqs) != 1 {
		t.Fatalf("schedule in a transaction answered %v %v", code, seqs)
	}
	wantAccepted(t, c.Discharge(id, true))
	want(t, s, "in", "s1", "now")
	seed(t, s, "in", "after")
	ds, err := s.Broker.Peek(context.Background(), "in", seqs[0], 10)
	if err != nil || len(ds) != 1 || ds[0].SequenceNumber != seqs[0]+1 {
		t.Fatalf("after the rollback: %v %v", ds, err)
	}

	// A message without a scheduled time: 400, and the transaction can
	// only roll back.
	id = c.Declare()
	noTime, err := (&frames.Message{RawBody: frames.AppendDataSection(nil, []byte("x"))}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	_, code = c.MgmtTxn(4, 5, "com.microsoft:schedule-message", encoding.Map{{Key: "messages", Value: []any{
		encoding.Map{{Key: "message", Value: noTime}}}}}, id)
	if code != int32(400) {
		t.Fatalf("schedule without a time answered %v", code)
	}
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "scheduled enqueue time")

	// The scheduled message arrives at its time.
	s.Advance(t, time.Hour+time.Second)
	want(t, s, "in", "s1", "now", "after")
}

// cancel-scheduled-message through $management inside a transaction (the
// .NET SDK's CancelScheduledMessageAsync in a TransactionScope): applied
// on commit only; a rollback leaves the message scheduled; a message the
// same transaction schedules and cancels is never scheduled; a topic's
// are refused.
func TestTxnCancelScheduledMessage(t *testing.T) {
	s, clk := startTxnServer(t, "in")
	if _, err := s.Broker.CreateTopic("t", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	at := clk.Now().Add(time.Hour)
	seqs, err := s.Broker.Schedule(context.Background(), "in", []*message.Message{
		{Body: frames.AppendDataSection(nil, []byte("s1"))}, {Body: frames.AppendDataSection(nil, []byte("s2"))}}, at)
	if err != nil {
		t.Fatal(err)
	}
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachSender(2, "in", "")
	c.AttachSender(4, "in/$management", "")
	c.AttachReceiver(5, "in/$management", 20)
	cancel := func(id []byte, seqs ...int64) {
		t.Helper()
		st, code := c.MgmtTxn(4, 5, "com.microsoft:cancel-scheduled-message", encoding.Map{{Key: "sequence-numbers", Value: seqs}}, id)
		wantAccepted(t, st)
		if code != int32(200) {
			t.Fatalf("cancel-scheduled-message in a transaction answered %v", code)
		}
	}

	// Rolled back: still scheduled.
	id := c.Declare()
	cancel(id, seqs[0])
	wantAccepted(t, c.Discharge(id, true))
	want(t, s, "in", "s1", "s2")

	// Committed, with a send: cancelled only then.
	id = c.Declare()
	cancel(id, seqs[0])
	wantAccepted(t, c.SendTxn(2, "now", id))
	want(t, s, "in", "s1", "s2")
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in", "s2", "now")

	// Scheduled and cancelled in the same transaction: never scheduled.
	id = c.Declare()
	_, reply := c.MgmtTxnReply(4, 5, "com.microsoft:schedule-message", encoding.Map{{Key: "messages", Value: []any{
		encoding.Map{{Key: "message", Value: schedulePayload(t, "gone", at)}}}}}, id)
	v, err := frames.BodyValue(reply.RawBody)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := v.(encoding.Map).Get("sequence-numbers")
	got, _ := x.([]int64)
	if len(got) != 1 {
		t.Fatalf("schedule answered %v", v)
	}
	cancel(id, got[0])
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in", "s2", "now")

	// A queue other than the one the transaction cancels on: refused,
	// the transaction rolls back.
	c.AttachSender(6, "t/$management", "")
	c.AttachReceiver(7, "t/$management", 5)
	id = c.Declare()
	cancel(id, seqs[1])
	_, code := c.MgmtTxn(6, 7, "com.microsoft:cancel-scheduled-message", encoding.Map{{Key: "sequence-numbers", Value: []int64{1}}}, id)
	if code == int32(200) {
		t.Fatal("cancel on a second entity in a transaction was accepted")
	}
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "cannot span")
	want(t, s, "in", "s2", "now")
}

// cancel-scheduled-message on a topic's $management inside a
// transaction: the topic's scheduled messages are removed on commit, in
// the batch that completes a message of its subscription, and never fan
// out; a rollback leaves them to fan out at their time.
func TestTxnCancelTopicScheduledMessage(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk,
		Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	at := clk.Now().Add(time.Hour)
	seqs, err := s.Broker.Schedule(context.Background(), "t", []*message.Message{
		{Body: frames.AppendDataSection(nil, []byte("s1"))}, {Body: frames.AppendDataSection(nil, []byte("s2"))}}, at)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, s, "t", "a", "b")
	scheduled := func() int64 {
		t.Helper()
		ti, err := s.Broker.GetTopic("t")
		if err != nil {
			t.Fatal(err)
		}
		return ti.Counts.Scheduled
	}
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "t/Subscriptions/s", 2)
	c.AttachSender(4, "t/$management", "")
	c.AttachReceiver(5, "t/$management", 20)
	cancel := func(id []byte, seqs ...int64) {
		t.Helper()
		st, code := c.MgmtTxn(4, 5, "com.microsoft:cancel-scheduled-message", encoding.Map{{Key: "sequence-numbers", Value: seqs}}, id)
		wantAccepted(t, st)
		if code != int32(200) {
			t.Fatalf("cancel-scheduled-message on a topic in a transaction answered %v", code)
		}
	}
	ms := c.Receive(1, 2)

	// Rolled back: both still scheduled.
	id := c.Declare()
	cancel(id, seqs[0])
	wantAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	wantAccepted(t, c.Discharge(id, true))
	if n := scheduled(); n != 2 {
		t.Fatalf("%d scheduled after a rollback", n)
	}

	// Committed with the completion of a subscription's message.
	id = c.Declare()
	wantAccepted(t, c.Dispose(ms[1], &frames.Accepted{}, id))
	cancel(id, seqs[0])
	if n := scheduled(); n != 2 {
		t.Fatalf("%d scheduled before the commit", n)
	}
	wantAccepted(t, c.Discharge(id, false))
	if n := scheduled(); n != 1 {
		t.Fatalf("%d scheduled after the commit", n)
	}
	want(t, s, "t/Subscriptions/s", "a")
	s.Advance(t, time.Hour+time.Second)
	want(t, s, "t/Subscriptions/s", "s2", "a")
}

// set-session-state through $management inside a transaction (the .NET
// SDK's SetSessionStateAsync in a TransactionScope): recorded, answered
// 200 at once, applied on commit with the completion of the session's
// message; a rollback leaves the old state. get-session-state inside the
// transaction answers at once with the committed state.
func TestTxnSetSessionState(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	props := broker.DefaultQueueProperties()
	props.RequiresSession = true
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk,
		Queues: []string{"sq"}, QueueProps: map[string]broker.QueueProperties{"sq": props}})
	msgs := []*message.Message{
		{Body: frames.AppendDataSection(nil, []byte("a")), SessionID: "x"},
		{Body: frames.AppendDataSection(nil, []byte("b")), SessionID: "x"},
	}
	if err := s.Broker.Send(context.Background(), "sq", msgs); err != nil {
		t.Fatal(err)
	}
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachSessionReceiver(1, "sq", "x", 2)
	c.AttachSender(4, "sq/$management", "")
	c.AttachReceiver(5, "sq/$management", 20)
	ms := c.Receive(1, 2)
	stateOf := func() string {
		t.Helper()
		st, err := s.Broker.GetSessionState(context.Background(), "sq", "x")
		if err != nil {
			t.Fatal(err)
		}
		return string(st)
	}
	set := func(id []byte, state string) {
		t.Helper()
		st, code := c.MgmtTxn(4, 5, "com.microsoft:set-session-state", encoding.Map{
			{Key: "session-id", Value: "x"}, {Key: "session-state", Value: []byte(state)}}, id)
		wantAccepted(t, st)
		if code != int32(200) {
			t.Fatalf("set-session-state in a transaction answered %v", code)
		}
	}
	get := func(id []byte) string {
		t.Helper()
		st, reply := c.MgmtTxnReply(4, 5, "com.microsoft:get-session-state", encoding.Map{{Key: "session-id", Value: "x"}}, id)
		wantAccepted(t, st)
		if reply == nil || reply.ApplicationProperties["statusCode"] != int32(200) {
			t.Fatalf("get-session-state in a transaction answered %v", reply)
		}
		v, err := frames.BodyValue(reply.RawBody)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := v.(encoding.Map).Get("session-state")
		b, _ := x.([]byte)
		return string(b)
	}
	if err := s.Broker.SetSessionState(context.Background(), "sq", "x", []byte("old")); err != nil {
		t.Fatal(err)
	}

	// Rolled back: the old state stays, the message too.
	id := c.Declare()
	wantAccepted(t, c.Dispose(ms[0], &frames.Accepted{}, id))
	set(id, "new")
	if got := get(id); got != "old" {
		t.Fatalf("get-session-state inside the transaction: %q; want the committed %q", got, "old")
	}
	wantAccepted(t, c.Discharge(id, true))
	if got := stateOf(); got != "old" {
		t.Fatalf("state after a rollback: %q", got)
	}
	want(t, s, "sq", "a", "b")

	// Committed: state and completion together.
	id = c.Declare()
	wantAccepted(t, c.Dispose(ms[1], &frames.Accepted{}, id))
	set(id, "new")
	if got := stateOf(); got != "old" {
		t.Fatalf("state before the commit: %q", got)
	}
	wantAccepted(t, c.Discharge(id, false))
	if got := stateOf(); got != "new" {
		t.Fatalf("state after the commit: %q", got)
	}
	want(t, s, "sq", "a")

	// A session nobody holds: 410, and the transaction rolls back.
	id = c.Declare()
	_, code := c.MgmtTxn(4, 5, "com.microsoft:set-session-state", encoding.Map{
		{Key: "session-id", Value: "nobody"}, {Key: "session-state", Value: []byte("s")}}, id)
	if code != int32(410) {
		t.Fatalf("set-session-state of an unlocked session answered %v", code)
	}
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "session")

	// The session lock expires before the commit: rolled back.
	id = c.Declare()
	set(id, "late")
	s.Advance(t, time.Minute+time.Second) // LockDuration is 1 minute
	wantRejected(t, c.Discharge(id, false), "amqp:transaction:rollback", "session")
	if _, err := s.Broker.AcceptSession("sq", "x", broker.PeekLock); err != nil {
		t.Fatalf("accept after the lock expired: %v", err)
	}
	if got := stateOf(); got != "new" {
		t.Fatalf("state after a failed commit: %q", got)
	}
}

// renew-lock and renew-session-lock inside a transaction run at once, as
// Service Bus runs them: the answer carries the new expiry, the lock is
// extended before the commit, and a rollback does not undo it. An
// unknown transaction is refused.
func TestTxnRenewLock(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	props := broker.DefaultQueueProperties()
	props.RequiresSession = true
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk,
		Queues: []string{"in", "sq"}, QueueProps: map[string]broker.QueueProperties{"sq": props}})
	seed(t, s, "in", "a")
	if err := s.Broker.Send(context.Background(), "sq", []*message.Message{{Body: frames.AppendDataSection(nil, []byte("b")), SessionID: "x"}}); err != nil {
		t.Fatal(err)
	}
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachReceiver(1, "in", 1)
	c.AttachSender(4, "in/$management", "")
	c.AttachReceiver(5, "in/$management", 20)
	c.AttachSessionReceiver(6, "sq", "x", 1)
	c.AttachSender(7, "sq/$management", "")
	c.AttachReceiver(8, "sq/$management", 20)
	m := c.Receive(1, 1)[0]
	sm := c.Receive(6, 1)[0]
	renew := func(id []byte) time.Time {
		t.Helper()
		st, reply := c.MgmtTxnReply(4, 5, "com.microsoft:renew-lock", encoding.Map{
			{Key: "lock-tokens", Value: []any{encoding.UUID(lockToken(t, m.Tag))}}}, id)
		wantAccepted(t, st)
		if reply == nil || reply.ApplicationProperties["statusCode"] != int32(200) {
			t.Fatalf("renew-lock in a transaction answered %v", reply)
		}
		v, err := frames.BodyValue(reply.RawBody)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := v.(encoding.Map).Get("expirations")
		exps, _ := x.([]time.Time)
		if len(exps) != 1 {
			t.Fatalf("renew-lock answered %v", v)
		}
		return exps[0]
	}
	renewSession := func(id []byte) {
		t.Helper()
		st, code := c.MgmtTxn(7, 8, "com.microsoft:renew-session-lock", encoding.Map{{Key: "session-id", Value: "x"}}, id)
		wantAccepted(t, st)
		if code != int32(200) {
			t.Fatalf("renew-session-lock in a transaction answered %v", code)
		}
	}

	// Renewed inside a transaction that rolls back: the renewal holds.
	s.Advance(t, 50*time.Second)
	id := c.Declare()
	if exp, want := renew(id), clk.Now().Add(time.Minute); !exp.Equal(want) {
		t.Fatalf("renewed until %v; want %v", exp, want)
	}
	renewSession(id)
	wantAccepted(t, c.Discharge(id, true))
	s.Advance(t, 30*time.Second) // past the first lock's end, within the renewed one
	if err := s.Broker.Complete(context.Background(), "in", lockToken(t, m.Tag)); err != nil {
		t.Fatalf("complete after a renewal in a rolled back transaction: %v", err)
	}
	if _, err := s.Broker.GetSessionState(context.Background(), "sq", "x"); err != nil {
		t.Fatalf("session lock after its renewal in a rolled back transaction: %v", err)
	}

	// Renewed inside a transaction that commits the message's completion.
	id = c.Declare()
	renewSession(id)
	wantAccepted(t, c.Dispose(sm, &frames.Accepted{}, id))
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "sq")

	// An unknown transaction: refused (and nothing renewed).
	st, code := c.MgmtTxn(7, 8, "com.microsoft:renew-session-lock", encoding.Map{{Key: "session-id", Value: "x"}}, []byte("nope"))
	if _, rejected := st.(*frames.Rejected); !rejected && code == int32(200) {
		t.Fatalf("renew-session-lock in an unknown transaction answered %v %v", st, code)
	}
}

// TestTxnReadsRunAtOnce: the .NET SDK sends every management request
// inside a TransactionScope with the transaction's id, so a peek there
// arrives transactional. It runs at once and leaves the transaction
// open; an unknown transaction is refused.
func TestTxnReadsRunAtOnce(t *testing.T) {
	s, _ := startTxnServer(t, "in")
	seed(t, s, "in", "a")
	c := txnclient.Dial(t, s.Addr)
	c.AttachCoordinator()
	c.AttachSender(2, "in", "")
	c.AttachSender(4, "in/$management", "")
	c.AttachReceiver(5, "in/$management", 20)
	id := c.Declare()
	wantAccepted(t, c.SendTxn(2, "b", id))
	st, reply := c.MgmtTxnReply(4, 5, "com.microsoft:peek-message", encoding.Map{
		{Key: "from-sequence-number", Value: int64(0)}, {Key: "message-count", Value: int32(10)}}, id)
	wantAccepted(t, st)
	if reply == nil || reply.ApplicationProperties["statusCode"] != int32(200) {
		t.Fatalf("peek in a transaction answered %v", reply)
	}
	v, err := frames.BodyValue(reply.RawBody)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := v.(encoding.Map).Get("messages")
	if msgs, _ := x.([]any); len(msgs) != 1 {
		t.Fatalf("peek in a transaction saw %d messages; want the 1 committed before it (%v)", len(msgs), v)
	}
	st, code := c.MgmtTxn(4, 5, "com.microsoft:get-message-sessions", encoding.Map{
		{Key: "skip", Value: int32(0)}, {Key: "top", Value: int32(10)}}, id)
	wantAccepted(t, st)
	if code != int32(200) && code != int32(204) {
		t.Fatalf("get-message-sessions in a transaction answered %v", code)
	}
	wantAccepted(t, c.Discharge(id, false))
	want(t, s, "in", "a", "b")

	st, code = c.MgmtTxn(4, 5, "com.microsoft:peek-message", encoding.Map{
		{Key: "from-sequence-number", Value: int64(0)}, {Key: "message-count", Value: int32(10)}}, []byte("nope"))
	if _, rejected := st.(*frames.Rejected); !rejected && code == int32(200) {
		t.Fatalf("peek in an unknown transaction answered %v %v", st, code)
	}
}
