package cli

import (
	"io"
	"strconv"
	"time"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newTopicCmd(a *app) *cobra.Command {
	return groupCmd("topic", "Create, list, show, update and delete topics",
		`Manage topics through the broker's management API. A topic is sent to like a
queue (busbar send TOPIC) and delivers a copy of each message to every one of its
subscriptions whose rules match (see 'busbar subscription' and 'busbar rule').`,
		newTopicCreateCmd(a),
		newTopicListCmd(a),
		newTopicShowCmd(a),
		newTopicUpdateCmd(a),
		newTopicDeleteCmd(a),
	)
}

// topicFlags are the settable topic properties, as flags of topic create
// and topic update. Only the flags given are applied.
type topicFlags struct {
	defaultTTL         string
	duplicateDetection bool
	duplicateWindow    string
	maxSizeMB          int32
	maxMessageSizeKB   int64
	status             string
	autoDeleteOnIdle   string
	userMetadata       string
}

var topicPropertyFlags = []string{
	"default-ttl", "duplicate-detection", "duplicate-window", "max-size-mb", "max-message-size-kb",
	"status", "auto-delete-on-idle", "user-metadata",
}

// register declares the flags. Duplicate detection cannot change once the
// topic exists: it is a flag of create only.
func (f *topicFlags) register(fs *pflag.FlagSet, create bool) {
	fs.StringVar(&f.defaultTTL, "default-ttl", "", "time to live of messages that set none, e.g. 1h, 14d or never (default never)")
	if create {
		fs.BoolVar(&f.duplicateDetection, "duplicate-detection", false, "drop messages whose MessageId was seen within --duplicate-window (cannot be changed later)")
	}
	fs.StringVar(&f.duplicateWindow, "duplicate-window", "", "duplicate detection history, 20s … 7d (default 10m)")
	fs.Int32Var(&f.maxSizeMB, "max-size-mb", 0, "maximum size of the topic in megabytes (default 1024)")
	fs.Int64Var(&f.maxMessageSizeKB, "max-message-size-kb", 0, "largest message accepted, in kilobytes (default 256)")
	fs.StringVar(&f.status, "status", "", "Active, Disabled or SendDisabled")
	fs.StringVar(&f.autoDeleteOnIdle, "auto-delete-on-idle", "", "delete the topic after it is idle this long, ≥ 5m or never (default never)")
	fs.StringVar(&f.userMetadata, "user-metadata", "", "free text kept with the topic")
}

// apply sets the properties whose flags were given.
func (f *topicFlags) apply(fs *pflag.FlagSet, p *sbadmin.TopicProperties) error {
	s := &propSetter{fs: fs}
	s.duration("default-ttl", f.defaultTTL, &p.DefaultMessageTimeToLive)
	s.boolean("duplicate-detection", f.duplicateDetection, &p.RequiresDuplicateDetection)
	s.duration("duplicate-window", f.duplicateWindow, &p.DuplicateDetectionHistoryTimeWindow)
	s.positive32("max-size-mb", f.maxSizeMB, &p.MaxSizeInMegabytes)
	s.positive64("max-message-size-kb", f.maxMessageSizeKB, &p.MaxMessageSizeInKilobytes)
	s.status("status", f.status, &p.Status)
	s.duration("auto-delete-on-idle", f.autoDeleteOnIdle, &p.AutoDeleteOnIdle)
	s.str("user-metadata", f.userMetadata, &p.UserMetadata)
	return s.err
}

// topicView is a topic as the topic commands print it with --json.
// Durations are ISO 8601, as the management API and Config.json write them.
type topicView struct {
	Name       string        `json:"name"`
	Properties topicProps    `json:"properties"`
	Runtime    *topicRuntime `json:"runtime,omitempty"`
}

type topicProps struct {
	DefaultMessageTimeToLive            *string `json:"defaultMessageTimeToLive,omitempty"`
	RequiresDuplicateDetection          *bool   `json:"requiresDuplicateDetection,omitempty"`
	DuplicateDetectionHistoryTimeWindow *string `json:"duplicateDetectionHistoryTimeWindow,omitempty"`
	MaxSizeInMegabytes                  *int32  `json:"maxSizeInMegabytes,omitempty"`
	MaxMessageSizeInKilobytes           *int64  `json:"maxMessageSizeInKilobytes,omitempty"`
	Status                              *string `json:"status,omitempty"`
	AutoDeleteOnIdle                    *string `json:"autoDeleteOnIdle,omitempty"`
	UserMetadata                        *string `json:"userMetadata,omitempty"`
	EnableBatchedOperations             *bool   `json:"enableBatchedOperations,omitempty"`
	EnablePartitioning                  *bool   `json:"enablePartitioning,omitempty"`
	SupportOrdering                     *bool   `json:"supportOrdering,omitempty"`
}

type topicRuntime struct {
	SubscriptionCount      int32     `json:"subscriptionCount"`
	ScheduledMessageCount  int32     `json:"scheduledMessageCount"`
	SQLFilterCount         int32     `json:"sqlFilterCount"`
	CorrelationFilterCount int32     `json:"correlationFilterCount"`
	SizeInBytes            int64     `json:"sizeInBytes"`
	CreatedAt              time.Time `json:"createdAt"`
	UpdatedAt              time.Time `json:"updatedAt"`
	AccessedAt             time.Time `json:"accessedAt"`
}

func newTopicView(name string, p *sbadmin.TopicProperties, rt *sbadmin.TopicRuntimeProperties) topicView {
	v := topicView{Name: name, Properties: topicProps{
		DefaultMessageTimeToLive:            p.DefaultMessageTimeToLive,
		RequiresDuplicateDetection:          p.RequiresDuplicateDetection,
		DuplicateDetectionHistoryTimeWindow: p.DuplicateDetectionHistoryTimeWindow,
		MaxSizeInMegabytes:                  p.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:           p.MaxMessageSizeInKilobytes,
		AutoDeleteOnIdle:                    p.AutoDeleteOnIdle,
		UserMetadata:                        p.UserMetadata,
		EnableBatchedOperations:             p.EnableBatchedOperations,
		EnablePartitioning:                  p.EnablePartitioning,
		SupportOrdering:                     p.SupportOrdering,
	}}
	if p.Status != nil {
		s := string(*p.Status)
		v.Properties.Status = &s
	}
	if rt != nil {
		v.Runtime = &topicRuntime{
			SubscriptionCount:      rt.SubscriptionCount,
			ScheduledMessageCount:  rt.ScheduledMessageCount,
			SQLFilterCount:         rt.SQLFilterCount,
			CorrelationFilterCount: rt.CorrelationFilterCount,
			SizeInBytes:            rt.SizeInBytes,
			CreatedAt:              rt.CreatedAt,
			UpdatedAt:              rt.UpdatedAt,
			AccessedAt:             rt.AccessedAt,
		}
	}
	return v
}

// printTopic writes one topic's properties, and its counts when known.
func printTopic(w io.Writer, v topicView) error {
	p := v.Properties
	t := newTable(w, "Name:", cell(v.Name, 0))
	t.row("Status:", cell(optStr(p.Status), 0))
	t.row("Default message TTL:", isoCell(p.DefaultMessageTimeToLive))
	dup := optBool(p.RequiresDuplicateDetection)
	if p.RequiresDuplicateDetection != nil && *p.RequiresDuplicateDetection {
		dup += " (window " + isoCell(p.DuplicateDetectionHistoryTimeWindow) + ")"
	}
	t.row("Duplicate detection:", dup)
	t.row("Max size:", optInt(p.MaxSizeInMegabytes)+" MB")
	if p.MaxMessageSizeInKilobytes != nil {
		t.row("Max message size:", optInt(p.MaxMessageSizeInKilobytes)+" KB")
	}
	t.row("Auto-delete on idle:", isoCell(p.AutoDeleteOnIdle))
	t.row("User metadata:", cell(optStr(p.UserMetadata), 0))
	if rt := v.Runtime; rt != nil {
		t.row("Subscriptions:", strconv.Itoa(int(rt.SubscriptionCount)))
		t.row("Filters:", strconv.Itoa(int(rt.SQLFilterCount))+" SQL, "+strconv.Itoa(int(rt.CorrelationFilterCount))+" correlation")
		t.row("Scheduled messages:", strconv.Itoa(int(rt.ScheduledMessageCount)))
		t.row("Size:", sizeCell(rt.SizeInBytes))
		t.row("Created:", timeCell(&rt.CreatedAt))
		t.row("Updated:", timeCell(&rt.UpdatedAt))
		t.row("Accessed:", timeCell(&rt.AccessedAt))
	}
	return t.flush()
}
