package broker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/busbarmq/busbar/internal/broker/expiry"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/history"
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
	// Observer is told of sends, deliveries and settlements (metrics);
	// nil tells no one.
	Observer Observer
	// Tier is the pricing tier whose limits apply (tier.go); nil is
	// Busbar's own profile.
	Tier *Tier
	// History records the lives of messages (history.go); nil records
	// nothing.
	History *history.Log
	// Units starts the broker with no entity: a cluster node loads each
	// unit (a queue, or a topic with its subscriptions) it owns with
	// LoadUnit and gives it up with UnloadUnit. Store must then be a
	// store.UnitStore.
	Units bool
	// TransferBacklog bounds, with Units on a store.Outbox, the transfers
	// waiting for one target unit before sources stop forwarding into it
	// (transfer.go); 0 is DefaultTransferBacklog.
	TransferBacklog int
}

// Broker is the queue and topic engine. All methods are safe for
// concurrent use.
//
// Lock order (never acquire leftwards while holding a lock to the right):
//
//	Broker.admin → Broker.mu → topic.fanout → entity.mu → topic.mu → Broker.timers
//
// (entity is a queue or a subscription; a subscription's operations reach
// its topic's mutex from under their own, never the other way round.)
type Broker struct {
	store store.Store
	disk  store.DiskChecker // the store's, if it has one
	clock clock.Clock
	log   *slog.Logger
	obs   Observer
	tier  *Tier        // nil: no tier limits
	hist  *history.Log // nil: message histories off
	// retries logs failing background work once per episode.
	retries retryLog

	// admin serialises entity create, update and delete (held across
	// their store commits, which are rare and small) and guards nsID and
	// nextID.
	admin  sync.Mutex
	nsID   uint64 // the "$namespace" bookkeeping entity; 0 until created
	nextID uint64 // next entity id to allocate
	// catalog, with Options.Units on a store.Catalog, allocates the
	// entity ids and knows the names of every node's units.
	catalog store.Catalog
	// outbox, with a catalog on a store.Outbox, forwards to units other
	// nodes serve (transfer.go); transferBacklog bounds it per target.
	outbox          store.Outbox
	transferBacklog int
	// transferred is told the target units of each commit that put
	// transfers in the outbox (SetTransferred, wake.go).
	transferred atomic.Pointer[func(units []uint64)]

	mu struct {
		sync.RWMutex
		closed bool
		queues map[string]*entity // by entityKey(name)
		topics map[string]*topic  // by entityKey(name); names shared with queues
		// moved: queues and topics this broker unloaded (units.go), by
		// entityKey: a send on a link attached before the unload learns
		// that the entity moved rather than that it does not exist.
		moved map[string]bool
	}

	// timers is the broker-wide heap of entity deadlines that the Run
	// shell sleeps on: one live entry per entity (queue.armedAt), stale
	// ones dropped when they surface.
	timers struct {
		sync.Mutex
		heap expiry.Heap // At = deadline (Unix ns), ID = entity id
		byID map[uint64]timerOwner
	}

	wake  chan struct{} // capacity 1: an earlier deadline was armed
	done  chan struct{} // closed by Close
	runWG sync.WaitGroup
}

// now returns the clock's time in Unix nanoseconds.
func (b *Broker) now() int64 { return b.clock.Now().UnixNano() }

// Now is the time on the broker's clock, the one locks expire by.
func (b *Broker) Now() time.Time { return b.clock.Now() }

func newBroker(opts Options) *Broker {
	b := &Broker{
		store: opts.Store,
		disk:  diskChecker(opts.Store),
		clock: opts.Clock,
		log:   opts.Logger,
		obs:   opts.Observer,
		tier:  opts.Tier,
		hist:  opts.History,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	if b.clock == nil {
		b.clock = clock.Real{}
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.obs == nil {
		b.obs = noObserver{}
	}
	b.retries.log = b.log
	if c, ok := opts.Store.(store.Catalog); ok && opts.Units {
		b.catalog = c
		if o, ok := opts.Store.(store.Outbox); ok {
			b.outbox = o
		}
	}
	b.transferBacklog = opts.TransferBacklog
	if b.transferBacklog <= 0 {
		b.transferBacklog = DefaultTransferBacklog
	}
	b.mu.queues = make(map[string]*entity)
	b.mu.topics = make(map[string]*topic)
	b.mu.moved = make(map[string]bool)
	b.timers.byID = make(map[uint64]timerOwner)
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
	qs := make([]*entity, 0, len(b.mu.queues))
	for _, q := range b.mu.queues {
		qs = append(qs, q)
	}
	ts := make([]*topic, 0, len(b.mu.topics))
	for _, t := range b.mu.topics {
		ts = append(ts, t)
		qs = append(qs, t.subs.Load().list...)
	}
	b.mu.Unlock()
	close(b.done)
	b.runWG.Wait()

	var batch store.Batch
	for _, t := range ts {
		t.lockAndPublish()
		if t.mu.gone == nil {
			t.mu.gone = errClosed()
			if acc := t.accessed.Load(); acc != t.mu.accessedSaved {
				batch.Add(store.Op{Kind: store.OpPutValue, EntityID: t.id, Key: valueAccessed, Data: be64(acc)})
			}
			batch.Ops = t.appendGarbageOps(batch.Ops, t.takeGarbageLocked())
		}
		t.mu.Unlock()
		t.inflight.Wait()
	}
	for _, q := range qs {
		q.lockAndPublish()
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
			if errors.Is(err, store.ErrNoSpace) {
				// Access times and unreferenced shared data only: nothing
				// acknowledged depends on them (recovery drops such data
				// again). A full disk must not fail the shutdown.
				b.log.Warn("no space to save access times on close", "err", err)
				return nil
			}
			return internal(err, "saving access times")
		}
	}
	return nil
}

// lookup resolves a receiving entity path (a queue's or a
// subscription's, with their sub-queues) to its entity.
func (b *Broker) lookup(path string) (*entity, Path, error) {
	p, err := ParsePath(path)
	if err != nil {
		return nil, p, err
	}
	b.mu.RLock()
	closed := b.mu.closed
	var q *entity
	var t *topic
	if p.Subscription == "" {
		q = b.mu.queues[entityKey(p.Entity)]
		if q == nil {
			t = b.mu.topics[entityKey(p.Entity)]
		}
	} else if tt := b.mu.topics[entityKey(p.Entity)]; tt != nil {
		q = tt.subs.Load().byKey[entityKey(p.Subscription)]
	}
	b.mu.RUnlock()
	if closed {
		return nil, p, errClosed()
	}
	if t != nil && p.SubQueue == SubQueueMain {
		return nil, p, errorf(KindNotAllowed, "'%s' is a topic; messages are received from its subscriptions ('%s')", path, SubscriptionPath(t.name, "<name>"))
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

// Counts are a queue's runtime counts (docs/wire/management-plane.md §1.11).
// Locked messages count as active; expired messages count until purged.
type Counts struct {
	Active             int64 // main queue, available or locked
	Deferred           int64 // main queue, deferred
	Scheduled          int64 // main queue, not yet enqueued
	DeadLetter         int64 // $DeadLetterQueue, all states
	Transfer           int64 // forwarding backlog: waiting to be auto-forwarded (not in Active / DeadLetter)
	TransferDeadLetter int64 // $Transfer/$DeadLetterQueue
	Total              int64 // MessageCount: the sum of all of the above
	SizeInBytes        int64 // stored size of every message of every sub-queue
}

// CreateQueue creates a queue. Names are unique case-insensitively.
func (b *Broker) CreateQueue(name string, p QueueProperties) (QueueInfo, error) {
	return b.CreateQueueWithID(0, name, p)
}

// CreateQueueWithID is CreateQueue with the entity id given: on a
// cluster node, id is one another node allocated from the catalog
// (placement chose this node for it); 0 allocates one here.
func (b *Broker) CreateQueueWithID(id uint64, name string, p QueueProperties) (QueueInfo, error) {
	p.AuthorizationRules = slices.Clone(p.AuthorizationRules)
	valid := func() error {
		if err := p.Validate(); err != nil {
			return err
		}
		return b.tier.checkQueue(&p)
	}
	return createEntity[*entity, QueueInfo](b, id, "queue", name, valid,
		func() error { return b.checkForwardLocked(name, p) },
		func(id uint64, now time.Time) *entity { return newEntity(b, id, name, p, now) },
		func(q *entity) { b.mu.queues[entityKey(name)] = q })
}

// newQueueOrTopic is what createEntity needs of a new queue or topic.
type newQueueOrTopic[I any] interface {
	timerOwner
	specLocked() entitySpec
	// armedInfo arms the entity's timers and returns its description.
	armedInfo() I
}

// createEntity is CreateQueue's and CreateTopic's shared shape: check the
// name and the properties (valid) and that the disk takes new data; under
// b.admin check that the name is free in the shared namespace and the
// kind's own conditions (check), then commit the new entity (made by
// build) and only then register it in memory (register, under b.mu) and
// with the timers. A given id (not 0) is used instead of a new one; only
// a cluster node, whose ids come from the catalog, takes one.
func createEntity[E newQueueOrTopic[I], I any](b *Broker, id uint64, kind, name string, valid, check func() error,
	build func(id uint64, now time.Time) E, register func(E)) (I, error) {
	var none I
	if err := ValidateEntityName(name); err != nil {
		return none, err
	}
	if id != 0 && b.catalog == nil {
		return none, internal(errors.New("an entity id given to a broker that allocates its own"), "creating %s %q", kind, name)
	}
	if err := valid(); err != nil {
		return none, err
	}
	if err := b.checkGrowth(); err != nil {
		return none, err
	}
	b.admin.Lock()
	defer b.admin.Unlock()
	closed, taken := b.nameTakenLocked(name)
	if closed {
		return none, errClosed()
	}
	if taken {
		return none, errorf(KindAlreadyExists, "The messaging entity '%s' already exists.", name)
	}
	if err := b.checkEntityCount(); err != nil {
		return none, err
	}
	if err := check(); err != nil {
		return none, err
	}
	if err := b.checkCatalogLocked(name); err != nil {
		return none, err
	}
	var batch store.Batch
	if id == 0 {
		var err error
		if id, err = b.allocIDLocked(&batch); err != nil {
			return none, err
		}
	}
	e := build(id, b.clock.Now().UTC())
	batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: id, Name: name, Data: encodeSpec(e.specLocked())})
	if err := b.commitCreateLocked(&batch); err != nil {
		return none, internal(err, "creating %s %q", kind, name)
	}
	b.mu.Lock()
	register(e)
	b.mu.Unlock()
	b.timers.Lock()
	b.timers.byID[id] = e
	b.timers.Unlock()
	return e.armedInfo(), nil
}

func (q *entity) armedInfo() QueueInfo {
	q.lockAndPublish()
	defer q.mu.Unlock()
	q.rearmLocked()
	return q.infoLocked()
}

// lookupQueue resolves the name of a queue (with a sub-queue suffix) for
// the queue management operations: a topic or subscription is not found.
func (b *Broker) lookupQueue(name string) (*entity, Path, error) {
	q, p, err := b.lookup(name)
	if err == nil && q.topic != nil || KindOf(err) == KindNotAllowed {
		return nil, p, errEntityNotFound(name)
	}
	return q, p, err
}

// commitCreateLocked commits batch, which creates an entity (its ops
// from allocIDLocked first). If the commit fails, the namespace entity
// that the batch would have created is forgotten, so the next creation
// adds it again (the id counter stays ahead: ids are never reused).
func (b *Broker) commitCreateLocked(batch *store.Batch) error {
	err := b.store.Commit(batch, true)
	if err != nil && len(batch.Ops) > 0 && batch.Ops[0].Kind == store.OpPutEntity && batch.Ops[0].EntityID == b.nsID {
		b.nsID = 0
	}
	return err
}

// diskChecker returns st's DiskChecker, nil if it has none.
func diskChecker(st store.Store) store.DiskChecker {
	d, _ := st.(store.DiskChecker)
	return d
}

// checkGrowth refuses new data (messages, entities) while the store says
// the disk is below its low-disk watermark or the store has stopped
// (KindNoSpace, KindStoreFailed). Settlements are not checked: they free
// space.
func (b *Broker) checkGrowth() error {
	if b.disk == nil {
		return nil
	}
	if err := b.disk.CheckGrowth(); err != nil {
		if e := storeError(err); e != nil {
			return e
		}
		return internal(err, "checking free disk space")
	}
	return nil
}

// Health is nil while the broker's store takes writes, else why not (a
// KindNoSpace or KindStoreFailed error): the disk is full or below the
// low-disk watermark, or the store stopped after an I/O error.
func (b *Broker) Health() error {
	if b.disk == nil {
		return nil
	}
	if err := b.disk.Health(); err != nil {
		if e := storeError(err); e != nil {
			return e
		}
		return internal(err, "store health")
	}
	return nil
}

// allocIDLocked returns a fresh entity id and adds to batch the ops that
// persist the allocation (creating the namespace entity on first use), so
// ids are never reused, even after the highest one is deleted. A cluster
// node takes it from the catalog instead (no namespace entity).
func (b *Broker) allocIDLocked(batch *store.Batch) (uint64, error) {
	if b.catalog != nil {
		ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
		defer cancel()
		id, err := b.catalog.NewEntityID(ctx)
		if err != nil {
			if e := storeError(err); e != nil {
				return 0, e
			}
			return 0, internal(err, "allocating an entity id")
		}
		return id, nil
	}
	if b.nsID == 0 {
		b.nsID = b.nextID
		b.nextID++
		batch.Add(store.Op{Kind: store.OpPutEntity, EntityID: b.nsID, Name: namespaceEntity,
			Data: encodeSpec(entitySpec{Kind: specKindNamespace})})
	}
	id := b.nextID
	b.nextID++
	batch.Add(store.Op{Kind: store.OpPutValue, EntityID: b.nsID, Key: valueNextEntityID, Data: be64(int64(b.nextID))})
	return id, nil
}

// catalogTimeout bounds a question to the cluster's catalog.
const catalogTimeout = 10 * time.Second

// checkCatalogLocked refuses, on a cluster node, a queue or topic name
// that another node's unit holds (this node's are in its maps). The
// catalog's unique name key refuses a race of two creations at commit.
func (b *Broker) checkCatalogLocked(name string) error {
	if b.catalog == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
	defer cancel()
	_, ok, err := b.catalog.UnitNamed(ctx, name)
	if err != nil {
		if e := storeError(err); e != nil {
			return e
		}
		return internal(err, "looking up %q in the catalog", name)
	}
	if ok {
		return errorf(KindAlreadyExists, "The messaging entity '%s' already exists.", name)
	}
	return nil
}

// checkForwardLocked validates the queue's forwarding (see
// checkForwardingLocked).
func (b *Broker) checkForwardLocked(name string, p QueueProperties) error {
	return b.checkForwardingLocked(name, p.RequiresSession, p.ForwardTo, p.ForwardDeadLetteredMessagesTo)
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
	if err := b.tier.checkQueue(&p); err != nil {
		return QueueInfo{}, err
	}
	p.AuthorizationRules = slices.Clone(p.AuthorizationRules)
	b.admin.Lock()
	defer b.admin.Unlock()
	q, path, err := b.lookupQueue(name)
	if err != nil {
		return QueueInfo{}, err
	}
	if path.SubQueue != SubQueueMain {
		return QueueInfo{}, errorf(KindNotAllowed, "'%s' is a sub-queue; it has no properties of its own", name)
	}
	q.lockAndPublish()
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
	q.lockAndPublish()
	defer q.mu.Unlock()
	if q.mu.gone != nil {
		return QueueInfo{}, q.mu.gone
	}
	q.mu.props = p
	q.mu.updated = now
	q.wakeAllLocked() // status may have changed either way
	q.propsChangedForwardLocked()
	q.rearmLocked()
	return q.infoLocked(), nil
}

// GetQueue returns a queue's description and runtime counts.
func (b *Broker) GetQueue(name string) (QueueInfo, error) {
	q, p, err := b.lookupQueue(name)
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
	qs := make([]*entity, len(keys))
	for i, k := range keys {
		qs[i] = b.mu.queues[k]
	}
	b.mu.RUnlock()
	out := make([]QueueInfo, 0, len(qs))
	for _, q := range qs {
		q.lockAndPublish()
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
	q, p, err := b.lookupQueue(name)
	if err != nil {
		return err
	}
	if p.SubQueue != SubQueueMain {
		return errorf(KindNotAllowed, "'%s' is a sub-queue; it cannot be deleted on its own, only with its queue", name)
	}
	return b.deleteLocked(q)
}

// deleteLocked deletes q from the store, then from memory (so a failed
// commit changes nothing), and waits for its in-flight commits: those
// that reach the store after the delete are no-ops there (store rules),
// their messages gone with the entity, as if sent just before it. b.admin
// is held.
func (b *Broker) deleteLocked(q *entity) error {
	var batch store.Batch
	batch.Add(store.Op{Kind: store.OpDeleteEntity, EntityID: q.id})
	if err := b.store.Commit(&batch, true); err != nil {
		return internal(err, "deleting queue %q", q.name)
	}
	b.mu.Lock()
	if b.mu.queues[entityKey(q.name)] == q {
		delete(b.mu.queues, entityKey(q.name))
	}
	b.mu.Unlock()
	b.timers.Lock()
	delete(b.timers.byID, q.id)
	b.timers.Unlock()

	q.deleted.Store(true)
	q.lockAndPublish()
	q.mu.gone = errEntityNotFound(q.name)
	q.wakeAllLocked()
	q.releaseLocked()
	q.mu.Unlock()
	q.inflight.Wait()
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
		if o := b.timers.byID[uint64(e.ID)]; o != nil && *o.armedSlot() == e.At {
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
	var due []timerOwner
	b.timers.Lock()
	b.timers.heap.PopDue(now, 0, func(e expiry.Entry) {
		if o := b.timers.byID[uint64(e.ID)]; o != nil && *o.armedSlot() == e.At {
			*o.armedSlot() = 0
			due = append(due, o)
		}
	})
	b.timers.Unlock()
	for _, o := range due {
		if o.tick(now) {
			b.autoDelete(o, now)
		}
	}
}

// timerOwner is what Broker.timers holds an entry for: a receiving entity
// (queue or subscription) or a topic.
type timerOwner interface {
	// armedSlot is the owner's deadline registered with Broker.timers
	// (0: none); guarded by Broker.timers.
	armedSlot() *int64
	// tick runs the timer work due at now, re-arms, and reports whether
	// the owner is idle and should be auto-deleted.
	tick(now int64) (idle bool)
}

// arm registers o's next deadline (Unix ns; 0 = none) with the Run
// shell. Called with o's mutex held.
func (b *Broker) arm(o timerOwner, id uint64, at int64) {
	if at == 0 {
		return
	}
	b.timers.Lock()
	slot := o.armedSlot()
	if b.timers.byID[id] != o || (*slot != 0 && *slot <= at) {
		b.timers.Unlock()
		return
	}
	*slot = at
	head, ok := b.timers.heap.Next()
	b.timers.heap.Push(expiry.Entry{At: at, ID: int64(id)})
	b.timers.Unlock()
	if !ok || at < head {
		b.Wake()
	}
}

// autoDelete deletes o (a queue, subscription or topic) if it is still
// idle (AutoDeleteOnIdle).
func (b *Broker) autoDelete(o timerOwner, now int64) {
	b.admin.Lock()
	defer b.admin.Unlock()
	b.mu.RLock()
	closed := b.mu.closed
	var current bool
	switch o := o.(type) {
	case *entity:
		if o.topic != nil {
			current = b.mu.topics[entityKey(o.topic.name)] == o.topic && o.topic.subs.Load().byKey[entityKey(o.subName)] == o
		} else {
			current = b.mu.queues[entityKey(o.name)] == o
		}
	case *topic:
		current = b.mu.topics[entityKey(o.name)] == o
	}
	b.mu.RUnlock()
	if !current || closed {
		return
	}
	switch o := o.(type) {
	case *entity:
		o.lockAndPublish()
		idle := o.mu.gone == nil && o.idleLocked(now)
		o.mu.Unlock()
		if !idle {
			return
		}
		var err error
		if o.topic != nil {
			err = b.deleteSubscriptionLocked(o.topic, o)
		} else {
			err = b.deleteLocked(o)
		}
		if err != nil {
			b.log.Error("auto-deleting idle entity", "entity", o.name, "err", err)
			return
		}
		b.log.Info("deleted idle entity", "entity", o.name)
	case *topic:
		o.lockAndPublish()
		idle := o.mu.gone == nil && o.idleLocked(now)
		o.mu.Unlock()
		if !idle || !o.idle(now) {
			return
		}
		if err := b.deleteTopicLocked(o); err != nil {
			b.log.Error("auto-deleting idle topic", "topic", o.name, "err", err)
			return
		}
		b.log.Info("deleted idle topic", "topic", o.name)
	}
}

// NewSpool returns a temporary file for a large message being received,
// from the store (store.Spooler); nil, nil if the store keeps none
// (memory, PostgreSQL): the message is then kept in memory as it arrives. The message, decoded with its body left
// in the spool (message.Message.BodyTail), is sent with Sender.Send; the
// caller closes the spool after that.
func (b *Broker) NewSpool() (store.Spool, error) {
	sp, ok := b.store.(store.Spooler)
	if !ok {
		return nil, nil
	}
	s, err := sp.NewSpool()
	if errors.Is(err, store.ErrNoSpools) {
		return nil, nil
	}
	if err != nil {
		return nil, internal(err, "creating a spool")
	}
	return spool{s}, nil
}

// spool gives a store spool's write errors the broker's kinds (a full
// disk is KindNoSpace).
type spool struct{ store.Spool }

func (s spool) Write(p []byte) error {
	if err := s.Spool.Write(p); err != nil {
		return internal(err, "spooling a large message")
	}
	return nil
}

// CanSpool says whether NewSpool can work.
func (b *Broker) CanSpool() bool {
	_, ok := b.store.(store.Spooler)
	return ok
}
