package broker

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// MessageState is a message's state, numbered as the x-opt-message-state
// annotation numbers it.
type MessageState uint8

// Message states.
const (
	StateActive    MessageState = 0
	StateDeferred  MessageState = 1
	StateScheduled MessageState = 2
)

func (s MessageState) String() string {
	switch s {
	case StateActive:
		return "Active"
	case StateDeferred:
		return "Deferred"
	case StateScheduled:
		return "Scheduled"
	}
	return fmt.Sprintf("MessageState(%d)", s)
}

// rec flags.
const (
	// flagBusy: a store commit that changes or removes the message is in
	// flight; nobody else may touch it until the commit's outcome is applied.
	flagBusy uint8 = 1 << iota
	// flagWasScheduled: the message was sent scheduled (its enq is the
	// scheduled enqueue time).
	flagWasScheduled
	// flagDead: a tombstone inside an index block.
	flagDead
	// flagPending: a message being sent, not yet durable. It holds its
	// place in the index (inserted in sequence order under the lock, so
	// concurrent sends append) but is invisible to everything until its
	// commit succeeds.
	flagPending
	// flagShared: a subscription's copy whose data is its topic's,
	// stored once for every subscription that received it unchanged (see
	// topic); the copy's own store message holds Meta only.
	flagShared
)

// rec is the in-memory index entry of one message: 48 bytes, no pointers,
// no body. Everything else is read from the store on delivery or peek.
type rec struct {
	seq   int64 // sequence number
	enq   int64 // enqueued time, Unix ns (scheduled: the scheduled enqueue time)
	ttl   int64 // effective time to live in ns; 0 = never expires
	until int64 // locked until, Unix ns; 0 = not locked
	size  int32 // bytes of Data
	dc    uint32
	state MessageState
	flags uint8
	// hops is how many times the message was auto-forwarded to get here
	// (see forward.go); in what would otherwise be padding, like sess.
	hops uint8
	// sess is the message's session in a session-enabled entity's main
	// queue (an entity-local number, see sessionSet); 0 = none. It lives
	// in what would otherwise be padding: rec stays 48 bytes.
	sess uint32
}

func (r *rec) locked() bool { return r.until != 0 }

// busy reports whether r may not be touched: a commit changing it is in
// flight, or it is not yet sent.
func (r *rec) busy() bool { return r.flags&(flagBusy|flagPending) != 0 }

// available reports whether a normal receive may take r.
func (r *rec) available() bool {
	return r.state == StateActive && r.until == 0 && r.flags&(flagBusy|flagPending|flagDead) == 0
}

// expiresAt returns the expiry instant in Unix ns, or 0 for never.
func (r *rec) expiresAt() int64 {
	if r.ttl == 0 {
		return 0
	}
	e := r.enq + r.ttl
	if e < r.enq { // overflow: beyond any representable time
		return 0
	}
	return e
}

func (r *rec) expired(now int64) bool {
	e := r.expiresAt()
	return e != 0 && e <= now
}

// Meta encoding (the store's per-message Meta), version 1:
//
//	+---------+--------+----------+-----------+---------+---------+--------------+
//	| version | bits   | delivery | enqueued  | ttl     | opt     | opt fields   |
//	| 1 byte  | 1 byte | uvarint  | varint ns | uvarint | uvarint | in bit order |
//	+---------+--------+----------+-----------+---------+---------+--------------+
//
//	bits: 0-1 sub-queue (0 main, 1 $DeadLetterQueue, 2 $Transfer/$DeadLetterQueue)
//	      2-3 state     (0 active, 1 deferred, 2 scheduled)
//	      4   was scheduled
//	      5   shared data: a subscription's copy whose Data is the topic's
//	          message of the same sequence number (its own Data is empty)
//	delivery: the persisted delivery count (deliveries whose lock ended by
//	          abandon or expiry); a receiver sees it + 1.
//	enqueued: Unix ns; for a scheduled message its scheduled enqueue time.
//	ttl:      effective time to live in ns, 0 = never expires.
//	opt:      bitset of optional trailing fields, which follow in bit
//	          order; a decoder skips none it does not know (unknown bits
//	          are corruption):
//	            bit 0  session id: uvarint length + UTF-8 bytes (the main
//	                   queue of a session-enabled entity only)
//	            bit 1  hop count: uvarint 1…255, the times the message was
//	                   auto-forwarded (absent: 0). The dead-letter source
//	                   of a message forwarded out of a dead-letter queue is
//	                   not in Meta: it is the x-opt-deadletter-source
//	                   annotation in the Data (see forward.go).
//
// Locks are not in Meta: they are volatile by design.
const metaVersion = 1

// metaOpt are Meta's optional trailing fields (the opt bitset).
type metaOpt struct {
	sessionID string // bit 0 when not empty
	// session: the message has a session id, possibly the empty one
	// (bit 2 when sessionID is empty; "" is a session id of its own).
	session bool
}

// Bits of Meta's opt field.
const (
	metaOptSessionID    = 1 << 0
	metaOptHops         = 1 << 1 // from rec.hops, not metaOpt
	metaOptEmptySession = 1 << 2 // the session id is "" (no payload)
	metaOptKnown        = metaOptSessionID | metaOptHops | metaOptEmptySession
)

func appendMeta(b []byte, sub SubQueue, r *rec) []byte {
	return appendMetaOpt(b, sub, r, metaOpt{})
}

// appendMetaOpt is appendMeta with optional fields.
func appendMetaOpt(b []byte, sub SubQueue, r *rec, o metaOpt) []byte {
	bits := byte(sub) | byte(r.state)<<2
	if r.flags&flagWasScheduled != 0 {
		bits |= 1 << 4
	}
	if r.flags&flagShared != 0 {
		bits |= 1 << 5
	}
	b = append(b, metaVersion, bits)
	b = binary.AppendUvarint(b, uint64(r.dc))
	b = binary.AppendVarint(b, r.enq)
	b = binary.AppendUvarint(b, uint64(r.ttl))
	var opt uint64
	if o.sessionID != "" {
		opt |= metaOptSessionID
	}
	if r.hops != 0 {
		opt |= metaOptHops
	}
	if o.sessionID == "" && o.session {
		opt |= metaOptEmptySession
	}
	b = binary.AppendUvarint(b, opt)
	if o.sessionID != "" {
		b = binary.AppendUvarint(b, uint64(len(o.sessionID)))
		b = append(b, o.sessionID...)
	}
	if r.hops != 0 {
		b = binary.AppendUvarint(b, uint64(r.hops))
	}
	return b
}

func decodeMeta(b []byte, r *rec) (SubQueue, error) {
	return decodeMetaOpt(b, r, nil)
}

// decodeMetaOpt is decodeMeta that also returns the optional fields in o
// (when not nil).
func decodeMetaOpt(b []byte, r *rec, o *metaOpt) (SubQueue, error) {
	if len(b) < 2 || b[0] != metaVersion {
		return 0, fmt.Errorf("bad meta header %x", b[:min(len(b), 2)])
	}
	bits := b[1]
	sub := SubQueue(bits & 3)
	state := MessageState(bits >> 2 & 3)
	if sub >= numSubQueues || state > StateScheduled || bits>>6 != 0 {
		return 0, fmt.Errorf("bad meta bits %#x", bits)
	}
	b = b[2:]
	dc, n := binary.Uvarint(b)
	if n <= 0 || dc > 1<<32-1 {
		return 0, fmt.Errorf("bad meta delivery count")
	}
	b = b[n:]
	enq, n := binary.Varint(b)
	if n <= 0 {
		return 0, fmt.Errorf("bad meta enqueued time")
	}
	b = b[n:]
	ttl, n := binary.Uvarint(b)
	if n <= 0 || ttl > 1<<63-1 {
		return 0, fmt.Errorf("bad meta ttl")
	}
	b = b[n:]
	opt, n := binary.Uvarint(b)
	if n <= 0 || opt&^metaOptKnown != 0 {
		return 0, fmt.Errorf("bad meta optional fields")
	}
	b = b[n:]
	var sid string
	if opt&metaOptSessionID != 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || l == 0 || l > uint64(len(b)-n) {
			return 0, fmt.Errorf("bad meta session id")
		}
		sid = string(b[n : n+int(l)])
		b = b[n+int(l):]
	}
	var hops uint64
	if opt&metaOptHops != 0 {
		hops, n = binary.Uvarint(b)
		if n <= 0 || hops == 0 || hops > 255 {
			return 0, fmt.Errorf("bad meta hop count")
		}
		b = b[n:]
	}
	if len(b) != 0 {
		return 0, fmt.Errorf("bad meta optional fields")
	}
	if opt&metaOptSessionID != 0 && opt&metaOptEmptySession != 0 {
		return 0, fmt.Errorf("bad meta session id")
	}
	if o != nil {
		o.sessionID = sid
		o.session = opt&(metaOptSessionID|metaOptEmptySession) != 0
	}
	r.dc = uint32(dc)
	r.enq = enq
	r.ttl = int64(ttl)
	r.state = state
	r.until = 0
	r.flags = 0
	r.hops = uint8(hops)
	if bits&(1<<4) != 0 {
		r.flags |= flagWasScheduled
	}
	if bits&(1<<5) != 0 {
		r.flags |= flagShared
	}
	return sub, nil
}

// Entity spec: the store's per-entity Spec bytes, JSON.
//
//	{"v":1,"kind":"queue","properties":{…QueueProperties…},
//	 "created":"…","updated":"…"}
//	{"v":1,"kind":"topic","topic":{…TopicProperties…},"created":…}
//	{"v":1,"kind":"subscription","subscription":{…SubscriptionProperties…},
//	 "topicId":7,"name":"sub","created":…}
//
// A subscription's store entity is named by its path
// ("topic/Subscriptions/sub"); its topic's entity id is always lower
// (created first), so recovery meets the topic first.
//
// Durations are integers in nanoseconds. The broker's own bookkeeping
// entity ("$namespace", never a valid queue name) has kind "namespace" and
// holds the value "next-entity-id" so entity ids are never reused.
type entitySpec struct {
	V            int                     `json:"v"`
	Kind         string                  `json:"kind"`
	Properties   *QueueProperties        `json:"properties,omitempty"`
	Topic        *TopicProperties        `json:"topic,omitempty"`
	Subscription *SubscriptionProperties `json:"subscription,omitempty"`
	// TopicID and Name: a subscription's topic entity and its name.
	TopicID uint64    `json:"topicId,omitempty"`
	Name    string    `json:"name,omitempty"`
	Created time.Time `json:"created,omitzero"`
	Updated time.Time `json:"updated,omitzero"`
}

const (
	specKindQueue        = "queue"
	specKindTopic        = "topic"
	specKindSubscription = "subscription"
	specKindNamespace    = "namespace"
	namespaceEntity      = "$namespace"
)

// Store value keys.
const (
	valueNextEntityID = "next-entity-id" // on the namespace entity, 8 bytes BE
	valueAccessed     = "accessed"       // on a queue, 8 bytes BE Unix ns
	valueDedupPrefix  = "dup/"           // "dup/<id key>" → 8 bytes BE Unix ns first seen
)

func encodeSpec(s entitySpec) []byte {
	s.V = 1
	b, err := json.Marshal(s)
	if err != nil {
		panic("broker: encoding entity spec: " + err.Error()) // plain data; cannot fail
	}
	return b
}

func decodeSpec(b []byte) (entitySpec, error) {
	var s entitySpec
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	if s.V != 1 {
		return s, fmt.Errorf("unknown spec version %d", s.V)
	}
	return s, nil
}

// AuthorizationRulesOf returns the shared access rules of a queue's or a
// topic's stored spec (store.OpPutEntity's data): what a cluster node
// that does not serve the entity reads from the shared store to check a
// token signed with one of them. Any other spec has none.
func AuthorizationRulesOf(spec []byte) ([]AuthorizationRule, error) {
	s, err := decodeSpec(spec)
	if err != nil {
		return nil, err
	}
	switch {
	case s.Kind == specKindQueue && s.Properties != nil:
		return s.Properties.AuthorizationRules, nil
	case s.Kind == specKindTopic && s.Topic != nil:
		return s.Topic.AuthorizationRules, nil
	}
	return nil, nil
}

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func readBE64(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}
