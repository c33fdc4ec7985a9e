package broker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// Topic benchmarks.
//
//	go test -run XXX -bench 'TopicFanout|SendDurable/producers=256' -benchtime 200000x ./internal/broker/
//	go test -run XXX -bench Routing ./internal/broker/

// BenchmarkTopicFanout: ingress of 1 KB messages into a topic with 5
// subscriptions with $Default (TrueFilter), durable filestore: 256
// producers sending one message per Send (compare with
// BenchmarkSendDurable/producers=256, one queue), and 4 producers sending
// 32 per Send, as a sender link's groups reach the broker (W5).
func BenchmarkTopicFanout(b *testing.B) {
	for _, c := range []struct{ subs, producers, batch int }{{5, 256, 1}, {5, 4, 32}, {1, 256, 1}} {
		b.Run(fmt.Sprintf("subs=%d/producers=%d/batch=%d", c.subs, c.producers, c.batch), func(b *testing.B) {
			benchTopicFanout(b, c.subs, c.producers, c.batch)
		})
	}
}

func benchTopicFanout(b *testing.B, subscriptions, producers, batchSize int) {
	br, st := openBench(b, benchDir(b))
	defer st.Close()
	defer br.Close()
	tp := DefaultTopicProperties()
	tp.MaxSizeInMegabytes = MaxMaxSizeInMegabytes // the quota counts every copy
	if _, err := br.CreateTopic("t", tp); err != nil {
		b.Fatal(err)
	}
	for i := range subscriptions {
		if _, err := br.CreateSubscription("t", fmt.Sprint("s", i), DefaultSubscriptionProperties(), nil); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0, log0 := time.Now(), cpuTime(), st.LogStats()
	for range producers {
		wg.Go(func() {
			batch := make([]*message.Message, 0, batchSize)
			for {
				first := next.Add(int64(batchSize)) - int64(batchSize) + 1
				if first > int64(b.N) {
					return
				}
				batch = batch[:0]
				for i := first; i < first+int64(batchSize) && i <= int64(b.N); i++ {
					batch = append(batch, msg1K(int(i)))
				}
				if err := br.Send(ctx, "t", batch); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	reportRun(b, start, cpu0, st, log0)
	info, _ := br.GetSubscription("t", "s0")
	if info.Counts.Active != int64(b.N) {
		b.Fatalf("s0 holds %d messages, want %d", info.Counts.Active, b.N)
	}
}

// BenchmarkRouting measures rule evaluation alone: one message routed
// through 20 subscriptions, each with one SQL filter (a typical mix of
// comparisons, LIKE and IN on user and system properties); one of them
// matches. Reported as µs per message per subscription.
func BenchmarkRouting(b *testing.B) {
	br, err := Open(Options{Store: memstore.New(), Clock: clock.NewFake(t0)})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if _, err := br.CreateTopic("t", DefaultTopicProperties()); err != nil {
		b.Fatal(err)
	}
	const subscriptions = 20
	for i := range subscriptions {
		expr := fmt.Sprintf("region = 'r%d' AND (priority > %d OR sys.Label LIKE 'urgent%%') AND kind IN ('a', 'b', 'c')", i, i)
		rule := &RuleDescription{Name: "r", Filter: SQLRuleFilter(expr, nil)}
		if _, err := br.CreateSubscription("t", fmt.Sprint("s", i), DefaultSubscriptionProperties(), rule); err != nil {
			b.Fatal(err)
		}
	}
	tp := br.mu.topics["t"]
	m := &message.Message{Subject: "urgent-1", Body: payload1K,
		ApplicationProperties: map[string]any{"region": "r7", "priority": int64(3), "kind": "b", "other": "x"}}
	data, err := message.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	f := fanOut{t: tp, subs: tp.subs.Load()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		f.copies = f.copies[:0]
		if refs := f.route(m, int64(len(data)), int64(i+1), t0.UnixNano(), false, 0); refs != 1 {
			b.Fatalf("%d subscriptions matched, want 1", refs)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N)/subscriptions, "µs/msg/sub")
}
