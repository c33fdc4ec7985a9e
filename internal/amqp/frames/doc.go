// Package frames is the AMQP 1.0 frame layer: frame headers, the
// performatives of the transport (OASIS AMQP 1.0 part 2) and SASL (part 5)
// layers, and the message format (part 3). It encodes and decodes; the
// connection, session and link state machines live in package amqp.
//
// # Frames
//
// A connection starts with an 8-byte protocol header, ProtocolHeaderSASL
// or ProtocolHeaderAMQP, and then carries frames:
//
//	   0       1       2       3       4       5       6       7
//	+-------+-------+-------+-------+-------+-------+-------+-------+
//	|             SIZE              | DOFF  | TYPE  |    CHANNEL    |
//	+-------+-------+-------+-------+-------+-------+-------+-------+
//	|        extended header (DOFF*4 - 8 bytes, ignored)            |
//	+---------------------------------------------------------------+
//	|  body: performative (a described list)  |  payload (transfer) |
//	+---------------------------------------------------------------+
//
// SIZE counts the whole frame including the header; DOFF is the body's
// offset in 4-byte words (at least 2). TYPE is 0 for AMQP frames and 1 for
// SASL frames; CHANNEL is the session channel (ignored for SASL). A frame
// with no body is an empty frame, used as a heartbeat.
//
// The performative is a described list, descriptor first:
//
//	0x00 0x53 0x14 0xc0 size count field...    transfer (descriptor 0x14)
//
// Fields are positional; trailing null fields are omitted on the wire.
// Only transfer frames carry a payload: the bytes after the performative,
// which are (part of) an encoded message. This package does not parse the
// payload while reading frames: Transfer.Payload is the raw sub-slice.
//
// # Absent fields
//
// Optional fields whose absence means something different from any value
// are pointers (for example Begin.RemoteChannel, Attach.SndSettleMode,
// Flow.Handle, Transfer.DeliveryID): nil is absent. Other fields use the
// zero value for absent and decode an absent field to the spec default;
// each field comment says which. Marshal writes every present field
// explicitly, so a reply that echoes a peer's settle modes writes them out
// even when they are the defaults.
//
// # Ownership
//
// ReadFrame reads each frame into a buffer of its own; every []byte in
// the decoded frame (Transfer.Payload, delivery tags, binary values)
// aliases that buffer, so a frame can be handed to another goroutine as
// is. Nothing else uses the buffer until its owner says so: a transfer of
// up to MaxPooledBody bytes is read into a pooled Buffer (Transfer.Buf),
// which returns to the pool — and is overwritten by a later frame — only
// when its owner calls Release; every other frame's buffer is left to the
// garbage collector. A transfer of more than MaxPooledBody/2 bytes that
// opens a delivery with more to come (delivery-id, more=true) is read
// into a reassembly buffer instead (capacity ReassemblyCap), so that the
// delivery's next frame can be appended after it in place. ParseFrame and ParseBody alias the caller's input
// instead. Message.UnmarshalBinary aliases its input in the same way,
// including RawBody.
//
// # Messages
//
// An encoded message is a sequence of described sections:
//
//	[header] [delivery-annotations] [message-annotations] [properties]
//	[application-properties] body... [footer]
//
// where body is one amqp-value, one or more amqp-sequence, or one or more
// data sections. Message keeps the body as the exact encoded bytes of
// those sections (RawBody) and writes them back verbatim.
//
// Header, Properties and SplitMessage are the section codec. Service Bus
// messages (sent, stored, delivered) are read and written with it by
// package message, straight into and out of its Message; this package's
// Message serves the control traffic ($cbs, $management) and tests.
package frames
