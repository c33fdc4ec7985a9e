package broker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// TestTopicStressReferenceCounts runs senders (some scheduling), peek-lock
// receivers with every settlement on three subscriptions, lock expiry,
// and a subscription being created and deleted over and over, all
// concurrently (with -race). Then it drains everything and checks that
// every message ended exactly once in each permanent subscription, that
// sizes add up, and that the topic keeps no shared data: the reference
// counts reached zero exactly when the last copy went.
func TestTopicStressReferenceCounts(t *testing.T) {
	st := memstore.New()
	e := newEnvOn(t, st)
	e.topic("t")
	subs := []string{
		e.sub("t", "a", func(p *SubscriptionProperties) { p.MaxDeliveryCount = 3; p.LockDuration = 5 * time.Second }),
		e.sub("t", "b", func(p *SubscriptionProperties) { p.MaxDeliveryCount = 3; p.LockDuration = 5 * time.Second }),
		e.subRule("t", "c", &RuleDescription{Name: "act", Filter: TrueRuleFilter(), Action: &SQLAction{Expression: "SET c = 1"}},
			func(p *SubscriptionProperties) { p.MaxDeliveryCount = 3; p.LockDuration = 5 * time.Second }),
	}
	const senders, perSender = 4, 100
	var (
		mu       sync.Mutex
		finished = map[string]string{} // sub + body → how it ended
	)
	end := func(sub, b, how string) {
		mu.Lock()
		defer mu.Unlock()
		k := sub + " " + b
		if prev, dup := finished[k]; dup {
			t.Errorf("message %s ended twice: %s and %s", k, prev, how)
		}
		finished[k] = how
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range perSender {
				m := msg(fmt.Sprintf("%d-%d", s, i))
				if i%7 == 0 {
					m.Annotations = map[string]any{ScheduledEnqueueTimeAnnotation: t0.Add(time.Duration(i) * time.Second)}
				}
				if err := e.b.Send(ctx, "t", []*message.Message{m}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	stop := make(chan struct{})
	worker := func(seed uint64, path string) {
		r := rand.New(rand.NewPCG(seed, seed))
		rcv, err := e.b.OpenReceiver(path, PeekLock)
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
				var err error
				switch op := r.IntN(10); {
				case op < 5:
					if err = e.b.Complete(ctx, path, d.LockToken); err == nil {
						end(path, body(d), "complete")
					}
				case op < 7:
					err = e.b.Abandon(ctx, path, d.LockToken, map[string]any{"n": int64(op)})
				case op < 8:
					err = e.b.Abandon(ctx, path, d.LockToken, nil)
				case op < 9:
					err = e.b.Release(ctx, path, d.LockToken)
				default:
					// let the lock expire
				}
				if err != nil && KindOf(err) != KindLockLost {
					t.Error(err)
				}
			}
			runtime.Gosched()
		}
	}
	var ww sync.WaitGroup
	for i, p := range subs {
		ww.Go(func() { worker(uint64(i+1), p) })
	}
	ww.Go(func() { // a subscription that comes and goes
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.b.CreateSubscription("t", "tmp", DefaultSubscriptionProperties(), nil); err != nil {
				t.Error(err)
				return
			}
			if n%2 == 0 {
				e.recv("t/Subscriptions/tmp", ReceiveAndDelete, 5)
			}
			runtime.Gosched()
			if err := e.b.DeleteSubscription("t", "tmp"); err != nil {
				t.Error(err)
				return
			}
		}
	})
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
	time.Sleep(50 * time.Millisecond)
	close(stop)
	ww.Wait()

	e.advance(time.Hour)
	e.b.Tick()
	for _, p := range subs {
		for _, path := range []string{p, p + "/$DeadLetterQueue"} {
			for {
				ds := e.recv(path, ReceiveAndDelete, 100)
				if len(ds) == 0 {
					break
				}
				for _, d := range ds {
					end(p, body(d), "drain "+path)
				}
			}
		}
	}
	mu.Lock()
	for _, p := range subs {
		for s := range senders {
			for i := range perSender {
				if _, ok := finished[p+" "+fmt.Sprintf("%d-%d", s, i)]; !ok {
					t.Errorf("%s lost %d-%d", p, s, i)
				}
			}
		}
	}
	mu.Unlock()
	info := e.topicInfo("t")
	if info.Counts.SizeInBytes != 0 || info.Counts.Scheduled != 0 || info.SubscriptionCount != 3 {
		t.Fatalf("topic after draining %+v", info)
	}
	e.b.mu.RLock()
	tp := e.b.mu.topics["t"]
	e.b.mu.RUnlock()
	tp.mu.Lock()
	left := tp.mu.idx.Len()
	tp.mu.Unlock()
	if left != 0 {
		t.Fatalf("the topic holds %d shared data records after every copy is gone", left)
	}
	e.flushGarbage("t")
	if s := st.Stats(); s.Messages != 0 {
		t.Fatalf("the store holds %d messages after draining", s.Messages)
	}
}
