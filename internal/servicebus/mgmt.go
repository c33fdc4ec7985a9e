package servicebus

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/faults"
	"github.com/busbarmq/busbar/internal/message"
)

// The operations of <entity>/$management (docs/wire/amqp.md §6.3).
const (
	opRenewLock         = "com.microsoft:renew-lock"
	opPeek              = "com.microsoft:peek-message"
	opReceiveBySequence = "com.microsoft:receive-by-sequence-number"
	opUpdateDisposition = "com.microsoft:update-disposition"
	opSchedule          = "com.microsoft:schedule-message"
	opCancelScheduled   = "com.microsoft:cancel-scheduled-message"
	opBatchDelete       = "com.microsoft:batch-delete-messages"
	opGetSessions       = "com.microsoft:get-message-sessions"
	// The session operations' names are in session.go.
)

// mgmtOp is a management operation: the right it needs and its body.
type mgmtOp struct {
	right auth.Rights
	run   func(c *conn, ctx context.Context, path string, b body) (*response, error)
}

var mgmtOps = map[string]mgmtOp{
	opRenewLock:         {auth.Listen, (*conn).renewLock},
	opPeek:              {auth.Listen, (*conn).peek},
	opReceiveBySequence: {auth.Listen, (*conn).receiveBySequence},
	opUpdateDisposition: {auth.Listen, (*conn).updateDisposition},
	opSchedule:          {auth.Send, (*conn).schedule},
	opCancelScheduled:   {auth.Send, (*conn).cancelScheduled},
	opBatchDelete:       {auth.Listen, (*conn).batchDelete},
	// Rules (rules.go): subscriptions only.
	opAddRule:        {auth.Manage, (*conn).addRule},
	opRemoveRule:     {auth.Manage, (*conn).removeRule},
	opEnumerateRules: {auth.Manage, (*conn).enumerateRules},
	// Sessions (session.go).
	opGetSessions:      {auth.Listen, (*conn).getMessageSessions},
	opRenewSessionLock: {auth.Listen, (*conn).renewSessionLock},
	opGetSessionState:  {auth.Listen, (*conn).getSessionState},
	opSetSessionState:  {auth.Listen, (*conn).setSessionState},
}

// managementRequest serves one request to node (an <entity>/$management
// address): it checks the operation's right, applies the client's server
// timeout and runs it.
func (c *conn) managementRequest(req *frames.Message, node address, mark amqp.DispositionMark, txnID []byte) *response {
	opName := appProp(req, "operation")
	path := node.path()
	span := c.h.traceManagement(path, opName, req.ApplicationProperties)
	resp := c.runManagement(req, node, opName, path, mark, txnID)
	if txnID != nil && (resp == nil || resp.status >= 400) {
		// Refused inside a transaction: it can only roll back (a
		// refusal the transaction recorded is kept as its cause).
		cause := "the request got no answer"
		if resp != nil {
			cause, _, _ = strings.Cut(resp.desc, " TrackingId:")
			cause = strings.TrimSuffix(cause, ".")
		}
		c.txnFail(txnID, &txnError{cond: condTxnRollback, msg: "the " + opName + " request failed: " + cause})
	}
	if resp == nil { // a fault: no answer
		endSpan(span, errors.New("the answer was dropped by an injected fault"))
		return nil
	}
	if span != nil {
		span.SetAttributes(attribute.Int("messaging.servicebus.status_code", int(resp.status)))
		var err error
		if resp.status >= 400 {
			err = errors.New(resp.desc)
		}
		endSpan(span, err)
	}
	return resp
}

// runManagement is managementRequest without its span.
func (c *conn) runManagement(req *frames.Message, node address, opName, path string, mark amqp.DispositionMark, txnID []byte) *response {
	if c.relayed && (opName == opRelayTxnDeclare || opName == opRelayTxnDischarge) {
		b, err := requestBody(req)
		if err != nil {
			return failed(c.fail(opName, path, err))
		}
		return c.relayTxnRequest(opName, path, b) // relaytxn.go
	}
	op, ok := mgmtOps[opName]
	if !ok {
		return failed(c.fail(opName, path, &broker.Error{Kind: broker.KindNotAllowed,
			Msg: "The management operation '" + opName + "' is not supported."}))
	}
	if err := c.authorize(node.String(), op.right); err != nil {
		return failed(c.fail(opName, path, err))
	}
	b, err := requestBody(req)
	if err != nil {
		return failed(c.fail(opName, path, err))
	}
	ctx := withAssociatedLink(c.ctx, appProp(req, "associated-link-name"))
	if txnID != nil {
		if txnAtOnce[opName] {
			if err := c.txnOpen(txnID); err != nil {
				return failed(c.fail(opName, path, err))
			}
		}
		ctx = withTxn(ctx, txnID) // the operations txnManagementOp names only (txn.go)
	}
	if d := serverTimeout(req); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	kinds := []faults.Kind{faults.ServerBusy, faults.CloseConnection, faults.Delay, faults.DropFrame}
	if opName == opRenewLock || opName == opUpdateDisposition {
		kinds = append(kinds, faults.LockLost)
	}
	if f := c.inject(faults.Point{Op: faults.OpManagement, Entity: path, Kinds: kinds}); f != nil {
		switch f.Kind {
		case faults.LockLost:
			// The locks are gone for real, as if they had expired.
			toks, _ := b.uuids("lock-tokens")
			for _, t := range toks {
				_ = c.ns().Broker.Abandon(context.WithoutCancel(ctx), path, t, nil)
			}
			return failed(c.fail(opName, path, f.Err()))
		case faults.DropFrame:
			return nil
		case faults.CloseConnection:
			c.faultClose(opName, path, f)
			return nil
		case faults.Delay:
			if err := faultWait(ctx, f.Delay); err != nil {
				return failed(c.fail(opName, path, err))
			}
		default: // server-busy
			return failed(c.fail(opName, path, f.Err()))
		}
	}
	// Settlements received before the request first (settleorder.go).
	if err := mark.Wait(ctx); err != nil {
		return failed(c.fail(opName, path, err))
	}
	if err := c.settles.wait(ctx); err != nil {
		return failed(c.fail(opName, path, err))
	}
	resp, err := op.run(c, ctx, path, b)
	if err != nil {
		return failed(c.fail(opName, path, err))
	}
	return resp
}

// serverTimeout reads the request's server-timeout (Go: "server-timeout",
// or "com.microsoft:server-timeout" on schedule and cancel; ms, any
// integer type). 0 means none.
func serverTimeout(req *frames.Message) time.Duration {
	for _, k := range []string{"server-timeout", "com.microsoft:server-timeout"} {
		if v, ok := req.ApplicationProperties[k]; ok {
			if n, err := toInt64(v); err == nil && n > 0 {
				return time.Duration(n) * time.Millisecond
			}
		}
	}
	return 0
}

func noContent() *response {
	return &response{status: statusNoContent, desc: "No Content"}
}

// renewLock: lock-tokens (array of uuid) → expirations (array of
// timestamp, same order). Inside a transaction it renews at once, as
// Service Bus does (txn.go).
func (c *conn) renewLock(ctx context.Context, path string, b body) (*response, error) {
	toks, err := b.uuids("lock-tokens")
	if err != nil {
		return nil, err
	}
	exps, err := c.ns().Broker.RenewLock(ctx, path, toks)
	if err != nil {
		return nil, err
	}
	return ok(encoding.Map{{Key: "expirations", Value: exps}}), nil
}

// peek: from-sequence-number (long), message-count (int),
// omit-message-body (boolean: the messages come without their body, as
// the JS SDK asks for since 7.10) → messages, a list of maps {message:
// binary}; 204 when there is nothing to peek.
func (c *conn) peek(ctx context.Context, path string, b body) (*response, error) {
	from, _, err := b.integer("from-sequence-number")
	if err != nil {
		return nil, err
	}
	omitBody, err := b.boolean("omit-message-body")
	if err != nil {
		return nil, err
	}
	count, given, err := b.integer("message-count")
	if err != nil {
		return nil, err
	}
	if !given {
		count = 1
	}
	if count <= 0 {
		return noContent(), nil
	}
	// A session receiver peeks its session (session.go), also the
	// session "".
	holder, sid, err := c.sessionOf(ctx, path, b)
	if err != nil {
		return nil, err
	}
	var ds []*broker.Delivery
	if !omitBody && c.h.streamFrom > 0 {
		// Large messages' bodies go out from the store (peekParts).
		ctx = broker.WithStreamedBodies(ctx, c.h.streamFrom)
	}
	if holder != nil || sid != "" {
		ds, err = c.ns().Broker.PeekSession(ctx, path, sid, from, int(min(count, 1<<20)))
	} else {
		ds, err = c.ns().Broker.Peek(ctx, path, from, int(min(count, 1<<20)))
	}
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return noContent(), nil
	}
	for _, d := range ds {
		if d.Body != nil {
			return peekParts(ds, deliveryOpts{}, false)
		}
	}
	list := make([]any, 0, len(ds))
	for _, d := range ds {
		if omitBody && d.Message.Body != nil {
			// Copies: the delivery and its message may be shared.
			m, dc := *d.Message, *d
			m.Body = nil
			dc.Message = &m
			d = &dc
		}
		p, err := encodeDelivery(d, deliveryOpts{})
		if err != nil {
			return nil, err
		}
		list = append(list, encoding.Map{{Key: "message", Value: p}})
	}
	return ok(encoding.Map{{Key: "messages", Value: list}}), nil
}

// peekParts is the peek (or receive-by-sequence-number, withToken)
// response for deliveries some of which carry their body as a stream
// (broker.WithStreamedBodies): the same amqp-value, {messages: [{message:
// binary}, ...]} ({lock-token: uuid, message: binary} withToken), written
// out here with 32-bit sizes so that it can be cut around each streamed
// body, which the endpoint then reads a frame at a time (amqp.Part).
func peekParts(ds []*broker.Delivery, opts deliveryOpts, withToken bool) (resp *response, err error) {
	items := make([]peekItem, len(ds))
	defer func() {
		if err != nil {
			for _, d := range ds {
				closeBody(d)
			}
		}
	}()
	const (
		keyMessage   = "message"
		keyMessages  = "messages"
		keyLockToken = "lock-token"
	)
	// The lock-token entry of an item: str8 key, uuid value.
	tokenEntry := 0
	if withToken {
		tokenEntry = 2 + len(keyLockToken) + 17
	}
	var listSize int64 = 4 // the list's count
	for i, d := range ds {
		head, trailer, err := encodeDeliveryHead(d, opts)
		if err != nil {
			return nil, err
		}
		items[i] = peekItem{head: head, trailer: trailer, body: d.Body}
		// map32 {str8 "message": vbin32} (and the lock token)
		listSize += 1 + 4 + 4 + int64(tokenEntry) + (2 + int64(len(keyMessage))) + 5 + items[i].len()
	}
	var cur []byte
	cur = append(cur, 0x00, 0x53, byte(frames.DescriptorAMQPValue))
	outer := 4 + (2 + int64(len(keyMessages))) + 1 + 4 + listSize
	if outer > 1<<32-1 {
		return nil, &broker.Error{Kind: broker.KindMessageTooLarge, Msg: "The peeked messages take more than 4 GB; peek fewer at once."}
	}
	cur = append(cur, 0xd1)
	cur = binary.BigEndian.AppendUint32(cur, uint32(outer))
	cur = binary.BigEndian.AppendUint32(cur, 2)
	cur = append(cur, 0xa1, byte(len(keyMessages)))
	cur = append(cur, keyMessages...)
	cur = append(cur, 0xd0)
	cur = binary.BigEndian.AppendUint32(cur, uint32(listSize))
	cur = binary.BigEndian.AppendUint32(cur, uint32(len(items)))
	resp = &response{status: statusOK, desc: "OK"}
	for i, it := range items {
		cur = append(cur, 0xd1)
		cur = binary.BigEndian.AppendUint32(cur, uint32(int64(4+tokenEntry+2+len(keyMessage)+5)+it.len()))
		if withToken {
			cur = binary.BigEndian.AppendUint32(cur, 4)
			cur = append(cur, 0xa1, byte(len(keyLockToken)))
			cur = append(cur, keyLockToken...)
			cur = append(cur, 0x98) // uuid
			cur = append(cur, ds[i].LockToken[:]...)
		} else {
			cur = binary.BigEndian.AppendUint32(cur, 2)
		}
		cur = append(cur, 0xa1, byte(len(keyMessage)))
		cur = append(cur, keyMessage...)
		cur = append(cur, 0xb0)
		cur = binary.BigEndian.AppendUint32(cur, uint32(it.len()))
		cur = append(cur, it.head...)
		if it.body == nil {
			continue
		}
		if resp.raw == nil {
			resp.raw = cur
		} else {
			resp.parts = append(resp.parts, amqp.Part{Bytes: cur})
		}
		resp.parts = append(resp.parts, amqp.Part{Stream: it.body, Len: it.body.Len()})
		cur = append([]byte(nil), it.trailer...)
	}
	resp.parts = append(resp.parts, amqp.Part{Bytes: cur})
	return resp, nil
}

// peekItem is one message of peekParts: its encoding up to the body
// (the whole of it without a streamed body), the body and the rest.
type peekItem struct {
	head, trailer []byte
	body          *broker.BodyStream
}

// len is the length of the encoded message: head, body, trailer.
func (it *peekItem) len() int64 {
	n := int64(len(it.head) + len(it.trailer))
	if it.body != nil {
		n += it.body.Len()
	}
	return n
}

// receiveBySequence: sequence-numbers (array of long),
// receiver-settle-mode (uint: 1 locks, 0 removes) → messages, a list of
// maps {lock-token: uuid, message: binary}. The encoded messages carry the
// lock token as delivery annotation x-opt-lock-token, which is where the
// Go SDK looks for it (§6.3).
func (c *conn) receiveBySequence(ctx context.Context, path string, b body) (*response, error) {
	seqs, err := b.int64s("sequence-numbers")
	if err != nil {
		return nil, err
	}
	mode := broker.PeekLock
	if n, given, err := b.integer("receiver-settle-mode"); err != nil {
		return nil, err
	} else if given && n == 0 {
		mode = broker.ReceiveAndDelete
	}
	// Within a session for a session receiver (session.go).
	holder, sid, err := c.sessionOf(ctx, path, b)
	if err != nil {
		return nil, err
	}
	link, _ := ctx.Value(assocLinkKey{}).(string)
	if link == "" {
		link = "$management"
	}
	ctx = broker.WithLockHolder(ctx, "link "+link+" on connection "+c.containerOrAddr())
	if c.h.streamFrom > 0 {
		// Large messages' bodies go out from the store (peekParts).
		ctx = broker.WithStreamedBodies(ctx, c.h.streamFrom)
	}
	var ds []*broker.Delivery
	switch {
	case holder != nil:
		ds, err = holder.ReceiveDeferred(ctx, seqs, mode)
	case sid != "":
		ds, err = c.ns().Broker.ReceiveDeferredInSession(ctx, path, sid, seqs, mode)
	default:
		ds, err = c.ns().Broker.ReceiveDeferred(ctx, path, seqs, mode)
	}
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return noContent(), nil
	}
	opts := deliveryOpts{locked: mode == broker.PeekLock, lockTokenAnnotation: true}
	for _, d := range ds {
		if d.Body != nil {
			for _, d := range ds {
				c.h.traceDeliver(path, d, nil)
			}
			return peekParts(ds, opts, true)
		}
	}
	list := make([]any, 0, len(ds))
	for _, d := range ds {
		p, err := encodeDelivery(d, opts)
		if err != nil {
			return nil, err
		}
		c.h.traceDeliver(path, d, nil)
		list = append(list, encoding.Map{
			{Key: "lock-token", Value: encoding.UUID(d.LockToken)},
			{Key: "message", Value: p},
		})
	}
	return ok(encoding.Map{{Key: "messages", Value: list}}), nil
}

// updateDisposition settles by lock token: disposition-status completed,
// abandoned, suspended (dead-letter) or defered (sic; "deferred" too),
// lock-tokens, deadletter-reason, deadletter-description,
// properties-to-modify. It stops at the first failure.
func (c *conn) updateDisposition(ctx context.Context, path string, b body) (*response, error) {
	status, err := b.str("disposition-status")
	if err != nil {
		return nil, err
	}
	toks, err := b.uuids("lock-tokens")
	if err != nil {
		return nil, err
	}
	reason, err := b.str("deadletter-reason")
	if err != nil {
		return nil, err
	}
	desc, err := b.str("deadletter-description")
	if err != nil {
		return nil, err
	}
	props, err := b.props("properties-to-modify")
	if err != nil {
		return nil, err
	}
	if id := txnFrom(ctx); id != nil {
		return c.txnUpdateDisposition(id, path, status, toks, reason, desc, props)
	}
	var settle func(uuid.UUID) error
	br := c.ns().Broker
	switch status {
	case "completed":
		settle = func(t uuid.UUID) error { return br.Complete(ctx, path, t) }
	case "abandoned":
		settle = func(t uuid.UUID) error { return br.Abandon(ctx, path, t, props) }
	case "suspended":
		settle = func(t uuid.UUID) error { return br.DeadLetter(ctx, path, t, reason, desc, props) }
	case "defered", "deferred":
		settle = func(t uuid.UUID) error { return br.Defer(ctx, path, t, props) }
	default:
		return nil, badRequest("The disposition-status '%s' is not one of completed, abandoned, suspended or defered.", status)
	}
	for _, t := range toks {
		if err := settle(t); err != nil {
			return nil, err
		}
	}
	return ok(nil), nil
}

// schedule: messages, a list of maps {message-id, message: binary,
// session-id?, partition-key?}, each encoded message carrying
// x-opt-scheduled-enqueue-time → sequence-numbers (array of long).
func (c *conn) schedule(ctx context.Context, path string, b body) (*response, error) {
	items, err := b.list("messages")
	if err != nil {
		return nil, err
	}
	msgs := make([]*message.Message, 0, len(items))
	sizes := 0
	for i, it := range items {
		m, isMap := it.(encoding.Map)
		if !isMap {
			return nil, badRequest("messages[%d] is a %T, not a map.", i, it)
		}
		raw, _ := m.Get("message")
		data, isBinary := raw.([]byte)
		if !isBinary {
			return nil, badRequest("messages[%d].message is a %T, not binary.", i, raw)
		}
		msg, err := decodeMessage(data)
		if err != nil {
			return nil, badRequest("messages[%d] could not be decoded: %v", i, err)
		}
		msgs = append(msgs, msg)
		sizes += len(data)
	}
	if id := txnFrom(ctx); id != nil {
		return c.txnSchedule(id, path, msgs, sizes)
	}
	seqs, err := c.ns().Broker.Schedule(ctx, path, msgs, time.Time{})
	if err != nil {
		return nil, err
	}
	return ok(encoding.Map{{Key: "sequence-numbers", Value: seqs}}), nil
}

// cancelScheduled: sequence-numbers (array of long).
func (c *conn) cancelScheduled(ctx context.Context, path string, b body) (*response, error) {
	seqs, err := b.int64s("sequence-numbers")
	if err != nil {
		return nil, err
	}
	if id := txnFrom(ctx); id != nil {
		return c.txnCancel(id, path, seqs)
	}
	if err := c.ns().Broker.CancelScheduled(ctx, path, seqs); err != nil {
		return nil, err
	}
	return ok(nil), nil
}

// maxBatchDelete is Service Bus's cap on the messages one batch-delete
// request may remove.
const maxBatchDelete = 4000

// batchDelete: message-count (int, at most 4,000), enqueued-time-utc
// (timestamp, default now), session-id (a session receiver deletes from
// its session only) → message-count (int); zero deleted is 204 with
// errorCondition com.microsoft:message-not-found, as the JS SDK expects
// (§6.3).
func (c *conn) batchDelete(ctx context.Context, path string, b body) (*response, error) {
	count, _, err := b.integer("message-count")
	if err != nil {
		return nil, err
	}
	if count > maxBatchDelete {
		return nil, badRequest("The message-count %d is more than one request may delete: at most %d messages are deleted per call.", count, maxBatchDelete)
	}
	before, given, err := b.timestamp("enqueued-time-utc")
	if err != nil {
		return nil, err
	}
	if !given {
		before = c.ns().Broker.Now() // the broker's clock, which may be a test clock
	}
	holder, sid, err := c.sessionOf(ctx, path, b)
	if err != nil {
		return nil, err
	}
	var n int
	if holder != nil || sid != "" {
		n, err = c.ns().Broker.DeleteSessionMessages(ctx, path, sid, int(count), before)
	} else {
		n, err = c.ns().Broker.DeleteMessages(ctx, path, int(count), before)
	}
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return &response{status: statusNoContent, desc: "No messages to delete.", cond: condMessageMissing}, nil
	}
	return ok(encoding.Map{{Key: "message-count", Value: int32(n)}}), nil
}
