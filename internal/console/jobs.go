package console

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
)

// Bulk dead-letter jobs: resubmit (or delete) every message of a
// dead-letter queue, or every one with a given reason. A job first lists
// the matching sequence numbers (at most maxJobMessages), then hands them
// to the broker MaxTriageBatch at a time; each call is atomic, so a job
// cancelled or failed half-way has moved some batches whole and left the
// rest where they were. Progress and the final count are on its page.

const (
	maxRunningJobs = 4
	keptJobs       = 32
	maxJobMessages = 10_000_000
	scanPage       = 1000
)

type jobSpec struct {
	path    string // the dead-letter queue
	target  string // resubmit destination
	reason  string // "": every message
	delete  bool
	keyName string
}

type job struct {
	ID   string
	spec jobSpec
	stop context.CancelFunc

	mu      sync.Mutex
	state   string // listing, moving, done, cancelled, failed
	matched int
	done    int
	skipped int
	err     string
	started time.Time
	ended   time.Time
}

// JobView is what the job page shows.
type JobView struct {
	ID, Path, Target, Reason, State, Err string
	Delete                               bool
	Matched, Done, Skipped               int
	Running                              bool
	Pct                                  int
	Elapsed                              string
}

func (j *job) snapshot() JobView {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := JobView{ID: j.ID, Path: j.spec.path, Target: j.spec.target, Reason: j.spec.reason, Delete: j.spec.delete,
		State: j.state, Err: j.err, Matched: j.matched, Done: j.done, Skipped: j.skipped,
		Running: j.state == "listing" || j.state == "moving"}
	if j.matched > 0 {
		v.Pct = 100 * (j.done + j.skipped) / j.matched
	}
	end := j.ended
	if end.IsZero() {
		end = time.Now()
	}
	v.Elapsed = end.Sub(j.started).Round(time.Millisecond).String()
	return v
}

func (j *job) cancel() { j.stop() }

type jobs struct {
	c      *Console
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	all     []*job // oldest first
	running int
}

func newJobs(c *Console) *jobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &jobs{c: c, ctx: ctx, cancel: cancel}
}

func (js *jobs) close() {
	js.cancel()
	js.wg.Wait()
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, j := range js.all {
		if j.ID == id {
			return j
		}
	}
	return nil
}

func (js *jobs) list(path string) []JobView {
	js.mu.Lock()
	all := slices.Clone(js.all)
	js.mu.Unlock()
	var out []JobView
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].spec.path == path {
			out = append(out, all[i].snapshot())
		}
	}
	return out
}

func (js *jobs) start(spec jobSpec) (*job, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.ctx.Err() != nil {
		return nil, &userError{status: 503, msg: "The console is shutting down."}
	}
	if js.running >= maxRunningJobs {
		return nil, &userError{status: 429, msg: fmt.Sprintf("%d bulk jobs are running already; wait for one to finish.", maxRunningJobs)}
	}
	ctx, stop := context.WithCancel(js.ctx)
	j := &job{ID: newID()[:16], spec: spec, stop: stop, state: "listing", started: time.Now()}
	js.all = append(js.all, j)
	if len(js.all) > keptJobs {
		for i, o := range js.all {
			if o.snapshot().Running {
				continue
			}
			js.all = slices.Delete(js.all, i, i+1)
			break
		}
	}
	js.running++
	js.wg.Add(1)
	go func() {
		defer js.wg.Done()
		defer stop()
		js.run(ctx, j)
		js.mu.Lock()
		js.running--
		js.mu.Unlock()
	}()
	return j, nil
}

func (js *jobs) run(ctx context.Context, j *job) {
	b := js.c.b
	finish := func(state string, err error) {
		j.mu.Lock()
		j.state, j.ended = state, time.Now()
		if err != nil {
			j.err = err.Error()
		}
		matched, done, skipped := j.matched, j.done, j.skipped
		j.mu.Unlock()
		js.c.log.Info("console bulk job ended", "keyName", j.spec.keyName, "from", j.spec.path, "to", j.spec.target,
			"delete", j.spec.delete, "state", state, "matched", matched, "done", done, "skipped", skipped, "err", err)
	}
	// List what matches.
	var seqs []int64
	from := int64(0)
	for {
		if ctx.Err() != nil {
			finish("cancelled", nil)
			return
		}
		// Only properties are looked at: large bodies stay in the store.
		ds, err := b.Inspect(broker.WithStreamedBodies(ctx, largeFrom), j.spec.path, from, scanPage)
		if err != nil {
			finish("failed", err)
			return
		}
		for _, d := range ds {
			if d.Body != nil {
				d.Body.Close()
			}
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			from = d.SequenceNumber + 1
			if j.spec.reason == "" || reasonOf(d) == j.spec.reason {
				seqs = append(seqs, d.SequenceNumber)
			}
		}
		if len(seqs) >= maxJobMessages {
			seqs = seqs[:maxJobMessages]
			break
		}
		j.mu.Lock()
		j.matched = len(seqs)
		j.mu.Unlock()
	}
	j.mu.Lock()
	j.matched, j.state = len(seqs), "moving"
	j.mu.Unlock()
	for len(seqs) > 0 {
		if ctx.Err() != nil {
			finish("cancelled", nil)
			return
		}
		n := min(len(seqs), broker.MaxTriageBatch)
		var res broker.TriageResult
		var err error
		if j.spec.delete {
			res, err = b.RemoveMessages(ctx, j.spec.path, seqs[:n])
		} else {
			res, err = b.Resubmit(ctx, j.spec.path, seqs[:n], j.spec.target, nil)
		}
		j.mu.Lock()
		j.done += res.Done
		j.skipped += len(res.Skipped)
		j.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				finish("cancelled", nil)
			} else {
				finish("failed", err)
			}
			return
		}
		seqs = seqs[n:]
	}
	finish("done", nil)
}
