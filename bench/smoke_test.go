package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freePorts returns n distinct free loopback ports. It holds every
// listener until it has all of them: freed one by one, the kernel may
// hand out the same port twice (CI once got the AMQP and the HTTP port
// equal, and every durable smoke cell failed to start).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// TestSmoke runs every workload against Busbar (built from the work
// tree) with tiny counts, so that the harness cannot rot. The full
// benchmark is `go run ./cmd/busbar-bench` (see peers.sh).
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "busbar")
	// BUSBAR_BENCH_SRC points at another source tree (e.g. an export of
	// HEAD while the work tree is mid-edit).
	src := os.Getenv("BUSBAR_BENCH_SRC")
	if src == "" {
		src = ".."
	}
	src, _ = filepath.Abs(src)
	if err := BuildBusbar(src, bin); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 4)
	ga, sdk, stop := NewBusbarTargets(BusbarOptions{Bin: bin, WorkDir: work, AMQPPort: ports[0], HTTPPort: ports[1], Src: src})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prog := newProgress(io.Discard, true)
	defer prog.close()
	r := &Runner{Plan: SmokePlan(), Prog: prog, OnResult: func(res Result) {
		t.Logf("%s %s %s %s: %.0f msg/s p99 %s ms cpu %.1f µs/msg %s %s", res.Workload, res.Target, res.Params, res.Metric, res.Rate, ms(res.Lat.P99), res.CPUus, res.NA, res.Note)
	}}
	r.W1(ctx, ga)
	r.W2(ctx, ga)
	r.W3(ctx, ga)
	r.W4(ctx, ga)
	r.W5(ctx, ga)
	r.Plan.W1Windows, r.Plan.W1Sizes, r.Plan.W2Cells = [][2]int{{1, 8}}, nil, [][2]int{{1, 20}}
	r.W1(ctx, sdk)
	r.W2(ctx, sdk)
	stop()

	// The same binary with serve --memory (busbar-bench target
	// busbar-memory): not durable, W4 not run.
	mt, _, stopM := NewBusbarTargets(BusbarOptions{Bin: bin, WorkDir: work, AMQPPort: ports[2], HTTPPort: ports[3], Src: src, Memory: true})
	defer stopM()
	r.Plan.W1Windows, r.Plan.W5Subs = [][2]int{{1, 16}}, []int{2}
	r.W1(ctx, mt)
	if n := diskUsage(mt.dataDir()); n != 0 {
		t.Errorf("busbar --memory wrote %d bytes under %s", n, mt.dataDir())
	}
	r.W2(ctx, mt)
	r.W3(ctx, mt)
	r.W4(ctx, mt)
	r.W5(ctx, mt)
	stopM()

	seen := map[string]bool{}
	for _, res := range r.Results {
		seen[res.Workload+" "+res.Target] = true
		checkW3(t, res)
		memory := res.Target == mt.Client.Name()
		if memory && res.Tier != memoryTier {
			t.Errorf("%s %s: tier %q, want %q", res.Workload, res.Target, res.Tier, memoryTier)
		}
		switch {
		case memory && res.Workload == "W4":
			if res.NA != mt.SkipW4 {
				t.Errorf("W4 %s: %q, want %q", res.Target, res.NA, mt.SkipW4)
			}
		case res.NA == "n/a (topics not yet available)" && res.Workload == "W5":
		case res.NA != "":
			t.Errorf("%s %s %s: %s %s", res.Workload, res.Target, res.Params, res.NA, res.Note)
		case res.Msgs <= 0 && res.Metric != killMetric:
			t.Errorf("%s %s %s: no messages", res.Workload, res.Target, res.Params)
		case res.Metric == killMetric && res.Lat.Max <= 0:
			t.Errorf("W4: no first-delivery time")
		case res.Metric != killMetric && (res.CPUus < 0 || res.RSSMB <= 0):
			t.Errorf("%s %s %s: broker CPU %.1f µs/msg, RSS %.0f MB: not read from /proc", res.Workload, res.Target, res.Params, res.CPUus, res.RSSMB)
		case res.Target == ga.Client.Name() && (res.Workload == "W1" || res.Workload == "W2") && !strings.Contains(res.Note, "; store: "):
			t.Errorf("%s %s %s: the store's transactions are not in the note %q", res.Workload, res.Target, res.Params, res.Note)
		case res.CPUus >= 0 && res.StealPct < 0:
			t.Errorf("%s %s %s: broker CPU measured but not the machine's steal", res.Workload, res.Target, res.Params)
		case strings.HasPrefix(res.Note, "drained") && !strings.HasPrefix(res.Note, "drained 2000 of 2000"):
			t.Errorf("W4 drain: %s", res.Note)
		}
	}
	for _, want := range []string{"W1 " + ga.Client.Name(), "W2 " + ga.Client.Name(), "W3 " + ga.Client.Name(), "W4 " + ga.Client.Name(), "W5 " + ga.Client.Name(),
		"W1 " + sdk.Client.Name(), "W2 " + sdk.Client.Name(),
		"W1 " + mt.Client.Name(), "W2 " + mt.Client.Name(), "W3 " + mt.Client.Name(), "W4 " + mt.Client.Name(), "W5 " + mt.Client.Name()} {
		if !seen[want] {
			t.Errorf("no result for %s", want)
		}
	}
	var md, csv strings.Builder
	WriteMarkdown(&md, r.Results)
	if err := WriteCSV(&csv, r.Results); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(csv.String(), "\n"); n != len(r.Results)+1 {
		t.Errorf("CSV has %d lines for %d results", n, len(r.Results))
	}
	// The tier stands next to every figure: in the side-by-side header.
	var pv strings.Builder
	WritePivot(&pv, r.Results)
	for _, want := range []string{"Busbar (AMQP 1.0) [Tier A]", "Busbar (SDK) [Tier A]", "[Tier " + memoryTier + "]"} {
		if !strings.Contains(pv.String(), want) {
			t.Errorf("side-by-side table lacks %q:\n%s", want, pv.String())
		}
	}
}

// checkW3 checks a W3 row: every message sent came back, carrying its
// send time (a message the sender did not send, such as the null
// broker's pre-encoded one, would give nonsense latencies).
func checkW3(t *testing.T, res Result) {
	t.Helper()
	if res.Workload != "W3" || res.NA != "" {
		return
	}
	var sent, got int64
	if i := strings.Index(res.Note, "sent "); i >= 0 {
		fmt.Sscanf(res.Note[i:], "sent %d received %d", &sent, &got)
	}
	if sent <= 0 || got != sent || res.Lat.P50 <= 0 || res.Lat.Max > 10*time.Second {
		t.Errorf("W3 %s: sent %d received %d, p50 %v max %v (%s)", res.Target, sent, got, res.Lat.P50, res.Lat.Max, res.Note)
	}
}

func TestDist(t *testing.T) {
	var r recorder
	for i := 1; i <= 1000; i++ {
		r.add(time.Duration(i) * time.Millisecond)
	}
	d := r.dist()
	if d.P50 != 500*time.Millisecond || d.P99 != 990*time.Millisecond || d.P999 != 999*time.Millisecond || d.Max != time.Second {
		t.Fatalf("%+v", d)
	}
}

// TestSmokeNull runs W1 and W2 against the null broker (cmd/busbar-null)
// with go-amqp and with the SDK and against the durable null broker
// (null-durable, whose journal must have synced every message), and W3
// (the forwarding mode, also durable) with go-amqp, for a second or two
// each.
func TestSmokeNull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the null broker")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "busbar-null")
	if err := BuildNull(".", os.Getenv("BUSBAR_BENCH_SRC"), bin); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	ga, sdk, stop := NewNullTargets(NullOptions{Bin: bin, WorkDir: work, Port: ports[0], Size: 1024})
	defer stop()
	dt, stopD := NewNullDurableTarget(NullOptions{Bin: bin, WorkDir: work, Port: ports[1], Size: 1024})
	defer stopD()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := newProgress(io.Discard, true)
	defer prog.close()
	p := SmokePlan()
	p.W1Windows, p.W1Sizes, p.W2Cells = [][2]int{{1, 16}, {2, 8}}, nil, [][2]int{{1, 20}, {2, 20}}
	r := &Runner{Plan: p, Prog: prog, OnResult: func(res Result) {
		t.Logf("%s %s %s %s: %.0f msg/s p99 %s ms broker %.1f µs/msg client %.1f µs/msg %s %s", res.Workload, res.Target, res.Params, res.Metric, res.Rate, ms(res.Lat.P99), res.CPUus, res.ClientUs, res.NA, res.Note)
	}}
	for _, tg := range []*Target{ga, sdk, dt} {
		r.W1(ctx, tg)
		r.W2(ctx, tg)
	}
	r.W3(ctx, ga)
	r.W3(ctx, dt)
	if len(r.Results) != 14 {
		t.Errorf("%d results, want 14", len(r.Results))
	}
	// The durable null broker's processes (one per cell) each said, on
	// exit, how much their journal synced.
	stopD()
	log, err := os.ReadFile(filepath.Join(work, "busbar-null-durable.log"))
	if err != nil {
		t.Fatal(err)
	}
	var syncs, bytes, want int64
	for _, l := range strings.Split(string(log), "\n") {
		var s, b int64
		if _, err := fmt.Sscanf(l, "busbar-null: journal: %d fdatasyncs, %d bytes", &s, &b); err == nil {
			syncs, bytes = syncs+s, bytes+b
		}
	}
	for _, res := range r.Results {
		switch {
		case res.Target != nullDurableName:
		case res.Workload == "W1":
			want += res.Msgs * 1024 // each payload
		case res.Workload == "W2":
			want += res.Msgs * 16 // each complete's delivery tag
		case res.Workload == "W3":
			want += res.Msgs * 1024 // each payload, forwarded once synced
		}
	}
	if syncs == 0 || want == 0 || bytes < want {
		t.Errorf("durable null broker: %d fdatasyncs, %d bytes journaled, want ≥ %d", syncs, bytes, want)
	}
	for _, res := range r.Results {
		checkW3(t, res)
		switch {
		case res.NA != "":
			t.Errorf("%s %s %s: %s %s", res.Workload, res.Target, res.Params, res.NA, res.Note)
		case res.Msgs <= 0:
			t.Errorf("%s %s %s: no messages", res.Workload, res.Target, res.Params)
		case res.CPUus < 0:
			t.Errorf("%s %s %s: no broker CPU figure", res.Workload, res.Target, res.Params)
		}
	}
}
