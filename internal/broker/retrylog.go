package broker

import (
	"log/slog"
	"sync"
	"sync/atomic"
)

// maxRetryEpisodes bounds the failures retryLog remembers; past it, every
// failure is logged.
const maxRetryEpisodes = 4096

// retryLog logs background work that fails and is retried (timer work,
// forwarding, fanning out scheduled messages) once per episode: the first
// failure of a piece of work at error level with its cause, its repeats
// not at all, and its first success after them at info level with the
// number of failed attempts. Without it a failing store would add a line
// per entity per retry (every retryDelay). Work is identified by a key
// (what it is and the entity's name).
type retryLog struct {
	log *slog.Logger
	// failing counts episodes in progress, so that the success path costs
	// one atomic load while nothing fails.
	failing atomic.Int32
	mu      sync.Mutex
	open    map[string]int // key → failed attempts
}

// failed records a failed attempt at key's work and logs msg with err and
// attrs if it is the episode's first.
func (r *retryLog) failed(key, msg string, err error, attrs ...any) {
	r.mu.Lock()
	n, ongoing := r.open[key]
	if !ongoing && len(r.open) < maxRetryEpisodes {
		if r.open == nil {
			r.open = make(map[string]int)
		}
		r.failing.Add(1)
	}
	if ongoing || len(r.open) < maxRetryEpisodes {
		r.open[key] = n + 1
	}
	r.mu.Unlock()
	if !ongoing {
		r.log.Error(msg, append(attrs, "err", err)...)
	}
}

// succeeded ends key's episode, if one is open, logging msg and attrs with
// the number of failed attempts.
func (r *retryLog) succeeded(key, msg string, attrs ...any) {
	if r.failing.Load() == 0 {
		return
	}
	r.mu.Lock()
	n, ongoing := r.open[key]
	if ongoing {
		delete(r.open, key)
		r.failing.Add(-1)
	}
	r.mu.Unlock()
	if ongoing {
		r.log.Info(msg, append(attrs, "failed_attempts", n)...)
	}
}
