package server

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
)

// consoleClient is a browser-like client: cookies kept, redirects followed.
func consoleClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

func consoleGet(t *testing.T, c *http.Client, u string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Request.URL.Path
}

// TestConsolePerKeyNameNamespaces: on loopback with the development key
// the switcher lists a namespace made for a key name, its console signs
// in by itself and shows its entities; once it is deleted its console is
// gone. Unknown names are 404; a name in another case is redirected.
func TestConsolePerKeyNameNamespaces(t *testing.T) {
	cfg := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]}]}}`
	s := start(t, Options{Server: config.Server{Memory: true, NamespacePerKeyName: true}, Entities: loadConfig(t, cfg)})
	defer stop(t, s)
	cs, opts := nsConnectionString(s, "localhost", "run-1")
	if err := sendTo(t, cs, opts, "orders", "x"); err != nil {
		t.Fatal(err)
	}
	origin := "http://" + s.HTTPAddr().String()
	c := consoleClient(t)
	code, page, _ := consoleGet(t, c, origin+"/$console/")
	if code != http.StatusOK || !strings.Contains(page, `data-namespace="run-1"`) || !strings.Contains(page, `href="/$console/ns/run-1/"`) || !strings.Contains(page, "key name</span>") {
		t.Fatalf("root console: %d\n%s", code, page)
	}
	code, page, path := consoleGet(t, c, origin+"/$console/ns/RUN-1/entity?path=orders")
	if code != http.StatusOK || path != "/$console/ns/run-1/entity" || !strings.Contains(page, `id="current-namespace">run-1<`) {
		t.Fatalf("run-1's console: %d at %s\n%s", code, path, page)
	}
	if code, _, _ := consoleGet(t, c, origin+"/$console/ns/nosuch/"); code != http.StatusNotFound {
		t.Fatalf("an unknown namespace's console: %d", code)
	}
	if code, body := adminJSON(t, s, http.MethodDelete, "/$namespaces/run-1", ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, _, _ := consoleGet(t, c, origin+"/$console/ns/run-1/"); code != http.StatusNotFound {
		t.Fatalf("the deleted namespace's console: %d", code)
	}
	if _, page, _ := consoleGet(t, c, origin+"/$console/"); strings.Contains(page, "run-1") {
		t.Fatalf("the switcher still lists run-1:\n%s", page)
	}
}

// TestConsoleSwitcherRights: without the development key nobody is
// signed in automatically; a Manage key of the default namespace sees
// every namespace in the switcher, a Listen key none (only its own).
// Each namespace's console signs in with that namespace's keys.
func TestConsoleSwitcherRights(t *testing.T) {
	cfg := `{"UserConfig": {"Namespaces": [
	  {"Name": "main", "Queues": [{"Name": "orders"}]},
	  {"Name": "other", "Queues": [{"Name": "orders"}], "Policies": "otheradmin=other-key:Manage"}]}}`
	s := start(t, Options{Server: config.Server{Memory: true, Policies: "admin=admin-key:Manage;reader=reader-key:Listen"}, Entities: loadConfig(t, cfg)})
	defer stop(t, s)
	origin := "http://" + s.HTTPAddr().String()
	signIn := func(prefix, keyName, key string) (*http.Client, string) {
		c := consoleClient(t)
		resp, err := c.PostForm(origin+prefix+"login", url.Values{"keyName": {keyName}, "key": {key}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return c, string(b)
	}
	_, page := signIn("/$console/", "admin", "admin-key")
	if !strings.Contains(page, `data-namespace="main"`) || !strings.Contains(page, `data-namespace="other"`) {
		t.Fatalf("admin's switcher:\n%s", page)
	}
	_, page = signIn("/$console/", "reader", "reader-key")
	if strings.Contains(page, "data-namespace") || !strings.Contains(page, `id="current-namespace">main<`) {
		t.Fatalf("reader's header:\n%s", page)
	}
	// other's console takes other's key, not the default namespace's.
	if _, page = signIn("/$console/ns/other/", "admin", "admin-key"); !strings.Contains(page, `id="keyName"`) {
		t.Fatalf("other's console took the default namespace's key:\n%s", page)
	}
	if _, page = signIn("/$console/ns/other/", "otheradmin", "other-key"); !strings.Contains(page, `id="current-namespace">other<`) {
		t.Fatalf("other's console refused its own key:\n%s", page)
	}
}
