package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// ClusterOptions say how the harness runs a cluster of two Busbar nodes
// (`serve --cluster`) on one PostgreSQL database, for the relay cells.
type ClusterOptions struct {
	Bin      string
	WorkDir  string
	Postgres string // the database URL; each round gets a schema of its own
	// Ports of node i (0, 1): AMQP, HTTP and the internal listener.
	Ports [2][3]int
}

// clusterSecret is the bench cluster's shared secret (at least 32 bytes).
const clusterSecret = "busbar-bench-cluster-secret-0123456789"

// settleAfterCreate is how long a queue created on node 0 may take to
// reach its owner: a unit placement gives to the other node is handed
// off after a drain of 5 s, and nodes look for work every second.
const settleAfterCreate = 8 * time.Second

// benchCluster is the two nodes both cluster targets share, started at
// the first Fresh and stopped by the stop function.
type benchCluster struct {
	o     ClusterOptions
	nodes [2]*busbarProc
	run   int
	up    bool
	adm   [2]*admin.Client
	// owner is the node serving the current cell's queue.
	owner int
}

// clusterProc is the cluster as a Process: PID is the owner's (for the
// RSS and restart checks); the meter sums the CPU of all PIDs.
type clusterProc struct {
	c *benchCluster
}

func (p clusterProc) PID() int        { return p.c.nodes[p.c.owner].PID() }
func (p clusterProc) DataDir() string { return "" }
func (p clusterProc) PIDs() []int {
	return []int{p.c.nodes[p.c.owner].PID(), p.c.nodes[1-p.c.owner].PID()}
}
func (p clusterProc) Roles() []string { return []string{"owner", "other node"} }

// multiProcess is a Process of several OS processes (a cluster): the
// meter's CPU figures are their sum, and the notes give each one's share.
type multiProcess interface {
	Process
	PIDs() []int
	Roles() []string
}

// NewClusterTargets returns two go-amqp targets on one two-node cluster:
// the first sends to each cell's queue through the node that serves it,
// the second through the other node, which relays the links to the
// owner. Broker CPU is the sum of both nodes, with each node's share in
// the notes.
func NewClusterTargets(o ClusterOptions) (owner, relayed *Target, stop func()) {
	c := &benchCluster{o: o}
	for i := range c.nodes {
		c.nodes[i] = &busbarProc{bin: o.Bin, amqpPort: o.Ports[i][0], httpPort: o.Ports[i][1]}
	}
	mk := func(via int, name, note string) *Target {
		cl := &amqp10Client{name: name, tier: "A", url: "", cbs: true, settleSecond: true}
		t := &Target{Client: cl, Proc: func() Process { return clusterProc{c} },
			Workloads: map[string]bool{"W1": true, "W2": true, "W3": true}, WorkloadsNA: "not run on the cluster (W1, W2, W3 only)",
			TopicsNA: "not run on the cluster", SkipW4: "not run on the cluster",
			Note: note,
			StoreMetrics: func() string {
				return fmt.Sprintf("http://127.0.0.1:%d/metrics", c.nodes[c.owner].httpPort)
			}}
		t.Fresh = func(ctx context.Context, queues []string, topics map[string][]string) error {
			if len(topics) > 0 {
				return fmt.Errorf("topics are not run on the cluster")
			}
			if err := c.ensure(ctx); err != nil {
				return err
			}
			for _, q := range queues {
				if err := c.create(ctx, q); err != nil {
					return err
				}
			}
			n := c.owner
			if via == 1 {
				n = 1 - c.owner
			}
			cl.url = fmt.Sprintf("amqp://127.0.0.1:%d", c.nodes[n].amqpPort)
			return nil
		}
		return t
	}
	owner = mk(0, "Busbar cluster of 2, via the owner (AMQP 1.0, go-amqp)",
		"2 nodes on one PostgreSQL; the client connects to the node serving the queue")
	relayed = mk(1, "Busbar cluster of 2, relayed (AMQP 1.0, go-amqp)",
		"2 nodes on one PostgreSQL; the client connects to the other node, which relays to the owner")
	return owner, relayed, c.stop
}

// ensure starts both nodes on a fresh schema unless they are running.
func (c *benchCluster) ensure(ctx context.Context) error {
	if c.up {
		return nil
	}
	u, err := neturl.Parse(c.o.Postgres)
	if err != nil {
		return fmt.Errorf("-postgres: %w", err)
	}
	c.run++
	q := u.Query()
	q.Set("search_path", fmt.Sprintf("bench_cluster_%d_%d", time.Now().Unix(), c.run))
	u.RawQuery = q.Encode()
	for i, p := range c.nodes {
		p.dir = filepath.Join(c.o.WorkDir, fmt.Sprintf("busbar-cluster-data-%d-n%d", c.run, i+1))
		os.RemoveAll(p.dir)
		p.extra = []string{"--cluster", "--store", u.String(), "--node-id", fmt.Sprintf("n%d", i+1),
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", c.o.Ports[i][2]), "--cluster-secret", clusterSecret, "--metrics-open"}
		if err := p.start(ctx); err != nil {
			c.stop()
			return fmt.Errorf("cluster node n%d: %w", i+1, err)
		}
		cs := fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", p.amqpPort)
		c.adm[i], err = admin.NewClientFromConnectionString(cs, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
			Transport: plainHTTP{fmt.Sprintf("127.0.0.1:%d", p.httpPort)}, Retry: policy.RetryOptions{MaxRetries: -1}}})
		if err != nil {
			c.stop()
			return err
		}
	}
	c.up = true
	return nil
}

// create makes queue q through node 0's admin API and waits until it has
// settled on its owner: after settleAfterCreate, exactly one node
// serves it, the same one twice a second apart.
func (c *benchCluster) create(ctx context.Context, q string) error {
	props := &admin.QueueProperties{LockDuration: to("PT5M"), MaxDeliveryCount: to(int32(10)), MaxSizeInMegabytes: to(int32(81920))}
	created := time.Now()
	if _, err := c.adm[0].CreateQueue(ctx, q, &admin.CreateQueueOptions{Properties: props}); err != nil {
		return fmt.Errorf("create %s on node n1: %w", q, err)
	}
	last := -1
	deadline := created.Add(settleAfterCreate + 60*time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(created.Add(settleAfterCreate))):
		}
		var on []int
		for i := range c.nodes {
			got, err := c.serves(ctx, i, q)
			if err != nil {
				return fmt.Errorf("metrics of n%d: %w", i+1, err)
			}
			if got {
				on = append(on, i)
			}
		}
		if len(on) == 1 && on[0] == last {
			c.owner = last
			return nil
		}
		last = -1
		if len(on) == 1 {
			last = on[0]
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("queue %s did not settle on one node", q)
}

// serves says whether node i serves queue q: its /metrics has the
// queue's series (the admin API answers on every node, forwarding to the
// owner).
func (c *benchCluster) serves(ctx context.Context, i int, q string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", c.nodes[i].httpPort), nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return strings.Contains(string(body), `busbar_active_messages{entity="`+q+`"}`), nil
}

func (c *benchCluster) stop() {
	for _, p := range c.nodes {
		p.stop()
		if p.dir != "" {
			os.RemoveAll(p.dir)
		}
	}
	c.up = false
}

func to[T any](v T) *T { return &v }

// plainHTTP sends the admin client's requests over plain HTTP to addr
// (the SDK's admin client speaks HTTPS).
type plainHTTP struct{ addr string }

func (p plainHTTP) Do(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = "http", p.addr, p.addr
	return http.DefaultClient.Do(r)
}
