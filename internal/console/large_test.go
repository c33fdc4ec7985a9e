package console

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

// largeSize is the payload TestLargeMessageView moves: 100 MB with
// BUSBAR_LARGE_MESSAGE_TESTS=1, else 8 MB (both past largeFrom).
func largeSize() int64 {
	if os.Getenv("BUSBAR_LARGE_MESSAGE_TESTS") == "1" {
		return 100 * 1000 * 1000
	}
	return 8 << 20
}

// totalAlloc is the bytes allocated so far, after a collection.
func totalAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// letters is an endless "abc…z" for a body that previews as text.
type letters struct{}

func (letters) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return len(p), nil
}

// TestLargeMessageView: the messages list and the message page of a
// large message show its first KiB, and the page links to a download
// that streams the whole payload; none of them allocates more than a
// fraction of the body.
func TestLargeMessageView(t *testing.T) {
	st, err := filestore.Open(filestore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, nil, st)
	p := broker.DefaultQueueProperties()
	p.MaxMessageSizeInKilobytes = 102400
	if _, err := e.b.CreateQueue("big", p); err != nil {
		t.Fatal(err)
	}
	size := largeSize()
	f, err := os.Create(filepath.Join(t.TempDir(), "body"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	hdr := binary.BigEndian.AppendUint32([]byte{0x00, 0x53, descData, 0xb0}, uint32(size))
	if _, err := f.Write(hdr); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.MultiWriter(f, h), letters{}, size); err != nil {
		t.Fatal(err)
	}
	m := &message.Message{MessageID: "big-1", Durable: true, BodyTail: io.NewSectionReader(f, 0, int64(len(hdr))+size)}
	if err := e.b.Send(t.Context(), "big", []*message.Message{m}); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	e.signIn(c, "admin", "admin-key")

	// What the server and the client allocate for each request: 4 MiB,
	// under half of the 8 MB body (and 4% of 100 MB).
	const bound = 4 << 20
	before := totalAlloc()
	st1, list := e.get(c, "messages?path=big&text=abcdef")
	if grew := totalAlloc() - before; grew > bound {
		t.Errorf("the messages list allocated %d KiB; bound %d KiB", grew>>10, bound>>10)
	}
	if st1 != http.StatusOK || !strings.Contains(list, "big-1") || !strings.Contains(list, "abcdefghijklmnopqrstuvwxyz") {
		t.Fatalf("messages list: %d\n%s", st1, list)
	}
	before = totalAlloc()
	st2, page := e.get(c, "message?path=big&seq=1")
	if grew := totalAlloc() - before; grew > bound {
		t.Errorf("the message page allocated %d KiB; bound %d KiB", grew>>10, bound>>10)
	}
	if st2 != http.StatusOK || !strings.Contains(page, fmt.Sprintf("first 1024 of %d bytes", size)) ||
		!strings.Contains(page, `href="`+Prefix+`message/body?path=big&amp;sub=&amp;seq=1"`) {
		t.Fatalf("message page: %d\n%s", st2, page)
	}

	before = totalAlloc()
	resp, err := c.Get(e.url("message/body?path=big&sub=&seq=1"))
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	resp.Body.Close()
	if grew := totalAlloc() - before; grew > bound {
		t.Errorf("the download allocated %d KiB; bound %d KiB", grew>>10, bound>>10)
	}
	if err != nil || resp.StatusCode != http.StatusOK || n != size || string(got.Sum(nil)) != string(h.Sum(nil)) {
		t.Fatalf("download: %d, %d of %d bytes, %v", resp.StatusCode, n, size, err)
	}
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "application/octet-stream" || !strings.HasPrefix(cd, "attachment") {
		t.Errorf("download headers: %s, %s", ct, cd)
	}

	// A small message downloads whole too; a reader may download.
	if err := e.b.Send(t.Context(), "big", []*message.Message{{Durable: true, Body: encodeDataBody([]byte("small"))}}); err != nil {
		t.Fatal(err)
	}
	r := e.client()
	e.signIn(r, "reader", "reader-key")
	if st, body := e.get(r, "message/body?path=big&seq=2"); st != http.StatusOK || body != "small" {
		t.Errorf("small download: %d %q", st, body)
	}
	if st, _ := e.get(r, "message/body?path=big&seq=9"); st != http.StatusNotFound {
		t.Errorf("download of a missing message: %d", st)
	}
}
