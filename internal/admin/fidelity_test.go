package admin

// What the Go SDK's own live tests (azservicebus v1.11.0, admin package)
// check about the management API, here with the same client against the
// Handler.

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/auth"
)

// TestSDKFidelityPartitionedSize: a partitioned entity reports the size
// of its 16 partitions, and sending that back in an update keeps it.
func TestSDKFidelityPartitionedSize(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	q, err := c.CreateQueue(ctx, "pq", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		EnablePartitioning: to.Ptr(true), MaxSizeInMegabytes: to.Ptr[int32](4096)}})
	if err != nil {
		t.Fatal(err)
	}
	if *q.MaxSizeInMegabytes != 16*4096 {
		t.Fatalf("created: %d MB", *q.MaxSizeInMegabytes)
	}
	u, err := c.UpdateQueue(ctx, "pq", q.QueueProperties, nil)
	if err != nil || *u.MaxSizeInMegabytes != 16*4096 {
		t.Fatalf("round trip: %v %v", u, err)
	}
	if info, _ := e.b.GetQueue("pq"); info.Properties.MaxSizeInMegabytes != 4096 {
		t.Fatalf("stored %d MB per partition", info.Properties.MaxSizeInMegabytes)
	}
	tp, err := c.CreateTopic(ctx, "pt", &sbadmin.CreateTopicOptions{Properties: &sbadmin.TopicProperties{
		EnablePartitioning: to.Ptr(true), MaxSizeInMegabytes: to.Ptr[int32](2048)}})
	if err != nil || *tp.MaxSizeInMegabytes != 16*2048 {
		t.Fatalf("topic: %v %v", tp, err)
	}
	// Azure's texts for immutable properties.
	tp.EnablePartitioning = to.Ptr(false)
	_, err = c.UpdateTopic(ctx, "pt", tp.TopicProperties, nil)
	wantStatus(t, err, http.StatusBadRequest, "Partitioning cannot be changed for Topic. ")
	q.RequiresSession = to.Ptr(true)
	_, err = c.UpdateQueue(ctx, "pq", q.QueueProperties, nil)
	wantStatus(t, err, http.StatusBadRequest, "The value for the RequiresSession property of an existing Queue cannot be changed")
	if _, err := c.CreateSubscription(ctx, "pt", "s", nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateSubscription(ctx, "pt", "s", sbadmin.SubscriptionProperties{RequiresSession: to.Ptr(true)}, nil)
	wantStatus(t, err, http.StatusBadRequest, "The value for the RequiresSession property of an existing Subscription cannot be changed")
}

// TestSDKFidelityEchoes: authorization rules sent without times come back
// without them; a ForwardTo given as an https URI comes back as given;
// AccessedAt stays zero on a queue and topic created, read and updated,
// and is set on a new subscription.
func TestSDKFidelityEchoes(t *testing.T) {
	e := newEnv(t)
	c := e.client(auth.DefaultKey)
	if _, err := c.CreateQueue(ctx, "target", nil); err != nil {
		t.Fatal(err)
	}
	rules := []sbadmin.AuthorizationRule{{AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightSend},
		KeyName: to.Ptr("keyName1"), PrimaryKey: to.Ptr("p"), SecondaryKey: to.Ptr("s")}}
	fwd := fmt.Sprintf("https://%s/target", e.host)
	q, err := c.CreateQueue(ctx, "q", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		AuthorizationRules: rules, ForwardTo: &fwd}})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Minute)
	if _, err := c.UpdateQueue(ctx, "q", q.QueueProperties, nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetQueue(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "rules", got.AuthorizationRules, rules)
	if got.ForwardTo == nil || *got.ForwardTo != fwd {
		t.Errorf("ForwardTo %v, want %q", got.ForwardTo, fwd)
	}
	rt, err := c.GetQueueRuntimeProperties(ctx, "q", nil)
	if err != nil || !rt.AccessedAt.IsZero() {
		t.Errorf("queue AccessedAt %v (%v), want zero", rt.AccessedAt, err)
	}
	if _, err := c.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if trt, err := c.GetTopicRuntimeProperties(ctx, "t", nil); err != nil || !trt.AccessedAt.IsZero() {
		t.Errorf("topic AccessedAt %v (%v), want zero", trt.AccessedAt, err)
	}
	if _, err := c.CreateSubscription(ctx, "t", "s", nil); err != nil {
		t.Fatal(err)
	}
	if srt, err := c.GetSubscriptionRuntimeProperties(ctx, "t", "s", nil); err != nil || srt.AccessedAt.IsZero() {
		t.Errorf("subscription AccessedAt %v (%v), want set", srt.AccessedAt, err)
	}
}

// TestSDKFidelityWithoutManage: a key without Manage finds a missing
// queue or topic missing (404: GetQueue returns nil, nil) and is refused
// the rest in Service Bus's words.
func TestSDKFidelityWithoutManage(t *testing.T) {
	e := newEnvWith(t, auth.Config{Policies: []auth.Policy{
		auth.DefaultPolicy(),
		{Name: "NoManage", PrimaryKey: "no-manage-key", Rights: auth.Listen | auth.Send},
	}})
	e.queue("q")
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=NoManage;SharedAccessKey=no-manage-key;UseDevelopmentEmulator=true;", e.host)
	c, err := sbadmin.NewClientFromConnectionString(cs, &sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: e.srv.Client()}})
	if err != nil {
		t.Fatal(err)
	}
	if q, err := c.GetQueue(ctx, "not-found-queue", nil); err != nil || q != nil {
		t.Fatalf("missing queue: %v, %v", q, err)
	}
	if tp, err := c.GetTopicRuntimeProperties(ctx, "not-found-topic", nil); err != nil || tp != nil {
		t.Fatalf("missing topic: %v, %v", tp, err)
	}
	_, err = c.GetQueue(ctx, "q", nil)
	wantStatus(t, err, http.StatusUnauthorized, ">Manage,EntityRead claims required for this operation")
	_, err = c.NewListQueuesPager(nil).NextPage(ctx)
	wantStatus(t, err, http.StatusUnauthorized, "Manage,EntityRead claims required for this operation")
	_, err = c.CreateQueue(ctx, "never", nil)
	wantStatus(t, err, http.StatusUnauthorized, "Authorization failed for specified action: Manage,EntityWrite")
	_, err = c.DeleteQueue(ctx, "q", nil)
	wantStatus(t, err, http.StatusUnauthorized, "Authorization failed for specified action: Manage,EntityDelete.")
	_, err = c.GetSubscription(ctx, "t", "missing", nil)
	wantStatus(t, err, http.StatusUnauthorized, "Unauthorized access for 'GetSubscription'")
}
