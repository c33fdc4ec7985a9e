package admin

import (
	"time"

	"github.com/busbarmq/busbar/internal/broker"
)

// queueFields reads the settable elements of a QueueDescription (§1.9).
// Read-only ones (SizeInBytes, MessageCount, CountDetails, CreatedAt,
// UpdatedAt, AccessedAt, EntityAvailabilityStatus) are absent on purpose:
// clients that round-trip a GET send them back, and they are ignored.
var queueFields = map[string]field[broker.QueueProperties]{
	"LockDuration":                        durationField(func(p *broker.QueueProperties) *time.Duration { return &p.LockDuration }),
	"MaxSizeInMegabytes":                  int64Field(func(p *broker.QueueProperties) *int64 { return &p.MaxSizeInMegabytes }),
	"RequiresDuplicateDetection":          boolField(func(p *broker.QueueProperties) *bool { return &p.RequiresDuplicateDetection }),
	"RequiresSession":                     boolField(func(p *broker.QueueProperties) *bool { return &p.RequiresSession }),
	"DefaultMessageTimeToLive":            durationField(func(p *broker.QueueProperties) *time.Duration { return &p.DefaultMessageTimeToLive }),
	"DeadLetteringOnMessageExpiration":    boolField(func(p *broker.QueueProperties) *bool { return &p.DeadLetteringOnMessageExpiration }),
	"DuplicateDetectionHistoryTimeWindow": durationField(func(p *broker.QueueProperties) *time.Duration { return &p.DuplicateDetectionHistoryTimeWindow }),
	"MaxDeliveryCount":                    int32Field(func(p *broker.QueueProperties) *int32 { return &p.MaxDeliveryCount }),
	"EnableBatchedOperations":             boolField(func(p *broker.QueueProperties) *bool { return &p.EnableBatchedOperations }),
	"IsAnonymousAccessible":               boolField(func(p *broker.QueueProperties) *bool { return &p.IsAnonymousAccessible }),
	"AuthorizationRules":                  authorizationRulesField(func(p *broker.QueueProperties) *[]broker.AuthorizationRule { return &p.AuthorizationRules }),
	"Status":                              statusField(func(p *broker.QueueProperties) *broker.EntityStatus { return &p.Status }),
	"ForwardTo":                           forwardField(func(p *broker.QueueProperties) (*string, *string) { return &p.ForwardTo, &p.ForwardToAddress }),
	"UserMetadata":                        stringField(func(p *broker.QueueProperties) *string { return &p.UserMetadata }),
	"SupportOrdering":                     boolField(func(p *broker.QueueProperties) *bool { return &p.SupportOrdering }),
	"AutoDeleteOnIdle":                    durationField(func(p *broker.QueueProperties) *time.Duration { return &p.AutoDeleteOnIdle }),
	"EnablePartitioning":                  boolField(func(p *broker.QueueProperties) *bool { return &p.EnablePartitioning }),
	"ForwardDeadLetteredMessagesTo": forwardField(func(p *broker.QueueProperties) (*string, *string) {
		return &p.ForwardDeadLetteredMessagesTo, &p.ForwardDeadLetteredMessagesToAddress
	}),
	"EnableExpress":             boolField(func(p *broker.QueueProperties) *bool { return &p.EnableExpress }),
	"MaxMessageSizeInKilobytes": int64Field(func(p *broker.QueueProperties) *int64 { return &p.MaxMessageSizeInKilobytes }),
}

// decodeQueueProperties reads a QueueDescription into properties: the
// service defaults, overwritten by every element present. Create and
// update both start from the defaults (an update is a full replace).
// Authorization rules without times or keys get them here, at now.
// Ranges are not checked here; broker.QueueProperties.Validate does that.
func decodeQueueProperties(desc *element, now time.Time) (broker.QueueProperties, error) {
	p := broker.DefaultQueueProperties()
	if err := decodeFields(desc, queueFields, &p); err != nil {
		return broker.QueueProperties{}, err
	}
	if err := completeAuthorizationRules(p.AuthorizationRules, now); err != nil {
		return broker.QueueProperties{}, err
	}
	return p, nil
}

// writeQueueDescription writes q as a QueueDescription in the order the
// service writes it (§1.8), with every element the SDKs require (§1.12):
// the runtime ones included, since every GET carries them (§1.11).
func writeQueueDescription(w *xmlWriter, q Queue, s *site) {
	p := q.Properties
	w.open("QueueDescription", "xmlns", nsServiceBus, "xmlns:i", nsXSI)
	w.duration("LockDuration", p.LockDuration)
	w.int("MaxSizeInMegabytes", reportedMaxSize(p.MaxSizeInMegabytes, p.EnablePartitioning))
	w.bool("RequiresDuplicateDetection", p.RequiresDuplicateDetection)
	w.bool("RequiresSession", p.RequiresSession)
	w.duration("DefaultMessageTimeToLive", p.DefaultMessageTimeToLive)
	w.bool("DeadLetteringOnMessageExpiration", p.DeadLetteringOnMessageExpiration)
	w.duration("DuplicateDetectionHistoryTimeWindow", p.DuplicateDetectionHistoryTimeWindow)
	w.int("MaxDeliveryCount", int64(p.MaxDeliveryCount))
	w.bool("EnableBatchedOperations", p.EnableBatchedOperations)
	w.int("SizeInBytes", q.Counts.SizeInBytes)
	w.int("MessageCount", q.Counts.Total)
	w.bool("IsAnonymousAccessible", p.IsAnonymousAccessible)
	writeAuthorizationRules(w, p.AuthorizationRules)
	w.text("Status", string(p.Status))
	w.optText("ForwardTo", s.forwardURI(p.ForwardTo, p.ForwardToAddress))
	w.time("CreatedAt", q.CreatedAt)
	w.time("UpdatedAt", q.UpdatedAt)
	w.time("AccessedAt", q.AccessedAt)
	w.optText("UserMetadata", p.UserMetadata)
	w.bool("SupportOrdering", p.SupportOrdering)
	writeCountDetails(w, q.Counts)
	w.duration("AutoDeleteOnIdle", p.AutoDeleteOnIdle)
	w.bool("EnablePartitioning", p.EnablePartitioning)
	w.text("EntityAvailabilityStatus", "Available")
	w.optText("ForwardDeadLetteredMessagesTo", s.forwardURI(p.ForwardDeadLetteredMessagesTo, p.ForwardDeadLetteredMessagesToAddress))
	w.bool("EnableExpress", p.EnableExpress)
	w.int("MaxMessageSizeInKilobytes", p.MaxMessageSizeInKilobytes)
	w.close("QueueDescription")
}

// writeCountDetails writes the five counts under the d2p1 prefix, the only
// attribute being its declaration (§1.11).
func writeCountDetails(w *xmlWriter, c MessageCounts) {
	w.open("CountDetails", "xmlns:d2p1", nsCounts)
	w.int("d2p1:ActiveMessageCount", c.Active)
	w.int("d2p1:DeadLetterMessageCount", c.DeadLetter)
	w.int("d2p1:ScheduledMessageCount", c.Scheduled)
	w.int("d2p1:TransferMessageCount", c.Transfer)
	w.int("d2p1:TransferDeadLetterMessageCount", c.TransferDeadLetter)
	w.close("CountDetails")
}
