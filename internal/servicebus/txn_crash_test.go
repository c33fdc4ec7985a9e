package servicebus_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/vfs"
)

// txnImage is what a crash would leave: the file system's image, and how
// far the transactions had come (those before acked were accepted; open,
// when ≥ 0, was declared with its operations recorded but not discharged).
type txnImage struct {
	fs    *vfs.Mem
	what  string
	acked int
	open  int
}

// TestTxnCrashImages runs transactions over the wire (receive from "in",
// complete and send-via to "out") on the file store on the crashable
// in-memory file system. Crash images are taken before every file-system
// operation (so during each discharge's commit), between declare and
// discharge, and after the last accepted discharge. Reopened, every image
// shows each transaction wholly applied or not at all, every accepted one
// applied, and the one open at the crash not applied.
func TestTxnCrashImages(t *testing.T) {
	const n = 12
	mem := vfs.NewMem()
	var (
		mu     sync.Mutex
		images []txnImage
		armed  atomic.Bool
		acked  atomic.Int64
	)
	rng := rand.New(rand.NewSource(1))
	inject := func(op vfs.Op) error {
		if !armed.Load() {
			return nil
		}
		a := int(acked.Load())
		mu.Lock()
		defer mu.Unlock()
		images = append(images, txnImage{
			fs:   mem.CrashClone(vfs.CrashOptions{Rand: rand.New(rand.NewSource(rng.Int63())), AnySubset: rng.Intn(2) == 0}),
			what: fmt.Sprintf("before %v %s", op.Kind, op.Path), acked: a, open: -1})
		return nil
	}
	opts := filestore.Options{Dir: "/db", FS: vfs.WithErrors(mem, inject), SegmentSize: 16 << 10, BackgroundInterval: -1, NoPreallocate: true}
	st, err := filestore.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := servicebustest.Start(t, &servicebustest.Options{AllowAnyKey: true, Clock: clk, TokenClock: clk, Queues: []string{"in", "out"}, Store: st})
	var bodies []string
	for i := range n {
		bodies = append(bodies, fmt.Sprintf("in-%02d", i))
	}
	seed(t, s, "in", bodies...)

	c := dialTxn(t, s.Addr)
	c.attachCoordinator()
	c.attachReceiver(1, "in", n)
	c.attachSender(2, "in", "out")
	ms := c.receive(1, n)
	armed.Store(true)
	for i, m := range ms {
		if m.body != bodies[i] {
			t.Fatalf("received %q, want %q", m.body, bodies[i])
		}
		id := c.declare()
		wantAccepted(t, c.dispose(m, &frames.Accepted{}, id))
		wantAccepted(t, c.sendTxn(2, fmt.Sprintf("out-%02d", i), id))
		mu.Lock()
		images = append(images, txnImage{fs: mem.CrashClone(vfs.CrashOptions{}), what: "between declare and discharge", acked: i, open: i})
		mu.Unlock()
		wantAccepted(t, c.discharge(id, false))
		acked.Store(int64(i + 1))
	}
	armed.Store(false)
	images = append(images, txnImage{fs: mem.CrashClone(vfs.CrashOptions{}), what: "after the last accepted discharge", acked: n, open: -1})
	s.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	during := 0
	for _, img := range images {
		opts := opts
		opts.FS = img.fs
		st, err := filestore.Open(opts)
		if err != nil {
			t.Fatalf("%s: reopen: %v", img.what, err)
		}
		b, err := broker.Open(broker.Options{Store: st, Clock: clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))})
		if err != nil {
			t.Fatalf("%s: broker: %v", img.what, err)
		}
		in, out := peekBodies(t, b, "in"), peekBodies(t, b, "out")
		applied := 0
		for i := range n {
			gone := !slices.Contains(in, fmt.Sprintf("in-%02d", i))
			sent := slices.Contains(out, fmt.Sprintf("out-%02d", i))
			switch {
			case gone != sent:
				t.Fatalf("%s: transaction %d half applied (in: %v, out: %v)", img.what, i, in, out)
			case gone && i == img.open:
				t.Fatalf("%s: transaction %d applied before its discharge", img.what, i)
			case !gone && i < img.acked:
				t.Fatalf("%s: transaction %d was accepted but is not applied", img.what, i)
			case gone:
				applied++
			}
		}
		if img.open < 0 && applied > 0 && applied < n {
			during++
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d crash images, %d of them during the discharges", len(images), during)
	if during == 0 {
		t.Fatal("no image was taken during a discharge")
	}
}

func peekBodies(t *testing.T, b *broker.Broker, path string) []string {
	t.Helper()
	ds, err := b.Peek(context.Background(), path, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		data, err := frames.DataSections(d.Message.Body)
		if err != nil || len(data) != 1 {
			t.Fatalf("body %x: %v", d.Message.Body, err)
		}
		out = append(out, string(data[0]))
	}
	return out
}
