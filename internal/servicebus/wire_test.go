package servicebus_test

// Wire-level tests with go-amqp v1.7.0 (the AMQP stack of the Go SDK) for
// the details of docs/wire/amqp.md §0 that the SDK hides: types of status
// codes and annotations, reply routing, delivery tags, drain, released,
// attach errors, the batch format.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// wire is a raw go-amqp connection to a test server.
type wire struct {
	t    *testing.T
	s    *servicebustest.Server
	conn *amqp.Conn
	ctx  context.Context
	cbs  *rpc // the connection's $cbs link pair, once authorize opened it
}

func dialWire(t *testing.T, s *servicebustest.Server) *wire {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	conn, err := amqp.Dial(ctx, "amqp://"+s.Addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &wire{t: t, s: s, conn: conn, ctx: ctx}
}

func (w *wire) session() *amqp.Session {
	w.t.Helper()
	sess, err := w.conn.NewSession(w.ctx, nil)
	if err != nil {
		w.t.Fatalf("NewSession: %v", err)
	}
	return sess
}

// rpc is a request/response link pair on node.
type rpc struct {
	w       *wire
	snd     *amqp.Sender
	rcv     *amqp.Receiver
	replyTo string
}

// newRPC opens a request link to node and a reply link whose target
// address is replyTo (the Go SDK's way). With byName the reply link has no
// target address and replyTo is its name instead (the JS $cbs way).
func (w *wire) newRPC(node, replyTo string, byName bool) *rpc {
	w.t.Helper()
	sess := w.session()
	snd, err := sess.NewSender(w.ctx, node, nil)
	if err != nil {
		w.t.Fatalf("request link to %s: %v", node, err)
	}
	opts := &amqp.ReceiverOptions{TargetAddress: replyTo, Credit: 100}
	if byName {
		opts = &amqp.ReceiverOptions{Name: replyTo, Credit: 100}
	}
	rcv, err := sess.NewReceiver(w.ctx, node, opts)
	if err != nil {
		w.t.Fatalf("reply link from %s: %v", node, err)
	}
	return &rpc{w: w, snd: snd, rcv: rcv, replyTo: replyTo}
}

func (r *rpc) call(id any, props map[string]any, value any) *amqp.Message {
	r.w.t.Helper()
	req := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: id, ReplyTo: &r.replyTo},
		ApplicationProperties: props,
		Value:                 value,
	}
	if err := r.snd.Send(r.w.ctx, req, nil); err != nil {
		r.w.t.Fatalf("request: %v", err)
	}
	resp, err := r.rcv.Receive(r.w.ctx, nil)
	if err != nil {
		r.w.t.Fatalf("response: %v", err)
	}
	if err := r.rcv.AcceptMessage(r.w.ctx, resp); err != nil {
		r.w.t.Fatalf("accept response: %v", err)
	}
	return resp
}

// status checks both spellings of the status code as AMQP int (§0.3) and
// returns it.
func status(t *testing.T, resp *amqp.Message) int32 {
	t.Helper()
	a, okA := resp.ApplicationProperties["statusCode"].(int32)
	b, okB := resp.ApplicationProperties["status-code"].(int32)
	if !okA || !okB || a != b {
		t.Fatalf("status codes %T(%v) / %T(%v); want equal int32s", resp.ApplicationProperties["statusCode"], resp.ApplicationProperties["statusCode"],
			resp.ApplicationProperties["status-code"], resp.ApplicationProperties["status-code"])
	}
	if _, ok := resp.ApplicationProperties["statusDescription"].(string); !ok {
		t.Fatalf("statusDescription is %T", resp.ApplicationProperties["statusDescription"])
	}
	return a
}

func putToken(t *testing.T, r *rpc, audience, token string) *amqp.Message {
	t.Helper()
	return r.call(uuid.NewString(), map[string]any{
		"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience, "expiration": "0",
	}, token)
}

// cbsLink is the connection's $cbs link pair, opened on first use: a
// connection may hold only one.
func (w *wire) cbsLink() *rpc {
	w.t.Helper()
	if w.cbs == nil {
		w.cbs = w.newRPC("$cbs", "$cbs-reply-"+uuid.NewString(), false)
	}
	return w.cbs
}

func (w *wire) authorize(audience string) {
	w.t.Helper()
	resp := putToken(w.t, w.cbsLink(), audience, auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, audience, time.Now().Add(time.Hour)))
	if code := status(w.t, resp); code != 202 {
		w.t.Fatalf("put-token for %s: %d %v", audience, code, resp.ApplicationProperties)
	}
}

func TestWireCBS(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	aud := "amqp://" + s.Addr + "/q"
	good := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, aud, time.Now().Add(time.Hour))
	var err error

	// Go: reply link found by target address; correlation-id keeps the
	// message-id's value and type (§0.4).
	goRPC := w.newRPC("$cbs", "$cbs$$cbs-reply-to-"+uuid.NewString(), false)
	resp := goRPC.call("req-1", map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": aud, "expiration": "0"}, good)
	if code := status(t, resp); code != 202 {
		t.Fatalf("put-token: %d", code)
	}
	if resp.Properties.CorrelationID != "req-1" {
		t.Fatalf("correlation-id %#v", resp.Properties.CorrelationID)
	}
	resp = goRPC.call(uint64(77), map[string]any{"operation": "put-token", "name": aud}, good)
	if resp.Properties.CorrelationID != uint64(77) {
		t.Fatalf("correlation-id of a ulong message-id: %#v", resp.Properties.CorrelationID)
	}

	// JS: the $cbs reply link has no target; its name is the reply-to
	// (§0.5). JS tokens URL-encode differently and put sr last.
	// One $cbs pair per connection: each client style gets its own.
	jsw := dialWire(t, s)
	jsName := "cbs-" + uuid.NewString()
	jsRPC := &rpc{w: jsw, replyTo: jsName}
	if jsRPC.rcv, err = jsw.session().NewReceiver(jsw.ctx, "$cbs", &amqp.ReceiverOptions{Name: jsName, Credit: 100}); err != nil {
		t.Fatal(err)
	}
	// Send from another session, so that only the name can route it.
	if jsRPC.snd, err = jsw.session().NewSender(jsw.ctx, "$cbs", nil); err != nil {
		t.Fatal(err)
	}
	if code := status(t, putToken(t, jsRPC, "sb://localhost/q", jsToken(auth.DefaultKeyName, auth.DefaultKey, "sb://localhost/q"))); code != 202 {
		t.Fatalf("put-token on a name-routed link: %d", code)
	}

	// Last resort: a reply-to that names no link goes to the node's reply
	// link in the same session.
	odd := dialWire(t, s).newRPC("$cbs", "some-target", false)
	odd.replyTo = "matches-nothing"
	if code := status(t, putToken(t, odd, aud, good)); code != 202 {
		t.Fatalf("put-token routed by session: %d", code)
	}

	// 401 for a bad token, with the condition.
	resp = putToken(t, goRPC, aud, auth.NewToken(auth.DefaultKeyName, "wrong", aud, time.Now().Add(time.Hour)))
	if code := status(t, resp); code != 401 || resp.ApplicationProperties["error-condition"] != "amqp:unauthorized-access" ||
		resp.ApplicationProperties["errorCondition"] != "amqp:unauthorized-access" {
		t.Fatalf("bad token: %d %v", code, resp.ApplicationProperties)
	}
	resp = putToken(t, goRPC, aud, auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, aud, time.Now().Add(-time.Minute)))
	if code := status(t, resp); code != 401 || !strings.Contains(resp.ApplicationProperties["status-description"].(string), "expired") {
		t.Fatalf("expired token: %d %v", code, resp.ApplicationProperties)
	}

	// 404 with the cloud's text for a missing entity (§0.13).
	missing := "amqp://" + s.Addr + "/nope/$management"
	resp = putToken(t, goRPC, missing, auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, missing, time.Now().Add(time.Hour)))
	desc, _ := resp.ApplicationProperties["status-description"].(string)
	if code := status(t, resp); code != 404 || resp.ApplicationProperties["error-condition"] != "amqp:not-found" ||
		!strings.HasPrefix(desc, "The messaging entity 'sb://127.0.0.1/nope/$management' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions. TrackingId:") ||
		!strings.Contains(desc, ", SystemTracker:") || !strings.Contains(desc, ", Timestamp:") {
		t.Fatalf("missing entity: %d %q %v", code, desc, resp.ApplicationProperties)
	}

	// A namespace-level token is accepted.
	ns := "amqp://" + s.Addr + "/"
	if code := status(t, putToken(t, goRPC, ns, auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, ns, time.Now().Add(time.Hour)))); code != 202 {
		t.Fatalf("namespace token: %d", code)
	}
}

func TestWireAttach(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	sess := w.session()

	// No token yet: unauthorized-access, as a detach with closed=true
	// after a null-terminus attach (§0.15), which go-amqp returns here.
	_, err := sess.NewSender(w.ctx, "q", nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondUnauthorizedAccess {
		t.Fatalf("attach without a token = %v; want unauthorized-access", err)
	}

	w.authorize("amqp://" + s.Addr + "/")
	_, err = sess.NewReceiver(w.ctx, "nope", nil)
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotFound || !strings.Contains(ae.Description, "could not be found") {
		t.Fatalf("attach to a missing entity = %v; want not-found", err)
	}
	_, err = sess.NewSender(w.ctx, "q/$DeadLetterQueue", nil)
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotAllowed {
		t.Fatalf("sender to a DLQ = %v; want not-allowed", err)
	}

	// §0.1 and §0.2: settle modes set explicitly are echoed (go-amqp
	// fails the attach otherwise); the sender gets a non-zero
	// max-message-size. Addresses may carry a scheme and host.
	mixed, first := amqp.SenderSettleModeMixed, amqp.ReceiverSettleModeFirst
	snd, err := sess.NewSender(w.ctx, "amqps://"+s.Addr+"/Q", &amqp.SenderOptions{SettlementMode: &mixed, RequestedReceiverSettleMode: &first})
	if err != nil {
		t.Fatalf("sender with explicit modes: %v", err)
	}
	if snd.MaxMessageSize() != 256*1024 {
		t.Fatalf("max-message-size %d; want 262144", snd.MaxMessageSize())
	}
	second, settled := amqp.ReceiverSettleModeSecond, amqp.SenderSettleModeSettled
	if _, err := sess.NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{SettlementMode: &second}); err != nil {
		t.Fatalf("peek-lock receiver: %v", err)
	}
	if _, err := sess.NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{SettlementMode: &first, RequestedSenderSettleMode: &settled}); err != nil {
		t.Fatalf("receive-and-delete receiver: %v", err)
	}
	if _, err := sess.NewReceiver(w.ctx, "amqp://x/q/$deadletterqueue", &amqp.ReceiverOptions{SettlementMode: &second}); err != nil {
		t.Fatalf("DLQ receiver: %v", err)
	}
}

// rfcFromTag converts a delivery tag (.NET GUID byte order, §0.8) to the
// RFC order of AMQP uuids, as both SDKs do.
func rfcFromTag(t *testing.T, tag []byte) amqp.UUID {
	t.Helper()
	if len(tag) != 16 {
		t.Fatalf("delivery tag has %d bytes; want 16", len(tag))
	}
	return amqp.UUID{tag[3], tag[2], tag[1], tag[0], tag[5], tag[4], tag[7], tag[6],
		tag[8], tag[9], tag[10], tag[11], tag[12], tag[13], tag[14], tag[15]}
}

func TestWireDeliveries(t *testing.T) {
	fc := clock.NewFake(time.Now())
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, Clock: fc})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/")
	sess := w.session()
	snd, err := sess.NewSender(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		// A bare message without properties: the broker still writes a
		// properties section (§4.4).
		if err := snd.Send(w.ctx, &amqp.Message{Data: [][]byte{fmt.Appendf(nil, "m%d", i)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	second := amqp.ReceiverSettleModeSecond
	rcv, err := sess.NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{SettlementMode: &second, Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() *amqp.Message {
		t.Helper()
		m, err := rcv.Receive(w.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m0 := recv()
	// §0.9 / §4.5: exact annotation types.
	if _, ok := m0.Annotations["x-opt-sequence-number"].(int64); !ok {
		t.Errorf("x-opt-sequence-number is %T", m0.Annotations["x-opt-sequence-number"])
	}
	if v, ok := m0.Annotations["x-opt-enqueue-sequence-number"]; ok {
		t.Errorf("x-opt-enqueue-sequence-number (%v) on a message that was not auto-forwarded", v)
	}
	if _, ok := m0.Annotations["x-opt-enqueued-time"].(time.Time); !ok {
		t.Errorf("x-opt-enqueued-time is %T", m0.Annotations["x-opt-enqueued-time"])
	}
	lockedUntil, ok := m0.Annotations["x-opt-locked-until"].(time.Time)
	if !ok {
		t.Errorf("x-opt-locked-until is %T", m0.Annotations["x-opt-locked-until"])
	}
	if _, present := m0.Annotations["x-opt-message-state"]; present {
		t.Errorf("an active message carries x-opt-message-state %v", m0.Annotations["x-opt-message-state"])
	}
	if m0.Header == nil || m0.Header.DeliveryCount != 0 || m0.Properties == nil {
		t.Fatalf("header %+v properties %+v; want both, delivery-count 0", m0.Header, m0.Properties)
	}

	// §0.8: the tag is the lock token in .NET order; renew-lock with its
	// RFC form over $management finds the lock.
	tok := rfcFromTag(t, m0.DeliveryTag)
	w.authorize("amqp://" + s.Addr + "/q/$management")
	mg := w.newRPC("q/$management", "q/$management$q/$management-reply-to-"+uuid.NewString(), false)
	fc.Advance(time.Second)
	resp := mg.call(uuid.NewString(), map[string]any{"operation": "com.microsoft:renew-lock", "server-timeout": uint64(5000)},
		map[string]any{"lock-tokens": []amqp.UUID{tok}})
	if code := status(t, resp); code != 200 {
		t.Fatalf("renew-lock: %d %v", code, resp.ApplicationProperties)
	}
	exps, ok := resp.Value.(map[string]any)["expirations"].([]time.Time)
	if !ok || len(exps) != 1 || !exps[0].After(lockedUntil) {
		t.Fatalf("expirations %#v (want []time.Time after %v)", resp.Value, lockedUntil)
	}

	// §0.10: every disposition is answered with a settled one; go-amqp
	// returns only then.
	if err := rcv.AcceptMessage(w.ctx, m0); err != nil {
		t.Fatalf("accept: %v", err)
	}
	// §0.12: released does not raise the delivery count; modified does.
	m1 := recv()
	if err := rcv.ReleaseMessage(w.ctx, m1); err != nil {
		t.Fatalf("release: %v", err)
	}
	m2 := recv()
	if err := rcv.ModifyMessage(w.ctx, m2, nil); err != nil {
		t.Fatalf("modify: %v", err)
	}
	m3 := recv()
	if err := rcv.RejectMessage(w.ctx, m3, &amqp.Error{Condition: "com.microsoft:dead-letter",
		Info: map[string]any{"DeadLetterReason": "r", "DeadLetterErrorDescription": "d", "x": "y"}}); err != nil {
		t.Fatalf("reject (dead-letter): %v", err)
	}
	counts := map[string]uint32{}
	for range 2 {
		m := recv()
		counts[string(m.GetData())] = m.Header.DeliveryCount
		if err := rcv.AcceptMessage(w.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if counts[string(m1.GetData())] != 0 || counts[string(m2.GetData())] != 1 {
		t.Fatalf("delivery counts after release/modify: %v", counts)
	}
	dl, err := s.Broker.Peek(w.ctx, "q/$DeadLetterQueue", 0, 10)
	if err != nil || len(dl) != 1 || dl[0].Message.ApplicationProperties["DeadLetterReason"] != "r" ||
		dl[0].Message.ApplicationProperties["DeadLetterErrorDescription"] != "d" || dl[0].Message.ApplicationProperties["x"] != "y" {
		t.Fatalf("dead-lettered: %v %v", dl, err)
	}

	// Lock lost on the link: rejected with com.microsoft:message-lock-lost.
	if err := snd.Send(w.ctx, &amqp.Message{Data: [][]byte{[]byte("late")}}, nil); err != nil {
		t.Fatal(err)
	}
	late := recv()
	s.Advance(t, 10*time.Minute)
	err = rcv.AcceptMessage(w.ctx, late)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:message-lock-lost" || !strings.Contains(ae.Description, "TrackingId:") {
		t.Fatalf("accept after lock expiry = %v; want message-lock-lost", err)
	}
}

func TestWireDrain(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/q")
	sess := w.session()
	snd, err := sess.NewSender(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := snd.Send(w.ctx, amqp.NewMessage([]byte("d")), nil); err != nil {
			t.Fatal(err)
		}
	}
	second := amqp.ReceiverSettleModeSecond
	rcv, err := sess.NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{SettlementMode: &second, Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := rcv.Receive(w.ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	// §0.11: a drain with credit left is answered at once (go-amqp
	// returns when the flow with drain=true arrives).
	start := time.Now()
	if err := rcv.DrainCredit(w.ctx, nil); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("drain took %v", d)
	}
	// Messages sent after a drain need new credit; with credit they flow.
	if err := snd.Send(w.ctx, amqp.NewMessage([]byte("after")), nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if m := rcv.Prefetched(); m != nil {
		t.Fatalf("message %q delivered without credit", m.GetData())
	}
	if err := rcv.IssueCredit(3); err != nil {
		t.Fatal(err)
	}
	if m, err := rcv.Receive(w.ctx, nil); err != nil || string(m.GetData()) != "after" {
		t.Fatalf("receive after drain: %v %v", m, err)
	}
	// Draining an empty queue.
	time.Sleep(50 * time.Millisecond) // let go-amqp send the credit before the drain
	if err := rcv.DrainCredit(w.ctx, nil); err != nil {
		t.Fatalf("drain of an empty queue: %v", err)
	}
}

func TestWireManagement(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/q")
	mg := w.newRPC("q/$management", "mgmt-reply-"+uuid.NewString(), false)
	call := func(op string, body map[string]any) *amqp.Message {
		return mg.call(uuid.NewString(), map[string]any{"operation": op, "associated-link-name": "whatever"}, body)
	}

	// Peek of an empty queue: 204 (§6.3), camelCase key present (§0.3).
	if code := status(t, call("com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(1), "message-count": int32(10)})); code != 204 {
		t.Fatalf("peek empty: %d", code)
	}

	// schedule-message: sequence-numbers is an array of long ([]int64).
	msg := &amqp.Message{Data: [][]byte{[]byte("sched")}, Properties: &amqp.MessageProperties{MessageID: "m1"},
		Annotations: amqp.Annotations{"x-opt-scheduled-enqueue-time": time.Now().Add(time.Hour)}}
	enc, err := msg.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	resp := call("com.microsoft:schedule-message", map[string]any{"messages": []any{map[string]any{"message-id": "m1", "message": enc}}})
	seqs, ok := resp.Value.(map[string]any)["sequence-numbers"].([]int64)
	if code := status(t, resp); code != 200 || !ok || len(seqs) != 1 {
		t.Fatalf("schedule-message: %d %#v", code, resp.Value)
	}

	// peek-message: messages is a list of maps {message: binary}.
	resp = call("com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(0), "message-count": int32(10)})
	list, ok := resp.Value.(map[string]any)["messages"].([]any)
	if code := status(t, resp); code != 200 || !ok || len(list) != 1 {
		t.Fatalf("peek: %d %#v", code, resp.Value)
	}
	var peeked amqp.Message
	if err := peeked.UnmarshalBinary(list[0].(map[string]any)["message"].([]byte)); err != nil {
		t.Fatal(err)
	}
	if peeked.Annotations["x-opt-message-state"] != int32(2) || peeked.Annotations["x-opt-sequence-number"] != seqs[0] {
		t.Fatalf("peeked annotations %v", peeked.Annotations)
	}
	if code := status(t, call("com.microsoft:cancel-scheduled-message", map[string]any{"sequence-numbers": seqs})); code != 200 {
		t.Fatalf("cancel: %d", code)
	}

	// receive-by-sequence-number: list of maps {lock-token: uuid,
	// message: binary}; the message carries x-opt-lock-token (§6.3).
	snd, err := w.session().NewSender(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(w.ctx, amqp.NewMessage([]byte("to-defer")), nil); err != nil {
		t.Fatal(err)
	}
	second := amqp.ReceiverSettleModeSecond
	rcv, err := w.session().NewReceiver(w.ctx, "q", &amqp.ReceiverOptions{SettlementMode: &second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(w.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.ModifyMessage(w.ctx, m, &amqp.ModifyMessageOptions{UndeliverableHere: true}); err != nil {
		t.Fatalf("defer: %v", err)
	}
	seq := m.Annotations["x-opt-sequence-number"].(int64)
	resp = call("com.microsoft:receive-by-sequence-number", map[string]any{"sequence-numbers": []int64{seq}, "receiver-settle-mode": uint32(1)})
	list, ok = resp.Value.(map[string]any)["messages"].([]any)
	if code := status(t, resp); code != 200 || !ok || len(list) != 1 {
		t.Fatalf("receive-by-sequence-number: %d %#v", code, resp.Value)
	}
	entry := list[0].(map[string]any)
	lt, ok := entry["lock-token"].(amqp.UUID)
	if !ok {
		t.Fatalf("lock-token is %T", entry["lock-token"])
	}
	var got amqp.Message
	if err := got.UnmarshalBinary(entry["message"].([]byte)); err != nil {
		t.Fatal(err)
	}
	if got.DeliveryAnnotations["x-opt-lock-token"] != lt || got.Annotations["x-opt-message-state"] != int32(1) {
		t.Fatalf("delivery annotations %v annotations %v; want x-opt-lock-token %v", got.DeliveryAnnotations, got.Annotations, lt)
	}
	if _, ok := got.Annotations["x-opt-locked-until"].(time.Time); !ok {
		t.Fatalf("x-opt-locked-until is %T", got.Annotations["x-opt-locked-until"])
	}

	// update-disposition with the bad spelling "defered" keeps it
	// deferred; an unknown lock is 410 + message-lock-lost.
	resp = call("com.microsoft:update-disposition", map[string]any{"disposition-status": "defered", "lock-tokens": []amqp.UUID{lt},
		"properties-to-modify": map[string]any{"p": int32(1)}})
	if code := status(t, resp); code != 200 {
		t.Fatalf("update-disposition defered: %d %v", code, resp.ApplicationProperties)
	}
	resp = call("com.microsoft:update-disposition", map[string]any{"disposition-status": "completed", "lock-tokens": []amqp.UUID{lt}})
	if code := status(t, resp); code != 410 || resp.ApplicationProperties["errorCondition"] != "com.microsoft:message-lock-lost" {
		t.Fatalf("update-disposition on a used lock: %d %v", code, resp.ApplicationProperties)
	}

	// batch-delete: the deferred message goes; then 204 +
	// message-not-found when nothing matches.
	resp = call("com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(10)})
	if code := status(t, resp); code != 200 || resp.Value.(map[string]any)["message-count"] != int32(1) {
		t.Fatalf("batch-delete: %d %v", code, resp.Value)
	}
	resp = call("com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(10)})
	if code := status(t, resp); code != 204 || resp.ApplicationProperties["errorCondition"] != "com.microsoft:message-not-found" {
		t.Fatalf("batch-delete of nothing: %d %v", code, resp.ApplicationProperties)
	}

	// Unknown operations and malformed requests carry errorCondition.
	resp = call("com.microsoft:no-such-thing", map[string]any{})
	if code := status(t, resp); code < 400 || resp.ApplicationProperties["errorCondition"] == nil {
		t.Fatalf("unknown operation: %d %v", code, resp.ApplicationProperties)
	}
	resp = call("com.microsoft:renew-lock", map[string]any{"lock-tokens": "not uuids"})
	if code := status(t, resp); code != 400 || resp.ApplicationProperties["errorCondition"] == nil {
		t.Fatalf("malformed renew-lock: %d %v", code, resp.ApplicationProperties)
	}
}

func TestWireSendFormats(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/q")
	sess := w.session()

	// The batch format 0x80013700: one data section per encoded message
	// (§3.2); each inner message keeps its own properties.
	var inner [][]byte
	for i := range 3 {
		enc, err := (&amqp.Message{Data: [][]byte{fmt.Appendf(nil, "b%d", i)}, Properties: &amqp.MessageProperties{MessageID: fmt.Sprint("id", i)}}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		inner = append(inner, enc)
	}
	snd, err := sess.NewSender(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(w.ctx, &amqp.Message{Format: 0x80013700, Data: inner, Properties: &amqp.MessageProperties{MessageID: "id0"}}, nil); err != nil {
		t.Fatalf("batch send: %v", err)
	}

	// A presettled send is stored too.
	settled := amqp.SenderSettleModeSettled
	pre, err := sess.NewSender(w.ctx, "q", &amqp.SenderOptions{SettlementMode: &settled})
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Send(w.ctx, amqp.NewMessage([]byte("presettled")), nil); err != nil {
		t.Fatal(err)
	}

	// An unsupported property type is rejected with a condition the Go
	// SDK treats as final.
	err = snd.Send(w.ctx, &amqp.Message{Data: [][]byte{[]byte("x")}, ApplicationProperties: map[string]any{"list": []any{int64(1)}}}, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotAllowed || !strings.Contains(ae.Description, "TrackingId:") {
		t.Fatalf("send with a list property = %v; want rejected not-allowed", err)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := s.Broker.Peek(w.ctx, "q", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 4 {
			for i, d := range ds[:3] {
				if d.Message.MessageID != fmt.Sprint("id", i) {
					t.Fatalf("batch message %d has id %v", i, d.Message.MessageID)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored %d messages; want 4", len(ds))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWireSendGroups: a sender link stores the transfers that queued up
// while it stored the previous ones as groups, the messages of all of them
// decoded side by side into one reused slice. Many concurrent sends on one
// link — plain messages, batches, a message the broker refuses (an id over
// 128 characters: its group is retried one delivery at a time) and a batch
// whose second message does not decode (its first was already decoded) —
// must each be answered for themselves, and exactly the accepted messages
// stored, once each.
func TestWireSendGroups(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/q")
	snd, err := w.session().NewSender(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	encode := func(id string) []byte {
		enc, err := (&amqp.Message{Data: [][]byte{[]byte("body " + id)}, Properties: &amqp.MessageProperties{MessageID: id}}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return enc
	}
	const n = 300
	want := map[string]bool{}
	msgs := make([]*amqp.Message, n)
	for i := range msgs {
		id := fmt.Sprint("m", i)
		switch i % 5 {
		case 0, 1:
			msgs[i] = &amqp.Message{Data: [][]byte{[]byte("body " + id)}, Properties: &amqp.MessageProperties{MessageID: id}}
			want[id] = true
		case 2:
			msgs[i] = &amqp.Message{Data: [][]byte{[]byte("refused")}, Properties: &amqp.MessageProperties{MessageID: strings.Repeat("x", 129)}}
		case 3:
			msgs[i] = &amqp.Message{Format: 0x80013700, Data: [][]byte{encode(id + "a"), []byte("not a message")}}
		case 4:
			msgs[i] = &amqp.Message{Format: 0x80013700, Data: [][]byte{encode(id + "a"), encode(id + "b")}}
			want[id+"a"], want[id+"b"] = true, true
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 16 {
				errs[i] = snd.Send(w.ctx, msgs[i], nil)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var ae *amqp.Error
		switch refused := i%5 == 2 || i%5 == 3; {
		case !refused && err != nil:
			t.Errorf("send %d: %v", i, err)
		case refused && (!errors.As(err, &ae) || ae.Condition == ""):
			t.Errorf("send %d = %v; want it rejected", i, err)
		}
	}
	ds, err := s.Broker.Peek(w.ctx, "q", 0, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range ds {
		id, _ := d.Message.MessageID.(string)
		if got[id] || !want[id] || !strings.Contains(string(d.Message.Body), "body "+id) {
			t.Errorf("stored %q (body %q): duplicate, unexpected or with another's body", id, d.Message.Body)
		}
		got[id] = true
	}
	if len(got) != len(want) {
		t.Errorf("stored %d messages; want %d", len(got), len(want))
	}
}

// TestWireEntityDeleted: a receiver whose queue is deleted is detached
// with not-found.
func TestWireEntityDeleted(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/q")
	rcv, err := w.session().NewReceiver(w.ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Broker.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	_, err = rcv.Receive(w.ctx, nil)
	var le *amqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != amqp.ErrCondNotFound {
		t.Fatalf("receive after delete = %v; want not-found detach", err)
	}
}

// jsToken builds a token as @azure/core-amqp does: encodeURIComponent of
// the lower-cased audience and of the key name, sr written last.
func jsToken(keyName, key, audience string) string {
	enc := func(s string) string {
		var b strings.Builder
		for _, c := range []byte(s) {
			if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	sr := enc(strings.ToLower(audience))
	se := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(sr + "\n" + se))
	return "SharedAccessSignature sig=" + enc(base64.StdEncoding.EncodeToString(h.Sum(nil))) + "&se=" + se + "&skn=" + enc(keyName) + "&sr=" + sr
}
