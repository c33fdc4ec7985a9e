// Package cluster runs one node of a Busbar cluster (docs/design/cluster.md,
// stage 2): its session, the placement of units on nodes, and the
// acquire-load and unload-release of the units it should own. It holds no
// SQL: the database is behind store.Membership and store.UnitLeases
// (implemented by pgstore), and the broker behind the small Units
// interface (LoadUnit, UnloadUnit).
//
// # Session and trust window
//
// A node registers a session and renews it every Heartbeat on its own
// goroutine. It trusts a successful renewal until sent + TTL - Margin on
// its injected (monotonic) clock, where sent is when the renewal was sent:
// the database's expiry, computed from a later instant of its own clock,
// comes after that as long as the clocks' rates differ by less than
// Margin/TTL. A renewal may wait for the database until the window ends
// (not just one heartbeat: one abandoned mid-way costs its connection).
// When the window ends without a renewal the node calls OnLapse (the server
// stops relaying), unloads every unit at once (concurrently: an unload
// waits for the unit's commits, which an unreachable database holds) and
// acquires none until a renewal succeeds again; it then
// takes its units again with a higher epoch and reloads them, never
// resuming from memory. A session found expired or killed is registered
// anew.
//
// # Placement
//
// Every node computes the same answer from the same rows: among the live,
// non-draining nodes, a unit belongs to the node with the highest
// rendezvous score hash(unit, node). Adding or removing a node moves only
// the units it wins or held. Disagreement for a moment is harmless: the
// epoch decides who writes.
//
// # The poller
//
// Every Poll the node reads the nodes and the unit rows (changed ones; all
// of them every FullEvery polls) and
//
//   - unloads a unit it serves whose row names another owner or epoch
//     (taken over; also told at once by the store's Lost channel);
//   - acquires (epoch + 1) and loads up to MaxLoads units it wins that are
//     free, reserved for it, or owned by a session that is no longer live,
//     and the units whose winner left them untaken for 2 polls when it
//     ranks second;
//   - adopts, at its epoch, a unit its broker created (owned by this
//     session, held by the store and served: the broker implements
//     Serving) instead of taking it again and reloading it;
//   - starts handing off up to MaxMoves units that another live node wins.
//
// # Hand-off
//
//	serving ──(another node wins)──► draining ──(Drain elapsed)──► unload ──► release(next) ──► gone
//
// While draining, a broker that implements Drainer (internal/broker does)
// admits no new work for the unit: sends and new receivers are refused
// retriably, receivers get no new deliveries; outstanding locks may still
// be settled, so a graceful move loses none that are settled within
// Drain. A broker that is also a DrainWatcher ends the drain early, at
// the next poll, once the unit holds no locks. The release waits for
// the unit's commits queued or in flight (the store's Release), so
// everything acknowledged is committed before the next owner loads.
// Stop hands off every unit the same way (the drain bounded by its
// context), marks the node draining first and ends its session last.
// Halt stops the loops without any of that, as a crash would.
//
// OwnerOf answers, from the last poll, which node owns a unit and the
// internal address it registered: the server's relay gateway asks it.
package cluster
