package broker

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// BenchmarkHistoryCost measures what message histories cost the hot path:
// send + receive (peek-lock) + complete of one 1 KB message, with
// histories off, sampled (1 in 100) and on, on the memory store (no
// fsync: the hooks' share is the largest there), by 1 worker and by 4
// workers on 4 queues (the log's one mutex shared). It reports CPU µs
// per message (getrusage, the whole process) beside ns/op; run it with
// -benchmem for allocations.
func BenchmarkHistoryCost(b *testing.B) {
	for _, mode := range []history.Mode{history.Off, history.Sampled, history.On} {
		for _, workers := range []int{1, 4} {
			b.Run(fmt.Sprintf("mode=%s/workers=%d", mode, workers), func(b *testing.B) {
				br, err := Open(Options{Store: memstore.New(), History: history.New(history.Config{Mode: mode})})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { br.Close() })
				type worker struct {
					s *Sender
					r *Receiver
					q string
				}
				ws := make([]worker, workers)
				for i := range ws {
					q := fmt.Sprintf("q%d", i)
					if _, err := br.CreateQueue(q, DefaultQueueProperties()); err != nil {
						b.Fatal(err)
					}
					ws[i] = worker{s: br.NewSender(q), q: q}
					ws[i].s.SetHolder(fmt.Sprintf("link sender-%d on connection bench", i))
					if ws[i].r, err = br.OpenReceiver(q, PeekLock); err != nil {
						b.Fatal(err)
					}
					ws[i].r.SetHolder(fmt.Sprintf("link receiver-%d on connection bench", i))
				}
				var wg sync.WaitGroup
				b.ReportAllocs()
				b.ResetTimer()
				start, cpu0 := time.Now(), cpuTime()
				for i := range ws {
					w := ws[i]
					n := b.N / workers
					wg.Go(func() {
						batch := []*message.Message{nil}
						for j := range n {
							batch[0] = msg1K(j)
							if err := w.s.Send(ctx, batch); err != nil {
								b.Error(err)
								return
							}
							ds, err := w.r.TryReceive(1)
							if err != nil || len(ds) != 1 {
								b.Errorf("receive: %v %v", ds, err)
								return
							}
							if err := br.Complete(ctx, w.q, ds[0].LockToken); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				el, cpu := time.Since(start), cpuTime()-cpu0
				b.StopTimer()
				b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/msg")
				b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
				if h := br.History(); h != nil {
					if st := h.Stats(); st.Bytes > h.Config().MaxBytes {
						b.Fatalf("history over its bound: %+v", st)
					}
				}
			})
		}
	}
}
