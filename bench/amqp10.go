package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
)

// amqp10Client drives an AMQP 1.0 broker with go-amqp: Busbar (with CBS
// put-token before each attach, peek-lock receivers with
// rcv-settle-mode second) and RabbitMQ's AMQP 1.0 plugin (mode first).
type amqp10Client struct {
	name, tier string
	url        string
	// cbs: put a SAS token on $cbs before attaching (Busbar).
	cbs bool
	// settleSecond: receivers use rcv-settle-mode second and wait for the
	// broker's settlement of every complete.
	settleSecond bool
	// addr maps a queue name to a link address.
	addr func(q string) string
	// create/delete queues (out of band: Config.json, admin API, 0.9.1).
	create, del func(ctx context.Context, q string) error
	topic       func(ctx context.Context, t string, subs []string) (string, []string, error)
	delTopic    func(ctx context.Context, t string, subs []string) error
	// minCredit raises receiver credit (RabbitMQ 3.10's plugin stalls at
	// ≤ 1000 with go-amqp).
	minCredit int
	// sasl is the SASL mechanism (default ANONYMOUS, as the SDK in
	// emulator mode).
	sasl amqp.SASLType
}

func (c *amqp10Client) Name() string { return c.name }
func (c *amqp10Client) Tier() string { return c.tier }
func (c *amqp10Client) Close()       {}

func (c *amqp10Client) CreateQueue(ctx context.Context, q string) error {
	if c.create == nil {
		return nil
	}
	return c.create(ctx, q)
}

func (c *amqp10Client) DeleteQueue(ctx context.Context, q string) error {
	if c.del == nil {
		return nil
	}
	return c.del(ctx, q)
}

func (c *amqp10Client) CreateTopic(ctx context.Context, t string, subs []string) (string, []string, error) {
	if c.topic == nil {
		return "", nil, fmt.Errorf("topics not supported")
	}
	return c.topic(ctx, t, subs)
}

func (c *amqp10Client) DeleteTopic(ctx context.Context, t string, subs []string) error {
	if c.delTopic == nil {
		return nil
	}
	return c.delTopic(ctx, t, subs)
}

func (c *amqp10Client) Dial(ctx context.Context) (Conn, error) {
	sasl := c.sasl
	if sasl == nil {
		sasl = amqp.SASLTypeAnonymous()
	}
	opts := &amqp.ConnOptions{SASLType: sasl, MaxFrameSize: 65536}
	conn, err := amqp.Dial(ctx, c.url, opts)
	if err != nil {
		return nil, err
	}
	sess, err := conn.NewSession(ctx, &amqp.SessionOptions{MaxLinks: 4096})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &amqp10Conn{c: c, conn: conn, sess: sess, authed: map[string]bool{}}, nil
}

type amqp10Conn struct {
	c    *amqp10Client
	conn *amqp.Conn
	sess *amqp.Session

	mu     sync.Mutex
	cbsS   *amqp.Sender
	cbsR   *amqp.Receiver
	reply  string
	authed map[string]bool
}

// authorize puts a SAS token for the entity address on $cbs, as the Go
// SDK does, signed with the default RootManageSharedAccessKey.
func (k *amqp10Conn) authorize(ctx context.Context, address string) error {
	if !k.c.cbs {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.authed[address] {
		return nil
	}
	if k.cbsS == nil {
		var err error
		k.reply = "$cbs-reply-" + uuid.NewString()
		if k.cbsS, err = k.sess.NewSender(ctx, "$cbs", nil); err != nil {
			return fmt.Errorf("$cbs sender: %w", err)
		}
		if k.cbsR, err = k.sess.NewReceiver(ctx, "$cbs", &amqp.ReceiverOptions{TargetAddress: k.reply, Credit: 10}); err != nil {
			return fmt.Errorf("$cbs receiver: %w", err)
		}
	}
	audience := k.c.url + "/" + address
	tok := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, audience, time.Now().Add(2*time.Hour))
	reply := k.reply
	req := &amqp.Message{
		Properties: &amqp.MessageProperties{MessageID: uuid.NewString(), ReplyTo: &reply},
		ApplicationProperties: map[string]any{
			"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience, "expiration": "0",
		},
		Value: tok,
	}
	if err := k.cbsS.Send(ctx, req, nil); err != nil {
		return fmt.Errorf("put-token: %w", err)
	}
	resp, err := k.cbsR.Receive(ctx, nil)
	if err != nil {
		return fmt.Errorf("put-token reply: %w", err)
	}
	_ = k.cbsR.AcceptMessage(ctx, resp)
	code := resp.ApplicationProperties["status-code"]
	if code != int32(200) && code != int32(202) {
		return fmt.Errorf("put-token for %s: status %v %v", audience, code, resp.ApplicationProperties["status-description"])
	}
	k.authed[address] = true
	return nil
}

func (k *amqp10Conn) target(addr string) string {
	if k.c.addr != nil {
		return k.c.addr(addr)
	}
	return addr
}

func (k *amqp10Conn) NewSender(ctx context.Context, addr string) (Sender, error) {
	if err := k.authorize(ctx, addr); err != nil {
		return nil, err
	}
	// Unsettled sends (mixed), as the Service Bus SDK: each Send waits for
	// the broker's disposition.
	s, err := k.sess.NewSender(ctx, k.target(addr), &amqp.SenderOptions{SettlementMode: amqp.SenderSettleModeUnsettled.Ptr()})
	if err != nil {
		return nil, err
	}
	return &amqp10Sender{s: s}, nil
}

func (k *amqp10Conn) NewReceiver(ctx context.Context, addr string, credit int) (Receiver, error) {
	if err := k.authorize(ctx, addr); err != nil {
		return nil, err
	}
	// credit < 0 asks for exactly one message: manual credit, so that
	// settling it does not pull (and lock) another one.
	single := credit < 0 && k.c.minCredit == 0
	if credit < 1 {
		credit = 1
	}
	if credit < k.c.minCredit {
		credit = k.c.minCredit
	}
	opts := &amqp.ReceiverOptions{Credit: int32(credit)}
	if single {
		opts.Credit = -1
	}
	if k.c.settleSecond {
		opts.SettlementMode = amqp.ReceiverSettleModeSecond.Ptr()
	}
	r, err := k.sess.NewReceiver(ctx, k.target(addr), opts)
	if err != nil {
		return nil, err
	}
	if single {
		if err := r.IssueCredit(1); err != nil {
			return nil, err
		}
	}
	return &amqp10Receiver{r: r}, nil
}

func (k *amqp10Conn) Close() error { return k.conn.Close() }

type amqp10Sender struct{ s *amqp.Sender }

func (s *amqp10Sender) Send(ctx context.Context, body []byte) error {
	return s.s.Send(ctx, &amqp.Message{Data: [][]byte{body}, Header: &amqp.MessageHeader{Durable: true}}, nil)
}

func (s *amqp10Sender) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.s.Close(ctx)
}

type amqp10Receiver struct{ r *amqp.Receiver }

func (r *amqp10Receiver) Receive(ctx context.Context) (Delivery, error) {
	m, err := r.r.Receive(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &amqp10Delivery{r: r.r, m: m}, nil
}

func (r *amqp10Receiver) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.r.Close(ctx)
}

type amqp10Delivery struct {
	r *amqp.Receiver
	m *amqp.Message
}

func (d *amqp10Delivery) Body() []byte { return d.m.GetData() }
func (d *amqp10Delivery) Settle(ctx context.Context) error {
	return d.r.AcceptMessage(ctx, d.m)
}
