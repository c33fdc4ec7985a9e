package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	goamqp "github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/servicebus"
)

// Transactions through the relay (docs/design/cluster.md §8.4). The
// client's coordinator is the gateway's own (servicebus answers declare
// with its txn-id); at the transaction's first operation on a remote
// entity servicebus asks DeclareTxn, which declares it on the owner over
// the client's internal connection to it, and then:
//
//   - a transactional transfer goes on an internal sender link attached
//     in the owner's transaction (servicebus.RelayTxnProperty), one per
//     client link and transaction (txnSenders);
//   - a transactional disposition goes as a modified outcome carrying the
//     encoded transactional-state with the owner's txn-id;
//   - a transactional management request carries the owner's txn-id;
//   - the discharge is DischargeTxn.
//
// The owner's txn-id is valid on that one internal connection: an
// operation or discharge after the unit's owner (or the connection to
// it) changed fails, and the commit is a rollback.

const condTxnRollback = "amqp:transaction:rollback"

func errTxnMoved(unit string) error {
	return &servicebus.RemoteError{Condition: condTxnRollback, Desc: fmt.Sprintf(
		"'%s' moved to another node during the transaction; the transaction can only roll back.", unit)}
}

// DeclareTxn implements servicebus.Router.
func (g *Gateway) DeclareTxn(ctx context.Context, c *amqp.Conn, r servicebus.Relayed) (servicebus.RemoteTxn, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	p, err := g.peer(ctx, c, r.Unit)
	if err != nil {
		return servicebus.RemoteTxn{}, err
	}
	resp, err := p.txnRequest(ctx, c, r, "com.busbar:txn-declare", map[string]any{})
	if err != nil {
		return servicebus.RemoteTxn{}, err
	}
	body, _ := resp.Value.(map[string]any)
	id, _ := body["txn-id"].([]byte)
	if len(id) == 0 {
		return servicebus.RemoteTxn{}, fmt.Errorf("relay: the owner of '%s' declared no txn-id", r.Unit)
	}
	return servicebus.RemoteTxn{Unit: r.Unit, ID: id, Peer: p}, nil
}

// DischargeTxn implements servicebus.Router. A commit is sent only on
// the internal connection the transaction was declared on, and only
// while its node still serves the unit; otherwise it is a rollback
// (servicebus.RemoteError). An error of another type means the outcome
// is unknown (the connection failed while the owner committed).
func (g *Gateway) DischargeTxn(ctx context.Context, c *amqp.Conn, t servicebus.RemoteTxn, fail bool) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	p, _ := t.Peer.(*peerConn)
	if p == nil {
		return errTxnMoved(t.Unit)
	}
	if !fail {
		if cur, err := g.peer(ctx, c, t.Unit); err != nil || cur != p {
			_, _ = p.txnRequest(ctx, c, servicebus.Relayed{Unit: t.Unit}, "com.busbar:txn-discharge", map[string]any{"txn-id": t.ID, "fail": true})
			return errTxnMoved(t.Unit)
		}
	}
	_, err := p.txnRequest(ctx, c, servicebus.Relayed{Unit: t.Unit}, "com.busbar:txn-discharge", map[string]any{"txn-id": t.ID, "fail": fail})
	return err
}

// txnRequest sends one of the owner's transaction operations on p's
// management link of r.Unit and returns the response; a refusal is the
// owner's condition as a servicebus.RemoteError.
func (p *peerConn) txnRequest(ctx context.Context, c *amqp.Conn, r servicebus.Relayed, op string, body map[string]any) (*goamqp.Message, error) {
	var mid [16]byte
	_, _ = rand.Read(mid[:])
	req := &goamqp.Message{
		Properties:            &goamqp.MessageProperties{MessageID: hex.EncodeToString(mid[:])},
		ApplicationProperties: map[string]any{"operation": op},
		Value:                 body,
	}
	payload, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	out, err := p.request(ctx, c, r.Unit+"/$management", payload, r, nil)
	if err != nil {
		return nil, err
	}
	var resp goamqp.Message
	if err := resp.UnmarshalBinary(out); err != nil {
		return nil, err
	}
	status, _ := resp.ApplicationProperties["statusCode"].(int32)
	if status >= 200 && status < 300 {
		return &resp, nil
	}
	e := &servicebus.RemoteError{Status: status, Condition: frames.ErrCondInternalError}
	switch v := resp.ApplicationProperties["errorCondition"].(type) {
	case string:
		e.Condition = frames.Symbol(v)
	case goamqp.Symbol:
		e.Condition = frames.Symbol(v)
	}
	e.Desc, _ = resp.ApplicationProperties["statusDescription"].(string)
	return nil, e
}

// senderOptions are the options of a relayed sender link: the client's
// rights, a send-via link's destination and the rights on it, and the
// owner's transaction (txnID, nil for none).
func senderOptions(name string, client map[frames.Symbol]any, r servicebus.Relayed, txnID []byte) *goamqp.SenderOptions {
	props := attachProps(client, r)
	if r.Dest != "" {
		props["com.microsoft:transfer-destination-address"] = r.Dest
		props[servicebus.RelayDestProperty] = int64(r.DestRights)
	}
	if txnID != nil {
		props[servicebus.RelayTxnProperty] = txnID
		name += "-txn-" + hex.EncodeToString(txnID)
	}
	return &goamqp.SenderOptions{
		Name:                        name,
		Properties:                  props,
		SettlementMode:              goamqp.SenderSettleModeUnsettled.Ptr(),
		RequestedReceiverSettleMode: goamqp.ReceiverSettleModeFirst.Ptr(),
	}
}

// maxTxnSenders bounds the transactional internal links one relayed
// sender link keeps open; the least recently used one is closed first.
const maxTxnSenders = 4

// txnSenders are one relayed sender link's internal links in the owner's
// transactions, by the client's txn-id. Used by the link's goroutine
// only.
type txnSenders struct {
	p      *peerConn
	target string
	name   string
	r      servicebus.Relayed
	links  []txnSender // most recently used last
}

type txnSender struct {
	id  string // the client's txn-id
	snd *goamqp.Sender
}

// get returns the internal link for the client's transaction id,
// binding it to the owner's transaction (declaring that at its first
// operation) and attaching the link if need be.
func (t *txnSenders) get(ctx context.Context, id []byte) (*goamqp.Sender, *frames.Error) {
	for i, s := range t.links {
		if s.id == string(id) {
			t.links = append(append(t.links[:i:i], t.links[i+1:]...), s)
			return s.snd, nil
		}
	}
	if t.r.Txn == nil {
		return nil, &frames.Error{Condition: frames.ErrCondNotImplemented, Description: "Transactions are not relayed on this link."}
	}
	rt, ferr := t.r.Txn(id, t.p)
	if ferr != nil {
		return nil, ferr
	}
	actx, cancel := context.WithTimeout(ctx, t.p.g.cfg.Timeout)
	defer cancel()
	snd, err := t.p.sess.NewSender(actx, t.target, senderOptions(t.name, nil, t.r, rt.ID))
	if err != nil {
		return nil, frameError(err)
	}
	if len(t.links) == maxTxnSenders {
		closeLink(t.links[0].snd.Close)
		t.links = t.links[1:]
	}
	t.links = append(t.links, txnSender{id: string(id), snd: snd})
	return snd, nil
}

func (t *txnSenders) close() {
	for _, s := range t.links {
		closeLink(s.snd.Close)
	}
	t.links = nil
}

// txnDisposition passes a client's transactional disposition of m to the
// owner, in the owner's transaction, and returns the client's answer.
func (rp *receiverProxy) txnDisposition(ctx context.Context, m *goamqp.Message, ts *frames.TransactionalState) (frames.DeliveryState, *frames.Error) {
	reply, ok := servicebus.TxnSettleReply(ts.Outcome)
	if !ok {
		// The owner refuses it (it is asked all the same, as the
		// transaction's owner, so that its answer is the one a local
		// refusal gets).
		reply = ts.Outcome
	}
	if rp.r.Txn == nil {
		return nil, &frames.Error{Condition: frames.ErrCondNotImplemented, Description: "Transactions are not relayed on this link."}
	}
	rt, ferr := rp.r.Txn(ts.TxnID, rp.p)
	if ferr != nil {
		return nil, ferr
	}
	enc, err := (&frames.TransactionalState{TxnID: rt.ID, Outcome: ts.Outcome}).AppendAMQP(nil)
	if err != nil {
		return nil, &frames.Error{Condition: frames.ErrCondDecodeError, Description: err.Error()}
	}
	err = rp.rcv.ModifyMessage(ctx, m, &goamqp.ModifyMessageOptions{Annotations: goamqp.Annotations{servicebus.RelayTxnProperty: enc}})
	switch {
	case err == nil:
		return &frames.TransactionalState{TxnID: ts.TxnID, Outcome: reply}, nil
	case isRemote(err):
		return nil, frameError(err)
	}
	return nil, &frames.Error{Condition: condLockLost, Description: "The lock supplied is invalid: the node serving the entity could not be reached."}
}
