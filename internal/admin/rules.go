package admin

import (
	"net/http"
	"strings"

	"github.com/busbarmq/busbar/internal/broker"
)

// RulePage is one page of a subscription's rules.
type RulePage struct {
	Rules []broker.RuleDescription
	// More reports whether rules remain after this page.
	More bool
}

// GetRule returns one rule of a subscription.
func (h *Handler) GetRule(topic, subscription, name string) (broker.RuleDescription, error) {
	return h.broker.GetRule(topic, subscription, name)
}

// CreateRule adds a rule to a subscription. The broker compiles its filter
// and action: a syntax error is an invalid-argument error with the
// position and the problem.
func (h *Handler) CreateRule(topic, subscription string, r broker.RuleDescription) (broker.RuleDescription, error) {
	return h.broker.CreateRule(topic, subscription, r)
}

// UpdateRule replaces the filter and action of an existing rule.
func (h *Handler) UpdateRule(topic, subscription string, r broker.RuleDescription) (broker.RuleDescription, error) {
	return h.broker.UpdateRule(topic, subscription, r)
}

// DeleteRule removes a rule from a subscription.
func (h *Handler) DeleteRule(topic, subscription, name string) error {
	return h.broker.DeleteRule(topic, subscription, name)
}

// ListRules returns a page of a subscription's rules in name order
// (case-insensitive).
func (h *Handler) ListRules(topic, subscription string, o ListOptions) (RulePage, error) {
	n := o.pageSize()
	// One more than the page tells whether rules remain.
	rules, err := h.broker.ListRules(topic, subscription, max(o.Skip, 0), n+1)
	if err != nil {
		return RulePage{}, err
	}
	if len(rules) > n {
		return RulePage{Rules: rules[:n], More: true}, nil
	}
	return RulePage{Rules: rules}, nil
}

// rulePath is the namespace-relative path of a rule, with the capitalised
// path words the JS client looks for in ids (§1.6).
func rulePath(topic, subscription, name string) string {
	return subscriptionPath(topic, subscription) + "/Rules/" + name
}

// ruleEntry writes r as an entry (no <author>, as the service writes rule
// entries; published and updated are its creation time).
func ruleEntry(w *xmlWriter, topLevel bool, topic, subscription string, r broker.RuleDescription, s *site) {
	m := entryMeta{id: s.url(rulePath(topic, subscription, r.Name), ""), title: r.Name, published: r.CreatedAt, updated: r.CreatedAt}
	writeEntry(w, topLevel, m, func(w *xmlWriter) { writeRuleDescription(w, r) })
}

func ruleReply(status int, rq *request, r broker.RuleDescription) *reply {
	var w xmlWriter
	ruleEntry(&w, true, rq.res.entity, rq.res.subscription, r, rq.site)
	return &reply{status: status, contentType: contentTypeEntry, body: w.bytes()}
}

// getRule serves GET /{topic}/Subscriptions/{sub}/Rules/{rule}.
func getRule(h *Handler, rq *request) (*reply, error) {
	r, err := h.GetRule(rq.res.entity, rq.res.subscription, rq.res.rule)
	if err != nil {
		return nil, err
	}
	return ruleReply(http.StatusOK, rq, r), nil
}

// putRule serves PUT /{topic}/Subscriptions/{sub}/Rules/{rule}: create
// (201), or update with If-Match (200). The rule is named by the path; a
// <Name> in the body must agree with it. A PUT on the rules collection
// itself takes the name from the body: Go v1.11.0's CreateRule without a
// Name sends its default name, $Default, only there.
func putRule(h *Handler, rq *request) (*reply, error) {
	desc, err := bodyDescription(rq, "RuleDescription")
	if err != nil {
		return nil, err
	}
	r, err := decodeRule(desc)
	if err != nil {
		return nil, err
	}
	switch {
	case rq.res.kind == resRules:
		if r.Name == "" {
			return nil, invalidProperty("Name", "a PUT on the rules collection needs the rule's <Name> in the body; or PUT on .../Rules/{rule}")
		}
		rq.res.rule = r.Name
	case r.Name != "" && !strings.EqualFold(r.Name, rq.res.rule):
		return nil, invalidProperty("Name", "the body names the rule '%s' but the path names '%s'", r.Name, rq.res.rule)
	}
	r.Name = rq.res.rule
	if rq.r.Header.Get("If-Match") != "" {
		r, err = h.UpdateRule(rq.res.entity, rq.res.subscription, r)
		if err != nil {
			return nil, err
		}
		return ruleReply(http.StatusOK, rq, r), nil
	}
	r, err = h.CreateRule(rq.res.entity, rq.res.subscription, r)
	if err != nil {
		return nil, err
	}
	return ruleReply(http.StatusCreated, rq, r), nil
}

// deleteRule serves DELETE /{topic}/Subscriptions/{sub}/Rules/{rule}.
func deleteRule(h *Handler, rq *request) (*reply, error) {
	if err := h.DeleteRule(rq.res.entity, rq.res.subscription, rq.res.rule); err != nil {
		return nil, err
	}
	return &reply{status: http.StatusOK}, nil
}

// listRules serves GET /{topic}/Subscriptions/{sub}/Rules[/]?$skip=N&$top=M.
func listRules(h *Handler, rq *request) (*reply, error) {
	o, err := listOptions(rq.r.URL.Query())
	if err != nil {
		return nil, err
	}
	page, err := h.ListRules(rq.res.entity, rq.res.subscription, o)
	if err != nil {
		return nil, err
	}
	path := subscriptionPath(rq.res.entity, rq.res.subscription) + "/Rules"
	return feedReply(rq.site, "Rules", path, o, len(page.Rules), page.More, func(w *xmlWriter) {
		for _, r := range page.Rules {
			ruleEntry(w, false, rq.res.entity, rq.res.subscription, r, rq.site)
		}
	}), nil
}
