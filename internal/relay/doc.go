// Package relay is the node-to-node side of a Busbar cluster
// (docs/design/cluster.md §8): how one node proves to another that it
// belongs to the cluster, the internal listener that admits only such
// nodes, and the gateway that relays a client's links and management
// requests for an entity another node owns to that owner, and forwards
// admin and REST data-plane requests to it over HTTP.
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
// link, and every other link through ListenerConfig.Owner
// (servicebus.Handler.ConnectRelayed), which trusts the client rights a
// relayed link carries in its com.busbar:relay attach property.
//
// # The gateway
//
// Gateway implements servicebus.Router. The node a client reached keeps
// the client's $cbs tokens and checks the attach's right; then
//
//		client link ──► gateway (servicebus conn) ──► internal go-amqp link ──► owner (servicebus conn, relayed)
//
//	  - a sender link's transfers go to the owner in order, pipelined:
//	    up to senderCredit (256) in flight on the internal link at once,
//	    each client delivery settled with the owner's outcome as it
//	    comes back (a transaction's transfers go on their own internal
//	    link, which is switched to only once the ones in flight on the
//	    other have their outcomes);
//	  - a receiver link's credit is passed on (the internal receiver uses
//	    manual credit, topped up to the client's; a drain is drained on the
//	    owner first), deliveries come back with the owner's delivery tags
//	    (the lock tokens), the client's dispositions go to the owner and its
//	    answer settles them;
//	  - a management request goes to the owner's management node on an
//	    internal link pair and its response comes back unchanged.
//
// Each client connection has its own internal connection per owner
// (dialled at its first relayed link, closed with it), so the owner's
// grants are that one client's rights. The relay never repeats a
// transfer whose outcome it does not know: when the internal link fails
// every delivery in flight on it is rejected com.microsoft:server-busy
// and the client link detached (amqp:link:detach-forced), and the SDK's
// retry goes through the gateway again. An attach for a unit that is moving (no owner known,
// an owner that cannot be reached or says it no longer serves the unit)
// is parked (park.go): tried again until the new owner serves it, or
// failed with server-busy after GatewayConfig.Park.
//
// # HTTP between nodes
//
// The admin API and the REST data plane of a unit another node serves
// are forwarded to that node as HTTP requests (http.go). The internal
// listener's Mux sorts each new connection by its first bytes: "AMQP"
// goes to the internal amqp.Server, "BBH1" is a node's HTTP connection,
// which proves itself once, before any request:
//
//	gateway → owner   "BBH1 " node-id " " proof "\n"      (the PLAIN user and
//	                                                     password of a node proof;
//	                                                     at most 253 bytes)
//	owner → gateway   "BBH1 " hex(OwnerProof(nonce)) "\n"
//	then              HTTP/1.1 requests and responses, kept alive
//
// The Verifier is the AMQP side's (same window, same nonce set); a
// connection that fails it, or says nothing within 10 s, is closed.
// Each forwarded request carries the principal the gateway
// authenticated, in the Busbar-Principal header:
//
//	base64url, no padding, of the JSON object
//	{"k": key name, "r": rights bits (1 Send, 2 Listen, 4 Manage),
//	 "s": resource, "a": audience, "e": expiry, unix ms}   (at most 2048 bytes;
//	                                                         unknown fields refused)
//
// The gateway replaces any such header a client sent; the owner's
// handler reads it only on this listener. A body of known length up to
// 1 MiB is kept so that the request can be sent again once, to the
// owner looked up anew, after a 421 Misdirected Request (the node asked
// does not serve the unit); larger or chunked bodies are streamed and
// never sent twice. Responses stream back unchanged.
//
// Transactions (txn.go) are declared on the owner at their first
// operation on a remote entity and travel there as the markers
// servicebus.RelayTxnProperty describes; send-via links are relayed when
// one owner serves the via entity and the destination (refused
// otherwise).
//
// A token signed with a remote queue's or topic's own shared access rule
// is checked by the gateway with the rule read from the shared catalog
// (the server wires servicebus.EntityRulesOr).
//
// Not relayed yet: spooled large messages (a relayed transfer is held in
// memory up to the owner's max-message-size).
package relay
