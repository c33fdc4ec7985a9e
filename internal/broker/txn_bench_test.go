package broker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

// BenchmarkTxnReceiveCompleteSend is the receive-process-send step of a
// handler (NServiceBus's SendsAtomicWithReceive): receive a message of
// "in", complete it and send one 1 KB message to "out". mode=txn does
// the complete and the send as one transaction (CommitTxn: one synced
// store commit); mode=plain as a Send then a Complete (two commits, not
// atomic). workers handlers run at once, on the file store.
func BenchmarkTxnReceiveCompleteSend(b *testing.B) {
	for _, workers := range []int{1, 64} {
		for _, mode := range []string{"plain", "txn"} {
			b.Run(fmt.Sprintf("workers=%d/mode=%s", workers, mode), func(b *testing.B) {
				br, _ := openQueueBench(b)
				if _, err := br.CreateQueue("out", DefaultQueueProperties()); err != nil {
					b.Fatal(err)
				}
				batch := make([]*message.Message, 0, 100)
				for i := range b.N {
					batch = append(batch, msg1K(i))
					if len(batch) == cap(batch) || i == b.N-1 {
						if err := br.Send(ctx, "q", batch); err != nil {
							b.Fatal(err)
						}
						batch = batch[:0]
					}
				}
				var done atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for range workers {
					wg.Go(func() {
						r, err := br.OpenReceiver("q", PeekLock)
						if err != nil {
							b.Error(err)
							return
						}
						defer r.Close()
						out := []*message.Message{nil}
						for done.Load() < int64(b.N) {
							ds, err := awaitBatch(r, 1)
							if err != nil {
								b.Error(err)
								return
							}
							for _, d := range ds {
								out[0] = msg1K(int(d.SequenceNumber))
								if mode == "txn" {
									err = br.CommitTxn(ctx, &Txn{
										Settlements: []TxnSettlement{{Kind: TxnComplete, Path: "q", Token: d.LockToken}},
										Sends:       txnTo("out", out...),
									})
								} else if err = br.Send(ctx, "out", out); err == nil {
									err = br.Complete(ctx, "q", d.LockToken)
								}
								if err != nil {
									b.Error(err)
									return
								}
								done.Add(1)
							}
						}
					})
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
			})
		}
	}
}
