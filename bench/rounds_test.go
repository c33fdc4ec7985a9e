package bench

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	testBusbar = "Busbar (AMQP 1.0, go-amqp)"
	testW5     = "5 subscriptions, 1 conn × window 256, no receivers"
)

// rres is a measured result of a -rounds run, as the harness makes it.
func rres(target, wl, params string, size, round int, rate float64) Result {
	metric := "send (confirmed)"
	if wl == "W5" {
		metric = "fan-out ingress"
	}
	return Result{Workload: wl, Target: target, Tier: "A", Params: params, Size: size, Metric: metric,
		Msgs: int64(rate), Secs: 1, Rate: rate, Lat: dist{P99: 2 * time.Millisecond}, CPUus: 10, SysPct: 20, ClientUs: 5, RSSMB: 30, Load: 1.5, StealPct: 0.5, Round: round}
}

func withSteal(r Result, pct float64) Result {
	r.StealPct = pct
	return r
}

func TestWriteRounds(t *testing.T) {
	null, busbar := nullGoAMQPName, testBusbar
	w1 := "1 conn × window 256"
	for _, tc := range []struct {
		name string
		rs   []Result
		want []string // lines (or parts of lines) the output must hold
		not  []string // ... and must not
	}{
		{
			name: "ceiling found",
			rs:   []Result{withSteal(rres(null, "W1", w1, 1024, 1, 20000), 3), withSteal(rres(busbar, "W1", w1, 1024, 1, 10000), 12)},
			want: []string{
				"| Busbar (AMQP 1.0) | W1 | 1 conn × window 256 | 1 KB | send (confirmed) | 1 | 10.0k | 20.0k | 0.50 | 12 / 3 |",
				"| | | | | | median (min–max) | **10.0k** (10.0k–10.0k) | **20.0k** (20.0k–20.0k) | **0.50** (0.50–0.50) | |",
			},
			not: []string{"| Null broker"},
		},
		{
			name: "a workload a target does not run has no rows",
			rs: []Result{
				rres(null, "W1", w1, 1024, 1, 20000),
				rres(nullDurableName, "W1", w1, 1024, 1, 15000),
				{Workload: "W5", Target: nullDurableName, Size: 1024, Round: 1, NA: nullDurableNA},
				{Workload: "W5", Target: nullDurableName, Size: 1024, Round: 2, NA: nullDurableNA},
				{Workload: "W2", Target: busbar, Params: "4 receiver × credit 200", Size: 1024, Round: 1, NA: "failed: connection reset"},
			},
			want: []string{
				"| Null broker, durable (AMQP 1.0) | W1 | 1 conn × window 256 | 1 KB | send (confirmed) | 1 | 15.0k | 20.0k | 0.75 |",
				"| Busbar (AMQP 1.0) | W2 | 4 receiver × credit 200 | 1 KB |  | 1 | failed: connection reset |",
			},
			not: []string{"| W5 |", nullDurableNA},
		},
		{
			name: "W5 against W1 1 × 256 of the same round and size",
			rs: []Result{
				rres(null, "W1", w1, 1024, 1, 20000), rres(null, "W1", "1 conn × window 16", 1024, 1, 9000), rres(null, "W1", w1, 128, 1, 30000),
				rres(null, "W1", w1, 1024, 2, 40000),
				rres(busbar, "W5", testW5, 1024, 1, 5000),
			},
			want: []string{"| Busbar (AMQP 1.0) | W5 | " + testW5 + " | 1 KB | fan-out ingress | 1 | 5.00k | 20.0k | 0.25 |"},
		},
		{
			name: "W5 with four connections against W1 4 × 64",
			rs: []Result{
				rres(null, "W1", w1, 1024, 1, 20000), rres(null, "W1", "4 conn × window 64", 1024, 1, 50000),
				rres(busbar, "W5", "5 subscriptions, 4 conn × window 64, no receivers", 1024, 1, 40000),
				rres(busbar, "W5", "5 subscriptions, 4 conn × window 64, 5 receivers draining", 1024, 1, 10000),
			},
			want: []string{
				"| Busbar (AMQP 1.0) | W5 | 5 subscriptions, 4 conn × window 64, no receivers | 1 KB | fan-out ingress | 1 | 40.0k | 50.0k | 0.80 |",
				"| Busbar (AMQP 1.0) | W5 | 5 subscriptions, 4 conn × window 64, 5 receivers draining | 1 KB | fan-out ingress | 1 | 10.0k | 50.0k | 0.20 |",
			},
		},
		{
			name: "no ceiling in that round",
			rs: []Result{
				rres(null, "W1", w1, 1024, 2, 20000),
				rres(busbar, "W1", w1, 1024, 1, 10000), rres(busbar, "W1", "1 conn × window 16", 1024, 2, 3000),
				{Workload: "W1", Target: busbar, Params: w1, Size: 1024, Metric: "send (confirmed)", NA: "error", Note: "boom", Round: 2, Rate: -1},
			},
			want: []string{
				"| Busbar (AMQP 1.0) | W1 | 1 conn × window 256 | 1 KB | send (confirmed) | 1 | 10.0k | – | – |",
				"| | | | | | 2 | error | 20.0k | – |",
				"| | | | | | median (min–max) | **10.0k** (10.0k–10.0k) | **20.0k** (20.0k–20.0k) | – |",
				"| Busbar (AMQP 1.0) | W1 | 1 conn × window 16 | 1 KB | send (confirmed) | 2 | 3.00k | – | – |",
				"| | | | | | median (min–max) | **3.00k** (3.00k–3.00k) | – | – |",
			},
		},
		{
			name: "odd number of rounds",
			rs: []Result{
				rres(null, "W1", w1, 1024, 1, 20000), rres(busbar, "W1", w1, 1024, 1, 10000),
				rres(null, "W1", w1, 1024, 2, 40000), rres(busbar, "W1", w1, 1024, 2, 30000),
				rres(null, "W1", w1, 1024, 3, 40000), rres(busbar, "W1", w1, 1024, 3, 20000),
			},
			want: []string{
				"| 2 | 30.0k | 40.0k | 0.75 |",
				"| 3 | 20.0k | 40.0k | 0.50 |",
				"| median (min–max) | **20.0k** (10.0k–30.0k) | **40.0k** (20.0k–40.0k) | **0.50** (0.50–0.75) |",
			},
		},
		{
			name: "even number of rounds: the lower middle one",
			rs: []Result{
				rres(null, "W1", w1, 1024, 1, 20000), rres(busbar, "W1", w1, 1024, 1, 16000),
				rres(null, "W1", w1, 1024, 2, 20000), rres(busbar, "W1", w1, 1024, 2, 12000),
				rres(null, "W1", w1, 1024, 3, 20000), rres(busbar, "W1", w1, 1024, 3, 14000),
				rres(null, "W1", w1, 1024, 4, 20000), rres(busbar, "W1", w1, 1024, 4, 10000),
			},
			want: []string{"| median (min–max) | **12.0k** (10.0k–16.0k) | **20.0k** (20.0k–20.0k) | **0.60** (0.50–0.80) |"},
		},
		{
			name: "W3: p99 latency against the ceiling's, not the paced rate",
			rs: func() []Result {
				n, b := rres(null, "W3", "5000 msg/s", 1024, 1, 5000), rres(busbar, "W3", "5000 msg/s", 1024, 1, 5000)
				n.Lat.P99, b.Lat.P99 = 2500*time.Microsecond, 7500*time.Microsecond
				return []Result{n, b}
			}(),
			want: []string{
				"| Busbar (AMQP 1.0) | W3 | 5000 msg/s | 1 KB | send (confirmed) | 1 | 7.5 ms | 2.5 ms | 3.00 |",
				"| | | | | | median (min–max) | **7.5 ms** (7.5 ms–7.5 ms) | **2.5 ms** (2.5 ms–2.5 ms) | **3.00** (3.00–3.00) |",
			},
		},
		{
			name: "pinned",
			rs:   []Result{rres(null+" [pinned]", "W1", w1, 1024, 1, 20000), rres(busbar+" [pinned]", "W1", w1, 1024, 1, 5000)},
			want: []string{"| Busbar (AMQP 1.0) [pinned] | W1 | 1 conn × window 256 | 1 KB | send (confirmed) | 1 | 5.00k | 20.0k | 0.25 |"},
		},
		{
			name: "no rounds, no section",
			rs:   []Result{rres(null, "W1", w1, 1024, 0, 20000), rres(busbar, "W1", w1, 1024, 0, 10000)},
			not:  []string{"Rounds", "|"},
		},
		{
			name: "only the null broker has rounds",
			rs:   []Result{rres(null, "W1", w1, 1024, 1, 20000), rres(nullSDKName, "W1", w1, 1024, 1, 900)},
			not:  []string{"Rounds", "|"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			WriteRounds(&b, tc.rs)
			out := b.String()
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "|") && strings.Count(l, "|") != 11 {
					t.Errorf("row %q: %d cells, want 10", l, strings.Count(l, "|")-1)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("%q in\n%s", n, out)
				}
			}
		})
	}
}

func TestCSVRounds(t *testing.T) {
	rs := []Result{
		rres(nullGoAMQPName, "W1", "1 conn × window 256", 1024, 1, 20000),
		rres(testBusbar, "W5", testW5, 1024, 2, 5000),
		rres(testBusbar, "W1", "1 conn × window 1", 128, 0, 700),
		{Workload: "W5", Target: nullGoAMQPName, Tier: "none", Size: 1024, CPUus: -1, SysPct: -1, ClientUs: -1, RSSMB: -1, Rate: 0, Load: 0.5, StealPct: -1, DBus: -1, WALBytes: -1, NA: nullNA, Note: "a, \"quoted\" note", Round: 3},
	}
	rs[1].StealPct = 37.5
	rs[1].DBus, rs[1].WALBytes = 42.5, 1873
	for i := range rs {
		rs[i].Lat = dist{P50: time.Millisecond, P99: 2 * time.Millisecond, P999: 3 * time.Millisecond, Max: 4 * time.Millisecond}
		if rs[i].NA != "" {
			rs[i].Lat, rs[i].Msgs, rs[i].Secs = dist{}, 0, 0
		}
	}
	var b strings.Builder
	if err := WriteCSV(&b, rs); err != nil {
		t.Fatal(err)
	}
	header := strings.SplitN(b.String(), "\n", 2)[0]
	if !strings.HasSuffix(header, ",note,round,steal_pct,db_cpu_us_per_msg,wal_bytes_per_msg") {
		t.Errorf("header %q: want round, steal_pct and the database columns last", header)
	}
	got, err := ReadCSV(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rs) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, rs)
	}

	// A results.csv of an earlier version: no round or steal column.
	old := "workload,target,tier,params,size_bytes,metric,msgs,secs,msgs_per_s,mb_per_s,p50_ms,p99_ms,p999_ms,max_ms,broker_cpu_us_per_msg,broker_sys_pct,client_cpu_us_per_msg,broker_rss_mb,load1,na,note\n" +
		"W1,Busbar (AMQP 1.0 go-amqp),A,1 conn × window 256,1024,send (confirmed),80000,4.000,20000,20.48,1.000,2.000,3.000,4.000,10.0,20,5.0,30,1.50,,a note\n"
	got, err = ReadCSV(strings.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Workload: "W1", Target: "Busbar (AMQP 1.0 go-amqp)", Tier: "A", Params: "1 conn × window 256", Size: 1024, Metric: "send (confirmed)",
		Msgs: 80000, Secs: 4, Rate: 20000, Lat: dist{P50: time.Millisecond, P99: 2 * time.Millisecond, P999: 3 * time.Millisecond, Max: 4 * time.Millisecond},
		CPUus: 10, SysPct: 20, ClientUs: 5, RSSMB: 30, Load: 1.5, StealPct: -1, DBus: -1, WALBytes: -1, Note: "a note"}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("old CSV read as\n%+v\nwant\n%+v", got, want)
	}
}

func TestPivotRounds(t *testing.T) {
	w1 := "1 conn × window 256"
	var rs []Result
	for i, rates := range [][2]float64{{20000, 11000}, {40000, 13000}, {30000, 12000}, {10000, 14000}} {
		rs = append(rs, rres(nullGoAMQPName, "W1", w1, 1024, i+1, rates[0]),
			Result{Workload: "W5", Target: nullGoAMQPName, Tier: "none", Size: 1024, NA: nullNA, Round: i + 1},
			rres(testBusbar, "W1", w1, 1024, i+1, rates[1]), rres(testBusbar, "W5", testW5, 1024, i+1, 5000+float64(i)*100))
	}
	for _, tc := range []struct {
		name   string
		rounds int
		want   []string
	}{
		// Rates of three rounds: null 20k 40k 30k, Busbar 11k 13k 12k.
		{"odd", 3, []string{"**30.0k** · p99 2.0 ms · 10 µs (load 1.5) · median of 3 rounds", "**12.0k** · p99 2.0 ms · 10 µs (load 1.5) · median of 3 rounds",
			"**5.10k** · p99 2.0 ms · 10 µs (load 1.5) · median of 3 rounds", "| " + nullNA + " |"}},
		// Four: null 10k 20k 30k 40k, Busbar 11k 12k 13k 14k.
		{"even", 4, []string{"**20.0k** · p99 2.0 ms · 10 µs (load 1.5) · median of 4 rounds", "**12.0k** · p99 2.0 ms · 10 µs (load 1.5) · median of 4 rounds",
			"**5.10k** · p99 2.0 ms · 10 µs (load 1.5) · median of 4 rounds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			WritePivot(&b, rs[:4*tc.rounds])
			out := b.String()
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 4 { // header, rule, W1, W5
				t.Fatalf("%d lines, want 4:\n%s", len(lines), out)
			}
			// The null broker's n/a for all of W5 sits in Busbar's W5 row.
			if w5 := lines[3]; !strings.HasPrefix(w5, "| W5 | "+testW5+" |") || !strings.Contains(w5, "| "+nullNA+" |") {
				t.Errorf("W5 row %q: want Busbar's parameters and the null broker's n/a", w5)
			}
			if n := strings.Count(lines[0], "|"); n != 7 { // 4 + 2 targets
				t.Errorf("header %q: want 2 target columns", lines[0])
			}
			for _, l := range lines[2:] {
				if n := strings.Count(l, "|"); n != 7 {
					t.Errorf("row %q: %d cells, want 6", l, n-1)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in\n%s", w, out)
				}
			}
		})
	}
}

func TestPivotNoRounds(t *testing.T) {
	// Without rounds a repeated cell shows its last result, as before
	// (NATS's DoubleAck variant of W2).
	rs := []Result{rres(testBusbar, "W1", "1 conn × window 1", 1024, 0, 1000), rres(testBusbar, "W1", "1 conn × window 1", 1024, 0, 2000)}
	var b strings.Builder
	WritePivot(&b, rs)
	if out := b.String(); !strings.Contains(out, "**2.00k** · p99 2.0 ms · 10 µs (load 1.5) |") || strings.Contains(out, "median") {
		t.Errorf("got\n%s", out)
	}
	// Steal of 1 % or more is shown with the load.
	rs[1].StealPct = 12.3
	b.Reset()
	WritePivot(&b, rs)
	if out := b.String(); !strings.Contains(out, "**2.00k** · p99 2.0 ms · 10 µs (load 1.5, steal 12 %) |") {
		t.Errorf("got\n%s", out)
	}
}

// A workload that only some target skipped whole keeps its own row when
// no target measured it.
func TestPivotNAOnly(t *testing.T) {
	rs := []Result{rres(nullGoAMQPName, "W1", "1 conn × window 256", 1024, 0, 20000),
		{Workload: "W5", Target: nullGoAMQPName, Tier: "none", Size: 1024, NA: nullNA}}
	var b strings.Builder
	WritePivot(&b, rs)
	if out := b.String(); !strings.Contains(out, "| W5 |  | 1 KB |  | "+nullNA+" |") {
		t.Errorf("no W5 n/a row in\n%s", out)
	}
}

func TestRunsInRound(t *testing.T) {
	for _, tc := range []struct {
		w    string
		k    int
		want bool
	}{{"W4", 0, true}, {"W4", 1, true}, {"W4", 2, false}, {"W1", 3, true}, {"W5", 2, true}} {
		if got := runsInRound(tc.w, tc.k); got != tc.want {
			t.Errorf("runsInRound(%s, %d) = %v, want %v", tc.w, tc.k, got, tc.want)
		}
	}
}

// Main with -rounds runs W1 in every round and W4 (the 1M backlog and
// kill -9) in the first round only.
func TestMainRoundsRunW4Once(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "busbar")
	if err := BuildBusbar("..", bin); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "out")
	var stdout, stderr strings.Builder
	args := []string{"-busbar-bin", bin, "-work", filepath.Join(work, "w"), "-out", out, "-plan", "smoke",
		"-targets", "busbar", "-workloads", "W1,W4", "-w1-cells", "1x1", "-sizes", "none", "-w4-msgs", "300",
		"-rounds", "2", "-limits", "0"}
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("Main exited %d: %s", code, stderr.String())
	}
	f, err := os.Open(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := ReadCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]map[int]int{"W1": {}, "W4": {}}
	for _, r := range rs {
		if r.NA != "" {
			t.Errorf("%s %s round %d: %s %s", r.Workload, r.Params, r.Round, r.NA, r.Note)
		}
		if m := n[r.Workload]; m != nil {
			m[r.Round]++
		}
	}
	if n["W1"][1] == 0 || n["W1"][2] == 0 {
		t.Errorf("W1 rows per round %v, want some in rounds 1 and 2", n["W1"])
	}
	if n["W4"][1] == 0 || len(n["W4"]) != 1 {
		t.Errorf("W4 rows per round %v, want them in round 1 only", n["W4"])
	}
}
