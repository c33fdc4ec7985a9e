package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// recorder collects latency samples from many goroutines.
type recorder struct {
	mu sync.Mutex
	s  []time.Duration
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.s = append(r.s, d)
	r.mu.Unlock()
}

// dist is a latency distribution summary.
type dist struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

func (r *recorder) dist() dist {
	r.mu.Lock()
	s := slices.Clone(r.s)
	r.mu.Unlock()
	if len(s) == 0 {
		return dist{}
	}
	slices.Sort(s)
	q := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		if i < 0 {
			i = 0
		}
		return s[i]
	}
	return dist{N: len(s), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: s[len(s)-1]}
}

// Result is one row of the results table.
type Result struct {
	Workload string // W1..W5
	Target   string // broker and protocol, e.g. "Busbar (go-amqp)"
	Tier     string // "A" durable before ack, "B" periodic fsync
	Params   string // e.g. "1 conn × window 16"
	Size     int    // payload bytes
	Metric   string // what Rate measures, e.g. "send", "receive+complete", "e2e"
	Msgs     int64
	Secs     float64
	Rate     float64 // msgs/s
	Lat      dist    // confirm / complete / e2e latency
	CPUus    float64 // broker CPU µs per message, -1 unknown
	SysPct   float64 // share of that CPU in the kernel, -1 unknown
	ClientUs float64 // load generator (this process) CPU µs per message, -1 unknown
	RSSMB    float64 // broker peak RSS in MB during the cell, -1 unknown
	Load     float64 // 1-minute load average at the end of the cell
	// StealPct is the share of the machine's CPU time that the hypervisor
	// took during the cell (/proc/stat steal, see machineCPU), -1 unknown.
	StealPct float64
	// DBus and WALBytes are, for a broker on PostgreSQL, the database
	// server's CPU µs (all its processes) and the WAL bytes it wrote per
	// message during the cell (pgMeter); -1 unknown or not measured.
	DBus, WALBytes float64
	Note           string
	NA             string // when set, the cell was not measured and this says why
	Round          int    // 1..N in a busbar-bench -rounds N run, else 0
}

func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	v := float64(d) / 1e6
	switch {
	case v < 1:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func human(v float64) string {
	switch {
	case v < 0:
		return "–"
	case v >= 10000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.2fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func sizeName(n int) string {
	switch {
	case n <= 0:
		return "–"
	case n%1024 == 0:
		return fmt.Sprintf("%d KB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

func fnum(v float64, prec int) string {
	if v < 0 {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// notes is a result's Notes cell: its note, after its round if any.
func (r Result) notes() string {
	n := strings.ReplaceAll(r.Note, "|", "/")
	if r.Round > 0 {
		n = strings.TrimSuffix(fmt.Sprintf("round %d; %s", r.Round, n), "; ")
	}
	return n
}

// WriteMarkdown writes results as a markdown table; a result of a
// -rounds run has its round at the start of its notes.
func WriteMarkdown(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| Workload | Target | Tier | Parameters | Size | Metric | msgs/s | MB/s | p50 ms | p99 ms | p99.9 ms | max ms | broker CPU µs/msg | sys % | client CPU µs/msg | broker RSS MB | load | steal % | db CPU µs/msg | WAL B/msg | Notes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		if r.NA != "" {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | | | | | | | | | | | | | | %s |\n", r.Workload, r.Target, r.Tier, r.Params, sizeName(r.Size), r.Metric, r.NA, r.notes())
			continue
		}
		mbs := r.Rate * float64(r.Size) / 1e6
		if r.Rate < 0 {
			mbs = -1
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %s |\n",
			r.Workload, r.Target, r.Tier, r.Params, sizeName(r.Size), r.Metric, human(r.Rate), fnum(mbs, 1),
			ms(r.Lat.P50), ms(r.Lat.P99), ms(r.Lat.P999), ms(r.Lat.Max), fnum(r.CPUus, 1), fnum(r.SysPct, 0), fnum(r.ClientUs, 1), fnum(r.RSSMB, 0), r.Load, fnum(r.StealPct, 0),
			fnum(r.DBus, 1), fnum(r.WALBytes, 0), r.notes())
	}
}

// WriteCSV writes results as CSV with a header row. The round, steal and
// database columns come last, after the columns of older versions.
func WriteCSV(w io.Writer, rs []Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"workload", "target", "tier", "params", "size_bytes", "metric", "msgs", "secs", "msgs_per_s", "mb_per_s",
		"p50_ms", "p99_ms", "p999_ms", "max_ms", "broker_cpu_us_per_msg", "broker_sys_pct", "client_cpu_us_per_msg", "broker_rss_mb", "load1", "na", "note", "round", "steal_pct",
		"db_cpu_us_per_msg", "wal_bytes_per_msg"})
	f := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return fmt.Sprintf("%.3f", float64(d)/1e6)
	}
	for _, r := range rs {
		_ = cw.Write([]string{r.Workload, r.Target, r.Tier, r.Params, fmt.Sprint(r.Size), r.Metric, fmt.Sprint(r.Msgs),
			fmt.Sprintf("%.3f", r.Secs), fmt.Sprintf("%.0f", r.Rate), fmt.Sprintf("%.2f", r.Rate*float64(r.Size)/1e6),
			f(r.Lat.P50), f(r.Lat.P99), f(r.Lat.P999), f(r.Lat.Max), fmt.Sprintf("%.1f", r.CPUus), fmt.Sprintf("%.0f", r.SysPct), fmt.Sprintf("%.1f", r.ClientUs), fmt.Sprintf("%.0f", r.RSSMB),
			fmt.Sprintf("%.2f", r.Load), r.NA, r.Note, fmt.Sprint(r.Round), fmt.Sprintf("%.1f", r.StealPct),
			fmt.Sprintf("%.1f", r.DBus), fmt.Sprintf("%.0f", r.WALBytes)})
	}
	cw.Flush()
	return cw.Error()
}
