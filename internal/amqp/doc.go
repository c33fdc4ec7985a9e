// Package amqp is the server side of AMQP 1.0 (OASIS AMQP 1.0 part 2): the
// connection, SASL, session and link state machines and their flow
// control. It knows nothing about Service Bus entities; the layer above
// (the glue) implements Handler and decides what each link means.
//
// # Using it
//
// NewServer takes a Handler and a Config; Serve runs a listener;
// ServeConn serves one connection accepted elsewhere (AMQP tunnelled
// through a WebSocket, for one) under the same limits and deadlines;
// Shutdown closes everything. For each connection the Handler returns a
// ConnHandler, which accepts or refuses links:
//
//   - AttachIncoming(*IncomingLink): the client sends, the broker
//     receives. The endpoint grants and tops up credit; complete
//     deliveries (multi-frame transfers reassembled, aborted ones
//     dropped) arrive in OnDelivery; the handler settles each one,
//     whenever and from whatever goroutine, with IncomingDelivery.Settle.
//   - AttachOutgoing(*OutgoingLink): the broker sends, the client
//     receives. OnFlow reports credit and drain requests;
//     OutgoingLink.Send queues a delivery (never blocking);
//     OnDisposition reports the client's outcomes, which the handler
//     answers with OutgoingDelivery.Settle.
//
// Conn.OutgoingLinkByTarget and Conn.OutgoingLink find a link by target
// address or name, for routing request/response replies.
//
// # Handshake
//
// A client either negotiates SASL first or, as Service Bus also allows,
// sends the AMQP protocol header at once and is authorised through CBS
// alone (part 2 section 2.2, part 5 section 5.3):
//
//	with SASL                              without SASL
//	client                  server         client                  server
//	AMQP 3 1 0 0     ->                    AMQP 0 1 0 0     ->
//	                 <-  AMQP 3 1 0 0,                      <-  AMQP 0 1 0 0
//	                     sasl-mechanisms   open             ->
//	sasl-init        ->                                     <-  open
//	                 <-  sasl-outcome
//	AMQP 0 1 0 0     ->
//	                 <-  AMQP 0 1 0 0
//	open             ->
//	                 <-  open
//
// The server offers MSSBCBS, ANONYMOUS and PLAIN; the SDKs pick ANONYMOUS
// and, like a client without SASL, put a token on $cbs before they attach
// anything. Either way the open may be answered with open + close(error)
// (connection limit reached, handler refused). Any other protocol header,
// or the AMQP header when Config.SASL.RequireSASL is set, is answered with
// the SASL header and the connection ends. The whole exchange is bounded
// by Config.HandshakeTimeout. The bytes may come over TCP, TLS or any
// other net.Conn handed to ServeConn.
//
// # Goroutines and ownership
//
// Each connection runs one reader goroutine (started by Serve; it also
// runs the handshake and the teardown), one writer goroutine, and one mux
// goroutine per session:
//
//	              net.Conn
//	   +--------------------------------+
//	   | read                     write |
//	   v                                ^
//	reader ---frames---> session mux --+--> writer.buf --> writer
//	(open, begin,   chan  (one per      |     (mutex;       (one Write
//	 end, close,          session:      |      bounded)      per batch,
//	 routing by           windows,      |                    heartbeats)
//	 channel)             handles,      |
//	                      links,        |
//	                      deliveries)   |
//	                        ^    |      |
//	            ops (settle,|    | callbacks: Attach*, OnDelivery,
//	            send, close)|    | OnFlow, OnDisposition, OnDetach
//	                        |    v
//	                     handler (any goroutine)
//
// The session mux owns all session and link state; only the fields
// marked otherwise are shared. The reader hands it frames through a
// bounded channel (so a slow session slows the reader, and TCP slows the
// client). Handlers reach it through a queue of operations that never
// blocks, guarded by a mutex and signalled through a one-slot channel,
// so Settle and Send are safe from any goroutine, including from inside
// callbacks. Sessions encode frames straight into the writer's buffer,
// which the writer swaps and writes in one call; appenders wait while
// that buffer is full. No goroutine is started per frame, delivery or
// link.
//
// Callbacks run on the session goroutine and must not block for long.
// Calls for different sessions may run concurrently; a handler that needs
// the client's dispositions in order with a later delivery on another
// session takes a Conn.DispositionMark in OnDelivery and waits on it.
//
// # Link lifecycle
//
// A link is attached when the handler's Attach callback accepts it (or,
// deferred with ErrAttachDeferred, when CompleteAttach does), and gone
// when either side detaches it or its session or connection ends; then
// its OnDetach callback runs, once. When the client detaches a link, its
// OnDetach runs before the detach is answered; when the client ends a
// session, the OnDetach of each of its links runs before the end is
// answered. So a client that has seen the answer finds what the link held
// released (a handler frees such resources in OnDetach) and may take it
// again at once, as Service Bus lets a session receiver accept a session
// right after closing it. An OnDetach that releases something the client
// may reclaim does so before it returns, without waiting on the network.
//
// # Limits
//
// Everything a client can make the endpoint hold is bounded (Config):
// connections (MaxConnections), connections that have not authenticated
// yet (MaxUnauthenticatedConnections: a newcomer closes the oldest of
// them; the handler calls Conn.Authenticated to move a connection out;
// until then a connection holds at most 8 sessions and 16 links),
// the time to authenticate after open (AuthTimeout) and to finish the
// handshake (HandshakeTimeout), sessions (MaxSessions, advertised as
// channel-max) and links (MaxLinks, advertised as handle-max) per
// connection, and the frames queued for a slow reader (writeBufferLimit).
// An unsettled outgoing delivery keeps a small record but not its payload;
// the handler bounds how many it sends and may Forget those that can no
// longer be settled. Every connection's transport comes through
// Server.accept, so the limits hold for all of them.
//
// # Ending
//
// A connection ends when the client closes it, the transport fails, a
// protocol error is found (the client gets close with amqp:decode-error,
// amqp:connection:framing-error, amqp:not-allowed, ... and the other
// connections are unaffected), the idle time-out expires, or the handler
// or Shutdown closes it. The reader then stops the sessions (each runs
// the OnDetach callbacks of its links), waits for them and the writer,
// closes the socket and calls ConnHandler.Disconnected. Links are always
// detached with closed=true.
//
// # Frame size
//
// The open advertises max-frame-size 65536 (Config.MaxFrameSize), as
// Service Bus does. A larger value is not harmless: clients built on
// Azure's C uamqp (the Python SDK) split their transfers by the peer's
// max-frame-size but refuse to encode frames above their own 65536, so
// they could send nothing over 64 KiB. A frame from the client larger
// than ours closes the connection with amqp:connection:framing-error.
// Frames we send never exceed the smaller of the two opens' sizes;
// deliveries larger than that go out as multi-frame transfers
// (more=true), and the client's multi-frame transfers are reassembled up
// to the link's max-message-size (Config.MaxMessageSize, 256 KiB).
package amqp
