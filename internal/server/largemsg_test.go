package server

// Large messages (1, 10 and 100 MB) through the official Go SDK: stored
// in blob files beside the log, streamed to receivers, kept across a
// restart, deleted with their message or entity.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/config"
)

// largeEnv is a broker on a data directory with its SDK clients.
type largeEnv struct {
	s      *Server
	dir    string
	adm    *admin.Client
	client *azservicebus.Client
}

func startLarge(t *testing.T, dir string) *largeEnv {
	t.Helper()
	s := start(t, Options{Server: config.Server{DataDir: dir, MinFreeBytes: -1}})
	cs := "Endpoint=sb://" + s.AMQPAddr().String() + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	adm, err := admin.NewClientFromConnectionString(cs, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: plainHTTP{s.HTTPAddr().String()}, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return &largeEnv{s: s, dir: dir, adm: adm, client: client}
}

func (e *largeEnv) stop(t *testing.T) {
	e.client.Close(context.Background())
	stop(t, e.s)
}

// blobCount counts the blob files in the data directory.
func (e *largeEnv) blobCount(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(e.dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// waitBlobs waits (bounded) for the blob count to become want: a blob
// goes once the removal of its message is durable.
func (e *largeEnv) waitBlobs(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.blobCount(t) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d blob files, want %d", e.blobCount(t), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func largeBody(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*seed + i>>11)
	}
	return b
}

func createLargeQueue(t *testing.T, ctx context.Context, adm *admin.Client, name string, props *admin.QueueProperties) {
	t.Helper()
	if props == nil {
		props = &admin.QueueProperties{}
	}
	props.MaxMessageSizeInKilobytes = to.Ptr[int64](102400)
	if _, err := adm.CreateQueue(ctx, name, &admin.CreateQueueOptions{Properties: props}); err != nil {
		t.Fatal(err)
	}
}

func receiveLarge(t *testing.T, ctx context.Context, r *azservicebus.Receiver) *azservicebus.ReceivedMessage {
	t.Helper()
	ms, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("received %d messages", len(ms))
	}
	return ms[0]
}

// TestLargeMessagesWithSDK sends 1 and 10 MB messages, peeks them,
// restarts the broker, receives them (streamed from their blob files)
// byte for byte and completes them, which deletes the blobs.
func TestLargeMessagesWithSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	e := startLarge(t, dir)
	createLargeQueue(t, ctx, e.adm, "big", nil)
	sizes := []int{1 << 20, 10 << 20, 100 << 10}
	sums := map[string][32]byte{}
	sender, err := e.client.NewSender("big", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		body := largeBody(i+3, n)
		id := fmt.Sprint("m", i)
		sums[id] = sha256.Sum256(body)
		if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: body,
			ApplicationProperties: map[string]any{"size": int64(n)}}, nil); err != nil {
			t.Fatalf("sending %d bytes: %v", n, err)
		}
	}
	sender.Close(ctx)
	if got := e.blobCount(t); got != 2 {
		t.Fatalf("%d blob files for two messages over the threshold", got)
	}
	r, err := e.client.NewReceiverForQueue("big", nil)
	if err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctx, 3, nil)
	if err != nil || len(peeked) != 3 {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}
	for _, m := range peeked {
		if sha256.Sum256(m.Body) != sums[m.MessageID] {
			t.Fatalf("peeked %s: body differs", m.MessageID)
		}
	}
	r.Close(ctx)
	e.stop(t)

	e = startLarge(t, dir)
	defer e.stop(t)
	if got := e.blobCount(t); got != 2 {
		t.Fatalf("%d blob files after a restart", got)
	}
	r, err = e.client.NewReceiverForQueue("big", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	for range sizes {
		m := receiveLarge(t, ctx, r)
		if sha256.Sum256(m.Body) != sums[m.MessageID] {
			t.Fatalf("received %s: %d bytes, body differs", m.MessageID, len(m.Body))
		}
		if m.ApplicationProperties["size"] != int64(len(m.Body)) {
			t.Fatalf("received %s: properties %v", m.MessageID, m.ApplicationProperties)
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.waitBlobs(t, 0)
}

// TestLargeMessageReceiveAndDelete: a streamed message removed as it is
// handed out (receive-and-delete) still reaches the client whole, and
// its blob goes.
func TestLargeMessageReceiveAndDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startLarge(t, t.TempDir())
	defer e.stop(t)
	createLargeQueue(t, ctx, e.adm, "rd", nil)
	body := largeBody(7, 3<<20)
	sender, err := e.client.NewSender("rd", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := e.client.NewReceiverForQueue("rd", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if m := receiveLarge(t, ctx, r); !bytes.Equal(m.Body, body) {
		t.Fatalf("received %d bytes, body differs", len(m.Body))
	}
	e.waitBlobs(t, 0)
}

// TestLargeMessageEntityDelete: deleting a queue deletes its messages'
// blob files.
func TestLargeMessageEntityDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startLarge(t, t.TempDir())
	defer e.stop(t)
	createLargeQueue(t, ctx, e.adm, "gone", nil)
	sender, err := e.client.NewSender("gone", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: largeBody(i, 1<<20)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sender.Close(ctx)
	if got := e.blobCount(t); got != 3 {
		t.Fatalf("%d blob files", got)
	}
	if _, err := e.adm.DeleteQueue(ctx, "gone", nil); err != nil {
		t.Fatal(err)
	}
	e.waitBlobs(t, 0)
}
