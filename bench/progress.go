package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progress is the live status line on stderr, rewritten in place with
// \r on a terminal and printed every 10 s otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	label string
	start time.Time
	n     atomic.Int64
	total int64
	stop  chan struct{}
	done  chan struct{}
	quiet bool
	every time.Duration // between status lines
	// round of rounds (busbar-bench -rounds), shown when rounds > 1.
	round, rounds int
}

func newProgress(w io.Writer, quiet bool) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	every := 10 * time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	return startProgress(w, tty, quiet, every)
}

// startProgress starts the status loop: a line every interval, rewritten
// in place on a terminal (tty), or appended otherwise; quiet prints none.
func startProgress(w io.Writer, tty, quiet bool, every time.Duration) *progress {
	p := &progress{w: w, tty: tty, stop: make(chan struct{}), done: make(chan struct{}), quiet: quiet, every: every}
	go p.loop()
	return p
}

// set starts a new phase with an expected total (0 = unknown).
func (p *progress) set(label string, total int64) {
	p.mu.Lock()
	p.label, p.start, p.total = label, time.Now(), total
	p.mu.Unlock()
	p.n.Store(0)
}

// setRound says which of the interleaved rounds is running (rounds <= 1:
// none).
func (p *progress) setRound(round, rounds int) {
	p.mu.Lock()
	p.round, p.rounds = round, rounds
	p.mu.Unlock()
}

// roundName is "round k/N " for round k of N > 1, else "".
func roundName(round, rounds int) string {
	if rounds <= 1 || round <= 0 {
		return ""
	}
	return fmt.Sprintf("round %d/%d ", round, rounds)
}

func (p *progress) add(n int64) { p.n.Add(n) }

func (p *progress) line() string {
	p.mu.Lock()
	label, start, total := p.label, p.start, p.total
	rn := roundName(p.round, p.rounds)
	p.mu.Unlock()
	if label == "" {
		return ""
	}
	el := time.Since(start).Seconds()
	n := p.n.Load()
	rate := 0.0
	if el > 0 {
		rate = float64(n) / el
	}
	tot := ""
	if total > 0 {
		tot = fmt.Sprintf("/%d", total)
	}
	return fmt.Sprintf("%s%s: %d%s msgs, %s msg/s, %.0f s, load %.2f", rn, label, n, tot, human(rate), el, loadAvg())
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			if p.tty && !p.quiet {
				fmt.Fprint(p.w, "\r\033[K")
			}
			return
		case <-t.C:
			if p.quiet {
				continue
			}
			if l := p.line(); l != "" {
				if p.tty {
					fmt.Fprint(p.w, "\r\033[K"+l)
				} else {
					fmt.Fprintln(p.w, "  … "+l)
				}
			}
		}
	}
}

// log prints a finished line above the status line.
func (p *progress) log(format string, args ...any) {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) close() {
	close(p.stop)
	<-p.done
}
