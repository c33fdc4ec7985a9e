package filestore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store"
)

// BenchmarkCommit1KB measures durable 1 KB sends: every Commit is one
// OpAppend with sync=true, from P concurrent committers (P queues).
//
//	go test -run '^$' -bench 'Commit1KB' -benchtime 3s ./internal/store/filestore/
func BenchmarkCommit1KB(b *testing.B) {
	for _, p := range []int{1, 64, 256} {
		for _, nosync := range []bool{false, true} {
			if nosync && p != 256 {
				continue
			}
			name := fmt.Sprintf("committers=%d", p)
			if nosync {
				name += "/nosync"
			}
			b.Run(name, func(b *testing.B) { benchCommit(b, p, nosync) })
		}
	}
}

func benchCommit(b *testing.B, p int, nosync bool) {
	s, err := Open(Options{Dir: b.TempDir(), NoSync: nosync})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := range p {
		if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: uint64(i + 1), Name: "q"}}}, true); err != nil {
			b.Fatal(err)
		}
	}
	data := make([]byte, 1024)
	meta := make([]byte, 48)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.SetBytes(1024)
	b.ResetTimer()
	for i := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var batch store.Batch
			for seq := uint64(1); next.Add(1) <= int64(b.N); seq++ {
				batch.Reset()
				batch.Add(store.Op{Kind: store.OpAppend, EntityID: uint64(i + 1), Seq: seq, Meta: meta, Data: data})
				if err := s.Commit(&batch, true); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N)/float64(s.nGroups.Load()), "msgs/write")
	if n := s.nSyncs.Load(); n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "msgs/fsync")
	}
}

// recoverN is the backlog BenchmarkRecover restarts with; set
// BUSBAR_RECOVER_N=1000000 for the 1M figure.
func recoverN() int {
	if v, err := strconv.Atoi(os.Getenv("BUSBAR_RECOVER_N")); err == nil && v > 0 {
		return v
	}
	return 100_000
}

// fillMain writes the backlog for BenchmarkRecover. The benchmark runs it
// in a child process (see TestMain), so that the benchmark process's
// memory shows only what recovery uses.
func fillMain(dir string) error {
	n, _ := strconv.Atoi(os.Getenv("BUSBAR_FILL_N"))
	opts := Options{Dir: dir}
	if os.Getenv("BUSBAR_FILL_CRASH") != "" {
		opts.BackgroundInterval = -1 // no checkpoint at all
	}
	s, err := Open(opts)
	if err != nil {
		return err
	}
	const queues = 100
	for q := range queues {
		if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: uint64(q + 1), Name: fmt.Sprint("queue-", q)}}}, true); err != nil {
			return err
		}
	}
	data := make([]byte, 1024)
	meta := make([]byte, 64) // state, delivery count, times, ids
	var b store.Batch
	for i := range n {
		copy(data, fmt.Sprint(i))
		b.Add(store.Op{Kind: store.OpAppend, EntityID: uint64(i%queues + 1), Seq: uint64(i/queues + 1), Meta: meta, Data: data})
		if b.Len() == 100 || i == n-1 {
			if err := s.Commit(&b, i == n-1); err != nil {
				return err
			}
			b.Reset()
		}
	}
	if os.Getenv("BUSBAR_FILL_CRASH") != "" {
		// Leave without a checkpoint, as a crash would: recovery replays
		// the whole log.
		s.mu.Lock()
		s.mu.applied = s.mu.ckptLSN
		s.mu.Unlock()
	}
	return s.Close()
}

// BenchmarkRecover restarts a store holding a backlog of 1 KB messages (64 B
// Meta, 100 queues) and visits every message, as the broker does on
// start. "checkpoint" is a restart after Close; "log" replays the whole
// log (a crash before any checkpoint).
//
//	BUSBAR_RECOVER_N=1000000 go test -run '^$' -bench Recover -benchtime 3x ./internal/store/filestore/
func BenchmarkRecover(b *testing.B) {
	n := recoverN()
	for _, mode := range []string{"checkpoint", "log"} {
		b.Run(fmt.Sprintf("n=%d/%s", n, mode), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "db")
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "BUSBAR_FILL_DIR="+dir, "BUSBAR_FILL_N="+strconv.Itoa(n))
			if mode == "log" {
				cmd.Env = append(cmd.Env, "BUSBAR_FILL_CRASH=1")
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("fill: %v\n%s", err, out)
			}
			var heap, rss float64
			b.ResetTimer()
			for range b.N {
				runtime.GC()
				s, err := Open(Options{Dir: dir, BackgroundInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				count := 0
				err = s.Recover(store.Visitor{Message: func(store.Message) error { count++; return nil }})
				if err != nil || count != n {
					b.Fatalf("recovered %d messages, %v", count, err)
				}
				b.StopTimer()
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap = float64(ms.HeapInuse) / (1 << 20)
				rss = vmRSS()
				// Close without a checkpoint, so every iteration replays the same.
				s.mu.Lock()
				s.mu.ckptLSN = s.mu.applied
				s.mu.Unlock()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/recover")
			b.ReportMetric(heap, "heapMB")
			b.ReportMetric(rss, "rssMB")
		})
	}
}

func vmRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

var _ = time.Second

// BenchmarkProbe is the bare group-commit loop (append 1 KB records, one write + fdatasync per drained
// group, no encoding, no index): the ceiling to compare
// BenchmarkCommit1KB with under the same machine load.
func BenchmarkProbe(b *testing.B) {
	for _, p := range []int{64, 256} {
		b.Run(fmt.Sprintf("committers=%d", p), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "probe"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			type req struct {
				rec  []byte
				done chan struct{}
			}
			in := make(chan req, 65536)
			flusherDone := make(chan struct{})
			go func() {
				defer close(flusherDone)
				var buf []byte
				var waiters []chan struct{}
				for r := range in {
					buf = append(buf[:0], r.rec...)
					waiters = append(waiters[:0], r.done)
					for more := true; more; {
						select {
						case r2, ok := <-in:
							if !ok {
								more = false
								break
							}
							buf = append(buf, r2.rec...)
							waiters = append(waiters, r2.done)
						default:
							more = false
						}
					}
					f.Write(buf)
					syscall.Fdatasync(int(f.Fd()))
					for _, w := range waiters {
						close(w)
					}
				}
			}()
			rec := make([]byte, 1024)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.SetBytes(1024)
			b.ResetTimer()
			for range p {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						d := make(chan struct{})
						in <- req{rec, d}
						<-d
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(in)
			<-flusherDone
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkPacedCommit is the store's part of W3: durable 1 KB appends
// paced at a fixed rate, each from its own goroutine and timed from its
// scheduled start, each followed (as a receiver's complete follows its
// delivery) by a synced removal of the message. The append latency is the
// floor under the end-to-end latency a durable broker on this disk can
// show at that rate, before the network, the client or the broker's own
// work add to it.
//
//	go test -run '^$' -bench PacedCommit/rate=5000 -benchtime 50000x ./internal/store/filestore/
func BenchmarkPacedCommit(b *testing.B) {
	for _, rate := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1, Name: "q"}}}, true); err != nil {
				b.Fatal(err)
			}
			data, meta := make([]byte, 1024), make([]byte, 48)
			lat := make([]time.Duration, b.N)
			interval := time.Second / time.Duration(rate)
			log0, cpu0 := s.LogStats(), cpuTime()
			start := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := range b.N {
				at := start.Add(time.Duration(i) * interval)
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				}
				wg.Go(func() {
					seq := uint64(i + 1)
					if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpAppend, EntityID: 1, Seq: seq, Meta: meta, Data: data}}}, true); err != nil {
						b.Error(err)
					}
					lat[i] = time.Since(at)
					if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpRemove, EntityID: 1, Seq: seq}}}, true); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) / 1e3 }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(0.999), "p99.9-ms")
			b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/msg")
			st := s.LogStats()
			b.ReportMetric(float64(st.Recycled-log0.Recycled), "recycled")
			if n := st.Syncs - log0.Syncs; n > 0 {
				b.ReportMetric(float64(2*b.N)/float64(n), "commits/fsync")
				b.ReportMetric(float64((st.SyncTime-log0.SyncTime).Microseconds())/float64(n), "µs/fsync")
			}
		})
	}
}

// BenchmarkDrain fills a backlog of 1 KB messages (100 queues), drains it
// completely (in batches of 100 removals), then waits for the background
// goroutine (default options) to bring the disk under 10 % of its peak,
// and reports how long that took after the drain.
//
//	BUSBAR_RECOVER_N=1000000 go test -run '^$' -bench Drain -benchtime 1x ./internal/store/filestore/
func BenchmarkDrain(b *testing.B) {
	n := recoverN()
	for range b.N {
		s, err := Open(Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		const queues = 100
		var batch store.Batch
		for q := range queues {
			batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: uint64(q + 1)})
		}
		data, meta := make([]byte, 1024), make([]byte, 64)
		commit := func(sync bool) {
			if err := s.Commit(&batch, sync); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
		commit(true)
		for i := range n {
			batch.Add(store.Op{Kind: store.OpAppend, EntityID: uint64(i%queues + 1), Seq: uint64(i/queues + 1), Meta: meta, Data: data})
			if batch.Len() == 100 {
				commit(false)
			}
		}
		commit(true)
		peak := s.Stats().DiskBytes
		t0 := time.Now()
		for i := range n {
			batch.Add(store.Op{Kind: store.OpRemove, EntityID: uint64(i%queues + 1), Seq: uint64(i/queues + 1)})
			if batch.Len() == 100 {
				commit(false)
			}
		}
		commit(true)
		drained := time.Since(t0)
		for s.Stats().DiskBytes >= peak/10 {
			if time.Since(t0) > 2*time.Minute {
				b.Fatalf("disk still %d bytes, peak %d", s.Stats().DiskBytes, peak)
			}
			time.Sleep(50 * time.Millisecond)
		}
		b.ReportMetric(float64(peak)/(1<<20), "peakMB")
		b.ReportMetric(float64(s.Stats().DiskBytes)/(1<<20), "afterMB")
		b.ReportMetric(drained.Seconds(), "drain-s")
		b.ReportMetric(time.Since(t0).Seconds()-drained.Seconds(), "reclaim-after-drain-s")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's user + system CPU time in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
