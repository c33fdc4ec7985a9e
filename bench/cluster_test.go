package bench

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// TestClusterSmoke runs the relay cells (busbar-bench target
// busbar-cluster) with tiny counts: two `busbar serve --cluster` nodes
// built from the work tree on a pgtest PostgreSQL, W1 and W2 through the
// owner of each queue and through the other node. Every cell has
// messages, the CPU of both nodes with each one's share in the notes,
// and the database's CPU and WAL per message.
func TestClusterSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two brokers and PostgreSQL")
	}
	pg, err := pgtest.Start()
	if errors.Is(err, pgtest.ErrNoPostgres) {
		t.Skipf("skipped: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	url, err := pg.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	bin := filepath.Join(work, "busbar")
	src := os.Getenv("BUSBAR_BENCH_SRC")
	if src == "" {
		src = ".."
	}
	if err := BuildBusbar(src, bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	db, err := newPGMeter(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.close()
	p := freePorts(t, 6)
	ot, rt, stop := NewClusterTargets(ClusterOptions{Bin: bin, WorkDir: work, Postgres: url, Ports: [2][3]int{{p[0], p[1], p[2]}, {p[3], p[4], p[5]}}})
	defer stop()
	ot.DB, rt.DB = db, db
	prog := newProgress(io.Discard, true)
	defer prog.close()
	plan := SmokePlan()
	plan.W1Windows, plan.W1Sizes, plan.W2Cells = [][2]int{{2, 16}}, nil, [][2]int{{1, 20}}
	r := &Runner{Plan: plan, Prog: prog, OnResult: func(res Result) {
		t.Logf("%s %s %s: %.0f msg/s p50 %s ms, nodes %.1f µs/msg, db %.1f µs/msg, WAL %.0f B/msg %s %s", res.Workload, res.Target, res.Params, res.Rate, ms(res.Lat.P50), res.CPUus, res.DBus, res.WALBytes, res.NA, res.Note)
	}}
	for _, tg := range []*Target{ot, rt} {
		r.W1(ctx, tg)
		r.W2(ctx, tg)
	}
	stop()
	if len(r.Results) != 4 {
		t.Fatalf("%d results, want 4", len(r.Results))
	}
	// CPU is read from /proc in ticks of 10 ms, and a smoke run of a few
	// hundred messages may cost a node less than a tick: one run may
	// read 0, but every run's reading is taken, and not all are 0.
	var cpu float64
	for _, res := range r.Results {
		cpu += res.CPUus
		switch {
		case res.NA != "":
			t.Errorf("%s %s: %s %s", res.Workload, res.Target, res.NA, res.Note)
		case res.Msgs <= 0:
			t.Errorf("%s %s: no messages", res.Workload, res.Target)
		case res.CPUus < 0 || !strings.Contains(res.Note, "; CPU µs/msg: owner "):
			t.Errorf("%s %s: nodes' CPU %.1f µs/msg, note %q", res.Workload, res.Target, res.CPUus, res.Note)
		case !strings.Contains(res.Note, "; store: ") || !strings.Contains(res.Note, "synced transactions"):
			t.Errorf("%s %s: no store transactions in the note %q", res.Workload, res.Target, res.Note)
		case res.DBus < 0 || res.WALBytes <= 0:
			t.Errorf("%s %s: database CPU %.1f µs/msg, WAL %.0f B/msg", res.Workload, res.Target, res.DBus, res.WALBytes)
		}
	}
	if cpu <= 0 {
		t.Errorf("the nodes' CPU read 0 in all %d runs", len(r.Results))
	}
}
