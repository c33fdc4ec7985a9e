package config

import (
	"fmt"
	"io"
	"os"
	"time"
)

// EmulatorConfig is a loaded Config.json: UserConfig.Namespaces and
// UserConfig.Logging. Every optional property is a pointer, nil when the file
// leaves it out; the caller applies the Service Bus defaults.
type EmulatorConfig struct {
	Namespaces []Namespace
	Logging    *Logging // nil when the file has no Logging object

	// Warnings lists the problems that did not stop the load (unknown keys,
	// an unknown Logging.Type). Marshal ignores it.
	Warnings []FieldError
}

// Namespace is one entry of UserConfig.Namespaces.
type Namespace struct {
	Name   string
	Queues []Queue
	Topics []Topic
	// Hosts are host names, besides NAME.localhost and the Service Bus
	// domains, that select the namespace (Busbar's; not the emulator's).
	Hosts []string
	// Policies are the namespace's shared access policies, in the
	// --policies form "NAME=KEY[:RIGHTS];…"; nil means the server's
	// (Busbar's; not the emulator's).
	Policies *string
}

// Logging is UserConfig.Logging. Busbar logs according to its own settings;
// Type ("File", "Console", "File,Console" or "Console,File") is kept only to
// be written back.
type Logging struct {
	Type string
}

// Queue is one entry of a namespace's Queues.
type Queue struct {
	Name  string
	Props QueueProps
}

// QueueProps are a queue's Properties. Nil means "not set".
type QueueProps struct {
	LockDuration                        *time.Duration
	MaxSizeInMegabytes                  *int64
	RequiresDuplicateDetection          *bool
	DuplicateDetectionHistoryTimeWindow *time.Duration
	RequiresSession                     *bool
	DefaultMessageTimeToLive            *time.Duration
	DeadLetteringOnMessageExpiration    *bool
	MaxDeliveryCount                    *int32
	EnableBatchedOperations             *bool
	AutoDeleteOnIdle                    *time.Duration
	Status                              *EntityStatus
	ForwardTo                           *string
	ForwardDeadLetteredMessagesTo       *string
	UserMetadata                        *string
	EnablePartitioning                  *bool
	SupportOrdering                     *bool
	MaxMessageSizeInKilobytes           *int64
}

// Topic is one entry of a namespace's Topics.
type Topic struct {
	Name          string
	Props         TopicProps
	Subscriptions []Subscription
}

// TopicProps are a topic's Properties. Nil means "not set".
type TopicProps struct {
	DefaultMessageTimeToLive            *time.Duration
	DuplicateDetectionHistoryTimeWindow *time.Duration
	RequiresDuplicateDetection          *bool
	MaxSizeInMegabytes                  *int64
	AutoDeleteOnIdle                    *time.Duration
	Status                              *EntityStatus
	UserMetadata                        *string
	EnableBatchedOperations             *bool
	EnablePartitioning                  *bool
	SupportOrdering                     *bool
	MaxMessageSizeInKilobytes           *int64
}

// Subscription is one entry of a topic's Subscriptions.
type Subscription struct {
	Name  string
	Props SubscriptionProps
	// Rules are the subscription's rules. The file does not say what
	// happens without rules; Service Bus creates the $Default rule (a true
	// filter) when a subscription is created without one.
	Rules []Rule
}

// SubscriptionProps are a subscription's Properties. Nil means "not set".
type SubscriptionProps struct {
	LockDuration                              *time.Duration
	RequiresSession                           *bool
	DefaultMessageTimeToLive                  *time.Duration
	DeadLetteringOnMessageExpiration          *bool
	DeadLetteringOnFilterEvaluationExceptions *bool
	MaxDeliveryCount                          *int32
	EnableBatchedOperations                   *bool
	AutoDeleteOnIdle                          *time.Duration
	Status                                    *EntityStatus
	ForwardTo                                 *string
	ForwardDeadLetteredMessagesTo             *string
	UserMetadata                              *string
}

// EntityStatus is the Status property of a queue, topic or subscription.
type EntityStatus string

// The writable entity statuses.
const (
	StatusActive          EntityStatus = "Active"
	StatusDisabled        EntityStatus = "Disabled"
	StatusSendDisabled    EntityStatus = "SendDisabled"
	StatusReceiveDisabled EntityStatus = "ReceiveDisabled"
)

var statuses = []EntityStatus{StatusActive, StatusDisabled, StatusSendDisabled, StatusReceiveDisabled}

// Rule is one entry of a subscription's Rules.
type Rule struct {
	Name   string
	Filter Filter
	// Action is the SQL rule action (Action.SqlExpression), "" for none.
	Action string
}

// FilterType is a rule's Properties.FilterType.
type FilterType string

// The filter types of the emulator's schema.
const (
	FilterCorrelation FilterType = "Correlation"
	FilterSQL         FilterType = "Sql"
)

// Filter is a rule's filter. Type says which of SQL and Correlation is set;
// a valid configuration sets exactly that one.
type Filter struct {
	Type        FilterType
	SQL         string             // SqlFilter.SqlExpression, for FilterSQL
	Correlation *CorrelationFilter // for FilterCorrelation
}

// CorrelationFilter is a rule's CorrelationFilter. A message matches when
// every field set here equals its counterpart on the message.
type CorrelationFilter struct {
	ContentType      *string
	CorrelationID    *string
	Label            *string // the message's Subject
	MessageID        *string
	ReplyTo          *string
	ReplyToSessionID *string
	SessionID        *string
	To               *string
	// Properties are application properties to match. JSON values map to
	// string, bool, int64 (a number written without fraction or exponent
	// that fits) or float64.
	Properties map[string]any
}

// Options adjust how a configuration is loaded and validated.
type Options struct {
	// Strict makes unknown keys (and an unknown Logging.Type) errors instead
	// of warnings.
	Strict bool
	// EntityExists, when set, is asked about a ForwardTo or
	// ForwardDeadLetteredMessagesTo target that the file does not declare,
	// e.g. an entity already in the data directory. When nil, such a target
	// is an error.
	EntityExists func(namespace, name string) bool
	// ExistingNames accepts queue, topic, subscription and rule names that
	// only entities created before Busbar's naming rule can have
	// (names.CheckExisting): for checking a description of entities that
	// exist, such as an export. Without it, names must follow the rule
	// (names.Check), as for any entity a file declares.
	ExistingNames bool
}

// maxFileSize bounds what LoadEmulatorConfig reads.
const maxFileSize = 64 << 20

// LoadEmulatorConfig reads a Config.json from r, validates it with the
// default Options and returns it. On failure the error is an ErrorList
// holding every problem found.
func LoadEmulatorConfig(r io.Reader) (*EmulatorConfig, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, ErrorList{{Msg: fmt.Sprintf("file larger than %d MiB", maxFileSize>>20)}}
	}
	return ParseEmulatorConfig(data, Options{})
}

// LoadEmulatorConfigFile is LoadEmulatorConfig on the named file.
func LoadEmulatorConfigFile(path string) (*EmulatorConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return LoadEmulatorConfig(f)
}

// ParseEmulatorConfig parses and validates the text of a Config.json. When
// the text is valid it returns the configuration (warnings in its Warnings)
// and nil; otherwise nil and an ErrorList: the errors, then the warnings.
func ParseEmulatorConfig(data []byte, opts Options) (*EmulatorConfig, error) {
	plain, err := stripJSONC(data)
	if err != nil {
		return nil, ErrorList{{Msg: err.Error()}}
	}
	root, err := parseTree(plain)
	if err != nil {
		return nil, ErrorList{{Msg: err.Error()}}
	}
	p := &parser{strict: opts.Strict, raw: map[string]string{}}
	cfg := p.config(root)
	v := &validator{opts: opts, raw: p.raw}
	v.config(cfg)

	// A value the parser could not read is missing to the validator; keep
	// only the validator's problems that say something new.
	errs := p.errs
	for _, e := range v.errs {
		if !p.covers(e.Path) {
			errs = append(errs, e)
		}
	}
	warnings := p.warnings
	for _, w := range v.warnings {
		if !p.covers(w.Path) {
			warnings = append(warnings, w)
		}
	}
	if len(errs) > 0 {
		// An unknown key often explains an error (a misspelt "Name"), so
		// the warnings go along, after the errors.
		for i := range warnings {
			errs = append(errs, &warnings[i])
		}
		return nil, errs
	}
	cfg.Warnings = warnings
	return cfg, nil
}

// Validate checks a configuration built or changed in code, with the same
// rules as ParseEmulatorConfig. It returns nil or an ErrorList; warnings
// are not reported.
func (c *EmulatorConfig) Validate(opts Options) error {
	v := &validator{opts: opts}
	v.config(c)
	return v.errs.err()
}
