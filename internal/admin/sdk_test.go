package admin

// Tests that drive the Handler with the official Go administration client,
// github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin
// v1.11.0, over TLS on loopback.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

var ctx = context.Background()

// client is a Go admin client for e's server, signing with key. It trusts
// the test server's certificate and does not retry.
func (e *env) client(key string) *sbadmin.Client {
	e.t.Helper()
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true;", e.host, auth.DefaultKeyName, key)
	c, err := sbadmin.NewClientFromConnectionString(cs, &sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: e.srv.Client(),
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}})
	if err != nil {
		e.t.Fatalf("NewClientFromConnectionString: %v", err)
	}
	return c
}

// statusOf is the HTTP status of an SDK error, 0 if it carries none.
func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// wantStatus fails unless err is a response error with status want whose
// text contains every one of texts.
func wantStatus(t *testing.T, err error, want int, texts ...string) {
	t.Helper()
	if got := statusOf(err); got != want {
		t.Fatalf("error = %v; want HTTP %d", err, want)
	}
	for _, s := range texts {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not mention %q:\n%v", s, err)
		}
	}
}

// same fails unless got and want have the same JSON form (pointers
// dereferenced, which makes differences readable).
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.MarshalIndent(got, "", "  ")
	w, _ := json.MarshalIndent(want, "", "  ")
	if string(g) != string(w) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, g, w)
	}
}

// defaultProps is what the service reports for a queue created without
// properties (§1.9).
func defaultProps() sbadmin.QueueProperties {
	return sbadmin.QueueProperties{
		LockDuration:                        to.Ptr("PT1M"),
		MaxSizeInMegabytes:                  to.Ptr[int32](1024),
		RequiresDuplicateDetection:          to.Ptr(false),
		RequiresSession:                     to.Ptr(false),
		DefaultMessageTimeToLive:            to.Ptr("P10675199DT2H48M5.4775807S"),
		DeadLetteringOnMessageExpiration:    to.Ptr(false),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT10M"),
		MaxDeliveryCount:                    to.Ptr[int32](10),
		EnableBatchedOperations:             to.Ptr(true),
		Status:                              to.Ptr(sbadmin.EntityStatusActive),
		AutoDeleteOnIdle:                    to.Ptr("P10675199DT2H48M5.4775807S"),
		EnablePartitioning:                  to.Ptr(false),
		MaxMessageSizeInKilobytes:           to.Ptr[int64](256),
	}
}

func TestSDKCreateQueueDefaults(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)

	resp, err := c.CreateQueue(ctx, "orders", nil)
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	if resp.QueueName != "orders" {
		t.Errorf("QueueName = %q", resp.QueueName)
	}
	same(t, "created", resp.QueueProperties, defaultProps())

	got, err := c.GetQueue(ctx, "orders", nil)
	if err != nil || got == nil {
		t.Fatalf("GetQueue = %v, %v", got, err)
	}
	if got.QueueName != "orders" {
		t.Errorf("QueueName = %q", got.QueueName)
	}
	same(t, "GetQueue", got.QueueProperties, defaultProps())

	// The broker has it, with the defaults.
	info, err := e.b.GetQueue("orders")
	if err != nil {
		t.Fatal(err)
	}
	same(t, "broker properties", info.Properties, broker.DefaultQueueProperties())
}

func TestSDKCreateQueueAllProperties(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.queue("target")
	e.queue("dlq-target")

	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	props := sbadmin.QueueProperties{
		LockDuration:                        to.Ptr("PT30S"),
		MaxSizeInMegabytes:                  to.Ptr[int32](2048),
		RequiresDuplicateDetection:          to.Ptr(true),
		RequiresSession:                     to.Ptr(true),
		DefaultMessageTimeToLive:            to.Ptr("P14D"),
		DeadLetteringOnMessageExpiration:    to.Ptr(true),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT5M"),
		MaxDeliveryCount:                    to.Ptr[int32](5),
		EnableBatchedOperations:             to.Ptr(false),
		Status:                              to.Ptr(sbadmin.EntityStatusSendDisabled),
		AutoDeleteOnIdle:                    to.Ptr("PT1H"),
		EnablePartitioning:                  to.Ptr(true),
		// (No ForwardTo: a session-enabled queue cannot auto-forward.)
		ForwardDeadLetteredMessagesTo: to.Ptr("sb://" + e.host + "/dlq-target"),
		UserMetadata:                  to.Ptr(`price < 5 & "cheap" 'ok'`),
		AuthorizationRules: []sbadmin.AuthorizationRule{{
			AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightListen, sbadmin.AccessRightSend},
			KeyName:      to.Ptr("app"),
			CreatedTime:  &created,
			ModifiedTime: &created,
			PrimaryKey:   to.Ptr("primary-key"),
			SecondaryKey: to.Ptr("secondary-key"),
		}},
		MaxMessageSizeInKilobytes: to.Ptr[int64](1024),
	}
	resp, err := c.CreateQueue(ctx, "everything", &sbadmin.CreateQueueOptions{Properties: &props})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	// Partitioned: Service Bus reports the size of its 16 partitions.
	want := props
	want.MaxSizeInMegabytes = to.Ptr[int32](16 * 2048)
	same(t, "created", resp.QueueProperties, want)

	got, err := c.GetQueue(ctx, "everything", nil)
	if err != nil || got == nil {
		t.Fatalf("GetQueue = %v, %v", got, err)
	}
	same(t, "GetQueue", got.QueueProperties, want)

	info, err := e.b.GetQueue("everything")
	if err != nil {
		t.Fatal(err)
	}
	p := info.Properties
	if p.LockDuration != 30*time.Second || p.MaxDeliveryCount != 5 || p.ForwardTo != "" ||
		p.ForwardDeadLetteredMessagesTo != "dlq-target" || p.Status != broker.StatusSendDisabled ||
		!p.RequiresSession || p.DefaultMessageTimeToLive != 14*24*time.Hour {
		t.Errorf("broker properties = %+v", p)
	}
	// ForwardTo round-trips on a queue without sessions; with sessions it
	// is refused.
	fprops := sbadmin.QueueProperties{ForwardTo: to.Ptr("sb://" + e.host + "/target")}
	fresp, err := c.CreateQueue(ctx, "forwarder", &sbadmin.CreateQueueOptions{Properties: &fprops})
	if err != nil || fresp.ForwardTo == nil || *fresp.ForwardTo != "sb://"+e.host+"/target" {
		t.Fatalf("CreateQueue(ForwardTo) = %+v, %v", fresp, err)
	}
	if info, err := e.b.GetQueue("forwarder"); err != nil || info.Properties.ForwardTo != "target" {
		t.Fatalf("forwarder %+v %v", info.Properties, err)
	}
	fprops.RequiresSession = to.Ptr(true)
	_, err = c.CreateQueue(ctx, "session-forwarder", &sbadmin.CreateQueueOptions{Properties: &fprops})
	wantStatus(t, err, http.StatusBadRequest, "ForwardTo", "session")
	// A loop is refused, and the error names it.
	_, err = c.UpdateQueue(ctx, "target", sbadmin.QueueProperties{ForwardTo: to.Ptr("forwarder")}, nil)
	wantStatus(t, err, http.StatusBadRequest, "ForwardTo", "loop", "target → forwarder → target")
}

// TestSDKAuthorizationRuleDefaults: a rule sent without keys gets them
// from the server; one sent without times comes back without them.
func TestSDKAuthorizationRuleDefaults(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	props := sbadmin.QueueProperties{AuthorizationRules: []sbadmin.AuthorizationRule{{
		AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightManage, sbadmin.AccessRightSend, sbadmin.AccessRightListen},
		KeyName:      to.Ptr("admin"),
	}}}
	resp, err := c.CreateQueue(ctx, "ruled", &sbadmin.CreateQueueOptions{Properties: &props})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	if n := len(resp.AuthorizationRules); n != 1 {
		t.Fatalf("%d rules", n)
	}
	r := resp.AuthorizationRules[0]
	if r.PrimaryKey == nil || len(*r.PrimaryKey) != 44 || r.SecondaryKey == nil || *r.SecondaryKey == *r.PrimaryKey {
		t.Errorf("keys = %v, %v; want two distinct generated keys", r.PrimaryKey, r.SecondaryKey)
	}
	if r.CreatedTime != nil || r.ModifiedTime != nil {
		t.Errorf("times = %v, %v; want none (none were sent)", r.CreatedTime, r.ModifiedTime)
	}
	if !slices.Equal(r.AccessRights, props.AuthorizationRules[0].AccessRights) {
		t.Errorf("rights = %v", r.AccessRights)
	}
}

func TestSDKRuntimeProperties(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	e.queue("rt")

	e.clk.Advance(time.Minute)
	msgs := func(n int) []*message.Message {
		var ms []*message.Message
		for i := range n {
			ms = append(ms, &message.Message{Body: []byte(fmt.Sprintf("body %d", i))})
		}
		return ms
	}
	if err := e.b.Send(ctx, "rt", msgs(4)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Schedule(ctx, "rt", msgs(1), e.clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	r, err := e.b.OpenReceiver("rt", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ds, err := r.TryReceive(2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("TryReceive = %d, %v", len(ds), err)
	}
	if err := e.b.DeadLetter(ctx, "rt", ds[0].LockToken, "test", "dead-lettered by the test", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Defer(ctx, "rt", ds[1].LockToken, nil); err != nil {
		t.Fatal(err)
	}
	info, err := e.b.GetQueue("rt")
	if err != nil {
		t.Fatal(err)
	}

	got, err := c.GetQueueRuntimeProperties(ctx, "rt", nil)
	if err != nil || got == nil {
		t.Fatalf("GetQueueRuntimeProperties = %v, %v", got, err)
	}
	want := sbadmin.QueueRuntimeProperties{
		SizeInBytes:            info.Counts.SizeInBytes,
		CreatedAt:              t0,
		UpdatedAt:              t0,
		AccessedAt:             info.AccessedAt,
		TotalMessageCount:      5,
		ActiveMessageCount:     3, // 2 available + 1 deferred
		DeadLetterMessageCount: 1,
		ScheduledMessageCount:  1,
	}
	if got.QueueName != "rt" {
		t.Errorf("QueueName = %q", got.QueueName)
	}
	same(t, "runtime properties", got.QueueRuntimeProperties, want)
	if want.SizeInBytes <= 0 || !want.AccessedAt.After(t0) {
		t.Errorf("broker reports size %d, accessed %v: want a size and an access after creation", want.SizeInBytes, want.AccessedAt)
	}

	// The list carries the same runtime properties.
	pager := c.NewListQueuesRuntimePropertiesPager(nil)
	var items []sbadmin.QueueRuntimePropertiesItem
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		items = append(items, page.QueueRuntimeProperties...)
	}
	if len(items) != 1 || items[0].QueueName != "rt" {
		t.Fatalf("listed %+v", items)
	}
	same(t, "listed runtime properties", items[0].QueueRuntimeProperties, want)
}

func TestSDKUpdateQueue(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	if _, err := c.CreateQueue(ctx, "upd", nil); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Hour)

	got, err := c.GetQueue(ctx, "upd", nil)
	if err != nil || got == nil {
		t.Fatalf("GetQueue = %v, %v", got, err)
	}
	props := got.QueueProperties
	props.MaxDeliveryCount = to.Ptr[int32](3)
	props.LockDuration = to.Ptr("PT2M")
	props.UserMetadata = to.Ptr("updated")
	props.Status = to.Ptr(sbadmin.EntityStatusReceiveDisabled)
	resp, err := c.UpdateQueue(ctx, "upd", props, nil)
	if err != nil {
		t.Fatalf("UpdateQueue: %v", err)
	}
	same(t, "updated", resp.QueueProperties, props)
	got, err = c.GetQueue(ctx, "upd", nil)
	if err != nil || got == nil {
		t.Fatalf("GetQueue = %v, %v", got, err)
	}
	same(t, "GetQueue after update", got.QueueProperties, props)
	rt, err := c.GetQueueRuntimeProperties(ctx, "upd", nil)
	if err != nil || rt == nil {
		t.Fatalf("GetQueueRuntimeProperties = %v, %v", rt, err)
	}
	if !rt.CreatedAt.Equal(t0) || !rt.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("CreatedAt %v, UpdatedAt %v; want %v, %v", rt.CreatedAt, rt.UpdatedAt, t0, t0.Add(time.Hour))
	}

	// An update is a full replace: what is left out reverts to the default.
	resp, err = c.UpdateQueue(ctx, "upd", sbadmin.QueueProperties{}, nil)
	if err != nil {
		t.Fatalf("UpdateQueue(empty): %v", err)
	}
	same(t, "reverted", resp.QueueProperties, defaultProps())

	// Immutable properties are refused, naming the property.
	props = defaultProps()
	props.RequiresSession = to.Ptr(true)
	_, err = c.UpdateQueue(ctx, "upd", props, nil)
	wantStatus(t, err, http.StatusBadRequest, "RequiresSession")

	// Updating a missing queue is 404.
	_, err = c.UpdateQueue(ctx, "missing", defaultProps(), nil)
	wantStatus(t, err, http.StatusNotFound, "missing")
}

func TestSDKListQueues(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	names := []string{"delta", "alpha", "echo", "charlie", "bravo"}
	for _, n := range names {
		if _, err := c.CreateQueue(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)

	pager := c.NewListQueuesPager(&sbadmin.ListQueuesOptions{MaxPageSize: 2})
	var sizes []int
	var listed []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		sizes = append(sizes, len(page.Queues))
		for _, q := range page.Queues {
			listed = append(listed, q.QueueName)
			same(t, "listed "+q.QueueName, q.QueueProperties, defaultProps())
		}
	}
	if !slices.Equal(sizes, []int{2, 2, 1}) || !slices.Equal(listed, names) {
		t.Errorf("pages %v listing %v; want [2 2 1] listing %v", sizes, listed, names)
	}

	// Without a page size: one page of everything, then an empty one
	// that tells the pager to stop.
	pager = c.NewListQueuesPager(nil)
	listed = nil
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		for _, q := range page.Queues {
			listed = append(listed, q.QueueName)
		}
	}
	if !slices.Equal(listed, names) {
		t.Errorf("listed %v; want %v", listed, names)
	}

	rpager := c.NewListQueuesRuntimePropertiesPager(&sbadmin.ListQueuesRuntimePropertiesOptions{MaxPageSize: 2})
	listed = nil
	for rpager.More() {
		page, err := rpager.NextPage(ctx)
		if err != nil {
			t.Fatalf("NextPage: %v", err)
		}
		for _, q := range page.QueueRuntimeProperties {
			listed = append(listed, q.QueueName)
			if !q.CreatedAt.Equal(t0) || q.TotalMessageCount != 0 {
				t.Errorf("%s: %+v", q.QueueName, q.QueueRuntimeProperties)
			}
		}
	}
	if !slices.Equal(listed, names) {
		t.Errorf("runtime listing %v; want %v", listed, names)
	}
}

func TestSDKDeleteQueue(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	if _, err := c.CreateQueue(ctx, "doomed", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQueue(ctx, "doomed", nil); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if _, err := e.b.GetQueue("doomed"); broker.KindOf(err) != broker.KindNotFound {
		t.Errorf("broker still has the queue: %v", err)
	}
	got, err := c.GetQueue(ctx, "doomed", nil)
	if got != nil || err != nil {
		t.Errorf("GetQueue after delete = %v, %v; want nil, nil", got, err)
	}
	_, err = c.DeleteQueue(ctx, "doomed", nil)
	wantStatus(t, err, http.StatusNotFound, "doomed")
}

// TestSDKMissingQueue: v1.11.0 turns our 404 into nil, nil.
func TestSDKMissingQueue(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	got, err := c.GetQueue(ctx, "nope", nil)
	if got != nil || err != nil {
		t.Errorf("GetQueue = %v, %v; want nil, nil", got, err)
	}
	rt, err := c.GetQueueRuntimeProperties(ctx, "nope", nil)
	if rt != nil || err != nil {
		t.Errorf("GetQueueRuntimeProperties = %v, %v; want nil, nil", rt, err)
	}
}

func TestSDKDuplicateCreate(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	if _, err := c.CreateQueue(ctx, "twice", nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateQueue(ctx, "TWICE", nil) // names are case-insensitive
	wantStatus(t, err, http.StatusConflict, "SubCode=40900", "already exists")
}

func TestSDKInvalidProperties(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	for _, tc := range []struct {
		props sbadmin.QueueProperties
		texts []string
	}{
		{sbadmin.QueueProperties{LockDuration: to.Ptr("PT10M")}, []string{"LockDuration", "5s", "5m0s"}},
		{sbadmin.QueueProperties{LockDuration: to.Ptr("ten minutes")}, []string{"LockDuration", "ISO 8601"}},
		{sbadmin.QueueProperties{MaxDeliveryCount: to.Ptr[int32](0)}, []string{"MaxDeliveryCount", "minimum 1"}},
		{sbadmin.QueueProperties{MaxSizeInMegabytes: to.Ptr[int32](100000)}, []string{"MaxSizeInMegabytes", "81920"}},
		{sbadmin.QueueProperties{AutoDeleteOnIdle: to.Ptr("PT1M")}, []string{"AutoDeleteOnIdle", "minimum 5m0s"}},
		{sbadmin.QueueProperties{Status: to.Ptr(sbadmin.EntityStatus("Creating"))}, []string{"Status", "Active, Disabled, SendDisabled, ReceiveDisabled"}},
		{sbadmin.QueueProperties{UserMetadata: to.Ptr(strings.Repeat("x", 1025))}, []string{"UserMetadata", "1024"}},
		{sbadmin.QueueProperties{ForwardTo: to.Ptr("nowhere")}, []string{"ForwardTo", "does not exist"}},
		{sbadmin.QueueProperties{ForwardTo: to.Ptr("bad")}, []string{"ForwardTo", "itself"}},
	} {
		_, err := c.CreateQueue(ctx, "bad", &sbadmin.CreateQueueOptions{Properties: &tc.props})
		wantStatus(t, err, http.StatusBadRequest, tc.texts...)
	}
	_, err := c.CreateQueue(ctx, "bad*name", nil)
	wantStatus(t, err, http.StatusBadRequest, "bad*name")
	if qs := e.b.ListQueues(); len(qs) != 0 {
		t.Errorf("queues were created: %+v", qs)
	}
}

func TestSDKWrongKey(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	c := e.client("not-the-key")
	_, err := c.GetQueue(ctx, "q", nil)
	wantStatus(t, err, http.StatusUnauthorized, "SubCode=40100", "signature")
	_, err = c.CreateQueue(ctx, "q2", nil)
	wantStatus(t, err, http.StatusUnauthorized)
	if _, err := e.b.GetQueue("q2"); err == nil {
		t.Error("an unauthorized PUT created a queue")
	}
}

// TestSDKListenKeyNotEnough: a valid token without Manage rights is 401.
func TestSDKListenKeyNotEnough(t *testing.T) {
	e := newEnvWith(t, auth.Config{Policies: []auth.Policy{
		auth.DefaultPolicy(),
		{Name: "listener", PrimaryKey: "listen-key", Rights: auth.Listen | auth.Send},
	}})
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=listener;SharedAccessKey=listen-key;UseDevelopmentEmulator=true;", e.host)
	c, err := sbadmin.NewClientFromConnectionString(cs, &sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: e.srv.Client()}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateQueue(ctx, "q", nil)
	wantStatus(t, err, http.StatusUnauthorized, "Manage")
}

func TestSDKNamespaceProperties(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	got, err := c.GetNamespaceProperties(ctx, nil)
	if err != nil {
		t.Fatalf("GetNamespaceProperties: %v", err)
	}
	want := sbadmin.NamespaceProperties{CreatedTime: t0, ModifiedTime: t0, SKU: "Standard", Name: "testns"}
	same(t, "namespace", got.NamespaceProperties, want)
}
