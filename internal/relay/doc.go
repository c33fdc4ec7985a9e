// Package relay is the node-to-node side of a Busbar cluster
// (docs/design/cluster.md §8): how one node proves to another that it
// belongs to the cluster, and the internal listener that admits only
// such nodes.
//
// # The node proof
//
// Nodes share a secret (--cluster-secret) and never send it. A gateway
// node opening the internal connection to an owner logs in with SASL
// PLAIN carrying a one-time proof instead of a password:
//
//	authcid = node-id                       (1..128 bytes)
//	passwd  = unix-ms "." nonce "." mac
//	          unix-ms  decimal milliseconds since the epoch, the gateway's clock
//	          nonce    32 lower-case hex digits (16 random bytes)
//	          mac      64 lower-case hex digits:
//	                   HMAC-SHA256(secret, "busbar-node|" node-id "|" owner-id "|"
//	                                       session "|" unix-ms "|" nonce)
//
// where owner-id is the node being connected to and session the
// gateway's live session (bb_node.session), which the owner looks up: a
// proof made for another owner, by a node without a live session, or
// with a time more than ProofWindow off the owner's clock is refused, and
// so is a nonce seen within the window (the set of seen nonces is
// bounded by MaxNonces; when it is full of unexpired nonces new proofs
// are refused, never admitted unchecked).
//
// The owner proves itself back on the control link "$cluster": its
// first message is a data section holding
//
//	HMAC-SHA256(secret, "busbar-owner|" owner-id "|" nonce)   (32 bytes)
//
// and Dial sends nothing else on the connection until it arrived and
// matched, so both sides showed they hold the secret.
//
// # The internal listener
//
// Listener's Handler serves an amqp.Server configured by ServerSASL:
// PLAIN only, SASL required, every login checked by the Verifier. It
// accepts nothing a client-facing listener does (no ANONYMOUS, no CBS, no
// ordinary PLAIN login), and a client-facing listener never accepts a
// node proof. On an admitted connection it serves the $cluster control
// link; relayed entity links are not served yet (they are refused with
// amqp:not-implemented).
package relay
