package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/config"
)

// TestDotSegmentsReachAdmin: a path with "." or ".." segments reaches the
// admin API as it is, instead of http.ServeMux's redirect to the cleaned
// path (another entity's): creating "x/../y" is refused by the naming rule
// and creates no "y".
func TestDotSegmentsReachAdmin(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}})
	defer stop(t, s)
	base := "http://" + s.HTTPAddr().String()
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	body := `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>`
	for _, p := range []string{"/x/../y", "/x/./y", "/.."} {
		req, err := http.NewRequest("PUT", base+p, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, base, time.Now().Add(time.Hour)))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "is not valid") {
			t.Errorf("PUT %s: %d %s", p, resp.StatusCode, b)
		}
	}
	if qs := s.broker.ListQueues(); len(qs) != 0 {
		t.Errorf("queues after the refused creates: %v", qs)
	}
	if !hasDotSegment("/a/../b") || !hasDotSegment("/.") || hasDotSegment("/a..b/c") || hasDotSegment("/health") {
		t.Error("hasDotSegment")
	}
}
