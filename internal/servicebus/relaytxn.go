package servicebus

import (
	"bytes"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// The owner's side of transactions relayed by a gateway node (router.go
// names the markers). The gateway's client, go-amqp, has no transaction
// frames, so on the internal listener a transaction travels as:
//
//	declare          management request opRelayTxnDeclare    → {txn-id: binary}
//	send             a sender link attached with RelayTxnProperty = txn-id:
//	                 each transfer is a send in it, answered accepted/rejected
//	settle           modified outcome whose message-annotations hold
//	                 RelayTxnProperty = encoded transactional-state(txn-id, outcome),
//	                 answered with the plain outcome (TxnSettleReply) or
//	                 rejected with an error; one that does not decode is
//	                 refused
//	management op    the request's application property RelayTxnProperty = txn-id
//	discharge        management request opRelayTxnDischarge {txn-id, fail}
//
// Each is honoured on a relayed connection only (ConnectRelayed), and then
// runs exactly as its client-facing form does: the same rules, the same
// commit.
const (
	opRelayTxnDeclare   = "com.busbar:txn-declare"
	opRelayTxnDischarge = "com.busbar:txn-discharge"
)

// relayLinkTxn is the txn-id a relayed sender link was attached in (nil:
// none).
func (c *conn) relayLinkTxn(props map[frames.Symbol]any) []byte {
	if !c.relayed {
		return nil
	}
	id, _ := props[RelayTxnProperty].([]byte)
	return bytes.Clone(id)
}

// relayedTxnState decodes the transactional state a gateway put in a
// modified outcome (RelayTxnProperty). marked says whether the outcome
// carries one at all; ts is nil when it does not decode to a
// transactional-state with a txn-id (the disposition is then refused,
// never taken for a plain modified outcome).
func relayedTxnState(state frames.DeliveryState) (ts *frames.TransactionalState, marked bool) {
	m, ok := state.(*frames.Modified)
	if !ok {
		return nil, false
	}
	v, ok := m.MessageAnnotations[RelayTxnProperty]
	if !ok {
		return nil, false
	}
	raw, _ := v.([]byte)
	return decodeRelayedTxnState(raw), true
}

// decodeRelayedTxnState decodes an encoded transactional-state with a
// txn-id; nil for anything else. Its outcome may be missing or one that
// cannot be part of a transaction: txnSettle refuses those, as it does
// a client's own.
func decodeRelayedTxnState(raw []byte) *frames.TransactionalState {
	r := encoding.NewReader(raw)
	s, err := frames.ReadDeliveryState(r)
	if err != nil || r.Len() != 0 {
		return nil
	}
	ts, ok := s.(*frames.TransactionalState)
	if !ok || len(ts.TxnID) == 0 {
		return nil
	}
	return ts
}

// relayedRequestTxn is the txn-id a relayed management request carries
// (nil: none).
func (c *conn) relayedRequestTxn(payload []byte) []byte {
	if !c.relayed {
		return nil
	}
	var req frames.Message
	if err := req.UnmarshalBinary(payload); err != nil {
		return nil
	}
	id, _ := req.ApplicationProperties[RelayTxnProperty].([]byte)
	return bytes.Clone(id)
}

// relayTxnRequest serves opRelayTxnDeclare and opRelayTxnDischarge on a
// relayed connection: the coordinator's declare and discharge, answered
// as management responses (the transaction's condition on a refusal).
func (c *conn) relayTxnRequest(opName, path string, b body) *response {
	switch opName {
	case opRelayTxnDeclare:
		switch s := c.declareTxn().(type) {
		case *frames.Declared:
			return ok(encoding.Map{{Key: "txn-id", Value: s.TxnID}})
		case *frames.Rejected:
			return relayRefusal(s.Error)
		}
	case opRelayTxnDischarge:
		v, _ := b.get("txn-id")
		id, isBin := v.([]byte)
		if !isBin || len(id) == 0 {
			return failed(c.fail(opName, path, badRequest("The discharge has no txn-id.")))
		}
		fail, err := b.boolean("fail")
		if err != nil {
			return failed(c.fail(opName, path, err))
		}
		switch s := c.discharge(id, fail).(type) {
		case *frames.Accepted:
			return ok(nil)
		case *frames.Rejected:
			return relayRefusal(s.Error)
		}
	}
	return failed(c.fail(opName, path, badRequest("The operation '%s' is not supported.", opName)))
}

func relayRefusal(e *frames.Error) *response {
	cond, status := classify(&RemoteError{Condition: e.Condition, Desc: e.Description})
	return &response{status: status, desc: e.Description, cond: cond}
}
