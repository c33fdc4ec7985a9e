//go:build linux

package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/version"
)

// tmpfs mounts a tmpfs of size bytes on a new directory and unmounts it
// when the test ends. It skips the test when that is not permitted (not
// root, or no mount namespace rights); CI runs as root.
func tmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (mount -t tmpfs); CI runs as root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the file system is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	for _, n := range []int{4096, 512, 1} { // the last bytes too
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
	return p
}

func connString(s *Server) string {
	return "Endpoint=sb://" + s.AMQPAddr().String() + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
}

// wantNoSpace checks that err is the broker's disk-full refusal as the Go
// SDK reports it: amqp:resource-limit-exceeded with the free space.
func wantNoSpace(t *testing.T, what string, err error) {
	t.Helper()
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondResourceLimitExceeded || !strings.Contains(ae.Description, "the broker's disk is full:") {
		t.Fatalf("%s on a full disk: %v, want amqp:resource-limit-exceeded saying the disk is full", what, err)
	}
}

// TestFullDiskEndToEnd runs the server on an 8 MiB tmpfs with the real Go
// SDK: with the disk full a send and a settlement fail with the specific
// error (the settlement is not retried into a false success), reads go on,
// the readiness probe says why it is not ready; once space is freed the
// same server takes sends and settlements again; after a restart
// everything acknowledged is there once, and nothing refused is.
func TestFullDiskEndToEnd(t *testing.T) {
	mnt := tmpfs(t, 8<<20)
	data := filepath.Join(mnt, "data")
	opts := Options{Server: config.Server{DataDir: data, MinFreeBytes: -1}, SegmentSize: 256 << 10}
	s := start(t, opts)
	stopped := false
	defer func() {
		if !stopped {
			stop(t, s)
		}
	}()
	if _, err := s.Broker().CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(connString(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	sent := map[string]bool{}
	send := func(body string) error {
		id := fmt.Sprintf("%.100s", body)
		err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body), MessageID: &id}, nil)
		if err == nil {
			sent[id] = true
		}
		return err
	}
	for i := range 30 {
		if err := send(fmt.Sprint("before-", i)); err != nil {
			t.Fatal(err)
		}
	}
	receiver, err := client.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer receiver.Close(ctx)
	var held []*azservicebus.ReceivedMessage
	for len(held) < 30 {
		ms, err := receiver.ReceiveMessages(ctx, 30-len(held), nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ms...)
	}

	filler := fillDisk(t, mnt)
	// The log's preallocated segment, and then the last page of the
	// file, still have room: sends go on until they are full.
	pad := strings.Repeat("x", 1000)
	var refused error
	for i := 0; refused == nil; i++ {
		if i == 2000 {
			t.Fatal("2000 sends of 1 KB accepted on a full disk")
		}
		refused = send(fmt.Sprint("fill-", i, pad))
	}
	wantNoSpace(t, "send", refused)
	// Settlements take less room: some may still fit, until one fails.
	completed := map[string]bool{}
	next := 0
	for ; ; next++ {
		if next == 25 {
			t.Fatal("25 completions accepted on a full disk")
		}
		err := receiver.CompleteMessage(ctx, held[next], nil)
		if err == nil {
			completed[held[next].MessageID] = true
			continue
		}
		wantNoSpace(t, "complete", err)
		break
	}
	// (The Go SDK marks a delivery settled once the broker answered, even
	// with an error, so held[next] cannot be settled again on this link:
	// it stays locked until its lock expires and is then delivered again.)
	err = receiver.DeadLetterMessage(ctx, held[next+1], nil)
	wantNoSpace(t, "dead-letter", err)
	wantNoSpace(t, "send", send("refused"))
	// Reads go on: a peek-lock receive (locks are not written)...
	if ms, err := receiver.ReceiveMessages(ctx, 1, nil); err != nil || len(ms) != 1 {
		t.Fatalf("receive on a full disk: %d messages, %v", len(ms), err)
	}
	// ... and peek, which sees the messages (the locked ones too).
	peeked, err := receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(0))})
	if err != nil || len(peeked) != 10 {
		t.Fatalf("peek on a full disk: %d messages, %v", len(peeked), err)
	}
	base := "http://" + s.HTTPAddr().String()
	if code, body := get(t, base+"/health/ready"); code != 503 || !strings.Contains(body, "the broker's disk is full") {
		t.Fatalf("ready on a full disk = %d %s", code, body)
	}
	if code, body := get(t, base+"/health"); code != 200 || !strings.Contains(body, `"degraded"`) {
		t.Fatalf("health on a full disk = %d %s", code, body)
	}

	// Space returns: the same server resumes.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := send(fmt.Sprint("after-", i)); err != nil {
			t.Fatalf("send with space again: %v", err)
		}
	}
	if err := receiver.CompleteMessage(ctx, held[next+2], nil); err != nil {
		t.Fatalf("complete with space again: %v", err)
	}
	completed[held[next+2].MessageID] = true
	if code, body := get(t, base+"/health/ready"); code != 200 {
		t.Fatalf("ready with space again = %d %s", code, body)
	}
	receiver.Close(ctx)
	sender.Close(ctx)
	client.Close(ctx)

	// Restart: everything acknowledged once; the refused sends and
	// settlements did not happen (held[next] and held[next+1] are still
	// there), the completed messages are gone.
	stop(t, s)
	s = start(t, opts)
	info, err := s.Broker().GetQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	if info.Counts.DeadLetter != 0 {
		t.Fatalf("a refused dead-lettering happened: %+v", info.Counts)
	}
	got := map[string]int{}
	for from := int64(0); ; {
		d, err := s.Broker().Peek(ctx, "q", from, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(d) == 0 {
			break
		}
		for _, m := range d {
			got[fmt.Sprint(m.Message.MessageID)]++
			from = m.SequenceNumber + 1
		}
	}
	for body := range completed {
		delete(sent, body)
	}
	var missing, doubled, extra int
	for body := range sent {
		switch got[body] {
		case 0:
			missing++
		case 1:
		default:
			doubled++
		}
	}
	for body := range got {
		if !sent[body] {
			extra++
		}
	}
	if missing+doubled+extra > 0 || info.Counts.Active != int64(len(sent)) {
		t.Fatalf("after restart: %d acknowledged messages missing, %d doubled, %d not acknowledged; Active %d, want %d",
			missing, doubled, extra, info.Counts.Active, len(sent))
	}
	stop(t, s)
	stopped = true
}

// TestLowDiskWatermarkEndToEnd: with the default watermark (5 % of an 8
// MiB disk), once the free space drops below it new messages are refused
// with the reason, settlements still succeed, readiness says why; freeing
// space lifts it.
func TestLowDiskWatermarkEndToEnd(t *testing.T) {
	mnt := tmpfs(t, 8<<20)
	s := start(t, Options{Server: config.Server{DataDir: filepath.Join(mnt, "data")}, SegmentSize: 256 << 10})
	defer stop(t, s)
	if _, err := s.Broker().CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(connString(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	for range 5 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("m")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	receiver, err := client.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer receiver.Close(ctx)
	ms, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Leave 200 KB free: below 5 % of 8 MiB (419 KB).
	filler := fillDisk(t, mnt)
	if err := os.Truncate(filler, fileSize(t, filler)-200<<10); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.HTTPAddr().String()
	// The store looks at the free space at most every 250 ms.
	waitReady(t, base, 503, "nearly full")
	err = sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("refused")}, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondResourceLimitExceeded || !strings.Contains(ae.Description, "the broker's disk is nearly full") {
		t.Fatalf("send below the watermark: %v", err)
	}
	if err := receiver.CompleteMessage(ctx, ms[0], nil); err != nil {
		t.Fatalf("complete below the watermark: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitReady(t, base, 200, "")
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("ok")}, nil); err != nil {
		t.Fatalf("send with space again: %v", err)
	}
}

// waitReady polls GET /health/ready until it answers code with a body
// containing text, for up to 5 seconds.
func waitReady(t *testing.T, base string, code int, text string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, body := get(t, base+"/health/ready")
		if c == code && strings.Contains(body, text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ready = %d %s, want %d with %q", c, body, code, text)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestHealthStates: what /health (liveness) and /health/ready answer in
// each state of the store.
func TestHealthStates(t *testing.T) {
	var h health
	probe := func() (int, string, int, string) {
		live, rd := &recorder{header: http.Header{}}, &recorder{header: http.Header{}}
		h.ServeHTTP(live, nil)
		h.serveReady(rd, nil)
		// Every body ends with the build's version.
		ver := `,"version":"` + version.Version() + `"}`
		lb, rb := strings.TrimSpace(live.body.String()), strings.TrimSpace(rd.body.String())
		if !strings.HasSuffix(lb, ver) || !strings.HasSuffix(rb, ver) {
			t.Errorf("bodies %s and %s do not end with %s", lb, rb, ver)
		}
		return live.code, strings.TrimSuffix(lb, ver) + "}", rd.code, strings.TrimSuffix(rb, ver) + "}"
	}
	var state error
	h.setCheck(func() error { return state })
	for _, c := range []struct {
		name                string
		ready               bool
		state               error
		live, rd            int
		liveBody, readyBody string
	}{
		{"starting", false, nil, 503, 503, `{"status":"unavailable"}`, `{"status":"not ready","reason":"the broker is starting or stopping"}`},
		{"serving", true, nil, 200, 200, `{"status":"healthy"}`, `{"status":"ready"}`},
		{"disk full", true, &broker.Error{Kind: broker.KindNoSpace, Msg: "the broker's disk is full: 0 bytes free of 8"},
			200, 503, `{"status":"degraded","reason":"the broker's disk is full: 0 bytes free of 8"}`, `{"status":"not ready","reason":"the broker's disk is full: 0 bytes free of 8"}`},
		{"store stopped", true, &broker.Error{Kind: broker.KindStoreFailed, Msg: "stopped"},
			503, 503, `{"status":"failed","reason":"stopped"}`, `{"status":"not ready","reason":"stopped"}`},
	} {
		h.ready.Store(c.ready)
		state = c.state
		live, liveBody, rd, readyBody := probe()
		if live != c.live || liveBody != c.liveBody || rd != c.rd || readyBody != c.readyBody {
			t.Errorf("%s: /health %d %s, /health/ready %d %s; want %d %s, %d %s", c.name, live, liveBody, rd, readyBody, c.live, c.liveBody, c.rd, c.readyBody)
		}
	}
}

// TestShutdownOnFullDisk: shutting down (SIGTERM) with the disk full
// succeeds (no checkpoint is needed: the log has everything), and the
// next start finds every acknowledged message.
func TestShutdownOnFullDisk(t *testing.T) {
	mnt := tmpfs(t, 8<<20)
	opts := Options{Server: config.Server{DataDir: filepath.Join(mnt, "data"), MinFreeBytes: -1}, SegmentSize: 256 << 10}
	s := start(t, opts)
	if _, err := s.Broker().CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	filler := fillDisk(t, mnt)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acked := 0
	body := strings.Repeat("x", 2000)
	for {
		m := message.Message{Body: []byte(body)}
		if err := s.Broker().Send(ctx, "q", []*message.Message{&m}); err != nil {
			if !errors.Is(err, broker.ErrNoSpace) {
				t.Fatalf("send: %v", err)
			}
			break
		}
		acked++
	}
	stop(t, s) // fails the test if Shutdown reports an error
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s = start(t, opts)
	defer stop(t, s)
	info, err := s.Broker().GetQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	if info.Counts.Active != int64(acked) {
		t.Fatalf("after restart %d messages, %d acknowledged", info.Counts.Active, acked)
	}
}

// TestDeferredSettlementRetriedEndToEnd: a settlement by lock token (a
// deferred message, settled on the management link) refused for lack of
// space is not reported as done and keeps its lock, so the application's
// retry once space is back succeeds (not "lock lost").
func TestDeferredSettlementRetriedEndToEnd(t *testing.T) {
	mnt := tmpfs(t, 8<<20)
	s := start(t, Options{Server: config.Server{DataDir: filepath.Join(mnt, "data"), MinFreeBytes: -1}, SegmentSize: 256 << 10})
	defer stop(t, s)
	props := broker.DefaultQueueProperties()
	props.LockDuration = 5 * time.Minute
	if _, err := s.Broker().CreateQueue("q", props); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(connString(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	for i := range 31 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	receiver, err := client.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer receiver.Close(ctx)
	var held []*azservicebus.ReceivedMessage
	for len(held) < 31 {
		ms, err := receiver.ReceiveMessages(ctx, 31-len(held), nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ms...)
	}
	if err := receiver.DeferMessage(ctx, held[0], nil); err != nil {
		t.Fatal(err)
	}
	deferred, err := receiver.ReceiveDeferredMessages(ctx, []int64{*held[0].SequenceNumber}, nil)
	if err != nil || len(deferred) != 1 {
		t.Fatalf("receive deferred: %v", err)
	}

	filler := fillDisk(t, mnt)
	pad := strings.Repeat("x", 1000)
	for i := 0; ; i++ {
		if i == 2000 {
			t.Fatal("2000 sends of 1 KB accepted on a full disk")
		}
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(pad)}, nil); err != nil {
			wantNoSpace(t, "send", err)
			break
		}
	}
	// Use up what is left at the end of the log file: small sends, then
	// completions.
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("200 small sends accepted on a full disk")
		}
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("s")}, nil); err != nil {
			wantNoSpace(t, "send", err)
			break
		}
	}
	for i := 1; ; i++ {
		if i == len(held) {
			t.Fatal("30 completions accepted on a full disk")
		}
		if err := receiver.CompleteMessage(ctx, held[i], nil); err != nil {
			wantNoSpace(t, "complete", err)
			break
		}
	}
	// The Go SDK retries a refused management-link settlement with its
	// default back-off (4 s, 8 s, 16 s: it does not apply the client's
	// RetryOptions to settlements) before it reports the refusal; give up
	// sooner. What matters: it is not reported as done.
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	err = receiver.CompleteMessage(cctx, deferred[0], nil)
	ccancel()
	if err == nil {
		t.Fatal("complete of a deferred message on a full disk reported success")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := receiver.CompleteMessage(ctx, deferred[0], nil); err != nil {
		t.Fatalf("complete of the deferred message with space again: %v", err)
	}
	info, err := s.Broker().GetQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	if info.Counts.Deferred != 0 {
		t.Fatalf("deferred message still there: %+v", info.Counts)
	}
}
