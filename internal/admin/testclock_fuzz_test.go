package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

// FuzzTimeRequest: any body of POST /$time/advance or /$time/set is
// either refused with a client error, leaving the test clock where it
// was, or moves the clock forward and answers its new time.
func FuzzTimeRequest(f *testing.F) {
	f.Add(true, []byte(`{"by":"10m"}`))
	f.Add(true, []byte(`{"by":"-1h"}`))
	f.Add(true, []byte(`{"by":"2562047h"}`))
	f.Add(false, []byte(`{"to":"2030-01-01T00:00:00Z"}`))
	f.Add(false, []byte(`{"to":"1999-12-31T23:59:59.999+01:00"}`))
	f.Add(false, []byte(`{"to":"9999-12-31T23:59:59Z"}`))
	f.Fuzz(func(t *testing.T, advance bool, body []byte) {
		base := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		c := clock.NewTest(base)
		h := &Handler{testClock: c}
		path, op := "/$time/set", setTime
		if advance {
			path, op = "/$time/advance", advanceTime
		}
		r, _ := http.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		before := c.Now()
		rep, err := op(h, &request{r: r})
		if err != nil {
			wantClientError(t, err)
			if !c.Now().Equal(before) {
				t.Fatalf("a refused move changed the clock: %v → %v", before, c.Now())
			}
			return
		}
		if rep.status != http.StatusOK || c.Now().Before(before) || c.Offset() > clock.MaxOffset {
			t.Fatalf("answered %d, clock %v → %v (offset %v)", rep.status, before, c.Now(), c.Offset())
		}
	})
}
