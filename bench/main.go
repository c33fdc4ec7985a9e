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
	"slices"
	"strings"
	"syscall"
	"time"
)

// Main is busbar-bench: it runs the workloads against Busbar and, when
// their binaries are given, RabbitMQ and NATS JetStream, one broker at a
// time, and writes the results table. Its steps: parse the flags
// (parseFlags), make the plan (flags.plan), measure the physical limits,
// build the binaries (benchRun.build), run the null broker and Busbar in
// rounds (benchRun.rounds), then RabbitMQ and NATS, and write the results
// (benchRun.report).
func Main(args []string, stdout, stderr io.Writer) int {
	f, code := parseFlags(args, stderr)
	if f == nil {
		return code
	}
	pinNote := ""
	if f.pin && f.pivot == "" {
		cpus := os.Getenv(pinnedEnv)
		if cpus == "" {
			return reexecPinned(args, "0", "1", stdout, stderr)
		}
		brokerCPUs = cpus
		pinNote = fmt.Sprintf("Pinned: load generator on CPU %s (GOMAXPROCS %d), brokers under taskset -c %s.", cpusAllowed(os.Getpid()), runtime.GOMAXPROCS(0), cpus)
	}
	if f.pivot != "" {
		return pivotTables(f.pivot, stdout, stderr)
	}
	p, err := f.plan()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(f.work, 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	prog := newProgress(stderr, false)
	defer prog.close()
	b := &benchRun{ctx: ctx, f: f, plan: p, prog: prog, pinNote: pinNote, started: time.Now(),
		want: set(f.targets, strings.TrimSpace), wl: set(f.workloads, func(s string) string { return strings.ToUpper(strings.TrimSpace(s)) }),
		w4on: set(f.w4targets, strings.TrimSpace)}
	b.repo, _ = filepath.Abs(f.repo)
	b.header = machineHeader("busbar-bench "+strings.Join(args, " "), b.started)
	prog.log("%s", b.header)

	b.lim.Err = fmt.Errorf("skipped (-limits 0)")
	if f.limits > 0 {
		prog.set("physical limits", 0)
		b.lim = MeasureLimits(filepath.Join(f.work, "probe"), f.limits)
		prog.log("Physical limits: %s", b.lim)
	}
	if pinNote != "" {
		prog.log("%s", pinNote)
	}
	b.r = b.newRunner()
	if err := b.build(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	b.rounds()
	b.db.close()
	b.rabbit()
	b.nats()
	prog.set("", 0)
	if err := b.report(stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if ctx.Err() != nil {
		return 130
	}
	return 0
}

// flags are busbar-bench's command line.
type flags struct {
	repo, work, out, targets, workloads, planName, rmqSbin, natsBin, busbarBin, source, rev, postgres string
	w4msgs, w1msgs, w2msgs, w5msgs, w1maxBytes                                                        int64
	w4settle, w1dur, w3dur, w5dur, limits                                                             time.Duration
	w4targets, w1cells, w2cells, w3rates, sizes, w5subs, w5senders, w5drain, pivot                    string
	rounds, portOffset                                                                                int
	pin                                                                                               bool
}

// parseFlags reads the command line; a nil result comes with the exit
// code.
func parseFlags(args []string, stderr io.Writer) (*flags, int) {
	var f flags
	fs := flag.NewFlagSet("busbar-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.repo, "repo", "..", "the Busbar checkout to build cmd/busbar from")
	fs.StringVar(&f.work, "work", filepath.Join(os.TempDir(), "busbar-bench"), "scratch directory for binaries and data directories (removed data at the end)")
	fs.StringVar(&f.out, "out", "", "directory to write results.md and results.csv into (default: stdout only)")
	fs.StringVar(&f.targets, "targets", "busbar,sdk,rabbitmq-amqp10,rabbitmq-amqp091,nats-always,nats-default", "targets to run, comma-separated; also null and null-sdk: the null broker (cmd/busbar-null, no broker work; W1, W2 and, with go-amqp, W3) with go-amqp and with the azservicebus SDK, null-durable: the null broker with a group-committed, fdatasync'd journal (the least a durable broker does; W1, W2, W3), null-durable-retain: the same with a journal that keeps everything (new files instead of rewriting one), busbar-memory: Busbar with serve --memory (not durable; W1, W2, W3, W5), busbar-postgres: Busbar with serve --store on -postgres (W1, W2, W3, W5), and busbar-cluster: two serve --cluster nodes on -postgres, W1, W2 and W3 through the node serving the queue and then through the other one (relayed)")
	fs.StringVar(&f.workloads, "workloads", "W1,W2,W3,W4,W5", "workloads to run, comma-separated")
	fs.StringVar(&f.planName, "plan", "full", "full or smoke")
	fs.StringVar(&f.rmqSbin, "rabbitmq-sbin", "", "directory with RabbitMQ's rabbitmq-server and rabbitmqctl scripts (e.g. /usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8/sbin); empty skips RabbitMQ")
	fs.StringVar(&f.natsBin, "nats-server", "", "nats-server binary (2.15.2 from the Go module proxy); empty skips NATS")
	fs.StringVar(&f.busbarBin, "busbar-bin", "", "use this busbar binary instead of building one from --repo")
	fs.StringVar(&f.source, "source", "head", "what to build: head (a commit of --repo, see --rev, exported with git archive) or worktree (--repo as it is on disk)")
	fs.StringVar(&f.rev, "rev", "HEAD", "the commit to build with --source head")
	fs.Int64Var(&f.w4msgs, "w4-msgs", 0, "override the W4 backlog size")
	fs.DurationVar(&f.w4settle, "w4-settle", 0, "override the wait before measuring disk after the W4 drain")
	fs.Int64Var(&f.w1msgs, "w1-msgs", 0, "override the W1 message count per cell")
	fs.Int64Var(&f.w2msgs, "w2-msgs", 0, "override the W2 pre-filled message count per cell")
	fs.DurationVar(&f.w1dur, "w1-dur", 0, "override the W1 cell duration")
	fs.Int64Var(&f.w1maxBytes, "w1-max-bytes", 0, "override the cap on the bytes one W1 cell sends (default 1 GiB: a 64 KB cell ends after 16,384 messages)")
	fs.DurationVar(&f.w3dur, "w3-dur", 0, "override the W3 duration per rate")
	fs.StringVar(&f.w4targets, "w4-targets", "busbar,rabbitmq-amqp10,nats-default", "targets that run the 1M backlog test (W4); the others print why not")
	fs.StringVar(&f.w1cells, "w1-cells", "", `override the W1 cells, e.g. "1x1,4x64" (connections x window; "none" for none, to run only -sizes)`)
	fs.StringVar(&f.w2cells, "w2-cells", "", `override the W2 cells, e.g. "1x200,4x200" (receivers x credit)`)
	fs.StringVar(&f.w3rates, "w3-rates", "", `override the W3 rates, e.g. "1000,5000"`)
	fs.StringVar(&f.sizes, "sizes", "", `override the extra W1 payload sizes, e.g. "128,65536" ("none" for none)`)
	fs.StringVar(&f.w5subs, "w5-subs", "", `override the W5 subscription counts, e.g. "1,5,20"`)
	fs.StringVar(&f.w5senders, "w5-senders", "", `override W5's senders, e.g. "1x256,4x64" (connections x window, as -w1-cells)`)
	fs.StringVar(&f.w5drain, "w5-drain", "", `override the W5 receiver variants: "no" (no receivers), "yes" (receivers draining) or "no,yes"`)
	fs.DurationVar(&f.w5dur, "w5-dur", 0, "override the W5 cell duration")
	fs.Int64Var(&f.w5msgs, "w5-msgs", 0, "override the W5 message count per cell")
	fs.StringVar(&f.pivot, "pivot", "", "print the side-by-side table of an earlier run's results.csv and exit")
	fs.DurationVar(&f.limits, "limits", 2*time.Second, "duration of each physical-limit probe (0 skips them)")
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL URL for the busbar-postgres target (postgres://USER@HOST:PORT/DB); each run gets a schema of its own")
	fs.IntVar(&f.portOffset, "port-offset", 0, "add this to the fixed ports of the Busbar and null-broker targets (25800–25817), so that two runs on one machine do not meet")
	fs.IntVar(&f.rounds, "rounds", 1, "run the null-broker targets (null, null-sdk, null-durable, null-durable-retain) and the Busbar targets (busbar-memory, busbar, sdk) this many times, interleaved (round 1: null broker then Busbar, round 2: …), so that each Busbar figure has a ceiling measured minutes apart (results.md: Rounds); W4 runs in the first round only; RabbitMQ and NATS run once, after the rounds")
	fs.BoolVar(&f.pin, "pin", false, "pinned variant: re-run the harness under taskset -c 0 and start every broker under taskset -c 1")
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	if ts := "," + strings.ReplaceAll(f.targets, " ", "") + ","; (strings.Contains(ts, ",busbar-postgres,") || strings.Contains(ts, ",busbar-cluster,")) && f.postgres == "" {
		fmt.Fprintln(stderr, "the busbar-postgres and busbar-cluster targets need -postgres URL")
		return nil, 2
	}
	if f.rounds < 1 {
		fmt.Fprintf(stderr, "bad -rounds %d: want 1 or more\n", f.rounds)
		return nil, 2
	}
	return &f, 0
}

// plan is the full or smoke plan with the flags' overrides.
func (f *flags) plan() (Plan, error) {
	p := DefaultPlan()
	if f.planName == "smoke" {
		p = SmokePlan()
	}
	for _, o := range []struct {
		v   int64
		dst *int64
	}{{f.w4msgs, &p.W4Msgs}, {f.w1msgs, &p.W1Msgs}, {f.w2msgs, &p.W2Msgs}, {f.w5msgs, &p.W5Msgs}, {f.w1maxBytes, &p.W1MaxBytes}} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	for _, o := range []struct {
		v   time.Duration
		dst *time.Duration
	}{{f.w4settle, &p.W4Settle}, {f.w1dur, &p.W1Dur}, {f.w3dur, &p.W3Dur}, {f.w5dur, &p.W5Dur}} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	var err error
	if f.w1cells != "" && err == nil {
		p.W1Windows = nil
		if f.w1cells != "none" {
			p.W1Windows, err = pairs(f.w1cells)
		}
	}
	if f.w2cells != "" && err == nil {
		p.W2Cells, err = pairs(f.w2cells)
	}
	if f.w3rates != "" && err == nil {
		p.W3Rates, err = ints(f.w3rates)
	}
	if f.sizes != "" && err == nil {
		p.W1Sizes = nil
		if f.sizes != "none" {
			p.W1Sizes, err = ints(f.sizes)
		}
	}
	if f.w5subs != "" && err == nil {
		p.W5Subs, err = ints(f.w5subs)
	}
	if f.w5senders != "" && err == nil {
		p.W5Senders, err = pairs(f.w5senders)
	}
	if f.w5drain != "" && err == nil {
		p.W5Drain, err = drains(f.w5drain)
	}
	return p, err
}

// set is the comma-separated list v as a set, each entry through norm.
func set(v string, norm func(string) string) map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		m[norm(s)] = true
	}
	return m
}

// pivotTables prints the side-by-side table of an earlier results.csv.
func pivotTables(path string, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
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

// benchRun is one run of Main, from the build to the report.
type benchRun struct {
	ctx     context.Context
	f       *flags
	plan    Plan
	prog    *progress
	r       *Runner
	repo    string          // --repo, absolute
	want    map[string]bool // targets
	wl      map[string]bool // workloads
	w4on    map[string]bool // targets that run W4
	header  string
	pinNote string
	started time.Time
	lim     Limits

	built    string // how the binaries were made, for the report
	src      string // the source tree Busbar is built from
	exported bool   // src is an export of --rev
	bin      string // the busbar binary
	nullBin  string // the busbar-null binary
	db       *pgMeter
	dbTried  bool
}

// pgMeter returns the meter of -postgres's server, connecting on first
// use; nil (and a log line) when it cannot be measured, e.g. on another
// machine: the database columns are then empty.
func (b *benchRun) pgMeter() *pgMeter {
	if !b.dbTried {
		b.dbTried = true
		db, err := newPGMeter(b.ctx, b.f.postgres)
		if err != nil {
			b.prog.log("PostgreSQL's CPU and WAL not measured: %v", err)
		} else {
			b.db = db
			b.prog.log("PostgreSQL measured: the processes under postmaster %d, WAL from pg_current_wal_lsn().", db.pid)
		}
	}
	return b.db
}

// newRunner makes the Runner, logging each result as it comes.
func (b *benchRun) newRunner() *Runner {
	prog, rounds := b.prog, b.f.rounds
	r := &Runner{Plan: b.plan, Prog: prog, OnResult: func(res Result) {
		rn := roundName(res.Round, rounds)
		if res.NA != "" {
			prog.log("%s%s %-44s %-26s %-10s %s %s", rn, res.Workload, res.Target, res.Params, res.Metric, res.NA, res.Note)
			return
		}
		db := ""
		if res.DBus >= 0 || res.WALBytes >= 0 {
			db = fmt.Sprintf("  db cpu %s µs/msg  wal %s B/msg", fnum(res.DBus, 1), fnum(res.WALBytes, 0))
		}
		prog.log("%s%s %-44s %-26s %-22s %8s msg/s  p50 %s p99 %s p99.9 %s max %s ms  broker cpu %s µs/msg (sys %s%%)  client cpu %s µs/msg  load %.2f  steal %s%%%s",
			rn, res.Workload, res.Target, res.Params+" "+sizeName(res.Size), res.Metric, human(res.Rate), ms(res.Lat.P50), ms(res.Lat.P99), ms(res.Lat.P999), ms(res.Lat.Max), fnum(res.CPUus, 1), fnum(res.SysPct, 0), fnum(res.ClientUs, 1), res.Load, fnum(res.StealPct, 0), db)
	}}
	if b.pinNote != "" {
		r.TargetSuffix = " [pinned]"
	}
	return r
}

// skipW4 marks t as not running W4 unless key is in -w4-targets.
func (b *benchRun) skipW4(t *Target, key string) {
	if !b.w4on[key] {
		t.SkipW4 = "not run (time budget; add it to -w4-targets)"
	}
}

// runAll runs the chosen workloads (of only, if given) on t.
func (b *benchRun) runAll(t *Target, only ...string) {
	ctx, r := b.ctx, b.r
	for _, w := range []string{"W1", "W2", "W3", "W4", "W5"} {
		if !b.wl[w] || (len(only) > 0 && !slices.Contains(only, w)) || ctx.Err() != nil {
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

func (b *benchRun) wantBusbar() bool {
	return b.want["busbar"] || b.want["sdk"] || b.want["busbar-memory"] || b.want["busbar-postgres"] || b.want["busbar-cluster"]
}

func (b *benchRun) wantNull() bool {
	return b.want["null"] || b.want["null-sdk"] || b.want["null-durable"] || b.want["null-durable-retain"]
}

// build exports --rev (with --source head) and builds the null broker and
// Busbar as the targets need them, noting how in b.built.
func (b *benchRun) build() error {
	f, prog := b.f, b.prog
	b.src = b.repo
	if b.wantBusbar() && f.busbarBin == "" || b.wantNull() {
		if f.source == "head" {
			b.src = filepath.Join(f.work, "src")
			id, err := ExportHead(b.repo, f.rev, b.src)
			if err != nil {
				return err
			}
			b.exported = true
			b.built = fmt.Sprintf("Busbar built from commit %s (git archive %s of %s).", id, f.rev, b.repo)
		} else {
			b.built = fmt.Sprintf("Busbar built from the work tree %s.", b.repo)
		}
		prog.log("%s", b.built)
	}
	// The null broker: the bench module's cmd/busbar-null, on the endpoint
	// (internal/amqp) of the same source tree as Busbar.
	b.nullBin = filepath.Join(f.work, "busbar-null")
	if b.wantNull() && b.ctx.Err() == nil {
		prog.set("building busbar-null", 0)
		nsrc := ""
		if b.exported {
			nsrc = b.src
		}
		if err := BuildNull(filepath.Join(b.repo, "bench"), nsrc, b.nullBin); err != nil {
			return err
		}
		nb := fmt.Sprintf("Null broker: bench/cmd/busbar-null of the work tree %s, endpoint from %s.", filepath.Join(b.repo, "bench"), b.src)
		prog.log("%s", nb)
		b.built = strings.TrimSpace(b.built + "\n" + nb)
	}
	b.bin = f.busbarBin
	if b.wantBusbar() && b.ctx.Err() == nil {
		if b.bin != "" {
			b.built = strings.TrimSpace(b.built + "\nBusbar: the binary " + b.bin + ".")
		} else {
			b.bin = filepath.Join(f.work, "busbar")
			prog.set("building busbar", 0)
			if err := BuildBusbar(b.src, b.bin); err != nil {
				return err
			}
		}
	}
	if f.rounds > 1 {
		b.built = strings.TrimSpace(b.built + fmt.Sprintf("\nRounds: %d, the null broker's and Busbar's targets interleaved (round 1: null broker then Busbar, round 2: …).", f.rounds))
	}
	return nil
}

// rounds runs the null broker and Busbar, once or in interleaved rounds;
// each round starts and stops their processes afresh.
func (b *benchRun) rounds() {
	ctx, f, r, prog, want, work := b.ctx, b.f, b.r, b.prog, b.want, b.f.work
	for k := 1; k <= f.rounds && ctx.Err() == nil; k++ {
		if f.rounds > 1 {
			r.Round = k
			prog.setRound(k, f.rounds)
			prog.log("Round %d/%d", k, f.rounds)
		}
		if b.wantNull() {
			ga, sdk, stopN := NewNullTargets(NullOptions{Bin: b.nullBin, WorkDir: work, Port: 25810 + b.f.portOffset, Size: b.plan.Size})
			if want["null"] {
				b.runAll(ga)
			}
			if want["null-sdk"] {
				b.runAll(sdk)
			}
			stopN()
			if want["null-durable"] && ctx.Err() == nil {
				dt, stopD := NewNullDurableTarget(NullOptions{Bin: b.nullBin, WorkDir: work, Port: 25811 + b.f.portOffset, Size: b.plan.Size})
				b.runAll(dt)
				stopD()
			}
			if want["null-durable-retain"] && ctx.Err() == nil {
				dt, stopD := NewNullDurableRetainTarget(NullOptions{Bin: b.nullBin, WorkDir: work, Port: 25811 + b.f.portOffset, Size: b.plan.Size})
				b.runAll(dt)
				stopD()
			}
		}
		if !b.wantBusbar() || ctx.Err() != nil {
			continue
		}
		if want["busbar-memory"] {
			// Not durable: nothing on disk, otherwise the same binary.
			mt, _, stopM := NewBusbarTargets(BusbarOptions{Bin: b.bin, WorkDir: work, AMQPPort: 25802 + b.f.portOffset, HTTPPort: 25803 + b.f.portOffset, Src: b.src, Memory: true})
			b.runAll(mt)
			stopM()
		}
		if want["busbar-postgres"] && ctx.Err() == nil {
			pt, _, stopP := NewBusbarTargets(BusbarOptions{Bin: b.bin, WorkDir: work, AMQPPort: 25804 + b.f.portOffset, HTTPPort: 25805 + b.f.portOffset, Src: b.src, Postgres: b.f.postgres})
			b.skipW4(pt, "busbar-postgres")
			pt.DB = b.pgMeter()
			b.runAll(pt)
			stopP()
		}
		if want["busbar-cluster"] && ctx.Err() == nil {
			// Two nodes on -postgres: through the owner, then
			// through the other node.
			o := 25812 + b.f.portOffset
			ot, rt, stopC := NewClusterTargets(ClusterOptions{Bin: b.bin, WorkDir: work, Postgres: b.f.postgres, Ports: [2][3]int{{o, o + 1, o + 2}, {o + 3, o + 4, o + 5}}})
			ot.DB, rt.DB = b.pgMeter(), b.pgMeter()
			b.runAll(ot)
			b.runAll(rt)
			stopC()
		}
		if (want["busbar"] || want["sdk"]) && ctx.Err() == nil {
			ga, sdk, stopB := NewBusbarTargets(BusbarOptions{Bin: b.bin, WorkDir: work, AMQPPort: 25800 + b.f.portOffset, HTTPPort: 25801 + b.f.portOffset, Src: b.src})
			b.skipW4(ga, "busbar")
			if want["busbar"] {
				b.runAll(ga)
			}
			if want["sdk"] {
				b.runAll(sdk, "W1", "W2")
			}
			stopB()
		}
	}
	r.Round = 0
	prog.setRound(0, 0)
}

// rabbit runs the RabbitMQ targets, with -rabbitmq-sbin.
func (b *benchRun) rabbit() {
	if b.f.rmqSbin == "" || !(b.want["rabbitmq-amqp10"] || b.want["rabbitmq-amqp091"]) || b.ctx.Err() != nil {
		return
	}
	b.prog.set("starting RabbitMQ", 0)
	ts, stopR, err := NewRabbitTargets(b.ctx, RabbitOptions{SbinDir: b.f.rmqSbin, WorkDir: b.f.work, Port: 25673, DistPort: 25674, EPMDPort: 24369})
	if err != nil {
		b.prog.log("RabbitMQ: %v", err)
		return
	}
	b.skipW4(ts[0], "rabbitmq-amqp10")
	b.skipW4(ts[1], "rabbitmq-amqp091")
	if b.want["rabbitmq-amqp10"] {
		b.runAll(ts[0])
	}
	if b.want["rabbitmq-amqp091"] {
		b.runAll(ts[1])
	}
	b.prog.set("stopping RabbitMQ", 0)
	stopR()
}

// nats runs the NATS JetStream targets, with -nats-server.
func (b *benchRun) nats() {
	if b.f.natsBin == "" || b.ctx.Err() != nil {
		return
	}
	for _, always := range []bool{true, false} {
		name := "nats-default"
		port := 14222
		if always {
			name, port = "nats-always", 14223
		}
		if !b.want[name] || b.ctx.Err() != nil {
			continue
		}
		b.prog.set("starting "+name, 0)
		t, stopN, err := NewNATSTarget(b.ctx, NATSOptions{Bin: b.f.natsBin, WorkDir: b.f.work, Port: port, Always: always}, false)
		if err != nil {
			b.prog.log("%s: %v", name, err)
			continue
		}
		b.skipW4(t, name)
		b.runAll(t)
		serverConfirmedAcks(t)
		b.runAll(t, "W2")
		stopN()
	}
}

// report writes results.md to stdout and, with -out, results.md and
// results.csv into that directory.
func (b *benchRun) report(stdout io.Writer) error {
	var md strings.Builder
	built := b.built
	if b.pinNote != "" {
		built = strings.TrimSpace(built + "\n" + b.pinNote)
	}
	fmt.Fprintf(&md, "%s\n%s\n\nPhysical limits: %s\n\n", b.header, built, b.lim)
	fmt.Fprintf(&md, "Side by side (msgs/s · p99 · broker CPU µs per message · load average; W3: latency from the scheduled send time):\n\n")
	writeTables(&md, b.r.Results)
	fmt.Fprintf(&md, "\nAll figures:\n\n")
	WriteMarkdown(&md, b.r.Results)
	fmt.Fprintf(&md, "\nFinished %s (%.0f min).\n", time.Now().Format(time.RFC3339), time.Since(b.started).Minutes())
	fmt.Fprint(stdout, md.String())
	if b.f.out == "" {
		return nil
	}
	if err := os.MkdirAll(b.f.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.f.out, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(b.f.out, "results.csv"))
	if err != nil {
		return err
	}
	_ = WriteCSV(f, b.r.Results)
	f.Close()
	return nil
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
