package servicebus

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// Transactions (OASIS AMQP 1.0 part 4, as Service Bus implements them;
// docs/wire/transactions.md has the frame sequences).
//
// A client attaches a sender link whose target is a coordinator and sends
// it declare and discharge commands (amqp-value bodies). declare is
// answered with declared(txn-id); a transfer or a disposition carrying
// transactional-state(txn-id) is recorded in the transaction and answered
// at once with transactional-state(txn-id, outcome) — nothing changes in
// the broker yet; discharge(fail=false) applies everything with one
// broker.CommitTxn (one durable store batch) and is accepted only once it
// is durable; discharge(fail=true), a connection that goes away, or a
// transaction older than txnTimeout discard it. A $management
// update-disposition request sent with transactional-state is recorded
// the same way (its settlements applied on commit), and so are a
// schedule-message request (its messages scheduled on commit, under
// sequence numbers reserved and answered at once), a
// cancel-scheduled-message request on a queue or a topic (applied on
// commit) and a set-session-state request (the state set on commit).
// renew-lock, renew-session-lock and get-session-state run at once, as
// Service Bus runs them, not deferred to the commit and not undone by a
// rollback; their transaction must be open. Any other management
// request inside a transaction is refused (txnRequest).
//
// Service Bus's rules, checked as each operation arrives:
//
//   - The first operation fixes the transaction's entity: the queue or
//     topic it sends to, the queue or the subscription's topic it
//     settles on. Every later operation must be on that entity too, or
//     be a send through it (a sender link attached to it with
//     com.microsoft:transfer-destination-address: send-via); anything
//     else is refused with amqp:not-allowed.
//   - At most broker.MaxTxnOperations (100) operations.
//   - A settlement's lock must be held when it is recorded and again at
//     commit; a lock that expired meanwhile rolls the whole back.
//
// Busbar applies a transaction as one store batch, which limits it
// further: its settlements are all on one queue or one subscription
// (refused otherwise, with a clear text). Its sends may go to any number
// of destinations through the via entity; they are committed in the same
// batch. On a cluster node, sends to an entity another node serves are
// transfers in that batch (Txn.Via), which that node lands; a send-via
// link to such a destination sends outside a transaction the same way
// (broker.SendVia). An operation refused inside a transaction marks it rollback-only:
// the commit then fails with amqp:transaction:rollback naming the first
// refusal, so that no partial transaction is ever applied.

const (
	// txnTimeout is how long a transaction may stay open (Service Bus:
	// 2 minutes); after that it is rolled back.
	txnTimeout = 2 * time.Minute
	// maxTxnsPerConn bounds the open transactions of one connection.
	maxTxnsPerConn = 32
	// maxTxnBytes bounds the message bytes one transaction holds until
	// its commit, maxConnTxnBytes those of all of a connection's.
	maxTxnBytes     = 16 << 20
	maxConnTxnBytes = 32 << 20

	// propTransferDestination is the sender link property naming a
	// send-via link's final destination.
	propTransferDestination frames.Symbol = "com.microsoft:transfer-destination-address"
	capLocalTxns            frames.Symbol = "amqp:local-transactions"
)

// Transaction error conditions (part 4 section 4.5.8).
const (
	condTxnUnknownID frames.Symbol = "amqp:transaction:unknown-id"
	condTxnRollback  frames.Symbol = "amqp:transaction:rollback"
	condTxnTimeout   frames.Symbol = "amqp:transaction:timeout"
)

// txnError is a failure with a transaction condition; classify maps it.
type txnError struct {
	cond frames.Symbol
	msg  string
}

func (e *txnError) Error() string { return e.msg }

// txn is one open transaction of a connection.
type txn struct {
	id       string // the txn-id's bytes
	declared time.Time

	entity  string // the top-level entity of the first operation ("" = none yet), as keyed
	recvOn  string // the receiving entity path of its settlements (no sub-queue)
	sendTo  string // the destination of its first send
	ops     int
	bytes   int
	settles []broker.TxnSettlement
	sends   []broker.TxnSend
	// cancelOn is the queue or topic (cancelTopic) whose scheduled
	// messages cancels (sequence numbers) it cancels.
	cancelOn    string
	cancelTopic bool
	cancels     []int64
	states      []broker.TxnSessionState // session states set on commit
	via         string                   // the via entity of its send-via sends ("": none)
	failed      error                    // the first operation refused: rollback-only

	// remote is the transaction on the owner of its entity, when another
	// node serves it (router.go); its operations are recorded there, not
	// here. bind is held while it is declared.
	remote *RemoteTxn
	bind   sync.Mutex
}

// txnTable is a connection's open transactions.
type txnTable struct {
	mu sync.Mutex
	m  map[string]*txn
}

// entityKey is the case-insensitive key of a top-level entity.
func txnEntityKey(path string) string {
	p, err := broker.ParsePath(path)
	if err != nil {
		return strings.ToLower(path)
	}
	return strings.ToLower(p.Entity)
}

// attachCoordinator accepts a link to the transaction coordinator.
func (c *conn) attachCoordinator(l *amqp.IncomingLink) error {
	l.Reply.OfferedCapabilities = []frames.Symbol{capLocalTxns}
	l.OnDelivery = func(d *amqp.IncomingDelivery) {
		cmd, err := decodeTxnCommand(d.Payload)
		d.Release()
		if err != nil {
			d.Settle(&frames.Rejected{Error: c.fail("transaction", "", err).amqpError()})
			return
		}
		if cmd.declare {
			d.Settle(c.declareTxn())
			return
		}
		if !c.spawn(func() { d.Settle(c.discharge(cmd.txnID, cmd.fail)) }) {
			d.Settle(&frames.Rejected{Error: c.fail("transaction", "", &broker.Error{Kind: broker.KindClosed, Msg: "The connection is closing."}).amqpError()})
		}
	}
	return nil
}

// txnCommand is a decoded coordinator command.
type txnCommand struct {
	declare bool
	txnID   []byte // discharge
	fail    bool   // discharge
}

// decodeTxnCommand decodes a coordinator message: an amqp-value holding
// declare(global-id) or discharge(txn-id, fail).
func decodeTxnCommand(payload []byte) (txnCommand, error) {
	var m frames.Message
	if err := m.UnmarshalBinary(payload); err != nil {
		return txnCommand{}, badRequest("The transaction command could not be decoded: %v", err)
	}
	v, err := frames.BodyValue(m.RawBody)
	if err != nil {
		return txnCommand{}, badRequest("The transaction command could not be decoded: %v", err)
	}
	d, ok := v.(encoding.Described)
	if !ok {
		return txnCommand{}, badRequest("The transaction command is not a declare or a discharge.")
	}
	fields, _ := d.Value.([]any)
	switch descriptorCode(d.Descriptor) {
	case frames.DescriptorDeclare:
		if len(fields) > 0 && fields[0] != nil {
			return txnCommand{}, &txnError{cond: frames.ErrCondNotImplemented, msg: "Global (distributed) transactions are not supported; declare a local transaction without a global-id."}
		}
		return txnCommand{declare: true}, nil
	case frames.DescriptorDischarge:
		if len(fields) == 0 {
			return txnCommand{}, badRequest("The discharge has no txn-id.")
		}
		id, ok := fields[0].([]byte)
		if !ok {
			return txnCommand{}, badRequest("The discharge's txn-id is not binary.")
		}
		cmd := txnCommand{txnID: id}
		if len(fields) > 1 && fields[1] != nil {
			if cmd.fail, ok = fields[1].(bool); !ok {
				return txnCommand{}, badRequest("The discharge's fail field is not a boolean.")
			}
		}
		return cmd, nil
	}
	return txnCommand{}, badRequest("The transaction command is not a declare or a discharge.")
}

func descriptorCode(d any) uint64 {
	switch x := d.(type) {
	case uint64:
		return x
	case encoding.Symbol:
		switch x {
		case "amqp:declare:list":
			return frames.DescriptorDeclare
		case "amqp:discharge:list":
			return frames.DescriptorDischarge
		}
	}
	return 0
}

// declareTxn opens a transaction and answers declared(txn-id).
func (c *conn) declareTxn() frames.DeliveryState {
	now := c.h.clock.Now()
	t := &c.txns
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, x := range t.m { // forget the ones that timed out unused
		if now.Sub(x.declared) > txnTimeout {
			delete(t.m, id)
		}
	}
	if len(t.m) >= maxTxnsPerConn {
		return &frames.Rejected{Error: c.fail("transaction", "", &broker.Error{Kind: broker.KindQuotaExceeded,
			Msg: fmt.Sprintf("The connection already has %d open transactions, the most one connection may have; discharge one first.", maxTxnsPerConn)}).amqpError()}
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	if t.m == nil {
		t.m = make(map[string]*txn)
	}
	t.m[string(id[:])] = &txn{id: string(id[:]), declared: now}
	return &frames.Declared{TxnID: id[:]}
}

// discharge ends a transaction: commit (fail=false) or rollback.
func (c *conn) discharge(id []byte, fail bool) frames.DeliveryState {
	t := &c.txns
	t.mu.Lock()
	x := t.m[string(id)]
	delete(t.m, string(id))
	t.mu.Unlock()
	var err error
	switch {
	case x == nil:
		err = errTxnUnknown(id)
	case fail:
		c.rollbackRemote(x)
		return &frames.Accepted{}
	case c.h.clock.Now().Sub(x.declared) > txnTimeout:
		c.rollbackRemote(x)
		err = errTxnTimeout(id)
	case x.failed != nil:
		c.rollbackRemote(x)
		err = &txnError{cond: condTxnRollback, msg: "The transaction was rolled back: one of its operations failed: " + clientText(x.failed)}
	case x.remote != nil:
		err = c.commitRemote(x)
	default:
		if cerr := c.ns().Broker.CommitTxn(context.WithoutCancel(c.ctx), &broker.Txn{Settlements: x.settles, Sends: x.sends, CancelOn: x.cancelOn, Cancels: x.cancels, States: x.states, Via: x.via}); cerr != nil {
			err = &txnError{cond: condTxnRollback, msg: "The transaction was rolled back: " + clientText(cerr)}
		}
	}
	if err != nil {
		return &frames.Rejected{Error: c.fail("transaction", x.entityName(), err).amqpError()}
	}
	return &frames.Accepted{}
}

// commitRemote commits x on the owner of its entity (Router.DischargeTxn).
// The owner's refusal, or an owner change before the commit was sent, is
// a rollback; a commit whose answer was lost is reported as such, never
// as a success or a rollback.
func (c *conn) commitRemote(x *txn) error {
	x.bind.Lock() // a declare in progress ends first
	rt := *x.remote
	x.bind.Unlock()
	err := c.h.router.DischargeTxn(context.WithoutCancel(c.ctx), c.c, rt, false)
	var re *RemoteError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		return &txnError{cond: condTxnRollback, msg: "The transaction was rolled back: " + strings.TrimSuffix(re.Error(), ".")}
	}
	return &txnError{cond: condTimeout, msg: fmt.Sprintf(
		"The outcome of the commit is unknown: the connection to the node serving '%s' failed while it committed (%v); check before retrying.", rt.Unit, err)}
}

// rollbackRemote rolls x back on the owner of its entity, if it has one
// there. Best effort: a transaction the owner does not hear of ends with
// its internal connection or its timeout.
func (c *conn) rollbackRemote(x *txn) {
	if x == nil {
		return
	}
	x.bind.Lock()
	rt := x.remote
	x.bind.Unlock()
	if rt != nil {
		_ = c.h.router.DischargeTxn(context.WithoutCancel(c.ctx), c.c, *rt, true)
	}
}

// remoteTxn binds transaction id to r.Unit, which another node serves:
// at the transaction's first operation it is declared on the unit's owner
// (Router.DeclareTxn); every later operation must be on the same unit and,
// on a relayed link (peer not nil), on the internal connection it was
// declared on. A refusal makes the transaction rollback-only.
func (c *conn) remoteTxn(id []byte, r Relayed, peer any) (RemoteTxn, error) {
	t := &c.txns
	t.mu.Lock()
	x := t.m[string(id)]
	t.mu.Unlock()
	if x == nil {
		return RemoteTxn{}, errTxnUnknown(id)
	}
	x.bind.Lock()
	defer x.bind.Unlock()
	t.mu.Lock()
	rt, err := func() (*RemoteTxn, error) {
		switch {
		case c.h.clock.Now().Sub(x.declared) > txnTimeout:
			return nil, errTxnTimeout(id)
		case x.remote != nil && !strings.EqualFold(x.remote.Unit, r.Unit):
			return nil, errTxnOtherEntity(x.remote.Unit, r.Unit)
		case x.remote != nil && peer != nil && x.remote.Peer != peer:
			return nil, errTxnMoved(r.Unit)
		case x.remote != nil:
			return x.remote, nil
		case x.entity != "" && x.entity != txnEntityKey(r.Unit):
			return nil, errTxnOtherEntity(x.entity, r.Unit)
		case x.entity != "":
			return nil, errTxnMoved(r.Unit) // begun here, served elsewhere now
		}
		return nil, nil
	}()
	if err != nil || rt != nil {
		if err != nil && x.failed == nil {
			x.failed = err
		}
		t.mu.Unlock()
		if rt == nil {
			return RemoteTxn{}, err
		}
		return *rt, nil
	}
	t.mu.Unlock()
	declared, err := c.h.router.DeclareTxn(c.ctx, c.c, Relayed{Unit: r.Unit, Rights: r.Rights})
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil:
	case t.m[string(id)] != x: // discharged meanwhile
		c.spawn(func() { _ = c.h.router.DischargeTxn(context.WithoutCancel(c.ctx), c.c, declared, true) })
		err = errTxnUnknown(id)
	default:
		x.remote, x.entity = &declared, txnEntityKey(r.Unit)
		if peer != nil && declared.Peer != peer {
			err = errTxnMoved(r.Unit)
		}
	}
	if err != nil {
		if x.failed == nil {
			x.failed = err
		}
		return RemoteTxn{}, err
	}
	return declared, nil
}

// bindRemoteTxn is remoteTxn for a relayed link (Relayed.Txn): its
// refusal as the AMQP error the client gets.
func (c *conn) bindRemoteTxn(id []byte, r Relayed, peer any) (RemoteTxn, *frames.Error) {
	rt, err := c.remoteTxn(id, r, peer)
	if err != nil {
		return rt, c.fail("transaction", r.Unit, err).amqpError()
	}
	return rt, nil
}

func errTxnOtherEntity(began, other string) error {
	return &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf(
		"A transaction cannot span several top-level entities: it began on '%s', and '%s' is another one; send to other entities through the first one (send-via, cross-entity transactions).",
		began, other)}
}

// errSendViaOwners refuses a send-via link whose destination another
// node serves, on a node whose store cannot hold transfers (no outbox).
func errSendViaOwners(via, dest string) error {
	return &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf(
		"Cannot send to '%s' via '%s': another node of the cluster serves '%s', and this node's store cannot hold transfers to it.", dest, via, dest)}
}

func errTxnMoved(unit string) error {
	return &txnError{cond: condTxnRollback, msg: fmt.Sprintf(
		"'%s' moved to another node during the transaction; the transaction can only roll back.", unit)}
}

func (x *txn) entityName() string {
	if x == nil {
		return ""
	}
	if x.recvOn != "" {
		return x.recvOn
	}
	return x.sendTo
}

// clientText is err's text as a client may see it (no internal causes).
func clientText(err error) string {
	if broker.KindOf(err) == broker.KindInternal && !errors.As(err, new(*txnError)) {
		return "an internal error occurred"
	}
	return strings.TrimSuffix(err.Error(), ".")
}

func errTxnUnknown(id []byte) error {
	return &txnError{cond: condTxnUnknownID, msg: fmt.Sprintf("The transaction %x is not open on this connection: it was never declared, or it was already discharged or rolled back.", id)}
}

func errTxnTimeout(id []byte) error {
	return &txnError{cond: condTxnTimeout, msg: fmt.Sprintf("The transaction %x was rolled back: it was open longer than the %v a transaction may last.", id, txnTimeout)}
}

// txnOp records one operation in transaction id: via is the top-level
// entity the operation goes through (the entity sent to or settled on,
// or a send-via link's via entity); add checks the Busbar-specific rules
// and records the operation. A refusal marks the transaction
// rollback-only.
func (c *conn) txnOp(id []byte, via string, bytes int, add func(x *txn) error) error {
	now := c.h.clock.Now()
	t := &c.txns
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.m[string(id)]
	if x == nil {
		return errTxnUnknown(id)
	}
	err := func() error {
		if now.Sub(x.declared) > txnTimeout {
			return errTxnTimeout(id)
		}
		if x.remote != nil {
			return errTxnMoved(x.remote.Unit)
		}
		key := txnEntityKey(via)
		if x.entity != "" && x.entity != key {
			return errTxnOtherEntity(x.entity, via)
		}
		if x.ops >= broker.MaxTxnOperations {
			return &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
				"The transaction already holds %d operations, the most one transaction may hold.", broker.MaxTxnOperations)}
		}
		if x.bytes+bytes > maxTxnBytes {
			return &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
				"The transaction's messages would take %d bytes, over Busbar's limit of %d bytes per transaction.", x.bytes+bytes, maxTxnBytes)}
		}
		if bytes > 0 {
			held := 0
			for _, o := range t.m {
				held += o.bytes
			}
			if held+bytes > maxConnTxnBytes {
				return &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
					"The connection's open transactions would hold %d bytes of messages, over Busbar's limit of %d bytes per connection; commit or roll back some first.", held+bytes, maxConnTxnBytes)}
			}
		}
		if err := add(x); err != nil {
			return err
		}
		x.entity = key
		x.ops++
		x.bytes += bytes
		return nil
	}()
	if err != nil && x.failed == nil {
		x.failed = err
	}
	return err
}

// txnSend records a transactional transfer's messages (sent on a link to
// dest, through via) and answers it: with the outcome in
// transactional-state, or (plain, a relayed transaction) the outcome
// alone.
func (s *senderLink) txnSend(d *amqp.IncomingDelivery, ts *frames.TransactionalState, plain bool) {
	c := s.c
	// The messages are kept until the commit, so they must not alias the
	// frame buffer, which store releases when this returns.
	own := *d
	own.Payload = bytes.Clone(d.Payload)
	msgs, err := decodeTransfer(&own, nil)
	if err == nil {
		via := s.via
		if via == "" {
			via = s.path
		}
		err = c.txnOp(ts.TxnID, via, len(d.Payload), func(x *txn) error {
			if x.ops+len(msgs) > broker.MaxTxnOperations {
				return &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
					"The transaction would hold %d operations, over the limit of %d per transaction.", x.ops+len(msgs), broker.MaxTxnOperations)}
			}
			if x.sendTo == "" {
				x.sendTo = s.path
			}
			if s.via != "" {
				x.via = s.via
			}
			for _, m := range msgs {
				x.sends = append(x.sends, broker.TxnSend{To: s.path, Msg: m})
			}
			x.ops += len(msgs) - 1 // txnOp counts one
			return nil
		})
	}
	if err != nil {
		d.Settle(&frames.Rejected{Error: c.fail("send", s.path, err).amqpError()})
		return
	}
	if plain {
		d.Settle(&frames.Accepted{})
		return
	}
	d.Settle(&frames.TransactionalState{TxnID: ts.TxnID, Outcome: &frames.Accepted{}})
}

// TxnSettleReply is the outcome a node answers a transactional
// disposition with (inside the transactional-state; on a relayed
// transaction alone) once it is recorded, and false for an outcome that
// cannot be part of a transaction (refused). Every other answer is
// rejected with an error. As SettleReply, a gateway node answers its
// client with it (package relay), so it is a function of the outcome
// alone.
func TxnSettleReply(outcome frames.DeliveryState) (frames.DeliveryState, bool) {
	switch outcome.(type) {
	case *frames.Accepted, *frames.Modified, *frames.Rejected:
		return SettleReply(outcome)
	}
	return nil, false
}

// txnSettle records a transactional disposition of a peek-lock delivery
// and answers it with the outcome inside transactional-state, or (plain,
// a relayed transaction) the outcome alone.
func (rl *receiverLink) txnSettle(d *amqp.OutgoingDelivery, tok uuid.UUID, ts *frames.TransactionalState, plain bool) {
	c := rl.c
	s := broker.TxnSettlement{Path: rl.path, Token: tok}
	reply, ok := TxnSettleReply(ts.Outcome)
	err := func() error {
		if !ok {
			return badRequest("The outcome %v cannot be part of a transaction: complete, abandon, defer or dead-letter the message.", ts.Outcome)
		}
		switch o := ts.Outcome.(type) {
		case *frames.Accepted:
			s.Kind = broker.TxnComplete
		case *frames.Modified:
			props, err := propsMap(o.MessageAnnotations)
			if err != nil {
				return err
			}
			s.Props = props
			if o.UndeliverableHere {
				s.Kind = broker.TxnDefer
			} else {
				s.Kind = broker.TxnAbandon
			}
		case *frames.Rejected:
			reason, desc, props, err := deadLetterInfo(o.Error)
			if err != nil {
				return err
			}
			s.Kind, s.Reason, s.Desc, s.Props = broker.TxnDeadLetter, reason, desc, props
		}
		return c.txnRecordSettle(ts.TxnID, rl.path, s)
	}()
	if err != nil {
		d.Settle(&frames.Rejected{Error: c.fail("settle", rl.path, err).amqpError()})
		return
	}
	if plain {
		d.Settle(reply)
		return
	}
	d.Settle(&frames.TransactionalState{TxnID: ts.TxnID, Outcome: reply})
}

// txnRecordSettle records settlement s of a message received from path
// in transaction id, once its lock is checked.
func (c *conn) txnRecordSettle(id []byte, path string, s broker.TxnSettlement) error {
	if errs, err := c.ns().Broker.CheckLocks(path, []uuid.UUID{s.Token}); err != nil {
		return err
	} else if errs[0] != nil {
		return errs[0]
	}
	return c.txnOp(id, path, 0, func(x *txn) error {
		if err := x.receiveOn(txnEntityPath(path)); err != nil {
			return err
		}
		x.settles = append(x.settles, s)
		return nil
	})
}

// receiveOn checks and records that the transaction settles messages of,
// or sets session state on, the queue or subscription recvOn: Busbar
// commits those on one queue or subscription, the one it cancels
// scheduled messages of if that is a queue.
func (x *txn) receiveOn(recvOn string) error {
	if x.cancelOn != "" && !x.cancelTopic && !strings.EqualFold(x.cancelOn, recvOn) {
		return &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf(
			"Busbar cancels a queue's scheduled messages in a transaction only on the queue it settles on: this one cancels on '%s' and cannot settle on '%s'.", x.cancelOn, recvOn)}
	}
	if x.recvOn != "" && !strings.EqualFold(x.recvOn, recvOn) {
		return &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf(
			"Busbar commits a transaction's settlements and session states on one queue or subscription: this one already works on '%s', not '%s'.", x.recvOn, recvOn)}
	}
	x.recvOn = recvOn
	return nil
}

// txnSetSessionState records a set-session-state request in transaction
// id: the state of the session (sid, or the one holder holds) of path is
// set on commit, in the commit's batch; a rollback leaves the state as it
// was. The session's lock and the state's size are checked now, and the
// lock again at commit.
func (c *conn) txnSetSessionState(id []byte, path string, holder *broker.Receiver, sid string, state []byte) (*response, error) {
	if err := c.ns().Broker.CheckSessionState(path, sid, holder, state); err != nil {
		return nil, err
	}
	st := broker.TxnSessionState{Path: path, SessionID: sid, Holder: holder, State: bytes.Clone(state)}
	err := c.txnOp(id, path, len(state), func(x *txn) error {
		if err := x.receiveOn(txnEntityPath(path)); err != nil {
			return err
		}
		x.states = append(x.states, st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ok(nil), nil
}

// txnOpen checks that transaction id is open (declared on this
// connection, not discharged, not timed out), for the operations that
// run at once inside a transaction (renew-lock, renew-session-lock,
// get-session-state).
func (c *conn) txnOpen(id []byte) error {
	t := &c.txns
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.m[string(id)]
	switch {
	case x == nil:
		return errTxnUnknown(id)
	case c.h.clock.Now().Sub(x.declared) > txnTimeout:
		return errTxnTimeout(id)
	}
	return nil
}

// txnKey is the context key of the transaction a management request
// was sent in.
type txnKey struct{}

func withTxn(ctx context.Context, id []byte) context.Context {
	return context.WithValue(ctx, txnKey{}, id)
}

func txnFrom(ctx context.Context) []byte {
	id, _ := ctx.Value(txnKey{}).([]byte)
	return id
}

// txnManagementOp reports whether a management request (payload, an
// encoded message) may run inside a transaction: update-disposition,
// settlement by lock token, which is recorded like a transactional
// disposition and applied on commit, schedule-message (txnSchedule),
// cancel-scheduled-message (txnCancel) and set-session-state
// (txnSetSessionState), all applied on commit; and the operations
// txnAtOnce names, which run at once.
func txnManagementOp(payload []byte) bool {
	var req frames.Message
	if err := req.UnmarshalBinary(payload); err != nil {
		return false
	}
	op := appProp(&req, "operation")
	switch op {
	case opUpdateDisposition, opSchedule, opCancelScheduled, opSetSessionState:
		return true
	}
	return txnAtOnce[op]
}

// txnAtOnce names the management operations that, sent inside a
// transaction, run at once and are not undone by a rollback: lock
// renewals (Service Bus lists renew-lock among a transaction's
// operations, and the .NET SDK keeps the expiry it is answered) and the
// reads — peek, receive-by-sequence-number, get-message-sessions,
// get-session-state, enumerate-rules — which change no state a commit
// could apply (a receive is not part of a transaction in Service Bus;
// its settlement is). The .NET SDK attaches the ambient transaction to
// every management request, so an application that peeks inside a
// TransactionScope sends these. The transaction must be open
// (runManagement checks it with txnOpen).
var txnAtOnce = map[string]bool{
	opRenewLock: true, opRenewSessionLock: true, opGetSessionState: true,
	opPeek: true, opReceiveBySequence: true, opGetSessions: true, opEnumerateRules: true,
}

// txnCancel records a cancel-scheduled-message request in transaction
// id: the scheduled messages of queue or topic path with sequence numbers
// seqs are cancelled on commit (a message this transaction itself
// schedules is dropped from it at once). A transaction cancels on one
// queue or topic; on a queue, the one its settlements are on if it has
// any (a topic's subscription is the same top-level entity as the topic).
func (c *conn) txnCancel(id []byte, path string, seqs []int64) (*response, error) {
	_, terr := c.ns().Broker.GetTopic(path)
	topic := terr == nil
	err := c.txnOp(id, path, 0, func(x *txn) error {
		if !topic && x.recvOn != "" && !strings.EqualFold(x.recvOn, path) {
			return &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf(
				"Busbar cancels a queue's scheduled messages in a transaction only on the queue it settles on ('%s'), not on '%s'.", x.recvOn, path)}
		}
		if x.cancelOn != "" && !strings.EqualFold(x.cancelOn, path) {
			return &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf(
				"Busbar cancels scheduled messages in a transaction on one queue or topic: this one cancels on '%s', not '%s'.", x.cancelOn, path)}
		}
		if x.ops+len(seqs) > broker.MaxTxnOperations {
			return &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
				"The transaction would hold %d operations, over the limit of %d per transaction.", x.ops+len(seqs), broker.MaxTxnOperations)}
		}
		kept := make([]broker.TxnSend, 0, len(x.sends))
		for _, s := range x.sends {
			if s.Seq.Seq == 0 || !strings.EqualFold(s.To, path) || !slices.Contains(seqs, s.Seq.Seq) {
				kept = append(kept, s)
			}
		}
		x.sends = kept
		x.cancelOn, x.cancelTopic = path, topic
		x.cancels = append(x.cancels, seqs...)
		x.ops += len(seqs) - 1 // txnOp counts one
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ok(nil), nil
}

// txnSchedule records a schedule-message request's messages (size bytes
// encoded) as sends of transaction id to path and answers with their
// sequence numbers, reserved now (broker.ReserveSeqs): the client has
// them before it commits. A rollback leaves the numbers unused, gaps as
// in Service Bus. A refusal makes the transaction rollback-only
// (managementRequest).
func (c *conn) txnSchedule(id []byte, path string, msgs []*message.Message, size int) (*response, error) {
	for i, m := range msgs {
		if at, _ := m.Annotations[broker.ScheduledEnqueueTimeAnnotation].(time.Time); at.IsZero() {
			return nil, badRequest("messages[%d] has no scheduled enqueue time (x-opt-scheduled-enqueue-time).", i)
		}
	}
	if len(msgs) > broker.MaxTxnOperations {
		return nil, &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
			"The request schedules %d messages, over the limit of %d operations per transaction.", len(msgs), broker.MaxTxnOperations)}
	}
	seqs := make([]int64, len(msgs))
	if len(msgs) > 0 {
		res, err := c.ns().Broker.ReserveSeqs(path, len(msgs))
		if err != nil {
			return nil, err
		}
		err = c.txnOp(id, path, size, func(x *txn) error {
			if x.ops+len(msgs) > broker.MaxTxnOperations {
				return &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf(
					"The transaction would hold %d operations, over the limit of %d per transaction.", x.ops+len(msgs), broker.MaxTxnOperations)}
			}
			if x.sendTo == "" {
				x.sendTo = path
			}
			for i, m := range msgs {
				x.sends = append(x.sends, broker.TxnSend{To: path, Msg: m, Seq: res[i]})
			}
			x.ops += len(msgs) - 1 // txnOp counts one
			return nil
		})
		if err != nil {
			return nil, err
		}
		for i, r := range res {
			seqs[i] = r.Seq
		}
	}
	return ok(encoding.Map{{Key: "sequence-numbers", Value: seqs}}), nil
}

// txnUpdateDisposition records an update-disposition request's
// settlements in transaction id (each token's lock checked now and again
// at commit); a refusal makes the transaction rollback-only.
func (c *conn) txnUpdateDisposition(id []byte, path, status string, toks []uuid.UUID, reason, desc string, props map[string]any) (*response, error) {
	var kind broker.TxnSettleKind
	switch status {
	case "completed":
		kind, props = broker.TxnComplete, nil
	case "abandoned":
		kind = broker.TxnAbandon
	case "suspended":
		kind = broker.TxnDeadLetter
	case "defered", "deferred":
		kind = broker.TxnDefer
	default:
		err := badRequest("The disposition-status '%s' is not one of completed, abandoned, suspended or defered.", status)
		c.txnFail(id, err)
		return nil, err
	}
	for _, t := range toks {
		s := broker.TxnSettlement{Kind: kind, Path: path, Token: t, Props: props}
		if kind == broker.TxnDeadLetter {
			s.Reason, s.Desc = reason, desc
		}
		if err := c.txnRecordSettle(id, path, s); err != nil {
			c.txnFail(id, err)
			return nil, err
		}
	}
	return ok(nil), nil
}

// txnFail makes transaction id (if open) rollback-only because of err.
func (c *conn) txnFail(id []byte, err error) {
	t := &c.txns
	t.mu.Lock()
	if x := t.m[string(id)]; x != nil && x.failed == nil {
		x.failed = err
	}
	t.mu.Unlock()
}

// txnEntityPath is a receiving path without its sub-queue: the queue or
// subscription whose messages it settles.
func txnEntityPath(path string) string {
	p, err := broker.ParsePath(path)
	if err != nil {
		return path
	}
	if p.Subscription != "" {
		return p.Entity + "/Subscriptions/" + p.Subscription
	}
	return p.Entity
}

// viaLink is a resolved send-via link: the via entity's name and its
// message size limit, and whether another node of a cluster serves the
// destination (remote: every send is a transfer through the via entity,
// broker.SendVia or a transaction's commit).
type viaLink struct {
	name    string
	maxSize uint64
	remote  bool
}

// sendVia resolves a send-via sender link (target: the via entity, link
// property com.microsoft:transfer-destination-address: the destination):
// it checks the via entity (a queue or topic the connection may send to)
// and returns the destination's address and the via entity. A plain
// sender link is returned as it is, with a zero viaLink.
func (c *conn) sendVia(l *amqp.IncomingLink, a address) (address, viaLink, error) {
	dest := destOf(&l.Link)
	if dest == "" {
		return a, viaLink{}, nil
	}
	if a.sub != subNone || a.kind != nodeEntity {
		return a, viaLink{}, &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf("Cannot send via '%s': it is not a queue or topic.", a.path())}
	}
	if err := c.authorize(a.path(), auth.Send); err != nil {
		return a, viaLink{}, err
	}
	ref, err := c.checkEntity(a)
	if err != nil {
		return a, viaLink{}, err
	}
	via, maxSize, err := c.sendTarget(a, ref)
	if err != nil {
		return a, viaLink{}, err
	}
	d, err := parseAddress(dest)
	if err != nil || d.kind != nodeEntity {
		return a, viaLink{}, badRequest("The transfer destination %q names no entity.", dest)
	}
	v := viaLink{name: via, maxSize: maxSize}
	if r := c.h.router; r != nil && r.Remote(unitOf(d)) {
		if !c.ns().Broker.Transfers() {
			return a, viaLink{}, errSendViaOwners(a.path(), d.path())
		}
		v.remote = true
	}
	return d, v, nil
}

// txnRequest answers a $management (or $cbs) request sent inside a
// transaction that Busbar does not run within one (all but those
// txnManagementOp names): it is refused and the transaction (if open)
// becomes rollback-only, rather than the operation being applied outside
// it.
func (c *conn) txnRequest(ts *frames.TransactionalState, node address) frames.DeliveryState {
	err := &txnError{cond: frames.ErrCondNotImplemented, msg: fmt.Sprintf(
		"Busbar runs no %s operation inside a transaction but update-disposition, schedule-message, cancel-scheduled-message, set-session-state, the lock renewals and the reads (peek, receive-by-sequence-number, get-message-sessions, get-session-state, enumerate-rules); the transaction can only roll back.", node.String())}
	c.txnFail(ts.TxnID, err)
	return &frames.Rejected{Error: c.fail("transaction", node.path(), err).amqpError()}
}
