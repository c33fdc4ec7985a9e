package servicebus

import "github.com/busbarmq/busbar/internal/message"

// Lock tokens travel in two byte orders. Management bodies carry them as
// AMQP uuid, RFC 4122 order (message.UUID). Delivery tags carry them in
// .NET Guid.ToByteArray() order: the first 4-byte group and the next two
// 2-byte groups little-endian, the last 8 bytes unchanged (§0.8, §4.3).

// putDotNetGUID writes u into b in .NET byte order, as a delivery tag.
func putDotNetGUID(b *[16]byte, u message.UUID) {
	b[0], b[1], b[2], b[3] = u[3], u[2], u[1], u[0]
	b[4], b[5] = u[5], u[4]
	b[6], b[7] = u[7], u[6]
	copy(b[8:], u[8:])
}

// uuidFromDotNetBytes is the inverse of putDotNetGUID; ok is false
// unless b has 16 bytes.
func uuidFromDotNetBytes(b []byte) (u message.UUID, ok bool) {
	if len(b) != 16 {
		return u, false
	}
	u[0], u[1], u[2], u[3] = b[3], b[2], b[1], b[0]
	u[4], u[5] = b[5], b[4]
	u[6], u[7] = b[7], b[6]
	copy(u[8:], b[8:])
	return u, true
}
