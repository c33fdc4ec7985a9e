//go:build linux

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

// TestFullDiskExitCodes runs the commands against a broker whose disk (an
// 8 MiB tmpfs) is full: each reports the failure with the reason and exit
// code 1 (no "purged 0", no "not found"), the queue stays listed, and with
// space back they work again. Skipped when a tmpfs cannot be mounted (not
// root); CI runs as root.
func TestFullDiskExitCodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (mount -t tmpfs); CI runs as root")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", mnt, err)
	}
	defer func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{DataDir: filepath.Join(mnt, "data"), MinFreeBytes: -1, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, SegmentSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown on a full disk: %v", err)
		}
	}()
	b := &testBroker{t: t, srv: srv, cs: connString(srv.AMQPAddr().String(), "SAS_KEY_VALUE"), admin: srv.HTTPAddr().String()}
	b.run("queue", "create", "q").ok(t)
	b.run("send", "q", "one").ok(t)

	// Fill the disk, then the log's preallocated room.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{64 << 10, 4096, 1} {
		for {
			if _, err := f.Write(make([]byte, n)); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	f.Close()
	pad := strings.Repeat("x", 4000)
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatal("500 sends of 4 KB accepted on a full disk")
		}
		if r := b.run("send", "q", fmt.Sprint(i, pad)); r.code != 0 {
			r.fails(t, ExitFailure, "the broker's disk is full")
			break
		}
	}
	// What is left at the end of the log's file takes small records:
	// small sends until it is used up too.
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatal("500 small sends accepted on a full disk")
		}
		if r := b.run("send", "q", "s"); r.code != 0 {
			r.fails(t, ExitFailure, "the broker's disk is full")
			break
		}
	}
	b.run("queue", "create", "q2").fails(t, ExitFailure, "the broker's disk is full")
	// Purging removes a few small records' worth, then fails: exit 1.
	b.run("purge", "q").fails(t, ExitFailure, "the broker's disk is full")
	// A delete is smaller still: it may fit in what is left. Either way
	// the exit code and the list agree with what happened.
	deleted := false
	if r := b.run("queue", "delete", "q"); r.code == 0 {
		deleted = true
	} else {
		r.fails(t, ExitFailure, "the broker's disk is full")
	}
	if out := b.run("queue", "list").ok(t); strings.Contains(out, "\nq ") == deleted {
		t.Fatalf("queue list on a full disk (deleted: %v):\n%s", deleted, out)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if deleted {
		b.run("queue", "create", "q").ok(t)
	}
	b.run("send", "q", "two").ok(t)
	if out := b.run("purge", "q").ok(t); !strings.Contains(out, "purged") {
		t.Fatalf("purge: %s", out)
	}
	b.run("queue", "delete", "q").ok(t)
}
