package bench

import (
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// peersPorts are the loopback ports peers.sh gives the brokers.
var peersPorts = []int{25673, 25674, 24369, 14222, 14223, 25800, 25801}

// TestPeersScript runs bench/peers.sh itself — with the smoke plan and
// W1 only, against Busbar built from the committed HEAD, both RabbitMQ
// protocols and NATS JetStream — and checks that it wrote results.md and
// results.csv with figures for every target, and that the brokers it
// started are gone when it returns (their ports are free again).
//
// The script installs RabbitMQ with apt-get when it is missing; a test
// run does not, so without the package the test is skipped (as
// TestSmokePeers' RabbitMQ half). It is skipped too while something else
// holds one of the script's ports (a benchmark running on this machine).
func TestPeersScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Busbar and runs RabbitMQ and nats-server")
	}
	if os.Getenv("BUSBAR_BENCH_PEERS") != "1" {
		t.Skip("runs RabbitMQ and nats-server: set BUSBAR_BENCH_PEERS=1 (CI sets it)")
	}
	if err := exec.Command("dpkg", "-s", "rabbitmq-server").Run(); err != nil {
		t.Skip("rabbitmq-server is not installed; peers.sh would install it with apt-get")
	}
	for _, p := range peersPorts {
		if !portFree(p) {
			t.Skipf("port %d is in use (a benchmark running?)", p)
		}
	}
	natsServer(t) // installs it into peers.sh's cache when missing
	out, work := t.TempDir(), t.TempDir()
	cmd := exec.Command("bash", "peers.sh", "-plan", "smoke", "-workloads", "W1", "-sizes", "none", "-limits", "0",
		"-targets", "busbar,rabbitmq-amqp10,rabbitmq-amqp091,nats-always")
	cmd.Env = append(os.Environ(), "OUT="+out, "WORK="+work)
	done := make(chan struct{})
	timer := time.AfterFunc(8*time.Minute, func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
		}
	})
	b, err := cmd.CombinedOutput()
	close(done)
	timer.Stop()
	if err != nil {
		t.Fatalf("peers.sh: %v\n%s", err, b)
	}
	t.Logf("peers.sh:\n%s", b)

	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	got := map[string]int{} // target → W1 rows with figures
	for _, r := range rows[1:] {
		if r[col["workload"]] != "W1" || r[col["na"]] != "" {
			continue
		}
		if v, _ := strconv.ParseFloat(r[col["msgs_per_s"]], 64); v > 0 {
			got[r[col["target"]]]++
		}
	}
	for _, want := range []string{"Busbar (AMQP 1.0, go-amqp)", "quorum (AMQP 1.0, go-amqp)", "quorum (AMQP 0.9.1)", "JetStream sync_interval always"} {
		n := 0
		for target, k := range got {
			if strings.Contains(target, want) {
				n += k
			}
		}
		if n == 0 {
			t.Errorf("results.csv: no W1 figures for %q (have %v)", want, got)
		}
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md does not mention %q", want)
		}
	}
	for _, p := range peersPorts {
		if !portFree(p) {
			t.Errorf("port %d still in use after peers.sh: a broker it started is still running", p)
		}
	}
	// Every broker's data lives under WORK: none of them may outlive it.
	if b, err := exec.Command("pgrep", "-af", work).Output(); err == nil {
		t.Errorf("processes left running after peers.sh:\n%s", b)
	}
}
