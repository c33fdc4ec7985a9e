package console

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

// newToolsEnv is newEnv with the testing tools on: a broker on a test
// clock (over the fake one) and a fault injector.
func newToolsEnv(t *testing.T) (*env, *clock.Test, *faults.Set) {
	t.Helper()
	fake := clock.NewFake(t0)
	tc := clock.NewTest(fake)
	st := memstore.New()
	b, err := broker.Open(broker.Options{Store: st, Clock: tc})
	if err != nil {
		t.Fatal(err)
	}
	tc.OnMove(b.Wake)
	a, err := auth.New(auth.Config{Clock: fake, Policies: []auth.Policy{
		{Name: "admin", PrimaryKey: "admin-key", Rights: auth.Manage},
		{Name: "reader", PrimaryKey: "reader-key", Rights: auth.Listen}}})
	if err != nil {
		t.Fatal(err)
	}
	fs := faults.New(fake, slog.New(slog.DiscardHandler), nil)
	c, err := New(Options{Broker: b, Auth: a, Clock: fake, TestClock: tc, Faults: fs})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, b: b, c: c, clk: fake}
	e.srv = httptest.NewServer(c)
	t.Cleanup(func() { e.srv.Close(); c.Close(); b.Close(); st.Close() })
	return e, tc, fs
}

// TestTimePage: the Time page shows the test clock; advancing and setting
// it in the console moves the broker's clock; bad input and moves back
// are refused with a clear error; Listen keys get neither page nor link.
func TestTimePage(t *testing.T) {
	e, tc, _ := newToolsEnv(t)
	admin, reader := e.client(), e.client()
	ac := e.signIn(admin, "admin", "admin-key")
	rc := e.signIn(reader, "reader", "reader-key")
	if _, body := e.get(admin, ""); !strings.Contains(body, `href="`+Prefix+`time"`) || !strings.Contains(body, `href="`+Prefix+`faults"`) {
		t.Fatalf("no Time/Faults links for Manage:\n%s", body)
	}
	if _, body := e.get(reader, ""); strings.Contains(body, `href="`+Prefix+`time"`) || strings.Contains(body, `href="`+Prefix+`faults"`) {
		t.Fatal("a Listen key sees the Time/Faults links")
	}
	if st, body := e.get(admin, "time"); st != http.StatusOK || !strings.Contains(body, t0.Format(time.RFC3339Nano)) || !strings.Contains(body, `id="test-offset" class="mono">0s<`) {
		t.Fatalf("time page: %d\n%s", st, body)
	}
	if st, _ := e.get(reader, "time"); st != http.StatusForbidden {
		t.Fatalf("reader time page: %d", st)
	}
	if st, _ := e.post(reader, "time/advance", url.Values{"csrf": {rc}, "by": {"1h"}}, ""); st != http.StatusForbidden || tc.Offset() != 0 {
		t.Fatalf("reader advanced the clock: %d %v", st, tc.Offset())
	}
	if st, _ := e.post(admin, "time/advance", url.Values{"by": {"1h"}}, ""); st != http.StatusForbidden || tc.Offset() != 0 {
		t.Fatalf("advance without CSRF token: %d", st)
	}
	if st, _ := e.post(admin, "time/advance", url.Values{"csrf": {ac}, "by": {"2h"}}, ""); st != http.StatusSeeOther || tc.Offset() != 2*time.Hour {
		t.Fatalf("advance: %d, offset %v", st, tc.Offset())
	}
	if _, body := e.get(admin, "time"); !strings.Contains(body, "2h0m0s") || !strings.Contains(body, "The test clock now reads") {
		t.Fatalf("time page after advance:\n%s", body)
	}
	for _, c := range []struct{ op, field, v, want string }{
		{"advance", "by", "soon", "not a duration"},
		{"advance", "by", "-1h", "only moves forward"},
		{"advance", "by", "", "Enter a duration"},
		{"set", "to", "tomorrow", "not an RFC 3339 time"},
		{"set", "to", t0.Format(time.RFC3339), "only moves forward"},
	} {
		if st, body := e.post(admin, "time/"+c.op, url.Values{"csrf": {ac}, c.field: {c.v}}, ""); st != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Fatalf("%s %q: %d %s", c.op, c.v, st, body)
		}
	}
	to := t0.Add(48 * time.Hour)
	if st, _ := e.post(admin, "time/set", url.Values{"csrf": {ac}, "to": {to.Format(time.RFC3339)}}, ""); st != http.StatusSeeOther || !tc.Now().Equal(to) {
		t.Fatalf("set: %d, now %v", st, tc.Now())
	}
	// A move the data directory cannot take is refused, saying so.
	tc.OnSave(func(time.Duration) error { return errors.New("no space left on device") })
	if st, body := e.post(admin, "time/advance", url.Values{"csrf": {ac}, "by": {"1h"}}, ""); st != http.StatusServiceUnavailable ||
		!strings.Contains(body, "could not be saved") || !strings.Contains(body, "no space left") || !tc.Now().Equal(to) {
		t.Fatalf("advance with a failing save: %d, now %v\n%s", st, tc.Now(), body)
	}
}

// TestFaultsPage: rules added in the console land in the fault injector
// with the admin API's validation, show on the page, and are cleared one
// by one or all at once; Listen keys are refused.
func TestFaultsPage(t *testing.T) {
	e, _, fs := newToolsEnv(t)
	admin, reader := e.client(), e.client()
	ac := e.signIn(admin, "admin", "admin-key")
	rc := e.signIn(reader, "reader", "reader-key")
	add := func(c *http.Client, csrf string, f url.Values) (int, string) {
		f.Set("csrf", csrf)
		return e.post(c, "faults/add", f, "")
	}
	if st, _ := add(reader, rc, url.Values{"kind": {"server-busy"}, "entity": {"q"}}); st != http.StatusForbidden || len(fs.List()) != 0 {
		t.Fatalf("reader added a rule: %d", st)
	}
	if st, _ := e.get(reader, "faults"); st != http.StatusForbidden {
		t.Fatalf("reader faults page: %d", st)
	}
	for _, c := range []struct {
		f    url.Values
		want string
	}{
		{url.Values{"kind": {"nonsense"}, "entity": {"q"}}, "Invalid fault rule"},
		{url.Values{"kind": {"server-busy"}, "entity": {"q"}, "op": {"receive"}}, "Invalid fault rule"},
		{url.Values{"kind": {"server-busy"}, "entity": {"q"}, "count": {"many"}}, "not a whole number"},
		{url.Values{"kind": {"delay"}, "entity": {"q"}, "delay": {"long"}}, "not a duration"},
		{url.Values{"kind": {"server-busy"}, "entity": {"q"}, "ttl": {"48h"}}, "Invalid fault rule"},
	} {
		if st, body := add(admin, ac, c.f); st != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Fatalf("%v: %d %s", c.f, st, body)
		}
	}
	if len(fs.List()) != 0 {
		t.Fatal("a refused rule was added")
	}
	if st, body := add(admin, ac, url.Values{"kind": {"server-busy"}, "entity": {"q"}, "count": {"3"}, "retryAfter": {"1s"}, "description": {"busy q"}}); st != http.StatusSeeOther {
		t.Fatalf("add: %d %s", st, body)
	}
	if st, _ := add(admin, ac, url.Values{"kind": {"lock-lost"}, "entity": {"*"}}); st != http.StatusSeeOther {
		t.Fatalf("add: %d", st)
	}
	rules := fs.List()
	if len(rules) != 2 || rules[0].Kind != faults.ServerBusy || rules[0].Remaining != 3 || time.Duration(rules[0].RetryAfter) != time.Second {
		t.Fatalf("rules: %+v", rules)
	}
	st, body := e.get(admin, "faults")
	if st != http.StatusOK || !strings.Contains(body, rules[0].ID) || !strings.Contains(body, "busy q") || !strings.Contains(body, "lock-lost") || !strings.Contains(body, fmtTime(rules[0].Expires)) {
		t.Fatalf("faults page: %d\n%s", st, body)
	}
	if st, _ := e.post(admin, "faults/clear", url.Values{"csrf": {ac}}, ""); st != http.StatusBadRequest || len(fs.List()) != 2 {
		t.Fatalf("clear with neither id nor all: %d", st)
	}
	if st, _ := e.post(admin, "faults/clear", url.Values{"csrf": {ac}, "id": {"nosuch"}}, ""); st != http.StatusNotFound {
		t.Fatalf("clear unknown: %d", st)
	}
	if st, _ := e.post(admin, "faults/clear", url.Values{"csrf": {ac}, "id": {rules[0].ID}}, ""); st != http.StatusSeeOther || len(fs.List()) != 1 {
		t.Fatalf("clear one: %d %d", st, len(fs.List()))
	}
	if st, _ := e.post(admin, "faults/clear", url.Values{"csrf": {ac}, "all": {"1"}}, ""); st != http.StatusSeeOther || len(fs.List()) != 0 {
		t.Fatalf("clear all: %d %d", st, len(fs.List()))
	}
}

// TestToolsOff: without a test clock or fault injector neither page nor
// link exists.
func TestToolsOff(t *testing.T) {
	e := newEnv(t, nil)
	admin := e.client()
	ac := e.signIn(admin, "admin", "admin-key")
	if _, body := e.get(admin, ""); strings.Contains(body, `href="`+Prefix+`time"`) || strings.Contains(body, `href="`+Prefix+`faults"`) {
		t.Fatal("links to tools that are off")
	}
	for _, p := range []string{"time", "faults"} {
		if st, _ := e.get(admin, p); st != http.StatusNotFound {
			t.Fatalf("GET %s: %d", p, st)
		}
	}
	if st, _ := e.post(admin, "time/advance", url.Values{"csrf": {ac}, "by": {"1h"}}, ""); st != http.StatusNotFound && st != http.StatusMethodNotAllowed {
		t.Fatalf("advance: %d", st)
	}
}
