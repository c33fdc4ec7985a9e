package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestKillNineLosesNothingAcknowledged runs the real binary, sends messages
// with the official SDK, kills the process with SIGKILL while sends are
// still in flight, restarts it on the same data directory and checks that
// every acknowledged message is there.
func TestKillNineLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "busbar")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "Config.json")
	if err := writeFile(cfg, `{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"durable"}]}],"Logging":{"Type":"Console"}}}`); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")

	proc, addr := startBinary(t, bin, "--data", data, "--config", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", addr)
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	stopSending := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			sender, err := client.NewSender("durable", nil)
			if err != nil {
				return
			}
			for i := 0; ; i++ {
				select {
				case <-stopSending:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
				err := sender.SendMessage(sctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil)
				scancel()
				if err != nil {
					return // the broker is gone
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}(w)
	}
	// Let some sends complete, then kill the broker in the middle of them.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 300 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = proc.Wait()
	close(stopSending)
	wg.Wait()
	_ = client.Close(context.Background())
	mu.Lock()
	want := len(acked)
	mu.Unlock()
	if want == 0 {
		t.Fatal("no send was acknowledged before the kill")
	}

	proc, addr = startBinary(t, bin, "--data", data)
	defer func() { _ = proc.Process.Signal(syscall.SIGTERM); _ = proc.Wait() }()
	cs = fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", addr)
	client, err = azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	receiver, err := client.NewReceiverForQueue("durable", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		msgs, err := receiver.ReceiveMessages(rctx, 500, nil)
		rcancel()
		if err != nil || len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			got[m.MessageID] = true
		}
	}
	missing := 0
	for id := range acked {
		if !got[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged messages lost after kill -9 (recovered %d)", missing, want, len(got))
	}
	t.Logf("%d acknowledged before kill -9, all recovered (%d messages in the queue after restart)", want, len(got))
}

// startBinary runs busbar serve on free loopback ports and returns once it
// is ready, with its AMQP address.
func startBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := regexp.MustCompile(`"msg":"busbar ready".*"amqp":"([^"]+)"`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case addr := <-found:
		return cmd, addr
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("busbar did not become ready within 30 s")
		return nil, ""
	}
}
