package cli

import (
	"fmt"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/names"
)

// ruleFilterHelp describes the filter flags, for rule create and update.
const ruleFilterHelp = `The filter is one of:
  --sql EXPR                 a SQL filter: "region = 'eu' AND total > 100",
                             "sys.Subject LIKE 'order-%'", "EXISTS(priority)"
  correlation flags          a correlation filter: every field given must equal the
                             message's: --correlation-id, --message-id, --to,
                             --reply-to, --subject, --session-id,
                             --reply-to-session-id, --content-type, and
                             --property key=value for application properties
                             (typed as for send: n=5 is an integer, n:double=5 a
                             double); --correlation k=v,... gives the same as pairs
  --true                     every message
  --false                    no message

--action "SET …; REMOVE …" changes the copy of the message the rule delivers.`

func newRuleCreateCmd(a *app) *cobra.Command {
	var (
		f           ruleFlags
		asJSON      bool
		ifNotExists bool
	)
	cmd := &cobra.Command{
		Use:   "create TOPIC SUBSCRIPTION NAME",
		Short: "Add a rule to a subscription",
		Long: `Add a rule to a subscription. Messages sent to the topic from then on are
delivered to the subscription if this rule or any other of its rules matches.

` + ruleFilterHelp + `

Exits with 3 if the topic or subscription does not exist, 5 if the rule does,
unless --if-not-exists is given: then it says so and exits with 0, leaving the
rule's filter and action as they are.`,
		Example: `  busbar rule create events audit eu --sql "region = 'eu'"
  busbar rule create events audit orders --subject order-placed --property region=eu
  busbar rule create events audit big --correlation subject=order-placed,size=large
  busbar rule create events audit tag --true --action "SET source = 'busbar'"
  busbar rule delete events audit '$Default'   # then only the rules above select
  busbar rule create events audit eu --sql "region = 'eu'" --if-not-exists`,
		Args: exactArgs(3, "a topic, a subscription and a rule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, sub, name := args[0], args[1], args[2]
			if err := checkNewName(names.Rule, name); err != nil {
				return err
			}
			filter, err := f.filter(cmd.Flags())
			if err != nil {
				return err
			}
			if filter == nil {
				return usageErrorf("give a filter: --sql, correlation flags, --true or --false\nRun '%s --help' for usage.", cmd.CommandPath())
			}
			action, _ := f.actionValue(cmd.Flags())
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				resp, err := c.CreateRule(ctx, topic, sub, &sbadmin.CreateRuleOptions{Name: &name, Filter: filter, Action: action})
				if err != nil {
					err = ruleError(ctx, c, err, topic, sub, name)
					if !ifNotExists || ExitCode(err) != ExitExists {
						return err
					}
					r, gerr := c.GetRule(ctx, topic, sub, name, nil)
					if gerr == nil && r == nil {
						gerr = errNotFound
					}
					if gerr != nil {
						if uerr := unreadableRule(gerr, topic, sub); uerr != nil {
							return uerr
						}
						return ruleError(ctx, c, gerr, topic, sub, name)
					}
					return existed(cmd, asJSON, ruleName(topic, sub, name), newRuleView(&r.RuleProperties))
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), newRuleView(&resp.RuleProperties))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created rule %s of %s/Subscriptions/%s\n", name, topic, sub)
				return nil
			})
		},
	}
	f.registerFilter(cmd.Flags(), true)
	addIfNotExists(cmd, &ifNotExists)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newRuleListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list TOPIC SUBSCRIPTION",
		Short: "List a subscription's rules",
		Long: `List a subscription's rules with their filters and actions.

Exits with 3 if the topic or subscription does not exist.`,
		Example: `  busbar rule list events audit
  busbar rule list events audit --json | jq -r '.[].filter.sqlExpression'`,
		Args: exactArgs(2, "a topic and a subscription name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAdmin(func(c *adminClient) error {
				rules, err := listRules(cmd, c, args[0], args[1])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), rules)
				}
				return printRules(cmd.OutOrStdout(), rules)
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newRuleShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show TOPIC SUBSCRIPTION NAME",
		Short: "Show a rule's filter and action",
		Long: `Show a rule's filter, with its parameters or correlation fields, and its action.

Exits with 3 if the topic, subscription or rule does not exist.`,
		Example: `  busbar rule show events audit '$Default'
  busbar rule show events audit eu --json`,
		Args: exactArgs(3, "a topic, a subscription and a rule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, sub, name := args[0], args[1], args[2]
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				r, err := c.GetRule(ctx, topic, sub, name, nil)
				if err == nil && r == nil {
					err = errNotFound
				}
				if err != nil {
					if uerr := unreadableRule(err, topic, sub); uerr != nil {
						return uerr
					}
					return ruleError(ctx, c, err, topic, sub, name)
				}
				v := newRuleView(&r.RuleProperties)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), v)
				}
				return printRule(cmd.OutOrStdout(), v)
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newRuleUpdateCmd(a *app) *cobra.Command {
	var (
		f      ruleFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "update TOPIC SUBSCRIPTION NAME",
		Short: "Replace a rule's filter or action",
		Long: `Replace a rule's filter, its action, or both. A filter given replaces the old one
whole (a correlation filter is not merged field by field); without filter flags
the filter is kept. --action replaces the action, --action '' removes it; without
--action it is kept.

` + ruleFilterHelp + `

Exits with 3 if the topic, subscription or rule does not exist.`,
		Example: `  busbar rule update events audit eu --sql "region IN ('eu', 'uk')"
  busbar rule update events audit eu --action "SET routed = TRUE"
  busbar rule update events audit eu --action ''`,
		Args: exactArgs(3, "a topic, a subscription and a rule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, sub, name := args[0], args[1], args[2]
			filter, err := f.filter(cmd.Flags())
			if err != nil {
				return err
			}
			action, actionGiven := f.actionValue(cmd.Flags())
			if filter == nil && !actionGiven {
				return usageErrorf("nothing to update: give a filter or --action\nRun '%s --help' for usage.", cmd.CommandPath())
			}
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				r, err := c.GetRule(ctx, topic, sub, name, nil)
				if err == nil && r == nil {
					err = errNotFound
				}
				if err != nil {
					if uerr := unreadableRule(err, topic, sub); uerr != nil {
						return uerr
					}
					return ruleError(ctx, c, err, topic, sub, name)
				}
				props := r.RuleProperties
				if filter != nil {
					props.Filter = filter
				}
				if actionGiven {
					props.Action = action
				}
				resp, err := c.UpdateRule(ctx, topic, sub, props)
				if err != nil {
					return ruleError(ctx, c, err, topic, sub, name)
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), newRuleView(&resp.RuleProperties))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "updated rule %s of %s/Subscriptions/%s\n", name, topic, sub)
				return nil
			})
		},
	}
	f.registerFilter(cmd.Flags(), true)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newRuleDeleteCmd(a *app) *cobra.Command {
	var ifExists, asJSON bool
	cmd := &cobra.Command{
		Use:   "delete TOPIC SUBSCRIPTION NAME...",
		Short: "Delete rules of a subscription",
		Long: `Delete one or more rules of a subscription. A subscription without rules receives
no messages.

Exits with 3 if the topic, subscription or a rule does not exist, unless
--if-exists is given (which only forgives a missing rule). Rules are deleted in
the order given; the first failure stops the command.`,
		Example: `  busbar rule delete events audit '$Default'
  busbar rule delete events audit eu uk --if-exists`,
		Args: atLeastArgs(2, "a topic, a subscription and at least one rule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, sub := args[0], args[1]
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				if _, err := getSubscription(ctx, c, topic, sub); err != nil {
					return err
				}
				label := func(n string) string { return fmt.Sprintf("rule %s of %s/Subscriptions/%s", n, topic, sub) }
				return deleteEach(cmd, args[2:], ifExists, asJSON, label, func(name string) error {
					_, err := c.DeleteRule(ctx, topic, sub, name, nil)
					return entityError(err, ruleName(topic, sub, name))
				})
			})
		},
	}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when a rule does not exist")
	addJSONFlag(cmd, &asJSON)
	return cmd
}
