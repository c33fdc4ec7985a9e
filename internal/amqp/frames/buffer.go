package frames

import (
	"bufio"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
)

// Buffer is the memory of one transfer frame's body, taken from a pool.
// ReadFrame reads the body of a transfer of up to MaxPooledBody bytes into
// a Buffer and the Transfer parsed from it keeps it in Buf: the Transfer's
// Payload and DeliveryTag live in it.
//
// Whoever ends up owning those bytes (and everything decoded from them
// without copying) may call Release once nothing refers to them any
// more, so that a later frame reuses the memory. Release is optional —
// a Buffer that is never released is garbage-collected like any slice —
// but it must be called at most once, and not while anything still reads
// the bytes: the next frame overwrites them.
type Buffer struct {
	b []byte
}

// MaxPooledBody is the largest transfer body read into a pooled Buffer.
const MaxPooledBody = 64 << 10

// The size classes: class i holds Buffers of capacity
// 1<<(minPooledClass+i), from 512 bytes to MaxPooledBody.
const (
	minPooledClass = 9
	pooledClasses  = 8
)

var bufferPools [pooledClasses]sync.Pool

func bufferClass(n int) int {
	c := bits.Len(uint(n - 1))
	return max(c, minPooledClass) - minPooledClass
}

// getBuffer returns a Buffer of length n (1 ≤ n ≤ MaxPooledBody).
func getBuffer(n int) *Buffer {
	c := bufferClass(n)
	if b, _ := bufferPools[c].Get().(*Buffer); b != nil {
		b.b = b.b[:n]
		return b
	}
	return &Buffer{b: make([]byte, n, 1<<(c+minPooledClass))}
}

// Release gives the buffer back to the pool (see Buffer). It does nothing
// on nil.
func (b *Buffer) Release() {
	if b == nil {
		return
	}
	if poisonReleased.Load() {
		for i := range b.b {
			b.b[i] = 0xdb
		}
	}
	b.b = b.b[:0]
	if cap(b.b) == ReassemblyCap {
		select {
		case reassembly <- b:
		default: // the free list is full: the garbage collector takes it
		}
		return
	}
	bufferPools[bufferClass(cap(b.b))].Put(b)
}

// ReassemblyCap is the capacity of a reassembly buffer: two transfer
// frames of the largest frame size Busbar offers (65536), the common
// shape of a 64 KB message.
const ReassemblyCap = 2 << 16

// reassembly is a free list of reassembly buffers. It is a channel, not a
// sync.Pool, because a stream of 64 KB messages makes garbage collections
// frequent and a pool is emptied by them; a fresh buffer is cleared by the
// runtime before it is written over, which cost about 5 % of the broker's
// CPU in a 64 KB send profile. At most 128 buffers (16 MiB; half of what
// one sender with a window of 256 64 KB messages has in flight) wait here,
// shared by every connection of the process.
var reassembly = make(chan *Buffer, 128)

// GetReassembly returns an empty Buffer of capacity ReassemblyCap into
// which the frames of one delivery are gathered (append to Bytes()[:0]).
// Release gives it back like any Buffer.
func GetReassembly() *Buffer {
	select {
	case b := <-reassembly:
		return b
	default:
		return &Buffer{b: make([]byte, 0, ReassemblyCap)}
	}
}

// Bytes returns the buffer's memory (length as taken, capacity as made).
func (b *Buffer) Bytes() []byte { return b.b }

var poisonReleased atomic.Bool

// PoisonReleased makes Release overwrite a buffer's bytes before pooling
// it, so that a test using a message after its buffer was released reads
// garbage at once instead of only when a later frame happens to reuse the
// memory. For tests; it slows every release.
func PoisonReleased(on bool) { poisonReleased.Store(on) }

// bodyPrefix is how a performative's body with descriptor code starts:
// the descriptor constructor and the small-ulong code (the form every
// encoder uses; a body described otherwise is simply read the general way).
func bodyPrefix(code uint64) [3]byte { return [3]byte{0x00, 0x53, byte(code)} }

// transferPrefix is how a transfer's body starts (a transfer described
// otherwise is not pooled).
var transferPrefix = bodyPrefix(DescriptorTransfer)

// readPooledTransfer reads an n-byte frame body into a pooled Buffer if it
// is a transfer small enough to pool; ok is false (nothing read) if not.
func readPooledTransfer(r *bufio.Reader, src io.Reader, n int) (buf *Buffer, ok bool, err error) {
	if n < len(transferPrefix) || n > MaxPooledBody {
		return nil, false, nil
	}
	p, err := r.Peek(len(transferPrefix))
	if err != nil {
		return nil, false, unexpectedEOF(err)
	}
	if [3]byte(p) != transferPrefix {
		return nil, false, nil
	}
	if n > MaxPooledBody/2 && firstOfMany(r, n) {
		// The first frame of a message split over several: read it into
		// a reassembly buffer, whose spare capacity takes the next
		// frame's payload without copying this one (amqp's
		// startPartial). Continuation frames carry no delivery-id and
		// keep pooled buffers, so a long message's frames read ahead
		// cost what they did.
		buf = GetReassembly()
		buf.b = buf.b[:n]
	} else {
		buf = getBuffer(n)
	}
	if err := readFull(r, src, buf.b); err != nil {
		buf.Release()
		return nil, false, unexpectedEOF(err)
	}
	return buf, true, nil
}

// maxFirstPeek bounds the bytes firstOfMany looks at: a transfer's
// leading fields take at most some 70 bytes (a 32-byte delivery tag and
// every number in its widest form).
const maxFirstPeek = 128

// firstOfMany reports whether the n-byte transfer body at the front of r
// is the first frame of a delivery with more to come (delivery-id present,
// more=true), decoding the transfer's leading fields where they lie in r's
// buffer without consuming them. It is false when they cannot be read
// there (r's buffer is small, or the performative does not fit in what is
// peeked) or do not decode: the body is then read the usual way, and a
// malformed one fails the usual parse.
func firstOfMany(r *bufio.Reader, n int) bool {
	p, err := r.Peek(min(n, maxFirstPeek, r.Size()))
	if err != nil {
		return false
	}
	return leadsDelivery(p)
}

// leadsDelivery decodes the leading fields of the transfer performative
// at the front of p (which may hold only part of the frame body) and
// reports whether it has a delivery-id and more=true.
func leadsDelivery(p []byte) bool {
	var r encoding.Reader
	r.Reset(p)
	code, name, err := r.ReadDescriptor()
	if err != nil || name != "" || code != DescriptorTransfer {
		return false
	}
	count, _, err := r.ReadListHeader()
	if err != nil || count < 6 {
		return false // more is absent: false
	}
	for i := range 6 {
		switch i {
		case 1: // delivery-id
			if r.ReadNull() {
				return false
			}
			if _, err := r.ReadUint32(); err != nil {
				return false
			}
		case 5: // more
			more, err := r.ReadBool()
			return err == nil && more
		default:
			if err := r.Skip(); err != nil {
				return false
			}
		}
	}
	return false
}
