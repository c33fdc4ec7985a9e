package broker

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/filestore"
	"github.com/busbarmq/busbar/internal/vfs"
)

// The crash test of auto-forwarding: a broker on the filestore on the
// crashable in-memory file system forwards messages along three routes
// while a crash image (what a power loss would leave) is taken before
// file-system operations. Every image is reopened: every message whose
// send was acknowledged is in exactly one place of its route (still in
// the source, or at its destination, never both, never neither), one
// whose send was not is nowhere or in one place; after the reopened
// broker has run its forwarding, every message is at its destination,
// once.
//
//	route q: "in1" → "dst"                            (queue to queue)
//	route t: "in2" → topic "t" → "t/Subscriptions/s1" → "dst2"
//	                           ↘ "t/Subscriptions/s2"  (keeps its copy)
//	route d: "dl" dead-letters → "dl/$DeadLetterQueue" → "dst3"
//	         (ForwardDeadLetteredMessagesTo)

type fwdCrashImage struct {
	fs    *vfs.Mem
	op    vfs.Op
	acked int // messages 0..acked-1 were acknowledged
}

// fwdRoutes are the places a message of each route may be in, as sorted
// lists: one is where it starts, the last where it ends.
var fwdRoutes = map[byte][][]string{
	'q': {{"in1"}, {"dst"}},
	't': {{"in2"}, {"t/Subscriptions/s1", "t/Subscriptions/s2"}, {"dst2", "t/Subscriptions/s2"}},
	'd': {{"dl"}, {"dl/$DeadLetterQueue"}, {"dst3"}},
}

func fwdCrashBody(i int) string { return fmt.Sprintf("%c-%03d", "qtd"[i%3], i) }

func TestForwardCrashAtManyPoints(t *testing.T) {
	const n = 90
	mem := vfs.NewMem()
	var (
		mu     sync.Mutex
		images []fwdCrashImage
		armed  atomic.Bool
		acked  atomic.Int64
	)
	rng := rand.New(rand.NewSource(1))
	inject := func(op vfs.Op) error {
		if !armed.Load() {
			return nil
		}
		a := int(acked.Load()) // before the clone: acknowledged by then
		mu.Lock()
		defer mu.Unlock()
		img := fwdCrashImage{op: op, acked: a}
		img.fs = mem.CrashClone(vfs.CrashOptions{Rand: rand.New(rand.NewSource(rng.Int63())), AnySubset: rng.Intn(2) == 0})
		images = append(images, img)
		return nil
	}
	opts := filestore.Options{Dir: "/db", FS: vfs.WithErrors(mem, inject), SegmentSize: 16 << 10, BackgroundInterval: -1, NoPreallocate: true}
	st, err := filestore.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, clk: clock.NewFake(t0), st: st}
	e.open()
	e.queue("dst")
	e.queue("dst2")
	e.queue("dst3")
	e.queue("in1", forwardTo("dst"))
	e.topic("t")
	e.sub("t", "s1", subForwardTo("dst2"))
	e.sub("t", "s2")
	e.queue("in2", forwardTo("t"))
	e.queue("dl", forwardDLQTo("dst3"))

	armed.Store(true)
	for i := range n {
		m := msg(fwdCrashBody(i))
		switch i % 3 {
		case 0:
			e.send("in1", m)
		case 1:
			e.send("in2", m)
		case 2:
			e.send("dl", m)
		}
		acked.Store(int64(i + 1))
		if i%3 == 2 {
			d := e.recv1("dl")
			if err := e.b.DeadLetter(ctx, "dl", d.LockToken, "r", "d", nil); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 1 {
			e.flush()
		}
		if i%20 == 19 {
			if err := st.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.flush()
	armed.Store(false)
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	images = append(images, fwdCrashImage{fs: mem.CrashClone(vfs.CrashOptions{}), op: vfs.Op{Path: "after Close"}, acked: n})
	if len(images) < 100 {
		t.Fatalf("only %d crash points", len(images))
	}
	forwardsSeen := 0
	for _, img := range images {
		if checkForwardImage(t, img, opts, n) {
			forwardsSeen++
		}
	}
	t.Logf("%d crash images, %d with forwarding half-way", len(images), forwardsSeen)
	// The images cover messages caught between source and destination.
	if forwardsSeen == 0 {
		t.Fatal("no image has a message forwarded and another still waiting")
	}
}

// checkForwardImage reopens img and checks the invariants. It reports
// whether the image caught forwarding half-way (some message of route q
// in its source, another at its destination).
func checkForwardImage(t *testing.T, img fwdCrashImage, opts filestore.Options, n int) (midway bool) {
	t.Helper()
	where := func(format string, args ...any) string {
		return fmt.Sprintf("crash before %v %s (%d acknowledged): ", img.op.Kind, img.op.Path, img.acked) + fmt.Sprintf(format, args...)
	}
	opts.FS = img.fs
	st, err := filestore.Open(opts)
	if err != nil {
		t.Fatal(where("reopen: %v", err))
	}
	defer st.Close()
	e := &env{t: t, clk: clock.NewFake(t0), st: st}
	e.open()
	defer e.b.Close()

	check := func(final bool) {
		places := placesOf(t, e.b)
		for body := range places {
			if !strings.HasPrefix(body, "q-") && !strings.HasPrefix(body, "t-") && !strings.HasPrefix(body, "d-") {
				t.Fatal(where("unknown message %q in %v", body, places[body]))
			}
		}
		inSource, atDest := 0, 0
		for i := range n {
			body := fwdCrashBody(i)
			got := places[body]
			slices.Sort(got)
			routes := fwdRoutes[body[0]]
			if final {
				routes = routes[len(routes)-1:]
				if body[0] == 'd' {
					routes = [][]string{{"dl"}, {"dst3"}} // never dead-lettered: stays
				}
			}
			ok := slices.ContainsFunc(routes, func(r []string) bool { return slices.Equal(r, got) })
			if len(got) == 0 && (i >= img.acked) {
				ok = true // not acknowledged: may be lost
			}
			if !ok {
				t.Fatal(where("%s (final %v) is in %v; it may only be in one of %v", body, final, got, routes))
			}
			if body[0] == 'q' && len(got) == 1 {
				if got[0] == "in1" {
					inSource++
				} else {
					atDest++
				}
			}
		}
		midway = midway || inSource > 0 && atDest > 0
	}
	check(false)
	// The reopened broker finishes the forwarding: everything arrives.
	e.flush()
	check(true)
	for _, q := range []string{"in1", "in2", "dl", "dst", "dst2", "dst3"} {
		if c := e.counts(q); c.TransferDeadLetter != 0 || c.Transfer != 0 {
			t.Fatal(where("%s counts %+v after recovery", q, c))
		}
	}
	return midway
}

// placesOf lists, for every message body, the entity paths (with
// sub-queue) holding it, from the broker's recovered index and the
// store's data directly: no operation runs that could forward anything.
func placesOf(t *testing.T, b *Broker) map[string][]string {
	t.Helper()
	b.mu.RLock()
	var qs []*entity
	for _, q := range b.mu.queues {
		qs = append(qs, q)
	}
	for _, tp := range b.mu.topics {
		qs = append(qs, tp.subs.Load().list...)
	}
	b.mu.RUnlock()
	out := map[string][]string{}
	for _, q := range qs {
		for sub := range SubQueue(numSubQueues) {
			var snap []rec
			q.lockAndPublish() // publishes what waits on the lock-free stack; runs nothing
			q.mu.subs[sub].idx.ascend(0, func(r *rec) bool {
				snap = append(snap, *r)
				return true
			})
			q.mu.Unlock()
			for i := range snap {
				data, err := q.readData(&snap[i])
				if err != nil {
					t.Fatalf("%s seq %d: %v", q.path(sub), snap[i].seq, err)
				}
				m, err := message.Unmarshal(data)
				if err != nil {
					t.Fatal(err)
				}
				out[string(m.Body)] = append(out[string(m.Body)], q.path(sub))
			}
		}
	}
	return out
}
