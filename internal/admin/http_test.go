package admin

// Tests of the HTTP surface with raw requests: what clients other than Go
// send (JS bodies, .NET lower-case paths, junk query parameters), and the
// exact status codes, headers and error bodies.

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
)

type testFeed struct {
	Title string `xml:"title"`
	Links []struct {
		Rel  string `xml:"rel,attr"`
		Href string `xml:"href,attr"`
	} `xml:"link"`
	Entries []struct {
		ID    string `xml:"id"`
		Title string `xml:"title"`
	} `xml:"entry"`
}

func (f testFeed) link(rel string) string {
	for _, l := range f.Links {
		if l.Rel == rel {
			return l.Href
		}
	}
	return ""
}

func (f testFeed) titles() []string {
	var ts []string
	for _, e := range f.Entries {
		ts = append(ts, e.Title)
	}
	return ts
}

// list GETs a feed and fails unless it is a 200 feed.
func (e *env) list(path string) testFeed {
	e.t.Helper()
	status, hdr, body := e.do("GET", path, "")
	if status != http.StatusOK || hdr.Get("Content-Type") != contentTypeFeed {
		e.t.Fatalf("GET %s: %d %s\n%s", path, status, hdr.Get("Content-Type"), body)
	}
	var f testFeed
	if err := xml.Unmarshal([]byte(body), &f); err != nil {
		e.t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
	return f
}

type testError struct {
	Code   int    `xml:"Code"`
	Detail string `xml:"Detail"`
}

// fails sends a request that must fail with status, and checks the error
// body's shape and that its detail mentions texts.
func (e *env) fails(status int, method, path, body string, headersAndTexts ...string) testError {
	e.t.Helper()
	var headers, texts []string
	for i, s := range headersAndTexts {
		if strings.HasPrefix(s, "~") {
			texts = append(texts, s[1:])
		} else {
			headers = append(headers, headersAndTexts[i])
		}
	}
	got, hdr, b := e.do(method, path, body, headers...)
	if got != status {
		e.t.Fatalf("%s %s: status %d, want %d\n%s", method, path, got, status, b)
	}
	if ct := hdr.Get("Content-Type"); ct != contentTypeError {
		e.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	var te testError
	if err := xml.Unmarshal([]byte(b), &te); err != nil || te.Code != status {
		e.t.Fatalf("%s %s: error body %q (%v)", method, path, b, err)
	}
	if !strings.Contains(te.Detail, "TrackingId:") {
		e.t.Errorf("%s %s: detail without TrackingId: %q", method, path, te.Detail)
	}
	for _, s := range texts {
		if !strings.Contains(te.Detail, s) {
			e.t.Errorf("%s %s: detail %q does not mention %q", method, path, te.Detail, s)
		}
	}
	return te
}

func TestHTTPListPaging(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"c", "a", "E", "b", "d"} {
		e.queue(n)
	}
	// Percent-encoded $skip/$top (Go, JS), junk (Go's "?" parameter),
	// .NET's enrich, and path words in any case.
	f := e.list("/$resources/QUEUES?%24skip=1&%24top=2&%3F=&enrich=false&api-version=2021-05")
	if f.Title != "Queues" || !slices.Equal(f.titles(), []string{"b", "c"}) {
		t.Errorf("page: %q %v", f.Title, f.titles())
	}
	base := "https://" + e.host + "/$Resources/Queues?"
	if got, want := f.link("self"), base+"$skip=1&$top=2&api-version=2021-05"; got != want {
		t.Errorf("self = %s; want %s", got, want)
	}
	next := f.link("next")
	if want := base + "$skip=3&$top=2&api-version=2021-05"; next != want {
		t.Fatalf("next = %s; want %s", next, want)
	}
	if id := f.Entries[0].ID; id != "https://"+e.host+"/b?api-version=2021-05" {
		t.Errorf("entry id %s", id)
	}

	// Following next links, as the JS client does, walks the rest.
	f = e.list(strings.TrimPrefix(next, "https://"+e.host))
	if !slices.Equal(f.titles(), []string{"d", "E"}) || f.link("next") != "" {
		t.Errorf("last page %v, next %q", f.titles(), f.link("next"))
	}
	f = e.list("/$Resources/Queues?$skip=5&$top=2")
	if !slices.Equal(f.titles(), []string(nil)) || f.link("next") != "" || f.link("self") == "" {
		t.Errorf("past the end: %v, links %+v", f.titles(), f.Links)
	}

	// Without paging parameters: everything, a self link and no next.
	f = e.list("/$Resources/Queues")
	if !slices.Equal(f.titles(), []string{"a", "b", "c", "d", "E"}) || len(f.Links) != 1 {
		t.Errorf("all: %v, links %+v", f.titles(), f.Links)
	}
	if self := f.link("self"); self != "https://"+e.host+"/$Resources/Queues" {
		t.Errorf("self without api-version: %s", self)
	}

	for _, q := range []string{"%24top=0", "$top=-1", "$top=two", "$skip=-1", "$SKIP=x"} {
		name := strings.ToLower(strings.SplitN(strings.ReplaceAll(q, "%24", "$"), "=", 2)[0])
		e.fails(400, "GET", "/$Resources/Queues?"+q, "", "~"+name)
	}
}

// TestHTTPPageCap: $top is cut to 100, and 100 is the default.
func TestHTTPPageCap(t *testing.T) {
	e := newEnv(t)
	for i := range 101 {
		e.queue(fmt.Sprintf("q%03d", i))
	}
	for _, q := range []string{"", "?$top=500"} {
		f := e.list("/$Resources/Queues" + q)
		if len(f.Entries) != 100 || f.Entries[99].Title != "q099" || !strings.Contains(f.link("next"), "$skip=100") {
			t.Errorf("%q: %d entries, next %q", q, len(f.Entries), f.link("next"))
		}
	}
	f := e.list("/$Resources/Queues?$skip=100")
	if !slices.Equal(f.titles(), []string{"q100"}) || f.link("next") != "" {
		t.Errorf("last page %v, next %q", f.titles(), f.link("next"))
	}
}

const jsCreateBody = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>` +
	`<entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-21T12:00:00.000Z</updated><content type="application/xml">` +
	`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
	`<LockDuration>PT45S</LockDuration><MaxDeliveryCount>4</MaxDeliveryCount>` +
	`<AuthorizationRules><AuthorizationRule xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="SharedAccessAuthorizationRule">` +
	`<ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue><Rights><AccessRights>Send</AccessRights></Rights><KeyName>sender</KeyName>` +
	`</AuthorizationRule></AuthorizationRules>` +
	`<EnablePartitioning>false</EnablePartitioning></QueueDescription></content></entry>`

// TestHTTPCreateGetUpdateDelete walks a queue's life with JS-style bodies
// and checks statuses, content types and that a GET's body, sent back as
// an update (as JS 7.9.5 does), is accepted.
func TestHTTPCreateGetUpdateDelete(t *testing.T) {
	e := newEnv(t)
	ct := "application/atom+xml;type=entry;charset=utf-8"
	status, hdr, body := e.do("PUT", "/orders?api-version=2021-05", jsCreateBody, "Content-Type", ct)
	if status != http.StatusCreated || hdr.Get("Content-Type") != contentTypeEntry {
		t.Fatalf("create: %d %s\n%s", status, hdr.Get("Content-Type"), body)
	}
	for _, s := range []string{"<LockDuration>PT45S</LockDuration>", "<MaxDeliveryCount>4</MaxDeliveryCount>", "<KeyName>sender</KeyName>", "<AccessRights>Send</AccessRights>"} {
		if !strings.Contains(body, s) {
			t.Errorf("created entry lacks %s", s)
		}
	}
	e.fails(409, "PUT", "/ORDERS", jsCreateBody, "~SubCode=40900")

	// GET, case-insensitively.
	status, _, got := e.do("GET", "/Orders?api-version=2021-05", "")
	if status != http.StatusOK {
		t.Fatalf("get: %d\n%s", status, got)
	}
	e.clk.Advance(time.Minute)

	// Round trip: the GET's own body, changed, goes back with If-Match.
	update := strings.Replace(got, "<MaxDeliveryCount>4</MaxDeliveryCount>", "<MaxDeliveryCount>9</MaxDeliveryCount>", 1)
	status, _, body = e.do("PUT", "/orders", update, "If-Match", "*")
	if status != http.StatusOK || !strings.Contains(body, "<MaxDeliveryCount>9</MaxDeliveryCount>") {
		t.Fatalf("update: %d\n%s", status, body)
	}
	info, err := e.b.GetQueue("orders")
	if err != nil {
		t.Fatal(err)
	}
	if p := info.Properties; p.MaxDeliveryCount != 9 || p.LockDuration != 45*time.Second || len(p.AuthorizationRules) != 1 ||
		!p.AuthorizationRules[0].CreatedTime.IsZero() || !info.UpdatedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("after update: %+v", info)
	}

	// An update with an immutable change, and one of a missing queue.
	e.fails(400, "PUT", "/orders", strings.Replace(got, "<RequiresSession>false", "<RequiresSession>true", 1), "If-Match", "*", "~RequiresSession")
	e.fails(404, "PUT", "/other", got, "If-Match", "*", "~other")

	status, hdr, body = e.do("DELETE", "/orders", "")
	if status != http.StatusOK || body != "" || hdr.Get("Content-Type") != "" {
		t.Errorf("delete: %d %q %q", status, hdr.Get("Content-Type"), body)
	}
	e.fails(404, "GET", "/orders", "", "~SubCode=40400", "~'orders'")
	e.fails(404, "DELETE", "/orders", "")
}

func TestHTTPErrors(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	_, hdr, _ := e.do("POST", "/q", "")
	if hdr.Get("Allow") != "DELETE, GET, PUT" {
		t.Errorf("Allow = %q", hdr.Get("Allow"))
	}
	e.fails(405, "POST", "/q", "", "~POST")
	e.fails(405, "PUT", "/$namespaceinfo", "", "~GET")
	e.fails(405, "DELETE", "/$Resources/Queues", "")
	e.fails(400, "GET", "/", "", "~$Resources/Queues")
	e.fails(400, "GET", "/$Resources/Widgets", "")
	e.fails(400, "GET", "/bad%20name", "", "~bad name")
	e.fails(400, "GET", "/q/$DeadLetterQueue", "", "~sub-queue")
	e.fails(400, "PUT", "/q/$DeadLetterQueue", jsCreateBody, "If-Match", "*", "~sub-queue")
	e.fails(400, "PUT", "/new", "", "~empty")
	e.fails(400, "PUT", "/new", "<entry", "~well-formed")
	e.fails(400, "PUT", "/new", `<entry xmlns="http://www.w3.org/2005/Atom"><content><SubscriptionDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>`, "~SubscriptionDescription")
	e.fails(413, "PUT", "/new", "<entry>"+strings.Repeat(" ", maxBodyBytes)+"</entry>")
	if _, err := e.b.GetQueue("new"); err == nil {
		t.Error("a failed PUT created a queue")
	}
}

func TestHTTPAuth(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.queue("other")
	url := func(p string) string { return "https://" + e.host + "/" + p }
	e.fails(401, "GET", "/q", "", "Authorization", "", "~SubCode=40100", "~MissingToken")
	e.fails(401, "GET", "/q", "", "Authorization", "Bearer eyJ0eXAi", "~not a JWT")
	e.fails(401, "GET", "/q", "", "Authorization", "SharedAccessSignature sr=x")
	e.fails(401, "GET", "/q", "", "Authorization", auth.NewToken(auth.DefaultKeyName, "wrong", url("q"), time.Now().Add(time.Hour)), "~signature")
	e.fails(401, "GET", "/q", "", "Authorization", auth.NewToken("nobody", auth.DefaultKey, url("q"), time.Now().Add(time.Hour)), "~nobody")
	e.fails(401, "GET", "/q", "", "Authorization", auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, url("q"), time.Now().Add(-time.Minute)), "~expired")
	// A token for one entity does not open another, nor the lists.
	forOther := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, url("other"), time.Now().Add(time.Hour))
	e.fails(401, "GET", "/q", "", "Authorization", forOther, "~audience")
	e.fails(401, "GET", "/$Resources/Queues", "", "Authorization", forOther)
	if status, _, body := e.do("GET", "/other", "", "Authorization", forOther); status != http.StatusOK {
		t.Errorf("entity token on its entity: %d\n%s", status, body)
	}
}

// TestHTTPForwardingAuthorization: forwarding needs Send rights on the
// target, from the request's token or the supplementary header (§1.4).
func TestHTTPForwardingAuthorization(t *testing.T) {
	e := newEnvWith(t, auth.Config{Policies: []auth.Policy{
		auth.DefaultPolicy(),
		{Name: "listener", PrimaryKey: "listen-key", Rights: auth.Listen},
	}})
	e.queue("dst")
	e.queue("dlq")
	forSrc := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "https://"+e.host+"/src", time.Now().Add(time.Hour))
	body := func(elem, target string) string {
		return `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
			"<" + elem + ">" + target + "</" + elem + "></QueueDescription></content></entry>"
	}
	const supp, dlqSupp = "ServiceBusSupplementaryAuthorization", "ServiceBusDlqSupplementaryAuthorization"

	e.fails(401, "PUT", "/src", body("ForwardTo", "dst"), "Authorization", forSrc, "~"+supp, "~'dst'")
	e.fails(401, "PUT", "/src", body("ForwardDeadLetteredMessagesTo", "dlq"), "Authorization", forSrc, "~"+dlqSupp)
	// A supplementary token whose key cannot Send.
	listen := auth.NewToken("listener", "listen-key", "dst", time.Now().Add(time.Hour))
	e.fails(401, "PUT", "/src", body("ForwardTo", "dst"), "Authorization", forSrc, supp, listen, "~Send")
	// A supplementary token for another entity.
	wrong := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "dlq", time.Now().Add(time.Hour))
	e.fails(401, "PUT", "/src", body("ForwardTo", "dst"), "Authorization", forSrc, supp, wrong, "~"+supp)

	// JS signs the supplementary token for the namespace host.
	jsStyle := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, e.host, time.Now().Add(time.Hour))
	status, _, b := e.do("PUT", "/src", body("ForwardTo", "sb://"+e.host+"/dst"), "Authorization", forSrc, supp, jsStyle)
	if status != http.StatusCreated || !strings.Contains(b, "<ForwardTo>sb://"+e.host+"/dst</ForwardTo>") {
		t.Fatalf("create with supplementary token: %d\n%s", status, b)
	}
	// A namespace-wide Manage token needs no supplementary header; a bare
	// name comes back as an sb:// URI.
	status, _, b = e.do("PUT", "/src2", body("ForwardDeadLetteredMessagesTo", "dlq"))
	if status != http.StatusCreated || !strings.Contains(b, "<ForwardDeadLetteredMessagesTo>sb://"+e.host+"/dlq</ForwardDeadLetteredMessagesTo>") {
		t.Fatalf("create with namespace token: %d\n%s", status, b)
	}
}

// TestHTTPClosedBroker: a closed broker is a 503, which clients retry.
func TestHTTPClosedBroker(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	e.fails(503, "GET", "/q", "", "~shutting down")
	e.fails(503, "PUT", "/q2", jsCreateBody)
}

// TestDataFunctions: the endpoints' data functions work without HTTP.
func TestDataFunctions(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"b", "a", "c"} {
		if _, err := e.h.CreateQueue(n, props(lockAndCount)); err != nil {
			t.Fatal(err)
		}
	}
	page := e.h.ListQueues(ListOptions{Skip: 1, Top: 1})
	if len(page.Queues) != 1 || page.Queues[0].Name != "b" || !page.More {
		t.Errorf("page %+v", page)
	}
	if page := e.h.ListQueues(ListOptions{Skip: 5}); len(page.Queues) != 0 || page.More {
		t.Errorf("past the end %+v", page)
	}
	q, err := e.h.UpdateQueue("a", props())
	if err != nil || q.Properties.MaxDeliveryCount != 10 {
		t.Errorf("UpdateQueue = %+v, %v", q, err)
	}
	if err := e.h.DeleteQueue("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.GetQueue("a"); err == nil {
		t.Error("deleted queue still there")
	}
	if ns := e.h.NamespaceInfo(); ns.Name != "testns" || ns.SKU != "Standard" || !ns.CreatedTime.Equal(t0) {
		t.Errorf("NamespaceInfo = %+v", ns)
	}
	if _, err := New(Options{Broker: e.b}); err == nil {
		t.Error("New without Auth succeeded")
	}
}
