package admin

// The HTTP data plane: Service Bus's REST runtime API for sending and
// receiving messages, served beside the management API on the same port
// and with the same tokens (docs/http-data-plane.md).
//
//	POST   /{queue|topic}/messages                      send one message (201); with Content-Type
//	                                                    application/vnd.microsoft.servicebus.json, a batch
//	POST   /{queue|topic/subscriptions/sub}/messages/head  ?timeout=S   peek-lock (201, 204 if none)
//	DELETE /{queue|topic/subscriptions/sub}/messages/head  ?timeout=S   receive and delete (200, 204)
//	PUT    /{…}/messages/{seq or id}/{lock token}       unlock (abandon) (200)
//	DELETE /{…}/messages/{seq or id}/{lock token}       complete (200)
//	POST   /{…}/messages/{seq or id}/{lock token}       renew the lock (200)
//
// A path is a data-plane path when its method and ending match a line
// above (the lock token must be a UUID); every other request is the
// management API's. Send needs the Send right, the others Listen, on a
// token that covers the entity. The lock token alone identifies a locked
// message; the segment before it (a sequence number or a message id, as
// the service's Location header gives it) is not checked.

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// dataOp is a data-plane operation.
type dataOp uint8

const (
	opSend dataOp = iota + 1
	opPeekLock
	opReceiveDelete
	opUnlock
	opComplete
	opRenew
)

// dataRequest is a parsed data-plane path.
type dataRequest struct {
	op     dataOp
	entity string    // entity path as the URL gives it
	lock   uuid.UUID // opUnlock, opComplete, opRenew
}

// Data-plane limits.
const (
	// defaultReceiveTimeout and maxReceiveTimeout bound ?timeout= on a
	// receive (seconds): how long it waits for a message.
	defaultReceiveTimeout = 60
	maxReceiveTimeout     = 600
	// maxWaitingReceives bounds the receives waiting for a message at
	// once; more are answered 503 at once.
	maxWaitingReceives = 1024
	// maxBatchMessages bounds the messages of one batch send.
	maxBatchMessages = 4500
	// bodyOverhead is what a request body may hold beyond the entity's
	// maximum message size (JSON escaping and framing of a batch).
	bodyOverhead = 64 << 10
)

// parseDataPath recognises a data-plane request from its method and its
// decoded path (no leading or trailing '/'); ok is false for management
// requests.
func parseDataPath(method, path string) (dataRequest, bool) {
	segs := strings.Split(path, "/")
	n := len(segs)
	word := func(i int, w string) bool { return i >= 0 && i < n && strings.EqualFold(segs[i], w) }
	join := func(k int) string { return strings.Join(segs[:k], "/") }
	switch {
	case n >= 2 && method == http.MethodPost && word(n-1, "messages"):
		return dataRequest{op: opSend, entity: join(n - 1)}, true
	case n >= 3 && word(n-2, "messages") && word(n-1, "head"):
		switch method {
		case http.MethodPost:
			return dataRequest{op: opPeekLock, entity: join(n - 2)}, true
		case http.MethodDelete:
			return dataRequest{op: opReceiveDelete, entity: join(n - 2)}, true
		}
	case n >= 4 && word(n-3, "messages"):
		tok, err := uuid.Parse(segs[n-1])
		if err != nil || len(segs[n-1]) != 36 {
			return dataRequest{}, false
		}
		op := map[string]dataOp{http.MethodPut: opUnlock, http.MethodDelete: opComplete, http.MethodPost: opRenew}[method]
		if op == 0 {
			return dataRequest{}, false
		}
		return dataRequest{op: op, entity: join(n - 3), lock: tok}, true
	}
	return dataRequest{}, false
}

// waiters counts the receives waiting for a message, and stops them all
// when the server shuts down.
type waiters struct {
	sem      chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
}

func newWaiters() *waiters {
	return &waiters{sem: make(chan struct{}, maxWaitingReceives), stop: make(chan struct{})}
}

// StopWaiting ends every data-plane receive that is waiting for a message
// (each answers 503) and makes later ones answer at once: the HTTP
// server's shutdown calls it, so that it does not wait out their timeouts.
func (h *Handler) StopWaiting() {
	h.waiters.stopOnce.Do(func() { close(h.waiters.stop) })
}

// serveData authorises and serves a data-plane request.
func (h *Handler) serveData(rq *request, dr dataRequest) (*reply, error) {
	rep, err := h.dataOp(rq, dr)
	if err != nil {
		return nil, &dataPlaneError{err: err}
	}
	return rep, nil
}

func (h *Handler) dataOp(rq *request, dr dataRequest) (*reply, error) {
	g, err := h.authenticate(rq, dr.entity)
	if err != nil {
		return nil, err
	}
	need, what := auth.Listen, "Listen"
	if dr.op == opSend {
		need, what = auth.Send, "Send"
	}
	if !g.Rights.Has(need) || !g.Covers(dr.entity) {
		return nil, errorf(http.StatusUnauthorized, "Unauthorized access. '%s' claim(s) are required to perform this operation on '%s'; the key '%s' grants %s.", what, dr.entity, g.KeyName, g.Rights)
	}
	rq.grant = g
	if rep, ok, err := h.forward(rq, unitOf(dr.entity)); ok {
		return rep, err
	}
	ctx := rq.r.Context()
	switch dr.op {
	case opSend:
		return h.dataSend(rq, dr.entity)
	case opPeekLock:
		return h.dataReceive(rq, dr.entity, broker.PeekLock)
	case opReceiveDelete:
		return h.dataReceive(rq, dr.entity, broker.ReceiveAndDelete)
	case opUnlock:
		err = h.broker.Abandon(ctx, dr.entity, dr.lock, nil)
	case opComplete:
		err = h.broker.Complete(ctx, dr.entity, dr.lock)
	case opRenew:
		_, err = h.broker.RenewLock(ctx, dr.entity, []uuid.UUID{dr.lock})
	}
	if err != nil {
		return nil, err
	}
	return &reply{status: http.StatusOK}, nil
}

// maxSendBytes is the largest request body a send to entity may have: the
// entity's maximum message size plus bodyOverhead.
func (h *Handler) maxSendBytes(entity string) (int64, error) {
	typ, p, err := h.broker.Resolve(entity)
	if err != nil {
		return 0, err
	}
	var kb int64
	switch typ {
	case broker.EntityQueue:
		qi, err := h.broker.GetQueue(p.Entity)
		if err != nil {
			return 0, err
		}
		kb = qi.Properties.MaxMessageSizeInKilobytes
	case broker.EntityTopic:
		ti, err := h.broker.GetTopic(p.Entity)
		if err != nil {
			return 0, err
		}
		kb = ti.Properties.MaxMessageSizeInKilobytes
	default:
		return 0, errorf(http.StatusBadRequest, "'%s' is a %s; messages are sent to a queue or a topic.", entity, typ)
	}
	return kb*1024 + bodyOverhead, nil
}

// dataSend sends the request's message, or its batch.
func (h *Handler) dataSend(rq *request, entity string) (*reply, error) {
	limit, err := h.maxSendBytes(entity)
	if err != nil {
		return nil, err
	}
	ct := rq.r.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	batch := strings.EqualFold(mt, contentTypeBatch)
	if !batch && rq.r.ContentLength >= dataStreamFrom && h.broker.CanSpool() {
		return h.dataSendSpooled(rq, entity, limit, ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, rq.r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &broker.Error{Kind: broker.KindMessageTooLarge, Msg: "The request body is over " + strconv.FormatInt(limit, 10) + " bytes, more than the entity's maximum message size allows."}
		}
		return nil, badRequest("Reading the request body failed: %v.", err)
	}
	var msgs []*message.Message
	if batch {
		if msgs, err = parseBatch(body, maxBatchMessages); err != nil {
			return nil, err
		}
	} else {
		m := &message.Message{Body: encodeDataBody(body), ContentType: ct}
		if err := headerProps(rq, m); err != nil {
			return nil, err
		}
		msgs = []*message.Message{m}
	}
	return h.sendMessages(rq, entity, msgs)
}

// headerProps sets m's properties from the request's headers.
func headerProps(rq *request, m *message.Message) error {
	if err := parseBrokerProps(rq.r.Header.Get("BrokerProperties"), m); err != nil {
		return err
	}
	var err error
	m.ApplicationProperties, err = customProps(rq.r.Header)
	return err
}

// sendMessages sends msgs, durable, each with a message id.
func (h *Handler) sendMessages(rq *request, entity string, msgs []*message.Message) (*reply, error) {
	for _, m := range msgs {
		m.Durable = true
		if m.MessageID == nil {
			m.MessageID = strings.ReplaceAll(uuid.NewString(), "-", "")
		}
	}
	if err := h.broker.Send(rq.r.Context(), entity, msgs); err != nil {
		return nil, err
	}
	return &reply{status: http.StatusCreated}, nil
}

// receiveTimeout reads ?timeout= (seconds).
func receiveTimeout(rq *request) (time.Duration, error) {
	v := queryParam(rq.r.URL.Query(), "timeout")
	if v == "" {
		return defaultReceiveTimeout * time.Second, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxReceiveTimeout {
		return 0, badRequest("The timeout '%s' is not a whole number of seconds from 0 to %d.", v, maxReceiveTimeout)
	}
	return time.Duration(n) * time.Second, nil
}

// dataReceive takes one message, waiting up to the request's timeout.
func (h *Handler) dataReceive(rq *request, entity string, mode broker.ReceiveMode) (*reply, error) {
	timeout, err := receiveTimeout(rq)
	if err != nil {
		return nil, err
	}
	rcv, err := h.broker.OpenReceiver(entity, mode)
	if err != nil {
		return nil, err
	}
	defer rcv.Close()
	rcv.SetHolder("http " + rq.r.RemoteAddr)
	rcv.StreamBodies(dataStreamFrom)
	ds, err := rcv.TryReceive(1)
	if err != nil || len(ds) == 1 || timeout == 0 {
		return h.received(rq, entity, mode, ds, err)
	}
	select {
	case h.waiters.sem <- struct{}{}:
		defer func() { <-h.waiters.sem }()
	default:
		return nil, errorf(http.StatusServiceUnavailable, "%d receives are already waiting for messages; retry later or with timeout=0.", maxWaitingReceives)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-rcv.Ready():
		case <-timer.C:
			return &reply{status: http.StatusNoContent}, nil
		case <-rq.r.Context().Done():
			// The client is gone: nothing was taken, and no one reads
			// the answer.
			return &reply{status: http.StatusNoContent}, nil
		case <-h.waiters.stop:
			return nil, &broker.Error{Kind: broker.KindClosed, Msg: "the server is shutting down"}
		}
		ds, err = rcv.TryReceive(1)
		if err != nil || len(ds) == 1 {
			return h.received(rq, entity, mode, ds, err)
		}
	}
}

// received renders a receive's result: the message with its headers, or
// 204 when there was none.
func (h *Handler) received(rq *request, entity string, mode broker.ReceiveMode, ds []*broker.Delivery, err error) (*reply, error) {
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return &reply{status: http.StatusNoContent}, nil
	}
	d := ds[0]
	rep := &reply{status: http.StatusOK}
	if d.Body != nil {
		if err := streamBody(rep, d.Body); err != nil {
			return nil, err
		}
	} else {
		rep.body, _ = decodeAMQPBody(d.Message.Body)
	}
	hdr := http.Header{}
	setPropHeaders(hdr, d.Message.ApplicationProperties)
	hdr.Set("BrokerProperties", brokerPropsOf(d, mode == broker.PeekLock))
	ct := d.Message.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	rep.contentType, rep.header = ct, hdr
	if mode == broker.PeekLock {
		rep.status = http.StatusCreated
		hdr.Set("Location", rq.site.url(entity+"/messages/"+strconv.FormatInt(d.SequenceNumber, 10)+"/"+d.LockToken.String(), ""))
	}
	return rep, nil
}
