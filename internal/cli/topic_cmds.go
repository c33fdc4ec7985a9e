package cli

import (
	"fmt"
	"strconv"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/names"
)

func newTopicCreateCmd(a *app) *cobra.Command {
	var (
		f           topicFlags
		asJSON      bool
		ifNotExists bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: `Create a topic, without subscriptions. Properties not given take the Service Bus
defaults: no expiry, duplicate detection off, 1024 MB, messages up to 256 KB.

Durations are Go durations with an optional day count (30s, 1h30m, 7d), ISO 8601
as Service Bus writes them (PT30S), or "never".

Exits with 5 if a topic or queue of that name already exists, unless the topic
exists and --if-not-exists is given: then it says so and exits with 0, leaving
the topic as it is (its properties are not compared with the flags).`,
		Example: `  busbar topic create events
  busbar topic create events --default-ttl 7d --duplicate-detection --duplicate-window 30m
  busbar topic create audit --max-size-mb 5120 --user-metadata 'owner=security'
  busbar topic create events --if-not-exists`,
		Args: exactArgs(1, "a topic name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkNewName(names.Entity, name); err != nil {
				return err
			}
			var props sbadmin.TopicProperties
			if err := f.apply(cmd.Flags(), &props); err != nil {
				return err
			}
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				resp, err := c.CreateTopic(ctx, name, &sbadmin.CreateTopicOptions{Properties: &props})
				if err != nil {
					err = entityError(err, topicName(name))
					if !ifNotExists || ExitCode(err) != ExitExists {
						return err
					}
					t, gerr := c.GetTopic(ctx, name, nil)
					if gerr != nil {
						return entityError(gerr, topicName(name))
					}
					if t == nil || !isTopic(&t.TopicProperties) {
						return nameTaken(topicName(name), name, "queue")
					}
					return existed(cmd, asJSON, topicName(name), newTopicView(name, &t.TopicProperties, nil))
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), newTopicView(name, &resp.TopicProperties, nil))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created topic %s\n", name)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), true)
	addIfNotExists(cmd, &ifNotExists)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newTopicListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List topics with their subscription counts",
		Example: `  busbar topic list
  busbar topic list --json | jq -r '.[] | select(.runtime.subscriptionCount == 0) | .name'`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAdmin(func(c *adminClient) error {
				views, err := listTopics(cmd, c)
				if err != nil {
					return err
				}
				if asJSON {
					if views == nil {
						views = []topicView{}
					}
					return writeJSON(cmd.OutOrStdout(), views)
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "STATUS", "SUBSCRIPTIONS", "SCHEDULED", "SIZE", "TTL", "DUPLICATE-DETECTION")
				for _, v := range views {
					p, rt := v.Properties, v.Runtime
					if rt == nil {
						rt = &topicRuntime{}
					}
					dup := optBool(p.RequiresDuplicateDetection)
					if p.RequiresDuplicateDetection != nil && *p.RequiresDuplicateDetection {
						dup = isoCell(p.DuplicateDetectionHistoryTimeWindow)
					}
					t.row(cell(v.Name, 0), cell(optStr(p.Status), 0), strconv.Itoa(int(rt.SubscriptionCount)),
						strconv.Itoa(int(rt.ScheduledMessageCount)), sizeCell(rt.SizeInBytes),
						isoCell(p.DefaultMessageTimeToLive), dup)
				}
				return t.flush()
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// listTopics reads every topic with its runtime counts, in the broker's
// order (by name).
func listTopics(cmd *cobra.Command, c *adminClient) ([]topicView, error) {
	ctx := cmd.Context()
	var views []topicView
	index := map[string]int{}
	pager := c.NewListTopicsPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, entityError(err, "topic list")
		}
		for _, t := range page.Topics {
			index[t.TopicName] = len(views)
			views = append(views, newTopicView(t.TopicName, &t.TopicProperties, nil))
		}
	}
	rtPager := c.NewListTopicsRuntimePropertiesPager(nil)
	for rtPager.More() {
		page, err := rtPager.NextPage(ctx)
		if err != nil {
			return nil, entityError(err, "topic list")
		}
		for _, t := range page.TopicRuntimeProperties {
			if i, ok := index[t.TopicName]; ok {
				views[i].Runtime = newTopicView(t.TopicName, &sbadmin.TopicProperties{}, &t.TopicRuntimeProperties).Runtime
			}
		}
	}
	return views, nil
}

func newTopicShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a topic's properties and counts",
		Long: `Show a topic's properties and its runtime counts: subscriptions, SQL and
correlation filters, scheduled messages and size. A topic's messages are counted
by its subscriptions: see 'busbar subscription list TOPIC'.

Exits with 3 if the topic does not exist.`,
		Example: `  busbar topic show events
  busbar topic show events --json | jq .runtime.subscriptionCount`,
		Args: exactArgs(1, "a topic name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				t, err := getTopic(ctx, c, name)
				if err != nil {
					return err
				}
				rt, err := c.GetTopicRuntimeProperties(ctx, name, nil)
				if err == nil && rt == nil {
					err = errNotFound
				}
				if err != nil {
					return entityError(err, topicName(name))
				}
				v := newTopicView(name, &t.TopicProperties, &rt.TopicRuntimeProperties)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), v)
				}
				return printTopic(cmd.OutOrStdout(), v)
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newTopicUpdateCmd(a *app) *cobra.Command {
	var (
		f      topicFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change a topic's properties",
		Long: `Change the properties given as flags and keep the others. Duplicate detection
cannot be turned on or off once a topic exists (its window can change).

Exits with 3 if the topic does not exist.`,
		Example: `  busbar topic update events --default-ttl 1d
  busbar topic update events --status SendDisabled
  busbar topic update events --user-metadata ''   # clear it`,
		Args: exactArgs(1, "a topic name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !anyGiven(cmd.Flags(), topicPropertyFlags) {
				return usageErrorf("nothing to update: give at least one property flag\nRun '%s --help' for the list.", cmd.CommandPath())
			}
			if err := f.apply(cmd.Flags(), &sbadmin.TopicProperties{}); err != nil {
				return err
			}
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				t, err := getTopic(ctx, c, name)
				if err != nil {
					return err
				}
				props := t.TopicProperties
				if err := f.apply(cmd.Flags(), &props); err != nil {
					return err
				}
				resp, err := c.UpdateTopic(ctx, name, props, nil)
				if err != nil {
					return entityError(err, topicName(name))
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), newTopicView(name, &resp.TopicProperties, nil))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "updated topic %s\n", name)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), false)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newTopicDeleteCmd(a *app) *cobra.Command {
	var ifExists, asJSON bool
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete topics with their subscriptions and messages",
		Long: `Delete one or more topics, with their subscriptions, rules and messages.

Exits with 3 if a topic does not exist (or the name is a queue's), unless
--if-exists is given. Topics are deleted in the order given; the first failure
stops the command.`,
		Example: `  busbar topic delete events
  busbar topic delete events audit --if-exists`,
		Args: atLeastArgs(0, "at least one topic name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				return deleteEach(cmd, args, ifExists, asJSON, func(n string) string { return "topic " + n }, func(name string) error {
					// DELETE /NAME deletes a queue as well: make sure it is a topic.
					if _, err := getTopic(ctx, c, name); err != nil {
						return err
					}
					_, err := c.DeleteTopic(ctx, name, nil)
					return entityError(err, topicName(name))
				})
			})
		},
	}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when a topic does not exist")
	addJSONFlag(cmd, &asJSON)
	return cmd
}
