package servicebus

import (
	"fmt"

	"github.com/busbarmq/busbar/internal/broker"
)

// What a link address may name (docs/wire/amqp.md §3.1, §4.1, §6.1):
//
//	queue, queue/$DeadLetterQueue, queue/$Transfer/$DeadLetterQueue
//	topic                                      senders only
//	topic/Subscriptions/sub[/$DeadLetterQueue | /$Transfer/$DeadLetterQueue]
//	                                           receivers only
//
// each optionally followed by /$management. The broker resolves the path
// (broker.Resolve); "Subscriptions" and the sub-queue suffixes match
// case-insensitively, entity names too.

// entityRef is the entity an address names.
type entityRef struct {
	typ  broker.EntityType
	path broker.Path // as the client wrote it
}

// checkEntity resolves the entity an address names, or returns a
// not-found error with the cloud's wording naming the whole address (with
// sub-queue and $management, as the client asked). A topic has no
// sub-queues: "topic/$DeadLetterQueue" is not found.
//
// An address whose names no entity can have (names.CheckExisting: "a b",
// "q//x") is not found either, with the reason appended.
func (c *conn) checkEntity(a address) (entityRef, error) {
	typ, p, err := c.ns().Broker.Resolve(a.path())
	switch broker.KindOf(err) {
	case broker.KindNotFound:
		return entityRef{}, notFound(c.entityURI(a.String()))
	case broker.KindInvalidArgument:
		return entityRef{}, &broker.Error{Kind: broker.KindNotFound, Msg: entityNotFoundText(c.entityURI(a.String())) + " " + err.Error()}
	}
	if err != nil {
		return entityRef{}, err
	}
	return entityRef{typ: typ, path: p}, nil
}

// sendTarget returns the canonical name and the message size limit
// (bytes) of the entity a sender link sends to: a queue or a topic. A
// subscription is refused: messages reach it through its topic.
func (c *conn) sendTarget(a address, ref entityRef) (name string, maxSize uint64, err error) {
	var kb int64
	switch ref.typ {
	case broker.EntityQueue:
		var qi broker.QueueInfo
		qi, err = c.ns().Broker.GetQueue(ref.path.Entity)
		name, kb = qi.Name, qi.Properties.MaxMessageSizeInKilobytes
	case broker.EntityTopic:
		var ti broker.TopicInfo
		ti, err = c.ns().Broker.GetTopic(ref.path.Entity)
		name, kb = ti.Name, ti.Properties.MaxMessageSizeInKilobytes
	case broker.EntitySubscription:
		err = &broker.Error{Kind: broker.KindNotAllowed,
			Msg: fmt.Sprintf("Cannot send messages to '%s': it is a subscription; send to its topic '%s'.", a.path(), ref.path.Entity)}
	default:
		err = &broker.Error{Kind: broker.KindNotAllowed, Msg: fmt.Sprintf("Cannot send messages to '%s'.", a.path())}
	}
	if broker.KindOf(err) == broker.KindNotFound { // deleted meanwhile
		err = notFound(c.entityURI(a.String()))
	}
	if err != nil {
		return "", 0, err
	}
	return name, uint64(kb) * 1024, nil
}

// trackerEntity is the entity part of a description's SystemTracker:
// "Queue:q" or "Topic:t" (topic: the path names a topic), and for a
// subscription the cloud's "Topic:t|s" (with any sub-queue suffix).
func trackerEntity(entity string, topic bool) string {
	if p, err := broker.ParsePath(entity); err == nil && p.Subscription != "" {
		sub := broker.Path{Entity: p.Subscription, SubQueue: p.SubQueue}
		return "Topic:" + p.Entity + "|" + sub.String()
	}
	if topic {
		return "Topic:" + entity
	}
	return "Queue:" + entity
}
