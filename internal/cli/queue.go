package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/busbarmq/busbar/internal/config"
)

func newQueueCmd(a *app) *cobra.Command {
	return groupCmd("queue", "Create, list, show, update and delete queues",
		"Manage queues through the broker's management API (the ATOM API the Service Bus\nadministration clients use).",
		newQueueCreateCmd(a),
		newQueueListCmd(a),
		newQueueShowCmd(a),
		newQueueUpdateCmd(a),
		newQueueDeleteCmd(a),
	)
}

// queueFlags are the settable queue properties, as flags of queue create
// and queue update. Only the flags given are applied.
type queueFlags struct {
	lockDuration       string
	maxDeliveryCount   int32
	defaultTTL         string
	deadLetterOnExpiry bool
	duplicateDetection bool
	duplicateWindow    string
	requiresSession    bool
	maxSizeMB          int32
	status             string
	autoDeleteOnIdle   string
	forwardTo          string
	forwardDLQTo       string
	userMetadata       string
}

// register declares the flags. The immutable properties (duplicate
// detection, sessions) are flags of create only.
func (f *queueFlags) register(fs *pflag.FlagSet, create bool) {
	fs.StringVar(&f.lockDuration, "lock-duration", "", "peek-lock duration, 5s … 5m (default 1m)")
	fs.Int32Var(&f.maxDeliveryCount, "max-delivery-count", 0, "deliveries before a message is dead-lettered (default 10)")
	fs.StringVar(&f.defaultTTL, "default-ttl", "", "time to live of messages that set none, e.g. 1h, 14d or never (default never)")
	fs.BoolVar(&f.deadLetterOnExpiry, "dead-letter-on-expiration", false, "dead-letter expired messages instead of dropping them")
	if create {
		fs.BoolVar(&f.duplicateDetection, "duplicate-detection", false, "drop messages whose MessageId was seen within --duplicate-window (cannot be changed later)")
		fs.BoolVar(&f.requiresSession, "requires-session", false, "make the queue session-enabled (cannot be changed later)")
	}
	fs.StringVar(&f.duplicateWindow, "duplicate-window", "", "duplicate detection history, 20s … 7d (default 10m)")
	fs.Int32Var(&f.maxSizeMB, "max-size-mb", 0, "maximum size of the queue in megabytes (default 1024)")
	fs.StringVar(&f.status, "status", "", "Active, Disabled, SendDisabled or ReceiveDisabled")
	fs.StringVar(&f.autoDeleteOnIdle, "auto-delete-on-idle", "", "delete the queue after it is idle this long, ≥ 5m or never (default never)")
	fs.StringVar(&f.forwardTo, "forward-to", "", "forward every message to this queue ('' to stop forwarding)")
	fs.StringVar(&f.forwardDLQTo, "forward-dlq-to", "", "forward dead-lettered messages to this queue ('' to stop)")
	fs.StringVar(&f.userMetadata, "user-metadata", "", "free text kept with the queue")
}

// queuePropertyFlags are the names of the flags register declares.
var queuePropertyFlags = []string{
	"lock-duration", "max-delivery-count", "default-ttl", "dead-letter-on-expiration",
	"duplicate-detection", "requires-session", "duplicate-window", "max-size-mb", "status",
	"auto-delete-on-idle", "forward-to", "forward-dlq-to", "user-metadata",
}

// anyChanged reports whether any property flag was given.
func (f *queueFlags) anyChanged(fs *pflag.FlagSet) bool {
	for _, name := range queuePropertyFlags {
		if fs.Changed(name) {
			return true
		}
	}
	return false
}

// apply sets the properties whose flags were given.
func (f *queueFlags) apply(fs *pflag.FlagSet, p *sbadmin.QueueProperties) error {
	var err error
	durations := []struct {
		flag string
		val  string
		dst  **string
	}{
		{"lock-duration", f.lockDuration, &p.LockDuration},
		{"default-ttl", f.defaultTTL, &p.DefaultMessageTimeToLive},
		{"duplicate-window", f.duplicateWindow, &p.DuplicateDetectionHistoryTimeWindow},
		{"auto-delete-on-idle", f.autoDeleteOnIdle, &p.AutoDeleteOnIdle},
	}
	for _, d := range durations {
		if fs.Changed(d.flag) {
			if *d.dst, err = isoDuration(d.flag, d.val); err != nil {
				return err
			}
		}
	}
	if fs.Changed("max-delivery-count") {
		if f.maxDeliveryCount < 1 {
			return usageErrorf("--max-delivery-count must be at least 1")
		}
		p.MaxDeliveryCount = &f.maxDeliveryCount
	}
	if fs.Changed("max-size-mb") {
		if f.maxSizeMB < 1 {
			return usageErrorf("--max-size-mb must be at least 1")
		}
		p.MaxSizeInMegabytes = &f.maxSizeMB
	}
	if fs.Changed("dead-letter-on-expiration") {
		p.DeadLetteringOnMessageExpiration = &f.deadLetterOnExpiry
	}
	if fs.Changed("duplicate-detection") {
		p.RequiresDuplicateDetection = &f.duplicateDetection
	}
	if fs.Changed("requires-session") {
		p.RequiresSession = &f.requiresSession
	}
	if fs.Changed("status") {
		s, ok := parseStatus(f.status)
		if !ok {
			return usageErrorf("--status: %q is not one of Active, Disabled, SendDisabled, ReceiveDisabled", f.status)
		}
		p.Status = &s
	}
	strs := []struct {
		flag string
		val  string
		dst  **string
	}{
		{"forward-to", f.forwardTo, &p.ForwardTo},
		{"forward-dlq-to", f.forwardDLQTo, &p.ForwardDeadLetteredMessagesTo},
		{"user-metadata", f.userMetadata, &p.UserMetadata},
	}
	for _, s := range strs {
		if fs.Changed(s.flag) {
			if s.val == "" {
				*s.dst = nil
			} else {
				v := s.val
				*s.dst = &v
			}
		}
	}
	return nil
}

func parseStatus(s string) (sbadmin.EntityStatus, bool) {
	for _, st := range []config.EntityStatus{config.StatusActive, config.StatusDisabled, config.StatusSendDisabled, config.StatusReceiveDisabled} {
		if strings.EqualFold(s, string(st)) {
			return sbadmin.EntityStatus(st), true
		}
	}
	return "", false
}

// queueView is a queue as queue show and queue list print it with --json.
// Durations are ISO 8601, as the management API and Config.json write them.
type queueView struct {
	Name       string        `json:"name"`
	Properties queueProps    `json:"properties"`
	Runtime    *queueRuntime `json:"runtime,omitempty"`
}

type queueProps struct {
	LockDuration                        *string `json:"lockDuration,omitempty"`
	MaxDeliveryCount                    *int32  `json:"maxDeliveryCount,omitempty"`
	DefaultMessageTimeToLive            *string `json:"defaultMessageTimeToLive,omitempty"`
	DeadLetteringOnMessageExpiration    *bool   `json:"deadLetteringOnMessageExpiration,omitempty"`
	RequiresDuplicateDetection          *bool   `json:"requiresDuplicateDetection,omitempty"`
	DuplicateDetectionHistoryTimeWindow *string `json:"duplicateDetectionHistoryTimeWindow,omitempty"`
	RequiresSession                     *bool   `json:"requiresSession,omitempty"`
	MaxSizeInMegabytes                  *int32  `json:"maxSizeInMegabytes,omitempty"`
	MaxMessageSizeInKilobytes           *int64  `json:"maxMessageSizeInKilobytes,omitempty"`
	Status                              *string `json:"status,omitempty"`
	AutoDeleteOnIdle                    *string `json:"autoDeleteOnIdle,omitempty"`
	ForwardTo                           *string `json:"forwardTo,omitempty"`
	ForwardDeadLetteredMessagesTo       *string `json:"forwardDeadLetteredMessagesTo,omitempty"`
	UserMetadata                        *string `json:"userMetadata,omitempty"`
	EnableBatchedOperations             *bool   `json:"enableBatchedOperations,omitempty"`
	EnablePartitioning                  *bool   `json:"enablePartitioning,omitempty"`
}

type queueRuntime struct {
	ActiveMessageCount             int32     `json:"activeMessageCount"`
	DeadLetterMessageCount         int32     `json:"deadLetterMessageCount"`
	ScheduledMessageCount          int32     `json:"scheduledMessageCount"`
	TransferMessageCount           int32     `json:"transferMessageCount"`
	TransferDeadLetterMessageCount int32     `json:"transferDeadLetterMessageCount"`
	TotalMessageCount              int64     `json:"totalMessageCount"`
	SizeInBytes                    int64     `json:"sizeInBytes"`
	CreatedAt                      time.Time `json:"createdAt"`
	UpdatedAt                      time.Time `json:"updatedAt"`
	AccessedAt                     time.Time `json:"accessedAt"`
}

func newQueueView(name string, p *sbadmin.QueueProperties, rt *sbadmin.QueueRuntimeProperties) queueView {
	v := queueView{Name: name, Properties: queueProps{
		LockDuration:                        p.LockDuration,
		MaxDeliveryCount:                    p.MaxDeliveryCount,
		DefaultMessageTimeToLive:            p.DefaultMessageTimeToLive,
		DeadLetteringOnMessageExpiration:    p.DeadLetteringOnMessageExpiration,
		RequiresDuplicateDetection:          p.RequiresDuplicateDetection,
		DuplicateDetectionHistoryTimeWindow: p.DuplicateDetectionHistoryTimeWindow,
		RequiresSession:                     p.RequiresSession,
		MaxSizeInMegabytes:                  p.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:           p.MaxMessageSizeInKilobytes,
		AutoDeleteOnIdle:                    p.AutoDeleteOnIdle,
		ForwardTo:                           forwardName(p.ForwardTo),
		ForwardDeadLetteredMessagesTo:       forwardName(p.ForwardDeadLetteredMessagesTo),
		UserMetadata:                        p.UserMetadata,
		EnableBatchedOperations:             p.EnableBatchedOperations,
		EnablePartitioning:                  p.EnablePartitioning,
	}}
	if p.Status != nil {
		s := string(*p.Status)
		v.Properties.Status = &s
	}
	if rt != nil {
		v.Runtime = &queueRuntime{
			ActiveMessageCount:             rt.ActiveMessageCount,
			DeadLetterMessageCount:         rt.DeadLetterMessageCount,
			ScheduledMessageCount:          rt.ScheduledMessageCount,
			TransferMessageCount:           rt.TransferMessageCount,
			TransferDeadLetterMessageCount: rt.TransferDeadLetterMessageCount,
			TotalMessageCount:              rt.TotalMessageCount,
			SizeInBytes:                    rt.SizeInBytes,
			CreatedAt:                      rt.CreatedAt,
			UpdatedAt:                      rt.UpdatedAt,
			AccessedAt:                     rt.AccessedAt,
		}
	}
	return v
}

// forwardName turns the absolute URI the management API returns for a
// forwarding target back into the entity name.
func forwardName(p *string) *string {
	if p == nil || *p == "" {
		return nil
	}
	s := config.ForwardEntityName(*p)
	return &s
}

// printQueue writes one queue's properties, and its counts when known, as
// a list of "Name: value" lines.
func printQueue(w io.Writer, v queueView) error {
	p := v.Properties
	t := newTable(w, "Name:", v.Name)
	t.row("Status:", cell(optStr(p.Status), 0))
	t.row("Lock duration:", isoCell(p.LockDuration))
	t.row("Max delivery count:", optInt(p.MaxDeliveryCount))
	t.row("Default message TTL:", isoCell(p.DefaultMessageTimeToLive))
	t.row("Dead-letter on expiration:", optBool(p.DeadLetteringOnMessageExpiration))
	dup := optBool(p.RequiresDuplicateDetection)
	if p.RequiresDuplicateDetection != nil && *p.RequiresDuplicateDetection {
		dup += " (window " + isoCell(p.DuplicateDetectionHistoryTimeWindow) + ")"
	}
	t.row("Duplicate detection:", dup)
	t.row("Requires session:", optBool(p.RequiresSession))
	t.row("Max size:", optInt(p.MaxSizeInMegabytes)+" MB")
	if p.MaxMessageSizeInKilobytes != nil {
		t.row("Max message size:", optInt(p.MaxMessageSizeInKilobytes)+" KB")
	}
	t.row("Auto-delete on idle:", isoCell(p.AutoDeleteOnIdle))
	t.row("Forward to:", cell(optStr(p.ForwardTo), 0))
	t.row("Forward dead letters to:", cell(optStr(p.ForwardDeadLetteredMessagesTo), 0))
	t.row("User metadata:", cell(optStr(p.UserMetadata), 0))
	if rt := v.Runtime; rt != nil {
		t.row("Messages:", "")
		t.row("  Active:", strconv.Itoa(int(rt.ActiveMessageCount)))
		t.row("  Dead-letter:", strconv.Itoa(int(rt.DeadLetterMessageCount)))
		t.row("  Scheduled:", strconv.Itoa(int(rt.ScheduledMessageCount)))
		t.row("  Transfer:", strconv.Itoa(int(rt.TransferMessageCount)))
		t.row("  Transfer dead-letter:", strconv.Itoa(int(rt.TransferDeadLetterMessageCount)))
		t.row("  Total:", strconv.FormatInt(rt.TotalMessageCount, 10))
		t.row("Size:", sizeCell(rt.SizeInBytes))
		t.row("Created:", timeCell(&rt.CreatedAt))
		t.row("Updated:", timeCell(&rt.UpdatedAt))
		t.row("Accessed:", timeCell(&rt.AccessedAt))
	}
	return t.flush()
}

// sizeCell shows a byte count: 512 B, 1.5 KiB, 3.2 MiB.
func sizeCell(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
