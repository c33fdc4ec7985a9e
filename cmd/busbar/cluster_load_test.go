package main

// The mixed load of the process-level cluster tests and its ledger
// (docs/design/cluster.md §15.1, §15.3): the official Go SDK spread over
// the nodes sends (plain, scheduled, to a session-enabled queue, to a topic
// with a SQL-filtered subscription), and receives in peek-lock mode,
// completing, abandoning or dead-lettering. Only acknowledged operations
// enter the ledger; every delivery is journalled on the client side.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// The entities of the mixed load: three units.
const (
	qOrders   = "orders"   // the busiest unit
	qSessions = "sessions" // session-enabled
	tEvents   = "events"   // subscriptions "all" (every message) and "red" (SQL filter)
	subAll    = "events/all"
	subRed    = "events/red"
)

var loadSessionIDs = []string{"s0", "s1", "s2", "s3"}

// createLoadEntities creates the entities, each through the node
// placement gives it. The topic's subscriptions are created right after
// it, through the same node, which serves it from its creation
// (docs/cluster.md: the admin API answers for the units the node serves).
func createLoadEntities(ctx context.Context, t *testing.T, c *procCluster) {
	t.Helper()
	if _, err := c.adminForNext().CreateQueue(ctx, qOrders, nil); err != nil {
		t.Fatal(err)
	}
	yes := true
	if _, err := c.adminForNext().CreateQueue(ctx, qSessions, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{RequiresSession: &yes}}); err != nil {
		t.Fatal(err)
	}
	adm := c.adminForNext()
	if _, err := adm.CreateTopic(ctx, tEvents, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, tEvents, "all", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, tEvents, "red", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{Name: "red", Filter: &admin.SQLFilter{Expression: "color = 'red'"}}}}); err != nil {
		t.Fatal(err)
	}
}

type entSeq struct {
	entity string // queue or subscription path (its dead-letter queue included)
	seq    int64
}

// delivery is one peek-lock delivery a client received.
type delivery struct {
	id          string
	gateway     string // the node the client was connected to
	got         time.Time
	settle      string    // complete, abandon, dead-letter: the settlement tried
	settleStart time.Time // when it was sent
	settled     bool      // acknowledged
	err         error     // why the settlement failed
}

// ledger holds the acknowledged operations and the delivery journal.
type ledger struct {
	mu         sync.Mutex
	sent       map[string]map[string]bool // queue or topic -> message id -> acknowledged
	red        map[string]bool            // topic message ids sent with color red
	completed  map[entSeq]string          // acknowledged completes -> message id
	deadLetter map[entSeq]string          // acknowledged dead-letters -> message id
	deliveries map[entSeq][]*delivery
	seqID      map[entSeq]string // every (entity, seq) seen -> its message id
	problems   []string
	sessions   map[string]bool // session ids used
	ops        map[string]int  // acknowledged operations by kind
	failures   map[string]int  // failed operations by kind
	firstErr   map[string]string
}

func newLedger() *ledger {
	return &ledger{sent: map[string]map[string]bool{}, red: map[string]bool{}, completed: map[entSeq]string{},
		deadLetter: map[entSeq]string{}, deliveries: map[entSeq][]*delivery{}, seqID: map[entSeq]string{},
		sessions: map[string]bool{}, ops: map[string]int{}, failures: map[string]int{}, firstErr: map[string]string{}}
}

func (l *ledger) failed(kind string, err error) {
	l.mu.Lock()
	l.failures[kind]++
	if _, ok := l.firstErr[kind]; !ok && err != nil {
		l.firstErr[kind] = err.Error()
	}
	l.mu.Unlock()
}

func (l *ledger) sentOK(kind, entity, id string, red bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent[entity] == nil {
		l.sent[entity] = map[string]bool{}
	}
	l.sent[entity][id] = true
	if red {
		l.red[id] = true
	}
	l.ops[kind+" "+entity]++
}

// seen records that entity's seq carries message id: a sequence number
// is never used for two messages.
func (l *ledger) seenLocked(entity string, seq int64, id string) {
	k := entSeq{entity, seq}
	if prev, ok := l.seqID[k]; ok && prev != id {
		l.problems = append(l.problems, fmt.Sprintf("%s: sequence number %d carried %s and %s", entity, seq, prev, id))
	}
	l.seqID[k] = id
}

func (l *ledger) received(entity, gateway string, m *azservicebus.ReceivedMessage) *delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := &delivery{id: m.MessageID, gateway: gateway, got: time.Now()}
	k := entSeq{entity, *m.SequenceNumber}
	l.seenLocked(entity, k.seq, m.MessageID)
	l.deliveries[k] = append(l.deliveries[k], d)
	return d
}

func (l *ledger) settled(entity string, m *azservicebus.ReceivedMessage, d *delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d.settled = true
	k := entSeq{entity, *m.SequenceNumber}
	switch d.settle {
	case "complete":
		if prev, ok := l.completed[k]; ok {
			l.problems = append(l.problems, fmt.Sprintf("%s seq %d (%s) completed twice (before: %s)", entity, k.seq, m.MessageID, prev))
		}
		l.completed[k] = m.MessageID
	case "dead-letter":
		l.deadLetter[k] = m.MessageID
	}
	l.ops[d.settle+" "+entity]++
}

// receivedAll journals a batch of deliveries as soon as it arrived.
func (l *ledger) receivedAll(entity, gateway string, ms []*azservicebus.ReceivedMessage) []*delivery {
	ds := make([]*delivery, len(ms))
	for i, m := range ms {
		ds[i] = l.received(entity, gateway, m)
	}
	return ds
}

// settleAll settles a batch of deliveries (see settle).
func (l *ledger) settleAll(ctx context.Context, entity, gateway string, r settler, ms []*azservicebus.ReceivedMessage, rnd *rand.Rand) {
	ds := l.receivedAll(entity, gateway, ms)
	for i, m := range ms {
		l.settle(ctx, entity, r, m, ds[i], rnd)
	}
}

// settle settles m, journalled as d, as the dice say: 76 % complete, 12 %
// abandon, 12 % dead-letter; an acknowledged settlement enters the ledger.
func (l *ledger) settle(ctx context.Context, entity string, r settler, m *azservicebus.ReceivedMessage, d *delivery, rnd *rand.Rand) {
	p := rnd.IntN(100)
	d.settle = "complete"
	switch {
	case p < 12:
		d.settle = "abandon"
	case p < 24:
		d.settle = "dead-letter"
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d.settleStart = time.Now()
	var err error
	switch d.settle {
	case "complete":
		err = r.CompleteMessage(sctx, m, nil)
	case "abandon":
		err = r.AbandonMessage(sctx, m, nil)
	case "dead-letter":
		reason := "load"
		err = r.DeadLetterMessage(sctx, m, &azservicebus.DeadLetterOptions{Reason: &reason})
	}
	if err != nil {
		l.mu.Lock()
		d.err = err
		l.mu.Unlock()
		l.failed(d.settle, err)
		return
	}
	l.settled(entity, m, d)
}

type settler interface {
	CompleteMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.CompleteMessageOptions) error
	AbandonMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.AbandonMessageOptions) error
	DeadLetterMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.DeadLetterOptions) error
}

// loadWorkers is the load through one node: a sender and two receivers.
type loadWorkers struct {
	node   string
	client *azservicebus.Client
	l      *ledger
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	// lastSchedule is the latest enqueue time scheduled.
	mu           sync.Mutex
	lastSchedule time.Time
}

func startLoad(node string, client *azservicebus.Client, l *ledger, seed uint64) *loadWorkers {
	w := &loadWorkers{node: node, client: client, l: l, stop: make(chan struct{})}
	w.wg.Add(3)
	go w.sender(rand.New(rand.NewPCG(seed, 1)))
	go w.ordersReceiver(rand.New(rand.NewPCG(seed, 2)))
	go w.otherReceiver(rand.New(rand.NewPCG(seed, 3)))
	return w
}

// halt stops the workers and waits for them (also when called again).
func (w *loadWorkers) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

func (w *loadWorkers) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// pause waits d unless the workers are stopped.
func (w *loadWorkers) pause(d time.Duration) {
	select {
	case <-w.stop:
	case <-time.After(d):
	}
}

func (w *loadWorkers) sender(rnd *rand.Rand) {
	defer w.wg.Done()
	ctx := context.Background()
	senders := map[string]*azservicebus.Sender{}
	defer func() {
		for _, s := range senders {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = s.Close(cctx)
			cancel()
		}
	}()
	get := func(entity string) (*azservicebus.Sender, error) {
		if s := senders[entity]; s != nil {
			return s, nil
		}
		s, err := w.client.NewSender(entity, nil)
		if err == nil {
			senders[entity] = s
		}
		return s, err
	}
	for i := 0; !w.stopped(); i++ {
		// At most about a hundred operations a second per node: the
		// point is a mix of operations across a kill, not throughput
		// (and the checker reads back everything).
		w.pause(10 * time.Millisecond)
		id := fmt.Sprintf("%s-%d", w.node, i)
		entity, kind := qOrders, "send"
		msg := &azservicebus.Message{MessageID: &id, Body: []byte(id)}
		switch i % 7 {
		case 3:
			kind = "schedule"
		case 4:
			entity = qSessions
			sid := loadSessionIDs[rnd.IntN(len(loadSessionIDs))]
			msg.SessionID = &sid
		case 5, 6:
			entity = tEvents
			color := "blue"
			if rnd.IntN(2) == 0 {
				color = "red"
			}
			msg.ApplicationProperties = map[string]any{"color": color}
		}
		s, err := get(entity)
		if err != nil {
			w.l.failed("sender "+entity, err)
			w.pause(100 * time.Millisecond)
			continue
		}
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if kind == "schedule" {
			at := time.Now().Add(time.Duration(500+rnd.IntN(1500)) * time.Millisecond)
			var seqs []int64
			seqs, err = s.ScheduleMessages(octx, []*azservicebus.Message{msg}, at, nil)
			if err == nil {
				w.mu.Lock()
				w.lastSchedule = at
				w.mu.Unlock()
				w.l.mu.Lock()
				w.l.seenLocked(entity, seqs[0], id)
				w.l.mu.Unlock()
			}
		} else {
			err = s.SendMessage(octx, msg, nil)
		}
		cancel()
		if err != nil {
			w.l.failed(kind+" "+entity, err)
			w.pause(50 * time.Millisecond)
			continue
		}
		w.l.sentOK(kind, entity, id, msg.ApplicationProperties["color"] == "red")
	}
}

func (w *loadWorkers) ordersReceiver(rnd *rand.Rand) {
	defer w.wg.Done()
	ctx := context.Background()
	r, err := w.client.NewReceiverForQueue(qOrders, nil)
	if err != nil {
		w.l.failed("receiver "+qOrders, err)
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = r.Close(cctx)
		cancel()
	}()
	for !w.stopped() {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ms, err := r.ReceiveMessages(rctx, 8, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			w.l.failed("receive "+qOrders, err)
			w.pause(50 * time.Millisecond)
		}
		w.l.settleAll(ctx, qOrders, w.node, r, ms, rnd)
	}
}

// otherReceiver takes turns at the session queue and the subscriptions.
func (w *loadWorkers) otherReceiver(rnd *rand.Rand) {
	defer w.wg.Done()
	ctx := context.Background()
	subs := map[string]*azservicebus.Receiver{}
	defer func() {
		for _, r := range subs {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = r.Close(cctx)
			cancel()
		}
	}()
	for i := 0; !w.stopped(); i++ {
		switch i % 3 {
		case 0:
			actx, cancel := context.WithTimeout(ctx, time.Second)
			sr, err := w.client.AcceptNextSessionForQueue(actx, qSessions, nil)
			cancel()
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					w.l.failed("accept session", err)
					w.pause(50 * time.Millisecond)
				}
				continue
			}
			if sr.SessionID() == "probe" {
				// The kill test's probe receives that session itself: a
				// worker that settled its message would leave the probe
				// waiting for it in vain. Let it go at once.
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = sr.Close(cctx)
				cancel()
				w.pause(100 * time.Millisecond)
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			ms, _ := sr.ReceiveMessages(rctx, 8, nil)
			cancel()
			w.l.settleAll(ctx, qSessions, w.node, sr, ms, rnd)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = sr.Close(cctx)
			cancel()
		default:
			sub := "all"
			if i%3 == 2 {
				sub = "red"
			}
			r := subs[sub]
			if r == nil {
				var err error
				if r, err = w.client.NewReceiverForSubscription(tEvents, sub, nil); err != nil {
					w.l.failed("receiver "+sub, err)
					w.pause(50 * time.Millisecond)
					continue
				}
				subs[sub] = r
			}
			rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			ms, err := r.ReceiveMessages(rctx, 8, nil)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				w.l.failed("receive "+sub, err)
				w.pause(50 * time.Millisecond)
			}
			w.l.settleAll(ctx, tEvents+"/"+sub, w.node, r, ms, rnd)
		}
	}
}

// peeker is a receiver that can peek.
type peeker interface {
	PeekMessages(context.Context, int, *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// peekAll lists every message of an entity by sequence number, retrying
// failures (a unit may be moving).
func peekAll(ctx context.Context, p peeker) ([]*azservicebus.ReceivedMessage, error) {
	var out []*azservicebus.ReceivedMessage
	from := int64(0)
	for {
		var ms []*azservicebus.ReceivedMessage
		err := retryable(ctx, "peek", func(ctx context.Context) error {
			var err error
			ms, err = p.PeekMessages(ctx, 250, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(ms) == 0 {
			return out, nil
		}
		out = append(out, ms...)
		from = *ms[len(ms)-1].SequenceNumber + 1
	}
}

// finalState is what every entity holds at the end, read through the
// SDK: entity path (a "/$dlq" suffix for dead-letter queues) -> seq ->
// message id.
type finalState map[string]map[int64]string

// readFinal peeks every entity of the load, and its dead-letter queue,
// through node id's client.
func readFinal(ctx context.Context, t *testing.T, client *azservicebus.Client, sessionIDs []string) finalState {
	t.Helper()
	st := finalState{}
	put := func(entity string, ms []*azservicebus.ReceivedMessage) {
		if st[entity] == nil {
			st[entity] = map[int64]string{}
		}
		for _, m := range ms {
			if prev, dup := st[entity][*m.SequenceNumber]; dup {
				t.Errorf("%s: sequence number %d listed twice (%s, %s)", entity, *m.SequenceNumber, prev, m.MessageID)
			}
			st[entity][*m.SequenceNumber] = m.MessageID
		}
	}
	dlq := &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
	type target struct {
		name string
		open func(*azservicebus.ReceiverOptions) (*azservicebus.Receiver, error)
	}
	targets := []target{
		{qOrders, func(o *azservicebus.ReceiverOptions) (*azservicebus.Receiver, error) {
			return client.NewReceiverForQueue(qOrders, o)
		}},
		{subAll, func(o *azservicebus.ReceiverOptions) (*azservicebus.Receiver, error) {
			return client.NewReceiverForSubscription(tEvents, "all", o)
		}},
		{subRed, func(o *azservicebus.ReceiverOptions) (*azservicebus.Receiver, error) {
			return client.NewReceiverForSubscription(tEvents, "red", o)
		}},
		{qSessions, nil},
	}
	for _, tg := range targets {
		for _, dead := range []bool{false, true} {
			name := tg.name
			var opts *azservicebus.ReceiverOptions
			if dead {
				name, opts = tg.name+"/$dlq", dlq
			}
			if tg.open == nil && !dead {
				// A session-enabled queue is peeked one session at a time.
				for _, sid := range sessionIDs {
					var sr *azservicebus.SessionReceiver
					if err := retryable(ctx, "accept session "+sid, func(ctx context.Context) error {
						var err error
						sr, err = client.AcceptSessionForQueue(ctx, qSessions, sid, nil)
						return err
					}); err != nil {
						t.Fatal(err)
					}
					ms, err := peekAll(ctx, sr)
					_ = sr.Close(ctx)
					if err != nil {
						t.Fatalf("peek session %s: %v", sid, err)
					}
					put(name, ms)
				}
				continue
			}
			var r *azservicebus.Receiver
			var err error
			if tg.open == nil {
				r, err = client.NewReceiverForQueue(qSessions, opts)
			} else {
				r, err = tg.open(opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			ms, err := peekAll(ctx, r)
			_ = r.Close(ctx)
			if err != nil {
				t.Fatalf("peek %s: %v", name, err)
			}
			put(name, ms)
		}
	}
	return st
}

// check compares the final state with the ledger: every acknowledged send
// is present (or was acknowledged completed), every acknowledged complete
// is gone, every acknowledged dead-letter is in the dead-letter queue, no
// sequence number carries two messages, and no message was delivered
// while another delivery of it held a lock that was later honoured.
func (l *ledger) check(t *testing.T, st finalState) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		t.Error(p)
	}
	// Sequence numbers: the final listing agrees with every delivery.
	known := len(l.problems)
	for entity, seqs := range st {
		base := strings.TrimSuffix(entity, "/$dlq")
		for seq, id := range seqs {
			l.seenLocked(base, seq, id)
		}
	}
	for _, p := range l.problems[known:] {
		t.Error(p)
	}
	// Where each message id is now, per queue or subscription.
	present := map[string]map[string]bool{}
	completedIDs := map[string]map[string]bool{}
	for entity, seqs := range st {
		base := strings.TrimSuffix(entity, "/$dlq")
		if present[base] == nil {
			present[base] = map[string]bool{}
		}
		for _, id := range seqs {
			present[base][id] = true
		}
	}
	for k, id := range l.completed {
		if completedIDs[k.entity] == nil {
			completedIDs[k.entity] = map[string]bool{}
		}
		completedIDs[k.entity][id] = true
		if _, ok := st[k.entity][k.seq]; ok {
			t.Errorf("%s seq %d (%s): completed (acknowledged) but still there", k.entity, k.seq, id)
		}
		if _, ok := st[k.entity+"/$dlq"][k.seq]; ok {
			t.Errorf("%s seq %d (%s): completed (acknowledged) but in the dead-letter queue", k.entity, k.seq, id)
		}
	}
	for k, id := range l.deadLetter {
		if got, ok := st[k.entity+"/$dlq"][k.seq]; !ok || got != id {
			t.Errorf("%s seq %d (%s): dead-lettered (acknowledged) but not in the dead-letter queue", k.entity, k.seq, id)
		}
	}
	// A complete that failed without a definite answer (a timeout, a
	// lost connection) may have been applied: such a message may be gone.
	unknown := map[string]map[string]bool{}
	for k, ds := range l.deliveries {
		for _, d := range ds {
			if d.settle == "complete" && d.err != nil && !definiteFailure(d.err) {
				if unknown[k.entity] == nil {
					unknown[k.entity] = map[string]bool{}
				}
				unknown[k.entity][d.id] = true
			}
		}
	}
	lost, gone := 0, 0
	want := func(entity, id string) {
		if present[entity][id] || completedIDs[entity][id] {
			return
		}
		if unknown[entity][id] {
			gone++
			return
		}
		lost++
		if lost > 20 {
			return
		}
		var hist []string
		for k, ds := range l.deliveries {
			for _, d := range ds {
				if d.id == id && k.entity == entity {
					hist = append(hist, fmt.Sprintf("seq %d via %s at %s: %s settled=%v err=%v", k.seq, d.gateway, d.got.Format("15:04:05.000"), d.settle, d.settled, d.err))
				}
			}
		}
		t.Errorf("%s: %s was sent (acknowledged) and is neither there nor completed; deliveries: %v", entity, id, hist)
	}
	for entity, ids := range l.sent {
		for id := range ids {
			if entity == tEvents {
				want(subAll, id)
				if l.red[id] {
					want(subRed, id)
				}
				continue
			}
			want(entity, id)
		}
	}
	if lost > 0 {
		t.Errorf("%d acknowledged sends lost", lost)
	}
	if gone > 0 {
		t.Logf("%d messages gone after a complete whose outcome the client did not learn (a timeout or a lost connection)", gone)
	}
	// Two owners at once: a delivery whose settlement was acknowledged
	// held a valid lock from its receipt until its settlement was sent
	// (the settlement is a fenced write of the owner that holds the lock
	// in memory; a move drops locks, and its settlement would have failed).
	// No other delivery of the same message may reach a client in between.
	overlaps := 0
	for k, ds := range l.deliveries {
		for _, a := range ds {
			if !a.settled {
				continue
			}
			for _, b := range ds {
				if b != a && !b.got.Before(a.got) && b.got.Before(a.settleStart) {
					overlaps++
					if overlaps <= 10 {
						t.Errorf("%s seq %d (%s): delivered through %s at %s while the delivery through %s at %s held its lock (settled: %s, sent %s)",
							k.entity, k.seq, a.id, b.gateway, b.got.Format("15:04:05.000"), a.gateway, a.got.Format("15:04:05.000"), a.settle, a.settleStart.Format("15:04:05.000"))
					}
				}
			}
		}
	}
	if overlaps > 0 {
		t.Errorf("%d deliveries overlapped a lock that was honoured", overlaps)
	}
}

// definiteFailure tells whether a settlement error says it was not
// applied (the lock was lost or the message is gone), rather than leaving
// the outcome unknown.
func definiteFailure(err error) bool {
	var se *azservicebus.Error
	return errors.As(err, &se) && se.Code == azservicebus.CodeLockLost
}

// summary is the ledger's counts, for the log.
func (l *ledger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for k, n := range l.ops {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	var fails []string
	for k, n := range l.failures {
		fails = append(fails, fmt.Sprintf("%s %d (first: %.200s)", k, n, l.firstErr[k]))
	}
	sort.Strings(fails)
	deliveries := 0
	for _, ds := range l.deliveries {
		deliveries += len(ds)
	}
	return fmt.Sprintf("acknowledged: %s; deliveries %d; failed (not acknowledged): %s", strings.Join(parts, ", "), deliveries, strings.Join(fails, ", "))
}

func (l *ledger) sessionIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := slices.Clone(loadSessionIDs)
	for s := range l.sessions {
		ids = append(ids, s)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
