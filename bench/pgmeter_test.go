package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// TestProcTreeCPUFake sums a fake /proc (testdata/proc): the postmaster
// 500 with 1.5 s of its own and 3 s reaped, its children 501 and 502, and
// 503, a child of 502 whose name has a space and a ')'. Init and its
// other child 600 are not counted.
func TestProcTreeCPUFake(t *testing.T) {
	got, err := procTreeCPU("testdata/proc", 500)
	if err != nil {
		t.Fatal(err)
	}
	if want := 8100 * time.Millisecond; got != want {
		t.Fatalf("tree of 500: %v, want %v", got, want)
	}
	if got, err := procTreeCPU("testdata/proc", 503); err != nil || got != 100*time.Millisecond {
		t.Fatalf("tree of 503: %v, %v; want 100ms", got, err)
	}
	if _, err := procTreeCPU("testdata/proc", 999); err == nil {
		t.Fatal("a missing root was not an error")
	}
}

func TestPostmasterPID(t *testing.T) {
	dir := t.TempDir()
	if _, err := postmasterPID(dir); err == nil {
		t.Fatal("no postmaster.pid: no error")
	}
	// The file's first line is the PID, the data directory the second.
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte("4242\n"+dir+"\n1700000000\n5432\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid, err := postmasterPID(dir); err != nil || pid != 4242 {
		t.Fatalf("postmasterPID: %d, %v", pid, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := postmasterPID(dir); err == nil {
		t.Fatal("a bad postmaster.pid: no error")
	}
}

// TestProcTreeCPULive counts a real child process: while it runs, as a
// live descendant, and after it has been reaped, in this process's
// reaped time; the tree's time never goes back.
func TestProcTreeCPULive(t *testing.T) {
	self := os.Getpid()
	before, err := procTreeCPU("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	// A shell loop that burns some CPU, then waits to be killed.
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done; exec sleep 60`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := out.Read(make([]byte, 5)); err != nil { // "done": the loop has run
		t.Fatal(err)
	}
	child, err := procCPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if child < 20*time.Millisecond {
		t.Fatalf("the child used only %v", child)
	}
	live, err := procTreeCPU("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	if live < before+child {
		t.Fatalf("tree with the child live: %v < %v before + %v child", live, before, child)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: its time moves to this process's cutime
	reaped, err := procTreeCPU("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	if reaped < live {
		t.Fatalf("tree after reaping the child: %v < %v while it ran", reaped, live)
	}
}

func TestPerMsg(t *testing.T) {
	a := pgReading{cpu: time.Second, lsn: 1000, ok: true}
	b := pgReading{cpu: 3 * time.Second, lsn: 1000 + 2_000_000, ok: true}
	if c, w := perMsg(a, b, 1000); c != 2000 || w != 2000 {
		t.Fatalf("perMsg: %v µs, %v B", c, w)
	}
	if c, w := perMsg(pgReading{}, b, 1000); c != -1 || w != -1 {
		t.Fatalf("unknown start: %v, %v", c, w)
	}
	if c, w := perMsg(a, b, 0); c != -1 || w != -1 {
		t.Fatalf("no messages: %v, %v", c, w)
	}
}

// TestPGMeter measures a real PostgreSQL (pgtest) around a statement
// run on a connection of its own that is closed before the second
// reading: its backend's CPU is then in the postmaster's reaped time.
// 10,000 rows of 1 KB write well over 10 MB of WAL.
func TestPGMeter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := newPGMeter(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if m.pid != pg.PID() {
		t.Fatalf("meter on PID %d, the postmaster is %d", m.pid, pg.PID())
	}
	a := m.read()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE t (b text); INSERT INTO t SELECT repeat('x', 1024) || i FROM generate_series(1, 10000) i`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	b := m.read()
	if !a.ok || !b.ok {
		t.Fatalf("readings %+v %+v", a, b)
	}
	cpu, wal := perMsg(a, b, 1)
	t.Logf("the insert: %.0f µs of database CPU, %.0f bytes of WAL", cpu, wal)
	if wal < 10<<20 {
		t.Errorf("WAL %.0f bytes, want over 10 MB", wal)
	}
	if cpu <= 0 {
		t.Errorf("database CPU %.0f µs, want some", cpu)
	}
}

// twoProcs is a multiProcess of this process and a child.
type twoProcs struct{ pids []int }

func (p twoProcs) PID() int        { return p.pids[0] }
func (p twoProcs) DataDir() string { return "" }
func (p twoProcs) PIDs() []int     { return p.pids }
func (p twoProcs) Roles() []string { return []string{"owner", "other node"} }

// TestMeterMultiProcess: a broker of two processes (a cluster) is
// metered as their sum, and the note gives each one's share.
func TestMeterMultiProcess(t *testing.T) {
	cmd := exec.Command("sh", "-c", `read go; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done; exec sleep 60`)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	procs := twoProcs{[]int{os.Getpid(), cmd.Process.Pid}}
	tg := &Target{Proc: func() Process { return procs }}
	m := &meter{t: tg, pid: tg.pid(), stop: make(chan struct{})}
	m.mark()
	c0, _ := procCPU(cmd.Process.Pid)
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Read(make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	c1, _ := procCPU(cmd.Process.Pid)
	res := Result{}
	m.record(&res, 1000)
	child := float64(c1-c0) / 1e3 / 1000
	if child < 10 || res.CPUus < child {
		t.Fatalf("CPU %.1f µs/msg for both, the child alone %.1f", res.CPUus, child)
	}
	if note := m.pinNote(); !strings.Contains(note, "; CPU µs/msg: owner ") || !strings.Contains(note, ", other node ") {
		t.Fatalf("note %q", note)
	}
	if res.DBus != 0 || res.WALBytes != 0 {
		t.Fatalf("database figures set without a database meter: %v, %v", res.DBus, res.WALBytes)
	}
}

func TestStoreStats(t *testing.T) {
	text := "# HELP busbar_store_fsync_seconds x\nbusbar_store_fsync_seconds_bucket{le=\"0.001\"} 3\nbusbar_store_fsync_seconds_sum 0.5\nbusbar_store_fsync_seconds_count 10\n" +
		"busbar_store_group_commit_size_sum 40\nbusbar_store_group_commit_size_count 10\n"
	a := parseStoreStats(text)
	if !a.ok || a.txns != 10 || a.secs != 0.5 || a.commits != 40 {
		t.Fatalf("parsed %+v", a)
	}
	b := storeStats{txns: 110, secs: 1.5, commits: 240, ok: true}
	if got, want := storeNote(a, b, 5000), "; store: 100 synced transactions, 50.0 msgs and 2.0 commits each, 10.0 ms mean"; got != want {
		t.Fatalf("note %q, want %q", got, want)
	}
	if got := storeNote(storeStats{}, b, 5000); got != "" {
		t.Fatalf("unknown start: %q", got)
	}
	if s := parseStoreStats("busbar_store_fsync_seconds_count 1\n"); s.ok {
		t.Fatalf("partial metrics read as %+v", s)
	}
}
