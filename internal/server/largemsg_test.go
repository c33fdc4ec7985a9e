package server

// Large messages (1, 10 and 100 MB) through the official Go SDK: stored
// in blob files beside the log, streamed to receivers, kept across a
// restart, deleted with their message or entity.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
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
	return startLargeWith(t, Options{Server: config.Server{DataDir: dir, MinFreeBytes: -1}})
}

func startLargeWith(t *testing.T, o Options) *largeEnv {
	t.Helper()
	s := start(t, o)
	dir := o.DataDir
	cs, adm := sasAdmin(t, s)
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

// blobCount counts the blob files in the data directory, not the spools
// of incoming transfers (a spool is deleted just after its message is
// accepted, so it may still be there when the sender has its answer).
func (e *largeEnv) blobCount(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(e.dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range names {
		if !strings.HasSuffix(d.Name(), ".spool") {
			n++
		}
	}
	return n
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

// TestLargeMessageSpoolLimits attacks with half-sent large transfers: one
// connection starts 24 transfers of 100 MB on as many links and sends
// 2 MB of each, then stalls. The broker spools at most 16 of them for
// the connection, and at most MaxSpoolBytes in all (the rest of their
// frames are dropped), and deletes the spools when the connection goes;
// meanwhile the Go SDK still sends a message, and afterwards a large one.
func TestLargeMessageSpoolLimits(t *testing.T) {
	t.Run("per-connection", func(t *testing.T) { spoolAttack(t, 1<<30, 16, 16) })
	t.Run("bytes", func(t *testing.T) { spoolAttack(t, 20<<20, 1, 16) })
}

// spoolAttack runs the attack against a broker with maxBytes of spool and
// checks that between minFiles and maxFiles spool files and at most
// maxBytes (and a frame) are on disk.
func spoolAttack(t *testing.T, maxBytes int64, minFiles, maxFiles int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	s := start(t, Options{Server: config.Server{DataDir: dir, MinFreeBytes: -1, AllowAnyKey: true}, MaxSpoolBytes: maxBytes})
	defer stop(t, s)
	cs, adm := sasAdmin(t, s)
	createLargeQueue(t, ctx, adm, "big", nil)

	nc, err := net.Dial("tcp", s.AMQPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	write := func(ch uint16, body frames.Body) {
		b, err := frames.AppendFrame(nil, ch, body)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	nc.Write([]byte(frames.ProtocolHeaderAMQP))
	go io.Copy(io.Discard, nc) // the server's answers, unread
	write(0, &frames.Open{ContainerID: "attacker", MaxFrameSize: 65536})
	write(0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000})
	const links = 24
	for h := range uint32(links) {
		write(0, &frames.Attach{Name: fmt.Sprint("l", h), Handle: h, Role: frames.RoleSender,
			Source: &frames.Source{Address: "attacker"}, Target: &frames.Target{Address: "big"}, InitialDeliveryCount: to.Ptr(uint32(0))})
	}
	time.Sleep(200 * time.Millisecond) // the attaches are answered with credit
	// A data section announcing 100 MB, of which 2 MB come.
	prefix := []byte{0x00, 0x53, 0x75, 0xb0}
	prefix = binary.BigEndian.AppendUint32(prefix, 100e6)
	chunk := make([]byte, 60<<10)
	for i := range 2 << 20 / len(chunk) {
		for h := range uint32(links) {
			tr := &frames.Transfer{Handle: h, More: true}
			payload := chunk
			if i == 0 {
				tr.DeliveryID, tr.DeliveryTag, tr.MessageFormat = to.Ptr(h), []byte{byte(h)}, to.Ptr(uint32(0))
				payload = append(append([]byte(nil), prefix...), chunk[len(prefix):]...)
			}
			tr.Payload = payload
			write(0, tr)
		}
	}
	spools := func() (n int, bytes int64) {
		entries, _ := os.ReadDir(filepath.Join(dir, "blobs"))
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".spool") {
				n++
				if fi, err := e.Info(); err == nil {
					bytes += fi.Size()
				}
			}
		}
		return n, bytes
	}
	// Let the broker take in what was sent: until the spools stop growing.
	deadline := time.Now().Add(10 * time.Second)
	n, b := spools()
	for stable := 0; stable < 10 && time.Now().Before(deadline); {
		time.Sleep(30 * time.Millisecond)
		n2, b2 := spools()
		if n2 == n && b2 == b && b > 0 {
			stable++
		} else {
			stable = 0
		}
		n, b = n2, b2
	}
	t.Logf("%d transfers half-sent: %d spool files, %d MiB spooled", links, n, b>>20)
	if n < minFiles || n > maxFiles {
		t.Errorf("%d spool files for one connection; want %d to %d", n, minFiles, maxFiles)
	}
	if b > maxBytes+64<<10 {
		t.Errorf("%d bytes spooled; the limit is %d", b, maxBytes)
	}

	// A well-behaved client is served meanwhile.
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("big", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	small := largeBody(3, 200<<10) // under the threshold: not spooled
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: small}, nil); err != nil {
		t.Fatal(err)
	}
	if maxBytes < 1<<30 {
		// The spool bytes are used up: a large message is refused, and
		// says why.
		err := sender.SendMessage(ctx, &azservicebus.Message{Body: largeBody(4, 4<<20)}, nil)
		if err == nil || !strings.Contains(err.Error(), "large messages already") {
			t.Fatalf("a large send with the spools used up: %v", err)
		}
	}

	// The attacker goes: its spools go with it.
	nc.Close()
	deadline = time.Now().Add(10 * time.Second)
	for {
		if n, _ = spools(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spool files left after the connection closed", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Now a large message goes through.
	body := largeBody(5, 1<<20)
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := client.NewReceiverForQueue("big", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if m := receiveLarge(t, ctx, r); !bytes.Equal(m.Body, small) {
		t.Fatal("the small message differs")
	}
	if m := receiveLarge(t, ctx, r); !bytes.Equal(m.Body, body) {
		t.Fatal("the large message differs")
	}
}

// TestLargeMessageDeadLetterAndForward: a large message dead-lettered with
// a reason, and one auto-forwarded to another queue, arrive byte for
// byte with their properties, and leave no blob behind once completed.
func TestLargeMessageDeadLetterAndForward(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startLarge(t, t.TempDir())
	defer e.stop(t)
	createLargeQueue(t, ctx, e.adm, "dst", nil)
	createLargeQueue(t, ctx, e.adm, "src", &admin.QueueProperties{ForwardTo: to.Ptr("dst")})
	createLargeQueue(t, ctx, e.adm, "dl", nil)
	body := largeBody(11, 3<<20)
	for _, q := range []string{"src", "dl"} {
		s, err := e.client.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: body, ApplicationProperties: map[string]any{"q": q}}, nil); err != nil {
			t.Fatal(err)
		}
		s.Close(ctx)
	}

	r, err := e.client.NewReceiverForQueue("dl", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receiveLarge(t, ctx, r)
	if err := r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("too big to handle")}); err != nil {
		t.Fatal(err)
	}
	r.Close(ctx)
	dlq, err := e.client.NewReceiverForQueue("dl", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(ctx)
	m = receiveLarge(t, ctx, dlq)
	if !bytes.Equal(m.Body, body) || m.DeadLetterReason == nil || *m.DeadLetterReason != "too big to handle" || m.ApplicationProperties["q"] != "dl" {
		t.Fatalf("dead-lettered message: %d bytes, reason %v, properties %v", len(m.Body), m.DeadLetterReason, m.ApplicationProperties)
	}
	if err := dlq.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}

	fwd, err := e.client.NewReceiverForQueue("dst", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close(ctx)
	m = receiveLarge(t, ctx, fwd)
	if !bytes.Equal(m.Body, body) || m.ApplicationProperties["q"] != "src" {
		t.Fatalf("forwarded message: %d bytes, properties %v", len(m.Body), m.ApplicationProperties)
	}
	if err := fwd.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	e.waitBlobs(t, 0)
}

// TestLargeMessageDeferred: large messages deferred and received by
// sequence number through $management (bodies streamed in the response,
// beside a small one) arrive byte for byte and can be completed.
func TestLargeMessageDeferred(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startLarge(t, t.TempDir())
	defer e.stop(t)
	createLargeQueue(t, ctx, e.adm, "def", nil)
	s, err := e.client.NewSender("def", nil)
	if err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{largeBody(13, 2<<20), []byte("small"), largeBody(17, 1<<20)}
	for _, b := range bodies {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: b}, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.Close(ctx)
	r, err := e.client.NewReceiverForQueue("def", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var seqs []int64
	for range bodies {
		m := receiveLarge(t, ctx, r)
		if err := r.DeferMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, *m.SequenceNumber)
	}
	ms, err := r.ReceiveDeferredMessages(ctx, seqs, nil)
	if err != nil || len(ms) != len(bodies) {
		t.Fatalf("ReceiveDeferredMessages: %d messages, %v", len(ms), err)
	}
	for i, m := range ms {
		if !bytes.Equal(m.Body, bodies[i]) {
			t.Fatalf("deferred message %d: %d bytes, body differs", i, len(m.Body))
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.waitBlobs(t, 0)
}

// TestLargeMessageTopic: a large message sent to a topic with three
// subscriptions is one blob file, received whole from each subscription,
// and deleted once the last copy is completed.
func TestLargeMessageTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := startLarge(t, t.TempDir())
	defer e.stop(t)
	if _, err := e.adm.CreateTopic(ctx, "t", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{
		MaxMessageSizeInKilobytes: to.Ptr[int64](102400)}}); err != nil {
		t.Fatal(err)
	}
	subs := []string{"a", "b", "c"}
	for _, s := range subs {
		if _, err := e.adm.CreateSubscription(ctx, "t", s, nil); err != nil {
			t.Fatal(err)
		}
	}
	body := largeBody(19, 5<<20)
	s, err := e.client.NewSender("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	if n := e.blobCount(t); n != 1 {
		t.Fatalf("%d blob files for one message to three subscriptions", n)
	}
	for _, sub := range subs {
		r, err := e.client.NewReceiverForSubscription("t", sub, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := receiveLarge(t, ctx, r)
		if !bytes.Equal(m.Body, body) {
			t.Fatalf("subscription %s: %d bytes, body differs", sub, len(m.Body))
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		r.Close(ctx)
	}
	// The topic's shared data goes with its next commit: make one.
	s, err = e.client.NewSender("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("next")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := e.client.NewReceiverForSubscription("t", "a", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	receiveLarge(t, ctx, r)
	e.waitBlobs(t, 0)
}

// TestLargeMessageStoresWithoutSpools: with a store that keeps no spools
// (--memory, --store postgres://, also behind --faults' wrapper, which
// has NewSpool whatever it wraps) a message past the spool threshold is
// kept in memory as it arrives, as before spooling existed, rather than
// refused.
func TestLargeMessageStoresWithoutSpools(t *testing.T) {
	stores := map[string]Options{
		"memory":        {Server: config.Server{Memory: true}},
		"memory+faults": {Server: config.Server{Memory: true, Faults: true}},
	}
	if pg, err := pgtest.Start(); err == nil {
		t.Cleanup(func() { pg.Close() })
		url, err := pg.NewDatabase()
		if err != nil {
			t.Fatal(err)
		}
		stores["postgres"] = Options{Server: config.Server{Store: url}}
	} else if !errors.Is(err, pgtest.ErrNoPostgres) {
		t.Fatal(err)
	}
	for name, o := range stores {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := startLargeWith(t, o)
			defer e.stop(t)
			createLargeQueue(t, ctx, e.adm, "big", nil)
			body := largeBody(11, 2<<20)
			sender, err := e.client.NewSender("big", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sender.Close(ctx)
			if err := sender.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
				t.Fatalf("send 2 MB: %v", err)
			}
			r, err := e.client.NewReceiverForQueue("big", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			m := receiveLarge(t, ctx, r)
			if !bytes.Equal(m.Body, body) {
				t.Fatalf("received %d bytes, body differs", len(m.Body))
			}
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
