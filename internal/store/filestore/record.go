package filestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/busbarmq/busbar/internal/store"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Segment header.
const (
	segMagic      = "BUSBARLG"
	segVersion    = 1
	segHeaderSize = 32
)

func appendSegHeader(b []byte, id uint32, firstLSN uint64) []byte {
	start := len(b)
	b = append(b, segMagic...)
	b = binary.LittleEndian.AppendUint32(b, segVersion)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint64(b, firstLSN)
	b = binary.LittleEndian.AppendUint32(b, crc(b[start:]))
	return binary.LittleEndian.AppendUint32(b, 0)
}

func parseSegHeader(b []byte) (id uint32, firstLSN uint64, err error) {
	if len(b) < segHeaderSize {
		return 0, 0, errors.New("short segment header")
	}
	if string(b[:8]) != segMagic {
		return 0, 0, errors.New("bad segment magic")
	}
	if crc(b[:24]) != binary.LittleEndian.Uint32(b[24:]) {
		return 0, 0, errors.New("segment header checksum mismatch")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != segVersion {
		return 0, 0, fmt.Errorf("unknown segment version %d", v)
	}
	return binary.LittleEndian.Uint32(b[12:]), binary.LittleEndian.Uint64(b[16:]), nil
}

// Record header.
const (
	recHeaderSize = 28
	// maxPayload bounds one batch; with SegmentSize ≤ 1 GiB every offset
	// inside a segment fits in a uint32.
	maxPayload = 1 << 30
)

type recHeader struct {
	length uint32 // payload bytes
	lsn    uint64 // log sequence number, +1 per batch
	synced uint64 // highest LSN known durable when this record was written
	pcrc   uint32 // CRC-32C of the payload
}

// sealRecHeader completes the header of rec (whose length and payload
// checksum finishPayload set) with its LSN and the synced LSN.
func sealRecHeader(rec []byte, lsn, synced uint64) {
	binary.LittleEndian.PutUint64(rec[8:], lsn)
	binary.LittleEndian.PutUint64(rec[16:], synced)
	binary.LittleEndian.PutUint32(rec[0:], crc(rec[4:recHeaderSize]))
}

// parseRecHeader decodes a record header; ok is false when its checksum
// does not match.
func parseRecHeader(b []byte) (h recHeader, ok bool) {
	if len(b) < recHeaderSize || crc(b[4:recHeaderSize]) != binary.LittleEndian.Uint32(b) {
		return h, false
	}
	return recHeader{
		length: binary.LittleEndian.Uint32(b[4:]),
		lsn:    binary.LittleEndian.Uint64(b[8:]),
		synced: binary.LittleEndian.Uint64(b[16:]),
		pcrc:   binary.LittleEndian.Uint32(b[24:]),
	}, true
}

// opMove is the filestore's own operation: compaction copied the Data of
// message (EntityID, Seq) out of segment fromSeg at fromOff. It applies
// only if the message still has its Data there.
const opMove = 0x40

// opAppendBlob and opRewriteBlob are OpAppend and OpRewrite whose Data is
// in a blob file: the record holds the blob's id, length and checksum.
const (
	opAppendBlob  = 0x41
	opRewriteBlob = 0x42
)

// encodeBatch appends a record for b to dst: a header (left for the
// writer to complete, except the payload checksum) and the payload.
func encodeBatch(dst []byte, b *store.Batch) ([]byte, error) {
	return encodeBatchBlobs(dst, b, nil, nil)
}

// hole is a Data section of a record left out of its buffer: the record's
// bytes from at (an index into the record) for len(data) are data, which
// the writer writes from where it lies (an iovec of its own) or copies in.
// What the buffer holds there is never written nor read: applying a record
// takes only the length and offset of an OpAppend's or OpRewrite's Data.
type hole struct {
	at   int
	data []byte
}

// holeMin is the smallest Data encodeBatchBlobs leaves as a hole when
// asked to: the writer writes records of vecMin bytes and more from their
// own buffers, and a 64 KB message's copy into the record cost 3–4 % of
// the broker's CPU in a send profile.
const holeMin = vecMin

// encodeBatchBlobs is encodeBatch for a batch some of whose Data went to
// blob files: blobs[i], if its id is not 0, is op i's (nil: none). With
// holes non-nil, a piece of an OpAppend's or OpRewrite's Data (its Data
// or its More, see store.Op) of holeMin bytes or more is not copied: its
// place in dst is reserved but left as it is, and a hole is appended to
// *holes (the caller keeps the Data unchanged until the record is
// written). The record is the same either way, and the same whether the
// Data came in one piece or two.
func encodeBatchBlobs(dst []byte, b *store.Batch, blobs []blobRef, holes *[]hole) ([]byte, error) {
	start := len(dst)
	n := batchSizeBound(b, blobs)
	if n > maxPayload {
		n = 0 // it fails below; do not reserve for it
	}
	dst = slices.Grow(dst, recHeaderSize+n)[:start+recHeaderSize]
	clear(dst[start:])
	sum := payloadSum{done: len(dst)}
	for i := range b.Ops {
		op := &b.Ops[i]
		if blobs != nil && blobs[i].id != 0 {
			kind := byte(opAppendBlob)
			if op.Kind == store.OpRewrite {
				kind = opRewriteBlob
			}
			dst = append(dst, kind)
			dst = binary.AppendUvarint(dst, op.EntityID)
			dst = binary.AppendUvarint(dst, op.Seq)
			dst = appendBytes(dst, op.Meta)
			dst = binary.AppendUvarint(dst, uint64(blobs[i].id))
			dst = binary.AppendUvarint(dst, uint64(blobs[i].size))
			dst = binary.LittleEndian.AppendUint32(dst, blobs[i].crc)
			continue
		}
		dst = append(dst, byte(op.Kind))
		dst = binary.AppendUvarint(dst, op.EntityID)
		switch op.Kind {
		case store.OpPutEntity:
			dst = appendBytes(dst, []byte(op.Name))
			dst = appendBytes(dst, op.Data)
		case store.OpDeleteEntity:
		case store.OpAppend, store.OpRewrite:
			dst = binary.AppendUvarint(dst, op.Seq)
			dst = appendBytes(dst, op.Meta)
			// The Data is op.Data followed by op.More (store.Op): one
			// length, one checksum (combined from the pieces' own, each
			// summed once), the bytes of both.
			n := len(op.Data) + len(op.More)
			dcrc := crc(op.Data)
			if len(op.More) > 0 {
				dcrc = crcCombine(dcrc, crc(op.More), len(op.More))
			}
			dst = binary.LittleEndian.AppendUint32(dst, dcrc)
			dst = binary.AppendUvarint(dst, uint64(n))
			if n >= combineMin {
				// The payload checksum takes the Data's own (crc.go)
				// rather than reading it a second time.
				sum.sumTo(dst, len(dst))
				dst = placeData(dst, start, op.Data, holes)
				dst = placeData(dst, start, op.More, holes)
				sum.addSummed(dcrc, n)
			} else {
				dst = append(dst, op.Data...)
				dst = append(dst, op.More...)
			}
		case store.OpSetMeta:
			dst = binary.AppendUvarint(dst, op.Seq)
			dst = appendBytes(dst, op.Meta)
		case store.OpRemove:
			dst = binary.AppendUvarint(dst, op.Seq)
		case store.OpPutValue:
			dst = appendBytes(dst, []byte(op.Key))
			dst = appendBytes(dst, op.Data)
		case store.OpDeleteValue:
			dst = appendBytes(dst, []byte(op.Key))
		default:
			return dst[:start], fmt.Errorf("filestore: op %d: unknown kind %d", i, op.Kind)
		}
		if len(dst)-start-recHeaderSize > maxPayload {
			return dst[:start], fmt.Errorf("filestore: batch larger than %d bytes", maxPayload)
		}
	}
	sum.sumTo(dst, len(dst))
	setPayloadHeader(dst[start:], sum.crc)
	return dst, nil
}

// placeData appends d, a piece of a Data, to the record that starts at
// dst[start]: as a hole (its place reserved, not written) when holes is
// not nil, d is of holeMin bytes or more and dst has room for it, else
// copied.
func placeData(dst []byte, start int, d []byte, holes *[]hole) []byte {
	if holes != nil && len(d) >= holeMin && cap(dst)-len(dst) >= len(d) {
		*holes = append(*holes, hole{at: len(dst) - start, data: d})
		return dst[:len(dst)+len(d)]
	}
	return append(dst, d...)
}

// batchSizeBound is an upper bound of the payload encodeBatch writes for
// b, so that it grows its buffer once: growing by appending copied and
// cleared a multi-message batch several times over.
func batchSizeBound(b *store.Batch, blobs []blobRef) int {
	const fixed = 1 + 4*binary.MaxVarintLen64 + 4 // kind, entity, seq, two lengths, crc
	n := 0
	for i := range b.Ops {
		op := &b.Ops[i]
		n += fixed + len(op.Name) + len(op.Key) + len(op.Meta)
		if blobs != nil && blobs[i].id != 0 {
			n += 2 * binary.MaxVarintLen64
		} else {
			n += len(op.Data) + len(op.More)
		}
	}
	return n
}

// move is one relocation for encodeMoves.
type move struct {
	entity, seq uint64
	fromSeg     uint32
	fromOff     uint32
	crc         uint32
	data        []byte
}

func encodeMoves(dst []byte, ms []move) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recHeaderSize)...)
	for _, m := range ms {
		dst = append(dst, opMove)
		dst = binary.AppendUvarint(dst, m.entity)
		dst = binary.AppendUvarint(dst, m.seq)
		dst = binary.AppendUvarint(dst, uint64(m.fromSeg))
		dst = binary.AppendUvarint(dst, uint64(m.fromOff))
		dst = binary.LittleEndian.AppendUint32(dst, m.crc)
		dst = appendBytes(dst, m.data)
	}
	finishPayload(dst[start:])
	return dst
}

// finishPayload fills in the length and payload checksum of rec's header;
// the writer adds the LSN, synced LSN and header checksum.
func finishPayload(rec []byte) {
	setPayloadHeader(rec, crc(rec[recHeaderSize:]))
}

// setPayloadHeader fills in the length of rec's payload and its checksum
// pcrc.
func setPayloadHeader(rec []byte, pcrc uint32) {
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(rec)-recHeaderSize))
	binary.LittleEndian.PutUint32(rec[24:], pcrc)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decOp is one decoded operation. Its slices alias the payload.
type decOp struct {
	kind        byte
	entity, seq uint64
	name, key   []byte // OpPutEntity name; value key
	meta        []byte
	data        []byte // OpPutEntity spec, value, message Data
	dataOff     int    // offset of data within the payload
	dcrc        uint32
	fromSeg     uint32
	fromOff     uint32
	blob        uint32 // opAppendBlob, opRewriteBlob: the blob's id
	blobSize    uint32 // and its length
}

var errShortOp = errors.New("truncated operation")

// decoder walks the operations of one payload.
type decoder struct {
	p   []byte
	pos int
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p[d.pos:])
	if n <= 0 {
		d.err = errShortOp
		return 0
	}
	d.pos += n
	return v
}

func (d *decoder) u32() uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.p)-d.pos < 4 {
		d.err = errShortOp
		return 0
	}
	v := binary.LittleEndian.Uint32(d.p[d.pos:])
	d.pos += 4
	return v
}

// bytes returns a length-prefixed byte string and its offset.
func (d *decoder) bytes() ([]byte, int) {
	n := d.uvarint()
	if d.err != nil {
		return nil, 0
	}
	if n > uint64(len(d.p)-d.pos) {
		d.err = errShortOp
		return nil, 0
	}
	off := d.pos
	d.pos += int(n)
	return d.p[off:d.pos:d.pos], off
}

// next decodes the next operation; ok is false at the end of the payload
// or on error (then d.err is set).
func (d *decoder) next(op *decOp) bool {
	if d.err != nil || d.pos >= len(d.p) {
		return false
	}
	*op = decOp{kind: d.p[d.pos]}
	d.pos++
	op.entity = d.uvarint()
	switch op.kind {
	case byte(store.OpPutEntity):
		op.name, _ = d.bytes()
		op.data, op.dataOff = d.bytes()
	case byte(store.OpDeleteEntity):
	case byte(store.OpAppend), byte(store.OpRewrite):
		op.seq = d.uvarint()
		op.meta, _ = d.bytes()
		op.dcrc = d.u32()
		op.data, op.dataOff = d.bytes()
	case byte(store.OpSetMeta):
		op.seq = d.uvarint()
		op.meta, _ = d.bytes()
	case byte(store.OpRemove):
		op.seq = d.uvarint()
	case byte(store.OpPutValue):
		op.key, _ = d.bytes()
		op.data, op.dataOff = d.bytes()
	case byte(store.OpDeleteValue):
		op.key, _ = d.bytes()
	case opAppendBlob, opRewriteBlob:
		op.seq = d.uvarint()
		op.meta, _ = d.bytes()
		id, size := d.uvarint(), d.uvarint()
		if id == 0 || id > 1<<32-1 || size > 1<<32-1 {
			d.err = errors.New("blob reference out of range")
		}
		op.blob, op.blobSize = uint32(id), uint32(size)
		op.dcrc = d.u32()
	case opMove:
		op.seq = d.uvarint()
		fs, fo := d.uvarint(), d.uvarint()
		if fs > 1<<32-1 || fo > 1<<32-1 {
			d.err = errors.New("move location out of range")
		}
		op.fromSeg, op.fromOff = uint32(fs), uint32(fo)
		op.dcrc = d.u32()
		op.data, op.dataOff = d.bytes()
	default:
		d.err = fmt.Errorf("unknown operation kind %d", op.kind)
	}
	return d.err == nil
}
