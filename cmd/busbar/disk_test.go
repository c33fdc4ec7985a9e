//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestSIGTERMOnFullDisk runs the real binary on an 8 MiB tmpfs, fills the
// disk until sends are refused, and stops it with SIGTERM: it exits 0, and
// after a restart with space again every acknowledged message is there,
// once. Skipped when a tmpfs cannot be mounted (not root); CI runs as root.
func TestSIGTERMOnFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (mount -t tmpfs); CI runs as root")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer syscall.Unmount(mnt, 0)
	bin := filepath.Join(dir, "busbar")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "Config.json")
	if err := writeFile(cfg, `{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"q"}]}],"Logging":{"Type":"Console"}}}`); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(mnt, "data")
	proc, addr := startBinary(t, bin, "--data", data, "--config", cfg, "--min-free-disk", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", addr)
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	sender, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{64 << 10, 4096, 1} {
		for {
			if _, err := f.Write(make([]byte, n)); err != nil {
				break
			}
		}
	}
	f.Close()
	acked := map[string]bool{}
	pad := strings.Repeat("x", 2000)
	for i := 0; ; i++ {
		if i == 5000 {
			t.Fatal("5000 sends accepted on a full disk")
		}
		id := fmt.Sprint("m-", i)
		err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(pad)}, nil)
		if err != nil {
			if !strings.Contains(err.Error(), "the broker's disk is full") {
				t.Fatalf("send: %v", err)
			}
			break
		}
		acked[id] = true
	}
	_ = client.Close(ctx)

	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(); err != nil {
		t.Fatalf("busbar after SIGTERM on a full disk: %v, want exit 0", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	proc, addr = startBinary(t, bin, "--data", data)
	defer func() { _ = proc.Process.Signal(syscall.SIGTERM); _ = proc.Wait() }()
	cs = fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", addr)
	client, err = azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	receiver, err := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		msgs, err := receiver.ReceiveMessages(rctx, 500, nil)
		rcancel()
		if err != nil || len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			got[m.MessageID]++
		}
	}
	for id := range acked {
		if got[id] != 1 {
			t.Errorf("%s: %d copies after restart, want 1", id, got[id])
		}
	}
	if len(got) != len(acked) {
		t.Errorf("%d messages after restart, %d acknowledged", len(got), len(acked))
	}
}
