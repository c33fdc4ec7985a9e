package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// meter samples one broker process while a cell runs: CPU time, peak
// RSS, and (optionally) the disk used by its data directory.
type meter struct {
	t       *Target
	pid     int
	dir     string
	cpu0    time.Duration
	sys0    time.Duration
	self0   time.Duration
	rssMax  atomic.Int64
	diskMax atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
	// cpus is the broker's Cpus_allowed_list when pinned (-pin).
	cpus string
	// all0, steal0: the machine's CPU ticks at the last mark (machineCPU);
	// steal0 < 0 when unknown.
	all0, steal0 int64
	// db0 is the database's reading at the last mark (t.DB).
	db0 pgReading
	// each0 is each process's CPU at the last mark when the broker is a
	// multiProcess; split is the note record makes of it.
	each0 []time.Duration
	split string
	// st0 is the broker's store metrics at the last mark (t.StoreMetrics).
	st0 storeStats
}

// pinNote says where the broker and the load generator ran when pinned,
// and, for a broker of several processes, each one's CPU per message
// (record computes it); "" when neither.
func (m *meter) pinNote() string {
	if brokerCPUs == "" {
		return m.split
	}
	return fmt.Sprintf("; pinned: broker Cpus_allowed_list %s, load generator %s", m.cpus, cpusAllowed(os.Getpid())) + m.split
}

func startMeter(t *Target, disk bool) *meter {
	m := &meter{t: t, pid: t.pid(), stop: make(chan struct{})}
	if brokerCPUs != "" && m.pid != 0 {
		m.cpus = cpusAllowed(m.pid)
	}
	if disk {
		m.dir = t.dataDir()
	}
	m.mark()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ; i++ {
			pid := m.t.pid()
			if pid != 0 {
				if r := procRSS(pid); r > m.rssMax.Load() {
					m.rssMax.Store(r)
				}
			}
			if m.dir != "" && i%5 == 0 {
				if d := diskUsage(m.dir); d > m.diskMax.Load() {
					m.diskMax.Store(d)
				}
			}
			select {
			case <-m.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return m
}

func (m *meter) cpuNow() time.Duration {
	d, _ := m.cpuSplit()
	return d
}

// cpuSplit returns total and system CPU time, -1 when unknown; for a
// broker of several processes (multiProcess), their sums.
func (m *meter) cpuSplit() (total, sys time.Duration) {
	pid := m.t.pid()
	if pid == 0 {
		return -1, -1
	}
	pids := []int{pid}
	if mp, ok := m.t.Proc().(multiProcess); ok {
		pids = mp.PIDs()
	}
	for _, pid := range pids {
		u, s, err := procCPUSplit(pid)
		if err != nil {
			return -1, -1
		}
		total, sys = total+u+s, sys+s
	}
	return total, sys
}

// each returns the CPU time of each process of a multiProcess broker
// (nil for one process, or when one is unknown).
func (m *meter) each() []time.Duration {
	if m.t.Proc == nil {
		return nil
	}
	mp, ok := m.t.Proc().(multiProcess)
	if !ok {
		return nil
	}
	var out []time.Duration
	for _, pid := range mp.PIDs() {
		d, err := procCPU(pid)
		if err != nil {
			return nil
		}
		out = append(out, d)
	}
	return out
}

// splitNote says each process's CPU µs per message since the last mark,
// e.g. "; CPU µs/msg: owner 21.3, other node 9.8"; "" for one process.
func (m *meter) splitNote(msgs int64) string {
	now := m.each()
	if m.each0 == nil || len(now) != len(m.each0) || msgs <= 0 {
		return ""
	}
	roles := m.t.Proc().(multiProcess).Roles()
	var b strings.Builder
	b.WriteString("; CPU µs/msg:")
	for i := range now {
		role := fmt.Sprint("process ", i+1)
		if i < len(roles) {
			role = roles[i]
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s %.1f", role, float64(now[i]-m.each0[i])/1e3/float64(msgs))
	}
	return b.String()
}

// mark restarts the CPU count (at the end of the warm-up).
func (m *meter) mark() {
	m.cpu0, m.sys0 = m.cpuSplit()
	m.self0 = selfCPU()
	m.db0 = m.t.DB.read()
	m.each0 = m.each()
	if m.t.StoreMetrics != nil {
		m.st0 = scrapeStore(m.t.StoreMetrics())
	}
	m.all0, m.steal0 = -1, -1
	if all, steal, ok := machineCPU(); ok {
		m.all0, m.steal0 = all, steal
	}
}

// stealPct returns the share of the machine's CPU time since the last
// mark that the hypervisor took (steal), -1 when unknown (stealShare).
func (m *meter) stealPct() float64 {
	all, steal, ok := machineCPU()
	if !ok {
		return -1
	}
	return stealShare(m.all0, m.steal0, all, steal)
}

// stealShare is the percentage of the machine's CPU time between two
// /proc/stat readings (all0, steal0 → all, steal) that was steal; -1 when
// the first is unknown (negative) or later than the second. An interval
// shorter than one clock tick (10 ms) shows no machine time passing, and
// no steal: 0.
func stealShare(all0, steal0, all, steal int64) float64 {
	switch {
	case all0 < 0 || steal0 < 0 || all < all0:
		return -1
	case all == all0:
		return 0
	}
	return 100 * float64(steal-steal0) / float64(all-all0)
}

func selfCPU() time.Duration {
	d, err := procCPU(os.Getpid())
	if err != nil {
		return -1
	}
	return d
}

// clientPerMsg returns the load generator's own CPU µs per message since
// the last mark.
func (m *meter) clientPerMsg(msgs int64) float64 {
	c := selfCPU()
	if c < 0 || m.self0 < 0 || msgs <= 0 {
		return -1
	}
	return float64(c-m.self0) / 1e3 / float64(msgs)
}

// sysPct returns the share of the broker's CPU since the last mark spent
// in the kernel (fsync, network), -1 when unknown.
func (m *meter) sysPct() float64 {
	c, s := m.cpuSplit()
	if c < 0 || m.cpu0 < 0 || c-m.cpu0 <= 0 || m.t.pid() != m.pid {
		return -1
	}
	return 100 * float64(s-m.sys0) / float64(c-m.cpu0)
}

// record sets res's broker CPU per message, broker system share,
// client CPU per message for msgs messages, the machine's steal and,
// with a database meter, the database's CPU and WAL per message since
// the last mark.
func (m *meter) record(res *Result, msgs int64) {
	res.CPUus = m.cpuPerMsg(msgs)
	res.SysPct = m.sysPct()
	res.ClientUs = m.clientPerMsg(msgs)
	res.StealPct = m.stealPct()
	if m.t.DB != nil {
		res.DBus, res.WALBytes = perMsg(m.db0, m.t.DB.read(), msgs)
	}
	m.split = m.splitNote(msgs)
	if m.t.StoreMetrics != nil {
		m.split += storeNote(m.st0, scrapeStore(m.t.StoreMetrics()), msgs)
	}
}

// finish ends the meter's cell: it records res's CPU figures (record),
// stops sampling, and sets res's peak broker RSS and the load average.
func (m *meter) finish(res *Result, msgs int64) {
	m.record(res, msgs)
	m.close()
	res.RSSMB = m.rssMB()
	res.Load = loadAvg()
}

// cpuPerMsg returns broker CPU µs per message since the last mark, -1
// when unknown (the process changed, e.g. after a restart).
func (m *meter) cpuPerMsg(msgs int64) float64 {
	c := m.cpuNow()
	if c < 0 || m.cpu0 < 0 || msgs <= 0 || m.t.pid() != m.pid {
		return -1
	}
	return float64(c-m.cpu0) / 1e3 / float64(msgs)
}

func (m *meter) rssMB() float64 {
	if m.rssMax.Load() == 0 {
		return -1
	}
	return float64(m.rssMax.Load()) / 1e6
}

func (m *meter) close() {
	close(m.stop)
	m.wg.Wait()
}

// bodyFill is a body's filler, a..z repeated, in 4108 bytes (a multiple
// of 26) that are copied rather than computed byte by byte: the load
// generator shares the two cores with the broker it measures.
var bodyFill = func() (f [26 * 158]byte) {
	for i := range f {
		f[i] = byte('a' + i%26)
	}
	return f
}()

// body returns a payload of size bytes; the first 16 bytes carry a
// timestamp and a sequence number when there is room.
func body(size int, sched int64, seq uint64) []byte {
	b := make([]byte, size)
	for n := 0; n < size; {
		n += copy(b[n:], bodyFill[:])
	}
	if size >= 16 {
		binary.BigEndian.PutUint64(b[0:8], uint64(sched))
		binary.BigEndian.PutUint64(b[8:16], seq)
	}
	return b
}

// window counts operations and takes the measurement window: from the
// end of the warm-up to the last operation.
type window struct {
	warmEnd time.Time
	n       atomic.Int64 // operations completed
	nWarm   atomic.Int64 // operations completed at the end of the warm-up
	warmed  atomic.Bool
	last    atomic.Int64 // unix nanos of the last completion
	m       *meter
	once    sync.Once
	prog    *progress
}

func newWindow(warm time.Duration, m *meter, p *progress) *window {
	w := &window{warmEnd: time.Now().Add(warm), m: m, prog: p}
	if warm <= 0 {
		w.warmed.Store(true)
		if m != nil {
			m.mark()
		}
	}
	return w
}

// done records one completion and reports whether it falls in the
// measurement window.
func (w *window) done() bool {
	now := time.Now()
	if !w.warmed.Load() && !now.Before(w.warmEnd) {
		w.once.Do(func() {
			w.nWarm.Store(w.n.Load())
			if w.m != nil {
				w.m.mark()
			}
			w.warmEnd = now
			w.warmed.Store(true)
		})
	}
	w.n.Add(1)
	w.last.Store(now.UnixNano())
	if w.prog != nil {
		w.prog.add(1)
	}
	return w.warmed.Load()
}

// result returns messages and seconds in the measurement window (the
// whole run when it ended before the warm-up did).
func (w *window) result(start time.Time) (int64, float64) {
	end := time.Unix(0, w.last.Load())
	if !w.warmed.Load() {
		return w.n.Load(), end.Sub(start).Seconds()
	}
	return w.n.Load() - w.nWarm.Load(), end.Sub(w.warmEnd).Seconds()
}

// sendLoad sends up to maxMsgs messages (or for maxDur) to addr over
// conns connections with win goroutines each, each waiting for the
// broker's confirmation. Latency samples after the warm-up go to lat.
func sendLoad(ctx context.Context, c Client, addr string, conns, win, size int, maxMsgs int64, maxDur time.Duration, w *window, lat *recorder) (sent int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, maxDur+30*time.Second)
	defer cancel()
	deadline := time.Now().Add(maxDur)
	// Closing the connection ends its links; link-by-link detach is slow
	// on RabbitMQ 3.10's AMQP 1.0 plugin and is not what is measured.
	var cs []Conn
	var ss []Sender
	defer closeConns(&cs)
	for i := 0; i < conns; i++ {
		k, err := c.Dial(ctx)
		if err != nil {
			return 0, fmt.Errorf("dial: %w", err)
		}
		cs = append(cs, k)
		s, err := k.NewSender(ctx, addr)
		if err != nil {
			return 0, fmt.Errorf("sender: %w", err)
		}
		ss = append(ss, s)
	}
	var next, okN atomic.Int64
	var firstErr error
	var emu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range ss {
		for j := 0; j < win; j++ {
			wg.Add(1)
			go func(s Sender) {
				defer wg.Done()
				for {
					i := next.Add(1)
					t0 := time.Now()
					if i > maxMsgs || t0.After(deadline) || ctx.Err() != nil {
						return
					}
					b := body(size, t0.UnixNano(), uint64(i))
					if err := s.Send(ctx, b); err != nil {
						emu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						emu.Unlock()
						cancel()
						return
					}
					okN.Add(1)
					if w.done() && lat != nil {
						lat.add(time.Since(t0))
					}
				}
			}(s)
		}
	}
	wg.Wait()
	return okN.Load(), firstErr
}

// recvLoad receives and settles up to total messages (or for maxDur)
// from each address with nrecv receivers per address, each on its own
// connection with the given credit and one settling goroutine per
// credit (at most 256). onMsg sees each body before it is settled;
// settle latencies after the warm-up go to lat. ready is closed once
// every receiver is attached.
func recvLoad(ctx context.Context, c Client, addrs []string, nrecv, credit int, total int64, maxDur time.Duration, w *window, lat *recorder, onMsg func([]byte), ready chan<- struct{}) (got int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, maxDur)
	defer cancel()
	deadline, _ := ctx.Deadline()
	// timeUp tells the time bound from a failure: go-amqp returns
	// context.DeadlineExceeded on its own once the deadline has passed,
	// possibly before ctx's timer has fired (ctx.Err() still nil).
	timeUp := func(err error) bool {
		return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(deadline)
	}
	var cs []Conn
	var rs []Receiver
	defer closeConns(&cs)
	for _, a := range addrs {
		for i := 0; i < nrecv; i++ {
			k, err := c.Dial(ctx)
			if err != nil {
				return 0, fmt.Errorf("dial: %w", err)
			}
			cs = append(cs, k)
			r, err := k.NewReceiver(ctx, a, credit)
			if err != nil {
				return 0, fmt.Errorf("receiver on %s: %w", a, err)
			}
			rs = append(rs, r)
		}
	}
	if ready != nil {
		close(ready)
	}
	workers := credit
	if workers > 256 {
		workers = 256
	}
	var n atomic.Int64
	var firstErr error
	var emu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range rs {
		for j := 0; j < workers; j++ {
			wg.Add(1)
			go func(r Receiver) {
				defer wg.Done()
				for ctx.Err() == nil {
					d, err := r.Receive(ctx)
					if err != nil {
						if !timeUp(err) {
							emu.Lock()
							if firstErr == nil {
								firstErr = err
							}
							emu.Unlock()
							cancel()
						}
						return
					}
					if onMsg != nil {
						onMsg(d.Body())
					}
					t0 := time.Now()
					if err := d.Settle(ctx); err != nil {
						if !timeUp(err) {
							emu.Lock()
							if firstErr == nil {
								firstErr = err
							}
							emu.Unlock()
							cancel()
						}
						return
					}
					if w.done() && lat != nil {
						lat.add(time.Since(t0))
					}
					if n.Add(1) >= total {
						cancel()
						return
					}
				}
			}(r)
		}
	}
	wg.Wait()
	got = n.Load()
	if firstErr == nil && got < total && !errors.Is(ctx.Err(), context.Canceled) {
		// Stopped by the time bound: not an error, the count says it.
		return got, nil
	}
	return got, firstErr
}

// closeConns closes connections in parallel (bounded by 10 s).
func closeConns(p *[]Conn) {
	var wg sync.WaitGroup
	for _, k := range *p {
		wg.Add(1)
		go func(k Conn) { defer wg.Done(); _ = k.Close() }(k)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}
