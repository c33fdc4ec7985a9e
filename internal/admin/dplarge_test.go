package admin

// Large messages on the HTTP data plane, through a plain net/http client
// as curl would use it: the payload is streamed from the store into the
// response, not held whole (dpstream.go).

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// largeRunEnv makes the large-message tests move 100 MB messages.
const largeRunEnv = "BUSBAR_LARGE_MESSAGE_TESTS"

// largeSize is the payload the large-message tests move: 100 MB with
// largeRunEnv=1, else 8 MB (both past the streaming threshold).
func largeSize() int {
	if os.Getenv(largeRunEnv) == "1" {
		return 100 * 1000 * 1000
	}
	return 8 << 20
}

// newFileEnv is an env on a fresh file store, which keeps large messages
// in blob files.
func newFileEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOnData(t, t.TempDir())
}

// sendLarge sends a message of size random bytes in one data section to
// entity with its body read from a file (as the AMQP side sends a
// spooled one), and returns the payload's hash.
func sendLarge(t *testing.T, e *env, entity string, size int, seed uint64) [32]byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "body"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdr := binary.BigEndian.AppendUint32([]byte{0x00, 0x53, descData, 0xb0}, uint32(size))
	h := sha256.New()
	rnd := rand.NewChaCha8([32]byte{byte(seed)})
	if _, err := f.Write(hdr); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.MultiWriter(f, h), rnd, int64(size)); err != nil {
		t.Fatal(err)
	}
	m := &message.Message{MessageID: "big", ContentType: "application/octet-stream", Durable: true,
		BodyTail: io.NewSectionReader(f, 0, int64(len(hdr)+size))}
	if err := e.b.Send(t.Context(), entity, []*message.Message{m}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// heapAlloc is the bytes allocated so far, after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestDataPlaneLargeReceive: a large message is peek-locked and received
// whole through the data plane, its payload checked by hash, while the
// handler allocates a fraction of its size: it is streamed from the
// store, not read into memory.
func TestDataPlaneLargeReceive(t *testing.T) {
	e := newFileEnv(t)
	e.queue("big", func(p *broker.QueueProperties) { p.MaxMessageSizeInKilobytes = 102400 })
	size := largeSize()
	want := sendLarge(t, e, "big", size, 1)
	sendLarge(t, e, "big", size, 1)

	get := func(method, path string) (int, http.Header, [32]byte, int64) {
		t.Helper()
		req, err := http.NewRequest(method, e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", e.token())
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		return resp.StatusCode, resp.Header, sum, n
	}
	// What the client and the server allocate in all: the bound is
	// 4 MiB, a twentieth of the 8 MB moved (and under 5% of 100 MB).
	const bound = 4 << 20
	for _, c := range []struct {
		method string
		status int
	}{{"POST", http.StatusCreated}, {"DELETE", http.StatusOK}} {
		before := heapAlloc()
		status, h, sum, n := get(c.method, "/big/messages/head?timeout=0")
		grew := heapAlloc() - before
		if status != c.status || n != int64(size) || sum != want {
			t.Fatalf("%s head: %d, %d bytes, hash match %v", c.method, status, n, sum == want)
		}
		if h.Get("Content-Length") != "" && h.Get("Content-Length") != strconv.Itoa(size) {
			t.Errorf("%s head: Content-Length %s", c.method, h.Get("Content-Length"))
		}
		if !strings.Contains(h.Get("BrokerProperties"), `"MessageId":"big"`) {
			t.Errorf("%s head: BrokerProperties %s", c.method, h.Get("BrokerProperties"))
		}
		if grew > bound {
			t.Errorf("%s head of %d bytes allocated %d KiB; bound %d KiB", c.method, size, grew>>10, bound>>10)
		}
		t.Logf("%s head of %d bytes: %d KiB allocated", c.method, size, grew>>10)
	}
}

// TestDataPlaneLargeSend: a large POST body goes to a spool as it
// arrives and from there to the store, so the handler allocates a
// fraction of it; the message is received back whole. A body shorter than
// its Content-Length is refused and leaves nothing behind.
func TestDataPlaneLargeSend(t *testing.T) {
	e := newFileEnv(t)
	e.queue("big", func(p *broker.QueueProperties) { p.MaxMessageSizeInKilobytes = 102400 })
	size := int64(largeSize())
	post := func(body io.Reader, n int64) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", e.srv.URL+"/big/messages", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = n
		req.Header.Set("Authorization", e.token())
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("BrokerProperties", `{"MessageId":"posted"}`)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	h := sha256.New()
	before := heapAlloc()
	status, msg := post(io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), h), size)
	grew := heapAlloc() - before
	if status != http.StatusCreated {
		t.Fatalf("POST: %d %s", status, msg)
	}
	const bound = 4 << 20
	if grew > bound {
		t.Errorf("POST of %d bytes allocated %d KiB; bound %d KiB", size, grew>>10, bound>>10)
	}
	t.Logf("POST of %d bytes: %d KiB allocated", size, grew>>10)

	// Cut short: the client says more than it sends.
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, 300<<10))
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}()
	req, _ := http.NewRequest("POST", e.srv.URL+"/big/messages", pr)
	req.ContentLength = 1 << 20
	req.Header.Set("Authorization", e.token())
	if resp, err := e.srv.Client().Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			t.Errorf("a short body was accepted")
		}
	}

	status, hdr, body := e.do("DELETE", "/big/messages/head?timeout=0", "")
	if status != http.StatusOK || int64(len(body)) != size || sha256.Sum256([]byte(body)) != [32]byte(h.Sum(nil)) {
		t.Fatalf("receive: %d, %d bytes", status, len(body))
	}
	if !strings.Contains(hdr.Get("BrokerProperties"), `"MessageId":"posted"`) {
		t.Errorf("BrokerProperties %s", hdr.Get("BrokerProperties"))
	}
	if status, _, _ := e.do("DELETE", "/big/messages/head?timeout=0", ""); status != http.StatusNoContent {
		t.Errorf("a second message: %d", status)
	}
	if n := len(e.h.dataSpools); n != 0 {
		t.Errorf("%d spools still counted", n)
	}
}

// TestDataPlaneSpoolLimit: at most maxDataSpools large sends are in
// progress at once; the next is refused with 403 until one ends.
func TestDataPlaneSpoolLimit(t *testing.T) {
	e := newFileEnv(t)
	e.queue("big", func(p *broker.QueueProperties) { p.MaxMessageSizeInKilobytes = 102400 })
	send := func(body io.Reader) (*http.Response, error) {
		req, _ := http.NewRequest("POST", e.srv.URL+"/big/messages", body)
		req.ContentLength = 1 << 20
		req.Header.Set("Authorization", e.token())
		return e.srv.Client().Do(req)
	}
	type result struct {
		status int
		err    error
	}
	done := make(chan result, maxDataSpools)
	var writers []*io.PipeWriter
	for range maxDataSpools {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		go func() {
			resp, err := send(pr)
			if err != nil {
				done <- result{err: err}
				return
			}
			resp.Body.Close()
			done <- result{status: resp.StatusCode}
		}()
		go pw.Write(make([]byte, 1024)) // the request starts; it waits for the rest
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.h.dataSpools) < maxDataSpools {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sends spooling", len(e.h.dataSpools), maxDataSpools)
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := send(bytes.NewReader(make([]byte, 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "being sent over HTTP already") {
		t.Errorf("send past the limit: %d %s", resp.StatusCode, b)
	}
	for _, pw := range writers {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	for range maxDataSpools {
		if r := <-done; r.err == nil && r.status == http.StatusCreated {
			t.Errorf("a cut send was accepted")
		}
	}
	if status, _ := postSmall(e); status != http.StatusCreated {
		t.Errorf("a send after the others ended: %d", status)
	}
}

// postSmall sends one large message of 512 KiB whole.
func postSmall(e *env) (int, string) {
	status, _, body := e.do("POST", "/big/messages", strings.Repeat("x", 512<<10))
	return status, body
}
