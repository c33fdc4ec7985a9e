package broker

import (
	"time"

	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/names"
)

// Topic, subscription and rule limits (docs/wire/management-plane.md §4).
const (
	MaxSubscriptionsPerTopic      = 2000
	MaxSQLFiltersPerTopic         = 2000 // SQL, true and false filters
	MaxCorrelationFiltersPerTopic = 100000
	// MaxSubscriptionNameLength and MaxRuleNameLength: 50 characters.
	MaxSubscriptionNameLength = names.MaxSubscriptionLength
	MaxRuleNameLength         = names.MaxRuleLength
	// DefaultRuleName is the rule a subscription gets when created without
	// a default rule of its own.
	DefaultRuleName = "$Default"
	// PropRuleName is the application property that marks the copy a
	// matching rule with an action delivered: its value is the rule name.
	PropRuleName = "RuleName"
	// ReasonSessionIDNull and DescriptionSessionIDNull are the dead-letter
	// reason and description of a session-less message routed to a
	// session-enabled subscription (the dead-letter table of the Service
	// Bus documentation).
	ReasonSessionIDNull      = "Session id is null."
	DescriptionSessionIDNull = "Session enabled entity doesn't allow a message whose session identifier is null."
)

// TopicProperties are a topic's settable properties (the TopicDescription
// of the management API). Zero values are not defaults: start from
// DefaultTopicProperties. Ranges are those of QueueProperties.
type TopicProperties struct {
	// MaxSizeInMegabytes caps the topic's size: every subscription's
	// messages (each copy counted, as Service Bus counts them) plus the
	// scheduled messages not yet fanned out. 1 … 81920, default 1024.
	MaxSizeInMegabytes int64 `json:"maxSizeInMegabytes"`
	// RequiresDuplicateDetection turns duplicate detection on. Immutable.
	RequiresDuplicateDetection bool `json:"requiresDuplicateDetection"`
	// DefaultMessageTimeToLive is the TTL of messages that set none, and
	// the ceiling of those that do; a subscription's own default applies
	// on top (the lower wins). ≥ 1 s, default Infinite.
	DefaultMessageTimeToLive time.Duration `json:"defaultMessageTimeToLive"`
	// DuplicateDetectionHistoryTimeWindow: 20 s … 7 days, default 10 min.
	DuplicateDetectionHistoryTimeWindow time.Duration `json:"duplicateDetectionHistoryTimeWindow"`
	// EnableBatchedOperations is echoed only. Default true.
	EnableBatchedOperations bool `json:"enableBatchedOperations"`
	// AutoDeleteOnIdle deletes the topic (with its subscriptions) after
	// that long without sends, updates, scheduled messages or operations
	// on any of its subscriptions: ≥ 5 min, default Infinite (never).
	AutoDeleteOnIdle time.Duration `json:"autoDeleteOnIdle"`
	// Status: Active (default), Disabled, SendDisabled. (ReceiveDisabled
	// is accepted and, a topic having no receivers, acts like Active.)
	// Disabled also stops receives from its subscriptions.
	Status EntityStatus `json:"status"`
	// UserMetadata: at most 1024 characters.
	UserMetadata string `json:"userMetadata,omitempty"`
	// EnablePartitioning is echoed only. Immutable.
	EnablePartitioning bool `json:"enablePartitioning"`
	// SupportOrdering is echoed only. Default true.
	SupportOrdering bool `json:"supportOrdering"`
	// MaxMessageSizeInKilobytes caps one message: 1 … 102400, default 256.
	MaxMessageSizeInKilobytes int64 `json:"maxMessageSizeInKilobytes"`
	// Legacy flags, echoed only.
	EnableExpress                     bool `json:"enableExpress"`
	IsAnonymousAccessible             bool `json:"isAnonymousAccessible"`
	FilteringMessagesBeforePublishing bool `json:"filteringMessagesBeforePublishing"`
	EnableSubscriptionPartitioning    bool `json:"enableSubscriptionPartitioning"`
	// AuthorizationRules: at most 12.
	AuthorizationRules []AuthorizationRule `json:"authorizationRules,omitempty"`
}

// DefaultTopicProperties returns the service defaults.
func DefaultTopicProperties() TopicProperties {
	return TopicProperties{
		MaxSizeInMegabytes:                  DefaultMaxSizeInMegabytes,
		DefaultMessageTimeToLive:            Infinite,
		DuplicateDetectionHistoryTimeWindow: DefaultDuplicateWindow,
		EnableBatchedOperations:             true,
		AutoDeleteOnIdle:                    Infinite,
		Status:                              StatusActive,
		SupportOrdering:                     true,
		MaxMessageSizeInKilobytes:           DefaultMaxMessageSizeInKB,
	}
}

// Validate checks every property against its Service Bus range. The error
// (KindInvalidArgument) names the property and the allowed range.
func (p TopicProperties) Validate() error {
	return firstError(
		checkMaxSize(p.MaxSizeInMegabytes),
		checkDuplicateWindow(p.DuplicateDetectionHistoryTimeWindow),
		checkDefaultTTL(p.DefaultMessageTimeToLive),
		checkAutoDeleteOnIdle(p.AutoDeleteOnIdle),
		validateStatus(p.Status),
		checkUserMetadata(p.UserMetadata),
		checkMaxMessageSize(p.MaxMessageSizeInKilobytes),
		checkAuthorizationRules(p.AuthorizationRules),
	)
}

// checkTopicImmutable refuses changes to the properties that cannot change
// after creation.
func checkTopicImmutable(old, p TopicProperties) error {
	return checkImmutableCommon("Topic", old.RequiresDuplicateDetection != p.RequiresDuplicateDetection,
		old.EnablePartitioning != p.EnablePartitioning)
}

// SubscriptionProperties are a subscription's settable properties (the
// SubscriptionDescription of the management API). Zero values are not
// defaults: start from DefaultSubscriptionProperties.
type SubscriptionProperties struct {
	// LockDuration: 5 s … 5 min, default 1 min.
	LockDuration time.Duration `json:"lockDuration"`
	// RequiresSession makes the subscription session-enabled. Immutable.
	RequiresSession bool `json:"requiresSession"`
	// DefaultMessageTimeToLive is the subscription's TTL default and
	// ceiling; the topic's applies too (the lower wins). ≥ 1 s, default
	// Infinite.
	DefaultMessageTimeToLive time.Duration `json:"defaultMessageTimeToLive"`
	// DeadLetteringOnMessageExpiration moves expired messages to the
	// subscription's DLQ instead of dropping them. Default false.
	DeadLetteringOnMessageExpiration bool `json:"deadLetteringOnMessageExpiration"`
	// DeadLetteringOnFilterEvaluationExceptions: a message whose rule
	// evaluation fails goes to the subscription's DLQ (reason: the
	// exception type, description: its message) instead of the rule
	// counting as not matching. Default true.
	DeadLetteringOnFilterEvaluationExceptions bool `json:"deadLetteringOnFilterEvaluationExceptions"`
	// MaxDeliveryCount: ≥ 1, default 10.
	MaxDeliveryCount int32 `json:"maxDeliveryCount"`
	// EnableBatchedOperations is echoed only. Default true.
	EnableBatchedOperations bool `json:"enableBatchedOperations"`
	// AutoDeleteOnIdle deletes the subscription after that long without
	// receives, peeks, updates or new rules: ≥ 5 min, default Infinite.
	AutoDeleteOnIdle time.Duration `json:"autoDeleteOnIdle"`
	// Status: Active (default), Disabled, SendDisabled (no new messages
	// are routed to it), ReceiveDisabled.
	Status EntityStatus `json:"status"`
	// ForwardTo and ForwardDeadLetteredMessagesTo name an existing queue or
	// topic (an entity path), never the subscription's own topic through a
	// loop, and ForwardTo is not set on a session-enabled subscription; its
	// messages (its dead-lettered messages) are auto-forwarded there: see
	// forward.go.
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
}

// DefaultSubscriptionProperties returns the service defaults.
func DefaultSubscriptionProperties() SubscriptionProperties {
	return SubscriptionProperties{
		LockDuration:                              DefaultLockDuration,
		DefaultMessageTimeToLive:                  Infinite,
		DeadLetteringOnFilterEvaluationExceptions: true,
		MaxDeliveryCount:                          DefaultMaxDeliveryCount,
		EnableBatchedOperations:                   true,
		AutoDeleteOnIdle:                          Infinite,
		Status:                                    StatusActive,
	}
}

// Validate checks every property against its Service Bus range. The error
// (KindInvalidArgument) names the property and the allowed range.
func (p SubscriptionProperties) Validate() error {
	return firstError(
		checkLockDuration(p.LockDuration),
		checkDefaultTTL(p.DefaultMessageTimeToLive),
		checkMaxDeliveryCount(p.MaxDeliveryCount),
		checkAutoDeleteOnIdle(p.AutoDeleteOnIdle),
		validateStatus(p.Status),
		checkUserMetadata(p.UserMetadata),
		checkForwardTargets(p.ForwardTo, p.ForwardDeadLetteredMessagesTo),
	)
}

// receiving maps a subscription's properties onto the QueueProperties
// fields the shared receiving-entity code reads (lock duration, delivery
// count, TTL, expiry dead-lettering, idle deletion, status). A
// subscription has no quota or message-size limit of its own (its topic's
// apply) and no duplicate detection (its topic's applies).
func (p SubscriptionProperties) receiving() QueueProperties {
	q := DefaultQueueProperties()
	q.LockDuration = p.LockDuration
	q.RequiresSession = p.RequiresSession
	q.DefaultMessageTimeToLive = p.DefaultMessageTimeToLive
	q.DeadLetteringOnMessageExpiration = p.DeadLetteringOnMessageExpiration
	q.MaxDeliveryCount = p.MaxDeliveryCount
	q.EnableBatchedOperations = p.EnableBatchedOperations
	q.AutoDeleteOnIdle = p.AutoDeleteOnIdle
	q.Status = p.Status
	q.ForwardTo = p.ForwardTo
	q.ForwardDeadLetteredMessagesTo = p.ForwardDeadLetteredMessagesTo
	q.UserMetadata = p.UserMetadata
	q.MaxSizeInMegabytes = MaxMaxSizeInMegabytes
	q.MaxMessageSizeInKilobytes = MaxMaxMessageSizeInKB
	return q
}

// ValidateSubscriptionName checks a name for a new subscription against
// Service Bus's naming rule (package names).
func ValidateSubscriptionName(name string) error {
	return nameError(names.Check(names.Subscription, name))
}

// ValidateRuleName checks a name for a new rule: like a subscription name,
// or $Default.
func ValidateRuleName(name string) error {
	return nameError(names.Check(names.Rule, name))
}

// FilterKind is the kind of a rule's filter.
type FilterKind uint8

// Filter kinds.
const (
	// FilterTrue matches every message (the service writes it as "1=1").
	FilterTrue FilterKind = iota + 1
	// FilterFalse matches none ("1=0").
	FilterFalse
	// FilterSQL is a SQL filter expression with optional parameters.
	FilterSQL
	// FilterCorrelation matches by equality on system and user properties.
	FilterCorrelation
)

func (k FilterKind) String() string {
	switch k {
	case FilterTrue:
		return "TrueFilter"
	case FilterFalse:
		return "FalseFilter"
	case FilterSQL:
		return "SqlFilter"
	case FilterCorrelation:
		return "CorrelationFilter"
	}
	return "FilterKind(?)"
}

// CorrelationFilter is the filter package's correlation filter: the
// system-property fields and the user Properties to match.
type CorrelationFilter = filter.CorrelationFilter

// RuleFilter is a rule's filter.
type RuleFilter struct {
	Kind FilterKind
	// Expression is the SQL text of a FilterSQL; the broker reports
	// "1=1" and "1=0" for FilterTrue and FilterFalse.
	Expression string
	// Parameters bind a FilterSQL's @parameters (keys with the '@').
	// Values: string, the integer types, float32/64, bool, time.Time,
	// time.Duration.
	Parameters map[string]any
	// Correlation is the FilterCorrelation's fields.
	Correlation *CorrelationFilter
}

// TrueRuleFilter matches every message.
func TrueRuleFilter() RuleFilter { return RuleFilter{Kind: FilterTrue, Expression: "1=1"} }

// FalseRuleFilter matches no message.
func FalseRuleFilter() RuleFilter { return RuleFilter{Kind: FilterFalse, Expression: "1=0"} }

// SQLRuleFilter is a SQL filter.
func SQLRuleFilter(expr string, params map[string]any) RuleFilter {
	return RuleFilter{Kind: FilterSQL, Expression: expr, Parameters: params}
}

// CorrelationRuleFilter is a correlation filter.
func CorrelationRuleFilter(c CorrelationFilter) RuleFilter {
	return RuleFilter{Kind: FilterCorrelation, Correlation: &c}
}

// SQLAction is a rule's SQL action (SET and REMOVE statements), applied
// to the copy of the message the rule delivers.
type SQLAction struct {
	Expression string
	Parameters map[string]any
}

// RuleDescription is a subscription rule: a filter and an optional action.
type RuleDescription struct {
	// Name: 1–50 characters (see ValidateRuleName); unique within the
	// subscription, case-insensitively.
	Name   string
	Filter RuleFilter
	// Action is nil for none (the EmptyRuleAction).
	Action *SQLAction
	// CreatedAt is set by the broker.
	CreatedAt time.Time
}

// SubscriptionPath returns the entity path of a subscription,
// "topic/Subscriptions/name".
func SubscriptionPath(topic, name string) string {
	return Path{Entity: topic, Subscription: name}.String()
}

const subscriptionsSegment = "Subscriptions"
