package main

// The process harness of the cluster tests (docs/design/cluster.md §15.1):
// a throw-away PostgreSQL (pgtest), the busbar binary built once per test,
// and nodes started as real `busbar serve --cluster` processes on loopback
// ephemeral ports, GOMAXPROCS=1 each. The harness owns the processes: it
// kills them by PID in t.Cleanup. Which node owns a unit, and with which
// epoch, is read from bb_unit and bb_node (read only); when a node loaded a
// unit comes from its JSON log ("unit acquired and loaded").

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/jackc/pgx/v5"

	"github.com/busbarmq/busbar/internal/cluster"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

const procClusterSecret = "process-test-secret-0123456789abcdef"

// Cluster timings of the acceptance tests (short) and the defaults (the
// fail-over figures).
var (
	fastTimings = clusterTimings{Heartbeat: 200 * time.Millisecond, TTL: 2 * time.Second, Margin: 500 * time.Millisecond, Poll: 200 * time.Millisecond}
	// defaultTimings are the flags' defaults (docs/cluster.md); the
	// nodes get no timing flag.
	defaultTimings = clusterTimings{Heartbeat: time.Second, TTL: 5 * time.Second, Margin: time.Second, Poll: time.Second, defaults: true}
)

type clusterTimings struct {
	Heartbeat, TTL, Margin, Poll time.Duration
	defaults                     bool
}

func (c clusterTimings) flags() []string {
	if c.defaults {
		return nil
	}
	return []string{"--cluster-heartbeat", c.Heartbeat.String(), "--cluster-lease-ttl", c.TTL.String(),
		"--cluster-trust-margin", c.Margin.String(), "--cluster-poll", c.Poll.String()}
}

// procCluster is a PostgreSQL server and the busbar processes on it.
type procCluster struct {
	t       *testing.T
	dir     string
	bin     string
	url     string
	pgAddr  string // the PostgreSQL server's host:port
	timings clusterTimings
	extra   []string // more serve flags for every node
	// proxied, set before the nodes start, puts a pgtest.Proxy of its
	// own between each node and PostgreSQL (proxies, by node id; one
	// per id across restarts).
	proxied bool
	proxies map[string]*pgtest.Proxy
	http    *http.Client

	dbMu sync.Mutex
	db   *pgx.Conn

	mu    sync.Mutex
	nodes map[string]*procNode
}

// procNode is one busbar process (the latest of its node id).
type procNode struct {
	id      string
	cmd     *exec.Cmd
	amqp    string // AMQP address, from the ready line
	httpA   string // HTTP address
	log     *nodeLog
	started time.Time
	gone    bool // killed (or exited) and waited for
}

// newProcCluster builds the binary and starts PostgreSQL; nodes are
// started with start. Everything stops in t.Cleanup.
func newProcCluster(t *testing.T, timings clusterTimings) *procCluster {
	t.Helper()
	pg, err := pgtest.Start()
	if err != nil {
		// Not skipped: these tests are the cluster's acceptance proof.
		t.Fatalf("%v (Debian/Ubuntu: apt-get install postgresql; the tests run initdb and pg_ctl from /usr/lib/postgresql/*/bin)", err)
	}
	t.Cleanup(func() { pg.Close() })
	url, err := pg.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	// The nodes' logs stay when the test fails (the path is logged).
	dir, err := os.MkdirTemp("", "busbar-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the nodes' logs are kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	bin := filepath.Join(dir, "busbar")
	// BUSBAR_CLUSTER_TEST_TAGS builds the nodes with build tags, e.g.
	// busbar_nofence to see which of these tests the fence decides.
	if out, err := exec.Command("go", "build", "-tags", os.Getenv("BUSBAR_CLUSTER_TEST_TAGS"), "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	c := &procCluster{t: t, dir: dir, bin: bin, url: url, pgAddr: fmt.Sprintf("127.0.0.1:%d", pg.Port), timings: timings,
		db: db, nodes: map[string]*procNode{}, proxies: map[string]*pgtest.Proxy{},
		http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := make([]*procNode, 0, len(c.nodes))
		for _, n := range c.nodes {
			nodes = append(nodes, n)
		}
		c.mu.Unlock()
		for _, n := range nodes {
			if !n.gone {
				// Killed by PID; a stopped process dies of SIGKILL too.
				_ = syscall.Kill(n.cmd.Process.Pid, syscall.SIGKILL)
				n.wait()
			}
		}
		tr.CloseIdleConnections()
		c.dbMu.Lock()
		_ = c.db.Close(context.Background())
		c.dbMu.Unlock()
	})
	return c
}

// start starts node id (again, after a kill: same id, new ports) and
// waits until it logged "busbar ready".
func (c *procCluster) start(id string) *procNode {
	c.t.Helper()
	url := c.url
	if c.proxied {
		url = c.proxyURL(id)
	}
	args := append([]string{"serve", "--cluster", "--store", url, "--node-id", id,
		"--cluster-listen", "127.0.0.1:0", "--cluster-secret", procClusterSecret,
		"--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"}, c.timings.flags()...)
	args = append(args, c.extra...)
	cmd := exec.Command(c.bin, args...)
	wd := filepath.Join(c.dir, id)
	if err := os.MkdirAll(wd, 0o755); err != nil {
		c.t.Fatal(err)
	}
	cmd.Dir = wd // no Config.json to find there
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	lg, err := newNodeLog(filepath.Join(wd, fmt.Sprintf("log-%d.json", time.Now().UnixNano())))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = lg, lg
	n := &procNode{id: id, cmd: cmd, log: lg, started: time.Now()}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	if old := c.nodes[id]; old != nil && !old.gone {
		c.mu.Unlock()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		c.t.Fatalf("node %s started twice", id)
	}
	c.nodes[id] = n
	c.mu.Unlock()
	select {
	case r := <-lg.readyC:
		n.amqp, n.httpA = r[0], r[1]
		return n
	case <-time.After(45 * time.Second):
		_ = cmd.Process.Kill()
		n.wait()
		c.t.Fatalf("node %s did not become ready within 45 s; log %s", id, lg.path)
		return nil
	}
}

// proxyURL is the store URL of node id through its proxy (made on
// first use, closed in t.Cleanup after the nodes are killed).
func (c *procCluster) proxyURL(id string) string {
	c.t.Helper()
	c.mu.Lock()
	p := c.proxies[id]
	c.mu.Unlock()
	if p == nil {
		var err error
		if p, err = pgtest.NewProxy(c.pgAddr); err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { p.Close() })
		c.mu.Lock()
		c.proxies[id] = p
		c.mu.Unlock()
	}
	u, err := p.URL(c.url)
	if err != nil {
		c.t.Fatal(err)
	}
	return u
}

// proxy is node id's proxy (proxied clusters).
func (c *procCluster) proxy(id string) *pgtest.Proxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proxies[id]
}

func (c *procCluster) node(id string) *procNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// kill sends SIGKILL to node id and waits for the process; it returns
// the moment just before the signal.
func (c *procCluster) kill(id string) time.Time {
	c.t.Helper()
	n := c.node(id)
	at := time.Now()
	if err := syscall.Kill(n.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	n.wait()
	return at
}

// wait waits for the process to end and closes its log file.
func (n *procNode) wait() {
	_ = n.cmd.Wait()
	n.gone = true
	n.log.mu.Lock()
	_ = n.log.f.Close()
	n.log.mu.Unlock()
}

// signal sends sig (SIGSTOP, SIGCONT) to node id.
func (c *procCluster) signal(id string, sig syscall.Signal) {
	c.t.Helper()
	pid := c.node(id).cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		c.t.Fatal(err)
	}
	if sig == syscall.SIGSTOP {
		// kill returns before the stop takes effect: until every thread
		// is stopped the node may still read and commit what a client
		// sends it.
		c.waitStopped(pid)
	}
}

// waitStopped waits until every thread of process pid is stopped (state
// T in /proc/PID/task/TID/stat).
func (c *procCluster) waitStopped(pid int) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			c.t.Fatal(err)
		}
		stopped := len(tasks) > 0
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				stopped = false
				break
			}
			// "pid (comm) S ...": the state follows the last ')'.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("process %d not stopped 10 s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// connectionString is the SDK connection string through node id.
func (c *procCluster) connectionString(id string) string {
	return "Endpoint=sb://" + c.node(id).amqp + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
}

// client is an SDK client connected to node id, with short retries, closed
// in t.Cleanup.
func (c *procCluster) client(id string, retries int32) *azservicebus.Client {
	c.t.Helper()
	cl, err := azservicebus.NewClientFromConnectionString(c.connectionString(id), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: retries, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	return cl
}

// admin is an administration client talking plain HTTP to node id.
func (c *procCluster) admin(id string) *admin.Client {
	c.t.Helper()
	adm, err := admin.NewClientFromConnectionString(c.connectionString(id), &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: plainHTTPTo{c.node(id).httpA, c.http}, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		c.t.Fatal(err)
	}
	return adm
}

type plainHTTPTo struct {
	addr string
	c    *http.Client
}

func (p plainHTTPTo) Do(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = "http", p.addr, p.addr
	return p.c.Do(r)
}

// unitRow is a unit's bb_unit row and whether its owner's session is live.
type unitRow struct {
	ID        uint64
	Name      string
	Owner     string
	Session   int64
	Epoch     uint64
	State     string
	ChangedAt time.Time
	Live      bool // the owner's session is the row's and not expired
}

func (c *procCluster) query(f func(ctx context.Context, db *pgx.Conn) error) error {
	c.dbMu.Lock()
	defer c.dbMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return f(ctx, c.db)
}

// units reads every bb_unit row.
func (c *procCluster) units() (map[string]unitRow, error) {
	out := map[string]unitRow{}
	err := c.query(func(ctx context.Context, db *pgx.Conn) error {
		rows, err := db.Query(ctx, `SELECT u.unit_id, u.name_key, coalesce(u.owner_node, ''), coalesce(u.owner_session, 0),
			u.epoch, u.state, u.changed_at,
			coalesce(n.session = u.owner_session AND n.expires_at > clock_timestamp(), false)
			FROM bb_unit u LEFT JOIN bb_node n ON n.node_id = u.owner_node`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r unitRow
			if err := rows.Scan(&r.ID, &r.Name, &r.Owner, &r.Session, &r.Epoch, &r.State, &r.ChangedAt, &r.Live); err != nil {
				return err
			}
			out[r.Name] = r
		}
		return rows.Err()
	})
	return out, err
}

func (c *procCluster) unit(name string) unitRow {
	c.t.Helper()
	us, err := c.units()
	if err != nil {
		c.t.Fatal(err)
	}
	u, ok := us[strings.ToLower(name)]
	if !ok {
		c.t.Fatalf("no unit %s in bb_unit", name)
	}
	return u
}

// adminForNext is the administration client of the node placement will
// give the next created unit: its id is the next value of the catalog's
// sequence (read, not taken), so creating it there saves a hand-off. A
// wrong guess only costs the hand-off.
func (c *procCluster) adminForNext() *admin.Client {
	c.t.Helper()
	var next int64
	err := c.query(func(ctx context.Context, db *pgx.Conn) error {
		return db.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM bb_entity_id_seq`).Scan(&next)
	})
	live, lerr := c.liveNodes()
	if err != nil || lerr != nil || len(live) == 0 {
		c.t.Fatalf("next entity id: %v, live nodes: %v", err, lerr)
	}
	return c.admin(cluster.Winner(uint64(next), live))
}

// liveNodes are the ids of the live, non-draining sessions, sorted.
func (c *procCluster) liveNodes() ([]string, error) {
	var ids []string
	err := c.query(func(ctx context.Context, db *pgx.Conn) error {
		rows, err := db.Query(ctx, `SELECT node_id FROM bb_node WHERE expires_at > clock_timestamp() AND NOT draining ORDER BY node_id`)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return ids, err
}

// nodeSession is node id's session number in bb_node.
func (c *procCluster) nodeSession(id string) int64 {
	c.t.Helper()
	var s int64
	if err := c.query(func(ctx context.Context, db *pgx.Conn) error {
		return db.QueryRow(ctx, `SELECT session FROM bb_node WHERE node_id = $1`, id).Scan(&s)
	}); err != nil {
		c.t.Fatal(err)
	}
	return s
}

// waitStable waits until every unit is owned by its placement winner
// among the running nodes, that node's session is live and it logged
// loading (or adopting, when it created it) the unit with the row's
// epoch; it returns the rows.
func (c *procCluster) waitStable(ctx context.Context) map[string]unitRow {
	c.t.Helper()
	var why string
	for {
		us, err := c.units()
		live, lerr := c.liveNodes()
		why = fmt.Sprint(err, lerr)
		if err == nil && lerr == nil {
			why = ""
			c.mu.Lock()
			var running []string
			for id, n := range c.nodes {
				if !n.gone {
					running = append(running, id)
				}
			}
			c.mu.Unlock()
			slices.Sort(running)
			if !slices.Equal(running, live) {
				why = fmt.Sprintf("live sessions %v, running %v", live, running)
			}
			for name, u := range us {
				if why != "" {
					break
				}
				w := cluster.Winner(u.ID, live)
				switch {
				case u.State != "owned" || u.Owner != w || !u.Live:
					why = fmt.Sprintf("unit %s: %+v, winner %s", name, u, w)
				case !c.node(w).log.loadedEpoch(u.ID, u.Epoch):
					why = fmt.Sprintf("unit %s: %s has not loaded epoch %d yet", name, w, u.Epoch)
				}
			}
			if why == "" {
				return us
			}
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("the cluster did not settle: %s: %v", why, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitTaken waits until unit name has an epoch above epoch, owned by a
// live session; it returns the row and when the test saw it.
func (c *procCluster) waitTaken(ctx context.Context, name string, epoch uint64) (unitRow, time.Time) {
	c.t.Helper()
	for {
		us, err := c.units()
		if err == nil {
			if u := us[strings.ToLower(name)]; u.Epoch > epoch && u.State == "owned" && u.Live {
				return u, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("unit %s was not taken over (epoch above %d): %v", name, epoch, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// nodeLog is a node's stderr: written to a file, and the lines the tests
// need kept.
type nodeLog struct {
	path   string
	readyC chan [2]string

	mu      sync.Mutex
	f       *os.File
	partial []byte
	ready   bool
	loaded  map[[2]uint64]time.Time // (unit, epoch) -> the log's time
	events  []logEvent
}

type logEvent struct {
	Time  time.Time
	Level string
	Msg   string
	Unit  uint64
	Epoch uint64
	Line  string
}

func newNodeLog(path string) (*nodeLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &nodeLog{path: path, f: f, readyC: make(chan [2]string, 1), loaded: map[[2]uint64]time.Time{}}, nil
}

func (l *nodeLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.line(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

func (l *nodeLog) line(b []byte) {
	var rec struct {
		Time  time.Time `json:"time"`
		Level string    `json:"level"`
		Msg   string    `json:"msg"`
		AMQP  string    `json:"amqp"`
		HTTP  string    `json:"http"`
		Unit  uint64    `json:"unit"`
		Epoch uint64    `json:"epoch"`
	}
	if json.Unmarshal(b, &rec) != nil {
		return
	}
	switch {
	case rec.Msg == "busbar ready" && !l.ready:
		l.ready = true
		l.readyC <- [2]string{rec.AMQP, rec.HTTP}
	case rec.Msg == "unit acquired and loaded", rec.Msg == "unit created here adopted":
		// A unit is served at an epoch either after loading it or, when
		// the node created it (on the placement winner), from its creation:
		// the node adopts it at the row's epoch without loading it.
		l.loaded[[2]uint64{rec.Unit, rec.Epoch}] = rec.Time
	}
	if rec.Level != "INFO" || strings.HasPrefix(rec.Msg, "unit ") || strings.HasPrefix(rec.Msg, "cluster") {
		l.events = append(l.events, logEvent{Time: rec.Time, Level: rec.Level, Msg: rec.Msg, Unit: rec.Unit, Epoch: rec.Epoch, Line: string(b)})
	}
}

// loadedEpoch tells whether the node logged loading (or adopting) unit at
// epoch.
func (l *nodeLog) loadedEpoch(unit, epoch uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.loaded[[2]uint64{unit, epoch}]
	return ok
}

// loadedAt is when the node logged loading unit at epoch.
func (l *nodeLog) loadedAt(unit, epoch uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.loaded[[2]uint64{unit, epoch}]
	return at, ok
}

// eventsSince are the kept lines logged at or after since.
func (l *nodeLog) eventsSince(since time.Time) []logEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logEvent
	for _, e := range l.events {
		if !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// retryable runs op until it succeeds or ctx ends, pausing between tries.
func retryable(ctx context.Context, what string, op func(ctx context.Context) error) error {
	var last error
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(octx)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var errEmpty = errors.New("no message")
