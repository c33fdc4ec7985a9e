package admin

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/history"
)

// Message histories: Busbar's own endpoint for a broker started with
// --history sampled|on, under a '$' name no entity can have, with the
// API's authorisation (Manage), JSON answers and <Error> failures:
//
//	/$history/{entity}/messages/{seq}            GET  the life of message seq of entity
//	/$history/{entity}/messages?message-id={id}  GET  the lives of the messages with that id
//
// {entity} is a queue, a topic or a subscription's path; a sub-queue's
// path ("…/$DeadLetterQueue") names its entity, whose history covers its
// sub-queues. The answer:
//
//	{"entity": …, "sequenceNumber": n | "messageId": …, "now": RFC 3339 (broker clock),
//	 "mode": "on" | "sampled",
//	 "messages": [{"entity", "sequenceNumber", "messageId", "events": [event…]}, …]}
//
// messages holds the message asked for, then the ones it led to: its
// copies in a topic's subscriptions, the entities it was auto-forwarded
// to. 404 when histories are off, or when none is kept for the message
// (never sent, not sampled, or forgotten: see --history-window,
// --history-messages, --history-max-bytes).

// maxHistoryID bounds a ?message-id= (Service Bus allows 128 characters).
const maxHistoryID = 256

func getHistory(h *Handler, rq *request) (*reply, error) {
	log := h.broker.History()
	if log == nil {
		return nil, errorf(http.StatusNotFound, "Message histories are off: start the broker with --history on or --history sampled (BUSBAR_HISTORY) to use /$history.")
	}
	p, err := broker.ParsePath(rq.res.entity)
	if err != nil || p.Entity == "" {
		return nil, badRequest("'%s' is not a queue, topic or subscription path.", rq.res.entity)
	}
	now := h.broker.Now()
	ans := history.Answer{Entity: p.Entity, Now: now.UTC().Format(time.RFC3339Nano), Mode: log.Config().Mode.String()}
	q := rq.r.URL.Query()
	id, byID := q.Get("message-id"), q.Has("message-id")
	switch {
	case rq.res.seq != "" && byID:
		return nil, badRequest("Ask by sequence number or by message id, not both.")
	case rq.res.seq != "":
		seq, err := strconv.ParseInt(rq.res.seq, 10, 64)
		if err != nil || seq < 0 {
			return nil, badRequest("'%s' is not a sequence number (a whole number ≥ 0).", rq.res.seq)
		}
		ans.SequenceNumber = seq
		ans.Messages = log.BySeq(now, p.Entity, seq)
	case !byID || strings.TrimSpace(id) == "":
		return nil, badRequest("Name the message: /$history/{entity}/messages/{sequence number} or /$history/{entity}/messages?message-id={id}.")
	case len(id) > maxHistoryID:
		return nil, badRequest("The message id is %d bytes long; message ids have at most %d.", len(id), maxHistoryID)
	default:
		ans.MessageID = id
		ans.Messages = log.ByMessageID(now, p.Entity, id)
	}
	if len(ans.Messages) == 0 {
		what := "sequence number " + rq.res.seq
		if byID {
			what = "message id '" + id + "'"
		}
		return nil, errorf(http.StatusNotFound, "No history is kept for %s in '%s': no such message was sent while histories were on, it was not sampled (--history sampled keeps 1 in %d), or it was forgotten (--history-window, --history-messages, --history-max-bytes).",
			what, p.Entity, log.Config().SampleEvery)
	}
	return jsonReply(http.StatusOK, ans)
}
