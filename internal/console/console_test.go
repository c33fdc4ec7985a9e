package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

type env struct {
	t    *testing.T
	b    *broker.Broker
	c    *Console
	clk  *clock.Fake
	logs *bytes.Buffer
	srv  *httptest.Server
}

func newEnv(t *testing.T, auto *auth.Grant) *env {
	t.Helper()
	return newEnvOn(t, auto, memstore.New())
}

// newEnvOn is newEnv on the store st, which the env closes.
func newEnvOn(t *testing.T, auto *auth.Grant, st store.Store) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	b, err := broker.Open(broker.Options{Store: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Clock: clk, Policies: []auth.Policy{
		{Name: "admin", PrimaryKey: "admin-key", Rights: auth.Manage},
		{Name: "reader", PrimaryKey: "reader-key", Rights: auth.Listen}}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	c, err := New(Options{Broker: b, Auth: a, Clock: clk, AutoSignIn: auto, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, b: b, c: c, clk: clk, logs: logs}
	e.srv = httptest.NewServer(c)
	t.Cleanup(func() { e.srv.Close(); c.Close(); b.Close(); st.Close() })
	return e
}

// client is a browser-like client: a cookie jar, no redirects followed.
func (e *env) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (e *env) url(p string) string { return e.srv.URL + Prefix + p }

func (e *env) get(c *http.Client, p string) (int, string) {
	e.t.Helper()
	resp, err := c.Get(e.url(p))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (e *env) post(c *http.Client, p string, form url.Values, origin string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url(p), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs c in and returns the session's CSRF token.
func (e *env) signIn(c *http.Client, keyName, key string) string {
	e.t.Helper()
	if st, body := e.post(c, "login", url.Values{"keyName": {keyName}, "key": {key}}, e.srv.URL); st != http.StatusSeeOther {
		e.t.Fatalf("sign in as %s: %d %s", keyName, st, body)
	}
	_, body := e.get(c, "")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		e.t.Fatalf("no CSRF token on the overview: %s", body)
	}
	return m[1]
}

func TestSignIn(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client()
	if st, _ := e.get(c, ""); st != http.StatusSeeOther {
		t.Fatalf("signed out overview: %d, want a redirect to the sign-in page", st)
	}
	st, body := e.post(c, "login", url.Values{"keyName": {"admin"}, "key": {"wrong-key"}}, e.srv.URL)
	if st != http.StatusUnauthorized || !strings.Contains(body, "class=\"error\"") {
		t.Fatalf("wrong key: %d", st)
	}
	// A SAS token signs in too; it never reaches the log, nor does a key.
	tok := auth.NewToken("reader", "reader-key", "sb://"+strings.TrimPrefix(e.srv.URL, "http://")+"/", t0.Add(time.Hour))
	if st, body := e.post(c, "login", url.Values{"token": {tok}}, e.srv.URL); st != http.StatusSeeOther {
		t.Fatalf("token sign-in: %d %s", st, body)
	}
	if st, body := e.get(c, ""); st != http.StatusOK || !strings.Contains(body, "<strong>reader</strong>") {
		t.Fatalf("overview after token sign-in: %d", st)
	}
	for _, secret := range []string{"wrong-key", "reader-key", "sig=", tok} {
		if strings.Contains(e.logs.String(), secret) {
			t.Fatalf("the log holds a secret (%q): %s", secret, e.logs.String())
		}
	}
	// The session ends with the token.
	e.clk.Advance(time.Hour)
	if st, _ := e.get(c, ""); st != http.StatusSeeOther {
		t.Fatalf("after the token expired: %d", st)
	}
}

// TestRightsAndCSRF: Listen looks, Manage changes; every change needs the
// session's CSRF token and a same-origin request.
func TestRightsAndCSRF(t *testing.T) {
	e := newEnv(t, nil)
	reader, admin := e.client(), e.client()
	rc := e.signIn(reader, "reader", "reader-key")
	ac := e.signIn(admin, "admin", "admin-key")
	create := func(c *http.Client, csrf, origin, name string) int {
		st, _ := e.post(c, "create", url.Values{"csrf": {csrf}, "kind": {"queue"}, "name": {name}}, origin)
		return st
	}
	if st := create(reader, rc, e.srv.URL, "q1"); st != http.StatusForbidden {
		t.Fatalf("reader created a queue: %d", st)
	}
	if st := create(admin, "", e.srv.URL, "q1"); st != http.StatusForbidden {
		t.Fatalf("no CSRF token: %d", st)
	}
	if st := create(admin, rc, e.srv.URL, "q1"); st != http.StatusForbidden {
		t.Fatalf("another session's CSRF token: %d", st)
	}
	if st := create(admin, ac, "https://evil.example", "q1"); st != http.StatusForbidden {
		t.Fatalf("cross-origin POST: %d", st)
	}
	if len(e.b.ListQueues()) != 0 {
		t.Fatal("a refused request created a queue")
	}
	if st := create(admin, ac, e.srv.URL, "q1"); st != http.StatusSeeOther {
		t.Fatalf("admin create: %d", st)
	}
	if _, err := e.b.GetQueue("q1"); err != nil {
		t.Fatal(err)
	}
	// The reader sees it, cannot send to it.
	if st, body := e.get(reader, "messages?path=q1"); st != http.StatusOK || !strings.Contains(body, "No messages match") {
		t.Fatalf("reader inspect: %d", st)
	}
	if st, _ := e.post(reader, "send", url.Values{"csrf": {rc}, "path": {"q1"}, "body": {"x"}}, ""); st != http.StatusForbidden {
		t.Fatalf("reader sent: %d", st)
	}
	// Bad input gets a clear error, with the broker's mapping.
	if st, body := e.post(admin, "create", url.Values{"csrf": {ac}, "kind": {"queue"}, "name": {"-bad"}}, ""); st != http.StatusBadRequest || !strings.Contains(body, "-bad") {
		t.Fatalf("bad name: %d %s", st, body)
	}
	if st, _ := e.get(admin, "entity?path=nope"); st != http.StatusNotFound {
		t.Fatalf("missing entity: %d", st)
	}
}

// TestAutoSignIn: with the development grant, loopback browsers open
// signed in; others do not.
func TestAutoSignIn(t *testing.T) {
	e := newEnv(t, &auth.Grant{KeyName: auth.DefaultKeyName, Rights: auth.Manage})
	for _, tc := range []struct {
		remote string
		want   int
	}{{"127.0.0.1:4000", http.StatusOK}, {"[::1]:4000", http.StatusOK}, {"192.0.2.7:4000", http.StatusSeeOther}} {
		req := httptest.NewRequest(http.MethodGet, Prefix, nil)
		req.RemoteAddr = tc.remote
		rec := httptest.NewRecorder()
		e.c.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.remote, rec.Code, tc.want)
		}
	}
}

func TestSessionsBounded(t *testing.T) {
	e := newEnv(t, &auth.Grant{KeyName: "k", Rights: auth.Listen})
	for range maxSessions + 10 {
		req := httptest.NewRequest(http.MethodGet, Prefix, nil)
		req.RemoteAddr = "127.0.0.1:1"
		e.c.ServeHTTP(httptest.NewRecorder(), req)
	}
	e.c.mu.Lock()
	n := len(e.c.sessions)
	e.c.mu.Unlock()
	if n != maxSessions {
		t.Fatalf("%d sessions kept, want %d", n, maxSessions)
	}
}

func deadLetterN(t testing.TB, b *broker.Broker, q string, n int, reason string) {
	t.Helper()
	for i := 0; i < n; i += 256 {
		k := min(256, n-i)
		msgs := make([]*message.Message, k)
		for j := range msgs {
			msgs[j] = &message.Message{Body: encodeDataBody([]byte(fmt.Sprint(i + j)))}
		}
		if err := b.Send(context.Background(), q, msgs); err != nil {
			t.Fatal(err)
		}
		r, err := b.OpenReceiver(q, broker.PeekLock)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := r.TryReceive(k)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := b.DeadLetter(context.Background(), q, d.LockToken, reason, "", nil); err != nil {
				t.Fatal(err)
			}
		}
		r.Close()
	}
}

// TestBulkJob: a bulk resubmit by reason moves exactly the matching dead
// letters; Close stops a running job and its goroutine.
func TestBulkJob(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newEnv(t, nil)
	if _, err := e.b.CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	deadLetterN(t, e.b, "q", 3000, "bad")
	deadLetterN(t, e.b, "q", 10, "other")
	j, err := e.c.jobs.start(jobSpec{path: "q/$DeadLetterQueue", target: "q", reason: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for j.snapshot().Running {
		if time.Now().After(deadline) {
			t.Fatalf("job still running: %+v", j.snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
	v := j.snapshot()
	qi, _ := e.b.GetQueue("q")
	if v.State != "done" || v.Done != 3000 || v.Matched != 3000 || qi.Counts.Active != 3000 || qi.Counts.DeadLetter != 10 {
		t.Fatalf("job %+v, counts %+v", v, qi.Counts)
	}
	// A job cut short by Close leaves every message in exactly one place.
	j2, err := e.c.jobs.start(jobSpec{path: "q/$DeadLetterQueue", delete: true})
	if err != nil {
		t.Fatal(err)
	}
	e.c.Close()
	v = j2.snapshot()
	qi, _ = e.b.GetQueue("q")
	if v.Running || int64(10-v.Done) != qi.Counts.DeadLetter {
		t.Fatalf("after Close: job %+v, counts %+v", v, qi.Counts)
	}
	e.srv.Close()
}

// formOf is the entity form as the page renders it, with changes.
func formOf(csrf, path string, props any, changes map[string]string) url.Values {
	f := url.Values{"csrf": {csrf}, "path": {path}}
	for _, fl := range fieldsOf(props) {
		if fl.Immutable {
			continue // disabled inputs are not submitted
		}
		switch {
		case fl.Kind == "bool" && fl.Checked:
			f.Set(fl.Name, "1")
		case fl.Kind != "bool":
			f.Set(fl.Name, fl.Value)
		}
	}
	for k, v := range changes {
		if v == "" {
			f.Del(k)
		} else {
			f.Set(k, v)
		}
	}
	return f
}

// TestEditPurgeDelete: the properties form round-trips and changes what it
// says; purge and delete need the entity's name typed.
func TestEditPurgeDelete(t *testing.T) {
	e := newEnv(t, nil)
	admin := e.client()
	csrf := e.signIn(admin, "admin", "admin-key")
	qi, err := e.b.CreateQueue("q", broker.DefaultQueueProperties())
	if err != nil {
		t.Fatal(err)
	}
	// Unchanged form: unchanged properties.
	if st, body := e.post(admin, "entity/update", formOf(csrf, "q", &qi.Properties, nil), ""); st != http.StatusSeeOther {
		t.Fatalf("update: %d %s", st, body)
	}
	after, _ := e.b.GetQueue("q")
	if after.Properties.LockDuration != qi.Properties.LockDuration || after.Properties.DefaultMessageTimeToLive != broker.Infinite ||
		after.Properties.EnableBatchedOperations != qi.Properties.EnableBatchedOperations || after.Properties.MaxDeliveryCount != qi.Properties.MaxDeliveryCount {
		t.Fatalf("an unchanged form changed the queue: %+v → %+v", qi.Properties, after.Properties)
	}
	changes := map[string]string{"MaxDeliveryCount": "5", "LockDuration": "30s", "Status": "SendDisabled", "DeadLetteringOnMessageExpiration": "1", "EnableBatchedOperations": ""}
	if st, body := e.post(admin, "entity/update", formOf(csrf, "q", &qi.Properties, changes), ""); st != http.StatusSeeOther {
		t.Fatalf("update: %d %s", st, body)
	}
	after, _ = e.b.GetQueue("q")
	p := after.Properties
	if p.MaxDeliveryCount != 5 || p.LockDuration != 30*time.Second || p.Status != broker.StatusSendDisabled || !p.DeadLetteringOnMessageExpiration || p.EnableBatchedOperations {
		t.Fatalf("after the update: %+v", p)
	}
	if st, body := e.post(admin, "entity/update", formOf(csrf, "q", &qi.Properties, map[string]string{"LockDuration": "soon"}), ""); st != http.StatusBadRequest || !strings.Contains(body, "LockDuration") {
		t.Fatalf("bad duration: %d", st)
	}
	// Purge needs the name.
	p.Status = broker.StatusActive
	if _, err := e.b.UpdateQueue("q", p); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Send(context.Background(), "q", []*message.Message{{Body: encodeDataBody([]byte("a"))}, {Body: encodeDataBody([]byte("b"))}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.post(admin, "purge", url.Values{"csrf": {csrf}, "path": {"q"}, "confirm": {"x"}}, ""); st != http.StatusBadRequest {
		t.Fatalf("purge without confirmation: %d", st)
	}
	if st, _ := e.post(admin, "purge", url.Values{"csrf": {csrf}, "path": {"q"}, "confirm": {"q"}}, ""); st != http.StatusSeeOther {
		t.Fatalf("purge: %d", st)
	}
	if qi, _ := e.b.GetQueue("q"); qi.Counts.Total != 0 {
		t.Fatalf("after purge: %+v", qi.Counts)
	}
	if st, _ := e.post(admin, "entity/delete", url.Values{"csrf": {csrf}, "path": {"q"}}, ""); st != http.StatusBadRequest {
		t.Fatalf("delete without confirmation: %d", st)
	}
	if st, _ := e.post(admin, "entity/delete", url.Values{"csrf": {csrf}, "path": {"q"}, "confirm": {"q"}}, ""); st != http.StatusSeeOther {
		t.Fatalf("delete: %d", st)
	}
	if _, err := e.b.GetQueue("q"); broker.KindOf(err) != broker.KindNotFound {
		t.Fatalf("queue still there: %v", err)
	}
}

// TestEditAndResubmit: one dead letter, its body and properties edited,
// resubmitted to another queue.
func TestEditAndResubmit(t *testing.T) {
	e := newEnv(t, nil)
	admin := e.client()
	csrf := e.signIn(admin, "admin", "admin-key")
	for _, q := range []string{"q", "fixed"} {
		if _, err := e.b.CreateQueue(q, broker.DefaultQueueProperties()); err != nil {
			t.Fatal(err)
		}
	}
	deadLetterN(t, e.b, "q", 2, "bad")
	st, body := e.get(admin, "message?path=q&sub=dlq&seq=1")
	if st != http.StatusOK || !strings.Contains(body, "Edit and resubmit") {
		t.Fatalf("message page: %d", st)
	}
	f := url.Values{"csrf": {csrf}, "path": {"q"}, "sub": {"dlq"}, "seq": {"1"}, "target": {"fixed"},
		"editBody": {`{"fixed": true}`}, "editProps": {"attempt=2\nnote=by hand"}}
	if st, body := e.post(admin, "dlq/resubmit", f, ""); st != http.StatusSeeOther {
		t.Fatalf("resubmit: %d %s", st, body)
	}
	ds, err := e.b.Peek(context.Background(), "fixed", 0, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("fixed: %v %v", ds, err)
	}
	m := ds[0].Message
	if got := decodeBody(m.Body).Text; got != `{"fixed": true}` || m.ApplicationProperties["attempt"] != int64(2) || m.ApplicationProperties["note"] != "by hand" {
		t.Fatalf("resubmitted %q %v", got, m.ApplicationProperties)
	}
	if _, ok := m.ApplicationProperties[broker.PropDeadLetterReason]; ok {
		t.Fatal("the dead-letter reason came along")
	}
	if qi, _ := e.b.GetQueue("q"); qi.Counts.DeadLetter != 1 {
		t.Fatalf("q: %+v", qi.Counts)
	}
}

// TestExport: the exported Config.json is valid (strict) and holds the
// topology: properties, subscriptions, rules.
func TestExport(t *testing.T) {
	e := newEnv(t, nil)
	admin := e.client()
	e.signIn(admin, "admin", "admin-key")
	qp := broker.DefaultQueueProperties()
	qp.MaxDeliveryCount = 3
	qp.LockDuration = 45 * time.Second
	if _, err := e.b.CreateQueue("orders", qp); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CreateTopic("events", broker.DefaultTopicProperties()); err != nil {
		t.Fatal(err)
	}
	eu := &broker.RuleDescription{Name: "eu", Filter: broker.RuleFilter{Kind: broker.FilterSQL, Expression: "region = 'eu'"},
		Action: &broker.SQLAction{Expression: "SET seen = 1"}}
	if _, err := e.b.CreateSubscription("events", "eu", broker.DefaultSubscriptionProperties(), eu); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.CreateSubscription("events", "all", broker.DefaultSubscriptionProperties(), nil); err != nil {
		t.Fatal(err)
	}
	st, body := e.get(admin, "export")
	if st != http.StatusOK {
		t.Fatalf("export: %d %s", st, body)
	}
	cfg, err := config.ParseEmulatorConfig([]byte(body), config.Options{Strict: true})
	if err != nil {
		t.Fatalf("the export does not load: %v\n%s", err, body)
	}
	ns := cfg.Namespaces[0]
	if len(ns.Queues) != 1 || *ns.Queues[0].Props.MaxDeliveryCount != 3 || *ns.Queues[0].Props.LockDuration != 45*time.Second {
		t.Fatalf("queues: %+v", ns.Queues)
	}
	if len(ns.Topics) != 1 || len(ns.Topics[0].Subscriptions) != 2 {
		t.Fatalf("topics: %+v", ns.Topics)
	}
	for _, s := range ns.Topics[0].Subscriptions {
		switch s.Name {
		case "all":
			if len(s.Rules) != 0 {
				t.Fatalf("all: %+v", s.Rules)
			}
		case "eu":
			if len(s.Rules) != 1 || s.Rules[0].Filter.SQL != "region = 'eu'" || s.Rules[0].Action != "SET seen = 1" {
				t.Fatalf("eu: %+v", s.Rules)
			}
		}
	}
}

// TestRates: the overview shows messages per second in and out over the
// interval since the previous sample.
func TestRates(t *testing.T) {
	e := newEnv(t, &auth.Grant{KeyName: "k", Rights: auth.Manage})
	if _, err := e.b.CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	in := 0.0
	e.c.totals = func() map[string]Totals { return map[string]Totals{"q": {In: in, Out: in / 2}} }
	get := func() string {
		req := httptest.NewRequest(http.MethodGet, Prefix, nil)
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		e.c.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	if body := get(); !strings.Contains(body, "<td class=\"num\">—</td>") {
		t.Fatal("first load: no dash for the rate not measured yet")
	}
	in = 100
	e.clk.Advance(10 * time.Second)
	if body := get(); !strings.Contains(body, "<td class=\"num\">10.0</td><td class=\"num\">5.0</td>") {
		t.Fatalf("rates not shown: %s", body)
	}
}

// TestLockHolderAndAbandon: the messages page shows who holds a lock next
// to its expiry, and Abandon raises the chosen messages' delivery count
// (dead-lettering at the maximum), skipping the locked one.
func TestLockHolderAndAbandon(t *testing.T) {
	e := newEnv(t, nil)
	admin := e.client()
	csrf := e.signIn(admin, "admin", "admin-key")
	p := broker.DefaultQueueProperties()
	p.MaxDeliveryCount = 2
	if _, err := e.b.CreateQueue("q", p); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"a", "b", "c"} {
		if err := e.b.Send(context.Background(), "q", []*message.Message{{Body: encodeDataBody([]byte(b))}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := e.b.OpenReceiver("q", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHolder("link worker-7 on connection box-1")
	if ds, err := r.TryReceive(1); err != nil || len(ds) != 1 {
		t.Fatalf("%v %v", ds, err)
	}
	st, body := e.get(admin, "messages?path=q&state=locked")
	if st != http.StatusOK || !strings.Contains(body, `<td class="mono lock-holder">link worker-7 on connection box-1</td>`) {
		t.Fatalf("messages page: %d, no lock holder: %s", st, body)
	}
	if _, body := e.get(admin, "message?path=q&seq=1"); !strings.Contains(body, "link worker-7 on connection box-1") {
		t.Fatal("message page shows no lock holder")
	}
	abandon := func(seqs ...string) string {
		t.Helper()
		f := url.Values{"csrf": {csrf}, "path": {"q"}, "sub": {""}, "seq": seqs, "action": {"abandon"}}
		if st, body := e.post(admin, "messages/delete", f, ""); st != http.StatusSeeOther {
			t.Fatalf("abandon: %d %s", st, body)
		}
		_, body := e.get(admin, "messages?path=q")
		return body
	}
	if body := abandon("1", "2"); !strings.Contains(body, "Abandoned 1 messages; skipped 1 (locked, busy or gone): [1].") {
		t.Fatalf("no flash: %s", body)
	}
	if ds, _ := e.b.Peek(context.Background(), "q", 2, 1); ds[0].DeliveryCount != 2 {
		t.Fatalf("delivery count after abandon: %d", ds[0].DeliveryCount)
	}
	if body := abandon("2"); !strings.Contains(body, "Abandoned 1 messages (1 of them reached the maximum delivery count and were dead-lettered).") {
		t.Fatalf("no flash: %s", body)
	}
	if qi, _ := e.b.GetQueue("q"); qi.Counts.DeadLetter != 1 || qi.Counts.Active != 2 {
		t.Fatalf("counts %+v", qi.Counts)
	}
}

// TestSessionLockHolder: the sessions page shows who holds a locked
// session and until when.
func TestSessionLockHolder(t *testing.T) {
	e := newEnv(t, nil)
	admin := e.client()
	e.signIn(admin, "admin", "admin-key")
	p := broker.DefaultQueueProperties()
	p.RequiresSession = true
	if _, err := e.b.CreateQueue("s", p); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Send(context.Background(), "s", []*message.Message{{SessionID: "cart-1", Body: encodeDataBody([]byte("x"))}}); err != nil {
		t.Fatal(err)
	}
	r, err := e.b.AcceptSession("s", "cart-1", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHolder("link cart-worker on connection box-2")
	st, body := e.get(admin, "sessions?path=s")
	if st != http.StatusOK || !strings.Contains(body, `by <span class="mono lock-holder">link cart-worker on connection box-2</span> until `) {
		t.Fatalf("sessions page: %d: %s", st, body)
	}
}
