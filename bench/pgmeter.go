package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// procStat is what procTreeCPU reads from one /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	// own is utime+stime; reaped is cutime+cstime (the CPU time of the
	// children this process has waited for, theirs included).
	own, reaped time.Duration
}

// readProcStat parses one /proc/<pid>/stat file.
func readProcStat(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	// The command name may contain spaces and parentheses: fields start
	// after the last ')'.
	i := strings.LastIndexByte(s, ')')
	j := strings.IndexByte(s, ' ')
	if i < 0 || j < 0 || j > i {
		return procStat{}, fmt.Errorf("bad stat %s", path)
	}
	pid, err := strconv.Atoi(s[:j])
	if err != nil {
		return procStat{}, fmt.Errorf("bad stat %s: %w", path, err)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[11..14] fields
	// 14..17 (utime, stime, cutime, cstime).
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("short stat %s", path)
	}
	var v [5]int64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		if v[k], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return procStat{}, fmt.Errorf("bad stat %s: %w", path, err)
		}
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clkTck }
	return procStat{pid: pid, ppid: int(v[0]), own: tick(v[1] + v[2]), reaped: tick(v[3] + v[4])}, nil
}

// procTreeCPU returns the CPU time (user + system) that process root and
// all its descendants have used, read from the proc file system at
// procRoot (/proc): the sum, over root and every live descendant, of its
// own time and the time of the children it has reaped. A process that
// exited is counted in its parent's reaped time once the parent has
// waited for it (PostgreSQL's postmaster reaps its backends), and live
// ones are counted themselves, so a difference of two readings is the
// tree's CPU in between, whichever processes came and went. A process
// that exits between the readings of its parent and of itself may be
// missed once; processes are listed, not locked.
func procTreeCPU(procRoot string, root int) (time.Duration, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, err
	}
	children := map[int][]int{}
	stats := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
	}
	if _, ok := stats[root]; !ok {
		return 0, fmt.Errorf("no process %d under %s", root, procRoot)
	}
	var total time.Duration
	seen := map[int]bool{}
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		st := stats[pid]
		total += st.own + st.reaped
		stack = append(stack, children[pid]...)
	}
	return total, nil
}

// postmasterPID reads the postmaster's PID, the first line of
// postmaster.pid in a PostgreSQL data directory.
func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad postmaster.pid in %s: %q", dataDir, line)
	}
	return pid, nil
}

// pgMeter measures a local PostgreSQL server during a cell: the CPU time
// of all its processes (procTreeCPU from the postmaster) and the WAL it
// wrote (pg_current_wal_lsn). It keeps one connection for the LSN
// queries; their own WAL is none and their CPU is a few statements per
// cell.
type pgMeter struct {
	mu   sync.Mutex
	conn *pgx.Conn
	pid  int // the postmaster
}

// newPGMeter connects to url and finds the postmaster of that server
// through its data directory (SHOW data_directory: the role must be a
// superuser or in pg_read_all_settings, as pg-temp.sh's is). The server
// must run on this machine: its processes are read from /proc.
func newPGMeter(ctx context.Context, url string) (*pgMeter, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("database meter: %w", err)
	}
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("database meter: SHOW data_directory: %w", err)
	}
	pid, err := postmasterPID(dir)
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("database meter (is PostgreSQL on this machine?): %w", err)
	}
	if _, err := procTreeCPU("/proc", pid); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("database meter: %w", err)
	}
	return &pgMeter{conn: conn, pid: pid}, nil
}

// pgReading is one reading of a pgMeter.
type pgReading struct {
	cpu time.Duration
	lsn int64 // WAL position in bytes
	ok  bool
}

// read takes a reading; ok is false when either half failed.
func (p *pgMeter) read() pgReading {
	if p == nil {
		return pgReading{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cpu, err := procTreeCPU("/proc", p.pid)
	if err != nil {
		return pgReading{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var lsn int64
	if err := p.conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&lsn); err != nil {
		return pgReading{}
	}
	return pgReading{cpu: cpu, lsn: lsn, ok: true}
}

// perMsg returns the database CPU µs and WAL bytes per message between
// two readings, -1 each when unknown.
func perMsg(a, b pgReading, msgs int64) (cpuUs, walBytes float64) {
	if !a.ok || !b.ok || msgs <= 0 || b.cpu < a.cpu || b.lsn < a.lsn {
		return -1, -1
	}
	return float64(b.cpu-a.cpu) / 1e3 / float64(msgs), float64(b.lsn-a.lsn) / float64(msgs)
}

func (p *pgMeter) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.conn.Close(ctx)
}

// storeStats is what scrapeStore reads from a broker's GET /metrics: the
// store's synced commit transactions (fsync rounds for the file store),
// the time they took, and the broker commits they carried.
type storeStats struct {
	txns, commits float64
	secs          float64
	ok            bool
}

// scrapeStore reads busbar_store_fsync_seconds and
// busbar_store_group_commit_size from the Prometheus text at url.
func scrapeStore(url string) storeStats {
	if url == "" {
		return storeStats{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return storeStats{}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return storeStats{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return storeStats{}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return storeStats{}
	}
	return parseStoreStats(string(b))
}

func parseStoreStats(text string) storeStats {
	var s storeStats
	seen := 0
	for _, line := range strings.Split(text, "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "busbar_store_fsync_seconds_count":
			dst = &s.txns
		case "busbar_store_fsync_seconds_sum":
			dst = &s.secs
		case "busbar_store_group_commit_size_sum":
			dst = &s.commits
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return storeStats{}
		}
		*dst = v
		seen++
	}
	s.ok = seen == 3
	return s
}

// storeNote describes the store's transactions between two scrapes for
// msgs messages, e.g. "; store: 812 transactions, 98.5 msgs and 3.1
// commits each, 11.9 ms mean"; "" when unknown.
func storeNote(a, b storeStats, msgs int64) string {
	n := b.txns - a.txns
	if !a.ok || !b.ok || n <= 0 || msgs <= 0 {
		return ""
	}
	return fmt.Sprintf("; store: %.0f synced transactions, %.1f msgs and %.1f commits each, %.1f ms mean",
		n, float64(msgs)/n, (b.commits-a.commits)/n, 1e3*(b.secs-a.secs)/n)
}
