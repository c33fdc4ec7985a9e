package broker

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Tier is a Service Bus pricing tier's set of limits (busbar serve
// --tier), enforced on entity create and update and on send. A nil *Tier
// is Busbar's own profile: Standard's features without its quotas (any
// number of entities, MaxMessageSizeInKilobytes 1 … 102400 per entity as
// in Premium, no batch cap beyond the message size).
//
// Entities that exist when a tier is chosen (in the data directory) keep
// their properties; the limits apply to what is created, updated or sent
// from then on.
type Tier struct {
	// Name is the tier's name, as the namespace's MessagingSKU reports it:
	// Basic, Standard or Premium.
	Name string
	// MinMessageSizeKB … MaxMessageSizeKB is the range of an entity's
	// MaxMessageSizeInKilobytes; DefaultMessageSizeKB replaces the
	// Service Bus default (256) when the range excludes it.
	MinMessageSizeKB, MaxMessageSizeKB, DefaultMessageSizeKB int64
	// MaxBatchBytes caps the stored size of the messages of one send.
	MaxBatchBytes int64
	// MaxEntities caps the queues and topics of the namespace.
	MaxEntities int
	// MaxSizeMB caps MaxSizeInMegabytes of an entity without
	// partitioning; partitioned ones may reach MaxMaxSizeInMegabytes.
	MaxSizeMB int64
	// MaxTTL caps DefaultMessageTimeToLive (0: no cap).
	MaxTTL time.Duration
	// Basic's absences: topics (and so subscriptions and rules),
	// sessions, duplicate detection, auto-forwarding.
	NoTopics, NoSessions, NoDuplicateDetection, NoForwarding bool
}

// Tier names.
const (
	TierBasic    = "Basic"
	TierStandard = "Standard"
	TierPremium  = "Premium"
)

// Tier limits that are Azure's published quotas.
const (
	standardMaxEntities = 10000
	premiumMaxEntities  = 1000 // per messaging unit; Busbar's namespace is one unit
	standardMaxSizeMB   = 5120 // 1 … 5 GB without partitioning
	standardBatchBytes  = 256 << 10
	premiumBatchBytes   = 1 << 20
	premiumMinMessageKB = 1024
	basicMaxTTL         = 14 * 24 * time.Hour
)

// TierProfile returns the named tier's limits (basic, standard or premium,
// any case).
func TierProfile(name string) (*Tier, error) {
	switch strings.ToLower(name) {
	case "basic":
		return &Tier{Name: TierBasic, MinMessageSizeKB: DefaultMaxMessageSizeInKB, MaxMessageSizeKB: DefaultMaxMessageSizeInKB, DefaultMessageSizeKB: DefaultMaxMessageSizeInKB,
			MaxBatchBytes: standardBatchBytes, MaxEntities: standardMaxEntities, MaxSizeMB: standardMaxSizeMB, MaxTTL: basicMaxTTL,
			NoTopics: true, NoSessions: true, NoDuplicateDetection: true, NoForwarding: true}, nil
	case "standard":
		return &Tier{Name: TierStandard, MinMessageSizeKB: DefaultMaxMessageSizeInKB, MaxMessageSizeKB: DefaultMaxMessageSizeInKB, DefaultMessageSizeKB: DefaultMaxMessageSizeInKB,
			MaxBatchBytes: standardBatchBytes, MaxEntities: standardMaxEntities, MaxSizeMB: standardMaxSizeMB}, nil
	case "premium":
		return &Tier{Name: TierPremium, MinMessageSizeKB: premiumMinMessageKB, MaxMessageSizeKB: MaxMaxMessageSizeInKB, DefaultMessageSizeKB: premiumMinMessageKB,
			MaxBatchBytes: premiumBatchBytes, MaxEntities: premiumMaxEntities, MaxSizeMB: MaxMaxSizeInMegabytes}, nil
	}
	return nil, fmt.Errorf("unknown tier %q: use basic, standard or premium", name)
}

// SKU is the MessagingSKU the namespace reports: the tier's name, and
// Standard for Busbar's own profile (nil).
func (t *Tier) SKU() string {
	if t == nil {
		return TierStandard
	}
	return t.Name
}

// Tier returns the broker's tier; nil is Busbar's own profile.
func (b *Broker) Tier() *Tier { return b.tier }

func (t *Tier) refuse(format string, args ...any) error {
	return errorf(KindInvalidArgument, "%s (the %s tier; busbar serve --tier)", fmt.Sprintf(format, args...), t.Name)
}

// messageSize applies the tier to MaxMessageSizeInKilobytes: the Service
// Bus default becomes the tier's default when the tier's range excludes
// it (Premium: 1024), anything else outside the range is refused.
func (t *Tier) messageSize(kb *int64) error {
	if *kb == DefaultMaxMessageSizeInKB && t.DefaultMessageSizeKB != 0 {
		*kb = t.DefaultMessageSizeKB
	}
	if *kb < t.MinMessageSizeKB || *kb > t.MaxMessageSizeKB {
		if t.MinMessageSizeKB == t.MaxMessageSizeKB {
			return t.refuse("MaxMessageSizeInKilobytes is %d; it is %d KB in this tier and can only be set in Premium", *kb, t.MaxMessageSizeKB)
		}
		return t.refuse("MaxMessageSizeInKilobytes %d is outside %d … %d", *kb, t.MinMessageSizeKB, t.MaxMessageSizeKB)
	}
	return nil
}

func (t *Tier) common(kb, sizeMB *int64, partitioned bool, ttl time.Duration, dedup bool) error {
	if err := t.messageSize(kb); err != nil {
		return err
	}
	if !partitioned && *sizeMB > t.MaxSizeMB {
		return t.refuse("MaxSizeInMegabytes %d is over %d without partitioning", *sizeMB, t.MaxSizeMB)
	}
	if t.MaxTTL > 0 && ttl > t.MaxTTL && ttl != Infinite {
		return t.refuse("DefaultMessageTimeToLive %v is over %v", ttl, t.MaxTTL)
	}
	if dedup && t.NoDuplicateDetection {
		return t.refuse("duplicate detection is not available")
	}
	return nil
}

// checkQueue applies the tier to a queue's properties (it may change
// MaxMessageSizeInKilobytes and, in Basic, an unbounded TTL: see common).
func (t *Tier) checkQueue(p *QueueProperties) error {
	if t == nil {
		return nil
	}
	if t.MaxTTL > 0 && p.DefaultMessageTimeToLive == Infinite {
		p.DefaultMessageTimeToLive = t.MaxTTL
	}
	if err := t.common(&p.MaxMessageSizeInKilobytes, &p.MaxSizeInMegabytes, p.EnablePartitioning, p.DefaultMessageTimeToLive, p.RequiresDuplicateDetection); err != nil {
		return err
	}
	if p.RequiresSession && t.NoSessions {
		return t.refuse("sessions are not available")
	}
	if (p.ForwardTo != "" || p.ForwardDeadLetteredMessagesTo != "") && t.NoForwarding {
		return t.refuse("auto-forwarding is not available")
	}
	return nil
}

// checkTopic applies the tier to a topic's properties.
func (t *Tier) checkTopic(p *TopicProperties) error {
	if t == nil {
		return nil
	}
	if t.NoTopics {
		return t.refuse("topics are not available")
	}
	return t.common(&p.MaxMessageSizeInKilobytes, &p.MaxSizeInMegabytes, p.EnablePartitioning, p.DefaultMessageTimeToLive, p.RequiresDuplicateDetection)
}

// checkEntityCount refuses a new queue or topic beyond the tier's count.
// Called with b.admin held.
func (b *Broker) checkEntityCount() error {
	t := b.tier
	if t == nil || t.MaxEntities == 0 {
		return nil
	}
	b.mu.RLock()
	n := len(b.mu.queues) + len(b.mu.topics)
	b.mu.RUnlock()
	if b.catalog != nil {
		// A cluster node counts every node's queues and topics.
		ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
		defer cancel()
		all, err := b.catalog.UnitCount(ctx)
		if err != nil {
			if e := storeError(err); e != nil {
				return e
			}
			return internal(err, "counting the catalog's queues and topics")
		}
		n = max(n, all)
	}
	if n >= t.MaxEntities {
		return errorf(KindQuotaExceeded, "The namespace already has %d queues and topics; the %s tier allows %d.", n, t.Name, t.MaxEntities)
	}
	return nil
}

// checkBatch refuses a send whose messages together exceed the tier's
// batch size.
func (t *Tier) checkBatch(n int, total int64) error {
	if t == nil || n < 2 || total <= t.MaxBatchBytes {
		return nil
	}
	return errorf(KindMessageTooLarge, "the batch of %d messages is %d bytes, over the %s tier's %d-byte batch limit", n, total, t.Name, t.MaxBatchBytes)
}
