package servicebus_test

// Authentication on the wire: one $cbs link pair per connection, tokens
// expiring on open links (a fake clock), SAS audience forms and entity
// rules with the official Go SDK.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	amqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// TestWireOneCBSPair: a second $cbs sender or receiver on a connection is
// refused with amqp:not-allowed (the Go SDK's cue to reconnect); once the
// first detaches, a new one attaches.
func TestWireOneCBSPair(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/q")
	sess := w.session()
	var ae *amqp.Error
	_, err := sess.NewSender(w.ctx, "$cbs", nil)
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotAllowed || !strings.Contains(ae.Description, "only one $cbs sender") {
		t.Fatalf("second $cbs sender: %v", err)
	}
	_, err = sess.NewReceiver(w.ctx, "$cbs", &amqp.ReceiverOptions{TargetAddress: "x"})
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotAllowed {
		t.Fatalf("second $cbs receiver: %v", err)
	}
	// Close the pair: the slots free.
	if err := w.cbs.snd.Close(w.ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.cbs.rcv.Close(w.ctx); err != nil {
		t.Fatal(err)
	}
	w.cbs = nil
	w.authorize("amqp://" + s.Addr + "/q")
}

// TestWireTokenExpiry: links attached under tokens that expire are
// detached with amqp:unauthorized-access unless a new put-token renewed
// the audience's token, by the injected clock.
func TestWireTokenExpiry(t *testing.T) {
	fc := clock.NewFake(time.Now())
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"kept", "lost"}, TokenClock: fc, TokenCheckInterval: 10 * time.Millisecond})
	w := dialWire(t, s)
	put := func(q string, d time.Duration) {
		t.Helper()
		aud := "amqp://" + s.Addr + "/" + q
		if code := status(t, putToken(t, w.cbsLink(), aud, auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, aud, fc.Now().Add(d)))); code != 202 {
			t.Fatalf("put-token for %s: %d", q, code)
		}
	}
	put("kept", time.Minute)
	put("lost", time.Minute)
	sess := w.session()
	keptSnd, err := sess.NewSender(w.ctx, "kept", nil)
	if err != nil {
		t.Fatal(err)
	}
	keptRcv, err := sess.NewReceiver(w.ctx, "kept", &amqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	lostRcv, err := sess.NewReceiver(w.ctx, "lost", &amqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}

	fc.Advance(30 * time.Second)
	put("kept", time.Hour) // the SDKs renew before expiry
	fc.Advance(45 * time.Second)

	// The unrenewed link goes (the watcher runs every 10 ms of real time).
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	_, err = lostRcv.Receive(ctx, nil)
	var le *amqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != amqp.ErrCondUnauthorizedAccess ||
		!strings.Contains(le.RemoteErr.Description, "expired") {
		t.Fatalf("receiver under an expired token: %v", err)
	}
	// The renewed ones stay: the watcher has passed them too.
	if err := keptSnd.Send(ctx, amqp.NewMessage([]byte("still here")), nil); err != nil {
		t.Fatalf("send under a renewed token: %v", err)
	}
	m, err := keptRcv.Receive(ctx, nil)
	if err != nil || string(m.GetData()) != "still here" {
		t.Fatalf("receive under a renewed token: %v, %v", m, err)
	}
	// A new link under the expired audience is refused.
	_, err = sess.NewReceiver(w.ctx, "lost", nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondUnauthorizedAccess {
		t.Fatalf("attach under an expired token: %v", err)
	}
}

// sendReceive sends one message to q with c and receives it back.
func sendReceive(ctx context.Context, c *azservicebus.Client, q string) error {
	snd, err := c.NewSender(q, nil)
	if err != nil {
		return err
	}
	defer snd.Close(ctx)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("hi " + q)}, nil); err != nil {
		return err
	}
	rcv, err := c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		return err
	}
	defer rcv.Close(ctx)
	ms, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		return err
	}
	if len(ms) != 1 || string(ms[0].Body) != "hi "+q {
		return errors.New("wrong message back")
	}
	return nil
}

func isUnauthorized(err error) bool {
	var se *azservicebus.Error
	return errors.As(err, &se) && se.Code == azservicebus.CodeUnauthorizedAccess
}

// TestSDKSASConnectionString: the Go SDK with SharedAccessSignature=… in
// its connection string, the token's sr being the bare namespace host as
// the SDK's own sas.CreateConnectionStringWithSASUsingExpiry signs it.
func TestSDKSASConnectionString(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	ctx := testCtx(t, 60*time.Second)
	port := s.Addr[strings.LastIndex(s.Addr, ":")+1:]
	for _, sr := range []string{"localhost", "127.0.0.1", "localhost:" + port, "sb://localhost/q"} {
		tok := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, sr, time.Now().Add(time.Hour))
		c := newClient(t, "Endpoint=sb://localhost:"+port+";SharedAccessSignature="+tok+";UseDevelopmentEmulator=true")
		if err := sendReceive(ctx, c, "q"); err != nil {
			t.Fatalf("sr=%s: %v", sr, err)
		}
	}
	// A token for another namespace is refused.
	tok := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "otherns.servicebus.windows.net", time.Now().Add(time.Hour))
	c := newClient(t, "Endpoint=sb://localhost:"+port+";SharedAccessSignature="+tok+";UseDevelopmentEmulator=true")
	if err := sendReceive(ctx, c, "q"); !isUnauthorized(err) || !strings.Contains(err.Error(), "otherns.servicebus.windows.net") {
		t.Fatalf("token for another host: %v", err)
	}
}

// TestSDKEntityRule: a connection string naming a rule defined on queue q
// (EntityPath=q) sends and receives on q with the rule's rights and is
// refused on another queue.
func TestSDKEntityRule(t *testing.T) {
	qp := broker.DefaultQueueProperties()
	qp.AuthorizationRules = []broker.AuthorizationRule{
		{KeyName: "q-app", PrimaryKey: "app-key", Rights: []string{"Send", "Listen"}},
		{KeyName: "q-send", PrimaryKey: "send-key", SecondaryKey: "send-key-2", Rights: []string{"Send"}},
	}
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q", "other"}, QueueProps: map[string]broker.QueueProperties{"q": qp}})
	ctx := testCtx(t, 60*time.Second)
	cs := func(name, key string) string {
		return "Endpoint=sb://" + s.Addr + ";SharedAccessKeyName=" + name + ";SharedAccessKey=" + key + ";EntityPath=q;UseDevelopmentEmulator=true"
	}
	if err := sendReceive(ctx, newClient(t, cs("q-app", "app-key")), "q"); err != nil {
		t.Fatalf("entity rule on its queue: %v", err)
	}
	if err := sendReceive(ctx, newClient(t, cs("q-app", "app-key")), "other"); !isUnauthorized(err) {
		t.Fatalf("entity rule on another queue: %v", err)
	}
	// Send only: sending works (with the secondary key too), receiving not.
	c := newClient(t, cs("q-send", "send-key-2"))
	snd, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
		t.Fatalf("send with a Send rule: %v", err)
	}
	rcv, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rcv.ReceiveMessages(ctx, 1, nil); !isUnauthorized(err) || !strings.Contains(err.Error(), "Listen") {
		t.Fatalf("receive with a Send rule: %v", err)
	}
	if err := sendReceive(ctx, newClient(t, cs("q-send", "wrong")), "q"); !isUnauthorized(err) {
		t.Fatalf("entity rule with a wrong key: %v", err)
	}
}

// TestWireGrantCap: a connection holds tokens for at most 1024 audiences;
// the next put-token is refused with amqp:resource-limit-exceeded, a
// renewal of a held audience still works.
func TestWireGrantCap(t *testing.T) {
	var queues []string
	for i := range 205 {
		queues = append(queues, fmt.Sprintf("q%03d", i))
	}
	s := servicebustest.Start(t, &servicebustest.Options{Queues: queues})
	w := dialWire(t, s)
	cbs := w.cbsLink()
	n := 0
	put := func(path string) *amqp.Message {
		aud := "amqp://" + s.Addr + "/" + path
		return putToken(t, cbs, aud, auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, aud, time.Now().Add(time.Hour)))
	}
	for _, q := range queues {
		for _, p := range []string{q, q + "/$management", q + "/$DeadLetterQueue", q + "/$DeadLetterQueue/$management", q + "/$Transfer/$DeadLetterQueue"} {
			if n == 1024 {
				break
			}
			if code := status(t, put(p)); code != 202 {
				t.Fatalf("put-token %d (%s): %d", n, p, code)
			}
			n++
		}
	}
	resp := put("q204/$Transfer/$DeadLetterQueue")
	if code := status(t, resp); code != 403 || errCond(resp) != "amqp:resource-limit-exceeded" {
		t.Fatalf("put-token 1025: %d %s", code, errCond(resp))
	}
	if code := status(t, put("q000")); code != 202 {
		t.Fatalf("renewal at the cap: %d", code)
	}
}
