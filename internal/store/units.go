package store

import (
	"context"
	"errors"
	"time"
)

// Cluster stage 2 (docs/design/cluster.md §5, §7, §10): the store of a
// cluster keeps, beside the data, which nodes are alive (Membership) and
// which node owns each unit (UnitLeases). A unit is a queue, or a topic
// with its subscriptions; its id is the queue's or topic's entity id.
//
// Liveness is per node: a node's *session* is one row whose expiry the
// database computes with its own clock; the node renews it every
// heartbeat. Ownership is per unit: the unit row names its owner's node
// and session and carries an epoch that only grows. A unit may be taken
// when it is free, handed to the taker, or its owner's session is no
// longer live; taking raises the epoch, and every write of the old owner
// after that is refused by the fence (ErrNotOwner).

// Errors of membership and leases.
var (
	// ErrNodeLive refuses a registration while another live process holds
	// the same node id.
	ErrNodeLive = errors.New("store: another live process holds this node id")
	// ErrSessionLost answers a renewal of a session that expired or was
	// killed by a takeover: the node must register again, and may not
	// trust any unit it held.
	ErrSessionLost = errors.New("store: this node's session expired or was taken over")
	// ErrNotEligible refuses an acquire of a unit that another node's
	// live session owns, or that is handed off to another node, or that
	// does not exist.
	ErrNotEligible = errors.New("store: the unit is owned by a live node")
)

// NodeRegistration is what a node says about itself when it registers.
type NodeRegistration struct {
	ID      string        // --node-id
	Addr    string        // --cluster-advertise host:port
	TTL     time.Duration // how long the session lives without a renewal
	Version string        // the binary's version
}

// Node is one row of the membership.
type Node struct {
	ID       string
	Session  int64
	Addr     string
	Live     bool // its session has not expired by the database's clock
	Draining bool // it is leaving: it takes no units
}

// UnitState is the state column of a unit row.
type UnitState string

// The states of a unit row.
const (
	UnitFree      UnitState = "free"
	UnitOwned     UnitState = "owned"
	UnitReleasing UnitState = "releasing"
)

// Unit is one row of the ownership table.
type Unit struct {
	ID           uint64
	Owner        string // "" when free
	OwnerSession int64
	Epoch        uint64
	State        UnitState
	HandoffTo    string // the chosen next owner of a released unit, if any
	Reserved     bool   // HandoffTo still has the unit to itself
}

// Membership is the node-session half of a cluster store.
type Membership interface {
	// Register starts a new session for node r.ID and returns it. While
	// another live session holds the id it fails with ErrNodeLive.
	Register(ctx context.Context, r NodeRegistration) (session int64, err error)
	// Renew extends the current session by its TTL, by the database's
	// clock. ErrSessionLost: the session expired or was killed.
	Renew(ctx context.Context) error
	// Nodes lists every registered node.
	Nodes(ctx context.Context) ([]Node, error)
	// Units lists the unit rows changed since a watermark (the zero
	// watermark: every row) and returns the watermark to pass next time.
	// Rows that changed while the call ran may come again; deleted rows
	// never come: a full listing tells them.
	Units(ctx context.Context, since time.Time) (units []Unit, next time.Time, err error)
	// Kill ends node's session if it is session and has expired, so a
	// renewal that started before its expiry cannot revive it.
	Kill(ctx context.Context, node string, session int64) error
	// SetDraining says this node is leaving (it takes no units).
	SetDraining(ctx context.Context, draining bool) error
	// Leave ends this node's session now, for a clean exit.
	Leave(ctx context.Context) error
}

// UnitLeases is the ownership half of a cluster store.
type UnitLeases interface {
	// Acquire takes unit for this node's session, raising its epoch, and
	// returns the new epoch; the store then fences every write of the
	// unit with it. ErrNotEligible: another live node owns it, or it is
	// reserved for another node, or it does not exist.
	Acquire(ctx context.Context, unit uint64) (epoch uint64, err error)
	// Release waits for every commit of unit queued or in flight, stops
	// writing it, and frees its row, naming next (may be "") as the
	// chosen next owner for a while. The epoch is left to the next owner
	// to raise.
	Release(ctx context.Context, unit uint64, next string) error
	// Lost delivers units this store lost on its own: a commit was fenced
	// off (another node raised the epoch). It is a hint: a receiver that
	// falls behind misses some, and the poller's reconciliation finds
	// them.
	Lost() <-chan uint64
	// Holds reports whether this store writes unit now: acquired, and
	// neither fenced off nor released since. A Lost hint for a unit the
	// store holds again is stale (the unit was taken back and reloaded
	// after the hint was sent).
	Holds(unit uint64) bool
}

// UnitStore is a Store whose units are taken and released one by one
// (pgstore in cluster mode; the file store does not implement it). It
// starts with no units: RecoverUnit replays one unit after Acquire.
type UnitStore interface {
	Store
	UnitLeases
	// RecoverUnit replays the live state of one unit to v, as Recover
	// does for the whole store: its entities in id order, then their
	// messages in (entity, seq) order, then their values.
	RecoverUnit(ctx context.Context, unit uint64, v Visitor) error
}

// Catalog is the cluster-wide side of a store shared by several nodes
// (pgstore in cluster mode): entity ids come from one allocator, so two
// nodes creating entities at once never collide, and every queue's and
// topic's name is known to every node, loaded here or not.
type Catalog interface {
	// NewEntityID allocates an entity id no other node is given.
	NewEntityID(ctx context.Context) (uint64, error)
	// UnitNamed returns the unit of the queue or topic named name (case
	// folded), whichever node serves it; ok false when there is none.
	UnitNamed(ctx context.Context, name string) (unit uint64, ok bool, err error)
	// UnitCount returns how many queues and topics the cluster has, on
	// every node: what the tier's entity quota counts.
	UnitCount(ctx context.Context) (int, error)
}
