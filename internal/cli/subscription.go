package cli

import (
	"io"
	"strconv"
	"time"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newSubscriptionCmd(a *app) *cobra.Command {
	return groupCmd("subscription", "Create, list, show, update and delete a topic's subscriptions",
		`Manage the subscriptions of a topic. Each subscription gets its own copy of every
message sent to the topic that its rules select (see 'busbar rule'), and is
received from like a queue:

  busbar receive TOPIC --subscription SUB
  busbar peek TOPIC/Subscriptions/SUB --dlq`,
		newSubscriptionCreateCmd(a),
		newSubscriptionListCmd(a),
		newSubscriptionShowCmd(a),
		newSubscriptionUpdateCmd(a),
		newSubscriptionDeleteCmd(a),
	)
}

// subscriptionFlags are the settable subscription properties, as flags of
// subscription create and update. Only the flags given are applied.
type subscriptionFlags struct {
	lockDuration             string
	maxDeliveryCount         int32
	defaultTTL               string
	deadLetterOnExpiry       bool
	deadLetterOnFilterErrors bool
	requiresSession          bool
	status                   string
	autoDeleteOnIdle         string
	forwardTo                string
	forwardDLQTo             string
	userMetadata             string
}

var subscriptionPropertyFlags = []string{
	"lock-duration", "max-delivery-count", "default-ttl", "dead-letter-on-expiration",
	"dead-letter-on-filter-exceptions", "requires-session", "status", "auto-delete-on-idle",
	"forward-to", "forward-dlq-to", "user-metadata",
}

// register declares the flags. Sessions cannot change once the
// subscription exists: --requires-session is a flag of create only.
func (f *subscriptionFlags) register(fs *pflag.FlagSet, create bool) {
	fs.StringVar(&f.lockDuration, "lock-duration", "", "peek-lock duration, 5s … 5m (default 1m)")
	fs.Int32Var(&f.maxDeliveryCount, "max-delivery-count", 0, "deliveries before a message is dead-lettered (default 10)")
	fs.StringVar(&f.defaultTTL, "default-ttl", "", "time to live of messages that set none, e.g. 1h, 14d or never (default never; the topic's applies too)")
	fs.BoolVar(&f.deadLetterOnExpiry, "dead-letter-on-expiration", false, "dead-letter expired messages instead of dropping them")
	fs.BoolVar(&f.deadLetterOnFilterErrors, "dead-letter-on-filter-exceptions", true, "dead-letter a message whose rule evaluation fails (default true; =false drops it)")
	if create {
		fs.BoolVar(&f.requiresSession, "requires-session", false, "make the subscription session-enabled (cannot be changed later)")
	}
	fs.StringVar(&f.status, "status", "", "Active, Disabled, SendDisabled (no new messages) or ReceiveDisabled")
	fs.StringVar(&f.autoDeleteOnIdle, "auto-delete-on-idle", "", "delete the subscription after it is idle this long, ≥ 5m or never (default never)")
	fs.StringVar(&f.forwardTo, "forward-to", "", "forward every message to this queue or topic ('' to stop forwarding)")
	fs.StringVar(&f.forwardDLQTo, "forward-dlq-to", "", "forward dead-lettered messages to this queue or topic ('' to stop)")
	fs.StringVar(&f.userMetadata, "user-metadata", "", "free text kept with the subscription")
}

// apply sets the properties whose flags were given.
func (f *subscriptionFlags) apply(fs *pflag.FlagSet, p *sbadmin.SubscriptionProperties) error {
	s := &propSetter{fs: fs}
	s.duration("lock-duration", f.lockDuration, &p.LockDuration)
	s.positive32("max-delivery-count", f.maxDeliveryCount, &p.MaxDeliveryCount)
	s.duration("default-ttl", f.defaultTTL, &p.DefaultMessageTimeToLive)
	s.boolean("dead-letter-on-expiration", f.deadLetterOnExpiry, &p.DeadLetteringOnMessageExpiration)
	s.boolean("dead-letter-on-filter-exceptions", f.deadLetterOnFilterErrors, &p.EnableDeadLetteringOnFilterEvaluationExceptions)
	s.boolean("requires-session", f.requiresSession, &p.RequiresSession)
	s.status("status", f.status, &p.Status)
	s.duration("auto-delete-on-idle", f.autoDeleteOnIdle, &p.AutoDeleteOnIdle)
	s.str("forward-to", f.forwardTo, &p.ForwardTo)
	s.str("forward-dlq-to", f.forwardDLQTo, &p.ForwardDeadLetteredMessagesTo)
	s.str("user-metadata", f.userMetadata, &p.UserMetadata)
	return s.err
}

// subscriptionView is a subscription as the subscription commands print it
// with --json. Rules are listed by subscription show only.
type subscriptionView struct {
	Topic      string               `json:"topic"`
	Name       string               `json:"name"`
	Properties subscriptionProps    `json:"properties"`
	Rules      []ruleView           `json:"rules,omitempty"`
	Runtime    *subscriptionRuntime `json:"runtime,omitempty"`
}

type subscriptionProps struct {
	LockDuration                              *string `json:"lockDuration,omitempty"`
	MaxDeliveryCount                          *int32  `json:"maxDeliveryCount,omitempty"`
	DefaultMessageTimeToLive                  *string `json:"defaultMessageTimeToLive,omitempty"`
	DeadLetteringOnMessageExpiration          *bool   `json:"deadLetteringOnMessageExpiration,omitempty"`
	DeadLetteringOnFilterEvaluationExceptions *bool   `json:"deadLetteringOnFilterEvaluationExceptions,omitempty"`
	RequiresSession                           *bool   `json:"requiresSession,omitempty"`
	Status                                    *string `json:"status,omitempty"`
	AutoDeleteOnIdle                          *string `json:"autoDeleteOnIdle,omitempty"`
	ForwardTo                                 *string `json:"forwardTo,omitempty"`
	ForwardDeadLetteredMessagesTo             *string `json:"forwardDeadLetteredMessagesTo,omitempty"`
	UserMetadata                              *string `json:"userMetadata,omitempty"`
	EnableBatchedOperations                   *bool   `json:"enableBatchedOperations,omitempty"`
}

type subscriptionRuntime struct {
	ActiveMessageCount             int32     `json:"activeMessageCount"`
	DeadLetterMessageCount         int32     `json:"deadLetterMessageCount"`
	TransferMessageCount           int32     `json:"transferMessageCount"`
	TransferDeadLetterMessageCount int32     `json:"transferDeadLetterMessageCount"`
	TotalMessageCount              int64     `json:"totalMessageCount"`
	CreatedAt                      time.Time `json:"createdAt"`
	UpdatedAt                      time.Time `json:"updatedAt"`
	AccessedAt                     time.Time `json:"accessedAt"`
}

func newSubscriptionView(topic, name string, p *sbadmin.SubscriptionProperties, rt *sbadmin.SubscriptionRuntimeProperties) subscriptionView {
	v := subscriptionView{Topic: topic, Name: name, Properties: subscriptionProps{
		LockDuration:                              p.LockDuration,
		MaxDeliveryCount:                          p.MaxDeliveryCount,
		DefaultMessageTimeToLive:                  p.DefaultMessageTimeToLive,
		DeadLetteringOnMessageExpiration:          p.DeadLetteringOnMessageExpiration,
		DeadLetteringOnFilterEvaluationExceptions: p.EnableDeadLetteringOnFilterEvaluationExceptions,
		RequiresSession:                           p.RequiresSession,
		AutoDeleteOnIdle:                          p.AutoDeleteOnIdle,
		ForwardTo:                                 forwardName(p.ForwardTo),
		ForwardDeadLetteredMessagesTo:             forwardName(p.ForwardDeadLetteredMessagesTo),
		UserMetadata:                              p.UserMetadata,
		EnableBatchedOperations:                   p.EnableBatchedOperations,
	}}
	if p.Status != nil {
		s := string(*p.Status)
		v.Properties.Status = &s
	}
	if rt != nil {
		v.Runtime = &subscriptionRuntime{
			ActiveMessageCount:             rt.ActiveMessageCount,
			DeadLetterMessageCount:         rt.DeadLetterMessageCount,
			TransferMessageCount:           rt.TransferMessageCount,
			TransferDeadLetterMessageCount: rt.TransferDeadLetterMessageCount,
			TotalMessageCount:              rt.TotalMessageCount,
			CreatedAt:                      rt.CreatedAt,
			UpdatedAt:                      rt.UpdatedAt,
			AccessedAt:                     rt.AccessedAt,
		}
	}
	return v
}

// printSubscription writes one subscription's properties, its counts when
// known and its rules.
func printSubscription(w io.Writer, v subscriptionView) error {
	p := v.Properties
	t := newTable(w, "Topic:", cell(v.Topic, 0))
	t.row("Name:", cell(v.Name, 0))
	t.row("Status:", cell(optStr(p.Status), 0))
	t.row("Lock duration:", isoCell(p.LockDuration))
	t.row("Max delivery count:", optInt(p.MaxDeliveryCount))
	t.row("Default message TTL:", isoCell(p.DefaultMessageTimeToLive))
	t.row("Dead-letter on expiration:", optBool(p.DeadLetteringOnMessageExpiration))
	t.row("Dead-letter on filter exceptions:", optBool(p.DeadLetteringOnFilterEvaluationExceptions))
	t.row("Requires session:", optBool(p.RequiresSession))
	t.row("Auto-delete on idle:", isoCell(p.AutoDeleteOnIdle))
	t.row("Forward to:", cell(optStr(p.ForwardTo), 0))
	t.row("Forward dead letters to:", cell(optStr(p.ForwardDeadLetteredMessagesTo), 0))
	t.row("User metadata:", cell(optStr(p.UserMetadata), 0))
	if rt := v.Runtime; rt != nil {
		t.row("Messages:", "")
		t.row("  Active:", strconv.Itoa(int(rt.ActiveMessageCount)))
		t.row("  Dead-letter:", strconv.Itoa(int(rt.DeadLetterMessageCount)))
		t.row("  Transfer:", strconv.Itoa(int(rt.TransferMessageCount)))
		t.row("  Transfer dead-letter:", strconv.Itoa(int(rt.TransferDeadLetterMessageCount)))
		t.row("  Total:", strconv.FormatInt(rt.TotalMessageCount, 10))
		t.row("Created:", timeCell(&rt.CreatedAt))
		t.row("Updated:", timeCell(&rt.UpdatedAt))
		t.row("Accessed:", timeCell(&rt.AccessedAt))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if v.Rules == nil {
		return nil
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	if len(v.Rules) == 0 {
		_, err := io.WriteString(w, "No rules: the subscription receives no messages.\n")
		return err
	}
	return printRules(w, v.Rules)
}
