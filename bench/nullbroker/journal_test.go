package nullbroker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/amqp"
)

// TestMain checks that the journal's writer, the server and the client
// stopped by the end of the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts the null broker with h on a loopback port and returns a
// go-amqp sender to address "q".
func serve(t *testing.T, h *Handler) *goamqp.Sender {
	t.Helper()
	srv, err := amqp.NewServer(h, amqp.Config{ContainerID: "null-test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+ln.Addr().String(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	return snd
}

// TestJournalSettlesAfterWrite checks that a transfer is settled only
// once its payload is in the journal file and synced, and that the file
// is written round and round.
func TestJournalSettlesAfterWrite(t *testing.T) {
	dir := t.TempDir()
	const size = 8 << 10
	j, err := OpenJournal(dir, size)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "null-journal")); err != nil || st.Size() != size {
		t.Fatalf("journal file: %v, %v", st, err)
	}
	h, err := New(16)
	if err != nil {
		t.Fatal(err)
	}
	h.Journal = j
	snd := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 { // 20 × ≈ 1 KB: wraps the 8 KB file twice
		body := []byte(fmt.Sprintf("message-%02d-%s", i, strings.Repeat("x", 1000)))
		if err := snd.Send(ctx, goamqp.NewMessage(body), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "null-journal"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, body[:20]) {
			t.Fatalf("send %d settled before its payload reached the journal", i)
		}
	}
	if n := j.Syncs.Load(); n < 1 || n > 20 {
		t.Errorf("%d fdatasyncs for 20 sequential sends", n)
	}
	if b := j.Bytes.Load(); b < 20*1000 {
		t.Errorf("%d bytes written, want ≥ 20,000", b)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// After Close nothing is accepted.
	err = snd.Send(ctx, goamqp.NewMessage([]byte("late")), nil)
	if err == nil || !strings.Contains(err.Error(), "journal closed") {
		t.Fatalf("send after Close: %v, want a rejection (journal closed)", err)
	}
}

// TestRetainingJournalKeepsEverything checks that a retaining journal
// settles a transfer only once its payload is synced in a journal file,
// goes on in a new, prepared file when one is full, and rewrites none:
// every payload is still in some file at the end.
func TestRetainingJournalKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	const size = 8 << 10
	j, err := OpenRetainingJournal(dir, size)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(16)
	if err != nil {
		t.Fatal(err)
	}
	h.Journal = j
	snd := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := func() []byte {
		var b []byte
		names, _ := filepath.Glob(filepath.Join(dir, "null-journal-*"))
		for _, n := range names {
			f, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, f...)
		}
		return b
	}
	var bodies [][]byte
	for i := range 20 { // 20 × ≈ 1 KB: three 8 KB files
		body := []byte(fmt.Sprintf("message-%02d-%s", i, strings.Repeat("x", 1000)))
		bodies = append(bodies, body)
		if err := snd.Send(ctx, goamqp.NewMessage(body), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if !bytes.Contains(all(), body[:20]) {
			t.Fatalf("send %d settled before its payload reached the journal", i)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "null-journal-*"))
	if len(names) < 3 {
		t.Fatalf("%d journal files for 20 KB in 8 KB files: %v", len(names), names)
	}
	for _, n := range names {
		if st, err := os.Stat(n); err != nil || st.Size() != size {
			t.Fatalf("journal file %s: %v, %v; want %d bytes", n, st, err, size)
		}
	}
	b := all()
	for i, body := range bodies {
		if !bytes.Contains(b, body[:20]) {
			t.Fatalf("message %d was overwritten", i)
		}
	}
}
