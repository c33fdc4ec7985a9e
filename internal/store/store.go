// Package store defines how the broker persists entities, messages and
// small per-entity values, and the errors every implementation shares.
//
// The broker owns all semantics; a store only keeps bytes durable and finds
// them again. Three implementations satisfy the interface and run one
// shared test suite: memstore (nothing persisted, for --memory and tests),
// filestore (a segmented append-only log with group commit) and pgstore
// (PostgreSQL, --store postgres://…). A database store may also fail a
// commit with ErrUnavailable (not applied), ErrOutcomeUnknown (the answer
// was lost) or ErrNotOwner (another process owns the entity now).
//
// Data model
//
//	entity   (ID uint64) -> Name string, Spec []byte (opaque, broker-encoded)
//	message  (EntityID, Seq uint64) -> Meta []byte (small, opaque) + Data []byte (opaque, may be large)
//	value    (EntityID, Key string) -> []byte (session state, auxiliary state)
//	lastSeq  EntityID -> highest Seq ever appended (survives removal of every message)
//
// Meta is what the broker needs to rebuild its in-memory index on recovery
// (state, delivery count, times, ids); Data is the encoded message and is
// read back only on delivery or peek, so a large backlog need not sit in RAM.
//
// A Batch is applied atomically: after a crash either all of its operations
// are visible on recovery or none are. Commit with sync=true returns only
// once the batch is durable (fsync'd); concurrent committers share one fsync
// (group commit). A Commit refused with ErrNoSpace applied nothing, now
// or after a restart, and the store goes on: a later Commit may succeed.
// After ErrFailed the store takes no writes until it is reopened, and a
// batch that failed with it may or may not be found then (what reached
// the disk before the failed fsync is unknown). Commit with sync=false
// returns once the batch is ordered
// in the log; it becomes durable with the next synced commit or flush.
//
// # Commit pacing
//
// A committer that runs a closed loop — one goroutine whose commits never
// overlap, as a busy sender link's — can say so by putting its Follower
// in Batch.Follower. This is the whole contract between such a committer
// and a store:
//
//   - Between commits the committer may Promise to answer the return of
//     its next synced commit: by committing again at once (work piled up
//     while it waited) or by calling Idle. It calls Idle when it stops.
//   - A store may use the promise: after an fsync releases followers that
//     promised, it may wait for their answers before starting the next
//     fsync, so that one fsync covers the next commits of all of them
//     instead of only the first to come back. The wait is bounded (the
//     store's own bound), and committers that did not promise are never
//     waited for. A store may end a wait early without giving up on the
//     followers (filestore does once the fsync would cover enough bytes);
//     it then waits for them before a later fsync instead.
//   - A store that gives up waiting for a follower says so (Gate.GiveUp);
//     the follower is then not Trusted until it next answers in time, so
//     the committer can promise freely while its answers keep coming and
//     only when it is sure once one did not. A late answer thus costs the
//     store its bound once, not once per commit.
//   - A promise never delays the committer's own commit, and changes
//     nothing about what is durable when Commit returns. A store that does
//     not gather (memstore) ignores Follower.
//
// filestore implements the wait (its package doc says how); the broker's
// Sender and Settler handles own the committer's side.
//
// Operation rules (identical in every implementation, so that replaying a
// log gives the same state as applying it live):
//
//   - Operations apply in order; a later op in a batch sees the earlier ones.
//   - OpPutEntity on an existing entity replaces Name and Spec only; its
//     messages, values and lastSeq are kept.
//   - An op naming an entity that does not exist (never created, or
//     deleted) is a no-op: OpAppend, OpPutValue, OpDeleteValue, OpSetMeta,
//     OpRewrite, OpRemove and OpDeleteEntity are silently ignored. This lets
//     a send racing an entity deletion vanish with the entity.
//   - OpSetMeta, OpRewrite and OpRemove of a message that does not exist are
//     no-ops. OpAppend of an existing (EntityID, Seq) replaces its Meta and
//     Data (the broker never does this on purpose).
//   - An empty Batch is valid; Commit(empty, true) is equivalent to Sync.
//   - A batch with an unknown OpKind is rejected whole with an error.
//   - nil and empty byte slices are not distinguished.
//   - Meta, Name and Key are meant to be small (bytes to a few hundred
//     bytes); implementations may keep them in memory for every live
//     message. Data is never required to be kept in memory.
package store

import (
	"errors"
	"fmt"
)

// Errors shared by all implementations.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("store: closed")
	// ErrNotFound is returned by ReadData for an unknown (entity, seq).
	ErrNotFound = errors.New("store: not found")
	// ErrCorrupt marks unrecoverable corruption; test with errors.Is. The
	// wrapping error names the file and offset.
	ErrCorrupt = errors.New("store: corrupt")
	// ErrNoSpace marks a commit refused for lack of disk space (a
	// *NoSpaceError); test with errors.Is. Nothing of the batch was
	// applied, and the store goes on: a later commit succeeds once there
	// is space again.
	ErrNoSpace = errors.New("store: no space left")
	// ErrFailed marks a store stopped by an I/O error it cannot recover
	// from while running (a failed fsync: what reached the disk is
	// unknown); every later Commit and Sync fails with it until the store
	// is reopened. Test with errors.Is.
	ErrFailed = errors.New("store: stopped after an I/O error, restart to recover")
	// ErrUnavailable marks a commit that was definitely not applied
	// because the store's database could not be reached or refused the
	// transaction; a later commit may succeed. Test with errors.Is.
	ErrUnavailable = errors.New("store: database unavailable, nothing was changed")
	// ErrOutcomeUnknown marks a commit that was sent but whose answer was
	// lost (the connection broke after the commit went out): it may or may
	// not have been applied. It is reported as a failure. Test with
	// errors.Is.
	ErrOutcomeUnknown = errors.New("store: commit outcome unknown, the database did not answer")
	// ErrNotOwner marks a commit refused because this store no longer owns
	// a unit it writes (another process raised its epoch): nothing was
	// changed, and nothing of that unit will be. Test with errors.Is.
	ErrNotOwner = errors.New("store: not the owner of the entity any more")
	// ErrNameTaken marks a commit that creates a queue or topic refused
	// because the shared database already holds one of that name
	// (whatever its case), created meanwhile by another process: nothing
	// was changed. Test with errors.Is.
	ErrNameTaken = errors.New("store: another entity has that name")
)

// NoSpaceError is a refusal for lack of disk space: the disk is full, or
// its free space is below the store's low-disk watermark (MinFree > 0),
// where new data is refused so that settlements, which free space, still
// succeed. It matches ErrNoSpace.
type NoSpaceError struct {
	Free, Total uint64 // bytes free and in all on the file system; 0 if unknown
	MinFree     uint64 // the watermark, for a refusal below it; 0 for a full disk
	Err         error  // the write error, for a full disk
}

func (e *NoSpaceError) Error() string {
	switch {
	case e.MinFree > 0:
		return fmt.Sprintf("the broker's disk is nearly full: %d bytes free of %d, below the %d bytes kept free for settlements; new messages and entities are refused", e.Free, e.Total, e.MinFree)
	case e.Total > 0:
		return fmt.Sprintf("the broker's disk is full: %d bytes free of %d", e.Free, e.Total)
	}
	return "the broker's disk is full"
}

// Is makes a NoSpaceError match ErrNoSpace.
func (e *NoSpaceError) Is(target error) bool { return target == ErrNoSpace }

// Unwrap returns the write error.
func (e *NoSpaceError) Unwrap() error { return e.Err }

// OpKind says what an Op does.
type OpKind uint8

// The operations of a Batch.
const (
	// OpPutEntity creates entity ID or replaces its Name and Spec.
	OpPutEntity OpKind = iota + 1
	// OpDeleteEntity removes entity ID with all its messages and values.
	// Its lastSeq is forgotten with it (IDs are never reused).
	OpDeleteEntity
	// OpAppend adds message (EntityID, Seq) with Meta and Data. It raises
	// the entity's lastSeq to Seq if higher.
	OpAppend
	// OpSetMeta replaces the Meta of an existing message; Data is kept.
	OpSetMeta
	// OpRewrite replaces both Meta and Data of an existing message.
	OpRewrite
	// OpRemove deletes message (EntityID, Seq).
	OpRemove
	// OpPutValue sets value (EntityID, Key) to Value.
	OpPutValue
	// OpDeleteValue removes value (EntityID, Key).
	OpDeleteValue
	// OpTransfer and OpLand are the outbox of a cluster (transfer.go):
	// only a store.Outbox takes them; the file store and memstore never
	// see them and reject them as unknown.
	OpTransfer
	OpLand
)

// Op is one operation in a Batch. Which fields matter depends on Kind.
type Op struct {
	Kind     OpKind
	EntityID uint64
	Seq      uint64 // OpAppend, OpSetMeta, OpRewrite, OpRemove
	// Unit (OpPutEntity) is the entity id of the queue or topic the
	// entity belongs to (a subscription's topic); 0 means the entity is
	// its own unit. Stores that do not group entities ignore it.
	Unit uint64
	Name string // OpPutEntity
	Key  string // OpPutValue, OpDeleteValue
	Meta []byte // OpAppend, OpSetMeta, OpRewrite
	Data []byte // OpPutEntity (spec), OpAppend, OpRewrite, OpPutValue (value), OpTransfer
	// More, if set (OpAppend, OpRewrite, OpTransfer), is the rest of the
	// message's Data, held in memory: the Data stored is Data followed
	// by More, exactly as if the caller had joined them (nothing records
	// that it came in two pieces). It lets the broker hand a large body
	// where it lies, behind its encoded head, instead of copying it
	// after the head: a store that copies Data into a buffer of its own
	// copies the head and may write More from where it lies. Never
	// together with Tail, and never with another kind: Commit refuses
	// such an op (CheckRest). Like Data, the store keeps no reference to
	// it after Commit returns.
	More []byte
	// Tail, if set (OpAppend, OpRewrite, OpTransfer), is the rest of the
	// message's Data, not held in memory: Data is followed by Tail's
	// Size() bytes. Commit reads it (in pieces: a store that keeps large
	// Data in files copies it there; one that keeps Data in memory reads
	// it whole); the caller closes it after Commit returns.
	Tail DataReader
	// Transfer (OpTransfer, OpLand) names the outbox row; see transfer.go.
	Transfer *Transfer
}

// HasRest says whether op's Data continues in More or in Tail.
func (op *Op) HasRest() bool { return len(op.More) > 0 || op.Tail != nil }

// DataLen is the length of the Data op stores: Data, More and Tail.
func (op *Op) DataLen() int64 {
	n := int64(len(op.Data)) + int64(len(op.More))
	if op.Tail != nil {
		n += op.Tail.Size()
	}
	return n
}

// CheckRest refuses an op whose Data continues where it may not: More
// and Tail both set, or either on a kind other than OpAppend, OpRewrite
// and OpTransfer.
func (op *Op) CheckRest() error {
	if !op.HasRest() {
		return nil
	}
	if len(op.More) > 0 && op.Tail != nil {
		return errors.New("store: an op's Data continues both in More and in a Tail; only one may be set")
	}
	switch op.Kind {
	case OpAppend, OpRewrite, OpTransfer:
		return nil
	}
	return fmt.Errorf("store: an op of kind %d has More or a Tail; only appends, rewrites and transfers may", op.Kind)
}

// Joined returns op's Data followed by More in one slice: Data itself
// when More is empty, else a new slice (for a store that keeps Data
// whole). It ignores Tail (see ReadTail).
func (op *Op) Joined() []byte {
	if len(op.More) == 0 {
		return op.Data
	}
	out := make([]byte, len(op.Data)+len(op.More))
	copy(out, op.Data)
	copy(out[len(op.Data):], op.More)
	return out
}

// ReadTail reads op's whole Data, Data followed by More or by Tail's
// bytes, into one slice (for a store that keeps Data in memory): Data
// itself when it does not continue, else a new slice.
func (op *Op) ReadTail() ([]byte, error) {
	if op.Tail == nil {
		return op.Joined(), nil
	}
	n := op.Tail.Size()
	out := make([]byte, len(op.Data), int64(len(op.Data))+n)
	copy(out, op.Data)
	out = out[:int64(len(op.Data))+n]
	if k, err := op.Tail.ReadAt(out[len(op.Data):], 0); int64(k) < n {
		if err == nil {
			err = fmt.Errorf("store: tail shorter than its %d bytes", n)
		}
		return nil, err
	}
	return out, nil
}

// Batch is an ordered list of operations applied atomically.
// The store does not retain the slices after Commit returns.
type Batch struct {
	Ops []Op
	// Follower, if set, is the closed-loop committer's pacing (see
	// "Commit pacing" in the package doc).
	Follower *Follower
}

// Add appends op to the batch.
func (b *Batch) Add(op Op) { b.Ops = append(b.Ops, op) }

// Len is the number of operations.
func (b *Batch) Len() int { return len(b.Ops) }

// Reset empties the batch for reuse.
func (b *Batch) Reset() { b.Ops, b.Follower = b.Ops[:0], nil }

// Entity is a recovered entity.
type Entity struct {
	ID      uint64
	Name    string
	Spec    []byte
	LastSeq uint64
}

// Message is a recovered message: its Meta only. Read its Data with ReadData.
type Message struct {
	EntityID uint64
	Seq      uint64
	Meta     []byte
	Size     int // length of Data in bytes
}

// Value is a recovered value.
type Value struct {
	EntityID uint64
	Key      string
	Value    []byte
}

// Visitor receives the recovered state. Recover calls Entity for every
// entity first (in ID order), then Message for every message (in
// (EntityID, Seq) order), then Value for every value. The slices passed to
// the callbacks are valid only during the call. A non-nil return aborts
// recovery with that error. The callbacks may call the Store (both
// implementations visit a snapshot), and a nil callback is skipped.
type Visitor struct {
	Entity  func(Entity) error
	Message func(Message) error
	Value   func(Value) error
}

// DataRef names the Data of one message, for ReadDataBatch.
type DataRef struct{ EntityID, Seq uint64 }

// Store is the persistence interface the broker uses. All methods are safe
// for concurrent use.
type Store interface {
	// Commit applies b atomically. With sync it returns once b is durable.
	Commit(b *Batch, sync bool) error
	// Recover replays the live state to v. It is called once, before the
	// first Commit.
	Recover(v Visitor) error
	// ReadData returns the Data of message (entityID, seq). The returned
	// slice belongs to the caller.
	ReadData(entityID, seq uint64) ([]byte, error)
	// ReadDataBatch reads the Data of several messages: datas[i] and
	// errs[i] are what ReadData would return for refs[i]. The slices
	// belong to the caller; they may share one array but never overlap.
	// An implementation may read neighbouring data with one call.
	ReadDataBatch(refs []DataRef) (datas [][]byte, errs []error)
	// Sync makes every committed batch durable.
	Sync() error
	// Close syncs and releases all resources. Further calls return ErrClosed.
	Close() error
}
