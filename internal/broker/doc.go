// Package broker is Busbar's deterministic core for Service Bus queues,
// topics, subscriptions and rules: entities and their properties,
// sending, fan-out through subscription rules, peek-lock and
// receive-and-delete, settlement, lock renewal and expiry, time-to-live,
// scheduled messages, deferral, dead-letter queues, duplicate detection,
// auto-delete on idle, runtime counts and recovery after a restart. It
// speaks no protocol: the AMQP endpoint and the admin API call the methods
// of Broker.
//
// # Determinism
//
// The core never reads the wall clock or sleeps: time comes from an
// injected clock.Clock, and every timer-driven effect happens in Tick,
// which does what is due at Clock.Now(). NextDeadline says when to call it
// again, and every operation first does what is due for its entity ("lazy
// check on access"), so tests drive everything with clock.Fake and never
// sleep. Run is the thin shell for production: one goroutine, one real
// timer, woken when a new earlier deadline is armed.
//
// Each entity has ONE timer structure (package expiry, a min-heap) holding
// its lock expiries, message expiries and scheduled enqueues (a topic's:
// its scheduled fan-outs); the broker keeps one more heap with each
// entity's earliest deadline for Run.
//
// # Entities and paths
//
// Queues and topics share one namespace (case-insensitively). A queue and
// a subscription are both a receiving entity (type entity: ONE
// implementation of receive, settlement, locks, delivery counts,
// deferral, dead-lettering, TTL, peek, idle deletion and counts), each
// with three sub-queues. Paths (matched case-insensitively):
//
//	queue                                   a queue
//	queue/$DeadLetterQueue                  its dead-lettered messages (always exists)
//	queue/$Transfer/$DeadLetterQueue        its transfer dead letters: what
//	                                        auto-forwarding could not deliver
//	topic                                   a topic: send, schedule, cancel only
//	topic/Subscriptions/sub                 a subscription: receive, settle, peek, …
//	topic/Subscriptions/sub/$DeadLetterQueue
//	topic/Subscriptions/sub/$Transfer/$DeadLetterQueue
//
// Receiver, settlement, peek, ReceiveDeferred and DeleteMessages take a
// subscription's paths exactly like a queue's. "Subscriptions" is
// therefore reserved as a segment of queue and topic names.
//
// A message keeps its sequence number for life, also when it moves to the
// dead-letter queue. Sequence numbers are per queue or topic, strictly
// increasing and never reused, also across restarts (the store's lastSeq).
//
// Topics. The sequence number a topic sender sees (Schedule returns it,
// CancelScheduled takes it) is the topic's, and every subscription copy of
// the message keeps it, as Service Bus does: the same message has the same
// number in every subscription. One exception: when one subscription gets
// several copies of one message (a rule without an action matched and
// one with, or several rules with actions), the first keeps the topic's
// number and each further copy gets a fresh number from the topic's
// sequence, so every message of a subscription has its own number (which
// settlement by sequence number needs); Service Bus does not document what
// it does there.
//
// # Topics, rules and fan-out
//
// A subscription has rules (RuleDescription: a filter, TrueFilter,
// FalseFilter, SQL or correlation, compiled once when the rule is created,
// and an optional SQL action). A new subscription gets $Default
// (TrueFilter) unless created with a default rule of its own. A message
// sent to a topic is routed when it is enqueued (a scheduled one when its
// time comes) through every subscription whose Status takes new messages:
//
//	rules matching without an action ──► one unchanged copy (shared data)
//	each matching rule with an action ─► its own copy: the action applied,
//	                                     application property RuleName = rule
//	a filter or action fails ──────────► DeadLetteringOnFilterEvaluationExceptions
//	                                     (default true): the unchanged message
//	                                     in the subscription's DLQ only, reason
//	                                     = the EvalError's Type, description =
//	                                     its Message; otherwise that rule just
//	                                     does not match
//
// Filters see the message's properties and system properties (sequence
// number, enqueued time, size, TTL, …; filter.SystemProps). A copy's TTL
// is the message's, capped by the topic's DefaultMessageTimeToLive and the
// subscription's (the lower wins). A message nobody takes is dropped.
//
// # Sessions
//
// A queue or subscription with RequiresSession groups its messages by
// SessionId into sessions, each received in order by one session receiver
// at a time (AcceptSession, AcceptNextSession) under a session lock that
// also locks the messages it hands out; its sub-queues are ordinary. A
// session has durable state. See session.go for the rules (lock expiry
// versus release, settlement, deferral, state, listing).
//
// # Shared data and reference counts
//
// A message is stored ONCE however many subscriptions receive it
// unchanged; each subscription's copy is logical: its own index record
// (lock, delivery count, state, DLQ) and a Meta-only store message.
//
//	store entity "t" (topic)           store entity "t/Subscriptions/a"
//	  seq 7: Meta{active} + Data ◄────┬── seq 7: Meta{shared}       (no Data)
//	  seq 9: Meta{scheduled} + Data   │   seq 8: Meta + Data         (own: an action's copy)
//	                                  │ store entity "t/Subscriptions/b"
//	topic index rec 7: dc = 2 ◄───────┴── seq 7: Meta{shared}, DLQ  (no Data)
//
// The reference count of shared data is the dc field of the topic's index
// record: the number of subscription copies flagged shared. It is never
// written to the store: recovery counts it again from the copies (the
// topic's messages are visited first, its subscriptions' entity ids being
// higher). A copy releases its reference when it is removed (complete,
// receive-and-delete, expiry, batch delete) or gets data of its own (a
// settlement that changes properties, a dead-lettering that adds the
// reason), once that change is durable (phase 3). Data whose count reaches
// zero is removed with the next commit of the topic or of any of its
// subscriptions (or Close); a crash before that leaves data no copy refers
// to, which recovery removes. Deleting a subscription releases every
// reference its copies held, removing the freed data in the same batch.
//
// A send to a topic with N subscriptions is ONE synced store batch: the
// data once, N Meta-only appends (or own-data appends for action copies
// and dead-lettered ones), duplicate-detection values.
//
// # Message states
//
//	                    Schedule(at), or Send with x-opt-scheduled-enqueue-time > now
//	Send ──┬───────────────────────────────► SCHEDULED ── CancelScheduled ──► gone
//	       │                                     │ at reached (no store write)
//	       ▼                                     ▼
//	     ACTIVE ◄────────────────────────────────┘
//	       │ ▲   TTL passed (Tick, or met by a receive) ──► EXPIRE
//	       │ │   receive in ReceiveAndDelete ─────────────► gone
//	       │ │
//	       │ └── lock ends, count < MaxDeliveryCount, TTL not passed
//	       │                                ▲
//	       │ receive in PeekLock            │ Release: count unchanged
//	       ▼                                │ Abandon, lock expiry: count + 1
//	     LOCKED ────────────────────────────┤   count ≥ MaxDeliveryCount ─► DLQ (MaxDeliveryCountExceeded)
//	       │                                └── TTL passed ─────────────► EXPIRE
//	       ├── Complete (even if TTL passed) ───────────────────────────► gone
//	       ├── DeadLetter ───────────────────────────────────────────────► DLQ (given reason)
//	       └── Defer ──► DEFERRED ── ReceiveDeferred(seq) ──► LOCKED (still deferred:
//	                       │         its lock ends back in DEFERRED, never ACTIVE)
//	                       └── never received normally; TTL checked only when
//	                           ReceiveDeferred touches it ─► EXPIRE
//
//	EXPIRE = DeadLetteringOnMessageExpiration ? DLQ (TTLExpiredException) : gone
//
// A subscription runs the same machine, except that its copies are never
// SCHEDULED (its topic holds a scheduled message until its fan-out) and a
// copy whose rule evaluation failed arrives in its DLQ directly.
//
// In a dead-letter queue the same machine runs without TTL and without
// dead-lettering; the delivery count is frozen there (Service Bus does not
// raise it in a DLQ). A settlement whose property changes would push the
// header over 64 KB dead-letters the message with HeaderSizeExceeded
// instead (the changes are dropped).
//
// The delivery count a receiver sees is the persisted count + 1; the
// persisted count rises when a lock ends by abandon or expiry. Abandon
// commits it synced; a lock expiry commits it with Commit(sync=false), so
// it becomes durable with the next group commit and a crash right after
// may lose that increment. Locks are volatile: after a restart every
// message is unlocked and its count is what was persisted.
//
// # A commit that fails
//
// Memory never runs ahead of the store. A send, settlement or entity
// change whose commit fails changes nothing: the send's placeholders go,
// a settled message keeps its lock under the same token (so the client's
// retry finds it once the store takes writes again; the lock still
// expires on time), an entity is created in memory only after its commit
// and deleted from memory only after its delete is committed. Store
// refusals keep their kind: the disk is full or below the store's low-disk
// watermark (KindNoSpace, with the store's text: "the broker's disk is
// full: N bytes free of M"), or the store stopped after an I/O error
// (KindStoreFailed). Sends and entity creation ask the store first
// (store.DiskChecker.CheckGrowth), so below the watermark they are refused
// while settlements and deletes, which free space, still go through.
// Health reports the store's state for the readiness probe.
//
// # Memory
//
// Per message the broker keeps one 48-byte record (sequence number,
// enqueued time, TTL, lock expiry, size, delivery count, state, flags) in
// an ordered block index per sub-queue, plus a 24-byte timer entry when
// the message has a TTL or is scheduled. Bodies and properties stay in
// the store and are read with ReadData on delivery and peek. A topic adds
// one 48-byte record per message whose data subscriptions share (holding
// the reference count), and each subscription one record per copy.
//
// # Store encoding
//
// One store entity per queue, topic and subscription: Name is the queue or
// topic name or the subscription's path, Spec is JSON (entitySpec: kind,
// properties, for a subscription its topic's entity id and name, created,
// updated). Each message is (EntityID, Seq) → Meta + Data, where Data is
// message.Marshal's encoding and Meta is, version 1:
//
//	+---------+--------+----------+-----------+---------+---------+
//	| version | bits   | delivery | enqueued  | ttl     | opt     |
//	| 1 byte  | 1 byte | uvarint  | varint ns | uvarint | uvarint |
//	+---------+--------+----------+-----------+---------+---------+
//
//	bits:     0-1 sub-queue (0 main, 1 $DeadLetterQueue, 2 $Transfer/$DeadLetterQueue)
//	          2-3 state     (0 active, 1 deferred, 2 scheduled)
//	          4   was scheduled
//	          5   shared: a subscription copy whose Data is its topic's
//	              message of the same seq (its own Data is empty)
//	delivery: persisted delivery count
//	enqueued: Unix ns; for a scheduled message its scheduled enqueue time
//	          (a scheduled message whose time has passed is active: the
//	          state is derived on recovery, nothing is written when it
//	          materialises)
//	ttl:      effective time to live in ns, 0 = never
//	opt:      bitset of optional trailing fields, in bit order: bit 0 the
//	          session id (uvarint length + bytes; main queue of a
//	          session-enabled entity); bit 1 the hop count of an
//	          auto-forwarded message (uvarint; see meta.go); bit 2 (no
//	          payload, never with bit 0) the session id is "", which is
//	          a session of its own. Older records never set bit 2; an
//	          older binary refuses a record with it as unreadable.
//
// A topic's messages are shared data (state active) and scheduled
// messages not yet fanned out (state scheduled).
//
// Store values per queue, topic and subscription: "accessed" (last use, 8
// bytes big-endian Unix ns, saved with the next commit once a minute old,
// and on Close); per queue and topic "dup/<MessageId key>"
// (duplicate-detection history: first-seen time); per topic "last-seq"
// (written when a subscription is deleted, so the numbers its copies had
// are never reused); per subscription "rule/<lower-case name>" (the rule,
// JSON, parameters with their types); per session-enabled queue or
// subscription "session/<id>" (session state: 8 bytes big-endian Unix ns
// of its last change + the state). A bookkeeping entity "$namespace"
// holds "next-entity-id" so entity ids are never reused.
//
// # Structure
//
// Every operation that changes state has the same three phases, so that
// no entity lock is held across a store commit:
//
//  1. check and plan under the entity's mutex: validate, decide, mark the
//     records it changes busy (or hold placeholders, invisible until
//     durable), register in inflight;
//  2. commit without locks (one store batch);
//  3. apply the outcome under the mutex again (or undo the plan on
//     failure), then answer.
//
// For messages already held (settlement, lock ends, expiry, timers,
// receive-and-delete) phase 1 builds transitions and commitAndUnlock runs
// phases 2 and 3 for all of them (queue.go). A send's phase 1 is shared
// by both kinds (sendplan.go: status, sizes, session ids, quota,
// duplicate detection, default TTL, sequence numbers); what differs is
// in one place per kind: a queue's placeholders and publication
// (send.go: planSendLocked, commitSend, publishSend), a topic's routing
// and fan-out (fanout.go, the same three names). Creating a queue or a
// topic is createEntity with the kind's constructor.
//
// Naming: a function named …Locked is called with the mutex it names
// held and returns with it held; …AndUnlock (commitAndUnlock,
// deliverAndUnlock) is called with it held and returns with it released.
// Every acquisition of entity.mu and topic.mu is lockAndPublish (or
// lockAt, which runs due timer work first): it takes the mutex and
// publishes the committed sends waiting on the lock-free publication.
//
// A receiving entity's state under entity.mu is in named parts:
// entityMeta (properties, lifetime, use), subQueues (the three
// sub-queues' indexes, sequence numbers, sizes), lockTable (peek-locks
// by token), entityTimers (its one timer heap), dedupState (a queue's
// duplicate-detection history) and forwardState (auto-forwarding's
// schedule); a session-enabled entity's sessions are a sessionSet.
// Outside the mutex: pub (publication, below), the deleted and
// forwarding flags senders read, and route (a subscription's compiled
// rules, read by fan-outs).
//
// # Concurrency
//
// Concurrent senders share the store's group commit (fsync). A send takes
// the mutex once in the common case: it reserves its sequence numbers
// and index slots under it, and after the commit pushes the batch on a
// lock-free stack (pubStack, publication.go) that the next holder of the
// mutex publishes, taking the mutex itself only when a receiver is
// waiting to be woken or the batch arms a timer. The stack gives its
// batches back oldest first, and a sender pushes and then looks for
// waiting receivers while a receiver counts itself waiting and then
// takes the stack, so no wakeup is lost (publication_test.go tests both
// on their own). Lock order:
//
//	session.stateMu → Broker.admin → Broker.mu → topic.fanout → entity.mu → topic.mu → Broker.timers
//
// A session's stateMu is held across the commit of a session-state write
// (SetSessionState, or a transaction's commit that sets states); it is
// taken with no other lock held, and one holder taking several (a
// transaction setting the state of several sessions) takes them in the
// order of the session ids. A session-enabled entity's table of session
// numbers has a lock of its own, taken under entity.mu or alone by phase
// 2. The message history's mutex (history.Log) comes after all of them:
// the broker records under entity.mu, and the log calls nobody.
//
// A transaction's commit (txn.go) takes, in this order and never the
// other way round: the stateMu of the sessions whose state it sets (held
// until the states are applied), then its receiving entity's entity.mu
// (released before anything else is taken), then the topic.mu of the
// topic whose scheduled messages it cancels (released), then its
// destinations' locks. Sending to several queues and topics, it holds
// several topics' fanout locks (shared) at once: it plans its
// destinations one after the other in the order of their entity keys
// (lower-cased names), so every such holder takes them in one order; no
// entity.mu or topic.mu is held across two destinations' planning.
//
// Commit pacing: a closed-loop committer (an AMQP sender link, a receiver
// link's settler) holds a Sender or Settler handle (pacing.go) whose
// calls pass its store.Follower in their store batch, so that the store
// may wait for its next commit before an fsync (package store's "Commit
// pacing" is the contract). Broker's own Send and CompleteBatch commit
// as plain committers.
//
// A topic send takes topic.mu once in phase 1 (checks, duplicate
// detection, sequence numbers), routes and commits without locks, and
// publishes lock-free: the shared data's records on the topic's pub
// stack, each subscription's copies on that subscription's (a sender
// publishes a stack itself once it is 64 batches deep, so a subscription
// nobody receives from does not pile them up). topic.fanout, a RWMutex,
// is held shared by every fan-out from before it reads the subscription
// set until its copies are published, and exclusively by the removal of a
// subscription or topic: a removal thus sees every copy routed to it.
// A subscription's operations reach its topic's mutex from under their
// own (releasing references), never the other way round.
//
// Receivers waiting on Ready are woken one per message that becomes
// available, not all at once (see Receiver).
//
// # Restart
//
// Open rebuilds everything from the store (Recover): per message it
// decodes Meta and appends one record to an index block, nothing more.
// With the filestore, 1,000,000 queued 1 KB messages reopen in about half
// a second using under 100 bytes of heap per message for the store's and
// the broker's indexes together (BenchmarkRestart1M). A queue whose
// AutoDeleteOnIdle ran out while the broker was down is deleted by the
// first Tick (idleness counts from the last use saved in the store).
// Topics come back with their scheduled messages and shared data,
// subscriptions with their copies and rules (compiled again; a stored rule
// that no longer compiles is logged and matches nothing), reference counts
// are counted again, and a topic's next sequence number is above every
// number its messages, its subscriptions' copies (the store's lastSeq)
// and its "last-seq" value reached.
//
// A topic is idle (AutoDeleteOnIdle, docs/wire/semantics.md) without sends, updates,
// scheduled messages and operations on its subscriptions (receives,
// peeks, settlements, rule changes, open receivers); a subscription
// without receives, peeks, updates and new rules: sends to its topic do
// not keep it alive. An entity with ForwardTo is never idle (auto-forwarding
// counts as an open receiver); a topic with such a subscription neither.
//
// # Auto-forwarding
//
// A queue or subscription with ForwardTo moves each message that becomes
// available in its main queue (sent, fanned out, materialised, abandoned,
// released, its lock expired) to the target queue or topic; with
// ForwardDeadLetteredMessagesTo, each message that becomes available in
// its dead-letter queue. Each move is ONE synced store batch: the removal
// from the source and the destination's own enqueue (its sequence number,
// enqueued time, TTL defaults, for a topic the fan-out), so a crash leaves
// the message in exactly one of the two. It runs in Tick (armed at once
// when a message becomes available) or in the lazy check of any operation
// on the source. A message forwarded MaxTransferHops (3) times already, or
// refused by its destination (deleted, Disabled or SendDisabled, over its
// quota or message size), goes to the source's transfer dead-letter queue
// with a DeadLetterReason naming the cause. The hop count travels in Meta
// (and rec.hops); a message forwarded out of a dead-letter queue carries
// x-opt-deadletter-source. Creating or updating an entity refuses a
// missing target, the entity itself, ForwardTo on a session-enabled entity
// and a ForwardTo loop (through topics' subscriptions too). On restart,
// what waited to be forwarded is forwarded by the first Tick. Details in
// forward.go.
package broker
