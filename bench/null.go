package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// BuildNull builds cmd/busbar-null (the null broker, see nullbroker) from
// the bench module at benchDir into out. When busbarSrc is set, Busbar's
// internal packages (the AMQP endpoint) come from that tree instead of
// the bench module's replace (../): a go.work file overrides it, so the
// null broker runs the same endpoint as the busbar binary built from the
// same commit.
func BuildNull(benchDir, busbarSrc, out string) error {
	benchDir, _ = filepath.Abs(benchDir)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/busbar-null")
	cmd.Dir = benchDir
	if busbarSrc != "" {
		busbarSrc, _ = filepath.Abs(busbarSrc)
		work := filepath.Join(filepath.Dir(out), "busbar-null.go.work")
		txt := fmt.Sprintf("go 1.26.0\n\nuse %s\n\nreplace github.com/busbarmq/busbar => %s\n", benchDir, busbarSrc)
		if err := os.WriteFile(work, []byte(txt), 0o644); err != nil {
			return err
		}
		cmd.Env = append(os.Environ(), "GOWORK="+work)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/busbar-null: %v\n%s", err, b)
	}
	return nil
}

// nullProc is one busbar-null process.
type nullProc struct {
	bin  string
	port int
	size int
	logp string
	// forward starts the process with --forward (W3); set before start.
	forward bool
	// syncDir, when set, starts it with --sync syncDir (null-durable);
	// retain adds --retain (null-durable-retain).
	syncDir string
	retain  bool

	mu     sync.Mutex
	cmd    interface{ Signal(os.Signal) error }
	pid    int
	exited chan struct{}
	logf   *os.File
}

func (p *nullProc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func (p *nullProc) DataDir() string { return p.syncDir }

func (p *nullProc) start(ctx context.Context) error {
	args := []string{"--amqp", fmt.Sprintf("127.0.0.1:%d", p.port), "--size", fmt.Sprint(p.size)}
	if p.forward {
		args = append(args, "--forward")
	}
	if p.syncDir != "" {
		if err := os.MkdirAll(p.syncDir, 0o755); err != nil {
			return err
		}
		args = append(args, "--sync", p.syncDir)
		if p.retain {
			args = append(args, "--retain")
		}
	}
	cmd, logf, exited, err := startBroker(p.bin, p.logp, args...)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd, p.pid, p.exited, p.logf = cmd.Process, cmd.Process.Pid, exited, logf
	p.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitPort(wctx, fmt.Sprintf("127.0.0.1:%d", p.port)); err != nil {
		p.stop()
		return fmt.Errorf("busbar-null did not start (see %s): %w", p.logp, err)
	}
	return nil
}

// fresh is a Target's Fresh (or FreshW3): a new process per cell, as for
// Busbar, in forwarding mode or not.
func (p *nullProc) fresh(forward bool) func(ctx context.Context, queues []string, topics map[string][]string) error {
	return func(ctx context.Context, queues []string, topics map[string][]string) error {
		p.stop()
		p.forward = forward
		return p.start(ctx)
	}
}

func (p *nullProc) stop() {
	p.mu.Lock()
	cmd, exited, logf := p.cmd, p.exited, p.logf
	p.cmd, p.pid = nil, 0
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Signal(syscall.SIGKILL)
		<-exited
	}
	logf.Close()
	for i := 0; i < 3000 && !portFree(p.port); i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// NullOptions say where and how the harness runs the null broker.
type NullOptions struct {
	Bin     string // built busbar-null
	WorkDir string
	Port    int
	Size    int // body bytes of delivered messages
}

// nullNA is printed for the workloads the null broker does not run: it
// stores nothing, so it has no backlog (W4), and it has no topics (W5).
const nullNA = "n/a (null broker: W1, W2 and W3 only)"

// nullSDKNA is printed for the workloads not run with the SDK against
// the null broker.
const nullSDKNA = "n/a (null broker with the SDK: W1 and W2 only)"

// nullDurableNA is printed for the workloads the durable null broker
// does not run.
const nullDurableNA = "n/a (durable null broker: W1, W2 and W3 only)"

// nullDurableJournal is the durable null broker's journal directory under
// the work directory.
const nullDurableJournal = "null-journal"

// The null broker's target names: the go-amqp one is the ceiling the
// Rounds section (WriteRounds) divides the other targets' figures by.
// The durable null broker is not a ceiling of that kind: it is measured
// against it, as Busbar is.
const (
	nullGoAMQPName  = "Null broker (AMQP 1.0, go-amqp)"
	nullSDKName     = "Null broker (azservicebus SDK)"
	nullDurableName = "Null broker, durable (AMQP 1.0, go-amqp)"
	nullRetainName  = "Null broker, durable, retaining (AMQP 1.0, go-amqp)"
)

// NewNullTargets returns the null broker driven by go-amqp and by the
// azservicebus SDK, sharing one process manager, and a stop function.
// Clients authenticate as against Busbar (CBS put-token, answered 202
// without checking) and settle as against Busbar (rcv-settle-mode second,
// waiting for the settlement); the broker does nothing else.
//
// The process runs in one of two modes, chosen when it is started for a
// cell (a new process per cell): for W1 and W2 the default one (every
// transfer accepted and dropped, every receiver credit fed with a
// pre-encoded message), for W3 (go-amqp only) --forward (every transfer
// accepted at once and handed, as sent, in memory and in order, to the
// receiver of its address). W3 cannot use the default mode: its receiver
// attaches before its sender and would be fed pre-encoded messages that
// carry no send timestamp.
func NewNullTargets(o NullOptions) (goamqp, sdk *Target, stop func()) {
	if o.Size <= 0 {
		o.Size = 1024
	}
	p := &nullProc{bin: o.Bin, port: o.Port, size: o.Size, logp: filepath.Join(o.WorkDir, "busbar-null.log")}
	proc := func() Process { return p }
	url := fmt.Sprintf("amqp://127.0.0.1:%d", o.Port)
	c := &amqp10Client{name: nullGoAMQPName, tier: "none", url: url, cbs: true, settleSecond: true}
	goamqp = &Target{Client: c, Proc: proc, Fresh: p.fresh(false), FreshW3: p.fresh(true),
		Workloads: map[string]bool{"W1": true, "W2": true, "W3": true}, WorkloadsNA: nullNA, TopicsNA: nullNA, SkipW4: nullNA, NoPrefill: true,
		Note: "no broker work: CBS answered 202 unchecked, transfers accepted at once, dispositions settled at once; W1/W2: transfers dropped, one pre-encoded message per credit; W3 (--forward): each message handed as sent, in memory, to the address's receiver"}
	sc := &sdkClient{name: nullSDKName, tier: "none", cs: fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", o.Port)}
	sdk = &Target{Client: sc, Proc: proc, Fresh: p.fresh(false), Workloads: map[string]bool{"W1": true, "W2": true}, WorkloadsNA: nullSDKNA, TopicsNA: nullSDKNA, SkipW4: nullSDKNA, NoPrefill: true,
		Note: "azservicebus v1.11.0 against the null broker: SendMessage per message; ReceiveMessages + CompleteMessage"}
	return goamqp, sdk, p.stop
}

// NewNullDurableTarget returns the durable null broker (busbar-null
// --sync, target null-durable) driven by go-amqp, and a stop function: the
// null broker's modes (W1 and W2; W3 with --forward), but every transfer
// and every complete is settled — and in W3 handed on — only once a group
// commit of one pwrite and one fdatasync has made it durable
// (nullbroker.Journal). It is the least a
// durable broker must do per message on this machine — a durable
// ceiling, Tier A — and, measured next to the null broker and Busbar,
// splits Busbar's distance from the null broker into what durability
// costs at least and what Busbar adds. A new process (and journal) per
// cell.
func NewNullDurableTarget(o NullOptions) (*Target, func()) {
	return newNullDurableTarget(o, false)
}

// NewNullDurableRetainTarget is NewNullDurableTarget with a journal that
// keeps everything (busbar-null --sync --retain, target
// null-durable-retain): files are filled one after the other, each
// zero-filled and synced ahead of use, none rewritten — a plain durable
// journal that keeps what it is sent, to set beside Busbar when a cell
// leaves its messages queued (W1), where null-durable rewrites pages it
// keeps cached. It is plain, not tuned: it zero-fills a whole file at
// once, where Busbar's store paces its zero-filling and starts its
// writeback early, so Busbar may beat it.
func NewNullDurableRetainTarget(o NullOptions) (*Target, func()) {
	return newNullDurableTarget(o, true)
}

func newNullDurableTarget(o NullOptions, retain bool) (*Target, func()) {
	if o.Size <= 0 {
		o.Size = 1024
	}
	name, logName := nullDurableName, "busbar-null-durable.log"
	note := "the null broker made durable at least cost: each transfer's payload and each complete's tag appended to a preallocated file, settled (W3, --forward: handed on) after the group commit's fdatasync (one pwrite + one fdatasync per round, no waiting); no records, no index, nothing read back"
	if retain {
		name, logName = nullRetainName, "busbar-null-durable-retain.log"
		note = "the durable null broker keeping everything: its journal goes on in a new 64 MiB file (zero-filled and synced ahead of use) instead of wrapping, and drops a full file's cached pages; otherwise as null-durable"
	}
	p := &nullProc{bin: o.Bin, port: o.Port, size: o.Size, logp: filepath.Join(o.WorkDir, logName),
		syncDir: filepath.Join(o.WorkDir, nullDurableJournal), retain: retain}
	c := &amqp10Client{name: name, tier: "A", url: fmt.Sprintf("amqp://127.0.0.1:%d", o.Port), cbs: true, settleSecond: true}
	t := &Target{Client: c, Proc: func() Process { return p }, Fresh: p.fresh(false), FreshW3: p.fresh(true),
		Workloads: map[string]bool{"W1": true, "W2": true, "W3": true}, WorkloadsNA: nullDurableNA, TopicsNA: nullDurableNA, SkipW4: nullDurableNA, NoPrefill: true,
		Note: note}
	return t, func() {
		p.stop()
		_ = os.RemoveAll(p.syncDir)
	}
}
