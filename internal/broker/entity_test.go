package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/message"
)

func TestCreateQueueNames(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"q", "a.b-c_d", "orders/eu/v1", strings.Repeat("x", 260), "9"} {
		if _, err := e.b.CreateQueue(name, DefaultQueueProperties()); err != nil {
			t.Errorf("CreateQueue(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", strings.Repeat("x", 261), "/q", "q/", "a//b", "q$", "q q", "ü", "q#", "q?", "a@b", "q\\x"} {
		_, err := e.b.CreateQueue(name, DefaultQueueProperties())
		if KindOf(err) != KindInvalidArgument {
			t.Errorf("CreateQueue(%q): %v, want InvalidArgument", name, err)
		}
	}
	_, err := e.b.CreateQueue("Q", DefaultQueueProperties())
	wantKind(t, err, ErrAlreadyExists)
	_, err = e.b.CreateQueue("ORDERS/EU/V1", DefaultQueueProperties())
	wantKind(t, err, ErrAlreadyExists)
	info, err := e.b.GetQueue("orders/EU/v1")
	if err != nil || info.Name != "orders/eu/v1" {
		t.Fatalf("GetQueue case-insensitive: %+v %v", info.Name, err)
	}
}

func TestQueuePropertiesValidation(t *testing.T) {
	d := DefaultQueueProperties()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if d.LockDuration != time.Minute || d.MaxSizeInMegabytes != 1024 || d.MaxDeliveryCount != 10 ||
		d.DuplicateDetectionHistoryTimeWindow != 10*time.Minute || d.DefaultMessageTimeToLive != Infinite ||
		d.AutoDeleteOnIdle != Infinite || d.Status != StatusActive || !d.EnableBatchedOperations ||
		!d.SupportOrdering || d.MaxMessageSizeInKilobytes != 256 {
		t.Fatalf("defaults %+v", d)
	}
	for _, tc := range []struct {
		prop string
		mod  func(*QueueProperties)
	}{
		{"LockDuration", func(p *QueueProperties) { p.LockDuration = 4 * time.Second }},
		{"LockDuration", func(p *QueueProperties) { p.LockDuration = 5*time.Minute + 1 }},
		{"MaxSizeInMegabytes", func(p *QueueProperties) { p.MaxSizeInMegabytes = 0 }},
		{"MaxSizeInMegabytes", func(p *QueueProperties) { p.MaxSizeInMegabytes = 81921 }},
		{"DuplicateDetectionHistoryTimeWindow", func(p *QueueProperties) { p.DuplicateDetectionHistoryTimeWindow = 19 * time.Second }},
		{"DuplicateDetectionHistoryTimeWindow", func(p *QueueProperties) { p.DuplicateDetectionHistoryTimeWindow = 8 * 24 * time.Hour }},
		{"DefaultMessageTimeToLive", func(p *QueueProperties) { p.DefaultMessageTimeToLive = time.Millisecond }},
		{"MaxDeliveryCount", func(p *QueueProperties) { p.MaxDeliveryCount = 0 }},
		{"AutoDeleteOnIdle", func(p *QueueProperties) { p.AutoDeleteOnIdle = 4 * time.Minute }},
		{"Status", func(p *QueueProperties) { p.Status = "Creating" }},
		{"UserMetadata", func(p *QueueProperties) { p.UserMetadata = strings.Repeat("m", 1025) }},
		{"MaxMessageSizeInKilobytes", func(p *QueueProperties) { p.MaxMessageSizeInKilobytes = 102401 }},
		{"AuthorizationRules", func(p *QueueProperties) { p.AuthorizationRules = make([]AuthorizationRule, 13) }},
		{"ForwardTo", func(p *QueueProperties) { p.ForwardTo = "/bad" }},
	} {
		p := DefaultQueueProperties()
		tc.mod(&p)
		err := p.Validate()
		if KindOf(err) != KindInvalidArgument || !strings.Contains(err.Error(), tc.prop) {
			t.Errorf("%s: error %v does not name the property", tc.prop, err)
		}
		if tc.prop != "Status" && tc.prop != "ForwardTo" && !strings.ContainsAny(err.Error(), "0123456789") {
			t.Errorf("%s: error %q does not state the range", tc.prop, err)
		}
	}
}

func TestUpdateQueue(t *testing.T) {
	e := newEnv(t)
	e.queue("q", func(p *QueueProperties) { p.RequiresDuplicateDetection = true })
	e.queue("target")
	created, _ := e.b.GetQueue("q")
	e.advance(time.Minute)

	p := created.Properties
	p.LockDuration = 30 * time.Second
	p.MaxDeliveryCount = 5
	p.UserMetadata = "hello"
	p.ForwardDeadLetteredMessagesTo = "target" // (ForwardTo would take q's messages away)
	info, err := e.b.UpdateQueue("q", p)
	if err != nil {
		t.Fatal(err)
	}
	if info.Properties.LockDuration != 30*time.Second || info.Properties.UserMetadata != "hello" ||
		!info.UpdatedAt.Equal(t0.Add(time.Minute)) || !info.CreatedAt.Equal(t0) {
		t.Fatalf("after update %+v", info)
	}
	// Immutable properties.
	for _, mod := range []func(*QueueProperties){
		func(p *QueueProperties) { p.RequiresDuplicateDetection = false },
		func(p *QueueProperties) { p.RequiresSession = true },
		func(p *QueueProperties) { p.EnablePartitioning = true },
	} {
		p2 := p
		mod(&p2)
		_, err := e.b.UpdateQueue("q", p2)
		wantKind(t, err, ErrNotAllowed)
	}
	// Invalid values, forwarding to itself or nowhere.
	p2 := p
	p2.MaxDeliveryCount = -1
	_, err = e.b.UpdateQueue("q", p2)
	wantKind(t, err, ErrInvalidArgument)
	p2 = p
	p2.ForwardTo = "Q"
	_, err = e.b.UpdateQueue("q", p2)
	wantKind(t, err, ErrInvalidArgument)
	p2.ForwardTo = "missing"
	_, err = e.b.UpdateQueue("q", p2)
	wantKind(t, err, ErrInvalidArgument)
	_, err = e.b.UpdateQueue("missing", p)
	wantKind(t, err, ErrNotFound)

	// New values apply: lock duration of new locks.
	e.send("q", msg("x"))
	if d := e.recv1("q"); !d.LockedUntil.Equal(t0.Add(90 * time.Second)) {
		t.Fatalf("lock until %v", d.LockedUntil)
	}
	// And survive a restart.
	e.restart()
	info, _ = e.b.GetQueue("q")
	if info.Properties.MaxDeliveryCount != 5 || info.Properties.ForwardDeadLetteredMessagesTo != "target" || !info.UpdatedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after restart %+v", info)
	}
}

func TestDeleteQueue(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.sendN("q", 3)
	e.deadLetterN(1)
	r := e.receiver("q", PeekLock)
	d := e.recv1("q")
	if err := e.b.DeleteQueue("Q"); err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.b.DeleteQueue("q"), ErrNotFound)
	_, err := r.TryReceive(1)
	wantKind(t, err, ErrNotFound)
	wantKind(t, e.b.Complete(ctx, "q", d.LockToken), ErrNotFound)
	_, err = e.b.GetQueue("q")
	wantKind(t, err, ErrNotFound)
	// A new queue of the same name starts empty, numbering from 1.
	e.queue("q")
	e.send("q", msg("new"))
	if ds := e.peek("q", 0, 10); len(ds) != 1 || ds[0].SequenceNumber != 1 {
		t.Fatalf("recreated queue holds %v", seqs(ds))
	}
	e.restart()
	if c := e.counts("q"); c.Total != 1 {
		t.Fatalf("after restart: %+v", c)
	}
}

func TestListQueuesAndCounts(t *testing.T) {
	e := newEnv(t)
	e.queue("b")
	e.queue("A")
	e.queue("q")
	if l := e.b.ListQueues(); len(l) != 3 || l[0].Name != "A" || l[1].Name != "b" {
		t.Fatalf("ListQueues %v", l)
	}
	info, _ := e.b.GetQueue("q")
	if !info.AccessedAt.IsZero() || !info.CreatedAt.Equal(t0) {
		t.Fatalf("times of a new queue: %+v", info)
	}
	e.advance(time.Second)
	e.sendN("q", 5)
	e.deadLetterN(2) // sends 2 more and dead-letters them
	d := e.recv1("q")
	if err := e.b.Defer(ctx, "q", d.LockToken, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Schedule(ctx, "q", nil, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.send("q", schedMsg("scheduled", t0.Add(time.Hour)))
	e.recv1("q") // one locked: still active
	info, _ = e.b.GetQueue("q")
	c := info.Counts
	if c.Active != 4 || c.Deferred != 1 || c.Scheduled != 1 || c.DeadLetter != 2 || c.TransferDeadLetter != 0 || c.Total != 8 {
		t.Fatalf("counts %+v", c)
	}
	if c.SizeInBytes <= 0 || !info.AccessedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("size %d accessed %v", c.SizeInBytes, info.AccessedAt)
	}
	// Counts survive a restart (the lock does not).
	e.restart()
	info2, _ := e.b.GetQueue("q")
	if info2.Counts != c || !info2.AccessedAt.Equal(info.AccessedAt) {
		t.Fatalf("after restart %+v, before %+v", info2.Counts, c)
	}
}

// schedMsg is a message scheduled by the x-opt-scheduled-enqueue-time annotation.
func schedMsg(body string, at time.Time) *message.Message {
	m := msg(body)
	m.Annotations = map[string]any{ScheduledEnqueueTimeAnnotation: at}
	return m
}

func TestAutoDeleteOnIdle(t *testing.T) {
	e := newEnv(t)
	e.queue("temp", func(p *QueueProperties) { p.AutoDeleteOnIdle = 5 * time.Minute })
	e.queue("keep")
	e.sendN("temp", 2)
	if next := e.b.NextDeadline(); !next.Equal(t0.Add(5 * time.Minute)) {
		t.Fatalf("NextDeadline %v", next)
	}
	// Every use restarts the idle clock: peek, receive, send, update.
	e.advance(4 * time.Minute)
	e.peek("temp", 0, 1)
	e.advance(4 * time.Minute)
	e.b.Tick()
	if _, err := e.b.GetQueue("temp"); err != nil {
		t.Fatalf("deleted despite a peek 4 min ago: %v", err)
	}
	// An open receiver keeps it alive too.
	r := e.receiver("temp", PeekLock)
	e.advance(10 * time.Minute)
	e.b.Tick()
	if _, err := e.b.GetQueue("temp"); err != nil {
		t.Fatalf("deleted with an open receiver: %v", err)
	}
	r.Close()
	// Pending scheduled messages keep it alive.
	if _, err := e.b.Schedule(ctx, "temp", []*message.Message{msg("s")}, e.clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.advance(30 * time.Minute)
	e.b.Tick()
	if _, err := e.b.GetQueue("temp"); err != nil {
		t.Fatalf("deleted with a scheduled message pending: %v", err)
	}
	// Idle for good: deleted with its messages.
	e.advance(time.Hour) // the scheduled message enqueues (a use), then idleness
	e.b.Tick()
	e.advance(5 * time.Minute)
	e.b.Tick()
	_, err := e.b.GetQueue("temp")
	wantKind(t, err, ErrNotFound)
	if _, err := e.b.GetQueue("keep"); err != nil {
		t.Fatal("a queue without AutoDeleteOnIdle was deleted")
	}
	e.restart()
	_, err = e.b.GetQueue("temp")
	wantKind(t, err, ErrNotFound)
}

func TestAutoDeleteAfterRestartUsesSavedAccessTime(t *testing.T) {
	e := newEnv(t)
	e.queue("temp", func(p *QueueProperties) { p.AutoDeleteOnIdle = 10 * time.Minute })
	e.advance(3 * time.Minute)
	e.sendN("temp", 1)
	e.restart()
	e.advance(6 * time.Minute) // 9 min after creation, 6 after the send
	e.b.Tick()
	if _, err := e.b.GetQueue("temp"); err != nil {
		t.Fatalf("deleted early after restart: %v", err)
	}
	e.advance(5 * time.Minute)
	e.b.Tick()
	_, err := e.b.GetQueue("temp")
	wantKind(t, err, ErrNotFound)
}
