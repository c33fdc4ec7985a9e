package bench

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// natsVersion is the nats-server peers.sh installs (Debian's 2.9 has no
// sync_interval).
const natsVersion = "v2.15.2"

// TestSmokePeers runs the smoke plan against the peers with the clients
// the full benchmark uses — NATS JetStream with nats.go in both sync tiers,
// RabbitMQ quorum queues with go-amqp (AMQP 1.0) and amqp091-go — so that
// the code that drives them cannot rot unnoticed either.
//
// nats-server is BUSBAR_BENCH_NATS_SERVER, else the one peers.sh keeps in
// its cache, else the test installs it there from the Go module proxy as
// peers.sh does. RabbitMQ is BUSBAR_BENCH_RABBITMQ_SBIN, else Debian's
// rabbitmq-server package; where neither is installed its half is skipped
// (peers.sh installs it with apt-get, which a test run does not do).
func TestSmokePeers(t *testing.T) {
	if testing.Short() {
		t.Skip("installs and runs nats-server and RabbitMQ")
	}
	if os.Getenv("BUSBAR_BENCH_PEERS") != "1" {
		t.Skip("runs RabbitMQ and nats-server: set BUSBAR_BENCH_PEERS=1 (CI sets it)")
	}
	t.Run("nats", func(t *testing.T) {
		bin := natsServer(t)
		for _, always := range []bool{true, false} {
			work := t.TempDir()
			port := freePorts(t, 1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			tg, stop, err := NewNATSTarget(ctx, NATSOptions{Bin: bin, WorkDir: work, Port: port, Always: always}, false)
			if err != nil {
				cancel()
				t.Fatalf("nats-server (always=%v): %v", always, err)
			}
			r := smokeRunner(t)
			if always {
				tg.SkipW4 = "not run (as busbar-bench's default -w4-targets)"
			}
			for _, w := range []func(context.Context, *Target){r.W1, r.W2, r.W3, r.W4, r.W5} {
				w(ctx, tg)
			}
			serverConfirmedAcks(tg)
			r.W2(ctx, tg)
			stop()
			cancel()
			checkPeerResults(t, r, tg, !always)
		}
	})
	t.Run("rabbitmq", func(t *testing.T) {
		sbin := rabbitSbin()
		if sbin == "" {
			t.Skip("rabbitmq-server is not installed (bench/peers.sh installs it); set BUSBAR_BENCH_RABBITMQ_SBIN to run this half")
		}
		ports := freePorts(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		ts, stop, err := NewRabbitTargets(ctx, RabbitOptions{SbinDir: sbin, WorkDir: t.TempDir(), Port: ports[0], DistPort: ports[1], EPMDPort: ports[2]})
		if err != nil {
			t.Fatalf("RabbitMQ: %v", err)
		}
		defer stop()
		for _, tg := range ts {
			// W4's kill -9 of RabbitMQ takes a minute or more to
			// recover (64.5 s in the full run): too long for a smoke.
			tg.SkipW4 = "not run (smoke: RabbitMQ's restart takes minutes)"
			r := smokeRunner(t)
			for _, w := range []func(context.Context, *Target){r.W1, r.W2, r.W3, r.W4, r.W5} {
				w(ctx, tg)
			}
			checkPeerResults(t, r, tg, false)
		}
	})
}

func smokeRunner(t *testing.T) *Runner {
	prog := newProgress(io.Discard, true)
	t.Cleanup(prog.close)
	return &Runner{Plan: SmokePlan(), Prog: prog, OnResult: func(res Result) {
		t.Logf("%s %s %s %s: %.0f msg/s p99 %s ms %s %s", res.Workload, res.Target, res.Params, res.Metric, res.Rate, ms(res.Lat.P99), res.NA, res.Note)
	}}
}

// checkPeerResults checks that every workload gave figures for tg (W4
// only when it ran) and that none failed.
func checkPeerResults(t *testing.T, r *Runner, tg *Target, w4 bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, res := range r.Results {
		seen[res.Workload] = true
		checkW3(t, res)
		switch {
		case res.Workload == "W4" && !w4:
			if res.NA != tg.SkipW4 {
				t.Errorf("W4 %s: %q, want %q", res.Target, res.NA, tg.SkipW4)
			}
		case res.NA != "":
			t.Errorf("%s %s %s: %s %s", res.Workload, res.Target, res.Params, res.NA, res.Note)
		case res.Msgs <= 0 && res.Metric != killMetric:
			t.Errorf("%s %s %s: no messages", res.Workload, res.Target, res.Params)
		case res.Metric == killMetric && res.Lat.Max <= 0:
			t.Errorf("W4 %s: no first-delivery time", res.Target)
		}
	}
	for _, w := range []string{"W1", "W2", "W3", "W4", "W5"} {
		if !seen[w] {
			t.Errorf("%s: no result for %s", tg.Client.Name(), w)
		}
	}
}

// natsServer finds or installs nats-server natsVersion.
func natsServer(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BUSBAR_BENCH_NATS_SERVER"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, ".cache", "busbar-bench-peers") // peers.sh's PEERS_DIR
	bin := filepath.Join(dir, "bin", "nats-server")
	if out, err := exec.Command(bin, "--version").Output(); err == nil && strings.Contains(string(out), strings.TrimPrefix(natsVersion, "v")) {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "install", "github.com/nats-io/nats-server/v2@"+natsVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Join(dir, "bin"), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install nats-server %s: %v\n%s", natsVersion, err, out)
	}
	return bin
}

// rabbitSbin returns the directory of rabbitmq-server and rabbitmqctl,
// or "" if RabbitMQ is not installed.
func rabbitSbin() string {
	if p := os.Getenv("BUSBAR_BENCH_RABBITMQ_SBIN"); p != "" {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server")
	if len(matches) == 0 {
		return ""
	}
	return filepath.Dir(matches[len(matches)-1])
}
