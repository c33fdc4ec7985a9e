package cli

import (
	"fmt"
	"strconv"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/names"
)

func newSubscriptionCreateCmd(a *app) *cobra.Command {
	var (
		f           subscriptionFlags
		rf          ruleFlags
		ruleName    string
		asJSON      bool
		ifNotExists bool
	)
	cmd := &cobra.Command{
		Use:   "create TOPIC NAME",
		Short: "Create a subscription of a topic",
		Long: `Create a subscription of a topic. Properties not given take the Service Bus
defaults: lock duration 1m, max delivery count 10, no expiry, dead-lettering on
filter exceptions.

Without --sql or --correlation the subscription gets the rule $Default, which
matches every message. With one of them, that filter is its only rule (named
$Default unless --rule-name says otherwise); add more with 'busbar rule create'.
--correlation takes key=value pairs: correlationId, messageId, to, replyTo,
subject, sessionId, replyToSessionId and contentType set those fields; any other
key is an application property (user.KEY forces one; KEY:type=value types the
value, as for send --property). --action sets the default rule's SQL action.

Durations are Go durations with an optional day count (30s, 1h30m, 7d), ISO 8601
as Service Bus writes them (PT30S), or "never".

Exits with 3 if the topic does not exist, 5 if the subscription does, unless
--if-not-exists is given: then it says so and exits with 0, leaving the
subscription and its rules as they are.`,
		Example: `  busbar subscription create events all
  busbar subscription create events eu --sql "region = 'eu'" --max-delivery-count 5
  busbar subscription create events placed --correlation subject=order-placed,priority=high
  busbar subscription create events audit --forward-to audit-queue --lock-duration 30s
  busbar subscription create events tagged --action "SET tagged = TRUE"
  busbar subscription create events all --if-not-exists`,
		Args: exactArgs(2, "a topic and a subscription name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, name := args[0], args[1]
			if err := checkNewName(names.Subscription, name); err != nil {
				return err
			}
			var props sbadmin.SubscriptionProperties
			if err := f.apply(cmd.Flags(), &props); err != nil {
				return err
			}
			filter, err := rf.filter(cmd.Flags())
			if err != nil {
				return err
			}
			action, _ := rf.actionValue(cmd.Flags())
			if filter != nil || action != nil || cmd.Flags().Changed("rule-name") {
				if ruleName == "" {
					return usageErrorf("--rule-name: empty name")
				}
				if err := checkNewName(names.Rule, ruleName); err != nil {
					return err
				}
				if filter == nil {
					filter = &sbadmin.TrueFilter{}
				}
				props.DefaultRule = &sbadmin.RuleProperties{Name: ruleName, Filter: filter, Action: action}
			}
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				resp, err := c.CreateSubscription(withSubscriptionStatus(ctx, props.Status), topic, name, &sbadmin.CreateSubscriptionOptions{Properties: &props})
				if err != nil {
					err = subscriptionError(ctx, c, err, topic, name)
					if !ifNotExists || ExitCode(err) != ExitExists {
						return err
					}
					s, gerr := getSubscription(ctx, c, topic, name)
					if gerr != nil {
						return gerr
					}
					return existed(cmd, asJSON, subscriptionName(topic, name), newSubscriptionView(topic, name, &s.SubscriptionProperties, nil))
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), newSubscriptionView(topic, name, &resp.SubscriptionProperties, nil))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created subscription %s/Subscriptions/%s\n", topic, name)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), true)
	rf.registerFilter(cmd.Flags(), false)
	cmd.Flags().StringVar(&ruleName, "rule-name", "$Default", "name of the rule --sql or --correlation creates")
	addIfNotExists(cmd, &ifNotExists)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newSubscriptionListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list TOPIC",
		Short: "List a topic's subscriptions with their message counts",
		Long: `List a topic's subscriptions with their message counts.

Exits with 3 if the topic does not exist.`,
		Example: `  busbar subscription list events
  busbar subscription list events --json | jq -r '.[] | select(.runtime.deadLetterMessageCount > 0) | .name'`,
		Args: exactArgs(1, "a topic name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAdmin(func(c *adminClient) error {
				views, err := listSubscriptions(cmd, c, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), views)
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "STATUS", "ACTIVE", "DEAD-LETTER", "TOTAL", "LOCK", "MAX-DELIVERY", "TTL", "FORWARD-TO")
				for _, v := range views {
					p, rt := v.Properties, v.Runtime
					if rt == nil {
						rt = &subscriptionRuntime{}
					}
					t.row(cell(v.Name, 0), cell(optStr(p.Status), 0),
						strconv.Itoa(int(rt.ActiveMessageCount)), strconv.Itoa(int(rt.DeadLetterMessageCount)),
						strconv.FormatInt(rt.TotalMessageCount, 10), isoCell(p.LockDuration), optInt(p.MaxDeliveryCount),
						isoCell(p.DefaultMessageTimeToLive), cell(optStr(p.ForwardTo), 0))
				}
				return t.flush()
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// listSubscriptions reads a topic's subscriptions with their runtime
// counts, in the broker's order (by name).
func listSubscriptions(cmd *cobra.Command, c *adminClient, topic string) ([]subscriptionView, error) {
	ctx := cmd.Context()
	views := []subscriptionView{}
	index := map[string]int{}
	pager := c.NewListSubscriptionsPager(topic, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, listError(err, topic)
		}
		for _, s := range page.Subscriptions {
			index[s.SubscriptionName] = len(views)
			views = append(views, newSubscriptionView(topic, s.SubscriptionName, &s.SubscriptionProperties, nil))
		}
	}
	rtPager := c.NewListSubscriptionsRuntimePropertiesPager(topic, nil)
	for rtPager.More() {
		page, err := rtPager.NextPage(ctx)
		if err != nil {
			return nil, listError(err, topic)
		}
		for _, s := range page.SubscriptionRuntimeProperties {
			if i, ok := index[s.SubscriptionName]; ok {
				views[i].Runtime = newSubscriptionView(topic, s.SubscriptionName, &sbadmin.SubscriptionProperties{}, &s.SubscriptionRuntimeProperties).Runtime
			}
		}
	}
	return views, nil
}

// listError is the error of listing a topic's subscriptions: not found
// means the topic (or the name is a queue's).
func listError(err error, topic string) error {
	if isNotFound(err) {
		return notFoundf("%s not found", topicName(topic))
	}
	return entityError(err, topicName(topic))
}

func newSubscriptionShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show TOPIC NAME",
		Short: "Show a subscription's properties, message counts and rules",
		Long: `Show a subscription's properties, its runtime counts (active, dead-lettered,
transfer and transfer dead-letter messages) and its rules.

Exits with 3 if the topic or subscription does not exist.`,
		Example: `  busbar subscription show events audit
  busbar subscription show events audit --json | jq .runtime.deadLetterMessageCount`,
		Args: exactArgs(2, "a topic and a subscription name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, name := args[0], args[1]
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				s, err := getSubscription(ctx, c, topic, name)
				if err != nil {
					return err
				}
				rt, err := c.GetSubscriptionRuntimeProperties(ctx, topic, name, nil)
				if err == nil && rt == nil {
					err = errNotFound
				}
				if err != nil {
					return subscriptionError(ctx, c, err, topic, name)
				}
				v := newSubscriptionView(topic, name, &s.SubscriptionProperties, &rt.SubscriptionRuntimeProperties)
				if v.Rules, err = listRules(cmd, c, topic, name); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), v)
				}
				return printSubscription(cmd.OutOrStdout(), v)
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newSubscriptionUpdateCmd(a *app) *cobra.Command {
	var (
		f      subscriptionFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "update TOPIC NAME",
		Short: "Change a subscription's properties",
		Long: `Change the properties given as flags and keep the others. Sessions cannot be
turned on or off once a subscription exists. Rules are changed with 'busbar rule'.

Exits with 3 if the topic or subscription does not exist.`,
		Example: `  busbar subscription update events audit --max-delivery-count 3
  busbar subscription update events audit --status ReceiveDisabled
  busbar subscription update events audit --forward-to ''   # stop forwarding`,
		Args: exactArgs(2, "a topic and a subscription name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, name := args[0], args[1]
			if !anyGiven(cmd.Flags(), subscriptionPropertyFlags) {
				return usageErrorf("nothing to update: give at least one property flag\nRun '%s --help' for the list.", cmd.CommandPath())
			}
			if err := f.apply(cmd.Flags(), &sbadmin.SubscriptionProperties{}); err != nil {
				return err
			}
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				s, err := getSubscription(ctx, c, topic, name)
				if err != nil {
					return err
				}
				props := s.SubscriptionProperties
				if err := f.apply(cmd.Flags(), &props); err != nil {
					return err
				}
				resp, err := c.UpdateSubscription(withSubscriptionStatus(ctx, props.Status), topic, name, props, nil)
				if err != nil {
					return subscriptionError(ctx, c, err, topic, name)
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), newSubscriptionView(topic, name, &resp.SubscriptionProperties, nil))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "updated subscription %s/Subscriptions/%s\n", topic, name)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), false)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newSubscriptionDeleteCmd(a *app) *cobra.Command {
	var ifExists, asJSON bool
	cmd := &cobra.Command{
		Use:   "delete TOPIC NAME...",
		Short: "Delete subscriptions with their rules and messages",
		Long: `Delete one or more subscriptions of a topic, with their rules, messages and
dead-letter queues. The topic and its other subscriptions are left alone.

Exits with 3 if the topic or a subscription does not exist, unless --if-exists is
given (which only forgives a missing subscription). Subscriptions are deleted in
the order given; the first failure stops the command.`,
		Example: `  busbar subscription delete events audit
  busbar subscription delete events eu uk --if-exists`,
		Args: atLeastArgs(1, "a topic and at least one subscription name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				if _, err := getTopic(ctx, c, topic); err != nil {
					return err
				}
				label := func(n string) string { return "subscription " + topic + "/Subscriptions/" + n }
				return deleteEach(cmd, args[1:], ifExists, asJSON, label, func(name string) error {
					_, err := c.DeleteSubscription(ctx, topic, name, nil)
					return entityError(err, subscriptionName(topic, name))
				})
			})
		},
	}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when a subscription does not exist")
	addJSONFlag(cmd, &asJSON)
	return cmd
}
