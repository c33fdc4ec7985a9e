package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Plan sizes the workloads. DefaultPlan is the full benchmark; SmokePlan
// runs each workload for about a second.
type Plan struct {
	Warm time.Duration // warm-up excluded from every figure

	W1Msgs    int64
	W1Dur     time.Duration
	W1Windows [][2]int // {connections, window per connection}
	W1Sizes   []int    // extra payload sizes, at W1SizeCell
	W1SizeWin [2]int
	// W1MaxBytes caps the bytes one W1 cell sends (for 64 KB payloads).
	W1MaxBytes int64

	W2Msgs  int64
	W2Dur   time.Duration
	W2Cells [][2]int // {receivers, credit}

	W3Rates []int
	W3Dur   time.Duration

	W4Msgs   int64
	W4Dur    time.Duration
	W4Settle time.Duration // wait after the drain before measuring disk again
	W4Kill   bool

	W5Subs    []int
	W5Drain   []bool   // with receivers draining the subscriptions, and/or without
	W5Senders [][2]int // {connections, window} of the sender, as W1's cells
	W5Msgs    int64
	W5Dur     time.Duration

	Size int // default payload
}

func DefaultPlan() Plan {
	return Plan{
		Warm:   2 * time.Second,
		W1Msgs: 300000, W1Dur: 10 * time.Second,
		W1Windows:  [][2]int{{1, 1}, {1, 16}, {1, 256}, {4, 64}},
		W1Sizes:    []int{128, 65536},
		W1SizeWin:  [2]int{1, 256},
		W1MaxBytes: 1 << 30,
		W2Msgs:     150000, W2Dur: 15 * time.Second,
		W2Cells: [][2]int{{1, 20}, {1, 200}, {4, 200}},
		W3Rates: []int{1000, 5000}, W3Dur: 15 * time.Second,
		W4Msgs: 1000000, W4Dur: 240 * time.Second, W4Settle: 60 * time.Second, W4Kill: true,
		W5Subs: []int{1, 5, 20}, W5Drain: []bool{false, true}, W5Msgs: 300000, W5Dur: 10 * time.Second,
		W5Senders: [][2]int{{1, 256}, {4, 64}},
		Size:      1024,
	}
}

func SmokePlan() Plan {
	return Plan{
		Warm:   0,
		W1Msgs: 300, W1Dur: time.Second,
		W1Windows:  [][2]int{{1, 1}, {1, 16}, {4, 8}},
		W1Sizes:    []int{128, 65536},
		W1SizeWin:  [2]int{1, 16},
		W1MaxBytes: 8 << 20,
		W2Msgs:     300, W2Dur: 2 * time.Second,
		W2Cells: [][2]int{{1, 20}, {2, 20}},
		W3Rates: []int{200}, W3Dur: time.Second,
		W4Msgs: 2000, W4Dur: 5 * time.Second, W4Settle: 200 * time.Millisecond, W4Kill: true,
		W5Subs: []int{1, 3}, W5Drain: []bool{false, true}, W5Msgs: 200, W5Dur: time.Second,
		W5Senders: [][2]int{{1, 256}, {2, 8}},
		Size:      1024,
	}
}

// Runner runs workloads and collects results.
type Runner struct {
	seq     int
	Plan    Plan
	Prog    *progress
	Results []Result
	// TargetSuffix is appended to every target name (" [pinned]").
	TargetSuffix string
	// OnResult is called for each finished row (e.g. to print it).
	OnResult func(Result)
	// Round is stamped on every result (Result.Round): 1..N while
	// busbar-bench -rounds N runs its interleaved rounds, else 0.
	Round int
}

// name returns a queue name not used before in this run (RabbitMQ 3.10
// fails to recover a quorum queue re-declared under a deleted one's name
// after a kill -9).
func (r *Runner) name(prefix string) string {
	r.seq++
	return fmt.Sprintf("%sx%d", prefix, r.seq)
}

func (r *Runner) add(res Result) {
	r.Results = append(r.Results, res)
	if r.OnResult != nil {
		r.OnResult(res)
	}
}

func (r *Runner) base(t *Target, wl, params, metric string, size int) Result {
	return Result{Workload: wl, Target: t.Client.Name() + r.TargetSuffix, Tier: t.Client.Tier(), Params: params, Size: size, Metric: metric, CPUus: -1, SysPct: -1, ClientUs: -1, RSSMB: -1, StealPct: -1, DBus: -1, WALBytes: -1, Round: r.Round}
}

// NA records a workload not run against t.
func (r *Runner) NA(t *Target, wl, why string) {
	res := r.base(t, wl, "", "", r.Plan.Size)
	res.NA = why
	res.Load = loadAvg()
	r.add(res)
}

func (r *Runner) fail(res Result, err error) {
	res.NA = "error"
	res.Note = err.Error()
	res.Load = loadAvg()
	r.add(res)
}

// w1Metric is what W1's rate measures.
const w1Metric = "send (confirmed)"

// w1Params names a W1 cell: conns connections, each with a window of
// win unconfirmed sends.
func w1Params(conns, win int) string {
	return fmt.Sprintf("%d conn × window %d", conns, win)
}

// W1 is durable send throughput.
func (r *Runner) W1(ctx context.Context, t *Target) {
	type cell struct{ conns, win, size int }
	var cells []cell
	for _, cw := range r.Plan.W1Windows {
		cells = append(cells, cell{cw[0], cw[1], r.Plan.Size})
	}
	for _, s := range r.Plan.W1Sizes {
		cells = append(cells, cell{r.Plan.W1SizeWin[0], r.Plan.W1SizeWin[1], s})
	}
	for _, c := range cells {
		params := w1Params(c.conns, c.win)
		res := r.base(t, "W1", params, w1Metric, c.size)
		res.Note = "sender waits for the broker's confirmation"
		q := r.name("w1")
		if err := t.Fresh(ctx, []string{q}, nil); err != nil {
			r.fail(res, err)
			continue
		}
		n := r.Plan.W1Msgs
		if r.Plan.W1MaxBytes > 0 && n*int64(c.size) > r.Plan.W1MaxBytes {
			n = r.Plan.W1MaxBytes / int64(c.size)
		}
		r.Prog.set(fmt.Sprintf("W1 %s %s %s", t.Client.Name(), params, sizeName(c.size)), n)
		m := startMeter(t, false)
		w := newWindow(r.Plan.Warm, m, r.Prog)
		lat := &recorder{}
		start := time.Now()
		_, err := sendLoad(ctx, t.Client, q, c.conns, c.win, c.size, n, r.Plan.W1Dur+r.Plan.Warm, w, lat)
		msgs, secs := w.result(start)
		m.finish(&res, msgs)
		if err != nil {
			r.fail(res, err)
			continue
		}
		res.Msgs, res.Secs, res.Rate, res.Lat = msgs, secs, float64(msgs)/secs, lat.dist()
		res.Note += m.pinNote()
		r.add(res)
		_ = t.Client.DeleteQueue(ctx, q)
	}
}

// W2 is peek-lock receive with completes on a pre-filled queue.
func (r *Runner) W2(ctx context.Context, t *Target) {
	for _, c := range r.Plan.W2Cells {
		params := fmt.Sprintf("%d receiver × credit %d", c[0], c[1])
		res := r.base(t, "W2", params, "receive+complete", r.Plan.Size)
		res.Note = t.Note
		q := r.name("w2")
		if err := t.Fresh(ctx, []string{q}, nil); err != nil {
			r.fail(res, err)
			continue
		}
		filled := r.Plan.W2Msgs
		if !t.NoPrefill {
			r.Prog.set(fmt.Sprintf("W2 prefill %s", t.Client.Name()), r.Plan.W2Msgs)
			pw := newWindow(0, nil, r.Prog)
			var err error
			filled, err = sendLoad(ctx, t.Client, q, 4, 64, r.Plan.Size, r.Plan.W2Msgs, 3*r.Plan.W2Dur, pw, nil)
			if err != nil {
				r.fail(res, fmt.Errorf("prefill: %w", err))
				continue
			}
		}
		r.Prog.set(fmt.Sprintf("W2 %s %s", t.Client.Name(), params), filled)
		m := startMeter(t, false)
		w := newWindow(r.Plan.Warm, m, r.Prog)
		lat := &recorder{}
		start := time.Now()
		_, err := recvLoad(ctx, t.Client, []string{q}, c[0], c[1], filled, r.Plan.W2Dur+r.Plan.Warm, w, lat, nil, nil)
		msgs, secs := w.result(start)
		m.finish(&res, msgs)
		if err != nil {
			r.fail(res, err)
			continue
		}
		res.Msgs, res.Secs, res.Rate, res.Lat = msgs, secs, float64(msgs)/secs, lat.dist()
		if t.NoPrefill {
			res.Note = fmt.Sprintf("%s; not pre-filled (up to %d); latency = complete round trip", t.Note, filled)
		} else {
			res.Note = fmt.Sprintf("%s; %d pre-filled; latency = complete round trip", t.Note, filled)
		}
		res.Note += m.pinNote()
		r.add(res)
		_ = t.Client.DeleteQueue(ctx, q)
	}
}

// W3 is end-to-end latency at fixed rates, measured from each message's
// scheduled send time (so a stalled sender cannot hide queueing delay).
func (r *Runner) W3(ctx context.Context, t *Target) {
	for _, rate := range r.Plan.W3Rates {
		params := fmt.Sprintf("%d msg/s", rate)
		res := r.base(t, "W3", params, "e2e latency", r.Plan.Size)
		q := r.name("w3")
		fresh := t.Fresh
		if t.FreshW3 != nil {
			fresh = t.FreshW3
		}
		if err := fresh(ctx, []string{q}, nil); err != nil {
			r.fail(res, err)
			continue
		}
		total := int64(float64(rate) * (r.Plan.W3Dur + r.Plan.Warm).Seconds())
		r.Prog.set(fmt.Sprintf("W3 %s %s", t.Client.Name(), params), total)
		m := startMeter(t, false)
		e2e, conf, late, sent, got, secs, err := r.paced(ctx, t, q, rate, total)
		m.finish(&res, got)
		if err != nil {
			r.fail(res, err)
			continue
		}
		res.Msgs, res.Secs, res.Lat = got, secs, e2e.dist()
		res.Rate = float64(got) / secs
		cd, ld := conf.dist(), late.dist()
		res.Note = fmt.Sprintf("from scheduled send time; send confirm p50 %s p99 %s p99.9 %s ms; the load generator's own delay (scheduled time to Send called) p50 %s p99 %s p99.9 %s ms; sent %d received %d; %s",
			ms(cd.P50), ms(cd.P99), ms(cd.P999), ms(ld.P50), ms(ld.P99), ms(ld.P999), sent, got, t.Note)
		r.add(res)
		_ = t.Client.DeleteQueue(ctx, q)
	}
}

func (r *Runner) paced(ctx context.Context, t *Target, q string, rate int, total int64) (e2e, conf, late *recorder, sent, got int64, secs float64, err error) {
	e2e, conf, late = &recorder{}, &recorder{}, &recorder{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interval := time.Second / time.Duration(rate)
	start := time.Now().Add(200 * time.Millisecond)
	warmEnd := start.Add(r.Plan.Warm).UnixNano()
	var received, lastRecv atomic.Int64
	ready := make(chan struct{})
	recvErr := make(chan error, 1)
	dur := time.Duration(float64(total)/float64(rate)*float64(time.Second)) + 40*time.Second
	go func() {
		w := newWindow(0, nil, nil)
		_, err := recvLoad(ctx, t.Client, []string{q}, 1, 200, total, dur, w, nil, func(b []byte) {
			now := time.Now().UnixNano()
			if len(b) >= 16 {
				sched := int64(binary.BigEndian.Uint64(b[0:8]))
				if sched >= warmEnd {
					e2e.add(time.Duration(now - sched))
				}
			}
			received.Add(1)
			lastRecv.Store(now)
			r.Prog.add(1)
		}, ready)
		recvErr <- err
	}()
	select {
	case <-ready:
	case err := <-recvErr:
		return nil, nil, nil, 0, 0, 0, err
	}
	k, err := t.Client.Dial(ctx)
	if err != nil {
		return nil, nil, nil, 0, 0, 0, err
	}
	defer k.Close()
	s, err := k.NewSender(ctx, q)
	if err != nil {
		return nil, nil, nil, 0, 0, 0, err
	}
	defer s.Close()
	jobs := make(chan int64, 1<<16)
	var okN atomic.Int64
	var wg sync.WaitGroup
	var sendErr atomic.Value
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sched := range jobs {
				b := body(r.Plan.Size, sched, 0)
				if sched >= warmEnd {
					late.add(time.Duration(time.Now().UnixNano() - sched))
				}
				if err := s.Send(ctx, b); err != nil {
					sendErr.CompareAndSwap(nil, err)
					continue
				}
				if sched >= warmEnd {
					conf.add(time.Duration(time.Now().UnixNano() - sched))
				}
				okN.Add(1)
			}
		}()
	}
	for i := int64(0); i < total; i++ {
		sched := start.Add(time.Duration(i) * interval)
		if d := time.Until(sched); d > 0 {
			time.Sleep(d)
		}
		jobs <- sched.UnixNano()
	}
	close(jobs)
	wg.Wait()
	sent = okN.Load()
	// Wait for the receiver to get everything that was sent (bounded).
	deadline := time.Now().Add(30 * time.Second)
	for received.Load() < sent && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	secs = time.Unix(0, lastRecv.Load()).Sub(start).Seconds()
	cancel()
	<-recvErr
	if v := sendErr.Load(); v != nil {
		return nil, nil, nil, 0, 0, 0, v.(error)
	}
	return e2e, conf, late, sent, received.Load(), secs, nil
}

// killMetric is the metric of W4's kill -9 row: its figure is a time
// (Lat.Max), not a rate.
const killMetric = "kill -9 → first delivery"

// W4 is the backlog: fill, kill -9 and restart with the backlog queued,
// drain, and watch the disk.
func (r *Runner) W4(ctx context.Context, t *Target) {
	n := r.Plan.W4Msgs
	params := fmt.Sprintf("%d backlog", n)
	in := r.base(t, "W4", params+", 4 conn × window 64", "enqueue", r.Plan.Size)
	if t.SkipW4 != "" {
		in.NA = t.SkipW4
		r.add(in)
		return
	}
	q := r.name("w4")
	if err := t.Fresh(ctx, []string{q}, nil); err != nil {
		r.fail(in, err)
		return
	}
	r.Prog.set(fmt.Sprintf("W4 enqueue %s", t.Client.Name()), n)
	m := startMeter(t, true)
	defer func() {
		if m != nil {
			m.close()
		}
	}()
	w := newWindow(0, m, r.Prog)
	lat := &recorder{}
	start := time.Now()
	sent, err := sendLoad(ctx, t.Client, q, 4, 64, r.Plan.Size, n, r.Plan.W4Dur, w, lat)
	msgs, secs := w.result(start)
	m.record(&in, msgs)
	in.RSSMB = m.rssMB()
	in.Load = loadAvg()
	if err != nil {
		r.fail(in, err)
		return
	}
	in.Msgs, in.Secs, in.Rate, in.Lat = msgs, secs, float64(msgs)/secs, lat.dist()
	diskFull := diskUsage(t.dataDir())
	in.Note = fmt.Sprintf("disk with backlog %.0f MB", float64(diskFull)/1e6)
	if sent < n {
		in.Note += fmt.Sprintf("; only %d of %d sent within %s", sent, n, r.Plan.W4Dur)
	}
	r.add(in)

	// kill -9 with the backlog queued, then time to first delivery.
	var firstNote string
	got0 := int64(0)
	if r.Plan.W4Kill && t.Kill9Restart != nil {
		m.close()
		m = nil
		first, ok := r.w4Kill(ctx, t, q, params)
		if !ok {
			return
		}
		got0 = 1
		firstNote = fmt.Sprintf("first delivery after kill -9: %.2f s", first.Seconds())
		m = startMeter(t, true)
		m.diskMax.Store(diskFull)
	}

	out := r.base(t, "W4", params+", 4 receivers × credit 200", "drain (receive+complete)", r.Plan.Size)
	r.Prog.set(fmt.Sprintf("W4 drain %s", t.Client.Name()), sent)
	w = newWindow(0, m, r.Prog)
	lat = &recorder{}
	start = time.Now()
	got, err := recvLoad(ctx, t.Client, []string{q}, 4, 200, sent-got0, r.Plan.W4Dur, w, lat, nil, nil)
	msgs, secs = w.result(start)
	m.record(&out, msgs)
	out.Load = loadAvg()
	if err != nil {
		r.fail(out, err)
		return
	}
	out.Msgs, out.Secs, out.Rate, out.Lat = msgs, secs, float64(msgs)/secs, lat.dist()
	diskEnd := diskUsage(t.dataDir())
	r.Prog.set(fmt.Sprintf("W4 disk settle %s (%s)", t.Client.Name(), r.Plan.W4Settle), 0)
	sctx, scancel := context.WithTimeout(ctx, r.Plan.W4Settle)
	<-sctx.Done()
	scancel()
	diskLater := diskUsage(t.dataDir())
	out.RSSMB = m.rssMB()
	peak := m.diskMax.Load()
	pct := 0.0
	if peak > 0 {
		pct = 100 * float64(diskLater) / float64(peak)
	}
	out.Note = fmt.Sprintf("drained %d of %d; disk peak %.0f MB, at drain end %.0f MB, %s later %.1f MB (%.1f %% of peak)",
		got+got0, sent, float64(peak)/1e6, float64(diskEnd)/1e6, r.Plan.W4Settle, float64(diskLater)/1e6, pct)
	if firstNote != "" {
		out.Note += "; drained after the restart"
	}
	r.add(out)
	_ = t.Client.DeleteQueue(ctx, q)
}

// w4Kill kills the broker with the backlog queued, restarts it and adds
// the time to the first delivery (that message completed); ok is false if
// that failed (the failure is added instead).
func (r *Runner) w4Kill(ctx context.Context, t *Target, q, params string) (first time.Duration, ok bool) {
	res := r.base(t, "W4", params, killMetric, r.Plan.Size)
	r.Prog.set(fmt.Sprintf("W4 kill -9 %s", t.Client.Name()), 0)
	t0 := time.Now()
	if err := t.Kill9Restart(ctx); err != nil {
		r.fail(res, err)
		return 0, false
	}
	first, err := firstDelivery(ctx, t, q, t0, 120*time.Second)
	res.Load = loadAvg()
	if err != nil {
		r.fail(res, err)
		return 0, false
	}
	res.Rate = -1
	res.Secs = first.Seconds()
	res.Lat = dist{Max: first}
	res.RSSMB = float64(procHWM(t.pid())) / 1e6
	res.Note = fmt.Sprintf("%.2f s from SIGKILL to the first message received (process torn down, restarted, recovery, connect, attach, deliver)", first.Seconds())
	if t.Started != nil {
		if st := t.Started(); st.After(t0) {
			res.Note += fmt.Sprintf("; %.2f s from the new process's start", t0.Add(first).Sub(st).Seconds())
		}
	}
	res.Note += "; RSS = peak of the restarted process so far"
	r.add(res)
	return first, true
}

// firstDelivery connects (retrying while the broker starts) and returns
// the time from start until the first message arrives; the message is
// completed.
func firstDelivery(ctx context.Context, t *Target, q string, start time.Time, limit time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var lastErr error
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		k, err := t.Client.Dial(actx)
		if err != nil {
			acancel()
			lastErr = err
			time.Sleep(20 * time.Millisecond)
			continue
		}
		// Credit -1: exactly one message, so that no second one is
		// delivered and left locked (Service Bus keeps the locks of
		// delivered messages after the link closes).
		rcv, err := k.NewReceiver(actx, q, -1)
		if err != nil {
			acancel()
			k.Close()
			lastErr = err
			time.Sleep(20 * time.Millisecond)
			continue
		}
		rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
		d, err := rcv.Receive(rctx)
		el := time.Since(start)
		if err == nil {
			_ = d.Settle(rctx)
		}
		rcancel()
		acancel()
		_ = rcv.Close()
		_ = k.Close()
		if err != nil {
			lastErr = err
			continue
		}
		return el, nil
	}
	return 0, fmt.Errorf("no delivery within %s: %v", limit, lastErr)
}

// W5 is fan-out: a sender into a topic with N subscriptions, either
// with one receiver per subscription draining it (receive + complete) or
// with no receivers (ingress only, the subscriptions fill up). The sender
// is one of W1's cells (Plan.W5Senders): with one connection the load
// generator's link, not the broker, sets the pace (the null broker's W1
// at 1 × 256 is W5's ceiling there), so W5 runs with four as well.
func (r *Runner) W5(ctx context.Context, t *Target) {
	for _, snd := range r.Plan.W5Senders {
		for _, nsub := range r.Plan.W5Subs {
			for _, drain := range r.Plan.W5Drain {
				r.w5(ctx, t, nsub, drain, snd[0], snd[1])
			}
		}
	}
}

// w5Params names a W5 cell; w5Sender reads its sender's W1 cell back.
func w5Params(nsub int, drain bool, conns, win int) string {
	if drain {
		return fmt.Sprintf("%d subscriptions, %s, %d receivers draining", nsub, w1Params(conns, win), nsub)
	}
	return fmt.Sprintf("%d subscriptions, %s, no receivers", nsub, w1Params(conns, win))
}

func w5Sender(params string) string {
	if f := strings.Split(params, ", "); len(f) == 3 {
		return f[1]
	}
	return ""
}

// w5Egress lets the subscriptions' receivers catch up with the want
// deliveries (for at most a minute), stops them and describes the egress.
func w5Egress(egress, lastRecv *atomic.Int64, want int64, start time.Time, stop context.CancelFunc, done <-chan error) string {
	deadline := time.Now().Add(60 * time.Second)
	for egress.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	rerr := <-done
	eg := egress.Load()
	egSecs := time.Unix(0, lastRecv.Load()).Sub(start).Seconds()
	note := fmt.Sprintf("aggregate egress %s msg/s (%d of %d deliveries, received and completed)", human(float64(eg)/egSecs), eg, want)
	if rerr != nil && eg < want {
		note += "; receiver error: " + rerr.Error()
	}
	return note
}

func (r *Runner) w5(ctx context.Context, t *Target, nsub int, drain bool, conns, win int) {
	params := w5Params(nsub, drain, conns, win)
	res := r.base(t, "W5", params, "fan-out ingress", r.Plan.Size)
	tc, ok := t.Client.(TopicClient)
	if t.TopicsNA != "" || !ok {
		res.NA = t.TopicsNA
		if res.NA == "" {
			res.NA = "n/a"
		}
		r.add(res)
		return
	}
	var subs []string
	for i := 1; i <= nsub; i++ {
		subs = append(subs, fmt.Sprintf("s%d", i))
	}
	topic := r.name("fan")
	if err := t.Fresh(ctx, nil, map[string][]string{topic: subs}); err != nil {
		r.fail(res, err)
		return
	}
	sendAddr, recvAddrs, err := tc.CreateTopic(ctx, topic, subs)
	if err != nil {
		r.fail(res, err)
		return
	}
	defer func() { _ = tc.DeleteTopic(ctx, topic, subs) }()
	n := r.Plan.W5Msgs
	total := n
	if drain {
		total = n * int64(nsub)
	}
	r.Prog.set(fmt.Sprintf("W5 %s %s", t.Client.Name(), params), total)
	m := startMeter(t, false)
	closed := false
	closeM := func() {
		if !closed {
			closed = true
			m.close()
		}
	}
	defer closeM()
	var egress, lastRecv atomic.Int64
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	recvDone := make(chan error, 1)
	if drain {
		ready := make(chan struct{})
		go func() {
			rw := newWindow(0, nil, nil)
			_, err := recvLoad(rctx, t.Client, recvAddrs, 1, 200, n*int64(nsub), r.Plan.W5Dur+60*time.Second, rw, nil, func([]byte) {
				egress.Add(1)
				lastRecv.Store(time.Now().UnixNano())
				r.Prog.add(1)
			}, ready)
			recvDone <- err
		}()
		select {
		case <-ready:
		case err := <-recvDone:
			r.fail(res, err)
			return
		}
	}
	var prog *progress
	if !drain {
		prog = r.Prog
	}
	// Measured as W1 is (the same sender): after the warm-up, so that
	// the figure does not include dialling, attaching and the first
	// seconds of a fresh broker process — and, as W1, for W5Dur after it.
	w := newWindow(r.Plan.Warm, m, prog)
	lat := &recorder{}
	start := time.Now()
	sent, err := sendLoad(ctx, t.Client, sendAddr, conns, win, r.Plan.Size, n, r.Plan.W5Dur+r.Plan.Warm, w, lat)
	msgs, secs := w.result(start)
	m.record(&res, msgs)
	if err != nil {
		r.fail(res, err)
		return
	}
	res.Msgs, res.Secs, res.Rate, res.Lat = msgs, secs, float64(msgs)/secs, lat.dist()
	res.Note = "latency = send confirm; CPU per ingress message"
	if drain {
		res.Note = w5Egress(&egress, &lastRecv, sent*int64(nsub), start, rcancel, recvDone) + "; " + res.Note
	}
	closeM()
	res.RSSMB = m.rssMB()
	res.Load = loadAvg()
	r.add(res)
}
