package bench

import "context"

// Client is one broker protocol as the workloads see it. Addresses are
// the client's own: a queue name, or what Topic returns.
type Client interface {
	// Name is the target as printed, e.g. "Busbar (go-amqp)".
	Name() string
	// Tier is "A" (durable before ack) or "B" (periodic fsync).
	Tier() string
	// CreateQueue makes an empty durable queue (or stream) q.
	CreateQueue(ctx context.Context, q string) error
	// DeleteQueue removes q and its messages (best effort).
	DeleteQueue(ctx context.Context, q string) error
	// Dial opens one connection.
	Dial(ctx context.Context) (Conn, error)
	// Close releases what the client holds (admin connections).
	Close()
}

// Conn is one connection to the broker.
type Conn interface {
	// NewSender opens a link/channel that sends durable messages to addr.
	// Send may be called from many goroutines at once; each call returns
	// when the broker has confirmed that message (so the number of
	// goroutines sending is the in-flight window).
	NewSender(ctx context.Context, addr string) (Sender, error)
	// NewReceiver opens a consumer on addr with the given credit
	// (prefetch, max ack pending); credit < 0 asks for exactly one
	// message where the protocol allows it.
	NewReceiver(ctx context.Context, addr string, credit int) (Receiver, error)
	Close() error
}

type Sender interface {
	Send(ctx context.Context, body []byte) error
	Close() error
}

type Receiver interface {
	// Receive returns the next delivery. It is called from one goroutine.
	Receive(ctx context.Context) (Delivery, error)
	Close() error
}

type Delivery interface {
	Body() []byte
	// Settle completes (acks) the delivery; it may be called from another
	// goroutine. Where the protocol allows, it returns when the broker has
	// confirmed the settlement.
	Settle(ctx context.Context) error
}

// TopicClient is implemented by clients that can fan out.
type TopicClient interface {
	// CreateTopic makes topic t with subscriptions subs and returns the
	// address to send to and one address per subscription to receive
	// from.
	CreateTopic(ctx context.Context, t string, subs []string) (send string, recv []string, err error)
	DeleteTopic(ctx context.Context, t string, subs []string) error
}

// Process is a broker process the harness can observe.
type Process interface {
	PID() int
	DataDir() string
}
