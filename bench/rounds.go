package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// isNullTarget reports whether a target is the null broker (either
// client; a -pin run appends a suffix to the name).
func isNullTarget(target string) bool {
	return strings.HasPrefix(target, nullGoAMQPName) || strings.HasPrefix(target, nullSDKName)
}

// hasRounds reports whether rs come from a -rounds run.
func hasRounds(rs []Result) bool {
	for _, r := range rs {
		if r.Round > 0 {
			return true
		}
	}
	return false
}

// headline is the figure a cell's rounds are ranked by: the rate, or
// for W3 (paced, so the rate is set by the plan) the p99 latency, or for
// the kill -9 row the time to the first delivery.
func headline(r Result) float64 {
	switch {
	case r.Metric == killMetric:
		return float64(r.Lat.Max)
	case r.Workload == "W3":
		return float64(r.Lat.P99)
	}
	return r.Rate
}

// medianRound returns the round of rs (one target's results for one
// workload cell) with the median headline figure, the lower of the two
// middle ones for an even count, among the rounds that were measured,
// and how many were. With none measured it returns rs[0] and 0.
func medianRound(rs []Result) (Result, int) {
	var m []Result
	for _, r := range rs {
		if r.NA == "" {
			m = append(m, r)
		}
	}
	if len(m) == 0 {
		return rs[0], 0
	}
	slices.SortStableFunc(m, func(a, b Result) int { return cmp.Compare(headline(a), headline(b)) })
	return m[(len(m)-1)/2], len(m)
}

// lowerMedian returns the median of vs, the lower of the two middle
// values for an even count, and the minimum and maximum; ok is false
// when vs is empty.
func lowerMedian(vs []float64) (med, lo, hi float64, ok bool) {
	if len(vs) == 0 {
		return 0, 0, 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[0], s[len(s)-1], true
}

// ceilingKey identifies the null broker result that is a result's
// ceiling: the same round, workload, parameters, metric and size; for
// W5 (the null broker has no topics) W1 with W5's sender's cell.
type ceilingKey struct {
	round              int
	wl, params, metric string
	size               int
}

func ceilingOf(r Result) ceilingKey {
	if r.Workload == "W5" {
		return ceilingKey{r.Round, "W1", w5Sender(r.Params), w1Metric, r.Size}
	}
	return ceilingKey{r.Round, r.Workload, r.Params, r.Metric, r.Size}
}

// WriteRounds writes the Rounds section of a -rounds run (nothing when
// no target other than the null broker has rounds): for each target's
// workload cell, one row per round with its rate, the ceiling measured
// in the same round (the null broker with go-amqp, see ceilingOf) and
// their ratio, then the median (lower for an even count), minimum and
// maximum of each.
func WriteRounds(w io.Writer, rs []Result) {
	type key struct {
		target, wl, params, metric string
		size                       int
	}
	ceil := map[ceilingKey]Result{}
	var keys []key
	cells := map[key][]Result{}
	for _, r := range rs {
		if r.Round <= 0 {
			continue
		}
		if isNullTarget(r.Target) {
			if strings.HasPrefix(r.Target, nullGoAMQPName) && r.NA == "" && r.Rate > 0 {
				ceil[ceilingOf(r)] = r // (the null broker has no W5 of its own)
			}
			continue
		}
		k := key{r.Target, r.Workload, r.Params, r.Metric, r.Size}
		if _, ok := cells[k]; !ok {
			keys = append(keys, k)
		}
		cells[k] = append(cells[k], r)
	}
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(w, "Rounds (each figure against the ceiling measured in the same round: %s, same workload, parameters and size; for W5 W1 with its sender's cell; the figure is msgs/s, for W3 (paced: its rate is the plan's) the p99 latency; ratio = figure ÷ ceiling; – = no ceiling in that round; last row of a cell: median (the lower middle one for an even count) and min–max):\n\n",
		nullGoAMQPName)
	fmt.Fprintln(w, "| Target | Workload | Parameters | Size | Metric | Round | figure | ceiling | ratio | steal % |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		if skipsWorkload(cells[k]) {
			continue
		}
		fig, format := roundsFigure(k.wl)
		var figs, ceils, ratios []float64
		for i, r := range cells[k] {
			lead := "| | | | | |"
			if i == 0 {
				lead = fmt.Sprintf("| %s | %s | %s | %s | %s |", shortTarget(k.target), k.wl, k.params, sizeName(k.size), k.metric)
			}
			v, c, ratio, steal := "–", "–", "–", fnum(r.StealPct, 0)
			measured := r.NA == "" && fig(r) > 0
			switch {
			case r.NA != "":
				v = strings.ReplaceAll(r.NA, "|", "/")
			case measured:
				v = format(fig(r))
				figs = append(figs, fig(r))
			}
			if cr, ok := ceil[ceilingOf(r)]; ok && fig(cr) > 0 {
				c = format(fig(cr))
				steal += " / " + fnum(cr.StealPct, 0)
				ceils = append(ceils, fig(cr))
				if measured {
					ratio = fmt.Sprintf("%.2f", fig(r)/fig(cr))
					ratios = append(ratios, fig(r)/fig(cr))
				}
			}
			fmt.Fprintf(w, "%s %d | %s | %s | %s | %s |\n", lead, r.Round, v, c, ratio, steal)
		}
		fmt.Fprintf(w, "| | | | | | median (min–max) | %s | %s | %s | |\n",
			spread(figs, format), spread(ceils, format), spread(ratios, func(v float64) string { return fmt.Sprintf("%.2f", v) }))
	}
}

// skipsWorkload reports whether a cell is a target's "n/a" for a whole
// workload it does not run, in every round (no parameters): no row in
// the Rounds table. A cell that failed in some round keeps its rows.
func skipsWorkload(rs []Result) bool {
	for _, r := range rs {
		if r.NA == "" || r.Params != "" {
			return false
		}
	}
	return true
}

// roundsFigure is what the Rounds table compares for workload wl, and how
// it prints: the rate, or for W3 the p99 latency in ms.
func roundsFigure(wl string) (fig func(Result) float64, format func(float64) string) {
	if wl == "W3" {
		return func(r Result) float64 { return float64(r.Lat.P99) / float64(time.Millisecond) },
			func(v float64) string { return fmt.Sprintf("%.1f ms", v) }
	}
	return func(r Result) float64 { return r.Rate }, human
}

// spread is "median (min–max)" of vs, or "–" when vs is empty.
func spread(vs []float64, f func(float64) string) string {
	med, lo, hi, ok := lowerMedian(vs)
	if !ok {
		return "–"
	}
	return fmt.Sprintf("**%s** (%s–%s)", f(med), f(lo), f(hi))
}
