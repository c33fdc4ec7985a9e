package broker

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
)

// BenchmarkPacedSendComplete is W3 in process: sends paced at a fixed
// rate (each on its own goroutine, timed from its scheduled start, so a
// late start counts), one peek-lock receiver completing each message. It
// reports the latency of Send and of the delivery (scheduled time to
// receipt), which with a durable store bound the end-to-end latency any
// client can see.
//
//	go test -run XXX -bench PacedSendComplete -benchtime 50000x ./internal/broker/
func BenchmarkPacedSendComplete(b *testing.B) {
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
	log0 := st.LogStats()
	interval := time.Second / rate
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		sched[i] = at.UnixNano()
		wg.Go(func() {
			if err := br.Send(ctx, "q", []*message.Message{msg1K(i)}); err != nil {
				b.Error(err)
			}
			sendLat[i] = time.Since(at)
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
	reportLog(b, st.LogStats(), log0)
}
