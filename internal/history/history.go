// Package history keeps, per queue, topic and subscription, a bounded log
// of what happened to recent messages: enqueued (by which sender link),
// routed to a subscription, delivered (to which receiver link, under
// which lock token, locked until when), renewed, abandoned, released,
// deferred, lock expired, dead-lettered (reason, description), expired,
// forwarded (to which entity, with which new sequence number there),
// completed, received and deleted, cancelled, removed.
//
// The broker calls Log.Record at the few places these things happen, with
// the time of its own (injected) clock. A nil *Log is "off": the broker
// tests one pointer and does nothing else. Sampled keeps the messages
// whose sequence number is a multiple of SampleEvery; On keeps all.
//
// # Bounds
//
// Everything the log holds is counted in bytes: per message a fixed
// record overhead (with its map entries and room for three events) plus
// its message id, each larger events' array at its capacity, the length
// of every event's strings, per entity a fixed overhead plus its name.
// Three limits evict whole messages, least recently touched first:
//
//	MaxMessagesPerEntity  an entity's own oldest message goes
//	Window                a message untouched for longer goes
//	MaxBytes              the oldest message of any entity goes
//
// and one limit trims a message: past MaxEventsPerMessage events the
// oldest event after the first (its enqueue) is dropped and counted in
// Omitted. Strings are cut (maxString bytes) and copied, so the log never
// keeps a message's buffer alive. The total therefore never exceeds
// MaxBytes, however many entities and messages there are.
//
// Layout (one mutex, a leaf: the log calls nobody):
//
//	Log.ents[lower-case entity] ──► entity{bySeq, byID, oldest … newest}
//	                                              │ (per-entity LRU list)
//	Log.oldest … Log.newest  ◄────── msg{seq, id, events[]} (global LRU list)
package history

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Mode says which messages the log keeps.
type Mode uint8

// Modes.
const (
	Off     Mode = iota // nothing: the broker holds a nil *Log
	Sampled             // messages whose sequence number is a multiple of SampleEvery
	On                  // every message
)

// ParseMode reads "off", "sampled" or "on".
func ParseMode(s string) (Mode, bool) {
	switch strings.ToLower(s) {
	case "off", "":
		return Off, true
	case "sampled":
		return Sampled, true
	case "on":
		return On, true
	}
	return Off, false
}

func (m Mode) String() string {
	switch m {
	case Sampled:
		return "sampled"
	case On:
		return "on"
	}
	return "off"
}

// Config bounds a Log. Zero fields take the defaults below.
type Config struct {
	Mode                 Mode
	SampleEvery          int64         // Sampled: keep 1 message in SampleEvery (by sequence number)
	MaxMessagesPerEntity int           // messages kept per entity
	Window               time.Duration // a message untouched for longer is forgotten
	MaxBytes             int64         // everything the log holds, counted as the package doc says
	MaxEventsPerMessage  int           // events kept per message (the first always)
}

// Defaults.
const (
	DefaultSampleEvery          = 100
	DefaultMaxMessagesPerEntity = 1000
	DefaultWindow               = time.Hour
	DefaultMaxBytes             = 64 << 20
	DefaultMaxEventsPerMessage  = 64
	// MinMaxBytes is the smallest MaxBytes: room for one full message.
	MinMaxBytes = 1 << 20
)

// maxString bounds every string an event or a message keeps (longer is
// cut at a character boundary).
const maxString = 256

// Kind is what happened.
type Kind uint8

// Kinds of event. The zero Kind is "nothing to record".
const (
	_ Kind = iota
	Enqueued
	Routed
	Cancelled
	Delivered
	ReceivedAndDeleted
	Renewed
	Completed
	Abandoned
	Released
	Deferred
	DeadLettered
	LockExpired
	Expired
	Forwarded
	Removed
	kinds
)

var kindNames = [kinds]string{"", "enqueued", "routed", "cancelled", "delivered", "received-and-deleted",
	"renewed", "completed", "abandoned", "released", "deferred", "dead-lettered", "lock-expired",
	"expired", "forwarded", "removed"}

func (k Kind) String() string {
	if k < kinds {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one thing that happened to a message. Fields that do not apply
// are zero.
type Event struct {
	At    int64 // Unix ns on the broker's clock
	Kind  Kind
	Sub   uint8 // sub-queue it happened in: 0 main, 1 $DeadLetterQueue, 2 $Transfer/$DeadLetterQueue
	ToSub uint8 // sub-queue it moved to (dead-lettering), else Sub
	Gone  bool  // the message left the entity (completed, deleted, expired without DLQ, forwarded)
	Txn   bool  // part of a committed transaction
	// DeliveryCount is the message's delivery count after the event
	// (1-based, as receivers see it).
	DeliveryCount uint32
	LockToken     [16]byte
	// Until is the lock's expiry (Delivered, Renewed) or the scheduled
	// enqueue time (Enqueued).
	Until int64
	// By names the link: the sender's (Enqueued) or the receiver's that
	// holds or held the lock ("link L on connection C").
	By                  string
	Reason, Description string
	// Peer is the other entity: the target of a forward or routing with
	// PeerSeq its sequence number there; the source of an enqueue by
	// forwarding or fan-out with PeerSeq its number there.
	Peer    string
	PeerSeq int64
}

// Log is the bounded history of every entity. Safe for concurrent use. A
// nil *Log records nothing.
type Log struct {
	cfg Config

	mu             sync.Mutex
	ents           map[string]*entity
	oldest, newest *msg
	bytes          int64
	evicted        uint64 // messages forgotten to stay within a bound
}

type entity struct {
	key, name      string
	bySeq          map[int64]*msg
	byID           map[string]*msg // the newest with the id; more through idNext
	oldest, newest *msg
}

type msg struct {
	ent          *entity
	seq          int64
	id           string
	touched      int64
	events       []Event
	omitted      int
	bytes        int64
	prev, next   *msg // global, oldest first
	eprev, enext *msg // the entity's, oldest first
	idNext       *msg // the next older message of the entity with the same id
}

// inlineEvents is the room for events a message record comes with.
const inlineEvents = 3

// Fixed costs beyond the strings: a message record with its map
// entries and its events' slice header, an event, an entity.
const (
	msgCost    = int64(unsafe.Sizeof(msg{})) + 96
	eventCost  = int64(unsafe.Sizeof(Event{}))
	entityCost = int64(unsafe.Sizeof(entity{})) + 256
)

// New returns a log bounded by cfg, or nil if cfg.Mode is Off.
func New(cfg Config) *Log {
	if cfg.Mode == Off {
		return nil
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.MaxMessagesPerEntity <= 0 {
		cfg.MaxMessagesPerEntity = DefaultMaxMessagesPerEntity
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	cfg.MaxBytes = max(cfg.MaxBytes, MinMaxBytes)
	if cfg.MaxEventsPerMessage <= 1 {
		cfg.MaxEventsPerMessage = DefaultMaxEventsPerMessage
	}
	return &Log{cfg: cfg, ents: make(map[string]*entity)}
}

// Config is the log's configuration, defaults filled in.
func (l *Log) Config() Config { return l.cfg }

// Keeps reports whether the log keeps the message seq (sampling): callers
// may skip building an event for one it does not.
func (l *Log) Keeps(seq int64) bool {
	return l.cfg.Mode == On || seq%l.cfg.SampleEvery == 0
}

// Record adds ev to the history of message seq of entity name (a queue or
// topic name or a subscription's path; case does not matter). id is the
// message id if known here ("" otherwise: an earlier event gave it).
func (l *Log) Record(name string, seq int64, id string, ev Event) {
	if !l.Keeps(seq) {
		return
	}
	ev.By, ev.Reason, ev.Description, ev.Peer = cut(ev.By), cut(ev.Reason), cut(ev.Description), cut(ev.Peer)
	key := strings.ToLower(name)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(ev.At)
	e := l.ents[key]
	if e == nil {
		e = &entity{key: strings.Clone(key), name: strings.Clone(name), bySeq: make(map[int64]*msg)}
		l.ents[e.key] = e
		l.bytes += entityCost + int64(len(e.key)+len(e.name))
	}
	m := e.bySeq[seq]
	if m == nil {
		// The record and room for the common life (enqueued, delivered,
		// completed) in one allocation.
		v := new(struct {
			m  msg
			ev [inlineEvents]Event
		})
		m = &v.m
		*m = msg{ent: e, seq: seq, events: v.ev[:0], bytes: msgCost + inlineEvents*eventCost}
		e.bySeq[seq] = m
		l.bytes += m.bytes
	} else {
		l.unlinkLocked(m)
	}
	if m.id == "" && id != "" {
		m.id = strings.Clone(cut(id))
		m.bytes += int64(len(m.id))
		l.bytes += int64(len(m.id))
		if e.byID == nil {
			e.byID = make(map[string]*msg)
		}
		m.idNext = e.byID[m.id]
		e.byID[m.id] = m
	}
	if len(m.events) >= l.cfg.MaxEventsPerMessage {
		d := stringBytes(&m.events[1])
		m.events = append(m.events[:1], m.events[2:]...)
		m.omitted++
		m.bytes -= d
		l.bytes -= d
	}
	c := cap(m.events)
	m.events = append(m.events, ev)
	// A grown events' array is counted whole at its capacity (the old
	// one is not subtracted: an upper bound).
	d := stringBytes(&ev)
	if cap(m.events) != c {
		d += int64(cap(m.events)) * eventCost
	}
	m.bytes += d
	l.bytes += d
	m.touched = ev.At
	l.linkLocked(m)
	for n := len(e.bySeq); n > l.cfg.MaxMessagesPerEntity; n-- {
		l.dropLocked(e.oldest)
	}
	for l.bytes > l.cfg.MaxBytes && l.oldest != nil {
		l.dropLocked(l.oldest)
	}
}

// stringBytes is what ev's strings cost (counted even when shared with
// another event: an upper bound).
func stringBytes(ev *Event) int64 {
	return int64(len(ev.By) + len(ev.Reason) + len(ev.Description) + len(ev.Peer))
}

// cut bounds s to maxString bytes at a character boundary.
func cut(s string) string {
	if len(s) <= maxString {
		return s
	}
	n := maxString
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// expireLocked forgets the messages untouched for longer than the window.
func (l *Log) expireLocked(now int64) {
	limit := now - int64(l.cfg.Window)
	for l.oldest != nil && l.oldest.touched < limit {
		l.dropLocked(l.oldest)
	}
}

// linkLocked appends m as the newest, globally and in its entity.
func (l *Log) linkLocked(m *msg) {
	m.prev, m.next = l.newest, nil
	if l.newest != nil {
		l.newest.next = m
	} else {
		l.oldest = m
	}
	l.newest = m
	e := m.ent
	m.eprev, m.enext = e.newest, nil
	if e.newest != nil {
		e.newest.enext = m
	} else {
		e.oldest = m
	}
	e.newest = m
}

// unlinkLocked takes m out of both lists.
func (l *Log) unlinkLocked(m *msg) {
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		l.oldest = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		l.newest = m.prev
	}
	e := m.ent
	if m.eprev != nil {
		m.eprev.enext = m.enext
	} else {
		e.oldest = m.enext
	}
	if m.enext != nil {
		m.enext.eprev = m.eprev
	} else {
		e.newest = m.eprev
	}
	m.prev, m.next, m.eprev, m.enext = nil, nil, nil, nil
}

// dropLocked forgets m (and its entity once empty).
func (l *Log) dropLocked(m *msg) {
	l.unlinkLocked(m)
	e := m.ent
	delete(e.bySeq, m.seq)
	if m.id != "" {
		if e.byID[m.id] == m {
			if m.idNext == nil {
				delete(e.byID, m.id)
			} else {
				e.byID[m.id] = m.idNext
			}
		} else {
			for x := e.byID[m.id]; x != nil; x = x.idNext {
				if x.idNext == m {
					x.idNext = m.idNext
					break
				}
			}
		}
		m.idNext = nil
	}
	l.bytes -= m.bytes
	l.evicted++
	if len(e.bySeq) == 0 {
		delete(l.ents, e.key)
		l.bytes -= entityCost + int64(len(e.key)+len(e.name))
	}
}

// Stats is what the log holds.
type Stats struct {
	Entities, Messages int
	Bytes              int64 // as counted against MaxBytes
	Evicted            uint64
}

// Stats reports the log's size.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Entities: len(l.ents), Bytes: l.bytes, Evicted: l.evicted}
	for _, e := range l.ents {
		s.Messages += len(e.bySeq)
	}
	return s
}
