// Package amqpws carries AMQP connections over WebSockets (RFC 6455), as
// Service Bus offers them for networks that only let HTTPS through: an
// http.Handler upgrades the request and hands the tunnel, as a net.Conn,
// to a serve function (the AMQP server's ServeConn), which runs the
// ordinary AMQP handshake on it. The package knows nothing of AMQP beyond
// the subprotocol names.
//
// # Wire
//
//	client                                     Busbar (HTTP or HTTPS listener)
//	GET /$servicebus/websocket HTTP/1.1   ->
//	Upgrade: websocket
//	Sec-WebSocket-Protocol: amqp
//	                                      <-   101 Switching Protocols
//	                                           Sec-WebSocket-Protocol: amqp
//	binary message: AMQP bytes            ->
//	                                      <-   binary message: AMQP bytes
//	...                                        ...
//	close frame                           <->  close frame
//
// The AMQP byte stream (protocol headers, SASL and AMQP frames) travels in
// binary messages with no relation between message and frame boundaries:
// a message may hold several frames, part of one, or a protocol header.
// Busbar writes each batch of frames as one message. A text message ends
// the connection (close status 1003).
//
// The subprotocols accepted are "amqp" (the AMQP WebSocket binding 1.0,
// what the Go SDK's documentation uses) and "AMQPWSB10" (the binding's
// draft name, which the JavaScript, Python and C clients send). A request
// without either, or that is not a WebSocket upgrade, gets an HTTP error
// saying so. The upgrade needs no HTTP authentication: AMQP authorises
// through $cbs inside the tunnel. Origins are not checked for the same
// reason: the browser holds no ambient credential for the broker.
//
// # Goroutines
//
// Each Conn runs one goroutine, the pump, that reads WebSocket messages
// and hands their bytes to Read one chunk at a time (so a Read deadline
// interrupts Read without breaking the WebSocket, as net.Conn promises,
// and memory per connection stays one chunk). Conn.Close stops it and
// waits for it. The serve function owns each Conn it is handed; the
// Handler's Shutdown refuses further upgrades and waits for the requests
// in progress.
package amqpws
