package relay

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// ownerNode is a node serving queue "q" behind an internal listener.
type ownerNode struct {
	*servicebustest.Server
	internal string
	stopOnce sync.Once
	stopFn   func()
}

// stop closes the internal listener and its connections, as the owner's
// death does for the gateway.
func (o *ownerNode) stop() { o.stopOnce.Do(o.stopFn) }

func startOwner(t *testing.T, node string) *ownerNode {
	t.Helper()
	b := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}})
	addr, stop := serveListener(t, ListenerConfig{Secret: testSecret, Self: node, Sessions: sessionsOf(map[string]int64{"a": 7}), Owner: b.Handler})
	o := &ownerNode{Server: b, internal: addr, stopFn: stop}
	t.Cleanup(o.stop)
	return o
}

// cutProxy forwards TCP connections to addr until cut, which closes them
// all without a word, as a killed process's sockets go.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, addr string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// When the owner of a relayed receiver's unit dies, the gateway detaches
// the client's link so that the SDK attaches again — and is routed to
// the unit's new owner. A long-lived Go SDK receiver, the way
// applications use it, receives from the new owner.
func TestRelayReceiverFollowsNewOwner(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	first := startOwner(t, "b")
	second := startOwner(t, "c")
	toFirst := startCutProxy(t, first.internal)
	var mu sync.Mutex
	owner := Owner{Node: "b", Addr: toFirst.addr()}
	g, err := NewGateway(GatewayConfig{Secret: testSecret, Node: "a", Session: func() int64 { return 7 },
		OwnerOf: func(unit string) (Owner, bool) {
			if unit != "q" {
				return Owner{}, false
			}
			mu.Lock()
			defer mu.Unlock()
			return owner, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	a := servicebustest.Start(t, &servicebustest.Options{Router: g})
	t.Cleanup(func() { a.Close(); g.Close() })
	c := newClient(t, a.ConnectionString)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	rcv, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(context.Background())
	receive := func() []*azservicebus.ReceivedMessage {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		ms, _ := rcv.ReceiveMessages(rctx, 1, nil)
		return ms
	}
	// The receiver's link is up (relayed to b): nothing to receive.
	if ms := receive(); len(ms) != 0 {
		t.Fatalf("received %d messages from an empty queue", len(ms))
	}
	// b dies (its connections end without a close frame); c serves the
	// unit now, with a message waiting.
	toFirst.cut()
	mu.Lock()
	owner = Owner{Node: "c", Addr: second.internal}
	mu.Unlock()
	snd, err := azservicebus.NewClientFromConnectionString(second.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(context.Background())
	s, err := snd.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("from c")}, nil); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(ctx)
	for {
		if ms := receive(); len(ms) == 1 {
			if string(ms[0].Body) != "from c" {
				t.Fatalf("received %q", ms[0].Body)
			}
			if err := rcv.CompleteMessage(ctx, ms[0], nil); err != nil {
				t.Fatal(err)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the receiver never received from the new owner: its link was not detached so that it attaches again")
		}
	}
}

// A management request (here: schedule) for an entity whose owner the
// gateway can no longer reach fails with server-busy (503), which the
// SDKs retry, not with an internal error (500).
func TestRelayRequestOwnerLost(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	owner := startOwner(t, "b")
	proxy := startCutProxy(t, owner.internal)
	g, err := NewGateway(GatewayConfig{Secret: testSecret, Node: "a", Session: func() int64 { return 7 },
		OwnerOf: func(unit string) (Owner, bool) {
			if unit != "q" {
				return Owner{}, false
			}
			return Owner{Node: "b", Addr: proxy.addr()}, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	a := servicebustest.Start(t, &servicebustest.Options{Router: g})
	t.Cleanup(func() { a.Close(); g.Close() })
	c := newClientNoRetry(t, a.ConnectionString)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	at := time.Now().Add(time.Hour)
	if _, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("x")}}, at, nil); err != nil {
		t.Fatal(err)
	}
	proxy.cut()
	for range 3 { // the SDK may first see its detached link
		_, err = snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("y")}}, at, nil)
		if err == nil {
			t.Fatal("scheduled through an owner that cannot be reached")
		}
		if strings.Contains(err.Error(), "status code") {
			break
		}
	}
	if !strings.Contains(err.Error(), "status code 503") {
		t.Fatalf("schedule through a lost owner: %v, want status code 503 (server-busy)", err)
	}
}
