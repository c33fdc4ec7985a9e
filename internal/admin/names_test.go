package admin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

// newEnvOnData is newEnv on a copy of a data directory fixture.
func newEnvOnData(t *testing.T, fixture string) *env {
	t.Helper()
	dir := t.TempDir()
	files, err := os.ReadDir(fixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".md") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(fixture, f.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f.Name()), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	st, err := filestore.Open(filestore.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, clk: clock.NewFake(t0)}
	if e.b, err = broker.Open(broker.Options{Store: st, Clock: e.clk}); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if e.h, err = New(Options{Broker: e.b, Auth: a, Clock: e.clk, Namespace: "testns"}); err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewTLSServer(e.h)
	e.host = e.srv.Listener.Addr().String()
	t.Cleanup(func() {
		e.srv.Close()
		if err := e.b.Close(); err != nil {
			t.Errorf("broker.Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store.Close: %v", err)
		}
	})
	return e
}

// TestHTTPLegacyNames: entities an earlier Busbar created under names the
// rule now refuses are listed, shown, updated and deleted by their own
// names (escaped where a URL needs it), and "a/../b" never reaches "b".
func TestHTTPLegacyNames(t *testing.T) {
	e := newEnvOnData(t, "../names/testdata/legacy-data")
	titles := e.list("/$Resources/Queues").titles()
	for _, q := range []string{"-lead", "..", "a/../b", "b", "sq", "sq/../evil2"} {
		if !strings.Contains(strings.Join(titles, "\n")+"\n", q+"\n") {
			t.Errorf("queue list %q misses %q", titles, q)
		}
	}
	_, body := e.get("/a/../b")
	if !strings.Contains(body, "<id>https://"+e.host+"/a/%2E%2E/b</id><title type=\"text\">a/../b</title>") {
		t.Errorf("GET a/../b:\n%s", body)
	}
	_, body = e.get("/a/%2E%2E/b")
	if !strings.Contains(body, `<title type="text">a/../b</title>`) {
		t.Errorf("GET a/%%2E%%2E/b:\n%s", body)
	}
	_, body = e.get("/t/./x")
	if !strings.Contains(body, `<title type="text">t/./x</title>`) {
		t.Errorf("GET t/./x:\n%s", body)
	}

	// A subscription and a rule whose names need escaping.
	_, body = e.get("/t/Subscriptions/my%20sub")
	if !strings.Contains(body, "<id>https://"+e.host+"/t/Subscriptions/my%20sub</id><title type=\"text\">my sub</title>") {
		t.Errorf("subscription entry:\n%s", body)
	}
	f := e.list("/t/Subscriptions/my%20sub/Rules/")
	if self := f.link("self"); self != "https://"+e.host+"/t/Subscriptions/my%20sub/Rules" {
		t.Errorf("self = %s", self)
	}
	if len(f.Entries) != 2 || f.Entries[1].ID != "https://"+e.host+"/t/Subscriptions/my%20sub/Rules/r%201" {
		t.Errorf("rule entries %+v", f.Entries)
	}
	// Updates of existing entities keep working.
	status, _, body := e.do("PUT", "/t/Subscriptions/my%20sub/Rules/r%201", ruleBody(`<Filter i:type="SqlFilter"><SqlExpression>a = 2</SqlExpression></Filter>`), "If-Match", "*")
	if status != http.StatusOK {
		t.Errorf("update rule r 1: %d\n%s", status, body)
	}
	status, _, body = e.do("PUT", "/a/../b", jsCreateBody, "If-Match", "*")
	if status != http.StatusOK || !strings.Contains(body, "<MaxDeliveryCount>4</MaxDeliveryCount>") {
		t.Errorf("update a/../b: %d\n%s", status, body)
	}
	// Deleting them leaves the entities their cleaned paths would name.
	for _, p := range []string{"/a/../b", "/..", "/sq/../evil2", "/-lead", "/t/./x", "/t/Subscriptions/my%20sub/Rules/r%201", "/t/Subscriptions/my%20sub"} {
		if status, _, body := e.do("DELETE", p, ""); status != http.StatusOK {
			t.Errorf("DELETE %s: %d\n%s", p, status, body)
		}
		e.fails(404, "GET", p, "")
	}
	for _, q := range []string{"b", "sq"} {
		qi, err := e.b.GetQueue(q)
		if err != nil || qi.Counts.Active != 1 {
			t.Errorf("queue %q after the deletes: %+v, %v", q, qi.Counts, err)
		}
	}
	if _, err := e.b.GetTopic("t"); err != nil {
		t.Errorf("topic t: %v", err)
	}
}
