package admin

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
)

// Queue is a queue as the management API describes it: its settable
// properties and its runtime properties.
type Queue struct {
	Name       string
	Properties broker.QueueProperties
	CreatedAt  time.Time
	UpdatedAt  time.Time
	AccessedAt time.Time // zero if never accessed
	Counts     MessageCounts
}

// MessageCounts are an entity's runtime counts as the management API
// reports them (MessageCount, SizeInBytes and CountDetails, §1.11).
type MessageCounts struct {
	// Active counts messages available, locked or deferred: Service Bus
	// has no deferred count and reports deferred messages as active.
	Active             int64
	DeadLetter         int64
	Scheduled          int64
	Transfer           int64
	TransferDeadLetter int64
	// Total is MessageCount: every message of every sub-queue.
	Total       int64
	SizeInBytes int64
}

func queueOf(info broker.QueueInfo) Queue {
	return Queue{
		Name:       info.Name,
		Properties: info.Properties,
		CreatedAt:  info.CreatedAt,
		UpdatedAt:  info.UpdatedAt,
		AccessedAt: info.AccessedAt,
		Counts:     countsOf(info.Counts),
	}
}

// countsOf maps the broker's counts of a queue, topic or subscription
// onto the management API's.
func countsOf(c broker.Counts) MessageCounts {
	return MessageCounts{
		Active:             c.Active + c.Deferred,
		DeadLetter:         c.DeadLetter,
		Scheduled:          c.Scheduled,
		Transfer:           c.Transfer,
		TransferDeadLetter: c.TransferDeadLetter,
		Total:              c.Total,
		SizeInBytes:        c.SizeInBytes,
	}
}

// Paging limits of list requests (§1.3).
const (
	DefaultPageSize = 100 // $top when absent
	MaxPageSize     = 100 // larger $top values are cut to this
)

// ListOptions select one page of a list, by name order.
type ListOptions struct {
	Skip int // entries to skip; 0 or more
	Top  int // page size; 0 means DefaultPageSize, more than MaxPageSize means MaxPageSize
}

// QueuePage is one page of queues.
type QueuePage struct {
	Queues []Queue
	// More reports whether queues remain after this page.
	More bool
}

// GetQueue returns a queue's description with its runtime counts.
func (h *Handler) GetQueue(name string) (Queue, error) {
	info, err := h.broker.GetQueue(name)
	if err != nil {
		return Queue{}, err
	}
	return queueOf(info), nil
}

// CreateQueue creates a queue. The broker validates the name and every
// property.
func (h *Handler) CreateQueue(name string, p broker.QueueProperties) (Queue, error) {
	info, err := h.broker.CreateQueue(name, p)
	if err != nil {
		return Queue{}, err
	}
	return queueOf(info), nil
}

// UpdateQueue replaces a queue's properties; immutable ones
// (RequiresSession, RequiresDuplicateDetection, EnablePartitioning) must
// keep their values.
func (h *Handler) UpdateQueue(name string, p broker.QueueProperties) (Queue, error) {
	info, err := h.broker.UpdateQueue(name, p)
	if err != nil {
		return Queue{}, err
	}
	return queueOf(info), nil
}

// DeleteQueue deletes a queue with its messages.
func (h *Handler) DeleteQueue(name string) error {
	return h.broker.DeleteQueue(name)
}

// ListQueues returns a page of queues in name order (case-insensitive),
// stable across calls while no queue is created or deleted. A Skip past
// the end gives an empty page.
func (h *Handler) ListQueues(o ListOptions) QueuePage {
	infos, more := pageOf(h.broker.ListQueues(), o)
	page := QueuePage{Queues: make([]Queue, 0, len(infos)), More: more}
	for _, info := range infos {
		page.Queues = append(page.Queues, queueOf(info))
	}
	return page
}

// pageSize is o's page size: Top, DefaultPageSize when unset, at most
// MaxPageSize.
func (o ListOptions) pageSize() int {
	if o.Top <= 0 {
		return DefaultPageSize
	}
	return min(o.Top, MaxPageSize)
}

// pageOf cuts the page o selects out of all, and reports whether entries
// remain after it.
func pageOf[T any](all []T, o ListOptions) (page []T, more bool) {
	skip := min(max(o.Skip, 0), len(all))
	end := min(skip+o.pageSize(), len(all))
	return all[skip:end], end < len(all)
}

// queueEntry writes q as an entry inside a feed, or a top-level one.
func queueEntry(w *xmlWriter, topLevel bool, q Queue, s *site) {
	m := entryMeta{id: s.url(q.Name, ""), title: q.Name, published: q.CreatedAt, updated: q.UpdatedAt, author: s.namespace}
	writeEntry(w, topLevel, m, func(w *xmlWriter) { writeQueueDescription(w, q, s) })
}

func queueReply(status int, q Queue, s *site) *reply {
	var w xmlWriter
	queueEntry(&w, true, q, s)
	return &reply{status: status, contentType: contentTypeEntry, body: w.bytes()}
}

// partitions is how many partitions Service Bus gives a queue or topic
// with EnablePartitioning (Standard tier). Each has the MaxSizeInMegabytes
// the entity was created with, and the service reports their sum.
const partitions = 16

// reportedMaxSize is the MaxSizeInMegabytes the service shows for an
// entity created with size (per partition when partitioned).
func reportedMaxSize(size int64, partitioned bool) int64 {
	if partitioned {
		return size * partitions
	}
	return size
}

// updatedMaxSize is the size an update of a partitioned entity stores:
// the reported total sent back unchanged (the SDKs' get-modify-update)
// keeps the size per partition; any other value is per partition, as on
// create.
func updatedMaxSize(sent int64, partitioned bool, stored int64) int64 {
	if partitioned && sent == stored*partitions {
		return stored
	}
	return sent
}

// getEntity serves GET /{entity}: the queue or topic with its runtime
// counts, or 404 (which Go's GetQueue and GetTopic turn into nil, nil,
// §1.5).
func getEntity(h *Handler, rq *request) (*reply, error) {
	q, err := h.GetQueue(rq.res.entity)
	if err == nil {
		return queueReply(http.StatusOK, q, rq.site), nil
	}
	if broker.KindOf(err) != broker.KindNotFound {
		return nil, err
	}
	t, terr := h.GetTopic(rq.res.entity)
	if terr != nil {
		return nil, notTopic(err, terr)
	}
	return topicReply(http.StatusOK, t, rq.site), nil
}

// notTopic is the error of a request on /{entity} that found no queue
// (qerr, not found) and then no topic (terr): qerr, unless the topic
// lookup failed for another reason than the name (a closed broker, a
// store failure). A sub-queue path such as q/$DeadLetterQueue, not a
// valid topic name, keeps the queue's answer.
func notTopic(qerr, terr error) error {
	switch broker.KindOf(terr) {
	case broker.KindNotFound, broker.KindInvalidArgument:
		return qerr
	}
	return terr
}

// putEntity serves PUT /{entity}: create (201), or update when If-Match
// is present (200, §1.4). The body's description element says what kind
// of entity it is.
func putEntity(h *Handler, rq *request) (*reply, error) {
	root, err := readBody(rq.r.Body)
	if err != nil {
		return nil, err
	}
	desc, err := description(root)
	if err != nil {
		return nil, err
	}
	switch {
	case desc.is(nsServiceBus, "QueueDescription"):
		return putQueue(h, rq, desc)
	case desc.is(nsServiceBus, "TopicDescription"):
		return putTopic(h, rq, desc)
	}
	return nil, badRequest("The body describes a <%s>; a PUT on an entity path takes a QueueDescription or a TopicDescription.", desc.name.Local)
}

func putQueue(h *Handler, rq *request, desc *element) (*reply, error) {
	p, err := decodeQueueProperties(desc, rq.site.now)
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
		if old, err := h.broker.GetQueue(rq.res.entity); err == nil {
			p.MaxSizeInMegabytes = updatedMaxSize(p.MaxSizeInMegabytes, p.EnablePartitioning, old.Properties.MaxSizeInMegabytes)
		}
		q, err := h.UpdateQueue(rq.res.entity, p)
		if broker.KindOf(err) == broker.KindNotFound {
			if _, terr := h.broker.GetTopic(rq.res.entity); terr == nil {
				return nil, errorf(http.StatusConflict, "'%s' is a topic: a QueueDescription cannot update it; send a TopicDescription.", rq.res.entity)
			}
		}
		if err != nil {
			return nil, err
		}
		return queueReply(http.StatusOK, q, rq.site), nil
	}
	info, err := h.broker.CreateQueueWithID(rq.entityID, rq.res.entity, p)
	if err != nil {
		return nil, err
	}
	q := queueOf(info)
	return queueReply(http.StatusCreated, q, rq.site), nil
}

// deleteEntity serves DELETE /{entity}: the queue or topic (with its
// subscriptions), 200 with an empty body, or 404.
func deleteEntity(h *Handler, rq *request) (*reply, error) {
	err := h.DeleteQueue(rq.res.entity)
	if broker.KindOf(err) == broker.KindNotFound {
		if terr := h.DeleteTopic(rq.res.entity); terr == nil {
			err = nil
		} else {
			err = notTopic(err, terr)
		}
	}
	if err != nil {
		return nil, err
	}
	return &reply{status: http.StatusOK}, nil
}

// listQueues serves GET /$Resources/Queues?$skip=N&$top=M: a feed with
// rel="next" while queues remain.
func listQueues(h *Handler, rq *request) (*reply, error) {
	return h.listReply(rq, "Queues")
}

// feedReply is a 200 feed of one page: n entries written by entries,
// whose self link is path with o's paging, and which has a next link when
// more entries remain.
func feedReply(s *site, title, path string, o ListOptions, n int, more bool, entries func(*xmlWriter)) *reply {
	m := feedMeta{title: title, self: s.url(path, pageQuery(o, o.Skip)), updated: s.now}
	if more {
		m.next = s.url(path, pageQuery(o, o.Skip+n))
	}
	var w xmlWriter
	writeFeed(&w, m, entries)
	return &reply{status: http.StatusOK, contentType: contentTypeFeed, body: w.bytes()}
}

// listOptions reads $skip and $top (the URL parser has decoded %24skip).
func listOptions(q url.Values) (ListOptions, error) {
	var o ListOptions
	for _, p := range []struct {
		name string
		min  int
		dst  *int
	}{{"$skip", 0, &o.Skip}, {"$top", 1, &o.Top}} {
		v := queryParam(q, p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < p.min {
			return ListOptions{}, badRequest("The query parameter %s must be a whole number of at least %d, not %q.", p.name, p.min, v)
		}
		*p.dst = n
	}
	return o, nil
}

// pageQuery is the query of a page's link: $skip, and $top if the client
// chose one. They are written unescaped, "$skip=N", which every URL
// parser reads and any pattern match on the href finds.
func pageQuery(o ListOptions, skip int) string {
	var q []string
	if skip > 0 {
		q = append(q, "$skip="+strconv.Itoa(skip))
	}
	if o.Top > 0 {
		q = append(q, "$top="+strconv.Itoa(o.Top))
	}
	return strings.Join(q, "&")
}
