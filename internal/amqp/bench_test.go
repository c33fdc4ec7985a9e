package amqp

import (
	"context"
	"net"
	"sync"
	"testing"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// BenchmarkThroughput pushes 1 KiB messages from go-amqp senders through
// the test broker to a go-amqp receiver: unsettled sends settled by the
// handler, and peek-lock receives settled by the client and answered by
// the broker. Client and server share the machine's cores.
func BenchmarkThroughput(b *testing.B) {
	for _, mode := range []string{"peeklock", "receiveanddelete"} {
		b.Run(mode, func(b *testing.B) { benchThroughput(b, mode == "peeklock") })
	}
}

func benchThroughput(b *testing.B, peekLock bool) {
	br := newTestBroker()
	srv, err := NewServer(br, Config{Logger: quietLogger(), LinkCredit: 5000})
	if err != nil {
		b.Fatal(err)
	}
	ln, addr := benchListen(b)
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(context.Background()) }()

	ctx := context.Background()
	opts := &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()}
	pc, err := goamqp.Dial(ctx, "amqp://"+addr, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	cc, err := goamqp.Dial(ctx, "amqp://"+addr, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ps, _ := pc.NewSession(ctx, nil)
	cs, _ := cc.NewSession(ctx, nil)
	snd, err := ps.NewSender(ctx, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	ropts := &goamqp.ReceiverOptions{Credit: 2000}
	if !peekLock {
		ropts.RequestedSenderSettleMode = ptr(goamqp.SenderSettleModeSettled)
	} else {
		ropts.SettlementMode = ptr(goamqp.ReceiverSettleModeSecond)
	}
	rcv, err := cs.NewReceiver(ctx, "bench", ropts)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()

	const senders = 64
	var wg sync.WaitGroup
	per := b.N / senders
	for i := range senders {
		n := per
		if i == 0 {
			n += b.N % senders
		}
		wg.Go(func() {
			for range n {
				if err := snd.Send(ctx, goamqp.NewMessage(payload), nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	// Settle received messages from a few goroutines, as an SDK would.
	msgs := make(chan *goamqp.Message, 1000)
	var sg sync.WaitGroup
	if peekLock {
		for range 8 {
			sg.Go(func() {
				for m := range msgs {
					if err := rcv.AcceptMessage(ctx, m); err != nil {
						b.Error(err)
					}
				}
			})
		}
	}
	for range b.N {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if peekLock {
			msgs <- m
		}
	}
	close(msgs)
	sg.Wait()
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func benchListen(b *testing.B) (net.Listener, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return ln, ln.Addr().String()
}

// BenchmarkIngest measures the server alone: a raw client pipelines
// pre-encoded 1 KiB transfers (two bursts of 1000 in flight) and counts
// the settled dispositions; the handler accepts every delivery at once
// and gives its frame buffer back, as a sender link does once it stored it.
func BenchmarkIngest(b *testing.B) {
	br := newTestBroker()
	br.intercept = func(d *IncomingDelivery) bool {
		d.Settle(&frames.Accepted{})
		d.Release()
		return true
	}
	srv, err := NewServer(br, Config{Logger: quietLogger(), LinkCredit: 5000})
	if err != nil {
		b.Fatal(err)
	}
	ln, addr := benchListen(b)
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(context.Background()) }()

	r := dialRaw(b, addr)
	r.handshake(&frames.Open{ContainerID: "bench", MaxFrameSize: 1 << 20})
	r.begin()
	r.attachSender(0, "s", "q")

	const burst = 1000
	settled := make(chan uint32, 64)
	go func() {
		defer close(settled)
		for {
			fr, err := frames.ReadFrame(r.br, 0)
			if err != nil {
				return
			}
			if d, ok := fr.Body.(*frames.Disposition); ok {
				last := d.First
				if d.Last != nil {
					last = *d.Last
				}
				settled <- last - d.First + 1
			}
		}
	}()
	payload := make([]byte, 1024)
	var buf []byte
	b.SetBytes(1024)
	b.ResetTimer()
	var sent, done int
	id := uint32(0)
	for done < b.N {
		for sent < b.N && sent-done < 2*burst {
			buf = buf[:0]
			for range min(burst, b.N-sent) {
				buf, _ = frames.AppendFrame(buf, 0, &frames.Transfer{Handle: 0, DeliveryID: &id,
					DeliveryTag:   []byte{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)},
					MessageFormat: new(uint32), Payload: payload})
				id++
				sent++
			}
			if _, err := r.nc.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		n, ok := <-settled
		if !ok {
			b.Fatal("connection closed")
		}
		done += int(n)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	_ = r.nc.Close()
	for range settled {
	}
}
