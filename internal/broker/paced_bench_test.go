package broker

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
)

// BenchmarkPacedSendComplete is W3 in process: sends paced at a fixed
// rate, timed from each one's scheduled start (so a late start counts),
// one peek-lock receiver completing each message. It reports the latency
// of Send and of the delivery (scheduled time to receipt), which with a
// durable store bound the end-to-end latency any client can see.
//
// The senders are independent (senders=each: every message on a goroutine
// of its own) or n sender loops, each sending its share of the messages
// in order, as AMQP sender links do; with follow=true each loop is a
// follower that promises while the store trusts it, as a link does
// (servicebus promise, for single-message sends). 50 loops at 100 msg/s
// each are the many occasional senders whose promises the store must not
// wait for more than once each.
//
//	go test -run XXX -bench PacedSendComplete -benchtime 50000x ./internal/broker/
func BenchmarkPacedSendComplete(b *testing.B) {
	b.Run("senders=each", func(b *testing.B) { pacedSendComplete(b, 0, false) })
	for _, n := range []int{1, 50} {
		for _, follow := range []bool{false, true} {
			b.Run(fmt.Sprintf("senders=%d/follow=%v", n, follow), func(b *testing.B) { pacedSendComplete(b, n, follow) })
		}
	}
}

func pacedSendComplete(b *testing.B, senders int, follow bool) {
	const rate = 5000
	br, st := openQueueBench(b)
	r, err := br.OpenReceiver("q", PeekLock)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	n := b.N
	sched := make([]int64, n+1)
	sendLat := make([]time.Duration, n+1)
	recvLat := make([]time.Duration, 0, n)
	var got atomic.Int64
	// Completes are applied in batches by one settler, as a receiver
	// link's are (servicebus).
	toks := make(chan uuid.UUID, n)
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		var batch []uuid.UUID
		for tok := range toks {
			batch = append(batch[:0], tok)
		more:
			for {
				select {
				case t, ok := <-toks:
					if !ok {
						break more
					}
					batch = append(batch, t)
				default:
					break more
				}
			}
			for _, err := range br.CompleteBatch(ctx, "q", batch) {
				if err != nil {
					b.Error(err)
				}
			}
		}
	}()
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for got.Load() < int64(n) {
			ds, err := awaitBatch(r, 64)
			if err != nil {
				b.Error(err)
				return
			}
			now := time.Now().UnixNano()
			for _, d := range ds {
				i := int(d.SequenceNumber)
				recvLat = append(recvLat, time.Duration(now-sched[i]))
				toks <- d.LockToken
				got.Add(1)
			}
		}
	}()
	log0, cpu0 := st.LogStats(), cpuTime()
	interval := time.Second / rate
	start := time.Now()
	for i := 1; i <= n; i++ {
		sched[i] = start.Add(time.Duration(i) * interval).UnixNano()
	}
	// send sends messages is (in one Send, as a link stores the
	// deliveries that piled up while it waited) once the first is due.
	send := func(s *Sender, is []int) {
		if d := time.Until(time.Unix(0, sched[is[0]])); d > 0 {
			time.Sleep(d)
		}
		ms := make([]*message.Message, len(is))
		for j, i := range is {
			ms[j] = msg1K(i)
		}
		var err error
		if s != nil {
			err = s.Send(ctx, ms)
		} else {
			err = br.Send(ctx, "q", ms)
		}
		if err != nil {
			b.Error(err)
		}
		now := time.Now().UnixNano()
		for _, i := range is {
			sendLat[i] = time.Duration(now - sched[i])
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	if senders == 0 {
		for i := 1; i <= n; i++ {
			if d := time.Until(time.Unix(0, sched[i])); d > 0 {
				time.Sleep(d)
			}
			wg.Go(func() { send(nil, []int{i}) })
		}
	}
	for k := range senders {
		wg.Go(func() {
			var s *Sender
			if follow {
				s = br.NewSender("q")
				defer s.Close()
			}
			var is []int
			for i := 1 + k; i <= n; {
				is = is[:0]
				now := time.Now().UnixNano()
				for ; i <= n && (len(is) == 0 || sched[i] <= now); i += senders {
					is = append(is, i)
				}
				if s != nil {
					s.Pace(len(is), 0) // as a sender link does
				}
				send(s, is)
			}
		})
	}
	wg.Wait()
	<-recvDone
	close(toks)
	<-settled
	b.StopTimer()
	q := func(l []time.Duration, p float64) float64 {
		return float64(l[int(float64(len(l)-1)*p)].Microseconds()) / 1e3
	}
	sl := slices.Clone(sendLat[1:])
	slices.Sort(sl)
	slices.Sort(recvLat)
	b.ReportMetric(q(sl, 0.5), "send-p50-ms")
	b.ReportMetric(q(sl, 0.99), "send-p99-ms")
	b.ReportMetric(q(recvLat, 0.5), "e2e-p50-ms")
	b.ReportMetric(q(recvLat, 0.99), "e2e-p99-ms")
	b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(n), "cpu-µs/msg")
	log := st.LogStats()
	b.ReportMetric(float64(log.GatherTimeouts-log0.GatherTimeouts), "wait-timeouts")
	reportLog(b, log, log0)
}
