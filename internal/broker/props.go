package broker

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/busbarmq/busbar/internal/names"
)

// Infinite is the duration that means "never" for DefaultMessageTimeToLive
// and AutoDeleteOnIdle: Service Bus's TimeSpan.MaxValue (~29,000 years) does
// not fit a time.Duration (~292 years), so every duration at or above this
// value is treated as infinite. The admin layer clamps larger wire values.
const Infinite = time.Duration(math.MaxInt64)

// EntityStatus is an entity's Status property.
type EntityStatus string

// The writeable statuses.
const (
	StatusActive          EntityStatus = "Active"
	StatusDisabled        EntityStatus = "Disabled"
	StatusSendDisabled    EntityStatus = "SendDisabled"
	StatusReceiveDisabled EntityStatus = "ReceiveDisabled"
)

func (s EntityStatus) canSend() bool    { return s == StatusActive || s == StatusReceiveDisabled }
func (s EntityStatus) canReceive() bool { return s == StatusActive || s == StatusSendDisabled }

// Limits and defaults (docs/wire/management-plane.md §1.9 and §4).
const (
	DefaultLockDuration            = time.Minute
	MinLockDuration                = 5 * time.Second
	MaxLockDuration                = 5 * time.Minute
	DefaultMaxSizeInMegabytes      = 1024
	MaxMaxSizeInMegabytes          = 81920
	DefaultDuplicateWindow         = 10 * time.Minute
	MinDuplicateWindow             = 20 * time.Second
	MaxDuplicateWindow             = 7 * 24 * time.Hour
	MinMessageTimeToLive           = time.Second
	DefaultMaxDeliveryCount        = 10
	MinAutoDeleteOnIdle            = 5 * time.Minute
	DefaultMaxMessageSizeInKB      = 256
	MaxMaxMessageSizeInKB          = 102400
	MaxUserMetadataLength          = 1024
	MaxAuthorizationRules          = 12
	MaxEntityNameLength            = names.MaxEntityLength
	MaxHeaderSize                  = 64 * 1024 // header + all properties of one message
	MaxMessageIDLength             = 128
	MaxSessionIDLength             = 128
	ScheduledEnqueueTimeAnnotation = "x-opt-scheduled-enqueue-time"
)

// AuthorizationRule is an entity-level shared access rule, stored and
// echoed for the admin layer (the broker does not authenticate).
type AuthorizationRule struct {
	KeyName      string    `json:"keyName"`
	PrimaryKey   string    `json:"primaryKey,omitempty"`
	SecondaryKey string    `json:"secondaryKey,omitempty"`
	Rights       []string  `json:"rights,omitempty"` // Manage, Send, Listen
	CreatedTime  time.Time `json:"created,omitzero"`
	ModifiedTime time.Time `json:"modified,omitzero"`
}

// QueueProperties are a queue's settable properties (the QueueDescription
// of the management API) with their Service Bus types. Zero values are not
// defaults: start from DefaultQueueProperties.
type QueueProperties struct {
	// LockDuration is how long a peek-lock lasts: 5 s … 5 min, default 1 min.
	LockDuration time.Duration `json:"lockDuration"`
	// MaxSizeInMegabytes caps the total size of the queue's messages
	// (every sub-queue): 1 … 81920, default 1024. (Azure Standard accepts
	// only 1024…5120 in steps of 1024; smaller values are allowed here so
	// tests and small deployments can have small quotas.)
	MaxSizeInMegabytes int64 `json:"maxSizeInMegabytes"`
	// RequiresDuplicateDetection turns duplicate detection on. Immutable.
	RequiresDuplicateDetection bool `json:"requiresDuplicateDetection"`
	// RequiresSession makes the queue session-enabled. Immutable.
	RequiresSession bool `json:"requiresSession"`
	// DefaultMessageTimeToLive is the TTL of messages that set none, and
	// the ceiling of those that do: ≥ 1 s, default Infinite.
	DefaultMessageTimeToLive time.Duration `json:"defaultMessageTimeToLive"`
	// DeadLetteringOnMessageExpiration moves expired messages to the DLQ
	// instead of dropping them. Default false.
	DeadLetteringOnMessageExpiration bool `json:"deadLetteringOnMessageExpiration"`
	// DuplicateDetectionHistoryTimeWindow: 20 s … 7 days, default 10 min.
	DuplicateDetectionHistoryTimeWindow time.Duration `json:"duplicateDetectionHistoryTimeWindow"`
	// MaxDeliveryCount: ≥ 1, default 10.
	MaxDeliveryCount int32 `json:"maxDeliveryCount"`
	// EnableBatchedOperations is echoed only. Default true.
	EnableBatchedOperations bool `json:"enableBatchedOperations"`
	// AutoDeleteOnIdle deletes the queue after that long without use:
	// ≥ 5 min, default Infinite (never).
	AutoDeleteOnIdle time.Duration `json:"autoDeleteOnIdle"`
	// Status: Active (default), Disabled, SendDisabled, ReceiveDisabled.
	Status EntityStatus `json:"status"`
	// ForwardTo and ForwardDeadLetteredMessagesTo name an existing queue or
	// topic (an entity path, not a URI; the admin layer resolves URIs),
	// never the queue itself, and ForwardTo must not close a loop nor be set
	// on a session-enabled queue. The queue's messages (its dead-lettered
	// messages) are auto-forwarded there: see forward.go.
	ForwardTo                     string `json:"forwardTo,omitempty"`
	ForwardDeadLetteredMessagesTo string `json:"forwardDeadLetteredMessagesTo,omitempty"`
	// ForwardToAddress and ForwardDeadLetteredMessagesToAddress keep a
	// forwarding target a management client gave as an absolute URI
	// (https://ns/q, sb://ns/q) as it was written, for the admin layer to
	// echo back as Service Bus does; routing uses the two names above.
	ForwardToAddress                     string `json:"forwardToAddress,omitempty"`
	ForwardDeadLetteredMessagesToAddress string `json:"forwardDeadLetteredMessagesToAddress,omitempty"`
	// UserMetadata: at most 1024 characters.
	UserMetadata string `json:"userMetadata,omitempty"`
	// EnablePartitioning is echoed only (no partitions here). Immutable.
	EnablePartitioning bool `json:"enablePartitioning"`
	// SupportOrdering is echoed only. Default true.
	SupportOrdering bool `json:"supportOrdering"`
	// MaxMessageSizeInKilobytes caps one message: 1 … 102400 KB, default
	// 256 (Standard).
	MaxMessageSizeInKilobytes int64 `json:"maxMessageSizeInKilobytes"`
	// EnableExpress and IsAnonymousAccessible are legacy, echoed only.
	EnableExpress         bool `json:"enableExpress"`
	IsAnonymousAccessible bool `json:"isAnonymousAccessible"`
	// AuthorizationRules: at most 12.
	AuthorizationRules []AuthorizationRule `json:"authorizationRules,omitempty"`
}

// DefaultQueueProperties returns the service defaults.
func DefaultQueueProperties() QueueProperties {
	return QueueProperties{
		LockDuration:                        DefaultLockDuration,
		MaxSizeInMegabytes:                  DefaultMaxSizeInMegabytes,
		DefaultMessageTimeToLive:            Infinite,
		DuplicateDetectionHistoryTimeWindow: DefaultDuplicateWindow,
		MaxDeliveryCount:                    DefaultMaxDeliveryCount,
		EnableBatchedOperations:             true,
		AutoDeleteOnIdle:                    Infinite,
		Status:                              StatusActive,
		SupportOrdering:                     true,
		MaxMessageSizeInKilobytes:           DefaultMaxMessageSizeInKB,
	}
}

func invalidProp(name, format string, args ...any) *Error {
	e := errorf(KindInvalidArgument, format, args...)
	e.Msg = "invalid " + name + ": " + e.Msg
	return e
}

// Validate checks every property against its Service Bus range. The error
// (KindInvalidArgument) names the property and the allowed range.
func (p QueueProperties) Validate() error {
	return firstError(
		checkLockDuration(p.LockDuration),
		checkMaxSize(p.MaxSizeInMegabytes),
		checkDuplicateWindow(p.DuplicateDetectionHistoryTimeWindow),
		checkDefaultTTL(p.DefaultMessageTimeToLive),
		checkMaxDeliveryCount(p.MaxDeliveryCount),
		checkAutoDeleteOnIdle(p.AutoDeleteOnIdle),
		validateStatus(p.Status),
		checkUserMetadata(p.UserMetadata),
		checkMaxMessageSize(p.MaxMessageSizeInKilobytes),
		checkAuthorizationRules(p.AuthorizationRules),
		checkForwardTargets(p.ForwardTo, p.ForwardDeadLetteredMessagesTo),
	)
}

// The checks of the properties queues, topics and subscriptions share,
// one per property, each nil when the value is in range.

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkLockDuration(d time.Duration) error {
	if d < MinLockDuration || d > MaxLockDuration {
		return invalidProp("LockDuration", "%v is outside the allowed range %v … %v", d, MinLockDuration, MaxLockDuration)
	}
	return nil
}

func checkMaxSize(mb int64) error {
	if mb < 1 || mb > MaxMaxSizeInMegabytes {
		return invalidProp("MaxSizeInMegabytes", "%d is outside the allowed range 1 … %d", mb, MaxMaxSizeInMegabytes)
	}
	return nil
}

func checkDuplicateWindow(d time.Duration) error {
	if d < MinDuplicateWindow || d > MaxDuplicateWindow {
		return invalidProp("DuplicateDetectionHistoryTimeWindow", "%v is outside the allowed range %v … %v (7 days)",
			d, MinDuplicateWindow, MaxDuplicateWindow)
	}
	return nil
}

func checkDefaultTTL(d time.Duration) error {
	if d < MinMessageTimeToLive {
		return invalidProp("DefaultMessageTimeToLive", "%v is below the minimum %v", d, MinMessageTimeToLive)
	}
	return nil
}

func checkMaxDeliveryCount(n int32) error {
	if n < 1 {
		return invalidProp("MaxDeliveryCount", "%d is below the minimum 1", n)
	}
	return nil
}

func checkAutoDeleteOnIdle(d time.Duration) error {
	if d < MinAutoDeleteOnIdle {
		return invalidProp("AutoDeleteOnIdle", "%v is below the minimum %v", d, MinAutoDeleteOnIdle)
	}
	return nil
}

func validateStatus(s EntityStatus) error {
	switch s {
	case StatusActive, StatusDisabled, StatusSendDisabled, StatusReceiveDisabled:
		return nil
	}
	return invalidProp("Status", "%q is not one of Active, Disabled, SendDisabled, ReceiveDisabled", s)
}

func checkUserMetadata(s string) error {
	if n := utf8.RuneCountInString(s); n > MaxUserMetadataLength {
		return invalidProp("UserMetadata", "%d characters exceed the maximum %d", n, MaxUserMetadataLength)
	}
	return nil
}

func checkMaxMessageSize(kb int64) error {
	if kb < 1 || kb > MaxMaxMessageSizeInKB {
		return invalidProp("MaxMessageSizeInKilobytes", "%d is outside the allowed range 1 … %d", kb, MaxMaxMessageSizeInKB)
	}
	return nil
}

func checkAuthorizationRules(rules []AuthorizationRule) error {
	if len(rules) > MaxAuthorizationRules {
		return invalidProp("AuthorizationRules", "%d rules exceed the maximum %d", len(rules), MaxAuthorizationRules)
	}
	return nil
}

func checkForwardTargets(to, dlqTo string) error {
	for _, f := range []struct{ name, v string }{{"ForwardTo", to}, {"ForwardDeadLetteredMessagesTo", dlqTo}} {
		if f.v == "" {
			continue
		}
		if err := names.CheckExisting(names.Entity, f.v); err != nil {
			return invalidProp(f.name, "%s", err)
		}
	}
	return nil
}

// checkImmutable refuses changes to the properties that cannot change
// after creation.
func checkImmutable(old, p QueueProperties) error {
	if old.RequiresSession != p.RequiresSession {
		return errorf(KindNotAllowed, "The value for the RequiresSession property of an existing Queue cannot be changed.")
	}
	return checkImmutableCommon("Queue", old.RequiresDuplicateDetection != p.RequiresDuplicateDetection,
		old.EnablePartitioning != p.EnablePartitioning)
}

// checkImmutableCommon refuses a change of a queue's or topic's
// duplicate detection (dedup) or partitioning (part).
func checkImmutableCommon(kind string, dedup, part bool) error {
	if dedup {
		return errorf(KindNotAllowed, "The value for the RequiresDuplicateDetection property of an existing %s cannot be changed.", kind)
	}
	if part {
		return errorf(KindNotAllowed, "Partitioning cannot be changed for %s. EnablePartitioning is fixed when the %s is created.", kind, strings.ToLower(kind))
	}
	return nil
}

// ValidateEntityName checks a name for a new queue or topic against
// Service Bus's naming rule (package names). Its error is
// KindInvalidArgument and states the rule.
func ValidateEntityName(name string) error {
	return nameError(names.Check(names.Entity, name))
}

// validateExistingName checks a name that looks up an entity, which may
// have been created under the looser rule of earlier versions
// (names.CheckExisting): those stay reachable.
func validateExistingName(k names.Kind, name string) error {
	return nameError(names.CheckExisting(k, name))
}

// nameError is a names error as a broker error (KindInvalidArgument).
func nameError(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: KindInvalidArgument, Msg: err.Error()}
}

// SubQueue names one of an entity's sub-queues.
type SubQueue uint8

// The sub-queues of a queue (and, later, of a subscription).
const (
	// SubQueueMain is the entity itself.
	SubQueueMain SubQueue = iota
	// SubQueueDeadLetter is "<entity>/$DeadLetterQueue".
	SubQueueDeadLetter
	// SubQueueTransferDeadLetter is "<entity>/$Transfer/$DeadLetterQueue".
	SubQueueTransferDeadLetter
	numSubQueues
)

const (
	dlqSuffix  = "/$DeadLetterQueue"
	tdlqSuffix = "/$Transfer/$DeadLetterQueue"
)

func (s SubQueue) String() string {
	switch s {
	case SubQueueMain:
		return "main"
	case SubQueueDeadLetter:
		return "$DeadLetterQueue"
	case SubQueueTransferDeadLetter:
		return "$Transfer/$DeadLetterQueue"
	}
	return "SubQueue(?)"
}

// Path is a parsed entity path: an entity name, for a subscription its
// name, and a sub-queue.
//
//	queue[/$DeadLetterQueue | /$Transfer/$DeadLetterQueue]
//	topic
//	topic/Subscriptions/sub[/$DeadLetterQueue | /$Transfer/$DeadLetterQueue]
type Path struct {
	// Entity is the queue or topic name.
	Entity string
	// Subscription is the subscription name; empty for a queue or topic.
	Subscription string
	SubQueue     SubQueue
}

// String formats p back into its canonical path form.
func (p Path) String() string {
	s := p.Entity
	if p.Subscription != "" {
		s += "/" + subscriptionsSegment + "/" + p.Subscription
	}
	switch p.SubQueue {
	case SubQueueDeadLetter:
		return s + dlqSuffix
	case SubQueueTransferDeadLetter:
		return s + tdlqSuffix
	}
	return s
}

// ParsePath splits "queue", "queue/$DeadLetterQueue",
// "queue/$Transfer/$DeadLetterQueue", "topic", "topic/Subscriptions/sub"
// and the sub-queue paths of a subscription (the "Subscriptions" segment
// and the suffixes are matched case-insensitively) and validates the
// names as names of existing entities (names.CheckExisting). Whether the
// entity is a queue or a topic is not known here.
func ParsePath(s string) (Path, error) {
	p := Path{Entity: s}
	switch {
	case hasSuffixFold(s, tdlqSuffix):
		p = Path{Entity: s[:len(s)-len(tdlqSuffix)], SubQueue: SubQueueTransferDeadLetter}
	case hasSuffixFold(s, dlqSuffix):
		p = Path{Entity: s[:len(s)-len(dlqSuffix)], SubQueue: SubQueueDeadLetter}
	}
	if i := indexSubscriptions(p.Entity); i >= 0 {
		p.Subscription = p.Entity[i+len(subscriptionsSegment)+2:]
		p.Entity = p.Entity[:i]
		if err := validateExistingName(names.Subscription, p.Subscription); err != nil {
			return Path{}, err
		}
	}
	if err := validateExistingName(names.Entity, p.Entity); err != nil {
		return Path{}, err
	}
	return p, nil
}

// indexSubscriptions returns the index of the first "/Subscriptions/"
// (case-insensitively) in s, or -1.
func indexSubscriptions(s string) int {
	const seg = "/" + subscriptionsSegment + "/"
	for i := 0; i+len(seg) <= len(s); i++ {
		if s[i] == '/' && strings.EqualFold(s[i:i+len(seg)], seg) {
			return i
		}
	}
	return -1
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// entityKey is the case-insensitive identity of an entity name.
func entityKey(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(name)
		}
	}
	return name
}
