package amqp

// Handler is the layer above the endpoint (the Service Bus glue). The
// server asks it for a ConnHandler for every connection.
type Handler interface {
	// Connect is called once per connection, after SASL and the client's
	// open frame, before the server answers with its own open. It runs on
	// the connection's reader goroutine. Returning an error refuses the
	// connection: the client gets open then close carrying the error
	// (an *Error keeps its condition; any other error becomes
	// amqp:internal-error).
	Connect(c *Conn) (ConnHandler, error)
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(c *Conn) (ConnHandler, error)

// Connect calls f(c).
func (f HandlerFunc) Connect(c *Conn) (ConnHandler, error) { return f(c) }

// ConnHandler handles the links of one connection. Its methods are called
// from the goroutines of the connection's sessions, so calls for
// different sessions may run concurrently; calls for one session never do.
//
// The Attach methods run on the session goroutine and must not block for
// long: the session processes nothing else meanwhile. To answer later (a
// long poll, for example), return ErrAttachDeferred and call
// CompleteAttach on the link from any goroutine.
//
// An Attach method accepts the link by returning nil, after setting the
// link's callbacks (OnDelivery is required on incoming links) and, if it
// likes, the fields of l.Reply. It refuses the link by returning an
// error: the client gets an attach with a null terminus and then
// detach(closed=true, error), which is how go-amqp and rhea learn the
// condition (docs/wire/amqp.md §0.15).
type ConnHandler interface {
	// AttachIncoming is called when the client attaches a sender link:
	// the broker receives on it. A link to the transaction coordinator
	// (l.PeerAttach().Coordinator set, no target) comes here too; the
	// reply echoes the coordinator (AttachReply.Coordinator). A handler
	// without transactions refuses it (amqp:not-implemented).
	AttachIncoming(l *IncomingLink) error

	// AttachOutgoing is called when the client attaches a receiver link:
	// the broker sends on it.
	AttachOutgoing(l *OutgoingLink) error

	// Disconnected is called once when the connection is gone, after the
	// OnDetach callback of every link has run, on the connection's reader
	// goroutine. err is never nil: ErrConnClosed for a clean close,
	// ErrConnLost for a vanished peer or a failed write, or the *Error
	// carried by either side's close frame.
	Disconnected(err error)
}
