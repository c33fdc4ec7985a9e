package bench

import (
	"context"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// sdkClient drives Busbar with the official azservicebus SDK.
type sdkClient struct {
	name, cs string
	tier     string // "" is A (Busbar)
}

func (c *sdkClient) Name() string { return c.name }
func (c *sdkClient) Tier() string {
	if c.tier == "" {
		return "A"
	}
	return c.tier
}
func (c *sdkClient) CreateQueue(ctx context.Context, q string) error { return nil }
func (c *sdkClient) DeleteQueue(ctx context.Context, q string) error { return nil }
func (c *sdkClient) Close()                                          {}

func (c *sdkClient) Dial(ctx context.Context) (Conn, error) {
	cl, err := azservicebus.NewClientFromConnectionString(c.cs, nil)
	if err != nil {
		return nil, err
	}
	return &sdkConn{c: cl}, nil
}

type sdkConn struct{ c *azservicebus.Client }

func (k *sdkConn) Close() error { return k.c.Close(context.Background()) }

func (k *sdkConn) NewSender(ctx context.Context, addr string) (Sender, error) {
	s, err := k.c.NewSender(addr, nil)
	if err != nil {
		return nil, err
	}
	return &sdkSender{s: s}, nil
}

func (k *sdkConn) NewReceiver(ctx context.Context, addr string, credit int) (Receiver, error) {
	r, err := k.c.NewReceiverForQueue(addr, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModePeekLock})
	if err != nil {
		return nil, err
	}
	if credit < 1 {
		credit = 1
	}
	return &sdkReceiver{r: r, batch: credit}, nil
}

type sdkSender struct{ s *azservicebus.Sender }

func (s *sdkSender) Send(ctx context.Context, body []byte) error {
	return s.s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil)
}
func (s *sdkSender) Close() error { return s.s.Close(context.Background()) }

// sdkReceiver hands out messages from ReceiveMessages batches of up to
// batch messages; CompleteMessage waits for the broker's settlement.
type sdkReceiver struct {
	r     *azservicebus.Receiver
	batch int

	mu  sync.Mutex
	buf []*azservicebus.ReceivedMessage
}

func (r *sdkReceiver) Receive(ctx context.Context) (Delivery, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.buf) == 0 {
		ms, err := r.r.ReceiveMessages(ctx, r.batch, nil)
		if err != nil {
			return nil, err
		}
		r.buf = ms
	}
	m := r.buf[0]
	r.buf = r.buf[1:]
	return &sdkDelivery{r: r.r, m: m}, nil
}

func (r *sdkReceiver) Close() error { return r.r.Close(context.Background()) }

type sdkDelivery struct {
	r *azservicebus.Receiver
	m *azservicebus.ReceivedMessage
}

func (d *sdkDelivery) Body() []byte                     { return d.m.Body }
func (d *sdkDelivery) Settle(ctx context.Context) error { return d.r.CompleteMessage(ctx, d.m, nil) }
