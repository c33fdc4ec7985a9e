package filestore

import (
	"bytes"

	"github.com/busbarmq/busbar/internal/store"
)

// applyRecordLocked applies one record's payload, found at payloadOff in
// seg, to the index. The live writer and recovery both use it, so a
// replayed log reaches exactly the state the live store had. s.mu must be
// held exclusively.
func (s *Store) applyRecordLocked(p []byte, seg *segment, payloadOff int64) error {
	ix := s.mu.ix
	d := decoder{p: p}
	var op decOp
	for d.next(&op) {
		if op.kind == byte(store.OpPutEntity) {
			if e := ix.entities[op.entity]; e != nil {
				e.name, e.spec = string(op.name), bytes.Clone(op.data)
			} else {
				ix.entities[op.entity] = &entity{id: op.entity, name: string(op.name), spec: bytes.Clone(op.data),
					values: make(map[string][]byte)}
			}
			continue
		}
		e := ix.entities[op.entity]
		if e == nil {
			if op.kind == opAppendBlob || op.kind == opRewriteBlob {
				s.unusedBlobLocked(op.blob)
			}
			continue // ops on missing entities are no-ops
		}
		switch op.kind {
		case byte(store.OpDeleteEntity):
			s.deleteEntityLocked(e)
		case byte(store.OpAppend):
			ent := entry{seq: op.seq, seg: seg.id, off: uint32(payloadOff + int64(op.dataOff)), size: uint32(len(op.data)), crc: op.dcrc}
			if old, replaced := ix.insert(e, ent, op.meta); replaced {
				s.unrefLocked(old)
			}
			s.refLocked(ent)
			e.lastSeq = max(e.lastSeq, op.seq)
		case opAppendBlob:
			ent := entry{seq: op.seq, seg: blobSeg, off: op.blob, size: op.blobSize, crc: op.dcrc}
			if old, replaced := ix.insert(e, ent, op.meta); replaced {
				s.unrefLocked(old)
			}
			s.refLocked(ent)
			e.lastSeq = max(e.lastSeq, op.seq)
		case opRewriteBlob:
			c, i, ok := ix.lookupMut(e, op.seq)
			if !ok {
				s.unusedBlobLocked(op.blob)
				continue
			}
			old := c.ents[i]
			ix.count(old, -1)
			s.unrefLocked(old)
			ent := &c.ents[i]
			ent.seg, ent.off, ent.size, ent.crc = blobSeg, op.blob, op.blobSize, op.dcrc
			c.setMeta(i, op.meta)
			ix.count(*ent, 1)
			s.refLocked(*ent)
		case byte(store.OpSetMeta):
			if c, i, ok := ix.lookupMut(e, op.seq); ok {
				ix.metaBytes += int64(len(op.meta)) - int64(c.ents[i].mlen)
				c.setMeta(i, op.meta)
			}
		case byte(store.OpRewrite):
			if c, i, ok := ix.lookupMut(e, op.seq); ok {
				old := c.ents[i]
				ix.count(old, -1)
				s.unrefLocked(old)
				ent := &c.ents[i]
				ent.seg, ent.off, ent.size, ent.crc = seg.id, uint32(payloadOff+int64(op.dataOff)), uint32(len(op.data)), op.dcrc
				c.setMeta(i, op.meta)
				ix.count(*ent, 1)
				s.refLocked(*ent)
			}
		case byte(store.OpRemove):
			if old, ok := ix.remove(e, op.seq); ok {
				s.unrefLocked(old)
			}
		case byte(store.OpPutValue):
			if _, ok := e.values[string(op.key)]; !ok {
				ix.nvalues++
			}
			e.values[string(op.key)] = bytes.Clone(op.data)
		case byte(store.OpDeleteValue):
			if _, ok := e.values[string(op.key)]; ok {
				ix.nvalues--
				delete(e.values, string(op.key))
			}
		case opMove:
			c, i, ok := e.lookup(op.seq)
			if !ok || c.ents[i].seg != op.fromSeg || c.ents[i].off != op.fromOff {
				continue // changed since compaction read it
			}
			c, i, _ = ix.lookupMut(e, op.seq)
			ent := &c.ents[i]
			s.unrefLocked(*ent)
			ent.seg, ent.off = seg.id, uint32(payloadOff+int64(op.dataOff))
			s.refLocked(*ent)
		}
	}
	return d.err
}

func (s *Store) deleteEntityLocked(e *entity) {
	ix := s.mu.ix
	for _, c := range e.chunks {
		for _, ent := range c.ents {
			ix.count(ent, -1)
			s.unrefLocked(ent)
		}
	}
	ix.nvalues -= len(e.values)
	delete(ix.entities, e.id)
}

func (s *Store) refLocked(ent entry) {
	if ent.seg == blobSeg {
		if ent.size > 0 {
			s.blobRefLocked(ent)
		}
		return
	}
	if seg := s.mu.segs[ent.seg]; seg != nil {
		seg.live++
		seg.liveBytes += int64(ent.size)
	}
}

func (s *Store) unrefLocked(ent entry) {
	if ent.seg == blobSeg {
		if ent.size > 0 {
			s.blobUnrefLocked(ent)
		}
		return
	}
	if seg := s.mu.segs[ent.seg]; seg != nil {
		seg.live--
		seg.liveBytes -= int64(ent.size)
	}
}
