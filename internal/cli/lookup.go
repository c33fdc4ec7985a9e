package cli

import (
	"context"
	"fmt"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// Queues and topics share one name space and one management URL
// (/NAME). The admin client reads whatever entry is there into the
// description it asked for, so GetQueue on a topic (or GetTopic on a
// queue) returns a description with every property unset rather than
// nothing. The helpers here tell them apart: the service always reports a
// queue's LockDuration and a topic's MaxSizeInMegabytes.

func isQueue(p *sbadmin.QueueProperties) bool {
	return p != nil && (p.LockDuration != nil || p.MaxDeliveryCount != nil)
}

func isTopic(p *sbadmin.TopicProperties) bool {
	return p != nil && (p.MaxSizeInMegabytes != nil || p.DefaultMessageTimeToLive != nil)
}

// notFoundf is a not-found error (exit code 3).
func notFoundf(format string, args ...any) error {
	return &exitError{code: ExitNotFound, err: fmt.Errorf(format, args...)}
}

// getQueue reads a queue, failing with not found when there is none, or
// when name is a topic.
func getQueue(ctx context.Context, c *adminClient, name string) (*sbadmin.GetQueueResponse, error) {
	q, err := c.GetQueue(ctx, name, nil)
	if err == nil && q == nil {
		err = errNotFound
	}
	if err != nil {
		return nil, entityError(err, queueName(name))
	}
	if !isQueue(&q.QueueProperties) {
		return nil, notFoundf("%s not found: %q is a topic (see 'busbar topic')", queueName(name), name)
	}
	return q, nil
}

// getTopic reads a topic, failing with not found when there is none, or
// when name is a queue.
func getTopic(ctx context.Context, c *adminClient, name string) (*sbadmin.GetTopicResponse, error) {
	t, err := c.GetTopic(ctx, name, nil)
	if err == nil && t == nil {
		err = errNotFound
	}
	if err != nil {
		return nil, entityError(err, topicName(name))
	}
	if !isTopic(&t.TopicProperties) {
		return nil, notFoundf("%s not found: %q is a queue (see 'busbar queue')", topicName(name), name)
	}
	return t, nil
}

// getSubscription reads a subscription, failing with not found when there
// is none, saying whether the topic is missing too.
func getSubscription(ctx context.Context, c *adminClient, topic, sub string) (*sbadmin.GetSubscriptionResponse, error) {
	s, err := c.GetSubscription(ctx, topic, sub, nil)
	if err != nil {
		return nil, subscriptionError(ctx, c, err, topic, sub)
	}
	if s == nil {
		return nil, subscriptionError(ctx, c, errNotFound, topic, sub)
	}
	return s, nil
}

// subscriptionError is entityError for a subscription: a not-found error
// names the topic when it is the topic that is missing.
func subscriptionError(ctx context.Context, c *adminClient, err error, topic, sub string) error {
	if isNotFound(err) {
		if _, terr := getTopic(ctx, c, topic); terr != nil && ExitCode(terr) == ExitNotFound {
			return terr
		}
	}
	return entityError(err, subscriptionName(topic, sub))
}

// ruleError is entityError for a rule: a not-found error names the
// subscription or topic when it is missing.
func ruleError(ctx context.Context, c *adminClient, err error, topic, sub, rule string) error {
	if isNotFound(err) {
		if _, serr := getSubscription(ctx, c, topic, sub); serr != nil && ExitCode(serr) == ExitNotFound {
			return serr
		}
	}
	return entityError(err, ruleName(topic, sub, rule))
}
