package broker

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// dedupHistory is a queue's duplicate-detection history: the MessageIds
// seen within DuplicateDetectionHistoryTimeWindow, with the time each was
// first seen. It is persisted as store values "dup/<key>" written in the
// same batch as the send that adds them, and deleted (in a later batch)
// once out of the window, so it survives restarts.
type dedupHistory struct {
	seen map[string]dedupEntry
	fifo []dedupItem // in the order entries were added (non-decreasing at)
	head int
}

type dedupEntry struct {
	at int64 // Unix ns first seen
	// send is the send that added the entry; a duplicate of a message whose
	// commit is still in flight waits for it before acknowledging.
	send *sendWait
}

type dedupItem struct {
	key string
	at  int64
}

// sendWait lets duplicates wait for the original's commit.
type sendWait struct {
	done chan struct{}
	err  error
}

// dedupKey is the history key of a MessageId: a type tag and the value, so
// the string "1" and the ulong 1 differ. ok is false for no MessageId.
func dedupKey(id any) (string, bool) {
	switch v := id.(type) {
	case nil:
		return "", false
	case string:
		return "s" + v, true
	case message.Symbol:
		return "s" + string(v), true
	case message.UUID:
		return "u" + string(v[:]), true
	case uint64:
		return "n" + string(binary.BigEndian.AppendUint64(nil, v)), true
	case []byte:
		return "b" + string(v), true
	default:
		return "x" + fmt.Sprint(v), true
	}
}

// lookup returns the entry for key if it is within window at now.
func (d *dedupHistory) lookup(key string, now, window int64) (dedupEntry, bool) {
	e, ok := d.seen[key]
	if !ok || e.at+window <= now {
		return dedupEntry{}, false
	}
	return e, true
}

func (d *dedupHistory) add(key string, at int64, w *sendWait) {
	if d.seen == nil {
		d.seen = make(map[string]dedupEntry)
	}
	d.seen[key] = dedupEntry{at: at, send: w}
	d.fifo = append(d.fifo, dedupItem{key: key, at: at})
}

// forget removes key if it still belongs to send w (its commit failed).
func (d *dedupHistory) forget(key string, w *sendWait) {
	if e, ok := d.seen[key]; ok && e.send == w {
		delete(d.seen, key)
	}
}

// purge drops history entries older than window at now and appends the
// store deletions (values of entity id) to ops.
func (d *dedupHistory) purge(id uint64, window, now int64, ops []store.Op) []store.Op {
	for d.head < len(d.fifo) && d.fifo[d.head].at+window <= now {
		it := d.fifo[d.head]
		d.fifo[d.head] = dedupItem{}
		d.head++
		if e, ok := d.seen[it.key]; ok && e.at == it.at {
			delete(d.seen, it.key)
			ops = append(ops, store.Op{Kind: store.OpDeleteValue, EntityID: id, Key: valueDedupPrefix + it.key})
		}
	}
	if d.head > 1024 && d.head*2 > len(d.fifo) {
		d.fifo = slices.Clone(d.fifo[d.head:])
		d.head = 0
	}
	if d.head == len(d.fifo) {
		d.fifo, d.head = d.fifo[:0], 0
	}
	return ops
}

// deadline is when the oldest history entry leaves the window (0: none).
func (d *dedupHistory) deadline(window int64) int64 {
	if d.head >= len(d.fifo) {
		return 0
	}
	return d.fifo[d.head].at + window
}

// check runs duplicate detection for a send's messages at now: a message
// whose key was seen within window is marked drop (and the sends that
// added those keys, if still in flight, are returned to wait for);
// the others are added to the history under w, with their store values
// appended to ops (entity id).
func (d *dedupHistory) check(id uint64, pend []pendingMsg, now, window int64, w *sendWait, ops []store.Op) ([]*sendWait, []store.Op) {
	var waits []*sendWait
	for i := range pend {
		pm := &pend[i]
		if !pm.hasKey {
			continue
		}
		if e, ok := d.lookup(pm.dedupKey, now, window); ok {
			pm.drop = true
			if e.send != w && e.send != nil {
				waits = append(waits, e.send)
			}
			continue
		}
		d.add(pm.dedupKey, now, w)
		ops = append(ops, store.Op{Kind: store.OpPutValue, EntityID: id, Key: valueDedupPrefix + pm.dedupKey, Data: be64(now)})
	}
	return waits, ops
}

// purgeDedupLocked drops the queue's history entries older than the
// window and appends the store deletions to ops.
func (q *entity) purgeDedupLocked(now int64, ops []store.Op) []store.Op {
	return q.mu.dedup.purge(q.id, int64(q.mu.props.DuplicateDetectionHistoryTimeWindow), now, ops)
}

// dedupDeadlineLocked is when the oldest history entry leaves the window.
func (q *entity) dedupDeadlineLocked() int64 {
	return q.mu.dedup.deadline(int64(q.mu.props.DuplicateDetectionHistoryTimeWindow))
}
