package amqp_test

import (
	"context"
	"log"
	"net"
	"strings"
	"sync"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// exampleQueue is a stand-in for the broker: messages and the consumers
// waiting for them.
type exampleQueue struct {
	mu        sync.Mutex
	msgs      [][]byte
	consumers []*amqp.OutgoingLink
}

// dispatch hands queued messages to consumers with credit. Send never
// blocks and is safe from any goroutine, including link callbacks.
func (q *exampleQueue) dispatch() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, l := range q.consumers {
		for len(q.msgs) > 0 && l.Credit() > 0 {
			d := &amqp.OutgoingDelivery{Tag: make([]byte, 16), Payload: q.msgs[0]}
			if l.Send(d) != nil {
				break
			}
			q.msgs = q.msgs[1:]
		}
	}
}

type exampleConn struct{ q *exampleQueue }

func (c *exampleConn) AttachIncoming(l *amqp.IncomingLink) error {
	if strings.EqualFold(l.TargetAddress(), "missing") {
		// The client gets attach(target=null) + detach(closed, error).
		return amqp.Errorf(amqp.CondNotFound, "The messaging entity '%s' could not be found.", l.TargetAddress())
	}
	l.Reply.MaxMessageSize = 256 << 10 // non-zero, or the Go SDK cannot batch
	l.OnDelivery = func(d *amqp.IncomingDelivery) {
		c.q.mu.Lock()
		c.q.msgs = append(c.q.msgs, d.Payload) // the payload is ours to keep
		c.q.mu.Unlock()
		// Settle may also come later, from another goroutine (after a
		// group commit, say), in any order.
		d.Settle(&frames.Accepted{})
		c.q.dispatch()
	}
	return nil
}

func (c *exampleConn) AttachOutgoing(l *amqp.OutgoingLink) error {
	// Reply.Source echoes the client's source, filters included.
	l.Reply.Properties = map[frames.Symbol]any{"com.microsoft:locked-until-utc": int64(0)}
	l.OnFlow = func(credit uint32, drain bool) {
		// With drain set, send what there is now; the endpoint then
		// answers flow(drain=true, link-credit=0) by itself.
		c.q.dispatch()
	}
	l.OnDisposition = func(d *amqp.OutgoingDelivery, state frames.DeliveryState, settled bool) {
		if !settled { // peek-lock: answer with the final outcome
			d.Settle(state)
		}
	}
	l.OnDetach = func(err error, unsent []*amqp.OutgoingDelivery) {
		c.q.mu.Lock()
		defer c.q.mu.Unlock()
		for i, x := range c.q.consumers {
			if x == l {
				c.q.consumers = append(c.q.consumers[:i], c.q.consumers[i+1:]...)
				break
			}
		}
		for _, d := range unsent { // never reached the client
			c.q.msgs = append(c.q.msgs, d.Payload)
		}
	}
	c.q.mu.Lock()
	c.q.consumers = append(c.q.consumers, l)
	c.q.mu.Unlock()
	return nil
}

func (c *exampleConn) Disconnected(err error) {}

// replyTo finds the link a request/response reply goes to (docs/wire/amqp.md
// §0.5): by target address, else by link name.
func replyTo(conn *amqp.Conn, addr string) *amqp.OutgoingLink {
	if l := conn.OutgoingLinkByTarget(addr); l != nil {
		return l
	}
	return conn.OutgoingLink(addr)
}

func Example() {
	q := &exampleQueue{}
	srv, err := amqp.NewServer(amqp.HandlerFunc(func(c *amqp.Conn) (amqp.ConnHandler, error) {
		return &exampleConn{q: q}, nil
	}), amqp.Config{MaxConnections: 1000})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:5672")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := srv.Serve(ln); err != amqp.ErrServerClosed {
			log.Print(err)
		}
	}()
	// ... later:
	_ = srv.Shutdown(context.Background())
	_ = replyTo
}
