// Package pgstore is the store.Store on PostgreSQL (stage 1 of
// docs/design/cluster.md: one Busbar process per database).
//
// # Tables
//
// The schema is embedded (migrations/NNNN_name.sql), applied at Open one
// migration per transaction and recorded in bb_schema_migration with a
// checksum; a binary refuses a schema newer than it knows or a migration
// whose checksum differs. Every per-unit key starts with unit_id: a unit
// is a queue, or a topic with its subscriptions (store.Op.Unit).
//
//	bb_node    (node_id) -> session, expires_at, …   this process's session (its lease)
//	bb_unit    (unit_id) -> name_key, owner_node, owner_session, epoch   the fence row of a queue or topic
//	bb_entity  (unit_id, entity_id) -> name, spec, last_seq
//	bb_msg     (unit_id, entity_id, seq) -> meta, size, data | body_id
//	bb_body    (unit_id, body_id, part) -> data   Data above InlineLimit, in ChunkSize parts
//	bb_value   (unit_id, entity_id, key) -> value
//	bb_catalog (1) -> namespace_id, version, …   version: +1 per unit created or deleted
//	bb_entity_id_seq                          entity ids of a cluster (NewEntityID)
//	bb_commit_mark (node_id, slot) -> mark   the last transaction of each committer
//	bb_transfer (target_unit, source_unit, id) -> target_entity, kind, meta, size, data   the outbox
//	bb_transfer_body (target_unit, source_unit, id, part) -> data   a transfer's Data above InlineLimit
//
// A body id is (writer's epoch << 32) | counter, so bodies written under
// different epochs never collide. Updating a message's Meta touches only
// its row; its chunks are written once and deleted once.
//
// # Commits
//
// Commit puts its batch in a queue; Options.Conns committers each take
// the oldest waiting batches whose units have no transaction in flight
// (so a unit's batches commit in order), coalesce their ops per key in
// order (the store's operation rules, no-op rules included, are applied
// in Go against the live entities the store keeps), and send one
// transaction as one pipelined round trip: its commit mark, the fence,
// then one multi-row statement (unnest arrays) per kind of change. Commit
// returns after that transaction committed; a batch committed with
// sync=false rides in a transaction with synchronous_commit off, made
// durable by the next synced one (or Sync). After a synced transaction the
// committer holds its units for up to FollowerWait while the closed-loop
// committers it released (store.Follower) commit again, so that their
// batches share the next transaction.
//
// # Ownership and fencing
//
// Open registers this process's session in bb_node (refusing while another
// live process holds it, after waiting up to StartWait for a crashed one's
// to expire), then takes every unit, raising its epoch. A goroutine renews
// the session every Heartbeat. Every write transaction starts with the
// fence: it locks its units' rows FOR SHARE and divides by zero unless each
// epoch is the one this store holds, so a process whose units were taken
// over cannot write, whatever it believes (ErrNotOwner).
//
// # Cluster mode
//
// With Options.Cluster (stage 2) Open neither registers nor takes any unit:
// the store is also a store.Membership (Register, Renew, Nodes, Units,
// Kill: membership.go) and a store.UnitStore (Acquire, Release,
// RecoverUnit, Lost: units.go), driven by internal/cluster. Acquire is one
// transaction that locks both node rows (this node's and the owner's) in
// node-id order and then the unit row, kills an expired owner session and
// raises the epoch; it first fails the unit's queued commits and waits for
// the one in flight. Release waits for the unit's commits, forgets the
// unit (later commits are ErrNotOwner) and frees its row, reserved for a
// chosen next owner for a while. RecoverUnit replays one unit in one
// snapshot. The catalog (catalog.go, store.Catalog) maps a queue's or
// topic's name (name_key: lower-cased, unique) to its unit and owner for
// any node, cached until bb_catalog.version moves, and hands out entity
// ids from one sequence, so nodes creating entities never collide. A commit fenced off reports its units on Lost. A commit whose
// outcome cannot be learned makes the store give up every unit it owns
// (reported on Lost) instead of refusing commits: the node takes them
// again with a higher epoch and reloads them (§6.3).
//
// # The outbox
//
// In cluster mode the store is also a store.Outbox (outbox.go): a message
// forwarded to a unit another node owns leaves its source in the source
// unit's fenced transaction, which inserts the transfer row (OpTransfer:
// id = (source epoch << 32) | the unit's counter, the counter body ids
// use, so one source's ids grow in commit order); the target's owner reads
// its transfers in (source unit, id) order and lands them in its own
// fenced transaction, whose OpLand deletes the claimed rows and divides
// by zero unless every one of them was still there (a transfer is never
// landed twice). Transfers whose target unit was deleted are orphans,
// read back by their source's owner.
//
// # Failures
//
// A transaction that cannot start or that the server refused is
// store.ErrUnavailable: nothing was applied. When the connection breaks
// after the transaction went out, the store reads the committer's row of
// bb_commit_mark on a new connection, locking it so that an old
// transaction still running ends first, for up to ResolveWait (the
// database may be restarting): the transaction's own mark there is
// success, an older one ErrUnavailable. Not learned in time (the database
// stays down) is store.ErrOutcomeUnknown, and the store refuses commits
// (ErrUnavailable) until a goroutine learns the outcome: if the
// transaction did not commit, the store goes on by itself; if it did, the
// broker's memory lags the database and the store takes no writes
// (store.ErrFailed) until Busbar restarts and reloads.
package pgstore
