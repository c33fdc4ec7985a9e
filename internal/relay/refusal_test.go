package relay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/auth"
)

// TestRelayedRequestOwnerRefusal: a management request for an entity
// under a remote unit that the owner does not have (a subscription of
// "q": the owner refuses the internal management link) is answered
// amqp:not-found / 404, as the owner would answer it, not as an internal
// error of the gateway. Raw go-amqp: a peek with no receiver link first,
// as the JS SDK's peekMessages does.
func TestRelayedRequestOwnerRefusal(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	connStr, _, _ := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := dialWithToken(ctx, t, connStr, "")
	resp := call(ctx, t, s, "q/Subscriptions/no-such-sub/$management",
		map[string]any{"operation": "com.microsoft:peek-message"},
		map[string]any{"from-sequence-number": int64(0), "message-count": int32(1)})
	status, cond := resp.ApplicationProperties["statusCode"], resp.ApplicationProperties["errorCondition"]
	if status != int32(404) || cond != "amqp:not-found" {
		t.Fatalf("peek of a missing subscription: status %v, condition %v (%v); want 404, amqp:not-found",
			status, cond, resp.ApplicationProperties["statusDescription"])
	}
}

// TestRelayedRequestTokenOnManagementNode: a client whose token is for
// the management node itself (".../q/$management", as the JS SDK's rule
// manager puts one) gets its rights relayed with the request: the
// gateway takes the rights covering the management node, as a local
// request is checked, not only those covering the entity.
func TestRelayedRequestTokenOnManagementNode(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	connStr, _, _ := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := dialWithToken(ctx, t, connStr, "q/$management")
	resp := call(ctx, t, s, "q/$management",
		map[string]any{"operation": "com.microsoft:peek-message"},
		map[string]any{"from-sequence-number": int64(0), "message-count": int32(1)})
	if status := resp.ApplicationProperties["statusCode"]; status != int32(204) && status != int32(200) {
		t.Fatalf("peek with a token for q/$management: status %v (%v)", status, resp.ApplicationProperties["statusDescription"])
	}
}

// dialWithToken connects to the node of connStr with SASL PLAIN and puts
// a SAS token for path ("" the namespace) on $cbs, as the SDKs do.
func dialWithToken(ctx context.Context, t *testing.T, connStr, path string) *goamqp.Session {
	t.Helper()
	fields := map[string]string{}
	for _, kv := range strings.Split(connStr, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	host := strings.TrimPrefix(fields["Endpoint"], "sb://")
	conn, err := goamqp.Dial(ctx, "amqp://"+host, &goamqp.ConnOptions{
		SASLType: goamqp.SASLTypePlain(fields["SharedAccessKeyName"], fields["SharedAccessKey"])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	audience := "sb://" + host + "/" + path
	token := auth.NewToken(fields["SharedAccessKeyName"], fields["SharedAccessKey"], audience, time.Now().Add(time.Hour))
	if resp := call(ctx, t, s, "$cbs", map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken",
		"name": audience, "expiration": "0"}, token); resp.ApplicationProperties["status-code"] != int32(202) {
		t.Fatalf("put-token: %v", resp.ApplicationProperties)
	}
	return s
}

// call sends one request to node on a new link pair and returns the
// response.
func call(ctx context.Context, t *testing.T, s *goamqp.Session, node string, props map[string]any, value any) *goamqp.Message {
	t.Helper()
	reply := node + "-reply"
	rcv, err := s.NewReceiver(ctx, node, &goamqp.ReceiverOptions{TargetAddress: reply})
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, node, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &goamqp.Message{
		Properties:            &goamqp.MessageProperties{MessageID: "req-1", ReplyTo: ptr(reply)},
		ApplicationProperties: props,
		Value:                 value,
	}
	if err := snd.Send(ctx, req, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestRelayedDeadLetterOutcome: a client dead-letters through the gateway
// (a rejected outcome whose error carries the reason) and the delivery is
// settled as a local one is: rejected with no error, which the SDKs take
// as success. Echoing the client's state made the JS SDK fail with
// GeneralError although the message was dead-lettered.
func TestRelayedDeadLetterOutcome(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	connStr, owner, _ := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := dialWithToken(ctx, t, connStr, "")
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	reason := &goamqp.Error{Condition: "com.microsoft:dead-letter", Info: map[string]any{"DeadLetterReason": "why"}}
	if err := rcv.RejectMessage(ctx, m, reason); err != nil {
		t.Fatalf("dead-letter through the gateway: %v", err)
	}
	if info, err := owner.Broker.GetQueue("q"); err != nil || info.Counts.DeadLetter != 1 {
		t.Fatalf("owner's counts %+v, %v; want one dead-lettered message", info.Counts, err)
	}
}

// TestRelayedNextSessionTimeout: a next-available session receiver's
// attach through the gateway carries the client's com.microsoft:timeout
// to the owner, which answers com.microsoft:timeout when it runs out
// with no session available (JS ServiceTimeout, Go CodeTimeout), instead
// of holding the attach for its one-minute default.
func TestRelayedNextSessionTimeout(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	connStr, _, _ := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := dialWithToken(ctx, t, connStr, "")
	start := time.Now()
	_, err := s.NewReceiver(ctx, "sq", &goamqp.ReceiverOptions{
		Filters:    []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x00000137000000C, nil)},
		Properties: map[string]any{"com.microsoft:timeout": uint32(300)},
	})
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
		t.Fatalf("next-available session with nothing to take: %v after %v; want com.microsoft:timeout", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("answered after %v, the client asked for 300 ms", d)
	}
}
