package servicebus

import (
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
)

// This file holds what the AMQP endpoint adds to the message codec of
// package message on the send path: a message id for messages sent
// without one.

// decodeMessage decodes one encoded AMQP message a client sends into a
// message.Message (message.DecodeAMQP). A message without a message-id
// gets one (a GUID in "N" format), as Service Bus gives it one, also for
// duplicate detection ("ServiceBus sets an ID as default, only if the
// application doesn't set its own ID", Azure/azure-service-bus-java#69):
// the JS SDK keys its lock renewal by message id and fails to settle a
// received message that has none ("Failed to stop auto lock renewal - no
// message ID").
//
// The message's body aliases data (saving a copy of every payload on the
// send path): data must be owned by the caller and never reused, as an
// amqp.IncomingDelivery's payload is (the endpoint gives each frame, and
// each reassembled delivery, a buffer of its own).
func decodeMessage(data []byte) (*message.Message, error) {
	out := new(message.Message)
	if err := message.DecodeAMQP(out, data); err != nil {
		return nil, err
	}
	if out.MessageID == nil {
		out.MessageID = newMessageID()
	}
	return out, nil
}

// newMessageID is a message id the broker assigns: 32 hex digits, a
// random (version 4) UUID. The random bytes are drawn from crypto/rand in
// blocks rather than once per message (this runs for every message sent
// without an id).
func newMessageID() string {
	var u uuid.UUID
	idRand.Lock()
	if idRand.off == 0 || idRand.off+len(u) > len(idRand.buf) {
		_, _ = rand.Read(idRand.buf[:]) // never fails (crypto/rand)
		idRand.off = 0
	}
	copy(u[:], idRand.buf[idRand.off:])
	clear(idRand.buf[idRand.off : idRand.off+len(u)]) // not kept once used
	idRand.off += len(u)
	idRand.Unlock()
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var out [32]byte
	hex.Encode(out[:], u[:])
	return string(out[:])
}

var idRand struct {
	sync.Mutex
	buf [64 * 16]byte
	off int
}
