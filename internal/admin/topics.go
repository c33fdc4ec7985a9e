package admin

import (
	"net/http"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
)

// Topic is a topic as the management API describes it: its settable
// properties and its runtime properties (§1.11).
type Topic struct {
	Name       string
	Properties broker.TopicProperties
	CreatedAt  time.Time
	UpdatedAt  time.Time
	AccessedAt time.Time // zero if never accessed
	// SubscriptionCount, SQLFilterCount (SQL, true and false filters) and
	// CorrelationFilterCount count every subscription and rule, the
	// default rules included.
	SubscriptionCount      int
	SQLFilterCount         int
	CorrelationFilterCount int
	// Counts: a topic holds only its scheduled messages (Scheduled) and
	// reports the size its quota counts; the other counts live in its
	// subscriptions.
	Counts MessageCounts
}

// TopicPage is one page of topics.
type TopicPage struct {
	Topics []Topic
	// More reports whether topics remain after this page.
	More bool
}

func topicOf(info broker.TopicInfo) Topic {
	return Topic{
		Name:                   info.Name,
		Properties:             info.Properties,
		CreatedAt:              info.CreatedAt,
		UpdatedAt:              info.UpdatedAt,
		AccessedAt:             info.AccessedAt,
		SubscriptionCount:      info.SubscriptionCount,
		SQLFilterCount:         info.SQLFilterCount,
		CorrelationFilterCount: info.CorrelationFilterCount,
		Counts:                 countsOf(info.Counts),
	}
}

// GetTopic returns a topic's description with its runtime counts.
func (h *Handler) GetTopic(name string) (Topic, error) {
	info, err := h.broker.GetTopic(name)
	if err != nil {
		return Topic{}, err
	}
	return topicOf(info), nil
}

// CreateTopic creates a topic. Queues and topics share one name space: a
// name either has is a conflict. The broker validates the name and every
// property.
func (h *Handler) CreateTopic(name string, p broker.TopicProperties) (Topic, error) {
	info, err := h.broker.CreateTopic(name, p)
	if err != nil {
		return Topic{}, err
	}
	return topicOf(info), nil
}

// UpdateTopic replaces a topic's properties; immutable ones
// (RequiresDuplicateDetection, EnablePartitioning) must keep their values.
func (h *Handler) UpdateTopic(name string, p broker.TopicProperties) (Topic, error) {
	info, err := h.broker.UpdateTopic(name, p)
	if err != nil {
		return Topic{}, err
	}
	return topicOf(info), nil
}

// DeleteTopic deletes a topic with its subscriptions, their rules and
// messages.
func (h *Handler) DeleteTopic(name string) error {
	return h.broker.DeleteTopic(name)
}

// ListTopics returns a page of topics in name order (case-insensitive).
func (h *Handler) ListTopics(o ListOptions) TopicPage {
	infos, more := pageOf(h.broker.ListTopics(), o)
	page := TopicPage{Topics: make([]Topic, 0, len(infos)), More: more}
	for _, info := range infos {
		page.Topics = append(page.Topics, topicOf(info))
	}
	return page
}

// topicFields reads the settable elements of a TopicDescription (§1.9).
// Read-only ones (SizeInBytes, CountDetails, SubscriptionCount,
// SqlFilterCount, CorrelationFilterCount, CreatedAt, …) are ignored.
var topicFields = map[string]field[broker.TopicProperties]{
	"DefaultMessageTimeToLive":            durationField(func(p *broker.TopicProperties) *time.Duration { return &p.DefaultMessageTimeToLive }),
	"MaxSizeInMegabytes":                  int64Field(func(p *broker.TopicProperties) *int64 { return &p.MaxSizeInMegabytes }),
	"RequiresDuplicateDetection":          boolField(func(p *broker.TopicProperties) *bool { return &p.RequiresDuplicateDetection }),
	"DuplicateDetectionHistoryTimeWindow": durationField(func(p *broker.TopicProperties) *time.Duration { return &p.DuplicateDetectionHistoryTimeWindow }),
	"EnableBatchedOperations":             boolField(func(p *broker.TopicProperties) *bool { return &p.EnableBatchedOperations }),
	"FilteringMessagesBeforePublishing":   boolField(func(p *broker.TopicProperties) *bool { return &p.FilteringMessagesBeforePublishing }),
	"IsAnonymousAccessible":               boolField(func(p *broker.TopicProperties) *bool { return &p.IsAnonymousAccessible }),
	"AuthorizationRules":                  authorizationRulesField(func(p *broker.TopicProperties) *[]broker.AuthorizationRule { return &p.AuthorizationRules }),
	"Status":                              statusField(func(p *broker.TopicProperties) *broker.EntityStatus { return &p.Status }),
	"UserMetadata":                        stringField(func(p *broker.TopicProperties) *string { return &p.UserMetadata }),
	"SupportOrdering":                     boolField(func(p *broker.TopicProperties) *bool { return &p.SupportOrdering }),
	"AutoDeleteOnIdle":                    durationField(func(p *broker.TopicProperties) *time.Duration { return &p.AutoDeleteOnIdle }),
	"EnablePartitioning":                  boolField(func(p *broker.TopicProperties) *bool { return &p.EnablePartitioning }),
	"EnableSubscriptionPartitioning":      boolField(func(p *broker.TopicProperties) *bool { return &p.EnableSubscriptionPartitioning }),
	"EnableExpress":                       boolField(func(p *broker.TopicProperties) *bool { return &p.EnableExpress }),
	"MaxMessageSizeInKilobytes":           int64Field(func(p *broker.TopicProperties) *int64 { return &p.MaxMessageSizeInKilobytes }),
}

// decodeTopicProperties reads a TopicDescription: the service defaults,
// overwritten by every element present (create and update alike).
func decodeTopicProperties(desc *element, now time.Time) (broker.TopicProperties, error) {
	p := broker.DefaultTopicProperties()
	if err := decodeFields(desc, topicFields, &p); err != nil {
		return broker.TopicProperties{}, err
	}
	if err := completeAuthorizationRules(p.AuthorizationRules, now); err != nil {
		return broker.TopicProperties{}, err
	}
	return p, nil
}

// writeTopicDescription writes t as a TopicDescription in the service's
// order (§1.8), runtime elements included (§1.11). A topic has no
// forwarding.
func writeTopicDescription(w *xmlWriter, t Topic) {
	p := t.Properties
	w.open("TopicDescription", "xmlns", nsServiceBus, "xmlns:i", nsXSI)
	w.duration("DefaultMessageTimeToLive", p.DefaultMessageTimeToLive)
	w.int("MaxSizeInMegabytes", reportedMaxSize(p.MaxSizeInMegabytes, p.EnablePartitioning))
	w.bool("RequiresDuplicateDetection", p.RequiresDuplicateDetection)
	w.duration("DuplicateDetectionHistoryTimeWindow", p.DuplicateDetectionHistoryTimeWindow)
	w.bool("EnableBatchedOperations", p.EnableBatchedOperations)
	w.int("SizeInBytes", t.Counts.SizeInBytes)
	w.bool("FilteringMessagesBeforePublishing", p.FilteringMessagesBeforePublishing)
	w.bool("IsAnonymousAccessible", p.IsAnonymousAccessible)
	writeAuthorizationRules(w, p.AuthorizationRules)
	w.text("Status", string(p.Status))
	w.time("CreatedAt", t.CreatedAt)
	w.time("UpdatedAt", t.UpdatedAt)
	w.time("AccessedAt", t.AccessedAt)
	w.optText("UserMetadata", p.UserMetadata)
	w.bool("SupportOrdering", p.SupportOrdering)
	writeCountDetails(w, t.Counts)
	w.int("SubscriptionCount", int64(t.SubscriptionCount))
	w.int("SqlFilterCount", int64(t.SQLFilterCount))
	w.int("CorrelationFilterCount", int64(t.CorrelationFilterCount))
	w.duration("AutoDeleteOnIdle", p.AutoDeleteOnIdle)
	w.bool("EnablePartitioning", p.EnablePartitioning)
	w.text("EntityAvailabilityStatus", "Available")
	w.bool("EnableSubscriptionPartitioning", p.EnableSubscriptionPartitioning)
	w.bool("EnableExpress", p.EnableExpress)
	w.int("MaxMessageSizeInKilobytes", p.MaxMessageSizeInKilobytes)
	w.close("TopicDescription")
}

// topicEntry writes t as an entry inside a feed, or a top-level one.
func topicEntry(w *xmlWriter, topLevel bool, t Topic, s *site) {
	m := entryMeta{id: s.url(t.Name, ""), title: t.Name, published: t.CreatedAt, updated: t.UpdatedAt, author: s.namespace}
	writeEntry(w, topLevel, m, func(w *xmlWriter) { writeTopicDescription(w, t) })
}

func topicReply(status int, t Topic, s *site) *reply {
	var w xmlWriter
	topicEntry(&w, true, t, s)
	return &reply{status: status, contentType: contentTypeEntry, body: w.bytes()}
}

// putTopic serves PUT /{entity} with a TopicDescription: create (201), or
// update with If-Match (200).
func putTopic(h *Handler, rq *request, desc *element) (*reply, error) {
	p, err := decodeTopicProperties(desc, rq.site.now)
	if err != nil {
		return nil, err
	}
	name := rq.res.entity
	if rq.r.Header.Get("If-Match") != "" {
		if old, err := h.broker.GetTopic(name); err == nil {
			p.MaxSizeInMegabytes = updatedMaxSize(p.MaxSizeInMegabytes, p.EnablePartitioning, old.Properties.MaxSizeInMegabytes)
		}
		t, err := h.UpdateTopic(name, p)
		if broker.KindOf(err) == broker.KindNotFound {
			if _, qerr := h.broker.GetQueue(name); qerr == nil {
				return nil, errorf(http.StatusConflict, "'%s' is a queue: a TopicDescription cannot update it; send a QueueDescription.", name)
			}
		}
		if err != nil {
			return nil, err
		}
		return topicReply(http.StatusOK, t, rq.site), nil
	}
	info, err := h.broker.CreateTopicWithID(rq.entityID, name, p)
	if err != nil {
		return nil, err
	}
	t := topicOf(info)
	return topicReply(http.StatusCreated, t, rq.site), nil
}

// listTopics serves GET /$Resources/Topics?$skip=N&$top=M.
func listTopics(h *Handler, rq *request) (*reply, error) {
	return h.listReply(rq, "Topics")
}
