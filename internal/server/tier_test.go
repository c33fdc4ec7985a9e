package server

// Tier profiles (--tier) seen through the official Go clients: the admin
// client's namespace properties and entity creation, the messaging
// client's sends and batches.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// plainHTTP sends the admin client's https:// requests to addr over
// plain HTTP.
type plainHTTP struct{ addr string }

func (p plainHTTP) Do(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = "http", p.addr, p.addr
	return http.DefaultClient.Do(r)
}

type tierEnv struct {
	adm    *admin.Client
	client *azservicebus.Client
}

func startTier(t *testing.T, tier string) (*Server, tierEnv) {
	t.Helper()
	var o Options
	o.Memory = true
	o.Tier = tier
	s := start(t, o)
	t.Cleanup(func() { stop(t, s) })
	cs, adm := sasAdmin(t, s)
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return s, tierEnv{adm, client}
}

func httpStatusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func TestTierWithSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []struct {
		tier, sku string
		msgKB     int64 // a new queue's MaxMessageSizeInKilobytes
		topics    bool
	}{
		{"", "Standard", 256, true},
		{"basic", "Basic", 256, false},
		{"standard", "Standard", 256, true},
		{"premium", "Premium", 1024, true},
	} {
		t.Run("tier="+c.tier, func(t *testing.T) {
			_, e := startTier(t, c.tier)
			ns, err := e.adm.GetNamespaceProperties(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ns.SKU != c.sku {
				t.Errorf("MessagingSKU %q, want %q", ns.SKU, c.sku)
			}
			q, err := e.adm.CreateQueue(ctx, "q", nil)
			if err != nil {
				t.Fatal(err)
			}
			if *q.MaxMessageSizeInKilobytes != c.msgKB {
				t.Errorf("MaxMessageSizeInKilobytes %d, want %d", *q.MaxMessageSizeInKilobytes, c.msgKB)
			}
			_, err = e.adm.CreateTopic(ctx, "t", nil)
			if c.topics != (err == nil) {
				t.Errorf("CreateTopic: %v", err)
			}
			if !c.topics && (httpStatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "topics are not available")) {
				t.Errorf("CreateTopic in Basic: %v", err)
			}
			_, err = e.adm.CreateQueue(ctx, "s", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{RequiresSession: to.Ptr(true)}})
			if (c.tier == "basic") != (err != nil) {
				t.Errorf("session queue: %v", err)
			}
			_, err = e.adm.CreateQueue(ctx, "large", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{MaxMessageSizeInKilobytes: to.Ptr[int64](102400)}})
			if (c.tier == "basic" || c.tier == "standard") != (err != nil) {
				t.Errorf("100 MB queue: %v", err)
			}

			// A 512 KB message: too large for 256 KB entities, fine in Premium.
			sender, err := e.client.NewSender("q", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sender.Close(ctx)
			err = sender.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 512<<10)}, nil)
			if (c.msgKB >= 1024) != (err == nil) {
				t.Errorf("512 KB message: %v", err)
			}
			// Premium caps a batch at 1 MB even on a 100 MB queue: the SDK
			// sizes its batches by what the broker advertises.
			if c.tier == "premium" {
				big, err := e.client.NewSender("large", nil)
				if err != nil {
					t.Fatal(err)
				}
				defer big.Close(ctx)
				batch, err := big.NewMessageBatch(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					err := batch.AddMessage(&azservicebus.Message{Body: make([]byte, 400<<10)}, nil)
					if (i < 2) != (err == nil) {
						t.Errorf("adding 400 KB message %d: %v", i, err)
					}
				}
				if err := big.SendMessageBatch(ctx, batch, nil); err != nil {
					t.Errorf("an 800 KB batch: %v", err)
				}
				if err := big.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 5<<20)}, nil); err != nil {
					t.Errorf("a 5 MB message to a 100 MB queue: %v", err)
				}
			}
		})
	}
}
