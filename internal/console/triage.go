package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/admin"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// ---- dead-letter triage ----

type dlqGroup struct {
	Reason      string
	Description string
	Source      string
	Count       int
}

func reasonOf(d *broker.Delivery) string {
	s, _ := d.Message.ApplicationProperties[broker.PropDeadLetterReason].(string)
	if s == "" {
		return "(none)"
	}
	return s
}

func sourceOf(d *broker.Delivery, entity string) string {
	if d.DeadLetterSource != "" {
		return d.DeadLetterSource
	}
	return entity
}

func (c *Console) dlqPage(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	entity := q.Get("path")
	if err := covers(s, entity); err != nil {
		return err
	}
	sub := q.Get("sub")
	if sub != "tdlq" {
		sub = "dlq"
	}
	info, err := c.entityInfo(entity)
	if err != nil {
		return err
	}
	reason := q.Get("reason")
	ctx, cancel := c.ctx(r)
	defer cancel()
	all, next, scanned, err := c.scan(ctx, subQueuePath(entity, sub), 0, maxScan, msgFilter{}, maxScan)
	if err != nil {
		return err
	}
	groups := map[string]*dlqGroup{}
	var shown []*broker.Delivery
	for _, d := range all {
		rs := reasonOf(d)
		key := rs + "\x00" + sourceOf(d, entity)
		g := groups[key]
		if g == nil {
			desc, _ := d.Message.ApplicationProperties[broker.PropDeadLetterErrorDescription].(string)
			g = &dlqGroup{Reason: rs, Description: desc, Source: sourceOf(d, entity)}
			groups[key] = g
		}
		g.Count++
		if (reason == "" || reason == rs) && len(shown) < maxPage {
			shown = append(shown, d)
		}
	}
	var gl []dlqGroup
	for _, g := range groups {
		gl = append(gl, *g)
	}
	slices.SortFunc(gl, func(a, b dlqGroup) int { return b.Count - a.Count })
	var targets []string
	for _, e := range c.entityRows(s) {
		if e.Kind != "Subscription" {
			targets = append(targets, e.Path)
		}
	}
	home := entity
	if info.Kind == "Subscription" {
		home = info.Topic
	}
	c.render(w, r, s, "dlq", map[string]any{"Entity": entity, "Sub": sub, "Info": info, "Groups": gl, "Messages": shown,
		"Reason": reason, "More": next != 0, "Scanned": scanned, "Targets": targets, "Home": home,
		"Jobs": c.jobs.list(subQueuePath(entity, sub))}, false)
	return nil
}

// dlqResubmit resubmits (or deletes, action=delete) the chosen dead
// letters at once, or all that match a reason as a background job.
func (c *Console) dlqResubmit(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	entity, sub := f.Get("path"), f.Get("sub")
	if sub != "tdlq" {
		sub = "dlq"
	}
	target := strings.TrimSpace(f.Get("target"))
	del := f.Get("action") == "delete"
	if err := covers(s, entity); err != nil {
		return err
	}
	if !del {
		if target == "" {
			return badInput("Choose the entity to resubmit to.")
		}
		if err := covers(s, target); err != nil {
			return err
		}
	}
	path := subQueuePath(entity, sub)
	back := c.prefix + "dlq?path=" + urlQuery(entity) + "&sub=" + sub
	if f.Get("all") != "" {
		j, err := c.jobs.start(jobSpec{path: path, target: target, reason: f.Get("reason"), delete: del, keyName: s.grant.KeyName})
		if err != nil {
			return err
		}
		http.Redirect(w, r, c.prefix+"jobs/"+j.ID, http.StatusSeeOther)
		return nil
	}
	seqs, err := formSeqs(f["seq"])
	if err != nil {
		return err
	}
	var edit func(*message.Message) error
	if f.Has("editBody") || f.Has("editProps") {
		props, err := parseProps(f.Get("editProps"))
		if err != nil {
			return err
		}
		body := f.Get("editBody")
		edit = func(m *message.Message) error {
			if f.Has("editBody") {
				m.Body = encodeDataBody([]byte(body))
			}
			if f.Has("editProps") {
				m.ApplicationProperties = props
			}
			return nil
		}
		back = c.prefix + "messages?path=" + urlQuery(target)
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	var res broker.TriageResult
	verb := "Resubmitted"
	if del {
		verb = "Deleted"
		res, err = c.b.RemoveMessages(ctx, path, seqs)
	} else {
		res, err = c.b.Resubmit(ctx, path, seqs, target, edit)
	}
	if err != nil {
		return err
	}
	c.log.Info("console "+strings.ToLower(verb)+" dead letters", "keyName", s.grant.KeyName, "from", path, "to", target, "messages", res.Done, "skipped", len(res.Skipped))
	to := ""
	if !del {
		to = " to '" + target + "'"
	}
	c.redirect(w, r, s, back, fmt.Sprintf("%s %d messages%s%s.", verb, res.Done, to, skippedNote(res.Skipped)))
	return nil
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request, s *session) error {
	j := c.jobs.get(r.PathValue("id"))
	if j == nil {
		return &userError{status: http.StatusNotFound, msg: "No such job (the console keeps the last few only)."}
	}
	c.render(w, r, s, "job", j.snapshot(), false)
	return nil
}

func (c *Console) jobCancel(w http.ResponseWriter, r *http.Request, s *session) error {
	j := c.jobs.get(r.PathValue("id"))
	if j == nil {
		return &userError{status: http.StatusNotFound, msg: "No such job."}
	}
	j.cancel()
	http.Redirect(w, r, c.prefix+"jobs/"+j.ID, http.StatusSeeOther)
	return nil
}

// ---- rules and the rule tester ----

func (c *Console) rulesPage(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	topic, sub := q.Get("topic"), q.Get("sub")
	if err := covers(s, broker.SubscriptionPath(topic, sub)); err != nil {
		return err
	}
	rules, err := c.b.ListRules(topic, sub, 0, 0)
	if err != nil {
		return err
	}
	c.render(w, r, s, "rules", map[string]any{"Topic": topic, "Sub": sub, "Rules": rules, "Path": broker.SubscriptionPath(topic, sub),
		"Form": map[string]string{"name": q.Get("name"), "filter": q.Get("filter"), "action": q.Get("action")}, "Error": q.Get("error")}, false)
	return nil
}

func ruleText(rd broker.RuleDescription) string {
	switch rd.Filter.Kind {
	case broker.FilterCorrelation:
		cf := rd.Filter.Correlation
		if cf == nil {
			return "correlation"
		}
		var parts []string
		add := func(k, v string) {
			if v != "" {
				parts = append(parts, k+" = '"+v+"'")
			}
		}
		add("CorrelationId", cf.CorrelationID)
		add("MessageId", cf.MessageID)
		add("To", cf.To)
		add("ReplyTo", cf.ReplyTo)
		add("Label", cf.Label)
		add("SessionId", cf.SessionID)
		add("ReplyToSessionId", cf.ReplyToSessionID)
		add("ContentType", cf.ContentType)
		for k, v := range cf.Properties {
			parts = append(parts, fmt.Sprintf("%s = %v", k, v))
		}
		slices.Sort(parts)
		return "correlation: " + strings.Join(parts, " AND ")
	}
	return rd.Filter.Expression
}

func (c *Console) ruleCreate(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	topic, sub := f.Get("topic"), f.Get("sub")
	if err := covers(s, broker.SubscriptionPath(topic, sub)); err != nil {
		return err
	}
	rd := broker.RuleDescription{Name: strings.TrimSpace(f.Get("name")),
		Filter: broker.RuleFilter{Kind: broker.FilterSQL, Expression: strings.TrimSpace(f.Get("filter"))}}
	if a := strings.TrimSpace(f.Get("action")); a != "" {
		rd.Action = &broker.SQLAction{Expression: a}
	}
	var err error
	if f.Get("replace") != "" {
		_, err = c.b.UpdateRule(topic, sub, rd)
	} else {
		_, err = c.b.CreateRule(topic, sub, rd)
	}
	base := c.prefix + "rules?topic=" + urlQuery(topic) + "&sub=" + urlQuery(sub)
	if err != nil {
		status, msg := adminStatus(err)
		if status >= 500 {
			return err
		}
		// Back to the form, as typed, with the error beside it.
		http.Redirect(w, r, base+"&name="+urlQuery(rd.Name)+"&filter="+urlQuery(rd.Filter.Expression)+
			"&action="+urlQuery(f.Get("action"))+"&error="+urlQuery(msg), http.StatusSeeOther)
		return nil
	}
	c.log.Info("console saved a rule", "keyName", s.grant.KeyName, "subscription", broker.SubscriptionPath(topic, sub), "rule", rd.Name)
	c.redirect(w, r, s, base, "Saved rule '"+rd.Name+"'.")
	return nil
}

func (c *Console) ruleDelete(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	topic, sub, name := f.Get("topic"), f.Get("sub"), f.Get("name")
	if err := covers(s, broker.SubscriptionPath(topic, sub)); err != nil {
		return err
	}
	if err := c.b.DeleteRule(topic, sub, name); err != nil {
		return err
	}
	c.redirect(w, r, s, c.prefix+"rules?topic="+urlQuery(topic)+"&sub="+urlQuery(sub), "Deleted rule '"+name+"'.")
	return nil
}

type testerRow struct {
	Sub      string
	Verdicts []broker.RuleDryRun
	Gets     bool
	Why      string
}

// testerRows turns a dry run into the tester's rows: per subscription,
// whether it gets the message and why, and its rules' verdicts.
func testerRows(dr broker.DryRun) []testerRow {
	rows := make([]testerRow, 0, len(dr.Subscriptions))
	for _, sd := range dr.Subscriptions {
		row := testerRow{Sub: sd.Name, Verdicts: sd.Rules, Gets: sd.Accepted || sd.DeadLettered}
		switch {
		case sd.Inactive:
			row.Why = "its status keeps new messages out"
		case sd.DeadLettered && sd.DeadLetterReason == broker.ReasonSessionIDNull:
			row.Why = "it requires sessions and the message has none: the message goes to its dead-letter queue"
		case sd.DeadLettered:
			row.Why = "a rule fails to evaluate: the message goes to its dead-letter queue"
		case row.Gets:
			row.Why = "a rule matches"
		case len(sd.Rules) == 0:
			row.Why = "it has no rules"
		default:
			row.Why = "no rule matches"
		}
		rows = append(rows, row)
	}
	return rows
}

func (c *Console) testerPage(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	topic := q.Get("topic")
	if err := covers(s, topic); err != nil {
		return err
	}
	data := map[string]any{"Topic": topic, "Q": q}
	if q.Has("run") {
		props, err := parseProps(q.Get("properties"))
		if err != nil {
			return err
		}
		m := &message.Message{ApplicationProperties: props, Subject: q.Get("subject"), ContentType: q.Get("contentType"),
			SessionID: q.Get("sessionId"), CorrelationID: nilIfEmpty(q.Get("correlationId")), MessageID: nilIfEmpty(q.Get("messageId")),
			To: q.Get("to"), ReplyTo: q.Get("replyTo"), Body: encodeDataBody([]byte(q.Get("body")))}
		dr, err := c.b.DryRun(topic, m)
		if err != nil {
			return err
		}
		data["Rows"] = testerRows(dr)
	}
	c.render(w, r, s, "tester", data, false)
	return nil
}

// ---- sessions ----

type sessionRow struct {
	ID       string
	Messages int
	State    string
	HasState bool
	Locked   bool // a receiver holds it: its state cannot be read now
	// Holder and Until say who holds a locked session, until when.
	Holder string
	Until  time.Time
}

// withSession locks session id of path as a session receiver would, runs
// fn with that receiver, and lets the session go again (nothing is
// received). A session another receiver holds is KindSessionCannotBeLocked.
func (c *Console) withSession(ctx context.Context, path, id string, fn func(*broker.Receiver) error) error {
	rc, err := c.b.AcceptSession(path, id, broker.PeekLock)
	if err != nil {
		return err
	}
	defer rc.Close()
	return fn(rc)
}

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, s *session) error {
	entity := r.URL.Query().Get("path")
	if err := covers(s, entity); err != nil {
		return err
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	ids, err := c.b.ListSessions(ctx, entity, time.Time{}, 0, 500)
	if err != nil {
		return err
	}
	counts := map[string]int{}
	ds, _, _, err := c.scan(ctx, entity, 0, maxScan, msgFilter{}, maxScan)
	if err != nil {
		return err
	}
	for _, d := range ds {
		counts[d.Message.SessionID]++
	}
	rows := make([]sessionRow, 0, len(ids))
	for _, id := range ids {
		row := sessionRow{ID: id, Messages: counts[id]}
		err := c.withSession(ctx, entity, id, func(rc *broker.Receiver) error {
			st, err := rc.SessionState(ctx)
			row.State, row.HasState = string(st), st != nil
			return err
		})
		if err != nil {
			if broker.KindOf(err) != broker.KindSessionCannotBeLocked {
				return err
			}
			row.Locked = true
			if h, until, held, err := c.b.SessionHolder(entity, id); err == nil && held {
				row.Holder, row.Until = h, until
			}
		}
		rows = append(rows, row)
	}
	c.render(w, r, s, "sessions", map[string]any{"Entity": entity, "Rows": rows}, false)
	return nil
}

func (c *Console) sessionState(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	entity, id := f.Get("path"), f.Get("session")
	if err := covers(s, entity); err != nil {
		return err
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	var state []byte
	if f.Get("clear") == "" {
		state = []byte(f.Get("state"))
	}
	err := c.withSession(ctx, entity, id, func(rc *broker.Receiver) error { return rc.SetSessionState(ctx, state) })
	if broker.KindOf(err) == broker.KindSessionCannotBeLocked {
		return &userError{status: http.StatusConflict, msg: fmt.Sprintf("Session '%s' is locked by a receiver; its state can be changed once the receiver lets it go.", id)}
	}
	if err != nil {
		return err
	}
	c.redirect(w, r, s, c.prefix+"sessions?path="+urlQuery(entity), "Saved the state of session '"+id+"'.")
	return nil
}

// ---- scheduled timeline ----

type timelineItem struct {
	D   *broker.Delivery
	Pct int // position on the axis, 0–100
}

func (c *Console) scheduledPage(w http.ResponseWriter, r *http.Request, s *session) error {
	entity := r.URL.Query().Get("path")
	if err := covers(s, entity); err != nil {
		return err
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	ds, _, scanned, err := c.scan(ctx, entity, 0, maxPage, msgFilter{State: "scheduled"}, 1<<20)
	if err != nil {
		return err
	}
	slices.SortFunc(ds, func(a, b *broker.Delivery) int { return a.EnqueuedTime.Compare(b.EnqueuedTime) })
	now := c.b.Now() // the broker's clock, which may be a test clock
	var items []timelineItem
	var end time.Time
	if len(ds) > 0 {
		end = ds[len(ds)-1].EnqueuedTime
	}
	span := end.Sub(now)
	for _, d := range ds {
		pct := 100
		if span > 0 {
			pct = int(100 * d.EnqueuedTime.Sub(now) / span)
		}
		items = append(items, timelineItem{D: d, Pct: max(0, min(100, pct))})
	}
	c.render(w, r, s, "scheduled", map[string]any{"Entity": entity, "Items": items, "Now": now, "End": end, "Scanned": scanned}, false)
	return nil
}

func adminStatus(err error) (int, string) {
	var ue *userError
	if errors.As(err, &ue) {
		return ue.status, ue.msg
	}
	return admin.HTTPStatus(err)
}
