package broker

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// flakyStore fails every Commit while fail is set.
type flakyStore struct {
	store.Store
	fail atomic.Bool
}

func (f *flakyStore) Commit(b *store.Batch, sync bool) error {
	if f.fail.Load() {
		return errors.New("disk on fire")
	}
	return f.Store.Commit(b, sync)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestRetriedFailureLoggedOnce: timer work that keeps failing (here: a
// store whose commits fail) is logged once with its cause, not once per
// retry, and its recovery once with the number of failed attempts.
func TestRetriedFailureLoggedOnce(t *testing.T) {
	st := &flakyStore{Store: memstore.New()}
	var logs lockedBuffer
	clk := clock.NewFake(t0)
	b, err := Open(Options{Store: st, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.CreateQueue("q", DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, "q", []*message.Message{ttlMsg("a", time.Minute)}); err != nil {
		t.Fatal(err)
	}
	st.fail.Store(true)
	clk.Advance(time.Minute)
	for range 5 {
		b.Tick()
		clk.Advance(time.Duration(retryDelay))
	}
	if n := logs.count(`msg="timer work failed; retrying" queue=q err="store commit for q: disk on fire"`); n != 1 {
		t.Fatalf("failure logged %d times, want 1:\n%s", n, logs.b.String())
	}
	st.fail.Store(false)
	b.Tick()
	if n := logs.count(`msg="timer work recovered" queue=q failed_attempts=`); n != 1 {
		t.Fatalf("recovery logged %d times, want 1:\n%s", n, logs.b.String())
	}
	// A new failure is a new episode.
	if err := b.Send(ctx, "q", []*message.Message{ttlMsg("b", time.Minute)}); err != nil {
		t.Fatal(err)
	}
	st.fail.Store(true)
	clk.Advance(time.Minute)
	b.Tick()
	if n := logs.count(`msg="timer work failed; retrying"`); n != 2 {
		t.Fatalf("second episode: failure logged %d times in all, want 2:\n%s", n, logs.b.String())
	}
	st.fail.Store(false)
}
