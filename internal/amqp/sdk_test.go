package amqp

import (
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// sdkHandler wraps the test broker with a minimal request/response
// responder for $cbs and $management, enough for the real Go Service Bus
// SDK to send and receive. It is a smoke test of the endpoint against
// the SDK's link patterns (a session per CBS token, reply routing by
// target address), not of Service Bus semantics.
type sdkHandler struct {
	b       *testBroker
	formats chan uint32
}

func (h *sdkHandler) Connect(c *Conn) (ConnHandler, error) {
	return &sdkConn{testConnHandler: testConnHandler{b: h.b}, h: h}, nil
}

type sdkConn struct {
	testConnHandler
	h *sdkHandler

	mu      sync.Mutex
	pending map[*OutgoingLink][]*OutgoingDelivery // replies waiting for credit
}

func isRPCNode(addr string) bool { return addr == "$cbs" || strings.HasSuffix(addr, "/$management") }

func (c *sdkConn) AttachIncoming(l *IncomingLink) error {
	if !isRPCNode(l.TargetAddress()) {
		if err := c.testConnHandler.AttachIncoming(l); err != nil {
			return err
		}
		inner := l.OnDelivery
		l.OnDelivery = func(d *IncomingDelivery) {
			select {
			case c.h.formats <- d.MessageFormat:
			default:
			}
			inner(d)
		}
		return nil
	}
	l.OnDelivery = func(d *IncomingDelivery) {
		var req frames.Message
		if err := req.UnmarshalBinary(d.Payload); err != nil || req.Properties == nil {
			d.Settle(&frames.Rejected{Error: &Error{Condition: CondDecodeError}})
			return
		}
		d.Settle(&frames.Accepted{})
		resp := &frames.Message{
			Properties: &frames.Properties{CorrelationID: req.Properties.MessageID},
			ApplicationProperties: map[string]any{
				"status-code": int32(200), "statusCode": int32(200),
				"status-description": "OK", "statusDescription": "OK",
			},
		}
		payload, err := resp.MarshalBinary()
		if err != nil {
			panic(err)
		}
		conn := l.Conn()
		out := conn.OutgoingLinkByTarget(req.Properties.ReplyTo)
		if out == nil {
			out = conn.OutgoingLink(req.Properties.ReplyTo)
		}
		if out == nil {
			return
		}
		od := &OutgoingDelivery{Tag: nextTag(), Payload: payload, Settled: true}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.pending[out]) > 0 || out.Send(od) != nil {
			// The request can overtake the receiver's first flow.
			c.pending[out] = append(c.pending[out], od)
		}
	}
	return nil
}

func (c *sdkConn) AttachOutgoing(l *OutgoingLink) error {
	if !isRPCNode(l.SourceAddress()) {
		return c.testConnHandler.AttachOutgoing(l)
	}
	l.OnFlow = func(credit uint32, drain bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		q := c.pending[l]
		for len(q) > 0 && l.Send(q[0]) == nil {
			q = q[1:]
		}
		c.pending[l] = q
	}
	l.OnDetach = func(err error, unsent []*OutgoingDelivery) {
		c.mu.Lock()
		delete(c.pending, l)
		c.mu.Unlock()
	}
	return nil
}

// TestServiceBusSDK sends single messages and a batch with the real Go
// Service Bus SDK, and receives in ReceiveAndDelete mode.
func TestServiceBusSDK(t *testing.T) {
	b := newTestBroker()
	h := &sdkHandler{b: b, formats: make(chan uint32, 10)}
	_, addr := startServer(t, HandlerFunc(func(c *Conn) (ConnHandler, error) {
		ch, err := h.Connect(c)
		ch.(*sdkConn).pending = make(map[*OutgoingLink][]*OutgoingDelivery)
		return ch, err
	}), Config{})
	ctx := testCtx(t)
	client, err := azservicebus.NewClientFromConnectionString(
		"Endpoint=sb://"+addr+";SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
		&azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)

	sender, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "two"} {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatalf("SendMessage: %v", err)
		}
		if f := <-h.formats; f != 0 {
			t.Errorf("message format %#x", f)
		}
	}

	batchSender, err := client.NewSender("batchq", nil)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := batchSender.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"a", "b", "c"} {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatalf("AddMessage (max-message-size must be non-zero): %v", err)
		}
	}
	if err := batchSender.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	if f := <-h.formats; f != frames.MessageFormatBatch {
		t.Errorf("batch message format %#x", f)
	}

	receiver, err := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		msgs, err := receiver.ReceiveMessages(ctx, 2, nil)
		if err != nil {
			t.Fatalf("ReceiveMessages: %v", err)
		}
		for _, m := range msgs {
			got = append(got, string(m.Body))
		}
	}
	if strings.Join(got, ",") != "one,two" {
		t.Errorf("received %v", got)
	}
	if err := receiver.Close(ctx); err != nil {
		t.Error(err)
	}

	// Peek-lock: every settlement waits for the broker's settled answer.
	for _, body := range []string{"three", "four"} {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	plr, err := client.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	var settledCount int
	for settledCount < 2 {
		msgs, err := plr.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatalf("ReceiveMessages (peek-lock): %v", err)
		}
		for _, m := range msgs {
			if settledCount == 0 {
				err = plr.AbandonMessage(ctx, m, nil)
			} else {
				err = plr.CompleteMessage(ctx, m, nil)
			}
			if err != nil {
				t.Fatalf("settle %q: %v", m.Body, err)
			}
			settledCount++
		}
	}
	if err := plr.Close(ctx); err != nil {
		t.Error(err)
	}
	if err := sender.Close(ctx); err != nil {
		t.Error(err)
	}
	if err := batchSender.Close(ctx); err != nil {
		t.Error(err)
	}
}
