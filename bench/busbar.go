package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ExportHead copies the committed tree rev (e.g. HEAD) of the checkout
// at repo into dir with git archive, so that a benchmark measures a commit even
// while the work tree is being edited. It returns the short commit id.
func ExportHead(repo, rev, dir string) (string, error) {
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	id, err := exec.Command("git", "-C", repo, "rev-parse", "--short", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse %s: %w", rev, err)
	}
	cmd := exec.Command("sh", "-c", `git -C "$1" archive "$3" | tar -x -C "$2"`, "sh", repo, dir, rev)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive: %v\n%s", err, b)
	}
	return strings.TrimSpace(string(id)), nil
}

// BuildBusbar builds the broker from the source tree at src into out,
// with the main module's own go.mod (so the binary is the one that ships).
func BuildBusbar(src, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/busbar")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/busbar: %v\n%s", err, b)
	}
	return nil
}

// busbarProc is one `busbar serve` process.
type busbarProc struct {
	bin, dir, cfg      string
	amqpPort, httpPort int
	extra              []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when cmd has been reaped
	// restarted is when the process after a kill -9 was started.
	restarted time.Time
}

func (p *busbarProc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *busbarProc) DataDir() string { return p.dir }

// writeBusbarConfig writes an emulator Config.json declaring queues and
// topics (name → subscriptions), with sizes large enough for the backlog
// test and a 5-minute lock.
func writeBusbarConfig(path string, queues []string, topics map[string][]string) error {
	props := map[string]any{"LockDuration": "PT5M", "MaxDeliveryCount": 10, "MaxSizeInMegabytes": 81920}
	var qs []any
	for _, q := range queues {
		qs = append(qs, map[string]any{"Name": q, "Properties": props})
	}
	var ts []any
	for t, subs := range topics {
		var ss []any
		for _, s := range subs {
			ss = append(ss, map[string]any{"Name": s, "Properties": map[string]any{"LockDuration": "PT5M", "MaxDeliveryCount": 10}, "Rules": []any{}})
		}
		ts = append(ts, map[string]any{"Name": t, "Properties": map[string]any{"MaxSizeInMegabytes": 81920}, "Subscriptions": ss})
	}
	if qs == nil {
		qs = []any{}
	}
	if ts == nil {
		ts = []any{}
	}
	cfg := map[string]any{"UserConfig": map[string]any{
		"Namespaces": []any{map[string]any{"Name": "sbemulatorns", "Queues": qs, "Topics": ts}},
		"Logging":    map[string]any{"Type": "Console"},
	}}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// start runs the process on p.dir and waits until GET /health is 200.
func (p *busbarProc) start(ctx context.Context) error {
	if err := p.startNoWait(); err != nil {
		return err
	}
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	return p.waitHealthy(ctx, cmd)
}

func (p *busbarProc) waitHealthy(ctx context.Context, cmd *exec.Cmd) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/health", p.httpPort)
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if !alive(cmd.Process.Pid) {
			return fmt.Errorf("busbar exited during start-up; see %s", p.log.Name())
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("busbar not healthy after 120 s; see %s", p.log.Name())
}

// stop sends SIGTERM and waits for the process to end (SIGKILL after 20 s).
func (p *busbarProc) stop() {
	p.mu.Lock()
	cmd, logf, exited := p.cmd, p.log, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	logf.Close()
	p.waitPortsFree()
}

// waitPortsFree waits (up to 30 s) until nothing listens on the ports.
func (p *busbarProc) waitPortsFree() {
	for i := 0; i < 3000 && (!portFree(p.amqpPort) || !portFree(p.httpPort)); i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// kill9 kills the process with SIGKILL and waits until it is gone.
func (p *busbarProc) kill9() {
	p.mu.Lock()
	cmd, logf, exited := p.cmd, p.log, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	// Wait until the kernel has torn the process down and it is reaped
	// (with a large heap this takes a while): only then are its
	// listening sockets gone.
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
	}
	logf.Close()
	p.waitPortsFree()
}

// BusbarOptions say where and how the harness runs Busbar.
type BusbarOptions struct {
	Bin      string // built binary
	WorkDir  string // data directories go under it
	AMQPPort int
	HTTPPort int
	Extra    []string // more serve flags
	Label    string   // e.g. "Busbar"
	Src      string   // the source tree the binary was built from, for the topics check
	// Memory runs `serve --memory`: nothing on disk, so nothing is
	// durable. The go-amqp target is then labelled "Busbar --memory, not
	// durable" with tier "none (memory)", and W4 (kill -9 with a backlog)
	// is not run: the restart loses everything by design.
	Memory bool
	// Postgres, a PostgreSQL URL, runs `serve --store` on it, each fresh
	// run in a schema of its own (search_path).
	Postgres string
}

// memoryTier is the tier of Busbar with --memory: acknowledged messages
// are not durable.
const memoryTier = "none (memory)"

// NewBusbarTargets returns the go-amqp target and the azservicebus SDK
// target sharing one process manager, and a stop function.
func NewBusbarTargets(o BusbarOptions) (goamqp, sdk *Target, stop func()) {
	extra := o.Extra
	tier := "A"
	label := o.Label
	if label == "" {
		label = "Busbar"
	}
	if o.Memory {
		extra = append([]string{"--memory"}, extra...)
		tier = memoryTier
		if o.Label == "" {
			label = "Busbar --memory, not durable"
		}
	}
	p := &busbarProc{bin: o.Bin, amqpPort: o.AMQPPort, httpPort: o.HTTPPort, extra: extra}
	url := fmt.Sprintf("amqp://127.0.0.1:%d", o.AMQPPort)
	run := 0
	prefix := "busbar" // data directory, log and Config.json names
	if o.Memory {
		prefix = "busbar-memory"
	}
	if o.Postgres != "" {
		prefix = "busbar-postgres"
		if o.Label == "" {
			label = "Busbar on PostgreSQL"
		}
	}
	fresh := func(ctx context.Context, queues []string, topics map[string][]string) error {
		p.stop()
		if p.dir != "" {
			os.RemoveAll(p.dir)
		}
		run++
		p.dir = filepath.Join(o.WorkDir, fmt.Sprintf("%s-data-%d", prefix, run))
		os.RemoveAll(p.dir)
		p.cfg = filepath.Join(o.WorkDir, fmt.Sprintf("%s-config-%d.json", prefix, run))
		if o.Postgres != "" {
			u, err := neturl.Parse(o.Postgres)
			if err != nil {
				return fmt.Errorf("-postgres: %w", err)
			}
			q := u.Query()
			q.Set("search_path", fmt.Sprintf("bench_%d_%d", time.Now().Unix(), run))
			u.RawQuery = q.Encode()
			p.extra = append(append([]string(nil), extra...), "--store", u.String())
		}
		if err := writeBusbarConfig(p.cfg, queues, topics); err != nil {
			return err
		}
		return p.start(ctx)
	}
	kill := func(ctx context.Context) error {
		p.kill9()
		// Same data directory and Config.json (its entities already exist).
		return p.startNoWait()
	}
	proc := func() Process { return p }
	topicNA := topicsAvailable(o.Src)
	c := &amqp10Client{name: label + " (AMQP 1.0, go-amqp)", tier: tier, url: url, cbs: true, settleSecond: true,
		topic: func(ctx context.Context, t string, subs []string) (string, []string, error) {
			var recv []string
			for _, s := range subs {
				recv = append(recv, t+"/Subscriptions/"+s)
			}
			return t, recv, nil
		}}
	started := func() time.Time {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.restarted
	}
	goamqp = &Target{Client: c, Proc: proc, Fresh: fresh, Kill9Restart: kill, TopicsNA: topicNA, Started: started,
		Note: "CBS put-token with RootManageSharedAccessKey; complete = rcv-settle-mode second, waits for the broker's settlement"}
	if !o.Memory {
		// The store's transactions in each cell's notes: /metrics is
		// opened (it needs a token otherwise).
		extra = append(append([]string(nil), extra...), "--metrics-open")
		p.extra = extra
		goamqp.StoreMetrics = func() string { return fmt.Sprintf("http://127.0.0.1:%d/metrics", o.HTTPPort) }
	}
	if o.Memory {
		goamqp.Kill9Restart, goamqp.Started = nil, nil
		goamqp.SkipW4 = "n/a (--memory: kill -9 loses everything by design)"
		goamqp.Note = "serve --memory: nothing on disk, acknowledged messages are NOT durable; " + goamqp.Note
	}
	sc := &sdkClient{name: label + " (azservicebus SDK)", tier: tier, cs: fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", o.AMQPPort)}
	sdk = &Target{Client: sc, Proc: proc, Fresh: fresh, TopicsNA: "not run with the SDK",
		Note: "azservicebus v1.11.0: SendMessage per message; ReceiveMessages + CompleteMessage (peek-lock, settle mode second)"}
	return goamqp, sdk, func() {
		p.stop()
		if p.dir != "" {
			os.RemoveAll(p.dir)
		}
	}
}

// startNoWait starts the process on the existing data directory without
// waiting for it to become healthy (the caller times first delivery).
func (p *busbarProc) startNoWait() error {
	args := []string{"serve", "--data", p.dir, "--amqp", fmt.Sprintf("127.0.0.1:%d", p.amqpPort),
		"--http", fmt.Sprintf("127.0.0.1:%d", p.httpPort), "--log-level", "warn"}
	if p.cfg != "" {
		args = append(args, "--config", p.cfg)
	}
	args = append(args, p.extra...)
	cmd, logf, exited, err := startBroker(p.bin, filepath.Join(filepath.Dir(p.dir), filepath.Base(p.dir)+".log"), args...)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd, p.log, p.exited = cmd, logf, exited
	p.restarted = time.Now()
	p.mu.Unlock()
	return nil
}

// topicsAvailable returns "" when the checkout's broker has topics
// (broker.CreateTopic exists), else the reason to print instead of a
// figure. Whether topic addresses work over AMQP is found out when W5
// runs: a failure there is printed, never a number. It reads the source
// files rather than asking the go tool, which failed now and then while
// other builds ran and so turned W5 into "n/a" at random.
func topicsAvailable(src string) string {
	if src == "" {
		return "n/a (topics not checked: unknown source tree)"
	}
	files, err := filepath.Glob(filepath.Join(src, "internal", "broker", "*.go"))
	if err != nil || len(files) == 0 {
		return fmt.Sprintf("n/a (topics not checked: no internal/broker in %s)", src)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Sprintf("n/a (topics not checked: %v)", err)
		}
		if bytes.Contains(b, []byte("func (b *Broker) CreateTopic(")) {
			return ""
		}
	}
	return "n/a (topics not yet available)"
}
