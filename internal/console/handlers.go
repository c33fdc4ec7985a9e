package console

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/admin"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// handler is a page handler given the signed-in session.
type handler func(w http.ResponseWriter, r *http.Request, s *session) error

// userError is a failure of the user's input or rights, shown as it is.
type userError struct {
	status int
	msg    string
}

func (e *userError) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &userError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	m.Handle("GET "+c.prefix+"static/", http.StripPrefix(c.prefix+"static/", http.FileServerFS(static)))
	m.HandleFunc("GET "+c.prefix+"login", c.loginPage)
	m.HandleFunc("POST "+c.prefix+"login", c.loginPost)
	m.Handle("POST "+c.prefix+"logout", c.page(0, func(w http.ResponseWriter, r *http.Request, s *session) error {
		c.endSession(w, s)
		http.Redirect(w, r, c.prefix+"login", http.StatusSeeOther)
		return nil
	}))
	m.Handle("GET "+c.prefix+"{$}", c.page(auth.Listen, c.overview))
	m.Handle("POST "+c.prefix+"create", c.page(auth.Manage, c.create))
	m.Handle("GET "+c.prefix+"entity", c.page(auth.Listen, c.entityPage))
	m.Handle("POST "+c.prefix+"entity/update", c.page(auth.Manage, c.entityUpdate))
	m.Handle("POST "+c.prefix+"entity/delete", c.page(auth.Manage, c.entityDelete))
	m.Handle("GET "+c.prefix+"messages", c.page(auth.Listen, c.messagesPage))
	m.Handle("GET "+c.prefix+"message", c.page(auth.Listen, c.messagePage))
	m.Handle("GET "+c.prefix+"message/body", c.page(auth.Listen, c.messageBody))
	m.Handle("GET "+c.prefix+"history", c.page(auth.Listen, c.historyPage))
	m.Handle("POST "+c.prefix+"send", c.page(auth.Send, c.send))
	m.Handle("POST "+c.prefix+"purge", c.page(auth.Manage, c.purge))
	m.Handle("POST "+c.prefix+"messages/delete", c.page(auth.Manage, c.deleteMessages))
	m.Handle("POST "+c.prefix+"messages/cancel", c.page(auth.Manage, c.cancelScheduled))
	m.Handle("GET "+c.prefix+"dlq", c.page(auth.Listen, c.dlqPage))
	m.Handle("POST "+c.prefix+"dlq/resubmit", c.page(auth.Manage, c.dlqResubmit))
	m.Handle("GET "+c.prefix+"jobs/{id}", c.page(auth.Listen, c.jobPage))
	m.Handle("POST "+c.prefix+"jobs/{id}/cancel", c.page(auth.Manage, c.jobCancel))
	m.Handle("GET "+c.prefix+"rules", c.page(auth.Listen, c.rulesPage))
	m.Handle("POST "+c.prefix+"rules/create", c.page(auth.Manage, c.ruleCreate))
	m.Handle("POST "+c.prefix+"rules/delete", c.page(auth.Manage, c.ruleDelete))
	m.Handle("GET "+c.prefix+"tester", c.page(auth.Listen, c.testerPage))
	m.Handle("GET "+c.prefix+"sessions", c.page(auth.Listen, c.sessionsPage))
	m.Handle("POST "+c.prefix+"sessions/state", c.page(auth.Manage, c.sessionState))
	m.Handle("GET "+c.prefix+"scheduled", c.page(auth.Listen, c.scheduledPage))
	m.Handle("GET "+c.prefix+"export", c.page(auth.Manage, c.export))
	if c.testClock != nil {
		m.Handle("GET "+c.prefix+"time", c.page(auth.Manage, c.timePage))
		m.Handle("POST "+c.prefix+"time/advance", c.page(auth.Manage, c.timeAdvance))
		m.Handle("POST "+c.prefix+"time/set", c.page(auth.Manage, c.timeSet))
	}
	if c.faults != nil {
		m.Handle("GET "+c.prefix+"faults", c.page(auth.Manage, c.faultsPage))
		m.Handle("POST "+c.prefix+"faults/add", c.page(auth.Manage, c.faultAdd))
		m.Handle("POST "+c.prefix+"faults/clear", c.page(auth.Manage, c.faultClear))
	}
	c.mux = m
}

// page wraps h: a session is required (else the sign-in page), the
// grant must hold right, and a POST must carry the session's CSRF token
// and come from this origin.
func (c *Console) page(right auth.Rights, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		s := c.sessionOf(w, r)
		if s == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, c.prefix+"login", http.StatusSeeOther)
				return
			}
			c.fail(w, r, nil, &userError{status: http.StatusUnauthorized, msg: "Your console session has ended; sign in again."})
			return
		}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				c.fail(w, r, s, badInput("The form could not be read: %v", err))
				return
			}
			if !sameOrigin(r) || !tokenEqual(r.PostForm.Get("csrf"), s.csrf) {
				c.fail(w, r, s, &userError{status: http.StatusForbidden, msg: "The form's security token is missing or stale (CSRF check); reload the page and try again."})
				return
			}
		}
		if right != 0 && !s.grant.Rights.Has(right) {
			c.fail(w, r, s, &userError{status: http.StatusForbidden, msg: fmt.Sprintf("This needs the %s right; the key '%s' grants %s.", right, s.grant.KeyName, s.grant.Rights)})
			return
		}
		if err := h(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	})
}

// fail renders err on the error page with its status: broker and auth
// errors through the admin API's mapping (admin.HTTPStatus).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status, msg := http.StatusInternalServerError, ""
	var ue *userError
	if errors.As(err, &ue) {
		status, msg = ue.status, ue.msg
	} else {
		status, msg = admin.HTTPStatus(err)
	}
	if status >= 500 {
		c.log.Error("console request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		c.log.Info("console request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", msg)
	}
	w.WriteHeader(status)
	c.render(w, r, s, "error", map[string]any{"Status": status, "Message": msg}, true)
}

// view is what every page template gets.
type view struct {
	Title   string
	Session *session
	CSRF    string
	Flash   string
	Rights  auth.Rights
	KeyName string
	Auto    bool // signed in automatically (loopback, development key)
	Data    any

	Namespace  string          // the namespace shown ("" without a name)
	Namespaces []NamespaceLink // the switcher's; none without one

	TimeTool, FaultsTool bool // the Time and Faults pages are served (tools.go)
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, name string, data any, statusWritten bool) {
	t := c.pages[name]
	v := view{Title: name, Session: s, Data: data, Namespace: c.namespace, TimeTool: c.testClock != nil, FaultsTool: c.faults != nil}
	if s != nil && c.switcher != nil {
		v.Namespaces = c.switcher(r, s.grant)
	}
	if s != nil {
		v.CSRF = s.csrf
		v.Rights = s.grant.Rights
		v.KeyName, v.Auto = s.grant.KeyName, s.auto
		v.Flash = c.takeFlash(s)
	}
	if !statusWritten {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	if err := t.Execute(w, v); err != nil {
		c.log.Error("console template failed", "page", name, "err", err)
	}
}

func (c *Console) redirect(w http.ResponseWriter, r *http.Request, s *session, to, flash string) {
	if flash != "" {
		c.setFlash(s, flash)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// ---- sign-in ----

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if s := c.sessionOf(w, r); s != nil {
		http.Redirect(w, r, c.prefix, http.StatusSeeOther)
		return
	}
	c.render(w, r, nil, "login", map[string]any{}, false)
}

func (c *Console) loginPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil || !sameOrigin(r) {
		w.WriteHeader(http.StatusBadRequest)
		c.render(w, r, nil, "login", map[string]any{"Error": "The sign-in form could not be read."}, true)
		return
	}
	keyName := strings.TrimSpace(r.PostForm.Get("keyName"))
	g, err := c.signIn(r.Context(), r.Host, keyName, r.PostForm.Get("key"), strings.TrimSpace(r.PostForm.Get("token")))
	if err != nil {
		c.log.Info("console sign-in refused", "keyName", keyName, "remote", r.RemoteAddr, "err", err)
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, nil, "login", map[string]any{"Error": err.Error(), "KeyName": keyName}, true)
		return
	}
	c.newSession(w, r, g, false)
	c.log.Info("console sign-in", "keyName", g.KeyName, "rights", g.Rights.String(), "resource", g.Resource)
	http.Redirect(w, r, c.prefix, http.StatusSeeOther)
}

// ---- helpers ----

// covers checks that s's grant reaches path (an entity path).
func covers(s *session, path string) error {
	if !s.grant.Covers(path) {
		return &userError{status: http.StatusForbidden, msg: fmt.Sprintf("The key '%s' grants access to '%s' only, not to '%s'.", s.grant.KeyName, s.grant.Resource, path)}
	}
	return nil
}

func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}

func formInt(v string, def, lo, hi int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badInput("'%s' is not a whole number from %d to %d.", v, lo, hi)
	}
	return n, nil
}

// subQueuePath is the path of entity's sub-queue ("", "dlq", "tdlq").
func subQueuePath(entity, sub string) string {
	switch sub {
	case "dlq":
		return entity + "/$DeadLetterQueue"
	case "tdlq":
		return entity + "/$Transfer/$DeadLetterQueue"
	}
	return entity
}

// parseProps reads "key=value" lines as application properties: integers,
// numbers and true/false keep their type, everything else is a string.
func parseProps(text string) (map[string]any, error) {
	props := map[string]any{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, badInput("Property line %d, '%s', is not key=value.", i+1, line)
		}
		props[k] = typedValue(strings.TrimSpace(v))
	}
	if len(props) == 0 {
		return nil, nil
	}
	return props, nil
}

func typedValue(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f
	}
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	return v
}

// ---- overview and entities ----

type entityRow struct {
	Kind   string // Queue, Topic, Subscription
	Name   string // display name
	Path   string
	Topic  string
	Status broker.EntityStatus
	Counts broker.Counts
	Subs   int
	Rate   *Rate // nil: not measured yet
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) error {
	rows := c.entityRows(s)
	if c.totals != nil {
		if rs := c.rates.sample(c.clk.Now(), c.totals()); rs != nil {
			for i := range rows {
				if r, ok := rs[rows[i].Path]; ok {
					rows[i].Rate = &r
				} else {
					rows[i].Rate = &Rate{}
				}
			}
		}
	}
	c.render(w, r, s, "overview", map[string]any{"Rows": rows, "Rates": c.totals != nil}, false)
	return nil
}

func (c *Console) entityRows(s *session) []entityRow {
	var rows []entityRow
	for _, q := range c.b.ListQueues() {
		if s.grant.Covers(q.Name) {
			rows = append(rows, entityRow{Kind: "Queue", Name: q.Name, Path: q.Name, Status: q.Properties.Status, Counts: q.Counts})
		}
	}
	for _, t := range c.b.ListTopics() {
		subs, err := c.b.ListSubscriptions(t.Name)
		if err != nil {
			continue // deleted meanwhile
		}
		if s.grant.Covers(t.Name) {
			var sum broker.Counts
			for _, sb := range subs {
				sum.Active += sb.Counts.Active
				sum.DeadLetter += sb.Counts.DeadLetter
				sum.TransferDeadLetter += sb.Counts.TransferDeadLetter
				sum.Deferred += sb.Counts.Deferred
			}
			sum.Scheduled = t.Counts.Scheduled
			sum.SizeInBytes = t.Counts.SizeInBytes
			rows = append(rows, entityRow{Kind: "Topic", Name: t.Name, Path: t.Name, Status: t.Properties.Status, Counts: sum, Subs: len(subs)})
		}
		for _, sb := range subs {
			p := broker.SubscriptionPath(t.Name, sb.Name)
			if s.grant.Covers(p) {
				rows = append(rows, entityRow{Kind: "Subscription", Name: sb.Name, Path: p, Topic: t.Name, Status: sb.Properties.Status, Counts: sb.Counts})
			}
		}
	}
	return rows
}

func (c *Console) create(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	name := strings.TrimSpace(f.Get("name"))
	var err error
	var path string
	switch f.Get("kind") {
	case "queue":
		p := broker.DefaultQueueProperties()
		p.RequiresSession = f.Get("requiresSession") != ""
		p.RequiresDuplicateDetection = f.Get("requiresDuplicateDetection") != ""
		path = name
		if err = covers(s, path); err == nil {
			_, err = c.b.CreateQueue(name, p)
		}
	case "topic":
		p := broker.DefaultTopicProperties()
		p.RequiresDuplicateDetection = f.Get("requiresDuplicateDetection") != ""
		path = name
		if err = covers(s, path); err == nil {
			_, err = c.b.CreateTopic(name, p)
		}
	case "subscription":
		topic := strings.TrimSpace(f.Get("topic"))
		p := broker.DefaultSubscriptionProperties()
		p.RequiresSession = f.Get("requiresSession") != ""
		path = broker.SubscriptionPath(topic, name)
		var rule *broker.RuleDescription
		if sql := strings.TrimSpace(f.Get("filter")); sql != "" {
			rule = &broker.RuleDescription{Name: "$Default", Filter: broker.RuleFilter{Kind: broker.FilterSQL, Expression: sql}}
		}
		if err = covers(s, path); err == nil {
			_, err = c.b.CreateSubscription(topic, name, p, rule)
		}
	default:
		return badInput("Choose a queue, a topic or a subscription.")
	}
	if err != nil {
		return err
	}
	c.log.Info("console created an entity", "keyName", s.grant.KeyName, "entity", path)
	c.redirect(w, r, s, c.prefix+"entity?path="+urlQuery(path), fmt.Sprintf("Created %s '%s'.", f.Get("kind"), path))
	return nil
}

// entityInfo is one entity's properties and counts, whatever its kind.
type entityInfo struct {
	Kind       string
	Path       string
	Topic, Sub string
	Props      any
	Counts     broker.Counts
	Created    time.Time
	Updated    time.Time
	Accessed   time.Time
	Sessions   bool
	Fields     []field
}

func (c *Console) entityInfo(path string) (entityInfo, error) {
	p, err := broker.ParsePath(path)
	if err != nil {
		return entityInfo{}, err
	}
	if p.SubQueue != broker.SubQueueMain {
		return entityInfo{}, badInput("'%s' is a sub-queue; open its entity.", path)
	}
	if p.Subscription != "" {
		si, err := c.b.GetSubscription(p.Entity, p.Subscription)
		if err != nil {
			return entityInfo{}, err
		}
		return entityInfo{Kind: "Subscription", Path: path, Topic: p.Entity, Sub: si.Name, Props: si.Properties, Counts: si.Counts,
			Created: si.CreatedAt, Updated: si.UpdatedAt, Accessed: si.AccessedAt, Sessions: si.Properties.RequiresSession,
			Fields: fieldsOf(&si.Properties)}, nil
	}
	typ, _, err := c.b.Resolve(path)
	if err != nil {
		return entityInfo{}, err
	}
	if typ == broker.EntityTopic {
		ti, err := c.b.GetTopic(path)
		if err != nil {
			return entityInfo{}, err
		}
		return entityInfo{Kind: "Topic", Path: ti.Name, Props: ti.Properties, Counts: ti.Counts, Created: ti.CreatedAt,
			Updated: ti.UpdatedAt, Accessed: ti.AccessedAt, Fields: fieldsOf(&ti.Properties)}, nil
	}
	qi, err := c.b.GetQueue(path)
	if err != nil {
		return entityInfo{}, err
	}
	return entityInfo{Kind: "Queue", Path: qi.Name, Props: qi.Properties, Counts: qi.Counts, Created: qi.CreatedAt,
		Updated: qi.UpdatedAt, Accessed: qi.AccessedAt, Sessions: qi.Properties.RequiresSession, Fields: fieldsOf(&qi.Properties)}, nil
}

func (c *Console) entityPage(w http.ResponseWriter, r *http.Request, s *session) error {
	path := r.URL.Query().Get("path")
	if err := covers(s, path); err != nil {
		return err
	}
	info, err := c.entityInfo(path)
	if err != nil {
		return err
	}
	var subs []broker.SubscriptionInfo
	if info.Kind == "Topic" {
		subs, _ = c.b.ListSubscriptions(info.Path)
	}
	c.render(w, r, s, "entity", map[string]any{"E": info, "Subs": subs}, false)
	return nil
}

func (c *Console) entityUpdate(w http.ResponseWriter, r *http.Request, s *session) error {
	path := r.PostForm.Get("path")
	if err := covers(s, path); err != nil {
		return err
	}
	info, err := c.entityInfo(path)
	if err != nil {
		return err
	}
	switch info.Kind {
	case "Queue":
		p := info.Props.(broker.QueueProperties)
		if err := applyFields(&p, r.PostForm); err != nil {
			return err
		}
		_, err = c.b.UpdateQueue(path, p)
	case "Topic":
		p := info.Props.(broker.TopicProperties)
		if err := applyFields(&p, r.PostForm); err != nil {
			return err
		}
		_, err = c.b.UpdateTopic(path, p)
	case "Subscription":
		p := info.Props.(broker.SubscriptionProperties)
		if err := applyFields(&p, r.PostForm); err != nil {
			return err
		}
		_, err = c.b.UpdateSubscription(info.Topic, info.Sub, p)
	}
	if err != nil {
		return err
	}
	c.log.Info("console updated an entity", "keyName", s.grant.KeyName, "entity", path)
	c.redirect(w, r, s, c.prefix+"entity?path="+urlQuery(path), "Saved the properties of '"+path+"'.")
	return nil
}

func (c *Console) entityDelete(w http.ResponseWriter, r *http.Request, s *session) error {
	path := r.PostForm.Get("path")
	if err := covers(s, path); err != nil {
		return err
	}
	if r.PostForm.Get("confirm") != path {
		return badInput("Type the entity's name, '%s', to confirm the deletion.", path)
	}
	info, err := c.entityInfo(path)
	if err != nil {
		return err
	}
	switch info.Kind {
	case "Queue":
		err = c.b.DeleteQueue(path)
	case "Topic":
		err = c.b.DeleteTopic(path)
	case "Subscription":
		err = c.b.DeleteSubscription(info.Topic, info.Sub)
	}
	if err != nil {
		return err
	}
	c.log.Info("console deleted an entity", "keyName", s.grant.KeyName, "entity", path)
	c.redirect(w, r, s, c.prefix, "Deleted '"+path+"'.")
	return nil
}

// ---- messages ----

type msgFilter struct {
	State    string // "", active, deferred, scheduled, locked
	Prop     string // property name (application, or a system one)
	Value    string
	Text     string // body contains, case-insensitively
	JSONPath string // body JSON path ($.a.b[0]); Value compares if set
}

func (f msgFilter) match(d *broker.Delivery) bool {
	switch f.State {
	case "active":
		if d.State != broker.StateActive || !d.LockedUntil.IsZero() {
			return false
		}
	case "deferred":
		if d.State != broker.StateDeferred {
			return false
		}
	case "scheduled":
		if d.State != broker.StateScheduled {
			return false
		}
	case "locked":
		if d.LockedUntil.IsZero() {
			return false
		}
	}
	if f.Prop != "" && f.JSONPath == "" {
		v, ok := propertyOf(d, f.Prop)
		if !ok || (f.Value != "" && fmt.Sprint(v) != f.Value) {
			return false
		}
	}
	if f.Text != "" || f.JSONPath != "" {
		b := decodeBody(d.Message.Body)
		if f.Text != "" && !strings.Contains(strings.ToLower(b.Text), strings.ToLower(f.Text)) {
			return false
		}
		if f.JSONPath != "" {
			v, ok := jsonPath(b.Bytes, f.JSONPath)
			if !ok || (f.Value != "" && v != f.Value) {
				return false
			}
		}
	}
	return true
}

// propertyOf reads an application property, or a system property by its
// Service Bus name.
func propertyOf(d *broker.Delivery, name string) (any, bool) {
	m := d.Message
	if v, ok := m.ApplicationProperties[name]; ok {
		return v, true
	}
	switch strings.ToLower(name) {
	case "messageid":
		return m.MessageID, m.MessageID != nil
	case "correlationid":
		return m.CorrelationID, m.CorrelationID != nil
	case "subject", "label":
		return m.Subject, m.Subject != ""
	case "sessionid":
		return m.SessionID, m.HasSessionID()
	case "contenttype":
		return m.ContentType, m.ContentType != ""
	case "to":
		return m.To, m.To != ""
	case "replyto":
		return m.ReplyTo, m.ReplyTo != ""
	case "deadletterreason":
		v, ok := m.ApplicationProperties[broker.PropDeadLetterReason]
		return v, ok
	}
	return nil, false
}

const (
	maxPage = 200  // messages on one page
	maxScan = 5000 // records one page looks at to find them
)

type messageList struct {
	Entity   string
	Sub      string
	Path     string
	From     int64
	N        int64
	Filter   msgFilter
	Messages []*broker.Delivery
	Next     int64 // 0: no more
	Scanned  int
	Info     entityInfo
}

// scan inspects path from `from` on, returning up to n messages matching
// f among at most limit records, and where to go on (0: the end).
func (c *Console) scan(ctx context.Context, path string, from, n int64, f msgFilter, limit int) ([]*broker.Delivery, int64, int, error) {
	var out []*broker.Delivery
	scanned := 0
	for scanned < limit {
		ds, err := c.inspect(ctx, path, from, 500)
		if err != nil {
			return nil, 0, scanned, err
		}
		if len(ds) == 0 {
			return out, 0, scanned, nil
		}
		for _, d := range ds {
			scanned++
			from = d.SequenceNumber + 1
			if f.match(d) {
				out = append(out, d)
				if int64(len(out)) == n {
					return out, from, scanned, nil
				}
			}
		}
	}
	return out, from, scanned, nil
}

func (c *Console) messagesPage(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	entity := q.Get("path")
	if err := covers(s, entity); err != nil {
		return err
	}
	from, err := formInt(q.Get("from"), 0, 0, 1<<62)
	if err != nil {
		return err
	}
	n, err := formInt(q.Get("n"), 50, 1, maxPage)
	if err != nil {
		return err
	}
	ml := messageList{Entity: entity, Sub: q.Get("sub"), From: from, N: n,
		Filter: msgFilter{State: q.Get("state"), Prop: strings.TrimSpace(q.Get("prop")), Value: q.Get("value"), Text: q.Get("text"), JSONPath: strings.TrimSpace(q.Get("jsonpath"))}}
	if ml.Info, err = c.entityInfo(entity); err != nil {
		return err
	}
	if ml.Info.Kind == "Topic" {
		ml.Sub = "" // a topic holds only its scheduled messages
	}
	ml.Path = subQueuePath(entity, ml.Sub)
	ctx, cancel := c.ctx(r)
	defer cancel()
	ml.Messages, ml.Next, ml.Scanned, err = c.scan(ctx, ml.Path, from, n, ml.Filter, maxScan)
	if err != nil {
		return err
	}
	c.render(w, r, s, "messages", ml, false)
	return nil
}

// messageRef reads the message a request names (?path=&sub=&seq=) and
// checks that the session's grant covers its entity.
func messageRef(r *http.Request, s *session) (entity, sub string, seq int64, err error) {
	q := r.URL.Query()
	entity, sub = q.Get("path"), q.Get("sub")
	if err := covers(s, entity); err != nil {
		return "", "", 0, err
	}
	seq, err = formInt(q.Get("seq"), 0, 1, 1<<62)
	return entity, sub, seq, err
}

func (c *Console) messagePage(w http.ResponseWriter, r *http.Request, s *session) error {
	entity, sub, seq, err := messageRef(r, s)
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	ds, err := c.b.Inspect(broker.WithStreamedBodies(ctx, largeFrom), subQueuePath(entity, sub), seq, 1)
	if err != nil {
		return err
	}
	total := int64(-1)
	for _, d := range ds {
		if total, err = takePreview(d); err != nil {
			return err
		}
	}
	if len(ds) == 0 || ds[0].SequenceNumber != seq {
		return &userError{status: http.StatusNotFound, msg: fmt.Sprintf("Message %d is not in '%s' (any more).", seq, subQueuePath(entity, sub))}
	}
	d := ds[0]
	view := r.URL.Query().Get("view")
	body := decodeBody(d.Message.Body)
	if total >= 0 {
		body.Large, body.Total = true, total
	}
	if view == "" {
		view = body.Guess
	}
	var targets []string
	for _, e := range c.entityRows(s) {
		if e.Kind != "Subscription" {
			targets = append(targets, e.Path)
		}
	}
	c.render(w, r, s, "message", map[string]any{"Entity": entity, "Sub": sub, "D": d, "Body": body, "View": view,
		"Rendered": body.Render(view), "Targets": targets, "PropsText": propsText(d.Message.ApplicationProperties, true),
		"History": c.historyEnabled()}, false)
	return nil
}

// propsText writes application properties as key=value lines, leaving
// out the dead-letter reason and description if dropDLQ.
func propsText(p map[string]any, dropDLQ bool) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		if dropDLQ && (k == broker.PropDeadLetterReason || k == broker.PropDeadLetterErrorDescription) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%v\n", k, p[k])
	}
	return b.String()
}

func (c *Console) send(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	path := f.Get("path")
	if err := covers(s, path); err != nil {
		return err
	}
	props, err := parseProps(f.Get("properties"))
	if err != nil {
		return err
	}
	m := &message.Message{Durable: true, Body: encodeDataBody([]byte(f.Get("body"))), ApplicationProperties: props,
		ContentType: strings.TrimSpace(f.Get("contentType")), Subject: strings.TrimSpace(f.Get("subject")),
		SessionID: f.Get("sessionId"), CorrelationID: nilIfEmpty(f.Get("correlationId"))}
	if id := strings.TrimSpace(f.Get("messageId")); id != "" {
		m.MessageID = id
	} else {
		m.MessageID = newID()[:32]
	}
	if ttl := strings.TrimSpace(f.Get("ttl")); ttl != "" {
		d, err := time.ParseDuration(ttl)
		if err != nil || d <= 0 {
			return badInput("The time to live '%s' is not a positive duration such as 90s or 2h.", ttl)
		}
		m.TTL = d
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	msg := "Sent a message to '" + path + "'."
	if at := strings.TrimSpace(f.Get("scheduled")); at != "" {
		t, err := time.ParseInLocation("2006-01-02T15:04", at, time.UTC)
		if err != nil {
			if t, err = time.Parse(time.RFC3339, at); err != nil {
				return badInput("The scheduled time '%s' is not a date and time (UTC).", at)
			}
		}
		seqs, err := c.b.Schedule(ctx, path, []*message.Message{m}, t)
		if err != nil {
			return err
		}
		msg = fmt.Sprintf("Scheduled message %d for %s UTC.", seqs[0], t.UTC().Format("2006-01-02 15:04:05"))
	} else if err := c.b.Send(ctx, path, []*message.Message{m}); err != nil {
		return err
	}
	c.redirect(w, r, s, c.prefix+"messages?path="+urlQuery(path), msg)
	return nil
}

func nilIfEmpty(s string) any {
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	return s
}

// purge deletes every message of an entity's sub-queue (or of each of a
// topic's subscriptions), locked ones excepted; scheduled messages of a
// queue or topic are cancelled.
func (c *Console) purge(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	entity, sub := f.Get("path"), f.Get("sub")
	if err := covers(s, entity); err != nil {
		return err
	}
	if f.Get("confirm") != entity {
		return badInput("Type the entity's name, '%s', to confirm the purge.", entity)
	}
	info, err := c.entityInfo(entity)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	var paths []string
	if info.Kind == "Topic" {
		subs, err := c.b.ListSubscriptions(entity)
		if err != nil {
			return err
		}
		for _, sb := range subs {
			paths = append(paths, subQueuePath(broker.SubscriptionPath(entity, sb.Name), sub))
		}
	} else {
		paths = append(paths, subQueuePath(entity, sub))
	}
	total := 0
	// What is there now: messages sent meanwhile stay.
	before := c.b.Now().Add(time.Nanosecond)
	for _, p := range paths {
		for {
			n, err := c.b.DeleteMessages(ctx, p, 4096, before)
			total += n
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
	}
	if sub == "" && info.Kind != "Subscription" {
		n, err := c.cancelAllScheduled(ctx, entity)
		total += n
		if err != nil {
			return err
		}
	}
	c.log.Info("console purged", "keyName", s.grant.KeyName, "entity", entity, "subQueue", sub, "messages", total)
	c.redirect(w, r, s, c.prefix+"entity?path="+urlQuery(entity), fmt.Sprintf("Purged %d messages.", total))
	return nil
}

func (c *Console) cancelAllScheduled(ctx context.Context, path string) (int, error) {
	total := 0
	from := int64(0)
	for {
		ds, next, _, err := c.scan(ctx, path, from, broker.MaxTriageBatch, msgFilter{State: "scheduled"}, 1<<30)
		if err != nil {
			return total, err
		}
		if len(ds) == 0 {
			return total, nil
		}
		seqs := make([]int64, len(ds))
		for i, d := range ds {
			seqs[i] = d.SequenceNumber
		}
		if err := c.b.CancelScheduled(ctx, path, seqs); err != nil {
			return total, err
		}
		total += len(seqs)
		if next == 0 {
			return total, nil
		}
		from = next
	}
}

func formSeqs(vals []string) ([]int64, error) {
	if len(vals) > broker.MaxTriageBatch {
		return nil, badInput("Choose at most %d messages at once, or use \"all matching\".", broker.MaxTriageBatch)
	}
	out := make([]int64, 0, len(vals))
	for _, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, badInput("'%s' is not a sequence number.", v)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, badInput("Choose at least one message.")
	}
	return out, nil
}

func (c *Console) deleteMessages(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	entity, sub := f.Get("path"), f.Get("sub")
	if err := covers(s, entity); err != nil {
		return err
	}
	seqs, err := formSeqs(f["seq"])
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	verb := "Deleted"
	var res broker.TriageResult
	note := ""
	switch f.Get("action") {
	case "deadletter":
		verb = "Dead-lettered"
		reason := strings.TrimSpace(f.Get("reason"))
		if reason == "" {
			reason = "DeadLetteredByOperator"
		}
		res, err = c.b.DeadLetterMessages(ctx, subQueuePath(entity, sub), seqs, reason, strings.TrimSpace(f.Get("description")))
	case "abandon":
		verb = "Abandoned"
		res, err = c.b.AbandonMessages(ctx, subQueuePath(entity, sub), seqs)
		if res.DeadLettered > 0 {
			note = fmt.Sprintf(" (%d of them reached the maximum delivery count and were dead-lettered)", res.DeadLettered)
		}
	default:
		res, err = c.b.RemoveMessages(ctx, subQueuePath(entity, sub), seqs)
	}
	if err != nil {
		return err
	}
	c.log.Info("console "+strings.ToLower(verb)+" messages", "keyName", s.grant.KeyName, "entity", subQueuePath(entity, sub), "messages", res.Done, "skipped", len(res.Skipped))
	back := f.Get("back")
	if !strings.HasPrefix(back, c.prefix) {
		back = c.prefix + "messages?path=" + urlQuery(entity) + "&sub=" + urlQuery(sub)
	}
	c.redirect(w, r, s, back, fmt.Sprintf("%s %d messages%s%s.", verb, res.Done, note, skippedNote(res.Skipped)))
	return nil
}

func skippedNote(sk []int64) string {
	if len(sk) == 0 {
		return ""
	}
	return fmt.Sprintf("; skipped %d (locked, busy or gone): %v", len(sk), sk)
}

func (c *Console) cancelScheduled(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	entity := f.Get("path")
	if err := covers(s, entity); err != nil {
		return err
	}
	seqs, err := formSeqs(f["seq"])
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	if err := c.b.CancelScheduled(ctx, entity, seqs); err != nil {
		return err
	}
	c.redirect(w, r, s, c.prefix+"scheduled?path="+urlQuery(entity), fmt.Sprintf("Cancelled %d scheduled messages.", len(seqs)))
	return nil
}
