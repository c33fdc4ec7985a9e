package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/pgstore"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

func queryInt(t testing.TB, url, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func commit(s store.Store, sync bool, ops ...store.Op) error {
	return s.Commit(&store.Batch{Ops: ops}, sync)
}

func putOp(id uint64) store.Op {
	return store.Op{Kind: store.OpPutEntity, EntityID: id, Name: fmt.Sprint("q", id), Data: []byte("spec")}
}

func appendOp(id, seq uint64, data string) store.Op {
	return store.Op{Kind: store.OpAppend, EntityID: id, Seq: seq, Meta: []byte("m"), Data: []byte(data)}
}

// TestSecondProcessRefused: while one store's session is live, a second
// on the same database refuses to start with an error that says why (same
// node id, or another node id owning the entities); once the first closed,
// the second starts at once.
func TestSecondProcessRefused(t *testing.T) {
	url := newDB(t)
	o := testOptions()
	a := open(t, url, o)
	if err := commit(a, true, putOp(1), appendOp(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	o2 := o
	o2.StartWait = 300 * time.Millisecond
	if b, err := pgstore.Open(context.Background(), url, o2); err == nil {
		b.Close()
		t.Fatal("a second store opened while the first is live")
	} else if !strings.Contains(err.Error(), "another Busbar process") {
		t.Fatalf("second store: %v, want it to say another process uses the database", err)
	}
	o3 := o2
	o3.NodeID = "other"
	if b, err := pgstore.Open(context.Background(), url, o3); err == nil {
		b.Close()
		t.Fatal("a store with another node id opened while the first owns the entities")
	} else if !strings.Contains(err.Error(), "only one Busbar process") {
		t.Fatalf("other node: %v", err)
	}
	// The first still works, then closes and ends its session.
	if err := commit(a, true, appendOp(1, 2, "y")); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b := open(t, url, o2)
	defer b.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("opening after a clean close took %v", d)
	}
	if got, err := b.ReadData(1, 2); err != nil || string(got) != "y" {
		t.Fatalf("ReadData after reopen: %q, %v", got, err)
	}
}

// TestCrashedProcessReplaced: a process that died without closing keeps
// its session until it expires; the next start waits for that (up to
// StartWait) and then takes over.
func TestCrashedProcessReplaced(t *testing.T) {
	url := newDB(t)
	o := testOptions()
	o.SessionTTL, o.Heartbeat = time.Second, 100*time.Millisecond
	a := open(t, url, o)
	if err := commit(a, true, putOp(1), appendOp(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	// Simulate the death: the session stops being renewed (its expiry is
	// set as if the renewals had stopped now) and a is abandoned.
	if err := pgtest.Exec(url, `UPDATE bb_node SET session = session + 100, expires_at = clock_timestamp() + interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b := open(t, url, o)
	defer b.Close()
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("took over after %v, before the old session expired", d)
	}
	// The old store is fenced off: its epoch is stale.
	if err := commit(a, true, appendOp(1, 2, "stale")); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("commit of the replaced store: %v, want ErrNotOwner", err)
	}
	a.Close()
	if _, err := b.ReadData(1, 2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the replaced store's write is there: %v", err)
	}
}

// TestFence: the epoch raised behind the store's back (another process
// took the unit) makes its next commit to that unit fail with ErrNotOwner
// and write nothing; other units go on.
func TestFence(t *testing.T) {
	url := newDB(t)
	s := open(t, url, testOptions())
	defer s.Close()
	if err := commit(s, true, putOp(1), putOp(2), appendOp(1, 1, "a"), appendOp(2, 1, "b")); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Exec(url, `UPDATE bb_unit SET epoch = epoch + 1 WHERE unit_id = 1`); err != nil {
		t.Fatal(err)
	}
	err := commit(s, true, appendOp(1, 2, "stale"), store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: []byte("v")})
	if !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("commit after the epoch moved: %v, want ErrNotOwner", err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE entity_id = 1 AND seq = 2`); n != 0 {
		t.Fatal("the fenced commit wrote its message")
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_value WHERE entity_id = 1`); n != 0 {
		t.Fatal("the fenced commit wrote its value")
	}
	// A batch over both units fails whole: it is atomic.
	if err := commit(s, true, appendOp(2, 2, "x"), appendOp(1, 3, "y")); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("commit over both units: %v, want ErrNotOwner", err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE entity_id = 2 AND seq = 2`); n != 0 {
		t.Fatal("half of an atomic batch was written")
	}
	// Unit 2 is still this store's.
	if err := commit(s, true, appendOp(2, 3, "c")); err != nil {
		t.Fatalf("commit to the unit still owned: %v", err)
	}
}

// TestFenceWaitsForTakeover: a takeover that holds the unit row (FOR
// UPDATE, as an acquire does) makes a commit that started meanwhile wait,
// and once the takeover raised the epoch and committed, the waiting
// commit fails with ErrNotOwner instead of writing.
func TestFenceWaitsForTakeover(t *testing.T) {
	url := newDB(t)
	s := open(t, url, testOptions())
	defer s.Close()
	if err := commit(s, true, putOp(1)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT epoch FROM bb_unit WHERE unit_id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- commit(s, true, appendOp(1, 1, "during takeover")) }()
	select {
	case err := <-done:
		t.Fatalf("commit did not wait for the takeover's row lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := tx.Exec(ctx, `UPDATE bb_unit SET epoch = epoch + 1 WHERE unit_id = 1`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("commit queued behind the takeover: %v, want ErrNotOwner", err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_msg`); n != 0 {
		t.Fatal("the commit queued behind the takeover wrote")
	}
}

// TestLargeBody: Data above the inline limit is stored in chunks; a Meta
// update leaves them alone, a rewrite replaces them, a removal deletes
// them.
func TestLargeBody(t *testing.T) {
	url := newDB(t)
	s := open(t, url, testOptions())
	defer s.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 40<<10) // 640 KiB: 3 chunks of 256 KiB
	if err := commit(s, true, putOp(1), store.Op{Kind: store.OpAppend, EntityID: 1, Seq: 1, Meta: []byte("m"), Data: big}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_body`); n != 3 {
		t.Fatalf("%d chunks, want 3", n)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_msg WHERE data IS NULL AND body_id IS NOT NULL AND size = $1`, len(big)); n != 1 {
		t.Fatal("the message row does not point at its body")
	}
	chunks := func() int64 { return queryInt(t, url, `SELECT sum(xmin::text::bigint) FROM bb_body`) }
	before := chunks()
	if err := commit(s, true, store.Op{Kind: store.OpSetMeta, EntityID: 1, Seq: 1, Meta: []byte("m2")}); err != nil {
		t.Fatal(err)
	}
	if chunks() != before {
		t.Fatal("a Meta update rewrote the chunks")
	}
	got, err := s.ReadData(1, 1)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("ReadData: %d bytes, %v", len(got), err)
	}
	datas, errs := s.ReadDataBatch([]store.DataRef{{EntityID: 1, Seq: 1}, {EntityID: 1, Seq: 9}})
	if errs[0] != nil || !bytes.Equal(datas[0], big) || !errors.Is(errs[1], store.ErrNotFound) {
		t.Fatalf("ReadDataBatch: %d bytes, %v, %v", len(datas[0]), errs[0], errs[1])
	}
	if err := commit(s, true, store.Op{Kind: store.OpRewrite, EntityID: 1, Seq: 1, Meta: []byte("m3"), Data: big[:300<<10]}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_body`); n != 2 {
		t.Fatalf("after a rewrite: %d chunks, want 2 (the old ones deleted)", n)
	}
	if err := commit(s, true, store.Op{Kind: store.OpRemove, EntityID: 1, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM bb_body`); n != 0 {
		t.Fatalf("after removal: %d chunks left", n)
	}
}

// TestMigrations: opening twice applies nothing new; a schema newer than
// the binary and a changed migration are refused with errors that say so.
func TestMigrations(t *testing.T) {
	url := newDB(t)
	s := open(t, url, testOptions())
	s.Close()
	s = open(t, url, testOptions())
	s.Close()
	if n := queryInt(t, url, `SELECT count(*) FROM bb_schema_migration WHERE version > 0`); n != int64(pgstore.SchemaVersion()) {
		t.Fatalf("%d migrations recorded, want %d", n, pgstore.SchemaVersion())
	}
	if err := pgtest.Exec(url, `INSERT INTO bb_schema_migration (version, name, checksum, applied_by) VALUES (999, 'future', '\x', 'test')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.Open(context.Background(), url, testOptions()); err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Fatalf("newer schema: %v, want a refusal naming the versions", err)
	}
	if err := pgtest.Exec(url, `DELETE FROM bb_schema_migration WHERE version = 999; UPDATE bb_schema_migration SET checksum = '\x00' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.Open(context.Background(), url, testOptions()); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("changed migration: %v, want a checksum error", err)
	}
}

// load commits appends from several goroutines until stop closes,
// recording which succeeded and every error.
type load struct {
	mu    sync.Mutex
	acked map[uint64]bool
	errs  []error
	seq   atomic.Uint64
	wg    sync.WaitGroup
	okN   atomic.Int64
}

func startLoad(s store.Store, writers int, stop <-chan struct{}) *load {
	l := &load{acked: map[uint64]bool{}}
	for range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				q := l.seq.Add(1)
				err := commit(s, true, appendOp(1, q, "payload"))
				l.mu.Lock()
				if err == nil {
					l.acked[q] = true
					l.okN.Add(1)
				} else {
					l.errs = append(l.errs, err)
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

// check fails unless every acknowledged append is in the database and
// every failure is one of the store's failure kinds.
func (l *load) check(t *testing.T, url string) {
	t.Helper()
	for _, err := range l.errs {
		if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrOutcomeUnknown) && !errors.Is(err, store.ErrFailed) {
			t.Errorf("commit failed with %v, not ErrUnavailable, ErrOutcomeUnknown or ErrFailed", err)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT seq FROM bb_msg WHERE entity_id = 1`)
	if err != nil {
		t.Fatal(err)
	}
	have := map[uint64]bool{}
	for rows.Next() {
		var q int64
		rows.Scan(&q)
		have[uint64(q)] = true
	}
	lost := 0
	for q := range l.acked {
		if !have[q] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged commits are not in the database", lost, len(l.acked))
	}
}

// kinds counts the failures by kind, for the log.
func (l *load) kinds() map[string]int {
	k := map[string]int{}
	for _, err := range l.errs {
		switch {
		case errors.Is(err, store.ErrOutcomeUnknown):
			k["outcome unknown"]++
		case errors.Is(err, store.ErrFailed):
			k["stopped"]++
		case errors.Is(err, store.ErrUnavailable):
			k["unavailable"]++
		default:
			k["other"]++
		}
	}
	return k
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCrashDuringCommits: PostgreSQL killed (immediate shutdown: no
// checkpoint, crash recovery on restart) under a stream of commits. Every
// commit that returned nil is in the database afterwards; every other
// returned a failure (ErrUnavailable, ErrOutcomeUnknown, or ErrFailed
// after an unknown outcome), never a false success.
func TestCrashDuringCommits(t *testing.T) {
	url := newDB(t)
	o := testOptions()
	o.TxnDeadline, o.ResolveWait = time.Second, time.Second
	s := open(t, url, o)
	if err := commit(s, true, putOp(1)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	l := startLoad(s, 8, stop)
	waitFor(t, "commits before the crash", 10*time.Second, func() bool { return l.okN.Load() > 50 })
	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	n := l.okN.Load()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	l.wg.Wait()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if len(l.errs) == 0 {
		t.Fatal("no commit failed while PostgreSQL was down")
	}
	l.check(t, url)
	t.Logf("%d commits acknowledged (%d before the crash was seen), refused: %v", len(l.acked), n, l.kinds())
	// The data survive for the next process.
	s = open(t, url, o)
	defer s.Close()
	if _, err := s.ReadData(1, 1); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
}

// TestPostgresRestartUnderLoad: PostgreSQL stopped (fast shutdown, and
// killed: immediate shutdown, crash recovery) and started again while
// commits keep coming. Commits fail while it is down, the same store
// resumes by itself once it is back, and nothing acknowledged is lost.
func TestPostgresRestartUnderLoad(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) { testRestartUnderLoad(t, mode) })
	}
}

func testRestartUnderLoad(t *testing.T, mode string) {
	url := newDB(t)
	s := open(t, url, testOptions())
	defer s.Close()
	if err := commit(s, true, putOp(1)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	l := startLoad(s, 8, stop)
	waitFor(t, "commits before the restart", 10*time.Second, func() bool { return l.okN.Load() > 50 })
	pid := srv.PID()
	down := srv.Stop
	if mode == "immediate" {
		down = srv.Crash
	}
	if err := down(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if srv.PID() == pid || pid == 0 {
		t.Fatalf("PostgreSQL was not restarted (pid %d)", pid)
	}
	after := l.okN.Load()
	deadline := time.Now().Add(15 * time.Second)
	for l.okN.Load() <= after+50 {
		if time.Now().After(deadline) {
			l.mu.Lock()
			t.Fatalf("no commits after the restart: health %v, refused %v, last %v", s.Health(), l.kinds(), l.errs[len(l.errs)-1:])
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	l.wg.Wait()
	if len(l.errs) == 0 {
		t.Log("no commit failed during the restart (it was quick)")
	}
	l.check(t, url)
	waitFor(t, "a healthy store", 5*time.Second, func() bool { return s.Health() == nil })
	t.Logf("%d commits acknowledged, refused: %v", len(l.acked), l.kinds())
}

// TestSessionLapseResumes: PostgreSQL away for longer than the session
// TTL. Once it is back the store registers a new session and re-takes its
// units (nobody else wrote them: their epochs had not moved), raising
// their epochs, and commits go through again without a restart.
func TestSessionLapseResumes(t *testing.T) {
	url := newDB(t)
	o := testOptions()
	o.SessionTTL, o.Heartbeat = time.Second, 100*time.Millisecond
	s := open(t, url, o)
	defer s.Close()
	if err := commit(s, true, putOp(1), appendOp(1, 1, "before")); err != nil {
		t.Fatal(err)
	}
	session := s.Session()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := commit(s, true, appendOp(1, 2, "while down")); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("commit while PostgreSQL is down: %v, want ErrUnavailable", err)
	}
	if s.Health() == nil {
		t.Fatal("Health is nil while PostgreSQL is down")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new session", 10*time.Second, func() bool { return s.Session() != session })
	if err := commit(s, true, appendOp(1, 3, "after")); err != nil {
		t.Fatalf("commit after the lapse: %v", err)
	}
	waitFor(t, "a healthy store", 5*time.Second, func() bool { return s.Health() == nil })
	if ep := queryInt(t, url, `SELECT epoch FROM bb_unit WHERE unit_id = 1`); ep != 2 {
		t.Fatalf("epoch %d after the re-take, want 2", ep)
	}
}
