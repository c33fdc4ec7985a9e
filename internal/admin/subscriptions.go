package admin

import (
	"net/http"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
)

// Subscription is a subscription as the management API describes it: its
// settable properties and its runtime counts (§1.11).
type Subscription struct {
	TopicName  string
	Name       string
	Properties broker.SubscriptionProperties
	CreatedAt  time.Time
	UpdatedAt  time.Time
	AccessedAt time.Time // zero if never accessed
	Counts     MessageCounts
}

// SubscriptionPage is one page of a topic's subscriptions.
type SubscriptionPage struct {
	Subscriptions []Subscription
	// More reports whether subscriptions remain after this page.
	More bool
}

func subscriptionOf(info broker.SubscriptionInfo) Subscription {
	return Subscription{
		TopicName:  info.TopicName,
		Name:       info.Name,
		Properties: info.Properties,
		CreatedAt:  info.CreatedAt,
		UpdatedAt:  info.UpdatedAt,
		AccessedAt: info.AccessedAt,
		Counts:     countsOf(info.Counts),
	}
}

// GetSubscription returns a subscription's description with its runtime
// counts.
func (h *Handler) GetSubscription(topic, name string) (Subscription, error) {
	info, err := h.broker.GetSubscription(topic, name)
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(info), nil
}

// CreateSubscription creates a subscription of topic. Its first rule is
// defaultRule (the DefaultRuleDescription of the request, under its own
// name, §2.9 quirk 5), or, when that is nil, $Default: a TrueFilter
// without action.
func (h *Handler) CreateSubscription(topic, name string, p broker.SubscriptionProperties, defaultRule *broker.RuleDescription) (Subscription, error) {
	info, err := h.broker.CreateSubscription(topic, name, p, defaultRule)
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(info), nil
}

// UpdateSubscription replaces a subscription's properties; RequiresSession
// must keep its value. Its rules do not change.
func (h *Handler) UpdateSubscription(topic, name string, p broker.SubscriptionProperties) (Subscription, error) {
	info, err := h.broker.UpdateSubscription(topic, name, p)
	if err != nil {
		return Subscription{}, err
	}
	return subscriptionOf(info), nil
}

// DeleteSubscription deletes a subscription with its rules and messages.
func (h *Handler) DeleteSubscription(topic, name string) error {
	return h.broker.DeleteSubscription(topic, name)
}

// ListSubscriptions returns a page of topic's subscriptions in name order
// (case-insensitive).
func (h *Handler) ListSubscriptions(topic string, o ListOptions) (SubscriptionPage, error) {
	all, err := h.broker.ListSubscriptions(topic)
	if err != nil {
		return SubscriptionPage{}, err
	}
	infos, more := pageOf(all, o)
	page := SubscriptionPage{Subscriptions: make([]Subscription, 0, len(infos)), More: more}
	for _, info := range infos {
		page.Subscriptions = append(page.Subscriptions, subscriptionOf(info))
	}
	return page, nil
}

// subscriptionFields reads the settable elements of a
// SubscriptionDescription (§1.9); DefaultRuleDescription is read apart.
// Read-only ones (MessageCount, CountDetails, CreatedAt, UpdatedAt,
// AccessedAt, EntityAvailabilityStatus, IsClientAffine) are ignored.
var subscriptionFields = map[string]field[broker.SubscriptionProperties]{
	"LockDuration":                     durationField(func(p *broker.SubscriptionProperties) *time.Duration { return &p.LockDuration }),
	"RequiresSession":                  boolField(func(p *broker.SubscriptionProperties) *bool { return &p.RequiresSession }),
	"DefaultMessageTimeToLive":         durationField(func(p *broker.SubscriptionProperties) *time.Duration { return &p.DefaultMessageTimeToLive }),
	"DeadLetteringOnMessageExpiration": boolField(func(p *broker.SubscriptionProperties) *bool { return &p.DeadLetteringOnMessageExpiration }),
	"DeadLetteringOnFilterEvaluationExceptions": boolField(func(p *broker.SubscriptionProperties) *bool {
		return &p.DeadLetteringOnFilterEvaluationExceptions
	}),
	"MaxDeliveryCount":        int32Field(func(p *broker.SubscriptionProperties) *int32 { return &p.MaxDeliveryCount }),
	"EnableBatchedOperations": boolField(func(p *broker.SubscriptionProperties) *bool { return &p.EnableBatchedOperations }),
	"Status":                  statusField(func(p *broker.SubscriptionProperties) *broker.EntityStatus { return &p.Status }),
	"ForwardTo":               forwardField(func(p *broker.SubscriptionProperties) (*string, *string) { return &p.ForwardTo, &p.ForwardToAddress }),
	"UserMetadata":            stringField(func(p *broker.SubscriptionProperties) *string { return &p.UserMetadata }),
	"ForwardDeadLetteredMessagesTo": forwardField(func(p *broker.SubscriptionProperties) (*string, *string) {
		return &p.ForwardDeadLetteredMessagesTo, &p.ForwardDeadLetteredMessagesToAddress
	}),
	"AutoDeleteOnIdle": durationField(func(p *broker.SubscriptionProperties) *time.Duration { return &p.AutoDeleteOnIdle }),
}

// decodeSubscription reads a SubscriptionDescription: the service
// defaults overwritten by every element present, and its
// DefaultRuleDescription (nil when absent or empty).
func decodeSubscription(desc *element) (broker.SubscriptionProperties, *broker.RuleDescription, error) {
	p := broker.DefaultSubscriptionProperties()
	if err := decodeFields(desc, subscriptionFields, &p); err != nil {
		return broker.SubscriptionProperties{}, nil, err
	}
	var rule *broker.RuleDescription
	for _, c := range desc.children {
		if !c.is(nsServiceBus, "DefaultRuleDescription") || (c.isEmpty() && c.xsiType() == "") {
			continue
		}
		if rule != nil {
			return broker.SubscriptionProperties{}, nil, badRequest("The property DefaultRuleDescription is given more than once.")
		}
		r, err := decodeRule(c)
		if err != nil {
			return broker.SubscriptionProperties{}, nil, err
		}
		rule = &r
	}
	return p, rule, nil
}

// writeSubscriptionDescription writes sub as a SubscriptionDescription in
// the service's order (§1.8), with MessageCount and every CountDetails
// child (Go dereferences them, §1.11). DefaultRuleDescription is never
// written back.
func writeSubscriptionDescription(w *xmlWriter, sub Subscription, s *site) {
	p := sub.Properties
	w.open("SubscriptionDescription", "xmlns", nsServiceBus, "xmlns:i", nsXSI)
	w.duration("LockDuration", p.LockDuration)
	w.bool("RequiresSession", p.RequiresSession)
	w.duration("DefaultMessageTimeToLive", p.DefaultMessageTimeToLive)
	w.bool("DeadLetteringOnMessageExpiration", p.DeadLetteringOnMessageExpiration)
	w.bool("DeadLetteringOnFilterEvaluationExceptions", p.DeadLetteringOnFilterEvaluationExceptions)
	w.int("MessageCount", sub.Counts.Total)
	w.int("MaxDeliveryCount", int64(p.MaxDeliveryCount))
	w.bool("EnableBatchedOperations", p.EnableBatchedOperations)
	w.text("Status", string(p.Status))
	w.optText("ForwardTo", s.forwardURI(p.ForwardTo, p.ForwardToAddress))
	w.time("CreatedAt", sub.CreatedAt)
	w.time("UpdatedAt", sub.UpdatedAt)
	w.time("AccessedAt", sub.AccessedAt)
	w.optText("UserMetadata", p.UserMetadata)
	writeCountDetails(w, sub.Counts)
	w.optText("ForwardDeadLetteredMessagesTo", s.forwardURI(p.ForwardDeadLetteredMessagesTo, p.ForwardDeadLetteredMessagesToAddress))
	w.duration("AutoDeleteOnIdle", p.AutoDeleteOnIdle)
	w.text("EntityAvailabilityStatus", "Available")
	w.bool("IsClientAffine", false)
	w.close("SubscriptionDescription")
}

// subscriptionPath is the namespace-relative path of a subscription, with
// the capitalised path word the JS client looks for in ids (§1.6).
func subscriptionPath(topic, name string) string { return topic + "/Subscriptions/" + name }

// subscriptionEntry writes sub as an entry (no <author>, as the service
// writes subscription entries).
func subscriptionEntry(w *xmlWriter, topLevel bool, sub Subscription, s *site) {
	m := entryMeta{id: s.url(subscriptionPath(sub.TopicName, sub.Name), ""), title: sub.Name, published: sub.CreatedAt, updated: sub.UpdatedAt}
	writeEntry(w, topLevel, m, func(w *xmlWriter) { writeSubscriptionDescription(w, sub, s) })
}

func subscriptionReply(status int, sub Subscription, s *site) *reply {
	var w xmlWriter
	subscriptionEntry(&w, true, sub, s)
	return &reply{status: status, contentType: contentTypeEntry, body: w.bytes()}
}

// getSubscription serves GET /{topic}/Subscriptions/{sub}.
func getSubscription(h *Handler, rq *request) (*reply, error) {
	sub, err := h.GetSubscription(rq.res.entity, rq.res.subscription)
	if err != nil {
		return nil, err
	}
	return subscriptionReply(http.StatusOK, sub, rq.site), nil
}

// putSubscription serves PUT /{topic}/Subscriptions/{sub}: create (201,
// with the body's DefaultRuleDescription as its first rule), or update
// with If-Match (200; a DefaultRuleDescription is ignored, as the rules
// of an existing subscription change through the rule endpoints).
// Forwarding needs Send rights on the targets, as for queues (§1.4).
func putSubscription(h *Handler, rq *request) (*reply, error) {
	desc, err := bodyDescription(rq, "SubscriptionDescription")
	if err != nil {
		return nil, err
	}
	p, rule, err := decodeSubscription(desc)
	if err != nil {
		return nil, err
	}
	if err := h.authorizeForwarding(rq, p.ForwardTo, "ServiceBusSupplementaryAuthorization"); err != nil {
		return nil, err
	}
	if err := h.authorizeForwarding(rq, p.ForwardDeadLetteredMessagesTo, "ServiceBusDlqSupplementaryAuthorization"); err != nil {
		return nil, err
	}
	if rq.r.Header.Get("If-Match") != "" {
		sub, err := h.UpdateSubscription(rq.res.entity, rq.res.subscription, p)
		if err != nil {
			return nil, err
		}
		return subscriptionReply(http.StatusOK, sub, rq.site), nil
	}
	sub, err := h.CreateSubscription(rq.res.entity, rq.res.subscription, p, rule)
	if err != nil {
		return nil, err
	}
	return subscriptionReply(http.StatusCreated, sub, rq.site), nil
}

// deleteSubscription serves DELETE /{topic}/Subscriptions/{sub}.
func deleteSubscription(h *Handler, rq *request) (*reply, error) {
	if err := h.DeleteSubscription(rq.res.entity, rq.res.subscription); err != nil {
		return nil, err
	}
	return &reply{status: http.StatusOK}, nil
}

// listSubscriptions serves GET /{topic}/Subscriptions[/]?$skip=N&$top=M.
func listSubscriptions(h *Handler, rq *request) (*reply, error) {
	o, err := listOptions(rq.r.URL.Query())
	if err != nil {
		return nil, err
	}
	page, err := h.ListSubscriptions(rq.res.entity, o)
	if err != nil {
		return nil, err
	}
	path := rq.res.entity + "/Subscriptions"
	return feedReply(rq.site, "Subscriptions", path, o, len(page.Subscriptions), page.More, func(w *xmlWriter) {
		for _, sub := range page.Subscriptions {
			subscriptionEntry(w, false, sub, rq.site)
		}
	}), nil
}

// bodyDescription reads a PUT body that must describe a want
// (SubscriptionDescription, RuleDescription).
func bodyDescription(rq *request, want string) (*element, error) {
	root, err := readBody(rq.r.Body)
	if err != nil {
		return nil, err
	}
	desc, err := description(root)
	if err != nil {
		return nil, err
	}
	if !desc.is(nsServiceBus, want) {
		return nil, badRequest("The body describes a <%s>; a PUT on this path takes a %s.", desc.name.Local, want)
	}
	return desc, nil
}
