package broker

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// Benchmarks of the core with the durable filestore, 1 KB messages.
//
//	go test -run XXX -bench 'SendDurable|SendReceiveComplete' -benchtime 200000x ./internal/broker/
//	go test -run XXX -bench Restart1M -benchtime 3x -timeout 30m ./internal/broker/
//
// BUSBAR_BENCH_DIR chooses where the store lives (default: the test's
// temp dir, usually /tmp).

func benchDir(b *testing.B) string {
	if d := os.Getenv("BUSBAR_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "busbar-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

func openBench(b *testing.B, dir string) (*Broker, *filestore.Store) {
	b.Helper()
	st, err := filestore.Open(filestore.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	br, err := Open(Options{Store: st, Clock: clock.Real{}})
	if err != nil {
		b.Fatal(err)
	}
	return br, st
}

// openQueueBench opens a broker on a durable store in benchDir with a
// default queue "q"; both close when the benchmark ends.
func openQueueBench(b *testing.B) (*Broker, *filestore.Store) {
	b.Helper()
	br, st := openBench(b, benchDir(b))
	b.Cleanup(func() { st.Close() })
	b.Cleanup(func() { br.Close() }) // first
	if _, err := br.CreateQueue("q", DefaultQueueProperties()); err != nil {
		b.Fatal(err)
	}
	return br, st
}

var payload1K = bytes.Repeat([]byte("x"), 1024)

func msg1K(i int) *message.Message {
	return &message.Message{MessageID: strconv.Itoa(i), Body: payload1K}
}

func BenchmarkSendDurable(b *testing.B) {
	for _, producers := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			br, st := openQueueBench(b)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start, cpu0, log0 := time.Now(), cpuTime(), st.LogStats()
			for range producers {
				wg.Go(func() {
					batch := []*message.Message{nil}
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						batch[0] = msg1K(int(i))
						if err := br.Send(ctx, "q", batch); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			reportRun(b, start, cpu0, st, log0)
		})
	}
}

// BenchmarkSendLinks models busy AMQP sender links in process: each of 4
// goroutines sends 64 messages at a time in a closed loop (a link whose
// client keeps its window full, with no client delay), as a follower that
// promises its next Send (a paced broker.Sender) or as a plain caller. With
// followers the store waits for all four before an fdatasync; without, a
// round covers the links that came back before it started.
//
//	go test -run XXX -bench SendLinks -benchtime 200000x ./internal/broker/
func BenchmarkSendLinks(b *testing.B) {
	const links, window = 4, 64
	for _, follow := range []bool{false, true} {
		b.Run(fmt.Sprintf("links=%d/window=%d/follow=%v", links, window, follow), func(b *testing.B) {
			br, st := openQueueBench(b)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start, cpu0, log0 := time.Now(), cpuTime(), st.LogStats()
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
							batch = append(batch, msg1K(int(i)))
						}
						if len(batch) == 0 {
							return
						}
						var err error
						if follow {
							s.Pace(len(batch), 0) // a full window always promises
							err = s.Send(ctx, batch)
						} else {
							err = br.Send(ctx, "q", batch)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			reportRun(b, start, cpu0, st, log0)
		})
	}
}

// reportRun stops the timer and reports a closed-loop run since start:
// its throughput, CPU per message and group commits.
func reportRun(b *testing.B, start time.Time, cpu0 int64, st *filestore.Store, log0 filestore.LogStats) {
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/msg")
	reportLog(b, st.LogStats(), log0)
}

// reportLog reports the store's group commits over the run: messages per
// fdatasync and the mean fdatasync time. On a shared VM the disk's sync
// latency moves from one quarter of an hour to the next; with closed-loop
// producers throughput follows it (≈ messages per sync ÷ sync time), so
// these two say whether a slow run was the disk or the broker.
func reportLog(b *testing.B, now, before filestore.LogStats) {
	if n := now.Syncs - before.Syncs; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "msgs/fsync")
		b.ReportMetric(float64((now.SyncTime-before.SyncTime).Microseconds())/float64(n), "µs/fsync")
	}
}

// cpuTime is the process's user + system CPU time in ns: on a shared
// machine, CPU per message compares benchmarks more steadily than
// wall-clock throughput.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func BenchmarkSendReceiveComplete(b *testing.B) {
	for _, producers := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			br, _ := openQueueBench(b)
			consumers := producers
			var sent, done atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range producers {
				wg.Go(func() {
					batch := []*message.Message{nil}
					for {
						i := sent.Add(1)
						if i > int64(b.N) {
							return
						}
						batch[0] = msg1K(int(i))
						if err := br.Send(ctx, "q", batch); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			for range consumers {
				wg.Go(func() {
					r, err := br.OpenReceiver("q", PeekLock)
					if err != nil {
						b.Error(err)
						return
					}
					defer r.Close()
					for done.Load() < int64(b.N) {
						ds, err := awaitBatch(r, 4)
						if err != nil {
							b.Error(err)
							return
						}
						for _, d := range ds {
							if err := br.Complete(ctx, "q", d.LockToken); err != nil {
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

// awaitBatch receives up to max deliveries from r, waiting up to 10 ms for
// the first; it returns none (and no error) if none came by then.
func awaitBatch(r *Receiver, max int) ([]*Delivery, error) {
	ds, err := r.TryReceive(max)
	if err != nil || len(ds) > 0 {
		return ds, err
	}
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Millisecond):
	}
	return nil, nil
}

// BenchmarkRestart1M measures Open (store recovery + broker index) with
// 1,000,000 queued 1 KB messages, and the memory that takes.
func BenchmarkRestart1M(b *testing.B) {
	const n = 1_000_000
	const batchSize = 500
	dir := benchDir(b)
	br, st := openBench(b, dir)
	p := DefaultQueueProperties()
	p.MaxSizeInMegabytes = 4096
	if _, err := br.CreateQueue("q", p); err != nil {
		b.Fatal(err)
	}
	batch := make([]*message.Message, batchSize)
	for i := 0; i < n; i += batchSize {
		for j := range batch {
			batch[j] = &message.Message{Body: payload1K}
		}
		if err := br.Send(ctx, "q", batch); err != nil {
			b.Fatal(err)
		}
	}
	br.Close()
	st.Close()
	batch = nil
	b.ResetTimer()
	var openTime time.Duration
	for range b.N {
		b.StopTimer()
		runtime.GC()
		debug.FreeOSMemory()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		start := time.Now()
		br, st := openBench(b, dir)
		openTime += time.Since(start)
		b.StopTimer()
		info, err := br.GetQueue("q")
		if err != nil || info.Counts.Active != n {
			b.Fatalf("after restart: %+v %v", info.Counts, err)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heapMB")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heapB/msg")
		if rss := vmRSS(); rss > 0 {
			b.ReportMetric(float64(rss)/(1<<20), "rssMB")
		}
		br.Close()
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(openTime.Seconds()*1000/float64(b.N), "open-ms")
}

// vmRSS returns the process's resident set size in bytes (Linux), or 0.
func vmRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// BenchmarkIndexRecover1M isolates the broker's per-message recovery work
// (no store): decode Meta, append to the index.
func BenchmarkIndexRecover1M(b *testing.B) {
	r := rec{enq: time.Now().UnixNano(), size: 1100}
	meta := appendMeta(nil, SubQueueMain, &r)
	b.ReportAllocs()
	for b.Loop() {
		q := newEntity(nil, 1, "q", DefaultQueueProperties(), time.Now())
		rc := recovery{byID: map[uint64]*recovering{1: {q: q}}}
		for s := uint64(1); s <= 1_000_000; s++ {
			if err := rc.message(storeMsg(1, s, meta)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func storeMsg(entity, seq uint64, meta []byte) store.Message {
	return store.Message{EntityID: entity, Seq: seq, Meta: meta, Size: 1100}
}

// BenchmarkStoreAppendBaseline is the filestore alone doing what a send
// does (one synced 1 KB append per commit), for comparison with
// BenchmarkSendDurable.
func BenchmarkStoreAppendBaseline(b *testing.B) {
	for _, producers := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			st, err := filestore.Open(filestore.Options{Dir: benchDir(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			var batch0 store.Batch
			batch0.Add(store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q", Data: []byte("{}")})
			if err := st.Commit(&batch0, true); err != nil {
				b.Fatal(err)
			}
			meta := appendMeta(nil, SubQueueMain, &rec{enq: 1})
			data, _ := message.Marshal(msg1K(1))
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range producers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						batch := store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: uint64(i), Meta: meta, Data: data}}}
						if err := st.Commit(&batch, true); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkSendMemstore is BenchmarkSendDurable without a disk: the cost
// of the core itself.
func BenchmarkSendMemstore(b *testing.B) {
	br, err := Open(Options{Store: memstore.New(), Clock: clock.Real{}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if _, err := br.CreateQueue("q", DefaultQueueProperties()); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		batch := []*message.Message{nil}
		for pb.Next() {
			batch[0] = msg1K(int(next.Add(1)))
			if err := br.Send(ctx, "q", batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
