package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/servicebus"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// twoNodes starts node b, which serves queue "q" (and session queue
// "sq") and has an internal listener, and node a, whose gateway relays
// those to b. It returns a's connection string and b.
func twoNodes(t *testing.T) (connStr string, owner *servicebustest.Server, internal string) {
	t.Helper()
	return twoNodesWith(t, &servicebustest.Options{})
}

// twoNodesWith is twoNodes with node a's options (its Router is set).
func twoNodesWith(t *testing.T, aOpts *servicebustest.Options) (connStr string, owner *servicebustest.Server, internal string) {
	t.Helper()
	return twoNodesWrapped(t, aOpts, nil)
}

// relayOwner is what serves the internal listener's relayed links.
type relayOwner = interface {
	ConnectRelayed(c *amqp.Conn) (amqp.ConnHandler, error)
}

// twoNodesWrapped is twoNodesWith whose internal listener serves b's
// handler through wrap (nil: as it is).
func twoNodesWrapped(t *testing.T, aOpts *servicebustest.Options, wrap func(relayOwner) relayOwner) (connStr string, owner *servicebustest.Server, internal string) {
	t.Helper()
	sq := broker.DefaultQueueProperties()
	sq.RequiresSession = true
	b := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q", "sq"}, QueueProps: map[string]broker.QueueProperties{"sq": sq}})
	var served relayOwner = b.Handler
	if wrap != nil {
		served = wrap(served)
	}
	addr, stop := serveListener(t, ListenerConfig{Secret: testSecret, Self: "b", Sessions: sessionsOf(map[string]int64{"a": 7}), Owner: served})
	g, err := NewGateway(GatewayConfig{Secret: testSecret, Node: "a", Session: func() int64 { return 7 }, Park: time.Second,
		OwnerOf: func(unit string) (Owner, bool) {
			switch unit {
			case "q", "sq":
				return Owner{Node: "b", Addr: addr}, true
			case "gone":
				return Owner{Node: "c", Addr: "127.0.0.1:1"}, true
			}
			return Owner{}, false
		}})
	if err != nil {
		t.Fatal(err)
	}
	aOpts.Router = g
	a := servicebustest.Start(t, aOpts)
	t.Cleanup(func() { // before a's and b's own clean-ups (LIFO)
		a.Close()
		g.Close()
		stop()
	})
	return a.ConnectionString, b, addr
}

func newClient(t *testing.T, connStr string) *azservicebus.Client {
	t.Helper()
	return newClientRetry(t, connStr, azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond})
}

// newClientNoRetry is a client that reports every error as it comes.
func newClientNoRetry(t *testing.T, connStr string) *azservicebus.Client {
	t.Helper()
	return newClientRetry(t, connStr, azservicebus.RetryOptions{MaxRetries: -1})
}

// newClientRetry is an SDK client of connStr retrying as ro says, closed
// in t.Cleanup.
func newClientRetry(t *testing.T, connStr string, ro azservicebus.RetryOptions) *azservicebus.Client {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(connStr, &azservicebus.ClientOptions{RetryOptions: ro})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// The Go SDK connected to node a sends to, peeks, receives from and
// settles on a queue node b serves: links and management requests go
// through a's gateway over the internal connection.
func TestRelaySDK(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	connStr, b, _ := twoNodes(t)
	c := newClient(t, connStr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	snd, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		m := &azservicebus.Message{Body: []byte(fmt.Sprint("m", i)), MessageID: ptr(fmt.Sprint("id", i)), Subject: ptr("subj"),
			ApplicationProperties: map[string]any{"i": int64(i)}}
		if err := snd.SendMessage(ctx, m, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	batch, err := snd.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 8; i++ {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(fmt.Sprint("m", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatalf("send batch: %v", err)
	}
	if info, err := b.Broker.GetQueue("q"); err != nil || info.Counts.Total != 8 {
		t.Fatalf("owner holds %+v, %v; want 8 messages", info.Counts, err)
	}

	rcv, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	peeked, err := rcv.PeekMessages(ctx, 10, nil) // $management
	if err != nil || len(peeked) != 8 {
		t.Fatalf("peek: %d, %v", len(peeked), err)
	}
	if p := peeked[1]; p.MessageID != "id1" || p.Subject == nil || *p.Subject != "subj" || p.ApplicationProperties["i"] != int64(1) || p.SequenceNumber == nil {
		t.Fatalf("peeked message changed on the way: %+v", p)
	}
	var got []string
	abandoned := false
	for len(got) < 7 {
		ms, err := rcv.ReceiveMessages(ctx, 8, nil)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range ms {
			if !abandoned {
				abandoned = true
				if err := rcv.RenewMessageLock(ctx, m, nil); err != nil { // $management
					t.Fatalf("renew lock: %v", err)
				}
				if err := rcv.AbandonMessage(ctx, m, nil); err != nil {
					t.Fatalf("abandon: %v", err)
				}
				continue
			}
			got = append(got, string(m.Body))
			if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete %s: %v", m.Body, err)
			}
		}
	}
	if info, err := b.Broker.GetQueue("q"); err != nil || info.Counts.Active != 1 {
		t.Fatalf("owner holds %d, %v; want the abandoned message only", info.Counts, err)
	}
	ms, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 || ms[0].DeliveryCount != 2 {
		t.Fatalf("redelivery: %v, %v", ms, err)
	}
	if err := rcv.DeadLetterMessage(ctx, ms[0], &azservicebus.DeadLetterOptions{Reason: ptr("why")}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	dlq, err := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter, ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	ms, err = dlq.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 || ms[0].DeadLetterReason == nil || *ms[0].DeadLetterReason != "why" {
		t.Fatalf("dead-letter queue: %v, %v", ms, err)
	}
	if info, err := b.Broker.GetQueue("q"); err != nil || info.Counts.Total != 0 {
		t.Fatalf("owner holds %d, %v; want none", info.Counts, err)
	}

	// Asking for more than there is: the SDK drains the link, through
	// the gateway to the owner, and credit works again afterwards.
	for round := range 2 {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("one")}, nil); err != nil {
			t.Fatal(err)
		}
		ms, err := rcv.ReceiveMessages(ctx, 10, nil)
		if err != nil || len(ms) != 1 || string(ms[0].Body) != "one" {
			t.Fatalf("round %d: %v, %v", round, ms, err)
		}
		if err := rcv.CompleteMessage(ctx, ms[0], nil); err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		ms, _ = rcv.ReceiveMessages(short, 10, nil)
		cancelShort()
		if len(ms) != 0 {
			t.Fatalf("round %d: received %d from an empty queue", round, len(ms))
		}
	}
}

// Session receivers through the gateway: the next available session (a
// deferred attach on the owner), its messages and state, and the
// session lock's management operations on the internal connection.
func TestRelaySessions(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	connStr, _, _ := twoNodes(t)
	c := newClient(t, connStr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	snd, err := c.NewSender("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s1", "s2"} {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(id), SessionID: ptr(id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sr, err := c.AcceptNextSessionForQueue(ctx, "sq", nil)
	if err != nil {
		t.Fatalf("accept next session: %v", err)
	}
	if sr.SessionID() != "s1" {
		t.Fatalf("session %q, want s1", sr.SessionID())
	}
	if err := sr.SetSessionState(ctx, []byte("state"), nil); err != nil {
		t.Fatalf("set state: %v", err)
	}
	if st, err := sr.GetSessionState(ctx, nil); err != nil || string(st) != "state" {
		t.Fatalf("get state: %q, %v", st, err)
	}
	if err := sr.RenewSessionLock(ctx, nil); err != nil {
		t.Fatalf("renew session lock: %v", err)
	}
	n := 0
	for n < 2 {
		ms, err := sr.ReceiveMessages(ctx, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if string(m.Body) != "s1" {
				t.Fatalf("got %q in session s1", m.Body)
			}
			if err := sr.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if err := sr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	named, err := c.AcceptSessionForQueue(ctx, "sq", "s2", nil)
	if err != nil {
		t.Fatalf("accept s2: %v", err)
	}
	ms, err := named.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "s2" {
		t.Fatalf("s2: %v, %v", ms, err)
	}
	if err := named.CompleteMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
}

// An owner the gateway cannot reach fails the client's operation with a
// retriable error; nothing is reported as sent.
func TestRelayOwnerUnreachable(t *testing.T) {
	connStr, _, _ := twoNodes(t)
	c := newClientNoRetry(t, connStr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := c.NewSender("gone", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if err == nil || !strings.Contains(err.Error(), "server-busy") {
		t.Fatalf("send to an unreachable owner: %v", err)
	}
}

// The internal listener serves relayed links only with the relayed
// rights, and takes no tokens.
func TestRelayedLinkNeedsRights(t *testing.T) {
	_, _, internal := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := Dial(ctx, internal, DialConfig{Secret: testSecret, Node: "a", Session: 7, Owner: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"q", "$cbs"} {
		_, err = s.NewSender(ctx, addr, nil)
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondUnauthorizedAccess {
			t.Fatalf("attach %s without rights: %v", addr, err)
		}
	}
	// Listen only: sending is refused by the owner.
	listen := map[string]any{servicebus.RelayProperty: int64(auth.Listen)}
	snd, err := s.NewSender(ctx, "q", &goamqp.SenderOptions{Properties: listen})
	if err == nil {
		err = snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil)
	}
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondUnauthorizedAccess {
		t.Fatalf("send with Listen rights: %v", err)
	}
}

// A relayed link lives under the client's token at the gateway: when
// the token expires unrenewed the gateway detaches it, and the client
// cannot go on with the expired token.
func TestRelayTokenExpiry(t *testing.T) {
	connStr, _, _ := twoNodesWith(t, &servicebustest.Options{TokenCheckInterval: 50 * time.Millisecond})
	endpoint, _, _ := strings.Cut(connStr, ";")
	tok := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "127.0.0.1", time.Now().Add(3*time.Second))
	c, err := azservicebus.NewClientFromConnectionString(endpoint+";SharedAccessSignature="+tok+";UseDevelopmentEmulator=true",
		&azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
		t.Fatalf("send under a live token: %v", err)
	}
	time.Sleep(3500 * time.Millisecond) // past the token's expiry (the SDK signs with the wall clock)
	err = snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("y")}, nil)
	var se *azservicebus.Error
	if !errors.As(err, &se) || se.Code != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("send after the token expired: %v", err)
	}
}
