package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Main is busbar-bench: it runs the workloads against Busbar and, when
// their binaries are given, RabbitMQ and NATS JetStream, one broker at a
// time, and writes the results table.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("busbar-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", "..", "the Busbar checkout to build cmd/busbar from")
	work := fs.String("work", filepath.Join(os.TempDir(), "busbar-bench"), "scratch directory for binaries and data directories (removed data at the end)")
	out := fs.String("out", "", "directory to write results.md and results.csv into (default: stdout only)")
	targets := fs.String("targets", "busbar,sdk,rabbitmq-amqp10,rabbitmq-amqp091,nats-always,nats-default", "targets to run, comma-separated; also null and null-sdk: the null broker (cmd/busbar-null, no broker work; W1, W2 and, with go-amqp, W3) with go-amqp and with the azservicebus SDK, null-durable: the null broker with a group-committed, fdatasync'd journal (the least a durable broker does; W1, W2, W3), and busbar-memory: Busbar with serve --memory (not durable; W1, W2, W3, W5)")
	workloads := fs.String("workloads", "W1,W2,W3,W4,W5", "workloads to run, comma-separated")
	plan := fs.String("plan", "full", "full or smoke")
	rmqSbin := fs.String("rabbitmq-sbin", "", "directory with RabbitMQ's rabbitmq-server and rabbitmqctl scripts (e.g. /usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8/sbin); empty skips RabbitMQ")
	natsBin := fs.String("nats-server", "", "nats-server binary (2.15.2 from the Go module proxy); empty skips NATS")
	busbarBin := fs.String("busbar-bin", "", "use this busbar binary instead of building one from --repo")
	source := fs.String("source", "head", "what to build: head (a commit of --repo, see --rev, exported with git archive) or worktree (--repo as it is on disk)")
	rev := fs.String("rev", "HEAD", "the commit to build with --source head")
	w4msgs := fs.Int64("w4-msgs", 0, "override the W4 backlog size")
	w4settle := fs.Duration("w4-settle", 0, "override the wait before measuring disk after the W4 drain")
	w1msgs := fs.Int64("w1-msgs", 0, "override the W1 message count per cell")
	w2msgs := fs.Int64("w2-msgs", 0, "override the W2 pre-filled message count per cell")
	w1dur := fs.Duration("w1-dur", 0, "override the W1 cell duration")
	w3dur := fs.Duration("w3-dur", 0, "override the W3 duration per rate")
	w4targets := fs.String("w4-targets", "busbar,rabbitmq-amqp10,nats-default", "targets that run the 1M backlog test (W4); the others print why not")
	w1cells := fs.String("w1-cells", "", `override the W1 cells, e.g. "1x1,4x64" (connections x window)`)
	w2cells := fs.String("w2-cells", "", `override the W2 cells, e.g. "1x200,4x200" (receivers x credit)`)
	w3rates := fs.String("w3-rates", "", `override the W3 rates, e.g. "1000,5000"`)
	sizes := fs.String("sizes", "", `override the extra W1 payload sizes, e.g. "128,65536" ("none" for none)`)
	w5subs := fs.String("w5-subs", "", `override the W5 subscription counts, e.g. "1,5,20"`)
	w5senders := fs.String("w5-senders", "", `override W5's senders, e.g. "1x256,4x64" (connections x window, as -w1-cells)`)
	w5drain := fs.String("w5-drain", "", `override the W5 receiver variants: "no" (no receivers), "yes" (receivers draining) or "no,yes"`)
	w5dur := fs.Duration("w5-dur", 0, "override the W5 cell duration")
	w5msgs := fs.Int64("w5-msgs", 0, "override the W5 message count per cell")
	pivot := fs.String("pivot", "", "print the side-by-side table of an earlier run's results.csv and exit")
	limits := fs.Duration("limits", 2*time.Second, "duration of each physical-limit probe (0 skips them)")
	rounds := fs.Int("rounds", 1, "run the null-broker targets (null, null-sdk, null-durable) and the Busbar targets (busbar-memory, busbar, sdk) this many times, interleaved (round 1: null broker then Busbar, round 2: …), so that each Busbar figure has a ceiling measured minutes apart (results.md: Rounds); W4 runs in the first round only; RabbitMQ and NATS run once, after the rounds")
	pin := fs.Bool("pin", false, "pinned variant: re-run the harness under taskset -c 0 and start every broker under taskset -c 1")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *rounds < 1 {
		fmt.Fprintf(stderr, "bad -rounds %d: want 1 or more\n", *rounds)
		return 2
	}
	pinNote := ""
	if *pin && *pivot == "" {
		cpus := os.Getenv(pinnedEnv)
		if cpus == "" {
			return reexecPinned(args, "0", "1", stdout, stderr)
		}
		brokerCPUs = cpus
		pinNote = fmt.Sprintf("Pinned: load generator on CPU %s (GOMAXPROCS %d), brokers under taskset -c %s.", cpusAllowed(os.Getpid()), runtime.GOMAXPROCS(0), cpus)
	}
	if *pivot != "" {
		f, err := os.Open(*pivot)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer f.Close()
		rs, err := ReadCSV(f)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		writeTables(stdout, rs)
		return 0
	}
	p := DefaultPlan()
	if *plan == "smoke" {
		p = SmokePlan()
	}
	if *w4msgs > 0 {
		p.W4Msgs = *w4msgs
	}
	if *w4settle > 0 {
		p.W4Settle = *w4settle
	}
	if *w1msgs > 0 {
		p.W1Msgs = *w1msgs
	}
	if *w2msgs > 0 {
		p.W2Msgs = *w2msgs
	}
	if *w1dur > 0 {
		p.W1Dur = *w1dur
	}
	if *w3dur > 0 {
		p.W3Dur = *w3dur
	}
	var perr error
	if *w1cells != "" {
		p.W1Windows, perr = pairs(*w1cells)
	}
	if *w2cells != "" && perr == nil {
		p.W2Cells, perr = pairs(*w2cells)
	}
	if *w3rates != "" && perr == nil {
		p.W3Rates, perr = ints(*w3rates)
	}
	if *sizes != "" && perr == nil {
		p.W1Sizes = nil
		if *sizes != "none" {
			p.W1Sizes, perr = ints(*sizes)
		}
	}
	if *w5subs != "" && perr == nil {
		p.W5Subs, perr = ints(*w5subs)
	}
	if *w5senders != "" && perr == nil {
		p.W5Senders, perr = pairs(*w5senders)
	}
	if *w5drain != "" && perr == nil {
		p.W5Drain, perr = drains(*w5drain)
	}
	if *w5dur > 0 {
		p.W5Dur = *w5dur
	}
	if *w5msgs > 0 {
		p.W5Msgs = *w5msgs
	}
	if perr != nil {
		fmt.Fprintln(stderr, perr)
		return 2
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*targets, ",") {
		want[strings.TrimSpace(s)] = true
	}
	wl := map[string]bool{}
	for _, s := range strings.Split(*workloads, ",") {
		wl[strings.ToUpper(strings.TrimSpace(s))] = true
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(*work, 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	absRepo, _ := filepath.Abs(*repo)
	prog := newProgress(stderr, false)
	defer prog.close()
	cmdline := "busbar-bench " + strings.Join(args, " ")
	started := time.Now()
	header := machineHeader(cmdline, started)
	prog.log("%s", header)

	var lim Limits
	lim.Err = fmt.Errorf("skipped (-limits 0)")
	if *limits > 0 {
		prog.set("physical limits", 0)
		lim = MeasureLimits(filepath.Join(*work, "probe"), *limits)
		prog.log("Physical limits: %s", lim)
	}

	if pinNote != "" {
		prog.log("%s", pinNote)
	}
	r := &Runner{Plan: p, Prog: prog, OnResult: func(res Result) {
		rn := roundName(res.Round, *rounds)
		if res.NA != "" {
			prog.log("%s%s %-44s %-26s %-10s %s %s", rn, res.Workload, res.Target, res.Params, res.Metric, res.NA, res.Note)
			return
		}
		prog.log("%s%s %-44s %-26s %-22s %8s msg/s  p50 %s p99 %s p99.9 %s max %s ms  broker cpu %s µs/msg (sys %s%%)  client cpu %s µs/msg  load %.2f  steal %s%%",
			rn, res.Workload, res.Target, res.Params+" "+sizeName(res.Size), res.Metric, human(res.Rate), ms(res.Lat.P50), ms(res.Lat.P99), ms(res.Lat.P999), ms(res.Lat.Max), fnum(res.CPUus, 1), fnum(res.SysPct, 0), fnum(res.ClientUs, 1), res.Load, fnum(res.StealPct, 0))
	}}
	if pinNote != "" {
		r.TargetSuffix = " [pinned]"
	}
	w4on := map[string]bool{}
	for _, s := range strings.Split(*w4targets, ",") {
		w4on[strings.TrimSpace(s)] = true
	}
	skipW4 := func(t *Target, key string) {
		if !w4on[key] {
			t.SkipW4 = "not run (time budget; add it to -w4-targets)"
		}
	}
	runAll := func(t *Target, only ...string) {
		allowed := func(w string) bool {
			if !wl[w] {
				return false
			}
			if len(only) == 0 {
				return true
			}
			for _, o := range only {
				if o == w {
					return true
				}
			}
			return false
		}
		for _, w := range []string{"W1", "W2", "W3", "W4", "W5"} {
			if !allowed(w) || ctx.Err() != nil {
				continue
			}
			if !runsInRound(w, r.Round) {
				continue
			}
			if t.Workloads != nil && !t.Workloads[w] {
				r.NA(t, w, t.WorkloadsNA)
				continue
			}
			switch w {
			case "W1":
				r.W1(ctx, t)
			case "W2":
				r.W2(ctx, t)
			case "W3":
				r.W3(ctx, t)
			case "W4":
				r.W4(ctx, t)
			case "W5":
				r.W5(ctx, t)
			}
		}
	}

	// Busbar, built from the checkout.
	built := ""
	src := absRepo
	exported := false
	wantBusbar := want["busbar"] || want["sdk"] || want["busbar-memory"]
	wantNull := want["null"] || want["null-sdk"] || want["null-durable"]
	if wantBusbar && *busbarBin == "" || wantNull {
		if *source == "head" {
			src = filepath.Join(*work, "src")
			id, err := ExportHead(absRepo, *rev, src)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			exported = true
			built = fmt.Sprintf("Busbar built from commit %s (git archive %s of %s).", id, *rev, absRepo)
		} else {
			built = fmt.Sprintf("Busbar built from the work tree %s.", absRepo)
		}
		prog.log("%s", built)
	}
	// The null broker: the bench module's cmd/busbar-null, on the endpoint
	// (internal/amqp) of the same source tree as Busbar.
	nullBin := filepath.Join(*work, "busbar-null")
	if wantNull && ctx.Err() == nil {
		prog.set("building busbar-null", 0)
		nsrc := ""
		if exported {
			nsrc = src
		}
		if err := BuildNull(filepath.Join(absRepo, "bench"), nsrc, nullBin); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		nb := fmt.Sprintf("Null broker: bench/cmd/busbar-null of the work tree %s, endpoint from %s.", filepath.Join(absRepo, "bench"), src)
		prog.log("%s", nb)
		built = strings.TrimSpace(built + "\n" + nb)
	}
	bin := *busbarBin
	if wantBusbar && ctx.Err() == nil {
		if bin != "" {
			built = strings.TrimSpace(built + "\nBusbar: the binary " + bin + ".")
		} else {
			bin = filepath.Join(*work, "busbar")
			prog.set("building busbar", 0)
			if err := BuildBusbar(src, bin); err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
		}
	}
	if *rounds > 1 {
		built = strings.TrimSpace(built + fmt.Sprintf("\nRounds: %d, the null broker's and Busbar's targets interleaved (round 1: null broker then Busbar, round 2: …).", *rounds))
	}
	// The null broker and Busbar, once or in interleaved rounds; each
	// round starts and stops their processes afresh.
	for k := 1; k <= *rounds && ctx.Err() == nil; k++ {
		if *rounds > 1 {
			r.Round = k
			prog.setRound(k, *rounds)
			prog.log("Round %d/%d", k, *rounds)
		}
		if wantNull {
			ga, sdk, stopN := NewNullTargets(NullOptions{Bin: nullBin, WorkDir: *work, Port: 25810, Size: p.Size})
			if want["null"] {
				runAll(ga)
			}
			if want["null-sdk"] {
				runAll(sdk)
			}
			stopN()
			if want["null-durable"] && ctx.Err() == nil {
				dt, stopD := NewNullDurableTarget(NullOptions{Bin: nullBin, WorkDir: *work, Port: 25811, Size: p.Size})
				runAll(dt)
				stopD()
			}
		}
		if !wantBusbar || ctx.Err() != nil {
			continue
		}
		if want["busbar-memory"] {
			// Not durable: nothing on disk, otherwise the same binary.
			mt, _, stopM := NewBusbarTargets(BusbarOptions{Bin: bin, WorkDir: *work, AMQPPort: 25802, HTTPPort: 25803, Src: src, Memory: true})
			runAll(mt)
			stopM()
		}
		if (want["busbar"] || want["sdk"]) && ctx.Err() == nil {
			ga, sdk, stopB := NewBusbarTargets(BusbarOptions{Bin: bin, WorkDir: *work, AMQPPort: 25800, HTTPPort: 25801, Src: src})
			skipW4(ga, "busbar")
			if want["busbar"] {
				runAll(ga)
			}
			if want["sdk"] {
				runAll(sdk, "W1", "W2")
			}
			stopB()
		}
	}
	r.Round = 0
	prog.setRound(0, 0)
	if *rmqSbin != "" && (want["rabbitmq-amqp10"] || want["rabbitmq-amqp091"]) && ctx.Err() == nil {
		prog.set("starting RabbitMQ", 0)
		ts, stopR, err := NewRabbitTargets(ctx, RabbitOptions{SbinDir: *rmqSbin, WorkDir: *work, Port: 25673, DistPort: 25674, EPMDPort: 24369})
		if err != nil {
			prog.log("RabbitMQ: %v", err)
		} else {
			skipW4(ts[0], "rabbitmq-amqp10")
			skipW4(ts[1], "rabbitmq-amqp091")
			if want["rabbitmq-amqp10"] {
				runAll(ts[0])
			}
			if want["rabbitmq-amqp091"] {
				runAll(ts[1])
			}
			prog.set("stopping RabbitMQ", 0)
			stopR()
		}
	}
	if *natsBin != "" && ctx.Err() == nil {
		for _, always := range []bool{true, false} {
			name := "nats-default"
			port := 14222
			if always {
				name, port = "nats-always", 14223
			}
			if !want[name] || ctx.Err() != nil {
				continue
			}
			prog.set("starting "+name, 0)
			t, stopN, err := NewNATSTarget(ctx, NATSOptions{Bin: *natsBin, WorkDir: *work, Port: port, Always: always}, false)
			if err != nil {
				prog.log("%s: %v", name, err)
				continue
			}
			skipW4(t, name)
			runAll(t)
			serverConfirmedAcks(t)
			runAll(t, "W2")
			stopN()
		}
	}
	prog.set("", 0)

	var md strings.Builder
	if pinNote != "" {
		built = strings.TrimSpace(built + "\n" + pinNote)
	}
	fmt.Fprintf(&md, "%s\n%s\n\nPhysical limits: %s\n\n", header, built, lim)
	fmt.Fprintf(&md, "Side by side (msgs/s · p99 · broker CPU µs per message · load average; W3: latency from the scheduled send time):\n\n")
	writeTables(&md, r.Results)
	fmt.Fprintf(&md, "\nAll figures:\n\n")
	WriteMarkdown(&md, r.Results)
	fmt.Fprintf(&md, "\nFinished %s (%.0f min).\n", time.Now().Format(time.RFC3339), time.Since(started).Minutes())
	fmt.Fprint(stdout, md.String())
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(*out, "results.md"), []byte(md.String()), 0o644); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		f, err := os.Create(filepath.Join(*out, "results.csv"))
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		_ = WriteCSV(f, r.Results)
		f.Close()
	}
	if ctx.Err() != nil {
		return 130
	}
	return 0
}

// machineHeader describes the run: date, machine, command.
func machineHeader(cmdline string, at time.Time) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(l[strings.IndexByte(l, ':')+1:])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		if len(f) >= 2 {
			var kb int64
			fmt.Sscan(f[1], &kb)
			mem = fmt.Sprintf(", %.0f GiB RAM", float64(kb)/(1<<20))
		}
	}
	// The machine's CPUs, not the ones this process may use (-pin).
	ncpu := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "processor") {
				ncpu++
			}
		}
	}
	if ncpu == 0 {
		ncpu = runtime.NumCPU() // (under taskset this is the CPUs allowed)
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	return fmt.Sprintf("Run %s on %d × %s%s, Linux %s, %s; load average at start %.2f\nCommand: %s",
		at.Format("2006-01-02 15:04 MST"), ncpu, cpu, mem, strings.TrimSpace(string(kernel)), runtime.Version(),
		loadAvg(), cmdline)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var v int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &v); err != nil || v <= 0 {
			return nil, fmt.Errorf("bad number %q in %q", f, s)
		}
		out = append(out, v)
	}
	return out, nil
}

func drains(s string) ([]bool, error) {
	var out []bool
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "no":
			out = append(out, false)
		case "yes":
			out = append(out, true)
		default:
			return nil, fmt.Errorf("bad W5 receiver variant %q in %q: want no or yes", f, s)
		}
	}
	return out, nil
}

func pairs(s string) ([][2]int, error) {
	var out [][2]int
	for _, f := range strings.Split(s, ",") {
		var a, b int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%dx%d", &a, &b); err != nil || a <= 0 || b <= 0 {
			return nil, fmt.Errorf("bad cell %q in %q (want AxB)", f, s)
		}
		out = append(out, [2]int{a, b})
	}
	return out, nil
}

// writeTables writes the side-by-side table and, for a -rounds run, the
// Rounds section after it.
func writeTables(w io.Writer, rs []Result) {
	WritePivot(w, rs)
	if hasRounds(rs) {
		fmt.Fprintln(w)
		WriteRounds(w, rs)
	}
}

// runsInRound reports whether workload w runs in round k of a -rounds run
// (0: no rounds). W4 runs once, in the first: it has no ceiling to be
// paired with and takes minutes.
func runsInRound(w string, k int) bool { return w != "W4" || k <= 1 }
