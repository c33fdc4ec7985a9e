package filter

import (
	"encoding/hex"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/busbarmq/busbar/internal/message"
)

// Env is what a filter or action is evaluated against: the message as the
// sender supplied it, and the system values the broker keeps beside it.
// Msg may be nil, which reads as a message with nothing set.
type Env struct {
	Msg *message.Message
	Sys SystemProps
}

// SystemProps are the broker-assigned values that sys. names can read but
// message.Message does not hold. A zero time, a zero LockToken, an empty
// DeadLetterSource and a zero TimeToLive read as NULL; the integer fields
// always read as their value.
type SystemProps struct {
	SequenceNumber         int64
	EnqueuedSequenceNumber int64
	EnqueuedTime           time.Time
	// ScheduledEnqueueTime, when zero, falls back to the message's
	// x-opt-scheduled-enqueue-time annotation.
	ScheduledEnqueueTime time.Time
	ExpiresAt            time.Time
	// TimeToLive is the effective time to live (the entity default when
	// the sender gave none); when zero, the message's own TTL is read.
	TimeToLive       time.Duration
	LockedUntil      time.Time
	LockToken        message.UUID
	DeliveryCount    int32
	Size             int64
	State            MessageState
	DeadLetterSource string
	ForcePersistence bool
}

// MessageState is the BrokeredMessage.State value; sys.State reads as its
// name ('Active', 'Deferred', 'Scheduled').
type MessageState uint8

// Message states, numbered as x-opt-message-state.
const (
	StateActive MessageState = iota
	StateDeferred
	StateScheduled
)

// String returns the .NET enum name.
func (s MessageState) String() string {
	switch s {
	case StateActive:
		return "Active"
	case StateDeferred:
		return "Deferred"
	case StateScheduled:
		return "Scheduled"
	}
	return strconv.Itoa(int(s))
}

// Message annotations that back system properties.
const (
	annPartitionKey     = "x-opt-partition-key"
	annViaPartitionKey  = "x-opt-via-partition-key"
	annScheduledEnqueue = "x-opt-scheduled-enqueue-time"
)

// sysProp identifies a system property. Names are the legacy
// BrokeredMessage property names, which the rule language uses.
type sysProp uint8

const (
	sysInvalid sysProp = iota
	sysMessageID
	sysCorrelationID
	sysTo
	sysReplyTo
	sysReplyToSessionID
	sysSessionID
	sysLabel
	sysContentType
	sysPartitionKey
	sysViaPartitionKey
	sysSequenceNumber
	sysEnqueuedSequenceNumber
	sysEnqueuedTimeUtc
	sysScheduledEnqueueTimeUtc
	sysExpiresAtUtc
	sysTimeToLive
	sysDeliveryCount
	sysLockedUntilUtc
	sysLockToken
	sysDeadLetterSource
	sysSize
	sysState
	sysForcePersistence
	numSysProps
)

var sysProps = [numSysProps]struct {
	name     string
	settable bool // SET and REMOVE may change it
}{
	sysMessageID:               {"MessageId", true},
	sysCorrelationID:           {"CorrelationId", true},
	sysTo:                      {"To", true},
	sysReplyTo:                 {"ReplyTo", true},
	sysReplyToSessionID:        {"ReplyToSessionId", true},
	sysSessionID:               {"SessionId", true},
	sysLabel:                   {"Label", true},
	sysContentType:             {"ContentType", true},
	sysPartitionKey:            {"PartitionKey", true},
	sysViaPartitionKey:         {"ViaPartitionKey", true},
	sysSequenceNumber:          {"SequenceNumber", false},
	sysEnqueuedSequenceNumber:  {"EnqueuedSequenceNumber", false},
	sysEnqueuedTimeUtc:         {"EnqueuedTimeUtc", false},
	sysScheduledEnqueueTimeUtc: {"ScheduledEnqueueTimeUtc", true},
	sysExpiresAtUtc:            {"ExpiresAtUtc", false},
	sysTimeToLive:              {"TimeToLive", true},
	sysDeliveryCount:           {"DeliveryCount", false},
	sysLockedUntilUtc:          {"LockedUntilUtc", false},
	sysLockToken:               {"LockToken", false},
	sysDeadLetterSource:        {"DeadLetterSource", false},
	sysSize:                    {"Size", false},
	sysState:                   {"State", false},
	sysForcePersistence:        {"ForcePersistence", false},
}

// lookupSys returns the system property with the given name (ASCII
// case-insensitive), or sysInvalid. Subject is accepted as an alias of
// Label, the name the service documents.
func lookupSys(name string) sysProp {
	for p := sysInvalid + 1; p < numSysProps; p++ {
		if asciiEqualFold(name, sysProps[p].name) {
			return p
		}
	}
	if asciiEqualFold(name, "Subject") {
		return sysLabel
	}
	return sysInvalid
}

// SystemPropertyNames returns the names sys. accepts, in canonical form.
func SystemPropertyNames() []string {
	names := make([]string, 0, numSysProps-1)
	for p := sysInvalid + 1; p < numSysProps; p++ {
		names = append(names, sysProps[p].name)
	}
	return names
}

var (
	emptyMessage message.Message
	emptyEnv     Env
)

func (env *Env) msg() *message.Message {
	if env.Msg == nil {
		return &emptyMessage
	}
	return env.Msg
}

// sysValue reads a system property.
func (env *Env) sysValue(p sysProp) value {
	m := env.msg()
	switch p {
	case sysMessageID:
		return idValue(m.MessageID)
	case sysCorrelationID:
		return idValue(m.CorrelationID)
	case sysTo:
		return optString(m.To)
	case sysReplyTo:
		return optString(m.ReplyTo)
	case sysReplyToSessionID:
		return optString(m.ReplyToSessionID)
	case sysSessionID:
		return optString(m.SessionID)
	case sysLabel:
		return optString(m.Subject)
	case sysContentType:
		return optString(m.ContentType)
	case sysPartitionKey:
		return annString(m.Annotations, annPartitionKey)
	case sysViaPartitionKey:
		return annString(m.Annotations, annViaPartitionKey)
	case sysSequenceNumber:
		return intValue(env.Sys.SequenceNumber)
	case sysEnqueuedSequenceNumber:
		return intValue(env.Sys.EnqueuedSequenceNumber)
	case sysEnqueuedTimeUtc:
		return optTime(env.Sys.EnqueuedTime)
	case sysScheduledEnqueueTimeUtc:
		if !env.Sys.ScheduledEnqueueTime.IsZero() {
			return timeValue(env.Sys.ScheduledEnqueueTime)
		}
		if t, ok := m.Annotations[annScheduledEnqueue].(time.Time); ok {
			return optTime(t)
		}
		return nullValue
	case sysExpiresAtUtc:
		return optTime(env.Sys.ExpiresAt)
	case sysTimeToLive:
		switch {
		case env.Sys.TimeToLive != 0:
			return spanValue(env.Sys.TimeToLive)
		case m.TTL != 0:
			return spanValue(m.TTL)
		}
		return nullValue
	case sysDeliveryCount:
		return intValue(int64(env.Sys.DeliveryCount))
	case sysLockedUntilUtc:
		return optTime(env.Sys.LockedUntil)
	case sysLockToken:
		if env.Sys.LockToken == (message.UUID{}) {
			return nullValue
		}
		return guidValue(env.Sys.LockToken)
	case sysDeadLetterSource:
		return optString(env.Sys.DeadLetterSource)
	case sysSize:
		return intValue(env.Sys.Size)
	case sysState:
		return stringValue(env.Sys.State.String())
	case sysForcePersistence:
		return boolValue(env.Sys.ForcePersistence)
	}
	return nullValue
}

func optString(s string) value {
	if s == "" {
		return nullValue
	}
	return stringValue(s)
}

func optTime(t time.Time) value {
	if t.IsZero() {
		return nullValue
	}
	return timeValue(t)
}

func annString(ann map[string]any, key string) value {
	switch v := ann[key].(type) {
	case string:
		return optString(v)
	case message.Symbol:
		return optString(string(v))
	}
	return nullValue
}

// idValue reads a MessageId or CorrelationId, which the rule language sees
// as a string whatever AMQP type the sender used: a uuid prints in the .NET
// Guid form (lower-case, hyphenated), a ulong in decimal and binary in
// lower-case hex.
func idValue(id any) value {
	s, ok := idString(id)
	if !ok {
		return nullValue
	}
	return stringValue(s)
}

func idString(id any) (string, bool) {
	switch v := id.(type) {
	case string:
		return v, v != ""
	case message.Symbol:
		return string(v), v != ""
	case message.UUID:
		return formatUUID(v), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	case []byte:
		return hex.EncodeToString(v), len(v) > 0
	}
	return "", false
}

func formatUUID(u message.UUID) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// lookupUser finds a user property by name. Property names are
// case-insensitive: an exact match wins, otherwise the case-insensitive
// match with the smallest key (so the choice is deterministic). It does not
// allocate.
func lookupUser(props map[string]any, name string) (key string, val any, ok bool) {
	if v, ok := props[name]; ok {
		return name, v, true
	}
	for k, v := range props {
		if equalFold(k, name) && (!ok || k < key) {
			key, val, ok = k, v, true
		}
	}
	return key, val, ok
}

// equalFold reports whether s and t are equal after mapping each character
// to upper case, as .NET's OrdinalIgnoreCase compares: unlike
// strings.EqualFold it does not equate the Kelvin sign with K.
func equalFold(s, t string) bool {
	i := 0
	for ; i < len(s) && i < len(t); i++ {
		a, b := s[i], t[i]
		if a|b >= utf8.RuneSelf {
			goto unicode
		}
		if a == b {
			continue
		}
		if 'a' <= a && a <= 'z' {
			a -= 'a' - 'A'
		}
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return len(s) == len(t)

unicode:
	s, t = s[i:], t[i:]
	for s != "" && t != "" {
		a, n := utf8.DecodeRuneInString(s)
		b, m := utf8.DecodeRuneInString(t)
		if a != b && unicode.ToUpper(a) != unicode.ToUpper(b) {
			return false
		}
		s, t = s[n:], t[m:]
	}
	return s == "" && t == ""
}
