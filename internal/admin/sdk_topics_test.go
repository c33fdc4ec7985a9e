package admin

// Topics, subscriptions and rules driven by the official Go administration
// client (azservicebus/admin v1.11.0), over TLS on loopback.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

const maxDuration = "P10675199DT2H48M5.4775807S"

// defaultTopicProps is what the service reports for a topic created
// without properties (§1.9).
func defaultTopicProps() sbadmin.TopicProperties {
	return sbadmin.TopicProperties{
		MaxSizeInMegabytes:                  to.Ptr[int32](1024),
		RequiresDuplicateDetection:          to.Ptr(false),
		DefaultMessageTimeToLive:            to.Ptr(maxDuration),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT10M"),
		EnableBatchedOperations:             to.Ptr(true),
		Status:                              to.Ptr(sbadmin.EntityStatusActive),
		AutoDeleteOnIdle:                    to.Ptr(maxDuration),
		EnablePartitioning:                  to.Ptr(false),
		SupportOrdering:                     to.Ptr(true),
		MaxMessageSizeInKilobytes:           to.Ptr[int64](256),
	}
}

// defaultSubProps is what the service reports for a subscription created
// without properties (§1.9).
func defaultSubProps() sbadmin.SubscriptionProperties {
	return sbadmin.SubscriptionProperties{
		LockDuration:                                    to.Ptr("PT1M"),
		RequiresSession:                                 to.Ptr(false),
		DefaultMessageTimeToLive:                        to.Ptr(maxDuration),
		DeadLetteringOnMessageExpiration:                to.Ptr(false),
		EnableDeadLetteringOnFilterEvaluationExceptions: to.Ptr(true),
		MaxDeliveryCount:                                to.Ptr[int32](10),
		Status:                                          to.Ptr(sbadmin.EntityStatusActive),
		AutoDeleteOnIdle:                                to.Ptr(maxDuration),
		EnableBatchedOperations:                         to.Ptr(true),
	}
}

// topic creates a topic through the broker with default properties.
func (e *env) topic(name string) {
	e.t.Helper()
	if _, err := e.b.CreateTopic(name, broker.DefaultTopicProperties()); err != nil {
		e.t.Fatalf("CreateTopic(%q): %v", name, err)
	}
}

// sub creates a subscription through the broker with default properties
// and the given first rule (nil: $Default).
func (e *env) sub(topic, name string, rule *broker.RuleDescription) {
	e.t.Helper()
	if _, err := e.b.CreateSubscription(topic, name, broker.DefaultSubscriptionProperties(), rule); err != nil {
		e.t.Fatalf("CreateSubscription(%q, %q): %v", topic, name, err)
	}
}

// ruleNames lists a subscription's rules through the SDK, one rule per
// page to exercise the pager.
func ruleNames(t *testing.T, c *sbadmin.Client, topic, sub string) []string {
	t.Helper()
	pager := c.NewListRulesPager(topic, sub, &sbadmin.ListRulesOptions{MaxPageSize: 1})
	var names []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListRules(%s, %s): %v", topic, sub, err)
		}
		for _, r := range page.Rules {
			names = append(names, r.Name)
		}
	}
	return names
}

func TestSDKTopicLifecycle(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)

	resp, err := c.CreateTopic(ctx, "events", nil)
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if resp.TopicName != "events" {
		t.Errorf("TopicName = %q", resp.TopicName)
	}
	same(t, "created", resp.TopicProperties, defaultTopicProps())
	got, err := c.GetTopic(ctx, "events", nil)
	if err != nil || got == nil {
		t.Fatalf("GetTopic = %v, %v", got, err)
	}
	same(t, "GetTopic", got.TopicProperties, defaultTopicProps())
	info, err := e.b.GetTopic("events")
	if err != nil {
		t.Fatal(err)
	}
	same(t, "broker properties", info.Properties, broker.DefaultTopicProperties())

	// Every settable property, created and read back.
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	props := sbadmin.TopicProperties{
		MaxSizeInMegabytes:                  to.Ptr[int32](2048),
		RequiresDuplicateDetection:          to.Ptr(true),
		DefaultMessageTimeToLive:            to.Ptr("P14D"),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT5M"),
		EnableBatchedOperations:             to.Ptr(false),
		Status:                              to.Ptr(sbadmin.EntityStatusSendDisabled),
		AutoDeleteOnIdle:                    to.Ptr("PT1H"),
		EnablePartitioning:                  to.Ptr(true),
		SupportOrdering:                     to.Ptr(false),
		UserMetadata:                        to.Ptr(`kind = 'audit' & size < 5`),
		AuthorizationRules: []sbadmin.AuthorizationRule{{
			AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightSend},
			KeyName:      to.Ptr("publisher"),
			CreatedTime:  &created,
			ModifiedTime: &created,
			PrimaryKey:   to.Ptr("p"),
			SecondaryKey: to.Ptr("s"),
		}},
		MaxMessageSizeInKilobytes: to.Ptr[int64](1024),
	}
	resp, err = c.CreateTopic(ctx, "audit/eu", &sbadmin.CreateTopicOptions{Properties: &props})
	if err != nil {
		t.Fatalf("CreateTopic(all properties): %v", err)
	}
	// Partitioned: Service Bus reports the size of its 16 partitions.
	want := props
	want.MaxSizeInMegabytes = to.Ptr[int32](16 * 2048)
	same(t, "created with every property", resp.TopicProperties, want)
	got, err = c.GetTopic(ctx, "audit/eu", nil)
	if err != nil || got == nil {
		t.Fatalf("GetTopic = %v, %v", got, err)
	}
	same(t, "GetTopic with every property", got.TopicProperties, want)
	info, err = e.b.GetTopic("audit/eu")
	if err != nil {
		t.Fatal(err)
	}
	if p := info.Properties; p.DefaultMessageTimeToLive != 14*24*time.Hour || p.Status != broker.StatusSendDisabled ||
		!p.RequiresDuplicateDetection || p.MaxSizeInMegabytes != 2048 || len(p.AuthorizationRules) != 1 {
		t.Errorf("broker properties = %+v", p)
	}

	// Update: a full replace, times moving on.
	e.clk.Advance(time.Hour)
	upd := got.TopicProperties
	upd.UserMetadata = to.Ptr("updated")
	upd.Status = to.Ptr(sbadmin.EntityStatusActive)
	upd.DefaultMessageTimeToLive = to.Ptr("PT1H")
	uresp, err := c.UpdateTopic(ctx, "audit/eu", upd, nil)
	if err != nil {
		t.Fatalf("UpdateTopic: %v", err)
	}
	same(t, "updated", uresp.TopicProperties, upd)
	rt, err := c.GetTopicRuntimeProperties(ctx, "audit/eu", nil)
	if err != nil || rt == nil {
		t.Fatalf("GetTopicRuntimeProperties = %v, %v", rt, err)
	}
	if rt.TopicName != "audit/eu" || !rt.CreatedAt.Equal(t0) || !rt.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("runtime %s: created %v, updated %v", rt.TopicName, rt.CreatedAt, rt.UpdatedAt)
	}

	// Immutable properties are refused, naming them.
	bad := upd
	bad.RequiresDuplicateDetection = to.Ptr(false)
	_, err = c.UpdateTopic(ctx, "audit/eu", bad, nil)
	wantStatus(t, err, http.StatusBadRequest, "RequiresDuplicateDetection")
	bad = upd
	bad.EnablePartitioning = to.Ptr(false)
	_, err = c.UpdateTopic(ctx, "audit/eu", bad, nil)
	wantStatus(t, err, http.StatusBadRequest, "EnablePartitioning")

	// An empty update reverts everything mutable to the defaults.
	uresp, err = c.UpdateTopic(ctx, "events", sbadmin.TopicProperties{UserMetadata: to.Ptr("x")}, nil)
	if err != nil {
		t.Fatalf("UpdateTopic: %v", err)
	}
	if _, err := c.UpdateTopic(ctx, "events", sbadmin.TopicProperties{}, nil); err != nil {
		t.Fatalf("UpdateTopic(empty): %v", err)
	}
	got, err = c.GetTopic(ctx, "events", nil)
	if err != nil || got == nil {
		t.Fatalf("GetTopic = %v, %v", got, err)
	}
	same(t, "reverted", got.TopicProperties, defaultTopicProps())

	_, err = c.UpdateTopic(ctx, "missing", defaultTopicProps(), nil)
	wantStatus(t, err, http.StatusNotFound, "missing")
	_, err = c.CreateTopic(ctx, "EVENTS", nil)
	wantStatus(t, err, http.StatusConflict, "SubCode=40900", "already exists")

	// Delete: gone from the broker, GET is nil, nil (§1.5), a second
	// delete is 404.
	if _, err := c.DeleteTopic(ctx, "events", nil); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if _, err := e.b.GetTopic("events"); broker.KindOf(err) != broker.KindNotFound {
		t.Errorf("broker still has the topic: %v", err)
	}
	if got, err := c.GetTopic(ctx, "events", nil); got != nil || err != nil {
		t.Errorf("GetTopic after delete = %v, %v; want nil, nil", got, err)
	}
	if rt, err := c.GetTopicRuntimeProperties(ctx, "events", nil); rt != nil || err != nil {
		t.Errorf("GetTopicRuntimeProperties after delete = %v, %v; want nil, nil", rt, err)
	}
	_, err = c.DeleteTopic(ctx, "events", nil)
	wantStatus(t, err, http.StatusNotFound, "events")
}

// TestSDKTopicQueueNameClash: queues and topics share one name space.
func TestSDKTopicQueueNameClash(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.queue("shared")
	_, err := c.CreateTopic(ctx, "SHARED", nil)
	wantStatus(t, err, http.StatusConflict, "SubCode=40900", "already exists")
	e.topic("news")
	_, err = c.CreateQueue(ctx, "News", nil)
	wantStatus(t, err, http.StatusConflict, "already exists")

	// An update with the other kind's description is a conflict too.
	_, err = c.UpdateTopic(ctx, "shared", defaultTopicProps(), nil)
	wantStatus(t, err, http.StatusConflict, "is a queue")
	_, err = c.UpdateQueue(ctx, "news", defaultProps(), nil)
	wantStatus(t, err, http.StatusConflict, "is a topic")

	// Lists keep them apart; the namespace is unchanged.
	qs := c.NewListQueuesPager(nil)
	page, err := qs.NextPage(ctx)
	if err != nil || len(page.Queues) != 1 || page.Queues[0].QueueName != "shared" {
		t.Errorf("queues: %+v, %v", page.Queues, err)
	}
	ts, err := c.NewListTopicsPager(nil).NextPage(ctx)
	if err != nil || len(ts.Topics) != 1 || ts.Topics[0].TopicName != "news" {
		t.Errorf("topics: %+v, %v", ts.Topics, err)
	}
	ns, err := c.GetNamespaceProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "namespace", ns.NamespaceProperties, sbadmin.NamespaceProperties{CreatedTime: t0, ModifiedTime: t0, SKU: "Standard", Name: "testns"})

	// DELETE of a topic name deletes the topic, of a queue name the queue.
	if _, err := c.DeleteQueue(ctx, "news", nil); err != nil {
		t.Fatalf("DELETE /news: %v", err)
	}
	if _, err := e.b.GetTopic("news"); err == nil {
		t.Error("topic survived its DELETE")
	}
	if _, err := e.b.GetQueue("shared"); err != nil {
		t.Errorf("queue lost: %v", err)
	}
}

func TestSDKListTopics(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	names := []string{"delta", "alpha", "echo", "charlie", "bravo"}
	for _, n := range names {
		if _, err := c.CreateTopic(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.queue("a-queue") // not listed
	slices.Sort(names)

	pager := c.NewListTopicsPager(&sbadmin.ListTopicsOptions{MaxPageSize: 2})
	var sizes []int
	var listed []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		sizes = append(sizes, len(page.Topics))
		for _, tp := range page.Topics {
			listed = append(listed, tp.TopicName)
			same(t, "listed "+tp.TopicName, tp.TopicProperties, defaultTopicProps())
		}
	}
	if !slices.Equal(sizes, []int{2, 2, 1}) || !slices.Equal(listed, names) {
		t.Errorf("pages %v listing %v; want [2 2 1] listing %v", sizes, listed, names)
	}

	rpager := c.NewListTopicsRuntimePropertiesPager(&sbadmin.ListTopicsRuntimePropertiesOptions{MaxPageSize: 3})
	listed = nil
	for rpager.More() {
		page, err := rpager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		for _, tp := range page.TopicRuntimeProperties {
			listed = append(listed, tp.TopicName)
			if !tp.CreatedAt.Equal(t0) || tp.SubscriptionCount != 0 {
				t.Errorf("%s: %+v", tp.TopicName, tp.TopicRuntimeProperties)
			}
		}
	}
	if !slices.Equal(listed, names) {
		t.Errorf("runtime listing %v; want %v", listed, names)
	}
}

func TestSDKTopicInvalidProperties(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	for _, tc := range []struct {
		props sbadmin.TopicProperties
		texts []string
	}{
		{sbadmin.TopicProperties{MaxSizeInMegabytes: to.Ptr[int32](100000)}, []string{"MaxSizeInMegabytes", "81920"}},
		{sbadmin.TopicProperties{DefaultMessageTimeToLive: to.Ptr("PT0S")}, []string{"DefaultMessageTimeToLive", "minimum 1s"}},
		{sbadmin.TopicProperties{DuplicateDetectionHistoryTimeWindow: to.Ptr("PT1S")}, []string{"DuplicateDetectionHistoryTimeWindow", "20s"}},
		{sbadmin.TopicProperties{DuplicateDetectionHistoryTimeWindow: to.Ptr("P8D")}, []string{"DuplicateDetectionHistoryTimeWindow", "7 days"}},
		{sbadmin.TopicProperties{AutoDeleteOnIdle: to.Ptr("PT4M")}, []string{"AutoDeleteOnIdle", "minimum 5m0s"}},
		{sbadmin.TopicProperties{Status: to.Ptr(sbadmin.EntityStatus("Renaming"))}, []string{"Status", "Active, Disabled, SendDisabled, ReceiveDisabled"}},
		{sbadmin.TopicProperties{UserMetadata: to.Ptr(strings.Repeat("x", 1025))}, []string{"UserMetadata", "1024"}},
		{sbadmin.TopicProperties{MaxMessageSizeInKilobytes: to.Ptr[int64](0)}, []string{"MaxMessageSizeInKilobytes", "102400"}},
		{sbadmin.TopicProperties{DefaultMessageTimeToLive: to.Ptr("a week")}, []string{"DefaultMessageTimeToLive", "ISO 8601"}},
	} {
		_, err := c.CreateTopic(ctx, "bad", &sbadmin.CreateTopicOptions{Properties: &tc.props})
		wantStatus(t, err, http.StatusBadRequest, tc.texts...)
	}
	_, err := c.CreateTopic(ctx, "bad*name", nil)
	wantStatus(t, err, http.StatusBadRequest, "bad*name")
	_, err = c.CreateTopic(ctx, "a/Subscriptions/b", nil)
	wantStatus(t, err, http.StatusBadRequest)
	if ts := e.b.ListTopics(); len(ts) != 0 {
		t.Errorf("topics were created: %+v", ts)
	}
}

func TestSDKSubscriptionLifecycle(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.topic("orders")
	e.queue("fwd")
	e.queue("dead")

	resp, err := c.CreateSubscription(ctx, "orders", "all", nil)
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	if resp.SubscriptionName != "all" || resp.TopicName != "orders" {
		t.Errorf("names %q %q", resp.TopicName, resp.SubscriptionName)
	}
	same(t, "created", resp.SubscriptionProperties, defaultSubProps())
	got, err := c.GetSubscription(ctx, "orders", "all", nil)
	if err != nil || got == nil {
		t.Fatalf("GetSubscription = %v, %v", got, err)
	}
	same(t, "GetSubscription", got.SubscriptionProperties, defaultSubProps())
	if got.SubscriptionName != "all" || got.TopicName != "orders" {
		t.Errorf("names %q %q", got.TopicName, got.SubscriptionName)
	}
	// Without a DefaultRule: the rule $Default, a TrueFilter.
	r, err := c.GetRule(ctx, "orders", "all", "$Default", nil)
	if err != nil || r == nil {
		t.Fatalf("GetRule($Default) = %v, %v", r, err)
	}
	same(t, "$Default", r.RuleProperties, sbadmin.RuleProperties{Name: "$Default", Filter: &sbadmin.TrueFilter{}})

	// Every settable property (Go sends no Status for subscriptions).
	props := sbadmin.SubscriptionProperties{
		LockDuration:                                    to.Ptr("PT30S"),
		RequiresSession:                                 to.Ptr(false),
		DefaultMessageTimeToLive:                        to.Ptr("PT10M"),
		DeadLetteringOnMessageExpiration:                to.Ptr(true),
		EnableDeadLetteringOnFilterEvaluationExceptions: to.Ptr(false),
		MaxDeliveryCount:                                to.Ptr[int32](3),
		Status:                                          to.Ptr(sbadmin.EntityStatusActive),
		AutoDeleteOnIdle:                                to.Ptr("PT2H"),
		ForwardTo:                                       to.Ptr("sb://" + e.host + "/fwd"),
		ForwardDeadLetteredMessagesTo:                   to.Ptr("sb://" + e.host + "/dead"),
		EnableBatchedOperations:                         to.Ptr(false),
		UserMetadata:                                    to.Ptr(`<meta> & "more"`),
	}
	resp, err = c.CreateSubscription(ctx, "orders", "custom", &sbadmin.CreateSubscriptionOptions{Properties: &props})
	if err != nil {
		t.Fatalf("CreateSubscription(all properties): %v", err)
	}
	same(t, "created with every property", resp.SubscriptionProperties, props)
	got, err = c.GetSubscription(ctx, "orders", "custom", nil)
	if err != nil || got == nil {
		t.Fatalf("GetSubscription = %v, %v", got, err)
	}
	same(t, "GetSubscription with every property", got.SubscriptionProperties, props)
	sinfo, err := e.b.GetSubscription("orders", "custom")
	if err != nil {
		t.Fatal(err)
	}
	if p := sinfo.Properties; p.LockDuration != 30*time.Second || p.MaxDeliveryCount != 3 || p.ForwardTo != "fwd" ||
		p.ForwardDeadLetteredMessagesTo != "dead" || p.DeadLetteringOnFilterEvaluationExceptions || !p.DeadLetteringOnMessageExpiration {
		t.Errorf("broker properties = %+v", p)
	}

	// Update: a full replace; the rules stay.
	e.clk.Advance(time.Minute)
	upd := got.SubscriptionProperties
	upd.MaxDeliveryCount = to.Ptr[int32](7)
	upd.ForwardTo = nil
	upd.UserMetadata = to.Ptr("updated")
	uresp, err := c.UpdateSubscription(ctx, "orders", "custom", upd, nil)
	if err != nil {
		t.Fatalf("UpdateSubscription: %v", err)
	}
	same(t, "updated", uresp.SubscriptionProperties, upd)
	rt, err := c.GetSubscriptionRuntimeProperties(ctx, "orders", "custom", nil)
	if err != nil || rt == nil {
		t.Fatalf("GetSubscriptionRuntimeProperties = %v, %v", rt, err)
	}
	if !rt.CreatedAt.Equal(t0) || !rt.UpdatedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("CreatedAt %v, UpdatedAt %v", rt.CreatedAt, rt.UpdatedAt)
	}
	if _, err := c.UpdateSubscription(ctx, "orders", "custom", sbadmin.SubscriptionProperties{}, nil); err != nil {
		t.Fatalf("UpdateSubscription(empty): %v", err)
	}
	got, err = c.GetSubscription(ctx, "orders", "custom", nil)
	if err != nil || got == nil {
		t.Fatalf("GetSubscription = %v, %v", got, err)
	}
	same(t, "reverted", got.SubscriptionProperties, defaultSubProps())
	if names := ruleNames(t, c, "orders", "custom"); !slices.Equal(names, []string{"$Default"}) {
		t.Errorf("rules after updates: %v", names)
	}

	// Error paths.
	_, err = c.CreateSubscription(ctx, "orders", "ALL", nil)
	wantStatus(t, err, http.StatusConflict, "SubCode=40900", "already exists")
	_, err = c.CreateSubscription(ctx, "nosuchtopic", "s", nil)
	wantStatus(t, err, http.StatusNotFound, "nosuchtopic")
	immutable := defaultSubProps()
	immutable.RequiresSession = to.Ptr(true)
	_, err = c.UpdateSubscription(ctx, "orders", "all", immutable, nil)
	wantStatus(t, err, http.StatusBadRequest, "RequiresSession")
	_, err = c.UpdateSubscription(ctx, "orders", "missing", defaultSubProps(), nil)
	wantStatus(t, err, http.StatusNotFound, "missing")
	if got, err := c.GetSubscription(ctx, "orders", "missing", nil); got != nil || err != nil {
		t.Errorf("GetSubscription(missing) = %v, %v; want nil, nil", got, err)
	}
	if rt, err := c.GetSubscriptionRuntimeProperties(ctx, "orders", "missing", nil); rt != nil || err != nil {
		t.Errorf("GetSubscriptionRuntimeProperties(missing) = %v, %v; want nil, nil", rt, err)
	}
	for _, tc := range []struct {
		props sbadmin.SubscriptionProperties
		texts []string
	}{
		{sbadmin.SubscriptionProperties{LockDuration: to.Ptr("PT6M")}, []string{"LockDuration", "5m0s"}},
		{sbadmin.SubscriptionProperties{MaxDeliveryCount: to.Ptr[int32](0)}, []string{"MaxDeliveryCount", "minimum 1"}},
		{sbadmin.SubscriptionProperties{AutoDeleteOnIdle: to.Ptr("PT1M")}, []string{"AutoDeleteOnIdle", "minimum 5m0s"}},
		{sbadmin.SubscriptionProperties{DefaultMessageTimeToLive: to.Ptr("PT0.5S")}, []string{"DefaultMessageTimeToLive", "minimum 1s"}},
		{sbadmin.SubscriptionProperties{UserMetadata: to.Ptr(strings.Repeat("m", 1025))}, []string{"UserMetadata", "1024"}},
		{sbadmin.SubscriptionProperties{ForwardTo: to.Ptr("nowhere")}, []string{"ForwardTo", "does not exist"}},
		{sbadmin.SubscriptionProperties{ForwardDeadLetteredMessagesTo: to.Ptr("orders/Subscriptions/bad")}, []string{"ForwardDeadLetteredMessagesTo"}},
	} {
		_, err := c.CreateSubscription(ctx, "orders", "bad", &sbadmin.CreateSubscriptionOptions{Properties: &tc.props})
		wantStatus(t, err, http.StatusBadRequest, tc.texts...)
	}
	// RequiresSession is allowed at creation (and immutable, above).
	sess, err := c.CreateSubscription(ctx, "orders", "sessions", &sbadmin.CreateSubscriptionOptions{
		Properties: &sbadmin.SubscriptionProperties{RequiresSession: to.Ptr(true)}})
	if err != nil || sess.RequiresSession == nil || !*sess.RequiresSession {
		t.Fatalf("CreateSubscription(RequiresSession) = %+v, %v", sess, err)
	}
	if got, err := c.GetSubscription(ctx, "orders", "sessions", nil); err != nil || got == nil || !*got.RequiresSession {
		t.Fatalf("GetSubscription(sessions) = %+v, %v", got, err)
	}
	_, err = c.CreateSubscription(ctx, "orders", "bad/name", nil)
	wantStatus(t, err, http.StatusBadRequest)
	_, err = c.CreateSubscription(ctx, "orders", strings.Repeat("s", 51), nil)
	wantStatus(t, err, http.StatusBadRequest, "50")

	// Delete, then GET is nil, nil and a second delete 404.
	if _, err := c.DeleteSubscription(ctx, "orders", "custom", nil); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	if _, err := e.b.GetSubscription("orders", "custom"); broker.KindOf(err) != broker.KindNotFound {
		t.Errorf("broker still has it: %v", err)
	}
	if got, err := c.GetSubscription(ctx, "orders", "custom", nil); got != nil || err != nil {
		t.Errorf("GetSubscription after delete = %v, %v", got, err)
	}
	_, err = c.DeleteSubscription(ctx, "orders", "custom", nil)
	wantStatus(t, err, http.StatusNotFound, "custom")

	// Deleting the topic deletes its subscriptions.
	if _, err := c.DeleteTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetSubscription(ctx, "orders", "all", nil); got != nil || err != nil {
		t.Errorf("GetSubscription after topic delete = %v, %v", got, err)
	}
}

// TestSDKSubscriptionDefaultRule: a DefaultRule is the subscription's
// only rule, under its own name, with no $Default (§2.9 quirk 5).
func TestSDKSubscriptionDefaultRule(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.topic("t")

	for _, tc := range []struct {
		sub  string
		rule sbadmin.RuleProperties
		want sbadmin.RuleProperties
	}{{
		sub:  "sql",
		rule: sbadmin.RuleProperties{Name: "Red", Filter: &sbadmin.SQLFilter{Expression: "color = @c", Parameters: map[string]any{"@c": "red"}}, Action: &sbadmin.SQLAction{Expression: "SET seen = TRUE"}},
		want: sbadmin.RuleProperties{Name: "Red", Filter: &sbadmin.SQLFilter{Expression: "color = @c", Parameters: map[string]any{"@c": "red"}}, Action: &sbadmin.SQLAction{Expression: "SET seen = TRUE"}},
	}, {
		sub:  "corr",
		rule: sbadmin.RuleProperties{Name: "ByLabel", Filter: &sbadmin.CorrelationFilter{Subject: to.Ptr("invoice")}},
		want: sbadmin.RuleProperties{Name: "ByLabel", Filter: &sbadmin.CorrelationFilter{Subject: to.Ptr("invoice")}},
	}, {
		// Go names an unnamed rule $Default.
		sub:  "unnamed",
		rule: sbadmin.RuleProperties{Filter: &sbadmin.FalseFilter{}},
		want: sbadmin.RuleProperties{Name: "$Default", Filter: &sbadmin.FalseFilter{}},
	}} {
		props := sbadmin.SubscriptionProperties{DefaultRule: &tc.rule}
		resp, err := c.CreateSubscription(ctx, "t", tc.sub, &sbadmin.CreateSubscriptionOptions{Properties: &props})
		if err != nil {
			t.Fatalf("%s: CreateSubscription: %v", tc.sub, err)
		}
		// DefaultRuleDescription is never written back.
		same(t, tc.sub+" created", resp.SubscriptionProperties, defaultSubProps())
		if names := ruleNames(t, c, "t", tc.sub); !slices.Equal(names, []string{tc.want.Name}) {
			t.Errorf("%s: rules %v; want [%s]", tc.sub, names, tc.want.Name)
		}
		r, err := c.GetRule(ctx, "t", tc.sub, tc.want.Name, nil)
		if err != nil || r == nil {
			t.Fatalf("%s: GetRule = %v, %v", tc.sub, r, err)
		}
		same(t, tc.sub+" rule", r.RuleProperties, tc.want)
	}

	// A bad default rule fails the whole create.
	props := sbadmin.SubscriptionProperties{DefaultRule: &sbadmin.RuleProperties{Name: "r", Filter: &sbadmin.SQLFilter{Expression: "color = "}}}
	_, err := c.CreateSubscription(ctx, "t", "broken", &sbadmin.CreateSubscriptionOptions{Properties: &props})
	wantStatus(t, err, http.StatusBadRequest, "SQL filter", "1:")
	if _, err := e.b.GetSubscription("t", "broken"); err == nil {
		t.Error("a subscription with a bad default rule was created")
	}

	// The filters route messages.
	e.sub("t", "everything", nil)
	send := func(ms ...*message.Message) {
		t.Helper()
		if err := e.b.Send(ctx, "t", ms); err != nil {
			t.Fatal(err)
		}
	}
	send(&message.Message{ApplicationProperties: map[string]any{"color": "red"}},
		&message.Message{ApplicationProperties: map[string]any{"color": "blue"}},
		&message.Message{Subject: "invoice"})
	for sub, want := range map[string]int64{"sql": 1, "corr": 1, "unnamed": 0, "everything": 3} {
		rt, err := c.GetSubscriptionRuntimeProperties(ctx, "t", sub, nil)
		if err != nil || rt == nil {
			t.Fatalf("%s: %v, %v", sub, rt, err)
		}
		if rt.TotalMessageCount != want || int64(rt.ActiveMessageCount) != want {
			t.Errorf("%s: %d messages (%d active); want %d", sub, rt.TotalMessageCount, rt.ActiveMessageCount, want)
		}
	}
}

// TestSDKSubscriptionRuntimeProperties: the counts match the broker after
// sends to the topic, a dead-letter, a deferral and a scheduled message.
func TestSDKSubscriptionRuntimeProperties(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.topic("rt")
	e.sub("rt", "a", nil)
	e.sub("rt", "b", &broker.RuleDescription{Name: "none", Filter: broker.FalseRuleFilter()})
	e.clk.Advance(time.Minute)

	var msgs []*message.Message
	for i := range 4 {
		msgs = append(msgs, &message.Message{Body: []byte(fmt.Sprintf("body %d", i))})
	}
	if err := e.b.Send(ctx, "rt", msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Schedule(ctx, "rt", []*message.Message{{Body: []byte("later")}}, e.clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	const path = "rt/Subscriptions/a"
	r, err := e.b.OpenReceiver(path, broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ds, err := r.TryReceive(2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("TryReceive = %d, %v", len(ds), err)
	}
	if err := e.b.DeadLetter(ctx, path, ds[0].LockToken, "test", "dead-lettered by the test", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Defer(ctx, path, ds[1].LockToken, nil); err != nil {
		t.Fatal(err)
	}
	info, err := e.b.GetSubscription("rt", "a")
	if err != nil {
		t.Fatal(err)
	}

	got, err := c.GetSubscriptionRuntimeProperties(ctx, "rt", "a", nil)
	if err != nil || got == nil {
		t.Fatalf("GetSubscriptionRuntimeProperties = %v, %v", got, err)
	}
	want := sbadmin.SubscriptionRuntimeProperties{
		TotalMessageCount:      4,
		ActiveMessageCount:     3, // 2 available + 1 deferred
		DeadLetterMessageCount: 1,
		CreatedAt:              t0,
		UpdatedAt:              t0,
		AccessedAt:             info.AccessedAt,
	}
	if got.SubscriptionName != "a" || got.TopicName != "rt" {
		t.Errorf("names %q %q", got.TopicName, got.SubscriptionName)
	}
	same(t, "runtime properties of a", got.SubscriptionRuntimeProperties, want)
	if !info.AccessedAt.After(t0) || info.Counts.Total != 4 || info.Counts.DeadLetter != 1 {
		t.Errorf("broker reports %+v", info)
	}
	got, err = c.GetSubscriptionRuntimeProperties(ctx, "rt", "b", nil)
	if err != nil || got == nil {
		t.Fatalf("GetSubscriptionRuntimeProperties(b) = %v, %v", got, err)
	}
	if got.TotalMessageCount != 0 || got.ActiveMessageCount != 0 {
		t.Errorf("b (FalseFilter) holds %+v", got.SubscriptionRuntimeProperties)
	}

	// The list carries the same counts.
	pager := c.NewListSubscriptionsRuntimePropertiesPager("rt", &sbadmin.ListSubscriptionsRuntimePropertiesOptions{MaxPageSize: 1})
	var items []sbadmin.SubscriptionRuntimePropertiesItem
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		items = append(items, page.SubscriptionRuntimeProperties...)
	}
	if len(items) != 2 || items[0].SubscriptionName != "a" || items[1].SubscriptionName != "b" || items[0].TopicName != "rt" {
		t.Fatalf("listed %+v", items)
	}
	same(t, "listed runtime properties of a", items[0].SubscriptionRuntimeProperties, want)

	// The topic: subscriptions, filters by kind, the scheduled message and
	// the size the broker counts.
	tinfo, err := e.b.GetTopic("rt")
	if err != nil {
		t.Fatal(err)
	}
	trt, err := c.GetTopicRuntimeProperties(ctx, "rt", nil)
	if err != nil || trt == nil {
		t.Fatalf("GetTopicRuntimeProperties = %v, %v", trt, err)
	}
	twant := sbadmin.TopicRuntimeProperties{
		SizeInBytes:           tinfo.Counts.SizeInBytes,
		CreatedAt:             t0,
		UpdatedAt:             t0,
		AccessedAt:            tinfo.AccessedAt,
		SubscriptionCount:     2,
		SQLFilterCount:        2, // $Default's TrueFilter and b's FalseFilter
		ScheduledMessageCount: 1,
	}
	same(t, "topic runtime properties", trt.TopicRuntimeProperties, twant)
	if twant.SizeInBytes <= 0 {
		t.Errorf("topic size %d", twant.SizeInBytes)
	}
	if _, err := c.CreateRule(ctx, "rt", "b", &sbadmin.CreateRuleOptions{Name: to.Ptr("c"), Filter: &sbadmin.CorrelationFilter{CorrelationID: to.Ptr("x")}}); err != nil {
		t.Fatal(err)
	}
	trt, err = c.GetTopicRuntimeProperties(ctx, "rt", nil)
	if err != nil || trt == nil {
		t.Fatalf("GetTopicRuntimeProperties = %v, %v", trt, err)
	}
	if trt.SQLFilterCount != 2 || trt.CorrelationFilterCount != 1 {
		t.Errorf("filter counts %d SQL, %d correlation; want 2, 1", trt.SQLFilterCount, trt.CorrelationFilterCount)
	}
}

func TestSDKListSubscriptions(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.topic("t")
	e.topic("other")
	e.sub("other", "x", nil)
	names := []string{"s4", "s1", "S3", "s0", "s2"}
	for _, n := range names {
		if _, err := c.CreateSubscription(ctx, "t", n, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"s0", "s1", "s2", "S3", "s4"}
	pager := c.NewListSubscriptionsPager("t", &sbadmin.ListSubscriptionsOptions{MaxPageSize: 2})
	var sizes []int
	var listed []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		sizes = append(sizes, len(page.Subscriptions))
		for _, s := range page.Subscriptions {
			listed = append(listed, s.SubscriptionName)
			if s.TopicName != "t" {
				t.Errorf("%s: topic %q", s.SubscriptionName, s.TopicName)
			}
			same(t, "listed "+s.SubscriptionName, s.SubscriptionProperties, defaultSubProps())
		}
	}
	if !slices.Equal(sizes, []int{2, 2, 1}) || !slices.Equal(listed, want) {
		t.Errorf("pages %v listing %v; want [2 2 1] listing %v", sizes, listed, want)
	}
	pager = c.NewListSubscriptionsPager("t", nil)
	listed = nil
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		for _, s := range page.Subscriptions {
			listed = append(listed, s.SubscriptionName)
		}
	}
	if !slices.Equal(listed, want) {
		t.Errorf("listed %v; want %v", listed, want)
	}
	_, err := c.NewListSubscriptionsPager("missing", nil).NextPage(ctx)
	wantStatus(t, err, http.StatusNotFound, "missing")
}

func TestSDKRules(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.topic("t")
	e.sub("t", "s", nil)
	when := time.Date(2026, 3, 4, 5, 6, 7, 800000000, time.UTC)

	for _, tc := range []struct {
		name string
		opts sbadmin.CreateRuleOptions
		want sbadmin.RuleProperties
	}{{
		name: "sql",
		opts: sbadmin.CreateRuleOptions{Filter: &sbadmin.SQLFilter{
			// The original text comes back, quotes, spacing and all.
			Expression: "color = 'red'  AND size > @min AND price < @max AND ok = @ok AND at < @when AND region = @region",
			Parameters: map[string]any{"@min": 5, "@max": 9.5, "@ok": true, "@when": when, "@region": "eu"},
		}},
		want: sbadmin.RuleProperties{Filter: &sbadmin.SQLFilter{
			Expression: "color = 'red'  AND size > @min AND price < @max AND ok = @ok AND at < @when AND region = @region",
			// Go reads int back as int64.
			Parameters: map[string]any{"@min": int64(5), "@max": 9.5, "@ok": true, "@when": when, "@region": "eu"},
		}},
	}, {
		name: "correlation",
		opts: sbadmin.CreateRuleOptions{Filter: &sbadmin.CorrelationFilter{
			CorrelationID: to.Ptr("corr"), MessageID: to.Ptr("mid"), To: to.Ptr("to"), ReplyTo: to.Ptr("reply"),
			Subject: to.Ptr("subject"), SessionID: to.Ptr("session"), ReplyToSessionID: to.Ptr("rsession"), ContentType: to.Ptr("application/json"),
			ApplicationProperties: map[string]any{"color": "red", "size": 3, "weight": 1.25, "fragile": false, "at": when},
		}},
		want: sbadmin.RuleProperties{Filter: &sbadmin.CorrelationFilter{
			CorrelationID: to.Ptr("corr"), MessageID: to.Ptr("mid"), To: to.Ptr("to"), ReplyTo: to.Ptr("reply"),
			Subject: to.Ptr("subject"), SessionID: to.Ptr("session"), ReplyToSessionID: to.Ptr("rsession"), ContentType: to.Ptr("application/json"),
			ApplicationProperties: map[string]any{"color": "red", "size": int64(3), "weight": 1.25, "fragile": false, "at": when},
		}},
	}, {
		name: "true",
		opts: sbadmin.CreateRuleOptions{Filter: &sbadmin.TrueFilter{}},
		want: sbadmin.RuleProperties{Filter: &sbadmin.TrueFilter{}},
	}, {
		name: "false",
		opts: sbadmin.CreateRuleOptions{Filter: &sbadmin.FalseFilter{}},
		want: sbadmin.RuleProperties{Filter: &sbadmin.FalseFilter{}},
	}, {
		name: "action",
		opts: sbadmin.CreateRuleOptions{
			Filter: &sbadmin.SQLFilter{Expression: "EXISTS(color)"},
			Action: &sbadmin.SQLAction{Expression: "SET tier = @tier; REMOVE color", Parameters: map[string]any{"@tier": "gold"}},
		},
		want: sbadmin.RuleProperties{
			Filter: &sbadmin.SQLFilter{Expression: "EXISTS(color)"},
			Action: &sbadmin.SQLAction{Expression: "SET tier = @tier; REMOVE color", Parameters: map[string]any{"@tier": "gold"}},
		},
	}} {
		tc.opts.Name = to.Ptr(tc.name)
		tc.want.Name = tc.name
		resp, err := c.CreateRule(ctx, "t", "s", &tc.opts)
		if err != nil {
			t.Fatalf("%s: CreateRule: %v", tc.name, err)
		}
		same(t, tc.name+" created", resp.RuleProperties, tc.want)
		got, err := c.GetRule(ctx, "t", "s", tc.name, nil)
		if err != nil || got == nil {
			t.Fatalf("%s: GetRule = %v, %v", tc.name, got, err)
		}
		same(t, tc.name+" GetRule", got.RuleProperties, tc.want)
		r, err := e.b.GetRule("t", "s", tc.name)
		if err != nil || !r.CreatedAt.Equal(t0) {
			t.Errorf("%s: broker rule %+v, %v", tc.name, r, err)
		}
	}
	r, _ := e.b.GetRule("t", "s", "sql")
	if v, ok := r.Filter.Parameters["@min"].(int32); !ok || v != 5 {
		t.Errorf("@min stored as %T %v; want int32 5", r.Filter.Parameters["@min"], r.Filter.Parameters["@min"])
	}
	r, _ = e.b.GetRule("t", "s", "correlation")
	if c := r.Filter.Correlation; c == nil || c.Label != "subject" || c.ReplyToSessionID != "rsession" || c.Properties["weight"] != 1.25 {
		t.Errorf("broker correlation filter %+v", c)
	}

	want := []string{"$Default", "action", "correlation", "false", "sql", "true"}
	if names := ruleNames(t, c, "t", "s"); !slices.Equal(names, want) {
		t.Errorf("rules %v; want %v", names, want)
	}
	pager := c.NewListRulesPager("t", "s", nil)
	page, err := pager.NextPage(ctx)
	if err != nil || len(page.Rules) != len(want) {
		t.Fatalf("one page: %d rules, %v", len(page.Rules), err)
	}
	if _, ok := page.Rules[2].Filter.(*sbadmin.CorrelationFilter); !ok || page.Rules[2].Name != "correlation" {
		t.Errorf("listed %+v", page.Rules[2])
	}

	// Update replaces filter and action.
	upd := sbadmin.RuleProperties{Name: "sql", Filter: &sbadmin.SQLFilter{Expression: "size >= 10"}, Action: &sbadmin.SQLAction{Expression: "SET big = TRUE"}}
	uresp, err := c.UpdateRule(ctx, "t", "s", upd)
	if err != nil {
		t.Fatalf("UpdateRule: %v", err)
	}
	same(t, "updated", uresp.RuleProperties, upd)
	got, err := c.GetRule(ctx, "t", "s", "SQL", nil) // names are case-insensitive
	if err != nil || got == nil {
		t.Fatalf("GetRule = %v, %v", got, err)
	}
	same(t, "GetRule after update", got.RuleProperties, upd)

	// Error paths.
	_, err = c.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("TRUE"), Filter: &sbadmin.TrueFilter{}})
	wantStatus(t, err, http.StatusConflict, "SubCode=40900")
	_, err = c.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{}) // Go names it $Default
	wantStatus(t, err, http.StatusConflict)
	_, err = c.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad"), Filter: &sbadmin.SQLFilter{Expression: "color = = 'red'"}})
	wantStatus(t, err, http.StatusBadRequest, "invalid SQL filter of rule 'bad'", "1:9")
	_, err = c.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad"), Filter: &sbadmin.SQLFilter{Expression: "a = @missing"}})
	wantStatus(t, err, http.StatusBadRequest, "@missing")
	_, err = c.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad"), Filter: &sbadmin.TrueFilter{}, Action: &sbadmin.SQLAction{Expression: "SET"}})
	wantStatus(t, err, http.StatusBadRequest, "invalid SQL action of rule 'bad'", "1:")
	_, err = c.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad"), Filter: &sbadmin.CorrelationFilter{}})
	wantStatus(t, err, http.StatusBadRequest, "correlation filter")
	_, err = c.CreateRule(ctx, "t", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("bad*name"), Filter: &sbadmin.TrueFilter{}})
	wantStatus(t, err, http.StatusBadRequest, "rule name")
	_, err = c.CreateRule(ctx, "t", "missing", &sbadmin.CreateRuleOptions{Name: to.Ptr("r"), Filter: &sbadmin.TrueFilter{}})
	wantStatus(t, err, http.StatusNotFound)
	_, err = c.CreateRule(ctx, "missing", "s", &sbadmin.CreateRuleOptions{Name: to.Ptr("r"), Filter: &sbadmin.TrueFilter{}})
	wantStatus(t, err, http.StatusNotFound)
	_, err = c.UpdateRule(ctx, "t", "s", sbadmin.RuleProperties{Name: "nope", Filter: &sbadmin.TrueFilter{}})
	wantStatus(t, err, http.StatusNotFound, "nope")
	_, err = c.UpdateRule(ctx, "t", "s", sbadmin.RuleProperties{Name: "sql", Filter: &sbadmin.SQLFilter{Expression: "(a"}})
	wantStatus(t, err, http.StatusBadRequest, "1:")
	if got, err := c.GetRule(ctx, "t", "s", "nope", nil); got != nil || err != nil {
		t.Errorf("GetRule(missing) = %v, %v; want nil, nil", got, err)
	}
	_, err = c.NewListRulesPager("t", "missing", nil).NextPage(ctx)
	wantStatus(t, err, http.StatusNotFound)
	if names := ruleNames(t, c, "t", "s"); !slices.Equal(names, want) {
		t.Errorf("failed requests changed the rules: %v", names)
	}

	// Delete.
	for _, n := range []string{"$Default", "true"} {
		if _, err := c.DeleteRule(ctx, "t", "s", n, nil); err != nil {
			t.Fatalf("DeleteRule(%s): %v", n, err)
		}
	}
	_, err = c.DeleteRule(ctx, "t", "s", "true", nil)
	wantStatus(t, err, http.StatusNotFound, "true")
	if names := ruleNames(t, c, "t", "s"); !slices.Equal(names, []string{"action", "correlation", "false", "sql"}) {
		t.Errorf("rules after delete: %v", names)
	}

	// What is left routes messages: "sql" (size >= 10, with an action)
	// and "correlation" (all eight fields and five properties).
	send := func(m *message.Message) {
		t.Helper()
		if err := e.b.Send(ctx, "t", []*message.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	send(&message.Message{ApplicationProperties: map[string]any{"size": int64(12)}})
	send(&message.Message{ApplicationProperties: map[string]any{"size": int64(2)}})
	rt, err := c.GetSubscriptionRuntimeProperties(ctx, "t", "s", nil)
	if err != nil || rt == nil || rt.TotalMessageCount != 1 {
		t.Fatalf("after two sends: %+v, %v; want 1 message", rt, err)
	}
}

// TestSDKSubscriptionForwarding: the Go client signs the supplementary
// tokens forwarding needs (§1.4) and gets the targets back as sb:// URIs;
// a subscription cannot forward to itself. (Refused tokens:
// TestHTTPSubscriptionForwardingAuthorization.)
func TestSDKSubscriptionForwarding(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.topic("t")
	e.queue("q")
	props := sbadmin.SubscriptionProperties{ForwardTo: to.Ptr("q"), ForwardDeadLetteredMessagesTo: to.Ptr("sb://" + e.host + "/q")}
	resp, err := c.CreateSubscription(ctx, "t", "fwd", &sbadmin.CreateSubscriptionOptions{Properties: &props})
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	if resp.ForwardTo == nil || *resp.ForwardTo != "sb://"+e.host+"/q" || *resp.ForwardDeadLetteredMessagesTo != "sb://"+e.host+"/q" {
		t.Errorf("forwarding written back as %v, %v", resp.ForwardTo, resp.ForwardDeadLetteredMessagesTo)
	}
	// A subscription forwards to a queue or topic, never to a
	// subscription (itself included).
	props = sbadmin.SubscriptionProperties{ForwardTo: to.Ptr("t/Subscriptions/self")}
	_, err = c.CreateSubscription(ctx, "t", "self", &sbadmin.CreateSubscriptionOptions{Properties: &props})
	wantStatus(t, err, http.StatusBadRequest, "ForwardTo")
}
