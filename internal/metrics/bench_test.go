package metrics

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// The cost of metrics on the send path: the broker's send loop in the
// shape of W1 (4 links × window 64 of 1 KB messages, closed loop) and of
// W1's window 1 (one message per Send, where a per-call cost weighs
// most), each without and with Metrics as the broker's and the store's
// observer. The file store is the durable path W1 measures; the memory
// store leaves only the CPU the core spends, the worst case for a
// relative cost.
//
//	go test -run XXX -bench SendObserved -count 8 ./internal/metrics/ | tee new.txt
//	benchstat -col /metrics new.txt
func BenchmarkSendObserved(b *testing.B) {
	for _, st := range []string{"file", "mem"} {
		for _, shape := range []struct {
			name          string
			links, window int
		}{{"4x64", 4, 64}, {"16x1", 16, 1}} {
			for _, on := range []string{"off", "on"} {
				b.Run("store="+st+"/w1="+shape.name+"/metrics="+on, func(b *testing.B) {
					benchSend(b, st == "file", on == "on", shape.links, shape.window)
				})
			}
		}
	}
}

var payload1K = bytes.Repeat([]byte("x"), 1024)

func benchSend(b *testing.B, durable, observed bool, links, window int) {
	var m *Metrics
	var obs broker.Observer
	var sobs store.SyncObserver
	if observed {
		m = New()
		obs, sobs = m, m
	}
	var st store.Store
	if durable {
		fs, err := filestore.Open(filestore.Options{Dir: b.TempDir(), SyncObserver: sobs})
		if err != nil {
			b.Fatal(err)
		}
		st = fs
	} else {
		st = memstore.New()
	}
	br, err := broker.Open(broker.Options{Store: st, Clock: clock.Real{}, Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	defer br.Close()
	if m != nil {
		m.Watch(br, st)
	}
	if _, err := br.CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range links {
		wg.Go(func() {
			s := br.NewSender("q")
			defer s.Close()
			batch := make([]*message.Message, 0, window)
			for {
				batch = batch[:0]
				for range window {
					i := next.Add(1)
					if i > int64(b.N) {
						break
					}
					batch = append(batch, &message.Message{MessageID: strconv.FormatInt(i, 10), Body: payload1K})
				}
				if len(batch) == 0 {
					return
				}
				s.Pace(broker.PaceWindow, 0) // always promise, whatever the window
				if err := s.Send(ctx, batch); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/msg")
}

func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkObserverSent is the cost of one report on the send path alone:
// what Send adds per call when metrics are on.
func BenchmarkObserverSent(b *testing.B) {
	m := New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Sent("orders", 1, 150*time.Microsecond)
		}
	})
}
