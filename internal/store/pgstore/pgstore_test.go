package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/pgstore"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
	"github.com/busbarmq/busbar/internal/store/storetest"
)

// srv is the one PostgreSQL server of this test binary; nil (with
// noPG saying why) when the binaries are missing.
var (
	srv  *pgtest.Server
	noPG error
)

func TestMain(m *testing.M) {
	var err error
	srv, err = pgtest.Start()
	if err != nil {
		if !errors.Is(err, pgtest.ErrNoPostgres) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		noPG = err
	}
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newDB returns the URL of a new empty database, or skips when there is
// no PostgreSQL.
func newDB(t testing.TB) string {
	t.Helper()
	if srv == nil {
		t.Skipf("skipped: %v", noPG)
	}
	url, err := srv.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return url
}

func testOptions() pgstore.Options {
	return pgstore.Options{SessionTTL: 2 * time.Second, Heartbeat: 200 * time.Millisecond, TxnDeadline: 3 * time.Second}
}

func open(t testing.TB, url string, o pgstore.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), url, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestSuite(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) storetest.Opener {
			url := newDB(t)
			return func() (store.Store, error) { return pgstore.Open(context.Background(), url, testOptions()) }
		},
		Persistent: true,
	})
}

// TestSuiteChunked runs the suite with a tiny inline limit, so
// every Data above 16 bytes goes through bb_body (in 4 KiB parts).
func TestSuiteChunked(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) storetest.Opener {
			url := newDB(t)
			o := testOptions()
			o.InlineLimit, o.ChunkSize = 16, 4096
			return func() (store.Store, error) { return pgstore.Open(context.Background(), url, o) }
		},
		Persistent: true,
	})
}

// TestSchemaFromSearchPath: the first schema of the URL's search_path is
// created when missing and holds the tables.
func TestSchemaFromSearchPath(t *testing.T) {
	url := newDB(t) + "_own"
	s := open(t, url, testOptions())
	defer s.Close()
	if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1}}}, true); err != nil {
		t.Fatal(err)
	}
	n, err := pgtest.QueryInt(url, `SELECT count(*) FROM pg_tables WHERE tablename = 'bb_entity' AND schemaname = current_schema()`)
	if err != nil || n != 1 {
		t.Fatalf("bb_entity in the search_path's schema: %d, %v", n, err)
	}
}

// countingObserver records the commit transactions.
type countingObserver struct {
	mu            sync.Mutex
	txns, commits int
	most          int
}

func (c *countingObserver) Synced(_ time.Duration, commits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.txns++
	c.commits += commits
	c.most = max(c.most, commits)
}

// TestGroupCommit: concurrent commits to one queue share transactions
// (one in flight per unit, the rest gathered into the next one).
func TestGroupCommit(t *testing.T) {
	url := newDB(t)
	obs := &countingObserver{}
	o := testOptions()
	o.SyncObserver = obs
	s := open(t, url, o)
	defer s.Close()
	if err := s.Commit(&store.Batch{Ops: []store.Op{{Kind: store.OpPutEntity, EntityID: 1}}}, true); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				op := store.Op{Kind: store.OpAppend, EntityID: 1, Seq: uint64(g*100 + i + 1), Meta: []byte("m"), Data: []byte("d")}
				if err := s.Commit(&store.Batch{Ops: []store.Op{op}}, true); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	t.Logf("%d commits in %d transactions, at most %d in one", obs.commits, obs.txns, obs.most)
	if obs.most < 2 || obs.txns >= obs.commits {
		t.Fatalf("%d commits in %d transactions (at most %d in one): no group commit", obs.commits, obs.txns, obs.most)
	}
}
