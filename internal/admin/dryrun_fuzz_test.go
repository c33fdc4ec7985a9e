package admin

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// FuzzDryRunRequest: any body of POST /$rules/dry-run is either refused
// with a 400 (or 413) or becomes a message whose properties are strings,
// booleans, longs and doubles only.
func FuzzDryRunRequest(f *testing.F) {
	f.Add([]byte(`{"topic":"events","message":{"body":"x","properties":{"region":"eu","n":3,"f":1.5,"b":true}}}`))
	f.Add([]byte(`{"topic":"t","message":{"subject":"vip","timeToLive":"10m","sessionId":""}}`))
	f.Add([]byte(`{"topic":"t","message":{"properties":{"x":[1]}}}`))
	f.Add([]byte(`{"topic":"t","message":{"properties":{"n":1e400}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _ := http.NewRequest(http.MethodPost, "/$rules/dry-run", strings.NewReader(string(body)))
		var req dryRunRequest
		if err := readJSON(r, &req); err != nil {
			wantClientError(t, err)
			return
		}
		m, err := req.Message.message()
		if err != nil {
			wantClientError(t, err)
			return
		}
		for k, v := range m.ApplicationProperties {
			switch v.(type) {
			case string, bool, int64, float64:
			default:
				t.Fatalf("property %q is a %T", k, v)
			}
		}
	})
}

func wantClientError(t *testing.T, err error) {
	t.Helper()
	var ae *Error
	if !errors.As(err, &ae) || (ae.Status != http.StatusBadRequest && ae.Status != http.StatusRequestEntityTooLarge) {
		t.Fatalf("not a client error: %v", err)
	}
}
