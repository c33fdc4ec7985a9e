package history

import (
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Message is the history of one message of one entity, as the admin API
// shows it (JSON).
type Message struct {
	Entity         string `json:"entity"`
	SequenceNumber int64  `json:"sequenceNumber"`
	MessageID      string `json:"messageId,omitempty"`
	// Omitted counts events dropped from the middle (MaxEventsPerMessage).
	Omitted int         `json:"omittedEvents,omitempty"`
	Events  []EventView `json:"events"`
}

// Answer is the admin API's answer to GET /$history (JSON): the
// histories of the message asked for, by sequence number or message id,
// with those of its copies and forwarding hops.
type Answer struct {
	Entity         string    `json:"entity"`
	SequenceNumber int64     `json:"sequenceNumber,omitempty"`
	MessageID      string    `json:"messageId,omitempty"`
	Now            string    `json:"now"`
	Mode           string    `json:"mode"`
	Messages       []Message `json:"messages"`
}

// EventView is an Event as the admin API shows it.
type EventView struct {
	Time          time.Time  `json:"time"`
	Kind          string     `json:"kind"`
	SubQueue      string     `json:"subQueue,omitempty"`
	MovedTo       string     `json:"movedTo,omitempty"`
	Gone          bool       `json:"gone,omitempty"`
	Transaction   bool       `json:"transaction,omitempty"`
	DeliveryCount uint32     `json:"deliveryCount,omitempty"`
	LockToken     string     `json:"lockToken,omitempty"`
	LockedUntil   *time.Time `json:"lockedUntil,omitempty"`
	ScheduledFor  *time.Time `json:"scheduledEnqueueTime,omitempty"`
	Link          string     `json:"link,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	Description   string     `json:"description,omitempty"`
	To            string     `json:"to,omitempty"`
	From          string     `json:"from,omitempty"`
	PeerSeq       int64      `json:"peerSequenceNumber,omitempty"`
}

var subNames = [...]string{"", "$DeadLetterQueue", "$Transfer/$DeadLetterQueue"}

func subName(s uint8) string {
	if int(s) < len(subNames) {
		return subNames[s]
	}
	return "?"
}

func view(ev *Event) EventView {
	v := EventView{
		Time:          time.Unix(0, ev.At).UTC(),
		Kind:          ev.Kind.String(),
		SubQueue:      subName(ev.Sub),
		Gone:          ev.Gone,
		Transaction:   ev.Txn,
		DeliveryCount: ev.DeliveryCount,
		Link:          ev.By,
		Reason:        ev.Reason,
		Description:   ev.Description,
		PeerSeq:       ev.PeerSeq,
	}
	if ev.ToSub != ev.Sub {
		v.MovedTo = subName(ev.ToSub)
		if v.MovedTo == "" {
			v.MovedTo = "main"
		}
	}
	if ev.LockToken != ([16]byte{}) {
		v.LockToken = uuid.UUID(ev.LockToken).String()
	}
	if ev.Until != 0 {
		t := time.Unix(0, ev.Until).UTC()
		if ev.Kind == Enqueued {
			v.ScheduledFor = &t
		} else {
			v.LockedUntil = &t
		}
	}
	switch ev.Kind {
	case Forwarded, Routed:
		v.To = ev.Peer
	default:
		v.From = ev.Peer
	}
	return v
}

func (m *msg) view() Message {
	out := Message{Entity: m.ent.name, SequenceNumber: m.seq, MessageID: m.id, Omitted: m.omitted,
		Events: make([]EventView, len(m.events))}
	for i := range m.events {
		out.Events[i] = view(&m.events[i])
	}
	return out
}

// maxTrace bounds the messages one lookup returns (a message and the
// copies and forwards it led to).
const maxTrace = 64

// BySeq is the history of message seq of entity, followed by the
// histories it leads to (its copies in subscriptions, the entities it
// was forwarded to), at most maxTrace in all; nil if none is kept. now
// is the broker clock's time: what fell out of the window is forgotten
// first.
func (l *Log) BySeq(now time.Time, entity string, seq int64) []Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(now.UnixNano())
	e := l.ents[strings.ToLower(entity)]
	if e == nil || e.bySeq[seq] == nil {
		return nil
	}
	return l.traceLocked([]*msg{e.bySeq[seq]})
}

// ByMessageID is BySeq for every kept message of entity with message id
// id.
func (l *Log) ByMessageID(now time.Time, entity, id string) []Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(now.UnixNano())
	e := l.ents[strings.ToLower(entity)]
	if e == nil || e.byID[id] == nil {
		return nil
	}
	var start []*msg
	for m := e.byID[id]; m != nil; m = m.idNext {
		start = append(start, m)
	}
	slices.Reverse(start) // oldest first
	return l.traceLocked(start)
}

// traceLocked returns the histories of start and of the messages their
// Routed and Forwarded events name, breadth first, each once.
func (l *Log) traceLocked(start []*msg) []Message {
	seen := make(map[*msg]bool)
	queue := start
	var out []Message
	for len(queue) > 0 && len(out) < maxTrace {
		m := queue[0]
		queue = queue[1:]
		if seen[m] {
			continue
		}
		seen[m] = true
		out = append(out, m.view())
		for i := range m.events {
			ev := &m.events[i]
			if (ev.Kind != Routed && ev.Kind != Forwarded) || ev.PeerSeq == 0 {
				continue
			}
			if e := l.ents[strings.ToLower(ev.Peer)]; e != nil {
				if n := e.bySeq[ev.PeerSeq]; n != nil {
					queue = append(queue, n)
				}
			}
		}
	}
	return out
}
