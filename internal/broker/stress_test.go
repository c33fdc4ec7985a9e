package broker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
)

// TestStressAccounting runs senders, receivers in both modes with every
// settlement, deferral, lock expiry and TTL against one queue concurrently
// (with -race), then drains everything and checks that each message ended
// exactly once: completed, received-and-deleted, dead-lettered, or
// expired (dropped).
func TestStressAccounting(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) {
		p.MaxDeliveryCount = 3
		p.LockDuration = 5 * time.Second
	})
	const senders, perSender = 4, 150
	var (
		mu       sync.Mutex
		finished = map[string]string{} // body → how it ended
		halfway  = make(chan struct{})
	)
	end := func(b, how string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := finished[b]; dup {
			t.Errorf("message %s ended twice: %s and %s", b, prev, how)
		}
		finished[b] = how
		if len(finished) == senders*perSender/2 {
			close(halfway)
		}
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range perSender {
				m := msg(fmt.Sprintf("%d-%d", s, i))
				if i%10 == 0 {
					m.TTL = time.Duration(1+i%7) * time.Second
				}
				if err := e.b.Send(ctx, "q", []*message.Message{m}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	stop := make(chan struct{})
	var deferred sync.Map // seq → true
	worker := func(seed uint64, mode ReceiveMode) {
		r := rand.New(rand.NewPCG(seed, seed))
		rcv, err := e.b.OpenReceiver("q", mode)
		if err != nil {
			t.Error(err)
			return
		}
		defer rcv.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ds, err := rcv.TryReceive(1 + r.IntN(3))
			if err != nil {
				t.Error(err)
				return
			}
			for _, d := range ds {
				if mode == ReceiveAndDelete {
					end(body(d), "r&d")
					continue
				}
				var err error
				switch op := r.IntN(10); {
				case op < 4:
					if err = e.b.Complete(ctx, "q", d.LockToken); err == nil {
						end(body(d), "complete")
					}
				case op < 6:
					err = e.b.Abandon(ctx, "q", d.LockToken, map[string]any{"n": int64(op)})
				case op < 7:
					err = e.b.Release(ctx, "q", d.LockToken)
				case op < 8:
					if err = e.b.Defer(ctx, "q", d.LockToken, nil); err == nil {
						deferred.Store(d.SequenceNumber, true)
					}
				case op < 9:
					_, err = e.b.RenewLock(ctx, "q", []uuid.UUID{d.LockToken})
				default:
					// let the lock expire
				}
				if err != nil && KindOf(err) != KindLockLost {
					t.Error(err)
				}
			}
			if r.IntN(4) == 0 { // fetch some deferred messages back
				deferred.Range(func(k, _ any) bool {
					ds, err := e.b.ReceiveDeferred(ctx, "q", []int64{k.(int64)}, PeekLock)
					if err == nil {
						deferred.Delete(k)
						for _, d := range ds {
							if err := e.b.Complete(ctx, "q", d.LockToken); err == nil {
								end(body(d), "deferred-complete")
							}
						}
					}
					return r.IntN(3) != 0
				})
			}
		}
	}
	var ww sync.WaitGroup
	for i := range 4 {
		mode := PeekLock
		if i == 3 {
			mode = ReceiveAndDelete
		}
		ww.Go(func() { worker(uint64(i+1), mode) })
	}
	ww.Go(func() { // time
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.advance(time.Second)
			e.b.Tick()
			runtime.Gosched()
		}
	})
	wg.Wait()
	select {
	case <-halfway:
	case <-time.After(30 * time.Second):
		t.Error("workers made no progress")
	}
	close(stop)
	ww.Wait()

	// Drain: everything left is locked (wait out the locks), deferred,
	// active, or in the DLQ.
	e.advance(time.Hour)
	e.b.Tick()
	for {
		ds := e.recv("q", ReceiveAndDelete, 100)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			end(body(d), "drain")
		}
	}
	var left []int64
	for _, p := range e.peek("q", 0, 10000) {
		left = append(left, p.SequenceNumber)
	}
	if len(left) > 0 {
		got, err := e.b.ReceiveDeferred(ctx, "q", left, ReceiveAndDelete)
		if err != nil {
			t.Fatalf("draining deferred %v: %v", left, err)
		}
		for _, d := range got {
			end(body(d), "drain-deferred")
		}
	}
	for {
		ds := e.recv("q/$DeadLetterQueue", ReceiveAndDelete, 100)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			end(body(d), "dlq:"+prop(d, PropDeadLetterReason).(string))
		}
	}
	c := e.counts("q")
	if c.Total != 0 || c.SizeInBytes != 0 {
		t.Fatalf("after draining: %+v", c)
	}
	// Messages never seen ended by expiring (dropped: no DLQ on expiry).
	mu.Lock()
	defer mu.Unlock()
	missing := 0
	for s := range senders {
		for i := range perSender {
			if _, ok := finished[fmt.Sprintf("%d-%d", s, i)]; !ok {
				if i%10 != 0 {
					t.Errorf("message %d-%d (no TTL) was lost", s, i)
				}
				missing++
			}
		}
	}
	t.Logf("%d messages ended, %d expired", len(finished), missing)
}
