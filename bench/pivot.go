package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ReadCSV reads what WriteCSV wrote, also without the round column
// (older files): their results have round 0.
func ReadCSV(r io.Reader) ([]Result, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("empty CSV")
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	get := func(row []string, name string) string {
		if i, ok := col[name]; ok && i < len(row) {
			return row[i]
		}
		return ""
	}
	num := func(row []string, name string) float64 {
		v, err := strconv.ParseFloat(get(row, name), 64)
		if err != nil {
			return -1
		}
		return v
	}
	dur := func(row []string, name string) time.Duration {
		v, err := strconv.ParseFloat(get(row, name), 64)
		if err != nil {
			return 0
		}
		return time.Duration(v * 1e6)
	}
	var out []Result
	for _, row := range rows[1:] {
		size, _ := strconv.Atoi(get(row, "size_bytes"))
		msgs, _ := strconv.ParseInt(get(row, "msgs"), 10, 64)
		round, _ := strconv.Atoi(get(row, "round"))
		out = append(out, Result{Workload: get(row, "workload"), Target: get(row, "target"), Tier: get(row, "tier"), Params: get(row, "params"),
			Size: size, Metric: get(row, "metric"), Msgs: msgs, Secs: num(row, "secs"), Rate: num(row, "msgs_per_s"),
			Lat:   dist{P50: dur(row, "p50_ms"), P99: dur(row, "p99_ms"), P999: dur(row, "p999_ms"), Max: dur(row, "max_ms")},
			CPUus: num(row, "broker_cpu_us_per_msg"), SysPct: num(row, "broker_sys_pct"), ClientUs: num(row, "client_cpu_us_per_msg"),
			RSSMB: num(row, "broker_rss_mb"), Load: num(row, "load1"), StealPct: num(row, "steal_pct"), DBus: num(row, "db_cpu_us_per_msg"), WALBytes: num(row, "wal_bytes_per_msg"), NA: get(row, "na"), Note: get(row, "note"), Round: round})
	}
	return out, nil
}

// shortTarget is a target's column heading in the side-by-side table.
func shortTarget(t string) string {
	r := strings.NewReplacer("RabbitMQ 3.10 quorum", "RabbitMQ QQ", "NATS 2.15 JetStream ", "NATS ", "sync_interval always", "always",
		"default sync (2 min)", "default", ", go-amqp", "", "azservicebus SDK", "SDK")
	return r.Replace(t)
}

// WritePivot writes the side-by-side table: one row per workload cell,
// one column per target; each cell is "msgs/s · p99 ms · broker CPU µs
// per message · load", or the reason there is no figure. A cell measured
// in several rounds (-rounds) shows its median round (medianRound).
func WritePivot(w io.Writer, rs []Result) {
	var targets []string
	seenT := map[string]bool{}
	type key struct {
		wl, params, metric string
		size               int
	}
	var keys []key
	seenK := map[key]bool{}
	cell := map[key]map[string][]Result{}
	// A target that skips a whole workload (an n/a result without
	// parameters) gets its n/a in that workload's rows of the same size,
	// not a row of its own — unless the workload has no other rows.
	type wlSize struct {
		wl   string
		size int
	}
	measured := map[wlSize]bool{}
	for _, r := range rs {
		if !blanketNA(r) {
			measured[wlSize{r.Workload, r.Size}] = true
		}
	}
	blanket := map[wlSize]map[string][]Result{}
	for _, r := range rs {
		if !seenT[r.Target] {
			seenT[r.Target] = true
			targets = append(targets, r.Target)
		}
		if ws := (wlSize{r.Workload, r.Size}); blanketNA(r) && measured[ws] {
			if blanket[ws] == nil {
				blanket[ws] = map[string][]Result{}
			}
			blanket[ws][r.Target] = append(blanket[ws][r.Target], r)
			continue
		}
		k := key{r.Workload, r.Params, r.Metric, r.Size}
		if !seenK[k] {
			seenK[k] = true
			keys = append(keys, k)
			cell[k] = map[string][]Result{}
		}
		if r.Round > 0 {
			cell[k][r.Target] = append(cell[k][r.Target], r)
		} else {
			cell[k][r.Target] = []Result{r} // the last one, as ever
		}
	}
	fmt.Fprint(w, "| Workload | Parameters | Size | Metric |")
	for _, t := range targets {
		tier := ""
		for _, r := range rs {
			if r.Target == t {
				tier = r.Tier
				break
			}
		}
		fmt.Fprintf(w, " %s [Tier %s] |", shortTarget(t), tier)
	}
	fmt.Fprint(w, "\n|---|---|---|---|")
	for range targets {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, k := range keys {
		fmt.Fprintf(w, "| %s | %s | %s | %s |", k.wl, k.params, sizeName(k.size), k.metric)
		for _, t := range targets {
			c := pivotCell(cell[k][t])
			if c == "" {
				c = pivotCell(blanket[wlSize{k.wl, k.size}][t])
			}
			if c != "" {
				fmt.Fprintf(w, " %s |", c)
			} else {
				fmt.Fprint(w, " |")
			}
		}
		fmt.Fprintln(w)
	}
}

// blanketNA reports whether r says a target skipped a whole workload.
func blanketNA(r Result) bool { return r.NA != "" && r.Params == "" }

// pivotCell is one cell of the side-by-side table for the results of
// one target in one workload cell: one result, or one per round.
func pivotCell(rs []Result) string {
	if len(rs) == 0 {
		return ""
	}
	r, measured := medianRound(rs)
	s := pivotFigure(r)
	if measured > 1 {
		s += fmt.Sprintf(" · median of %d rounds", measured)
	}
	if measured > 0 && measured < len(rs) {
		s += fmt.Sprintf(" (%d of %d rounds not measured)", len(rs)-measured, len(rs))
	}
	return s
}

// pivotFigure is the side-by-side text of one result.
func pivotFigure(r Result) string {
	switch {
	case r.NA != "":
		na := r.NA
		if na == "error" {
			na = "error: " + r.Note
			if len(na) > 80 {
				na = na[:80] + "…"
			}
		}
		return strings.ReplaceAll(na, "|", "/")
	case r.Metric == killMetric:
		return fmt.Sprintf("**%.2f s** (%s)", r.Lat.Max.Seconds(), r.machine())
	case r.Workload == "W3":
		return fmt.Sprintf("p50 %s / p99 **%s** / p99.9 %s / max %s ms (%s msg/s; %s)", ms(r.Lat.P50), ms(r.Lat.P99), ms(r.Lat.P999), ms(r.Lat.Max), human(r.Rate), r.machine())
	}
	return fmt.Sprintf("**%s** · p99 %s ms · %s µs (%s)", human(r.Rate), ms(r.Lat.P99), fnum(r.CPUus, 0), r.machine())
}

// machine says how busy the machine was during a cell: the load average
// and, when the hypervisor took 1 % of its CPU time or more, the steal.
func (r Result) machine() string {
	if r.StealPct >= 1 {
		return fmt.Sprintf("load %.1f, steal %.0f %%", r.Load, r.StealPct)
	}
	return fmt.Sprintf("load %.1f", r.Load)
}
