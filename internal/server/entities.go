package server

import (
	"errors"
	"fmt"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// applyEntities creates the entities a Config.json declares, or updates
// them if they exist already. Entities created earlier at run time and not
// named in the file are left alone.
//
// Forwarding targets may be declared after the entities that name them, so
// queues are first put in place without their forwarding settings, which a
// second pass then adds.
func applyEntities(b *broker.Broker, ec *config.EmulatorConfig) (created, updated int, err error) {
	for ni, ns := range ec.Namespaces {
		if len(ns.Topics) > 0 {
			return 0, 0, fmt.Errorf("config: UserConfig.Namespaces[%d].Topics: topics are not supported by this version of Busbar yet", ni)
		}
	}
	var forwarding []config.Queue
	for ni, ns := range ec.Namespaces {
		for qi, q := range ns.Queues {
			path := fmt.Sprintf("UserConfig.Namespaces[%d].Queues[%d]", ni, qi)
			props := queueProperties(q.Props)
			if props.ForwardTo != "" || props.ForwardDeadLetteredMessagesTo != "" {
				forwarding = append(forwarding, q)
				props.ForwardTo, props.ForwardDeadLetteredMessagesTo = "", ""
			}
			if _, gerr := b.GetQueue(q.Name); gerr == nil {
				if _, err := b.UpdateQueue(q.Name, props); err != nil {
					return created, updated, fmt.Errorf("config: %s (%q): %w", path, q.Name, err)
				}
				updated++
				continue
			} else if !errors.Is(gerr, broker.ErrNotFound) {
				return created, updated, fmt.Errorf("config: %s (%q): %w", path, q.Name, gerr)
			}
			if _, err := b.CreateQueue(q.Name, props); err != nil {
				return created, updated, fmt.Errorf("config: %s (%q): %w", path, q.Name, err)
			}
			created++
		}
	}
	for _, q := range forwarding {
		if _, err := b.UpdateQueue(q.Name, queueProperties(q.Props)); err != nil {
			return created, updated, fmt.Errorf("config: queue %q: %w", q.Name, err)
		}
	}
	return created, updated, nil
}

// queueProperties starts from the Service Bus defaults and applies what
// the file sets.
func queueProperties(c config.QueueProps) broker.QueueProperties {
	p := broker.DefaultQueueProperties()
	set(&p.LockDuration, c.LockDuration)
	set(&p.MaxSizeInMegabytes, c.MaxSizeInMegabytes)
	set(&p.RequiresDuplicateDetection, c.RequiresDuplicateDetection)
	set(&p.DuplicateDetectionHistoryTimeWindow, c.DuplicateDetectionHistoryTimeWindow)
	set(&p.RequiresSession, c.RequiresSession)
	set(&p.DefaultMessageTimeToLive, c.DefaultMessageTimeToLive)
	set(&p.DeadLetteringOnMessageExpiration, c.DeadLetteringOnMessageExpiration)
	set(&p.MaxDeliveryCount, c.MaxDeliveryCount)
	set(&p.EnableBatchedOperations, c.EnableBatchedOperations)
	set(&p.AutoDeleteOnIdle, c.AutoDeleteOnIdle)
	if c.Status != nil {
		p.Status = broker.EntityStatus(*c.Status)
	}
	if c.ForwardTo != nil {
		p.ForwardTo = config.ForwardEntityName(*c.ForwardTo)
	}
	if c.ForwardDeadLetteredMessagesTo != nil {
		p.ForwardDeadLetteredMessagesTo = config.ForwardEntityName(*c.ForwardDeadLetteredMessagesTo)
	}
	set(&p.UserMetadata, c.UserMetadata)
	set(&p.EnablePartitioning, c.EnablePartitioning)
	set(&p.SupportOrdering, c.SupportOrdering)
	set(&p.MaxMessageSizeInKilobytes, c.MaxMessageSizeInKilobytes)
	return p
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}
