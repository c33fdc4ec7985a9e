package cli

import (
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/names"
)

// entityRef is what a messaging command works on: a queue, a topic (send
// only) or a subscription of a topic.
//
// On the command line it is the first argument, a queue or topic name,
// with --subscription (-s) naming a subscription of that topic. The entity
// path Service Bus itself uses, TOPIC/Subscriptions/SUB, is accepted as the
// argument too, so that a path copied from the output works.
type entityRef struct {
	name string // the queue or topic
	sub  string // the subscription, "" for a queue
}

// path is the entity path: orders, events/Subscriptions/audit.
func (e entityRef) path() string {
	if e.sub == "" {
		return e.name
	}
	return e.name + "/Subscriptions/" + e.sub
}

// String names the entity in messages: queue "orders", subscription
// "events/Subscriptions/audit".
func (e entityRef) String() string {
	if e.sub == "" {
		return queueName(e.name)
	}
	return subscriptionName(e.name, e.sub)
}

func (e entityRef) isSubscription() bool { return e.sub != "" }

// newReceiver opens a receiver on the entity (or, by opts.SubQueue, its
// dead-letter or transfer dead-letter queue).
func (e entityRef) newReceiver(c *azservicebus.Client, opts *azservicebus.ReceiverOptions) (*azservicebus.Receiver, error) {
	if e.sub != "" {
		return c.NewReceiverForSubscription(e.name, e.sub, opts)
	}
	return c.NewReceiverForQueue(e.name, opts)
}

// err turns an SDK error about the entity into one for the operator (see
// entityError), with a hint when a topic was named without a subscription.
func (e entityRef) err(err error) error {
	err = entityError(err, e.String())
	if err != nil && e.sub == "" && strings.Contains(err.Error(), "is a topic") {
		return &detailError{err.Error() + "\nGive the subscription with --subscription NAME.", err}
	}
	return err
}

// subscriptionFlag is --subscription of the commands that receive.
type subscriptionFlag struct{ name string }

func (s *subscriptionFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&s.name, "subscription", "s", "", "work on this subscription of the topic given as the argument")
}

// entity reads the entity argument (and --subscription).
func (s *subscriptionFlag) entity(cmd *cobra.Command, arg string) (entityRef, error) {
	e, err := parseEntityPath(arg)
	if err != nil {
		return e, err
	}
	if cmd.Flags().Changed("subscription") {
		if e.sub != "" {
			return e, usageErrorf("give the subscription once: as --subscription or in the path %q", arg)
		}
		if s.name == "" {
			return e, usageErrorf("--subscription: empty name")
		}
		e.sub = s.name
	}
	return e, nil
}

// parseEntityPath reads a queue or topic name, or a subscription's path
// TOPIC/Subscriptions/SUB. Topic names may contain '/', but no segment
// called Subscriptions.
func parseEntityPath(arg string) (entityRef, error) {
	if arg == "" {
		return entityRef{}, usageErrorf("empty entity name")
	}
	segs := strings.Split(arg, "/")
	last := segs[len(segs)-1]
	if strings.EqualFold(last, "$DeadLetterQueue") || strings.EqualFold(last, "$Transfer") {
		return entityRef{}, usageErrorf("%q: name the queue or subscription and use --dlq or --transfer-dlq for its dead-letter queues", arg)
	}
	for i, seg := range segs {
		if !strings.EqualFold(seg, "Subscriptions") {
			continue
		}
		if i == 0 || i != len(segs)-2 || segs[i+1] == "" {
			return entityRef{}, usageErrorf("%q is not a subscription path (want TOPIC/Subscriptions/SUBSCRIPTION)", arg)
		}
		return entityRef{name: strings.Join(segs[:i], "/"), sub: segs[i+1]}, nil
	}
	return entityRef{name: arg}, nil
}

// checkNewName refuses, as a usage error, a name the broker would refuse
// for a new entity (package names states the rule), without asking it.
// Commands that work on existing entities do not check: entities created
// under the looser rule of earlier versions stay manageable.
func checkNewName(k names.Kind, name string) error {
	if err := names.Check(k, name); err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	return nil
}

// topicName names a topic in messages: topic "events".
func topicName(name string) string { return fmt.Sprintf("topic %q", name) }

// subscriptionName names a subscription in messages, by its path:
// subscription "events/Subscriptions/audit".
func subscriptionName(topic, sub string) string {
	return fmt.Sprintf("subscription %q", topic+"/Subscriptions/"+sub)
}

// ruleName names a rule in messages.
func ruleName(topic, sub, rule string) string {
	return fmt.Sprintf("rule %q of %s", rule, subscriptionName(topic, sub))
}
