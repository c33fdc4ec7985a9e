package broker

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/store"
)

// Options configure Open.
type Options struct {
	// Store persists entities and messages. Required. The broker does not
	// close it: the caller owns it and closes it after Broker.Close.
	Store store.Store
	// Clock is the source of time; nil means the wall clock.
	Clock clock.Clock
	// Logger receives operational events; nil discards them.
	Logger *slog.Logger
}

// Broker is the queue engine. All methods are safe for concurrent use.
//
// Lock order (never acquire leftwards while holding a lock to the right):
//
//	Broker.admin → Broker.mu → queue.mu → Broker.timers
type Broker struct {
	store store.Store
	clock clock.Clock
	log   *slog.Logger

	// admin serialises entity create, update and delete (held across
	// their store commits, which are rare and small) and guards nsID and
	// nextID.
	admin  sync.Mutex
	nsID   uint64 // the "$namespace" bookkeeping entity; 0 until created
	nextID uint64 // next entity id to allocate

	mu struct {
		sync.RWMutex
		closed bool
		queues map[string]*queue // by entityKey(name)
	}

	// timers is the broker-wide heap of entity deadlines that the Run
	// shell sleeps on: one live entry per entity (queue.armedAt), stale
	// ones dropped when they surface.
	timers struct {
		sync.Mutex
		heap expiry.Heap // At = deadline (Unix ns), ID = entity id
		byID map[uint64]*queue
	}

	wake  chan struct{} // capacity 1: an earlier deadline was armed
	done  chan struct{} // closed by Close
	runWG sync.WaitGroup
}

// now returns the clock's time in Unix nanoseconds.
func (b *Broker) now() int64 { return b.clock.Now().UnixNano() }

func newBroker(opts Options) *Broker {
	b := &Broker{
		store: opts.Store,
		clock: opts.Clock,
		log:   opts.Logger,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	if b.clock == nil {
		b.clock = clock.Real{}
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.mu.queues = make(map[string]*queue)
	b.timers.byID = make(map[uint64]*queue)
	return b
}

// Close stops the broker: Run returns, pending and later operations fail
// with ErrClosed (receivers' Ready channels close), in-flight store commits
// finish, and last-access times are saved. It does not close the store.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return nil
	}
	b.mu.closed = true
	qs := make([]*queue, 0, len(b.mu.queues))
	for _, q := range b.mu.queues {
		qs = append(qs, q)
	}
	b.mu.Unlock()
	close(b.done)
	b.runWG.Wait()

	var batch store.Batch
	for _, q := range qs {
		q.lock()
		if q.mu.gone == nil {
			q.mu.gone = errClosed()
			q.wakeAllLocked()
			if q.mu.accessed != q.mu.accessedSaved {
				batch.Add(store.Op{Kind: store.OpPutValue, EntityID: q.id, Key: valueAccessed, Data: be64(q.mu.accessed)})
			}
		}
		q.mu.Unlock()
		q.inflight.Wait()
	}
	if batch.Len() > 0 {
		if err := b.store.Commit(&batch, true); err != nil {
			return internal(err, "saving access times")
		}
	}
	return nil
}

// lookup resolves an entity path to its queue.
func (b *Broker) lookup(path string) (*queue, Path, error) {
	p, err := ParsePath(path)
	if err != nil {
		return nil, p, err
	}
	b.mu.RLock()
	closed := b.mu.closed
	q := b.mu.queues[entityKey(p.Entity)]
	b.mu.RUnlock()
	if closed {
		return nil, p, errClosed()
	}
	if q == nil {
		return nil, p, errEntityNotFound(path)
	}
	return q, p, nil
}

// QueueInfo describes a queue: its properties, times and runtime counts.
type QueueInfo struct {
	Name       string
	Properties QueueProperties
	CreatedAt  time.Time
	UpdatedAt  time.Time
	AccessedAt time.Time // zero if never accessed
	Counts     Counts
}

// Counts are a queue's runtime counts (management-and-rules.md §1.11).
// Locked messages count as active; expired messages count until purged.
type Counts struct {
	Active             int64 // main queue, available or locked
	Deferred           int64 // main queue, deferred
	Scheduled          int64 // main queue, not yet enqueued
	DeadLetter         int64 // $DeadLetterQueue, all states
	Transfer           int64 // forwarding backlog (always 0: no forwarding yet)
	TransferDeadLetter int64 // $Transfer/$DeadLetterQueue
	Total              int64 // MessageCount: the sum of all of the above
	SizeInBytes        int64 // stored size of every message of every sub-queue
}

// CreateQueue creates a queue. Names are unique case-insensitively.
func (b *Broker) CreateQueue(name string, p QueueProperties) (QueueInfo, error) {
	if err := ValidateEntityName(name); err != nil {
		return QueueInfo{}, err
	}
	if err := p.Validate(); err != nil {
		return QueueInfo{}, err
	}
	p.AuthorizationRules = slices.Clone(p.AuthorizationRules)
	b.admin.Lock()
	defer b.admin.Unlock()
	b.mu.RLock()
	closed, exists := b.mu.closed, b.mu.queues[entityKey(name)] != nil
	b.mu.RUnlock()
	if closed {
		return QueueInfo{}, errClosed()
	}
	if exists {
		return QueueInfo{}, errorf(KindAlreadyExists, "The messaging entity '%s' already exists.", name)
	}
	if err := b.checkForwardLocked(name, p); err != nil {
		return QueueInfo{}, err
	}
	var batch store.Batch
	id := b.allocIDLocked(&batch)
	now := b.clock.Now().UTC()
	q := newQueue(b, id, name, p, now)
	batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: id, Name: name, Data: encodeSpec(q.specLocked())})
	if err := b.store.Commit(&batch, true); err != nil {
		return QueueInfo{}, internal(err, "creating queue %q", name)
	}
	b.mu.Lock()
	b.mu.queues[entityKey(name)] = q
	b.mu.Unlock()
	b.timers.Lock()
	b.timers.byID[id] = q
	b.timers.Unlock()
	q.lock()
	defer q.mu.Unlock()
	q.rearmLocked()
	return q.infoLocked(), nil
}

// allocIDLocked returns a fresh entity id and adds to batch the ops that
// persist the allocation (creating the namespace entity on first use), so
// ids are never reused, even after the highest one is deleted.
func (b *Broker) allocIDLocked(batch *store.Batch) uint64 {
	if b.nsID == 0 {
		b.nsID = b.nextID
		b.nextID++
		batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: b.nsID, Name: namespaceEntity,
			Data: encodeSpec(entitySpec{Kind: specKindNamespace})})
	}
	id := b.nextID
	b.nextID++
	batch.Add(store.Op{Kind: store.OpPutValue, EntityID: b.nsID, Key: valueNextEntityID, Data: be64(int64(b.nextID))})
	return id
}

// checkForwardLocked validates ForwardTo targets: an existing entity that
// is not the queue itself.
func (b *Broker) checkForwardLocked(name string, p QueueProperties) error {
	for _, f := range []struct{ prop, target string }{
		{"ForwardTo", p.ForwardTo},
		{"ForwardDeadLetteredMessagesTo", p.ForwardDeadLetteredMessagesTo},
	} {
		if f.target == "" {
			continue
		}
		if strings.EqualFold(f.target, name) {
			return invalidProp(f.prop, "a queue cannot forward to itself")
		}
		b.mu.RLock()
		ok := b.mu.queues[entityKey(f.target)] != nil
		b.mu.RUnlock()
		if !ok {
			return invalidProp(f.prop, "the target entity '%s' does not exist", f.target)
		}
	}
	return nil
}

// UpdateQueue replaces a queue's properties (a full replace, as the
// management API's PUT with If-Match). RequiresSession,
// RequiresDuplicateDetection and EnablePartitioning cannot change. Locks
// held on the queue's messages are kept; new values apply to new locks,
// new messages and the next lock end.
func (b *Broker) UpdateQueue(name string, p QueueProperties) (QueueInfo, error) {
	if err := p.Validate(); err != nil {
		return QueueInfo{}, err
	}
	p.AuthorizationRules = slices.Clone(p.AuthorizationRules)
	b.admin.Lock()
	defer b.admin.Unlock()
	q, path, err := b.lookup(name)
	if err != nil {
		return QueueInfo{}, err
	}
	if path.SubQueue != SubQueueMain {
		return QueueInfo{}, errorf(KindNotAllowed, "'%s' is a sub-queue; it has no properties of its own", name)
	}
	q.lock()
	old := q.mu.props
	spec := q.specLocked()
	q.mu.Unlock()
	if err := checkImmutable(old, p); err != nil {
		return QueueInfo{}, err
	}
	if err := b.checkForwardLocked(q.name, p); err != nil {
		return QueueInfo{}, err
	}
	now := b.clock.Now().UTC()
	spec.Properties = &p
	spec.Updated = now
	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: q.id, Name: q.name, Data: encodeSpec(spec)})
	if err := b.store.Commit(&batch, true); err != nil {
		return QueueInfo{}, internal(err, "updating queue %q", name)
	}
	q.lock()
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return QueueInfo{}, q.mu.gone
	}
	q.mu.props = p
	q.mu.updated = now
	q.touchLocked(now.UnixNano())
	q.wakeAllLocked() // status may have changed either way
	q.rearmLocked()
	return q.infoLocked(), nil
}

// GetQueue returns a queue's description and runtime counts.
func (b *Broker) GetQueue(name string) (QueueInfo, error) {
	q, p, err := b.lookup(name)
	if err != nil {
		return QueueInfo{}, err
	}
	if p.SubQueue != SubQueueMain {
		return QueueInfo{}, errorf(KindInvalidArgument, "'%s' is a sub-queue, not a queue", name)
	}
	q.lockAt(b.now())
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return QueueInfo{}, q.mu.gone
	}
	return q.infoLocked(), nil
}

// ListQueues returns every queue, ordered by name (case-insensitively).
func (b *Broker) ListQueues() []QueueInfo {
	b.mu.RLock()
	keys := make([]string, 0, len(b.mu.queues))
	for k := range b.mu.queues {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	qs := make([]*queue, len(keys))
	for i, k := range keys {
		qs[i] = b.mu.queues[k]
	}
	b.mu.RUnlock()
	out := make([]QueueInfo, 0, len(qs))
	for _, q := range qs {
		q.lock()
		if q.mu.gone == nil {
			out = append(out, q.infoLocked())
		}
		q.mu.Unlock()
	}
	return out
}

// DeleteQueue deletes a queue with all its messages and sub-queues.
// Receivers of the queue get a not-found error. A sub-queue cannot be
// deleted on its own.
func (b *Broker) DeleteQueue(name string) error {
	b.admin.Lock()
	defer b.admin.Unlock()
	q, p, err := b.lookup(name)
	if err != nil {
		return err
	}
	if p.SubQueue != SubQueueMain {
		return errorf(KindNotAllowed, "'%s' is a sub-queue; it cannot be deleted on its own, only with its queue", name)
	}
	return b.deleteLocked(q)
}

// deleteLocked removes q from memory, waits for its in-flight commits and
// deletes it from the store. b.admin is held.
func (b *Broker) deleteLocked(q *queue) error {
	b.mu.Lock()
	if b.mu.queues[entityKey(q.name)] == q {
		delete(b.mu.queues, entityKey(q.name))
	}
	b.mu.Unlock()
	b.timers.Lock()
	delete(b.timers.byID, q.id)
	b.timers.Unlock()

	q.deleted.Store(true)
	q.lock()
	q.mu.gone = errEntityNotFound(q.name)
	q.wakeAllLocked()
	q.releaseLocked()
	q.mu.Unlock()
	q.inflight.Wait() // their ops reach the store before the delete

	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpDeleteEntity, EntityID: q.id})
	if err := b.store.Commit(&batch, true); err != nil {
		return internal(err, "deleting queue %q", q.name)
	}
	return nil
}

// Run is the shell around the deterministic core: it calls Tick whenever
// NextDeadline is reached, sleeping on one real timer in between, and
// wakes early when an earlier deadline is armed. It returns when ctx is
// done (with ctx.Err()) or the broker is closed (with nil). Call it once,
// in a goroutine of your own; it starts no other goroutine.
func (b *Broker) Run(ctx context.Context) error {
	b.mu.RLock()
	if b.mu.closed {
		b.mu.RUnlock()
		return nil
	}
	b.runWG.Add(1)
	b.mu.RUnlock()
	defer b.runWG.Done()

	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		var tc <-chan time.Time
		if next := b.NextDeadline(); !next.IsZero() {
			d := next.Sub(b.clock.Now())
			if d <= 0 {
				b.Tick()
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-b.done:
					return nil
				default:
				}
				continue
			}
			t.Reset(d)
			tc = t.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.done:
			return nil
		case <-b.wake:
		case <-tc:
			b.Tick()
		}
		t.Stop()
	}
}

// Wake makes Run re-read NextDeadline now. The broker calls it itself
// when an earlier deadline appears; tests that move a fake clock call it
// after moving.
func (b *Broker) Wake() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// NextDeadline is when Tick should next be called: no later than the
// earliest instant something is due, or the zero time if nothing is
// pending. It may be early (timer entries are deleted lazily); a Tick
// with nothing due does nothing but move it on.
func (b *Broker) NextDeadline() time.Time {
	b.timers.Lock()
	defer b.timers.Unlock()
	for {
		e, ok := b.timers.heap.Min()
		if !ok {
			return time.Time{}
		}
		if q := b.timers.byID[uint64(e.ID)]; q != nil && q.armedAt == e.At {
			return time.Unix(0, e.At)
		}
		b.timers.heap.Pop() // stale
	}
}

// Tick does everything due at the clock's current time: lock expiries,
// message expiries, scheduled enqueues, duplicate-history purges and
// idle-queue deletion. Work is bounded per call; if more is due,
// NextDeadline reports a deadline that has already passed.
func (b *Broker) Tick() {
	now := b.now()
	var due []*queue
	b.timers.Lock()
	b.timers.heap.PopDue(now, 0, func(e expiry.Entry) {
		if q := b.timers.byID[uint64(e.ID)]; q != nil && q.armedAt == e.At {
			q.armedAt = 0
			due = append(due, q)
		}
	})
	b.timers.Unlock()
	for _, q := range due {
		if q.tick(now) {
			b.autoDelete(q, now)
		}
	}
}

// armQueue registers q's next deadline (Unix ns; 0 = none) with the Run
// shell. Called with q.mu held.
func (b *Broker) armQueue(q *queue, at int64) {
	if at == 0 {
		return
	}
	b.timers.Lock()
	if b.timers.byID[q.id] != q || (q.armedAt != 0 && q.armedAt <= at) {
		b.timers.Unlock()
		return
	}
	q.armedAt = at
	head, ok := b.timers.heap.Next()
	b.timers.heap.Push(expiry.Entry{At: at, ID: int64(q.id)})
	b.timers.Unlock()
	if !ok || at < head {
		b.Wake()
	}
}

// autoDelete deletes q if it is still idle (AutoDeleteOnIdle).
func (b *Broker) autoDelete(q *queue, now int64) {
	b.admin.Lock()
	defer b.admin.Unlock()
	b.mu.RLock()
	current := b.mu.queues[entityKey(q.name)] == q && !b.mu.closed
	b.mu.RUnlock()
	if !current {
		return
	}
	q.lock()
	idle := q.mu.gone == nil && q.idleLocked(now)
	q.mu.Unlock()
	if !idle {
		return
	}
	if err := b.deleteLocked(q); err != nil {
		b.log.Error("auto-deleting idle queue", "queue", q.name, "err", err)
		return
	}
	b.log.Info("deleted idle queue", "queue", q.name)
}
