package filestore

import "hash/crc32"

// Combining CRC-32C checksums. A record's payload checksum covers every
// byte of the payload, and each message Data inside it has a checksum of
// its own (dataCRC), which encodeBatch computes anyway. For a large Data
// the payload checksum is not computed over its bytes a second time: it is
// combined from the checksum of the payload before the Data and the
// Data's own, crc(A‖B) = crc(A)·x^(8·len(B)) mod P ⊕ crc(B) (the
// pre- and post-conditioning of CRC-32C cancel out in that identity).
// The arithmetic is zlib's crc32_combine: polynomials over GF(2) in the
// reflected bit order of the Castagnoli table, multiplied modulo P.

// crcPoly is the reflected Castagnoli polynomial (crc32.Castagnoli).
const crcPoly = crc32.Castagnoli

// combineMin is the smallest Data whose checksum is combined into the
// payload checksum rather than summed again: below it, the hardware CRC
// of the bytes costs less than the combination (a few hundred ns).
const combineMin = 8 << 10

// x2nTable[k] is x^(2^k) mod P.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = multModP(p, p)
		t[k] = p
	}
	return t
}()

// multModP returns a·b mod P.
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
}

// x2nModP returns x^(n·2^k) mod P.
func x2nModP(n uint64, k uint) uint32 {
	p := uint32(1) << 31 // x^0
	for n != 0 {
		if n&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
		n >>= 1
		k++
	}
	return p
}

// crcCombine returns the CRC-32C of A‖B from crc1 = crc(A), crc2 = crc(B)
// and len2 = len(B).
func crcCombine(crc1, crc2 uint32, len2 int) uint32 {
	return multModP(x2nModP(uint64(len2), 3), crc1) ^ crc2
}

// payloadSum accumulates a payload checksum while the payload is
// appended to a buffer: sumTo covers the bytes appended since the last
// call, addSummed a Data whose checksum is already known.
type payloadSum struct {
	crc  uint32 // of buf[start:done]
	done int    // end of the bytes covered, an index into the buffer
}

// sumTo extends the checksum over buf[s.done:end].
func (s *payloadSum) sumTo(buf []byte, end int) {
	s.crc = crc32.Update(s.crc, castagnoli, buf[s.done:end])
	s.done = end
}

// addSummed extends the checksum over the n bytes after s.done, whose
// own checksum is c, without reading them.
func (s *payloadSum) addSummed(c uint32, n int) {
	s.crc = crcCombine(s.crc, c, n)
	s.done += n
}
