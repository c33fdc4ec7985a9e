package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Limits are the physical ceilings of this machine, re-measured at the
// start of a run (docs/benchmarks.md): single-writer 1 KB append +
// fdatasync, group commit of 1 KB records with 64 and 256 waiters, and
// sequential 1 MB writes + fdatasync.
type Limits struct {
	FsyncOps      float64
	FsyncP50      time.Duration
	FsyncP99      time.Duration // the tail a durable acknowledgement cannot beat
	FsyncP999     time.Duration
	FsyncCPU      time.Duration // CPU time (user + system) per append+fdatasync
	Group64       float64
	Group256      float64
	SeqMBs        float64
	Dur           time.Duration
	Err           error
	measuredAtDir string
}

func (l Limits) String() string {
	if l.Err != nil {
		return "not measured: " + l.Err.Error()
	}
	return fmt.Sprintf("1 KB append+fdatasync, 1 writer: %s ops/s (p50 %s p99 %s p99.9 %s ms, %.0f µs CPU each); group commit 1 KB: %s msg/s with 64 waiters, %s with 256; sequential 1 MB + fdatasync: %.0f MB/s (each probe %s, in %s)",
		human(l.FsyncOps), ms(l.FsyncP50), ms(l.FsyncP99), ms(l.FsyncP999), float64(l.FsyncCPU)/1e3, human(l.Group64), human(l.Group256), l.SeqMBs, l.Dur, l.measuredAtDir)
}

// MeasureLimits runs the probes in dir for d each.
func MeasureLimits(dir string, d time.Duration) (l Limits) {
	l.Dur, l.measuredAtDir = d, dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		l.Err = err
		return
	}
	path := filepath.Join(dir, "probe.dat")
	defer os.Remove(path)
	// Single writer.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		l.Err = err
		return
	}
	buf := make([]byte, 1024)
	var lat []time.Duration
	start, cpu0 := time.Now(), processCPU()
	for time.Since(start) < d {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			l.Err = err
			return
		}
		_ = syscall.Fdatasync(int(f.Fd()))
		lat = append(lat, time.Since(t0))
	}
	l.FsyncOps = float64(len(lat)) / time.Since(start).Seconds()
	l.FsyncCPU = (processCPU() - cpu0) / time.Duration(len(lat))
	slices.Sort(lat)
	l.FsyncP50 = lat[len(lat)/2]
	l.FsyncP99 = lat[len(lat)*99/100]
	l.FsyncP999 = lat[len(lat)*999/1000]
	f.Close()
	l.Group64 = groupCommit(path, 64, d)
	l.Group256 = groupCommit(path, 256, d)
	// Sequential 1 MB blocks.
	f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		l.Err = err
		return
	}
	big := make([]byte, 1<<20)
	var bytes int64
	start = time.Now()
	for time.Since(start) < d {
		n, _ := f.Write(big)
		_ = syscall.Fdatasync(int(f.Fd()))
		bytes += int64(n)
	}
	l.SeqMBs = float64(bytes) / 1e6 / time.Since(start).Seconds()
	f.Close()
	return
}

// groupCommit is the group-commit ceiling: p producers each append a 1 KB
// record and wait; one flusher writes everything pending and fdatasyncs.
func groupCommit(path string, p int, d time.Duration) float64 {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return -1
	}
	defer f.Close()
	type req struct{ done chan struct{} }
	in := make(chan req, 65536)
	rec := make([]byte, 1024)
	stop := make(chan struct{})
	go func() {
		var buf []byte
		var waiters []chan struct{}
		for {
			var r req
			select {
			case r = <-in:
			case <-stop:
				return
			}
			buf = append(buf[:0], rec...)
			waiters = append(waiters[:0], r.done)
			for more := true; more; {
				select {
				case r2 := <-in:
					buf = append(buf, rec...)
					waiters = append(waiters, r2.done)
				default:
					more = false
				}
			}
			_, _ = f.Write(buf)
			_ = syscall.Fdatasync(int(f.Fd()))
			for _, w := range waiters {
				close(w)
			}
		}
	}()
	var total int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < p; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for time.Since(start) < d {
				r := req{done: make(chan struct{})}
				in <- r
				<-r.done
				n++
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(stop)
	return float64(total) / el.Seconds()
}

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
