package broker

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// topic creates a topic with default properties changed by mods.
func (e *env) topic(name string, mods ...func(*TopicProperties)) {
	e.t.Helper()
	p := DefaultTopicProperties()
	for _, m := range mods {
		m(&p)
	}
	if _, err := e.b.CreateTopic(name, p); err != nil {
		e.t.Fatalf("CreateTopic(%q): %v", name, err)
	}
}

// sub creates a subscription with default properties changed by mods and
// the $Default rule.
func (e *env) sub(topic, name string, mods ...func(*SubscriptionProperties)) string {
	e.t.Helper()
	return e.subRule(topic, name, nil, mods...)
}

// subRule creates a subscription whose default rule is rule (nil: $Default).
func (e *env) subRule(topic, name string, rule *RuleDescription, mods ...func(*SubscriptionProperties)) string {
	e.t.Helper()
	p := DefaultSubscriptionProperties()
	for _, m := range mods {
		m(&p)
	}
	if _, err := e.b.CreateSubscription(topic, name, p, rule); err != nil {
		e.t.Fatalf("CreateSubscription(%s, %s): %v", topic, name, err)
	}
	return SubscriptionPath(topic, name)
}

func (e *env) rule(topic, sub string, r RuleDescription) {
	e.t.Helper()
	if _, err := e.b.CreateRule(topic, sub, r); err != nil {
		e.t.Fatalf("CreateRule(%s): %v", r.Name, err)
	}
}

func (e *env) subCounts(topic, sub string) Counts {
	e.t.Helper()
	info, err := e.b.GetSubscription(topic, sub)
	if err != nil {
		e.t.Fatalf("GetSubscription: %v", err)
	}
	return info.Counts
}

func (e *env) topicInfo(name string) TopicInfo {
	e.t.Helper()
	info, err := e.b.GetTopic(name)
	if err != nil {
		e.t.Fatalf("GetTopic: %v", err)
	}
	return info
}

// sharedData reports whether the topic's store entity still holds the
// data of seq.
func (e *env) sharedData(topic string, seq int64) bool {
	e.t.Helper()
	e.b.mu.RLock()
	t := e.b.mu.topics[entityKey(topic)]
	e.b.mu.RUnlock()
	_, err := e.st.ReadData(t.id, uint64(seq))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

// flushGarbage makes the broker commit the shared-data removals it holds.
func (e *env) flushGarbage(topic string) {
	e.t.Helper()
	e.b.mu.RLock()
	t := e.b.mu.topics[entityKey(topic)]
	e.b.mu.RUnlock()
	g := t.takeGarbage()
	if err := e.st.Commit(&store.Batch{Ops: t.appendGarbageOps(nil, g)}, true); err != nil {
		e.t.Fatal(err)
	}
}

func labelled(body, label string, props map[string]any) *message.Message {
	return &message.Message{Body: []byte(body), Subject: label, ApplicationProperties: props}
}

func TestTopicFanOutToEverySubscription(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	subs := []string{e.sub("t", "a"), e.sub("t", "b"), e.sub("t", "c")}
	e.send("t", msg("one"), msg("two"))
	for _, p := range subs {
		ds := e.recv(p, PeekLock, 10)
		if got := bodies(ds); fmt.Sprint(got) != "[one two]" {
			t.Fatalf("%s got %v", p, got)
		}
		// The subscription copy keeps the topic's sequence number.
		if fmt.Sprint(seqs(ds)) != "[1 2]" {
			t.Fatalf("%s seqs %v", p, seqs(ds))
		}
		if ds[0].DeliveryCount != 1 || !ds[0].EnqueuedTime.Equal(t0) || ds[0].Size == 0 {
			t.Fatalf("delivery %+v", ds[0])
		}
	}
	info := e.topicInfo("t")
	if info.SubscriptionCount != 3 || info.SQLFilterCount != 3 || info.CorrelationFilterCount != 0 {
		t.Fatalf("topic info %+v", info)
	}
	// Sizes: every copy counts (as Service Bus counts them).
	c := e.subCounts("t", "a")
	if c.Active != 2 || c.Total != 2 || c.SizeInBytes == 0 || info.Counts.SizeInBytes != 3*c.SizeInBytes {
		t.Fatalf("counts %+v topic %+v", c, info.Counts)
	}
	// A message no subscription takes is accepted and dropped.
	e2 := newEnv(t)
	e2.topic("empty")
	e2.send("empty", msg("x"))
}

func TestTopicSendIsOneCommitDataStoredOnce(t *testing.T) {
	spy := &spyStore{Store: memstore.New()}
	e := newEnvOn(t, spy)
	e.topic("t")
	for i := range 5 {
		e.sub("t", fmt.Sprint("s", i))
	}
	spy.mu.Lock()
	before := len(spy.commits)
	spy.mu.Unlock()
	e.send("t", &message.Message{Body: make([]byte, 1000)})
	spy.mu.Lock()
	commits := spy.commits[before:]
	spy.mu.Unlock()
	if len(commits) != 1 || !commits[0].sync {
		t.Fatalf("a send to 5 subscriptions made %d commits, want 1 synced", len(commits))
	}
	appends := 0
	for _, k := range commits[0].kinds {
		if k == store.OpAppend {
			appends++
		}
	}
	if appends != 6 { // the topic's data + 5 copies (Meta only)
		t.Fatalf("%d appends, want 6", appends)
	}
	st := spy.Store.Stats()
	if st.DataBytes > 1100 {
		t.Fatalf("the store holds %d bytes of data for one 1000-byte message", st.DataBytes)
	}
}

func TestSharedDataIsRemovedWithTheLastCopy(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	a, b := e.sub("t", "a"), e.sub("t", "b")
	e.send("t", msg("m"))
	da := e.recv1(a)
	e.complete(a, da.LockToken)
	if !e.sharedData("t", 1) {
		t.Fatal("shared data removed while b still holds a copy")
	}
	// Receive-and-delete the last copy; the removal rides on the next commit.
	if ds := e.recv(b, ReceiveAndDelete, 1); len(ds) != 1 || body(ds[0]) != "m" {
		t.Fatalf("b got %v", ds)
	}
	e.send("t", msg("next"))
	if e.sharedData("t", 1) {
		t.Fatal("shared data kept after its last copy was removed")
	}
	if !e.sharedData("t", 2) {
		t.Fatal("new message's data missing")
	}
	// Close flushes pending removals too.
	e.recv(a, ReceiveAndDelete, 1)
	e.recv(b, ReceiveAndDelete, 1)
	e.restart()
	if e.sharedData("t", 2) {
		t.Fatal("shared data kept over Close after its last copy was removed")
	}
	if st := e.st.(*memstore.Store).Stats(); st.Messages != 0 {
		t.Fatalf("store holds %d messages", st.Messages)
	}
}

func TestSubscriptionIsAFullReceivingEntity(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	p := e.sub("t", "s", func(p *SubscriptionProperties) {
		p.MaxDeliveryCount = 2
		p.LockDuration = 30 * time.Second
	})
	other := e.sub("t", "other")
	e.send("t", msg("m1"), msg("m2"), msg("m3"), msg("m4"))

	// Abandon with properties: this copy gets data of its own; the other
	// subscription still reads the shared data unchanged.
	d := e.recv1(p)
	e.abandon(p, d.LockToken, map[string]any{"tried": int64(1)})
	d = e.recv1(p)
	if d.SequenceNumber != 1 || d.DeliveryCount != 2 || prop(d, "tried") != int64(1) {
		t.Fatalf("after abandon: seq %d count %d props %v", d.SequenceNumber, d.DeliveryCount, d.Message.ApplicationProperties)
	}
	if od := e.peek(other, 1, 1); len(od) != 1 || prop(od[0], "tried") != nil {
		t.Fatalf("the other subscription's copy changed: %v", od[0].Message.ApplicationProperties)
	}
	// Lock expiry reaches MaxDeliveryCount: the subscription's DLQ.
	e.advance(31 * time.Second)
	e.b.Tick()
	dlq := p + "/$DeadLetterQueue"
	dl := e.recv1(dlq)
	if dl.SequenceNumber != 1 || prop(dl, PropDeadLetterReason) != ReasonMaxDeliveryCountExceeded {
		t.Fatalf("DLQ got seq %d reason %v", dl.SequenceNumber, prop(dl, PropDeadLetterReason))
	}
	e.complete(dlq, dl.LockToken)

	// Defer and receive by sequence number.
	d = e.recv1(p)
	if err := e.b.Defer(ctx, p, d.LockToken, nil); err != nil {
		t.Fatal(err)
	}
	if c := e.subCounts("t", "s"); c.Deferred != 1 || c.Active != 2 {
		t.Fatalf("counts %+v", c)
	}
	got, err := e.b.ReceiveDeferred(ctx, p, []int64{d.SequenceNumber}, PeekLock)
	if err != nil || len(got) != 1 || got[0].State != StateDeferred {
		t.Fatalf("ReceiveDeferred: %v %v", got, err)
	}
	if _, err := e.b.RenewLock(ctx, p, []uuid.UUID{got[0].LockToken}); err != nil {
		t.Fatal(err)
	}
	e.complete(p, got[0].LockToken)

	// Explicit dead-letter, peek, receive-and-delete, batch delete.
	d = e.recv1(p)
	if err := e.b.DeadLetter(ctx, p, d.LockToken, "why", "because", nil); err != nil {
		t.Fatal(err)
	}
	if ps := e.peek(dlq, 0, 10); len(ps) != 1 || prop(ps[0], PropDeadLetterReason) != "why" {
		t.Fatalf("DLQ peek %v", ps)
	}
	if ds := e.recv(p, ReceiveAndDelete, 5); len(ds) != 1 || body(ds[0]) != "m4" {
		t.Fatalf("RAD got %v", bodies(ds))
	}
	if n, err := e.b.DeleteMessages(ctx, dlq, 10, t0.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("DeleteMessages %d %v", n, err)
	}
	if c := e.subCounts("t", "s"); c.Total != 0 || c.SizeInBytes != 0 {
		t.Fatalf("counts after all %+v", c)
	}
	// The other subscription still has all four.
	if c := e.subCounts("t", "other"); c.Active != 4 {
		t.Fatalf("other counts %+v", c)
	}
	// Transfer DLQ path exists and is empty.
	e.expectEmpty(p + "/$Transfer/$DeadLetterQueue")
	// A token of another subscription is lost here.
	od := e.recv1(other)
	wantKind(t, e.b.Complete(ctx, p, od.LockToken), ErrLockLost)
}

func TestTopicScheduledFanOut(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	a := e.sub("t", "a")
	at := t0.Add(time.Hour)
	ss, err := e.b.Schedule(ctx, "t", []*message.Message{msg("later"), msg("cancelled")}, at)
	if err != nil || len(ss) != 2 {
		t.Fatal(ss, err)
	}
	if info := e.topicInfo("t"); info.Counts.Scheduled != 2 || info.Counts.SizeInBytes == 0 {
		t.Fatalf("topic counts %+v", info.Counts)
	}
	e.expectEmpty(a)
	// A subscription created meanwhile gets it too: routing happens when
	// the message materialises.
	b := e.sub("t", "b")
	if err := e.b.CancelScheduled(ctx, "t", ss[1:]); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Hour)
	e.b.Tick()
	for _, p := range []string{a, b} {
		ds := e.recv(p, ReceiveAndDelete, 5)
		if len(ds) != 1 || body(ds[0]) != "later" || ds[0].SequenceNumber != ss[0] ||
			!ds[0].EnqueuedTime.Equal(at) || !ds[0].ScheduledEnqueueTime.Equal(at) {
			t.Fatalf("%s got %v", p, bodies(ds))
		}
	}
	if info := e.topicInfo("t"); info.Counts.Scheduled != 0 {
		t.Fatalf("scheduled after fan-out %+v", info.Counts)
	}
	// The lazy check on access: a send after the time fans out first.
	ss, _ = e.b.Schedule(ctx, "t", []*message.Message{msg("lazy")}, t0.Add(2*time.Hour))
	e.advance(time.Hour)
	e.send("t", msg("now"))
	if ds := e.recv(a, PeekLock, 5); fmt.Sprint(bodies(ds)) != "[lazy now]" {
		t.Fatalf("got %v", bodies(ds))
	}
	_ = ss
}

func TestTopicDuplicateDetectionStatusAndLimits(t *testing.T) {
	e := newEnv(t)
	e.topic("t", func(p *TopicProperties) {
		p.RequiresDuplicateDetection = true
		p.MaxMessageSizeInKilobytes = 1
		p.MaxSizeInMegabytes = 1
	})
	s := e.sub("t", "s")
	e.send("t", msgID("a", "1"), msgID("b", "1"), msgID("c", "2"))
	if ds := e.recv(s, ReceiveAndDelete, 5); fmt.Sprint(bodies(ds)) != "[a c]" {
		t.Fatalf("got %v", bodies(ds))
	}
	wantKind(t, e.b.Send(ctx, "t", []*message.Message{{Body: make([]byte, 2000)}}), ErrMessageTooLarge)
	// Quota: 1 MB over every copy.
	big := &message.Message{Body: make([]byte, 900)}
	var err error
	for i := 0; i < 2000 && err == nil; i++ {
		err = e.b.Send(ctx, "t", []*message.Message{big})
	}
	wantKind(t, err, ErrQuotaExceeded)

	p := DefaultTopicProperties()
	p.RequiresDuplicateDetection, p.MaxMessageSizeInKilobytes, p.MaxSizeInMegabytes = true, 1, 1
	p.Status = StatusSendDisabled
	if _, err := e.b.UpdateTopic("t", p); err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.b.Send(ctx, "t", []*message.Message{msg("x")}), ErrEntityDisabled)
	e.recv1(s) // subscriptions still receive
	p.Status = StatusDisabled
	if _, err := e.b.UpdateTopic("t", p); err != nil {
		t.Fatal(err)
	}
	_, err = e.b.OpenReceiver(s, PeekLock)
	wantKind(t, err, ErrEntityDisabled)
	p.RequiresDuplicateDetection = false
	_, err = e.b.UpdateTopic("t", p)
	wantKind(t, err, ErrNotAllowed)
}

func TestTopicAndQueueShareNames(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.topic("T")
	_, err := e.b.CreateTopic("Q", DefaultTopicProperties())
	wantKind(t, err, ErrAlreadyExists)
	_, err = e.b.CreateQueue("t", DefaultQueueProperties())
	wantKind(t, err, ErrAlreadyExists)
	_, err = e.b.CreateTopic("a/Subscriptions/b", DefaultTopicProperties())
	wantKind(t, err, ErrInvalidArgument)
	e.sub("t", "s")
	_, err = e.b.CreateSubscription("t", "S", DefaultSubscriptionProperties(), nil)
	wantKind(t, err, ErrAlreadyExists)
	_, err = e.b.CreateSubscription("nope", "s", DefaultSubscriptionProperties(), nil)
	wantKind(t, err, ErrNotFound)
	_, err = e.b.CreateSubscription("q", "s", DefaultSubscriptionProperties(), nil)
	wantKind(t, err, ErrNotFound)

	// Paths.
	for path, want := range map[string]EntityType{"q": EntityQueue, "Q/$DeadLetterQueue": EntityQueue, "t": EntityTopic,
		"t/subscriptions/S": EntitySubscription, "T/Subscriptions/s/$DeadLetterQueue": EntitySubscription} {
		if got, _, err := e.b.Resolve(path); err != nil || got != want {
			t.Errorf("Resolve(%s) = %v, %v", path, got, err)
		}
	}
	for _, path := range []string{"t/$DeadLetterQueue", "t/Subscriptions/x", "x"} {
		_, _, err := e.b.Resolve(path)
		wantKind(t, err, ErrNotFound)
	}
	wantKind(t, e.b.Send(ctx, "t/Subscriptions/s", []*message.Message{msg("x")}), ErrNotAllowed)
	_, err = e.b.OpenReceiver("t", PeekLock)
	wantKind(t, err, ErrNotAllowed)
	_, err = e.b.GetQueue("t")
	wantKind(t, err, ErrNotFound)
	if ts := e.b.ListTopics(); len(ts) != 1 || ts[0].Name != "T" {
		t.Fatalf("ListTopics %+v", ts)
	}
	if qs := e.b.ListQueues(); len(qs) != 1 {
		t.Fatalf("ListQueues %+v", qs)
	}
}

func TestTopicAndSubscriptionProperties(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		mod  func(*TopicProperties)
		prop string
	}{
		{func(p *TopicProperties) { p.MaxSizeInMegabytes = 0 }, "MaxSizeInMegabytes"},
		{func(p *TopicProperties) { p.DefaultMessageTimeToLive = time.Millisecond }, "DefaultMessageTimeToLive"},
		{func(p *TopicProperties) { p.DuplicateDetectionHistoryTimeWindow = time.Second }, "DuplicateDetectionHistoryTimeWindow"},
		{func(p *TopicProperties) { p.AutoDeleteOnIdle = time.Minute }, "AutoDeleteOnIdle"},
		{func(p *TopicProperties) { p.Status = "Bogus" }, "Status"},
		{func(p *TopicProperties) { p.UserMetadata = strings.Repeat("x", 1025) }, "UserMetadata"},
		{func(p *TopicProperties) { p.MaxMessageSizeInKilobytes = 0 }, "MaxMessageSizeInKilobytes"},
	} {
		p := DefaultTopicProperties()
		tc.mod(&p)
		_, err := e.b.CreateTopic("t", p)
		wantKind(t, err, ErrInvalidArgument)
		if !strings.Contains(err.Error(), tc.prop) {
			t.Errorf("error %q does not name %s", err, tc.prop)
		}
	}
	e.topic("t")
	e.queue("fwd")
	for _, tc := range []struct {
		mod  func(*SubscriptionProperties)
		prop string
	}{
		{func(p *SubscriptionProperties) { p.LockDuration = time.Second }, "LockDuration"},
		{func(p *SubscriptionProperties) { p.MaxDeliveryCount = 0 }, "MaxDeliveryCount"},
		{func(p *SubscriptionProperties) { p.DefaultMessageTimeToLive = 0 }, "DefaultMessageTimeToLive"},
		{func(p *SubscriptionProperties) { p.AutoDeleteOnIdle = time.Second }, "AutoDeleteOnIdle"},
		{func(p *SubscriptionProperties) { p.Status = "x" }, "Status"},
		{func(p *SubscriptionProperties) { p.ForwardTo = "missing" }, "ForwardTo"},
		{func(p *SubscriptionProperties) { p.ForwardTo = "bad name!" }, "ForwardTo"},
	} {
		p := DefaultSubscriptionProperties()
		tc.mod(&p)
		_, err := e.b.CreateSubscription("t", "s", p, nil)
		wantKind(t, err, ErrInvalidArgument)
		if !strings.Contains(err.Error(), tc.prop) {
			t.Errorf("error %q does not name %s", err, tc.prop)
		}
	}
	p := DefaultSubscriptionProperties()
	p.RequiresSession = true
	if si, err := e.b.CreateSubscription("t", "sessions", p, nil); err != nil || !si.Properties.RequiresSession {
		t.Fatalf("RequiresSession: %+v %v", si, err)
	}
	if err := e.b.DeleteSubscription("t", "sessions"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "a/b", strings.Repeat("x", 51), "$x"} {
		_, err := e.b.CreateSubscription("t", bad, DefaultSubscriptionProperties(), nil)
		wantKind(t, err, ErrInvalidArgument)
	}
	// Defaults, times, update.
	e.sub("t", "s", func(p *SubscriptionProperties) { p.ForwardDeadLetteredMessagesTo = "fwd" }) // (ForwardTo would take its messages away)
	info, err := e.b.GetSubscription("t", "S")
	if err != nil || info.Name != "s" || info.TopicName != "t" || !info.CreatedAt.Equal(t0) || !info.Properties.DeadLetteringOnFilterEvaluationExceptions ||
		info.Properties.ForwardDeadLetteredMessagesTo != "fwd" || info.Properties.MaxDeliveryCount != DefaultMaxDeliveryCount {
		t.Fatalf("info %+v %v", info, err)
	}
	e.advance(time.Minute)
	p = info.Properties
	p.LockDuration = 2 * time.Minute
	p.UserMetadata = "meta"
	info, err = e.b.UpdateSubscription("t", "s", p)
	if err != nil || info.Properties.LockDuration != 2*time.Minute || !info.UpdatedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("update %+v %v", info, err)
	}
	e.send("t", msg("m"))
	if d := e.recv1("t/Subscriptions/s"); !d.LockedUntil.Equal(t0.Add(3 * time.Minute)) {
		t.Fatalf("new lock duration not applied: %v", d.LockedUntil)
	}
	p.RequiresSession = true
	_, err = e.b.UpdateSubscription("t", "s", p)
	wantKind(t, err, ErrNotAllowed)
	ti := e.topicInfo("t")
	if !ti.CreatedAt.Equal(t0) || ti.AccessedAt.Before(t0.Add(time.Minute)) || ti.Properties.MaxSizeInMegabytes != DefaultMaxSizeInMegabytes {
		t.Fatalf("topic info %+v", ti)
	}
	subs, err := e.b.ListSubscriptions("t")
	if err != nil || len(subs) != 1 {
		t.Fatalf("ListSubscriptions %v %v", subs, err)
	}
}

func TestDeleteTopicAndSubscription(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	a, b := e.sub("t", "a"), e.sub("t", "b")
	e.send("t", msg("1"), msg("2"))
	r := e.receiver(b, PeekLock)
	if err := e.b.DeleteSubscription("t", "b"); err != nil {
		t.Fatal(err)
	}
	_, err := r.TryReceive(1)
	wantKind(t, err, ErrNotFound)
	if _, err := e.b.GetSubscription("t", "b"); KindOf(err) != KindNotFound {
		t.Fatalf("deleted subscription: %v", err)
	}
	// a's copies still read the shared data; removing them frees it.
	if ds := e.recv(a, ReceiveAndDelete, 5); len(ds) != 2 {
		t.Fatalf("a got %d", len(ds))
	}
	e.flushGarbage("t")
	if e.sharedData("t", 1) || e.sharedData("t", 2) {
		t.Fatal("shared data kept after every copy is gone")
	}
	// Deleting the last holder of shared data frees it in the same batch.
	e.send("t", msg("3"))
	if err := e.b.DeleteSubscription("t", "a"); err != nil {
		t.Fatal(err)
	}
	if e.sharedData("t", 3) {
		t.Fatal("shared data kept after its subscription was deleted")
	}
	if info := e.topicInfo("t"); info.Counts.SizeInBytes != 0 || info.SubscriptionCount != 0 {
		t.Fatalf("topic after deletes %+v", info)
	}
	e.sub("t", "c")
	e.send("t", msg("4"))
	ra := e.receiver("t/Subscriptions/c", PeekLock)
	if err := e.b.DeleteTopic("T"); err != nil {
		t.Fatal(err)
	}
	_, err = ra.TryReceive(1)
	wantKind(t, err, ErrNotFound)
	_, err = e.b.GetTopic("t")
	wantKind(t, err, ErrNotFound)
	wantKind(t, e.b.DeleteTopic("t"), ErrNotFound)
	if st := e.st.(*memstore.Store).Stats(); st.Messages != 0 || st.Entities != 1 { // the namespace entity
		t.Fatalf("store after delete %+v", st)
	}
	// The name is free again, for a queue too.
	e.queue("t")
}

func TestTopicAutoDeleteOnIdle(t *testing.T) {
	e := newEnv(t)
	e.topic("t", func(p *TopicProperties) { p.AutoDeleteOnIdle = 10 * time.Minute })
	e.sub("t", "s", func(p *SubscriptionProperties) { p.AutoDeleteOnIdle = 5 * time.Minute })
	e.sub("t", "keep")
	// Operations on a subscription keep the topic alive; sends do not keep
	// a subscription alive.
	for range 3 {
		e.advance(4 * time.Minute)
		e.b.Tick()
		e.send("t", msg("m"))
		e.peek("t/Subscriptions/keep", 0, 1)
	}
	if _, err := e.b.GetSubscription("t", "s"); KindOf(err) != KindNotFound {
		t.Fatalf("idle subscription not deleted: %v", err)
	}
	if _, err := e.b.GetTopic("t"); err != nil {
		t.Fatalf("busy topic deleted: %v", err)
	}
	// Operations on a subscription alone keep the topic alive.
	for range 5 {
		e.advance(4 * time.Minute)
		e.b.Tick()
		e.recv("t/Subscriptions/keep", ReceiveAndDelete, 1)
	}
	if _, err := e.b.GetTopic("t"); err != nil {
		t.Fatalf("topic with a busy subscription deleted: %v", err)
	}
	// Scheduled messages keep the topic alive.
	e.b.Schedule(ctx, "t", []*message.Message{msg("s")}, t0.Add(time.Hour))
	e.advance(20 * time.Minute)
	e.b.Tick()
	if _, err := e.b.GetTopic("t"); err != nil {
		t.Fatalf("topic with scheduled messages deleted: %v", err)
	}
	e.advance(time.Hour)
	e.b.Tick() // fans out
	e.advance(11 * time.Minute)
	e.b.Tick()
	if _, err := e.b.GetTopic("t"); KindOf(err) != KindNotFound {
		t.Fatalf("idle topic not deleted: %v", err)
	}
}

func TestFilterSeesSystemProperties(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	for name, expr := range map[string]string{
		"seq":   "sys.SequenceNumber = 2",
		"label": "sys.Label = 'red' AND sys.Size > 0",
		"enq":   "sys.EnqueuedTimeUtc = @t",
		"ttl":   "sys.TimeToLive = @d",
	} {
		rule := &RuleDescription{Name: "r", Filter: SQLRuleFilter(expr, map[string]any{"@t": t0.Add(time.Second), "@d": time.Hour})}
		e.subRule("t", name, rule, func(p *SubscriptionProperties) { p.DefaultMessageTimeToLive = time.Hour })
	}
	e.send("t", msg("first"))
	e.advance(time.Second)
	e.send("t", labelled("second", "red", nil))
	for _, name := range []string{"seq", "label", "enq"} {
		ds := e.recv(SubscriptionPath("t", name), PeekLock, 5)
		if len(ds) != 1 || body(ds[0]) != "second" {
			t.Errorf("%s got %v", name, bodies(ds))
		}
	}
	if ds := e.recv(SubscriptionPath("t", "ttl"), PeekLock, 5); len(ds) != 2 {
		t.Errorf("ttl got %v", bodies(ds))
	}
}

func TestRulesRouting(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	red := e.subRule("t", "red", &RuleDescription{Name: "color", Filter: SQLRuleFilter("color = 'red'", nil)})
	corr := e.subRule("t", "corr", &RuleDescription{Name: "c", Filter: CorrelationRuleFilter(CorrelationFilter{Label: "L", Properties: map[string]any{"n": int64(2)}})})
	none := e.subRule("t", "none", &RuleDescription{Name: "f", Filter: FalseRuleFilter()})
	// $Default plus a rule with an action: a matching message yields two
	// copies, the action's with RuleName.
	both := e.sub("t", "both")
	e.rule("t", "both", RuleDescription{Name: "tag", Filter: SQLRuleFilter("color = 'red'", nil),
		Action: &SQLAction{Expression: "SET tagged = @v; SET sys.Label = 'T'", Parameters: map[string]any{"@v": "yes"}}})
	e.rule("t", "both", RuleDescription{Name: "tag2", Filter: TrueRuleFilter(), Action: &SQLAction{Expression: "SET n = n + 1"}})

	e.send("t",
		labelled("r", "L", map[string]any{"color": "red", "n": int64(2)}),
		labelled("b", "L", map[string]any{"color": "blue", "n": int32(2)}),
		labelled("x", "M", map[string]any{"n": "2"}))
	if ds := e.recv(red, PeekLock, 10); fmt.Sprint(bodies(ds)) != "[r]" {
		t.Fatalf("red got %v", bodies(ds))
	}
	if ds := e.recv(corr, PeekLock, 10); fmt.Sprint(bodies(ds)) != "[r b]" {
		t.Fatalf("corr got %v", bodies(ds))
	}
	e.expectEmpty(none)
	ds := e.peek(both, 0, 20)
	var plain, tagged, tag2 int
	seen := map[int64]bool{}
	for _, d := range ds {
		if seen[d.SequenceNumber] {
			t.Fatalf("two copies share sequence number %d", d.SequenceNumber)
		}
		seen[d.SequenceNumber] = true
		switch prop(d, PropRuleName) {
		case nil:
			plain++
			if d.SequenceNumber > 3 {
				t.Fatalf("the unchanged copy has seq %d, not the topic's", d.SequenceNumber)
			}
		case "tag":
			tagged++
			if body(d) != "r" || prop(d, "tagged") != "yes" || d.Message.Subject != "T" {
				t.Fatalf("tag copy %+v", d.Message)
			}
		case "tag2":
			tag2++
		}
	}
	// "x": n + 1 on a string fails; DeadLetteringOnFilterEvaluationExceptions
	// is on by default, so "both" gets x in its DLQ only.
	if plain != 2 || tagged != 1 || tag2 != 2 {
		t.Fatalf("copies plain %d tagged %d tag2 %d", plain, tagged, tag2)
	}
	dl := e.peek(both+"/$DeadLetterQueue", 0, 5)
	if len(dl) != 1 || body(dl[0]) != "x" || prop(dl[0], PropDeadLetterReason) == nil || prop(dl[0], PropDeadLetterErrorDescription) == nil {
		t.Fatalf("DLQ of both: %v", dl)
	}
	// The next send's sequence numbers are above the extra copies'.
	e.send("t", labelled("later", "", nil))
	ps := e.peek(both, 0, 50)
	last := ps[len(ps)-1]
	for _, d := range ps[:len(ps)-1] {
		if d.SequenceNumber >= last.SequenceNumber {
			t.Fatalf("seq %d reused or out of order (last %d)", d.SequenceNumber, last.SequenceNumber)
		}
	}
}

func TestRuleManagement(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	e.subRule("t", "s", &RuleDescription{Name: "TestRule", Filter: SQLRuleFilter("a = 1", nil)})
	rules, err := e.b.ListRules("t", "s", 0, 0)
	if err != nil || len(rules) != 1 || rules[0].Name != "TestRule" || !rules[0].CreatedAt.Equal(t0) {
		t.Fatalf("a subscription with a default rule has %v, %v (no $Default)", rules, err)
	}
	// Positioned compile errors, limits, duplicates, unknown names.
	_, err = e.b.CreateRule("t", "s", RuleDescription{Name: "bad", Filter: SQLRuleFilter("a = = 1", nil)})
	wantKind(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "1:") {
		t.Fatalf("compile error without a position: %v", err)
	}
	_, err = e.b.CreateRule("t", "s", RuleDescription{Name: "long", Filter: SQLRuleFilter("a = '"+strings.Repeat("x", 1030)+"'", nil)})
	wantKind(t, err, ErrInvalidArgument)
	_, err = e.b.CreateRule("t", "s", RuleDescription{Name: "act", Filter: TrueRuleFilter(), Action: &SQLAction{Expression: "SET"}})
	wantKind(t, err, ErrInvalidArgument)
	_, err = e.b.CreateRule("t", "s", RuleDescription{Name: "sys", Filter: SQLRuleFilter("sys.Nope = 1", nil)})
	wantKind(t, err, ErrInvalidArgument)
	_, err = e.b.CreateRule("t", "s", RuleDescription{Name: "c", Filter: CorrelationRuleFilter(CorrelationFilter{})})
	wantKind(t, err, ErrInvalidArgument)
	_, err = e.b.CreateRule("t", "s", RuleDescription{Name: "testrule", Filter: TrueRuleFilter()})
	wantKind(t, err, ErrAlreadyExists)
	_, err = e.b.CreateRule("t", "s", RuleDescription{Name: "a/b", Filter: TrueRuleFilter()})
	wantKind(t, err, ErrInvalidArgument)
	_, err = e.b.CreateRule("t", "nope", RuleDescription{Name: "x", Filter: TrueRuleFilter()})
	wantKind(t, err, ErrNotFound)
	wantKind(t, e.b.DeleteRule("t", "s", "missing"), ErrNotFound)
	_, err = e.b.GetRule("t", "s", "missing")
	wantKind(t, err, ErrNotFound)

	for _, n := range []string{"c", "a", "B", "$Default"} {
		e.rule("t", "s", RuleDescription{Name: n, Filter: TrueRuleFilter()})
	}
	rules, _ = e.b.ListRules("t", "s", 1, 2)
	if len(rules) != 2 || rules[0].Name != "a" || rules[1].Name != "B" {
		t.Fatalf("ListRules(1,2) = %v", rules)
	}
	if rules, _ = e.b.ListRules("t", "s", 9, 2); len(rules) != 0 {
		t.Fatalf("ListRules past the end = %v", rules)
	}
	e.advance(time.Minute)
	up, err := e.b.UpdateRule("t", "s", RuleDescription{Name: "A", Filter: SQLRuleFilter("x > @p", map[string]any{"@p": int32(3)}),
		Action: &SQLAction{Expression: "SET y = 1"}})
	if err != nil || up.Name != "a" || !up.CreatedAt.Equal(t0) || up.Filter.Kind != FilterSQL || up.Action == nil {
		t.Fatalf("UpdateRule %+v %v", up, err)
	}
	got, err := e.b.GetRule("t", "s", "a")
	if err != nil || got.Filter.Expression != "x > @p" || got.Filter.Parameters["@p"] != int32(3) {
		t.Fatalf("GetRule %+v %v", got, err)
	}
	_, err = e.b.UpdateRule("t", "s", RuleDescription{Name: "zz", Filter: TrueRuleFilter()})
	wantKind(t, err, ErrNotFound)
	if err := e.b.DeleteRule("t", "s", "$DEFAULT"); err != nil {
		t.Fatal(err)
	}
	info := e.topicInfo("t")
	if info.SQLFilterCount != 4 { // TestRule, a, B, c
		t.Fatalf("SQLFilterCount %d", info.SQLFilterCount)
	}
	// Deleting every rule: the subscription receives nothing.
	for _, n := range []string{"TestRule", "a", "b", "c"} {
		if err := e.b.DeleteRule("t", "s", n); err != nil {
			t.Fatal(err)
		}
	}
	e.send("t", msg("x"))
	e.expectEmpty("t/Subscriptions/s")
}

func TestTopicLimits(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	e.topic("u")
	for i := range MaxSubscriptionsPerTopic {
		e.subRule("t", fmt.Sprint("s", i), &RuleDescription{Name: "c", Filter: CorrelationRuleFilter(CorrelationFilter{Label: "x"})})
	}
	_, err := e.b.CreateSubscription("t", "one-too-many", DefaultSubscriptionProperties(), nil)
	wantKind(t, err, ErrQuotaExceeded)
	if !strings.Contains(err.Error(), "2000") {
		t.Fatalf("limit error %q", err)
	}
	// 2,000 SQL filters per topic ($Default true filters count).
	for i := range 4 {
		e.sub("u", fmt.Sprint("s", i))
	}
	for i := 4; i < MaxSQLFiltersPerTopic; i++ {
		e.rule("u", "s0", RuleDescription{Name: fmt.Sprint("r", i), Filter: SQLRuleFilter("a = 1", nil)})
	}
	_, err = e.b.CreateRule("u", "s1", RuleDescription{Name: "over", Filter: SQLRuleFilter("a = 1", nil)})
	wantKind(t, err, ErrQuotaExceeded)
	// Correlation filters are counted apart.
	e.rule("u", "s1", RuleDescription{Name: "corr", Filter: CorrelationRuleFilter(CorrelationFilter{Label: "x"})})
	if info := e.topicInfo("u"); info.SQLFilterCount != 2000 || info.CorrelationFilterCount != 1 {
		t.Fatalf("counts %d %d", info.SQLFilterCount, info.CorrelationFilterCount)
	}
}

func TestSubscriptionStatus(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	set := func(name string, s EntityStatus) {
		t.Helper()
		p := DefaultSubscriptionProperties()
		p.Status = s
		if _, err := e.b.UpdateSubscription("t", name, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"active", "senddisabled", "disabled", "receivedisabled"} {
		e.sub("t", n)
	}
	set("senddisabled", StatusSendDisabled)
	set("disabled", StatusDisabled)
	set("receivedisabled", StatusReceiveDisabled)
	e.send("t", msg("m"))
	for n, want := range map[string]int64{"active": 1, "senddisabled": 0, "disabled": 0, "receivedisabled": 1} {
		if c := e.subCounts("t", n); c.Active != want {
			t.Errorf("%s got %d messages, want %d", n, c.Active, want)
		}
	}
	_, err := e.b.OpenReceiver("t/Subscriptions/receivedisabled", PeekLock)
	wantKind(t, err, ErrEntityDisabled)
	_, err = e.b.Peek(ctx, "t/Subscriptions/disabled", 0, 1)
	wantKind(t, err, ErrEntityDisabled)
	e.recv1("t/Subscriptions/active")
	// Messages routed before a status change stay; new ones follow it.
	set("receivedisabled", StatusActive)
	set("active", StatusSendDisabled)
	e.send("t", msg("n"))
	if ds := e.recv("t/Subscriptions/receivedisabled", ReceiveAndDelete, 5); len(ds) != 2 {
		t.Fatalf("re-enabled subscription got %d", len(ds))
	}
	if c := e.subCounts("t", "active"); c.Active != 1 {
		t.Fatalf("send-disabled subscription holds %+v", c)
	}
	// Cancelling a message that was already fanned out does nothing.
	ss, _ := e.b.Schedule(ctx, "t", []*message.Message{msg("s")}, t0.Add(time.Minute))
	e.advance(time.Minute)
	e.b.Tick()
	if err := e.b.CancelScheduled(ctx, "t", ss); err != nil {
		t.Fatal(err)
	}
	if c := e.subCounts("t", "receivedisabled"); c.Active != 1 {
		t.Fatalf("fanned-out message lost: %+v", c)
	}
	wantKind(t, e.b.CancelScheduled(ctx, "t/Subscriptions/active", ss), ErrNotAllowed)
}

// TestTopicSendsDoNotKeepPooledEncodings: topic sends encode into pooled
// buffers that the next send reuses. Concurrent sends — plain copies,
// a rule action's own copy, a dead-lettered copy, scheduled messages —
// must each deliver exactly what was sent (run with -race too).
func TestTopicSendsDoNotKeepPooledEncodings(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	plain := e.sub("t", "plain")
	acted := e.subRule("t", "acted", &RuleDescription{Name: "tag", Filter: SQLRuleFilter("n >= 0", nil),
		Action: &SQLAction{Expression: "SET tagged = n"}})
	dead := e.subRule("t", "dead", &RuleDescription{Name: "bad", Filter: SQLRuleFilter("n / 0 = 1", nil)})
	const senders, sends, per = 4, 25, 3
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range sends {
				var ms []*message.Message
				for j := range per {
					n := int64((s*sends+i)*per + j)
					ms = append(ms, labelled(fmt.Sprintf("m%d-%s", n, strings.Repeat("x", int(n%7)*100)), "", map[string]any{"n": n}))
				}
				var err error
				if i%5 == 0 {
					_, err = e.b.Schedule(ctx, "t", ms, t0.Add(time.Minute))
				} else {
					err = e.b.Send(ctx, "t", ms)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	e.advance(time.Minute)
	e.b.Tick()
	const total = senders * sends * per
	check := func(path string, ds []*Delivery, tagged bool) {
		t.Helper()
		if len(ds) != total {
			t.Fatalf("%s: %d of %d messages", path, len(ds), total)
		}
		seen := map[int64]bool{}
		for _, d := range ds {
			n, _ := prop(d, "n").(int64)
			want := fmt.Sprintf("m%d-%s", n, strings.Repeat("x", int(n%7)*100))
			if body(d) != want || seen[n] {
				t.Fatalf("%s: message n=%d has body %q (seen before: %v)", path, n, body(d), seen[n])
			}
			seen[n] = true
			if tagged && prop(d, "tagged") != n {
				t.Fatalf("%s: n=%d tagged %v", path, n, prop(d, "tagged"))
			}
		}
	}
	check(plain, e.recv(plain, ReceiveAndDelete, 2*total), false)
	check(acted, e.recv(acted, ReceiveAndDelete, 2*total), true)
	check(dead, e.recv(dead+"/$DeadLetterQueue", ReceiveAndDelete, 2*total), false)
}
