package broker

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// ReceiveMode is how received messages are settled.
type ReceiveMode uint8

// Receive modes.
const (
	// PeekLock locks each received message for LockDuration; the receiver
	// settles it explicitly (Complete, Abandon, DeadLetter, Defer, Release).
	PeekLock ReceiveMode = iota
	// ReceiveAndDelete removes each message (durably) as it is handed out.
	ReceiveAndDelete
)

// Delivery is a message handed to a receiver (or peeked), with the system
// properties the broker keeps beside it.
type Delivery struct {
	Message        *message.Message
	SequenceNumber int64
	EnqueuedTime   time.Time
	// TimeToLive is the effective TTL (0: never expires); ExpiresAt is
	// EnqueuedTime + TimeToLive, zero if never.
	TimeToLive time.Duration
	ExpiresAt  time.Time
	// LockToken identifies the lock in PeekLock; ReceiveAndDelete and
	// receive-by-sequence-number in that mode carry a fresh random token
	// (the AMQP delivery tag), peeks a zero one.
	LockToken   uuid.UUID
	LockedUntil time.Time // zero unless locked
	// LockHolder says who holds the lock (Receiver.SetHolder); only
	// Inspect fills it in, and only if the holder said who it is.
	LockHolder string
	// DeliveryCount is 1-based and includes this delivery: the persisted
	// count of earlier deliveries that ended by abandon or lock expiry, + 1.
	// (Peeks report the same value a receive would; the wire's
	// header.delivery-count is DeliveryCount − 1.)
	DeliveryCount uint32
	State         MessageState
	// ScheduledEnqueueTime is set for messages that were scheduled.
	ScheduledEnqueueTime time.Time
	// DeadLetterSource is set on a message that was auto-forwarded out of
	// a dead-letter queue (ForwardDeadLetteredMessagesTo): the entity it
	// was dead-lettered in (a queue name or a subscription path). The AMQP
	// layer sends it as the x-opt-deadletter-source annotation.
	DeadLetterSource string
	// Size is the stored size of the message in bytes.
	Size int
	// Body, if set, is the message's body, not read into memory:
	// Message.Body is nil and whoever sends the delivery reads the body
	// from Body and closes it (Close also when the delivery is dropped).
	// Only a Receiver that asked for it (StreamBodies) gets such
	// deliveries, for messages of at least the size it named.
	Body *BodyStream
}

// BodyStream is the body of a delivered message, read from the store a
// piece at a time. It stays readable after the message is settled or
// removed, until closed. Not safe for concurrent use.
type BodyStream struct {
	r      store.DataReader
	off, n int64
}

// Len is the body's length in bytes.
func (b *BodyStream) Len() int64 { return b.n }

// ReadAt reads the body's bytes from off, as io.ReaderAt.
func (b *BodyStream) ReadAt(p []byte, off int64) (int, error) {
	if off >= b.n {
		return 0, io.EOF
	}
	short := false
	if int64(len(p)) > b.n-off {
		p, short = p[:b.n-off], true
	}
	n, err := b.r.ReadAt(p, b.off+off)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

// Close releases the store's reader.
func (b *BodyStream) Close() error { return b.r.Close() }

// Receiver takes messages from one entity path. It is safe for concurrent
// use. Closing it releases nothing: locks outlive the receiver (they can
// be settled by token from anywhere) and expire on their own. A session
// receiver (AcceptSession, AcceptNextSession; session.go) is the
// exception: closing it releases its session and the messages it locked.
//
// Waiting: when TryReceive returns fewer messages than wanted, wait on
// Ready. Receivers are woken one per message that becomes available, so
// a receiver whose Ready channel fired must call TryReceive (with any max,
// even 0), Ready or Close soon after: until it does, the message it was
// woken for may wait for it rather than wake another receiver.
type Receiver struct {
	q    *entity
	sub  SubQueue
	mode ReceiveMode
	path string

	// sess is the session a session receiver holds (AcceptSession,
	// AcceptNextSession); nil for other receivers. See session.go.
	sess *session
	// stream is the size from which deliveries carry their body as a
	// BodyStream (StreamBodies); 0: never.
	stream int64

	// Guarded by q.mu.
	closed bool
	holder string        // who locks are taken for (SetHolder)
	waitCh chan struct{} // non-nil while queued in the sub-queue's waiters
	lostCh chan struct{} // session receivers: closed when the session lock is lost
}

// OpenReceiver opens a receiver on path: a queue ("queue",
// "queue/$DeadLetterQueue", "queue/$Transfer/$DeadLetterQueue") or a
// subscription ("topic/Subscriptions/sub" and its sub-queues, alike). A
// topic path is KindNotAllowed: messages are received from its
// subscriptions; so is the main queue of an entity with ForwardTo (its
// messages are auto-forwarded).
func (b *Broker) OpenReceiver(path string, mode ReceiveMode) (*Receiver, error) {
	if mode != PeekLock && mode != ReceiveAndDelete {
		return nil, errorf(KindInvalidArgument, "unknown receive mode %d", mode)
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return nil, err
	}
	if q.draining.Load() {
		return nil, errDraining(q.name)
	}
	q.lockAndPublish()
	defer q.mu.Unlock()
	if err := q.receiveCheckLocked(p.SubQueue); err != nil {
		return nil, err
	}
	if p.SubQueue == SubQueueMain && q.mu.props.RequiresSession {
		return nil, errorf(KindNotAllowed, "It is not possible for an entity that requires sessions to create a non-sessionful message receiver.")
	}
	if err := q.forwardReceiveCheckLocked(p.SubQueue); err != nil {
		return nil, err
	}
	q.mu.receivers++
	q.touchLocked(b.now())
	return &Receiver{q: q, sub: p.SubQueue, mode: mode, path: q.path(p.SubQueue)}, nil
}

// Path is the receiver's canonical entity path.
func (r *Receiver) Path() string { return r.path }

// StreamBodies makes the receiver hand out messages of at least min
// stored bytes with their body left in the store (Delivery.Body), for a
// caller that sends it on a piece at a time; min ≤ 0 turns it off. Call
// it before the first receive.
func (r *Receiver) StreamBodies(min int64) { r.stream = max(min, 0) }

// Mode is the receiver's receive mode.
func (r *Receiver) Mode() ReceiveMode { return r.mode }

// Close closes the receiver. Messages it handed out stay as they are.
func (r *Receiver) Close() error {
	if r.sess != nil {
		return r.closeSession()
	}
	q := r.q
	q.lockAndPublish()
	defer q.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	q.mu.receivers--
	if r.waitCh != nil {
		q.unwaitLocked(r)
		sq := &q.mu.subs[r.sub]
		if i := slices.Index(sq.waiters, r); i >= 0 {
			sq.waiters = slices.Delete(sq.waiters, i, i+1)
		}
	}
	if q.mu.gone == nil {
		q.passOnLocked(r.sub)
	}
	return nil
}

// Ready returns a channel that is closed when messages may be available
// (or when the receiver can only fail: closed, entity deleted or
// disabled). It is already closed if TryReceive would return a message or
// an error now. See Receiver for the waking contract.
func (r *Receiver) Ready() <-chan struct{} {
	if r.sess != nil {
		return r.readySession()
	}
	q := r.q
	q.lockAt(q.b.now())
	defer q.mu.Unlock()
	if r.closed || q.receiveCheckLocked(r.sub) != nil || q.peekAvailableLocked(r.sub) != nil {
		return closedChan
	}
	if r.waitCh != nil {
		return r.waitCh // already queued (and counted in q.waiting)
	}
	// Count this waiter before the last look at pub (see queue.waiting).
	q.pub.waiting.Add(1)
	q.publishPendingLocked()
	if q.peekAvailableLocked(r.sub) != nil {
		q.pub.waiting.Add(-1)
		return closedChan
	}
	r.waitCh = make(chan struct{})
	q.mu.subs[r.sub].waiters = append(q.mu.subs[r.sub].waiters, r)
	return r.waitCh
}

// SetHolder names who the receiver's locks are taken for, e.g. "link L
// on connection C": the broker keeps it (in memory) with each message
// lock the receiver takes from now on, and Inspect shows it in
// Delivery.LockHolder. Empty (the default) says nothing. It is at most
// maxLockHolder bytes; longer is cut.
func (r *Receiver) SetHolder(holder string) {
	holder = cutHolder(holder)
	q := r.q
	q.mu.Lock()
	r.holder = holder
	q.mu.Unlock()
}

// WithLockHolder names, for the broker calls made with ctx that take
// locks without a Receiver of their own (ReceiveDeferred,
// ReceiveDeferredInSession), who the locks are for, as
// Receiver.SetHolder does for a receiver.
func WithLockHolder(ctx context.Context, holder string) context.Context {
	return context.WithValue(ctx, lockHolderKey{}, holder)
}

type lockHolderKey struct{}

// lockHolderOf is the holder WithLockHolder put in ctx, cut to
// maxLockHolder bytes; "" if none.
func lockHolderOf(ctx context.Context) string {
	h, _ := ctx.Value(lockHolderKey{}).(string)
	return cutHolder(h)
}

// cutHolder cuts h to at most maxLockHolder bytes, at a character
// boundary.
func cutHolder(h string) string {
	if len(h) <= maxLockHolder {
		return h
	}
	n := maxLockHolder
	for n > 0 && !utf8.RuneStart(h[n]) {
		n--
	}
	return h[:n]
}

// maxLockHolder bounds a lock holder's description (SetHolder).
const maxLockHolder = 256

// taken is a message chosen for delivery in phase 1.
type taken struct {
	r      rec // snapshot
	tok    uuid.UUID
	holder string // who took it (Receiver.SetHolder)
}

// maxExpirePerReceive bounds the expired messages one TryReceive purges
// on its way (the rest are left to Tick or the next call), so a receive
// never turns into one huge store batch.
const maxExpirePerReceive = 256

// TryReceive returns up to max available messages without waiting (none
// is not an error). In PeekLock mode each is locked; in ReceiveAndDelete
// mode each is durably removed before TryReceive returns. Expired messages
// met on the way are dead-lettered or dropped, never returned.
func (r *Receiver) TryReceive(max int) ([]*Delivery, error) {
	if r.sess != nil {
		return r.tryReceiveSession(max)
	}
	q := r.q
	now := q.b.now()
	q.lockAt(now)
	if r.closed {
		q.mu.Unlock()
		return nil, errorf(KindClosed, "the receiver for '%s' is closed", r.path)
	}
	if err := q.receiveCheckLocked(r.sub); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	if max <= 0 {
		q.passOnLocked(r.sub)
		q.mu.Unlock()
		return nil, nil
	}
	q.touchLocked(now)
	var (
		out []taken
		ts  []transition
	)
	expired := 0
	for len(out) < max && expired < maxExpirePerReceive {
		rc := q.peekAvailableLocked(r.sub)
		if rc == nil {
			break
		}
		if r.sub == SubQueueMain && rc.expired(now) {
			ts = append(ts, q.expireLocked(rc, nil))
			expired++
			continue
		}
		out = append(out, q.takeLocked(r.sub, rc, r.mode, now, &ts, r.holder))
	}
	if len(out) == max {
		q.passOnLocked(r.sub)
	}
	return q.deliverAndUnlock(r.sub, r.mode, out, ts, now, r.stream)
}

// takeLocked locks rc (PeekLock) or marks it for removal (ReceiveAndDelete).
// holder is kept with the lock (see Receiver.SetHolder).
func (q *entity) takeLocked(sub SubQueue, rc *rec, mode ReceiveMode, now int64, ts *[]transition, holder string) taken {
	if mode == PeekLock {
		tok := q.lockRecLocked(sub, rc, now, holder)
		return taken{r: *rc, tok: tok, holder: holder}
	}
	t := removeTransitionLocked(sub, rc)
	t.why = 0 // recorded as the delivery (ReceivedAndDeleted)
	*ts = append(*ts, t)
	return taken{r: *rc, tok: q.newTokenLocked(), holder: holder}
}

// deliverAndUnlock runs phases 2 and 3 of a receive planned under q.mu
// (out: the messages taken; ts: removals and expiries). Called with q.mu
// held, it returns with q.mu released: it reads the messages and commits
// ts without the lock, then applies the outcome under it again, and
// builds the deliveries.
func (q *entity) deliverAndUnlock(sub SubQueue, mode ReceiveMode, out []taken, ts []transition, now int64, stream int64) ([]*Delivery, error) {
	if len(out) == 0 && len(ts) == 0 {
		q.mu.Unlock()
		return nil, nil
	}
	ops := q.saveAccessedLocked(nil)
	q.inflight.Add(1)
	q.mu.Unlock()
	defer q.inflight.Done()

	ds, failed, readErr := q.readDeliveries(out, mode, stream)
	if len(failed) > 0 && mode == ReceiveAndDelete {
		// Do not remove what could not be read: drop those transitions.
		bad := make(map[int64]bool, len(failed))
		for _, i := range failed {
			bad[out[i].r.seq] = true
		}
		keep := ts[:0:0]
		var revert []transition
		for _, t := range ts {
			if t.remove && bad[t.seq] {
				revert = append(revert, t)
			} else {
				keep = append(keep, t)
			}
		}
		ts = keep
		defer func() {
			q.lockAndPublish()
			q.applyLocked(revert, errors.New("unreadable"), now)
			q.mu.Unlock()
		}()
	}
	err := q.persist(nil, ts, ops, mode == ReceiveAndDelete)
	q.lockAndPublish()
	q.applyLocked(ts, err, now)
	if mode == PeekLock {
		for _, i := range failed { // unlock what could not be read, if still ours
			sq := &q.mu.subs[sub]
			if rc := sq.idx.get(out[i].r.seq); rc != nil && rc.locked() && !rc.busy() && sq.locked[rc.seq] == out[i].tok {
				q.unlockRecLocked(sub, rc)
				q.armRecLocked(sub, rc, now+retryDelay)
				if rc.available() {
					q.makeAvailableLocked(sub, rc)
				}
			}
		}
	}
	q.rearmLocked()
	q.mu.Unlock()
	if err != nil && mode == ReceiveAndDelete {
		closeBodies(ds)
		return nil, err
	}
	if len(ds) == 0 && readErr != nil {
		return nil, internal(readErr, "reading messages of %s", q.name)
	}
	if len(ds) > 0 {
		q.b.obs.Delivered(q.name, len(ds))
		if q.b.hist != nil {
			q.recordDeliveries(sub, mode, out, ds, now)
		}
	}
	return ds, nil
}

// readDeliveries reads the messages taken (phase 2, no lock held) and
// builds their deliveries. failed lists the indexes into out whose data
// could not be read, readErr the last such error; a peek-locked message
// gone meanwhile (its lock expired and someone else settled it, or the
// entity was deleted) is left out.
func (q *entity) readDeliveries(out []taken, mode ReceiveMode, stream int64) (ds []*Delivery, failed []int, readErr error) {
	ds = make([]*Delivery, 0, len(out))
	// One batch read: the data of messages sent one after another lies
	// side by side in the log and comes back in one read. Messages
	// streamed to the receiver are left out of it: only their heads are
	// read, and their bodies later, a piece at a time.
	// At most MaxStreamedPeek streamed (each holds an open file).
	isStreamed := make([]bool, len(out))
	nstreamed := 0
	refs := make([]store.DataRef, 0, len(out))
	for i := range out {
		if streamed(&out[i].r, stream) && nstreamed < MaxStreamedPeek {
			isStreamed[i] = true
			nstreamed++
			continue
		}
		refs = append(refs, q.dataRef(&out[i].r))
	}
	datas, errs := q.b.store.ReadDataBatch(refs)
	j := 0
	for i := range out {
		var dv *Delivery
		var err error
		if isStreamed[i] {
			dv, err = q.readHead(&out[i].r, out[i].tok)
		} else {
			d := datas[j]
			err = errs[j]
			j++
			if err == nil {
				dv, err = decodeDelivery(d, &out[i].r, out[i].tok)
			}
		}
		if errors.Is(err, store.ErrNotFound) && mode == PeekLock {
			continue
		}
		if err != nil {
			q.b.log.Error("cannot read message", "queue", q.name, "seq", out[i].r.seq, "err", err)
			failed = append(failed, i)
			readErr = err
			continue
		}
		ds = append(ds, dv)
	}
	return ds, failed, readErr
}

// peekDeliveries reads (in one batch read) and decodes the peeked records
// snap of path, leaving out those removed meanwhile. Records of at least
// stream bytes (0: none) get their body as a BodyStream (see
// WithStreamedBodies).
func (q *entity) peekDeliveries(snap []rec, path string, stream int64) ([]*Delivery, error) {
	refs := make([]store.DataRef, 0, len(snap))
	for i := range snap {
		if !streamed(&snap[i], stream) {
			refs = append(refs, q.dataRef(&snap[i]))
		}
	}
	datas, errs := q.b.store.ReadDataBatch(refs)
	ds := make([]*Delivery, 0, len(snap))
	j := 0
	for i := range snap {
		var d *Delivery
		var err error
		if streamed(&snap[i], stream) {
			d, err = q.readHead(&snap[i], uuid.UUID{})
		} else {
			err = errs[j]
			if err == nil {
				d, err = decodeDelivery(datas[j], &snap[i], uuid.UUID{})
			}
			j++
		}
		if errors.Is(err, store.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			closeBodies(ds)
			return nil, internal(err, "reading message %d of %s", snap[i].seq, path)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// WithStreamedBodies makes the peeks and receives by sequence number made
// with ctx (Peek, PeekSession, ReceiveDeferred,
// ReceiveDeferredInSession) hand out messages of at least min stored
// bytes with their body left in the store (Delivery.Body), as
// Receiver.StreamBodies does for receives, for a caller that sends them
// on a piece at a time and closes them. A peek returns at most
// MaxStreamedPeek of them (and the messages before the last), fewer than
// asked for if need be, as a peek may; a receive by sequence number
// returns every message asked for, the ones past MaxStreamedPeek read
// whole.
func WithStreamedBodies(ctx context.Context, min int64) context.Context {
	return context.WithValue(ctx, streamKey{}, min)
}

type streamKey struct{}

// MaxStreamedPeek bounds the messages with a streamed body one peek
// returns: each holds an open file until it is sent.
const MaxStreamedPeek = 32

// peekStream is the stream size WithStreamedBodies put in ctx; 0: none.
func peekStream(ctx context.Context) int64 {
	v, _ := ctx.Value(streamKey{}).(int64)
	return max(v, 0)
}

// peekMore is the ascend condition of a peek collecting snap: fewer than
// max records, and fewer than MaxStreamedPeek streamed ones.
func peekMore(snap []rec, max int, stream int64, nstreamed *int) bool {
	if stream > 0 && streamed(&snap[len(snap)-1], stream) {
		*nstreamed++
	}
	return len(snap) < max && *nstreamed < MaxStreamedPeek
}

// decodeDelivery decodes the stored data of r into a Delivery. data is
// the caller's own (a store read) and becomes the message's: its body and
// binary values alias it rather than being copied once more.
func decodeDelivery(data []byte, r *rec, tok uuid.UUID) (*Delivery, error) {
	v := new(struct { // the delivery and its message in one allocation
		d Delivery
		m message.Message
	})
	m := &v.m
	if err := m.UnmarshalShared(data); err != nil {
		return nil, err
	}
	return newDelivery(&v.d, m, r, tok), nil
}

// closeBodies closes the streamed bodies of deliveries that are dropped.
func closeBodies(ds []*Delivery) {
	for _, d := range ds {
		if d.Body != nil {
			d.Body.Close()
		}
	}
}

// streamed says whether a receiver that streams bodies of at least
// stream bytes (0: none) gets r's body streamed.
func streamed(r *rec, stream int64) bool { return stream > 0 && int64(r.size) >= stream }

// headRead is how much of a streamed message readHead reads first.
const headRead = 64 << 10

// readHead builds the delivery of r with its body left in the store
// (Delivery.Body): it reads the record's first bytes, more if its
// properties need them, and decodes everything but the body.
func (q *entity) readHead(r *rec, tok uuid.UUID) (*Delivery, error) {
	ref := q.dataRef(r)
	rd, err := store.OpenData(q.b.store, ref.EntityID, ref.Seq)
	if err != nil {
		return nil, err
	}
	_, m, off, bl, err := readRecordHead(rd)
	if err != nil {
		rd.Close()
		return nil, err
	}
	d := newDelivery(new(Delivery), m, r, tok)
	d.Body = &BodyStream{r: rd, off: off, n: bl}
	return d, nil
}

// readRecordHead reads the first bytes of the record rd reads, more if
// its fields need them, and decodes everything but the body
// (message.UnmarshalHead), which is [off, off+n) of the record.
func readRecordHead(rd store.DataReader) (head []byte, m *message.Message, off, n int64, err error) {
	size := rd.Size()
	for want := min(size, headRead); ; want = min(size, 4*want) {
		head = make([]byte, want)
		if k, err := rd.ReadAt(head, 0); k < len(head) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, 0, 0, err
		}
		m, off, n, err = message.UnmarshalHead(head, size)
		if errors.Is(err, message.ErrShortHead) && want < size {
			continue
		}
		return head, m, off, n, err
	}
}

// newDelivery fills in d, the delivery of m (record r, lock token tok).
func newDelivery(d *Delivery, m *message.Message, r *rec, tok uuid.UUID) *Delivery {
	*d = Delivery{
		Message:        m,
		SequenceNumber: r.seq,
		EnqueuedTime:   time.Unix(0, r.enq).UTC(),
		TimeToLive:     time.Duration(r.ttl),
		LockToken:      tok,
		DeliveryCount:  r.dc + 1,
		State:          r.state,
		Size:           int(r.size),
	}
	if e := r.expiresAt(); e != 0 {
		d.ExpiresAt = time.Unix(0, e).UTC()
	}
	if r.until != 0 {
		d.LockedUntil = time.Unix(0, r.until).UTC()
	}
	if r.flags&flagWasScheduled != 0 {
		d.ScheduledEnqueueTime = d.EnqueuedTime
	}
	d.DeadLetterSource = deadLetterSource(r, m)
	return d
}

// ReceiveDeferred receives deferred messages by sequence number, in the
// order given, locking them (PeekLock) or removing them
// (ReceiveAndDelete). Every number must name a deferred, unlocked message
// of path, else nothing happens and the error is KindMessageNotFound. A
// deferred message of the main queue that has expired is dead-lettered
// (DeadLetteringOnMessageExpiration) or dropped now and not returned.
func (b *Broker) ReceiveDeferred(ctx context.Context, path string, seqs []int64, mode ReceiveMode) ([]*Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return nil, err
	}
	now := b.now()
	q.lockAt(now)
	if err := q.receiveCheckLocked(p.SubQueue); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	if q.ss != nil && p.SubQueue == SubQueueMain {
		q.mu.Unlock()
		return nil, errorf(KindNotAllowed, "'%s' requires sessions: deferred messages are received within their session (ReceiveDeferredInSession, or a session receiver).", q.path(p.SubQueue))
	}
	sq := &q.mu.subs[p.SubQueue]
	seen := make(map[int64]bool, len(seqs))
	for _, seq := range seqs {
		r := sq.idx.get(seq)
		if r == nil || r.state != StateDeferred || r.busy() || r.locked() {
			q.mu.Unlock()
			return nil, errorf(KindMessageNotFound, "Failed to lock one or more specified messages. Either the message is already locked or it does not exist (sequence number %d, entity '%s').", seq, q.path(p.SubQueue))
		}
		seen[seq] = false
	}
	q.touchLocked(now)
	var (
		out []taken
		ts  []transition
	)
	for _, seq := range seqs {
		if seen[seq] {
			continue
		}
		seen[seq] = true
		r := sq.idx.get(seq)
		if p.SubQueue == SubQueueMain && r.expired(now) {
			ts = append(ts, q.expireLocked(r, nil))
			continue
		}
		out = append(out, q.takeLocked(p.SubQueue, r, mode, now, &ts, lockHolderOf(ctx)))
	}
	return q.deliverAndUnlock(p.SubQueue, mode, out, ts, now, peekStream(ctx))
}

// Peek returns up to max messages of path with sequence numbers from
// fromSeq on, in order, whatever their state (active, locked, deferred,
// scheduled; expired ones until purged), each with its State. It takes no
// lock and changes no delivery count. It is refused only when the entity
// is Disabled (a ReceiveDisabled queue can still be inspected).
func (b *Broker) Peek(ctx context.Context, path string, fromSeq int64, max int) ([]*Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return nil, err
	}
	if err := q.lockForPeek(b.now()); err != nil {
		return nil, err
	}
	var snap []rec
	stream, nstreamed := peekStream(ctx), 0
	if max > 0 {
		q.mu.subs[p.SubQueue].idx.ascend(fromSeq, func(r *rec) bool {
			if r.flags&flagPending != 0 {
				return true // not sent yet
			}
			snap = append(snap, *r)
			snap[len(snap)-1].until = 0 // a peek shows no lock
			return peekMore(snap, max, stream, &nstreamed)
		})
	}
	q.mu.Unlock()
	return q.peekDeliveries(snap, path, stream)
}

// lockForPeek locks q at now for a peek and records the use. It fails,
// leaving q unlocked, when q is gone or Disabled (a ReceiveDisabled
// entity can still be inspected).
func (q *entity) lockForPeek(now int64) error {
	q.lockAt(now)
	if err := q.mu.gone; err != nil {
		q.mu.Unlock()
		return err
	}
	if q.mu.props.Status == StatusDisabled {
		q.mu.Unlock()
		return errorf(KindEntityDisabled, "The messaging entity '%s' is Disabled.", q.name)
	}
	q.touchLocked(now)
	return nil
}

// DeleteMessages removes up to max messages of path that were enqueued
// before `before`, oldest first, skipping locked and scheduled ones (the
// batch-delete management operation). It returns how many it removed.
func (b *Broker) DeleteMessages(ctx context.Context, path string, max int, before time.Time) (int, error) {
	return b.deleteMessages(ctx, path, nil, max, before)
}

// DeleteSessionMessages is DeleteMessages for the messages of one session
// of a session-enabled queue or subscription (batch-delete from a session
// receiver).
func (b *Broker) DeleteSessionMessages(ctx context.Context, path, sessionID string, max int, before time.Time) (int, error) {
	return b.deleteMessages(ctx, path, &sessionID, max, before)
}

// deleteMessages is DeleteMessages, within session *sid unless sid is nil.
func (b *Broker) deleteMessages(ctx context.Context, path string, sid *string, max int, before time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	q, p, err := b.lookup(path)
	if err != nil {
		return 0, err
	}
	if max <= 0 {
		return 0, nil
	}
	now := b.now()
	limit := before.UnixNano()
	q.lockAt(now)
	if err := q.receiveCheckLocked(p.SubQueue); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	q.touchLocked(now)
	var sess uint32 // 0: any message
	if sid != nil {
		// Sessions group the main queue only; a session with no
		// messages has none to delete.
		var s *session
		if q.ss != nil {
			s = q.ss.byID[*sid]
		}
		if p.SubQueue != SubQueueMain || s == nil {
			q.mu.Unlock()
			return 0, nil
		}
		sess = s.num
	}
	var seqs []int64
	q.mu.subs[p.SubQueue].idx.ascend(0, func(r *rec) bool {
		if r.state != StateScheduled && !r.locked() && !r.busy() && r.enq < limit && (sess == 0 || r.sess == sess) {
			seqs = append(seqs, r.seq)
		}
		return len(seqs) < max
	})
	ts := make([]transition, 0, len(seqs))
	for _, seq := range seqs {
		ts = append(ts, removeTransitionLocked(p.SubQueue, q.mu.subs[p.SubQueue].idx.get(seq)))
	}
	if len(ts) == 0 {
		q.mu.Unlock()
		return 0, nil
	}
	if err := q.commitAndUnlock(ts, q.saveAccessedLocked(nil), true, now); err != nil {
		return 0, err
	}
	return len(ts), nil
}
