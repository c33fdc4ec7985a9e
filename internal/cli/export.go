package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/names"
)

// emulatorNamespace is the namespace name of the emulator's sample
// Config.json, used when the broker reports none.
const emulatorNamespace = "sbemulatorns"

func newExportCmd(a *app) *cobra.Command {
	var (
		output    string
		namespace string
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the broker's queues, topics, subscriptions and rules as an emulator Config.json",
		Long: `Write the broker's topology as a Service Bus emulator Config.json: every queue and
topic with the properties that differ from the Service Bus defaults, every
subscription with its rules. Both busbar serve --config and the emulator accept
it; loaded into a new broker it declares the same entities with the same
properties and rules, and exporting that broker writes the same file again.
Messages are not exported.

Rules: in Config.json a subscription's first rule becomes its default rule, and
a subscription declared without rules gets $Default, which matches every
message. So a subscription whose only rule is $Default with a TrueFilter and no
action is written without rules; otherwise every rule is written, in the
broker's order. Config.json knows SQL and correlation filters only: a TrueFilter
is written as the SQL filter 1=1 and a FalseFilter as 1=0, which match the same
messages (the management API then reports them as SqlFilters).

Entities an earlier Busbar created under names that today's naming rule refuses
("a/../b", a subscription "my sub") are exported too, each with a warning on
standard error: busbar serve --config refuses such a file, as it would create
them, until they are renamed in the file (or deleted from the broker).

Not exported, because Config.json cannot hold them: entity authorization rules,
and SupportOrdering of queues, which the management API does not report. These
stop the export with an error naming each one, as writing them would load back
into something different: a subscription without any rule (it would get
$Default), SQL filter and action parameters (@name values), and correlation
filter properties that are not strings, numbers or booleans.

Nothing is written unless the whole export succeeds. -o FILE replaces the file
atomically (a temporary file in the same directory, synced, then renamed), so
FILE holds the old topology or the new one, never a part. With standard output
redirected to a file, the shell empties that file before busbar runs: prefer
-o to keep the old file when the export fails.`,
		Example: `  busbar export -o Config.json
  busbar export > Config.json
  busbar export -o Config.json && busbar serve --config Config.json --data-dir ./copy`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, cfg, err := a.export(cmd, namespace)
			if err != nil {
				if output == "" || output == "-" {
					if f, ok := cmd.OutOrStdout().(*os.File); ok {
						if fi, serr := f.Stat(); serr == nil && fi.Mode().IsRegular() {
							// The shell emptied the file before busbar ran.
							return fmt.Errorf("%w\nNothing was written; standard output is a file, which the shell emptied: 'busbar export -o FILE' leaves an existing file as it was when the export fails", err)
						}
					}
				}
				return err
			}
			if output == "" || output == "-" {
				_, err = cmd.OutOrStdout().Write(data)
				return err
			}
			if err := writeFileAtomic(output, data, 0o644); err != nil {
				return fmt.Errorf("writing %s: %w", output, err)
			}
			ns := cfg.Namespaces[0]
			subs := 0
			for _, t := range ns.Topics {
				subs += len(t.Subscriptions)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s, %s and %s to %s\n", plural(len(ns.Queues), "queue"),
				plural(len(ns.Topics), "topic"), plural(subs, "subscription"), output)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file (atomically: replaced whole or not at all) instead of standard output")
	cmd.Flags().StringVar(&namespace, "namespace", "", "namespace name to write (default: the broker's)")
	return cmd
}

// export reads the topology and encodes it; nothing is written until it
// all succeeded.
func (a *app) export(cmd *cobra.Command, namespace string) ([]byte, *config.EmulatorConfig, error) {
	var cfg *config.EmulatorConfig
	err := a.withAdmin(func(c *adminClient) error {
		var err error
		cfg, err = exportConfig(cmd, c, namespace)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	// Entities from before the naming rule may have names a new broker
	// refuses; they are exported all the same (the file is the broker's
	// topology), each with a warning.
	if err := cfg.Validate(config.Options{ExistingNames: true}); err != nil {
		return nil, nil, fmt.Errorf("the exported configuration would not load back: %w", err)
	}
	for _, w := range legacyNames(cfg) {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	data, err := cfg.Marshal()
	if err != nil {
		return nil, nil, err
	}
	return data, cfg, nil
}

// exportConfig reads the topology through the management API.
func exportConfig(cmd *cobra.Command, c *adminClient, ns string) (*config.EmulatorConfig, error) {
	ctx := cmd.Context()
	if ns == "" {
		info, err := c.GetNamespaceProperties(ctx, nil)
		if err != nil {
			return nil, entityError(err, "namespace")
		}
		ns = info.Name
	}
	if ns == "" {
		ns = emulatorNamespace
	}
	var queues []config.Queue
	pager := c.NewListQueuesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, entityError(err, "queue list")
		}
		for _, q := range page.Queues {
			props, err := exportQueueProps(&q.QueueProperties)
			if err != nil {
				return nil, fmt.Errorf("queue %q: %w", q.QueueName, err)
			}
			queues = append(queues, config.Queue{Name: q.QueueName, Props: props})
		}
	}
	var topics []config.Topic
	var problems []string
	tpager := c.NewListTopicsPager(nil)
	for tpager.More() {
		page, err := tpager.NextPage(ctx)
		if err != nil {
			return nil, entityError(err, "topic list")
		}
		for _, t := range page.Topics {
			props, err := exportTopicProps(&t.TopicProperties)
			if err != nil {
				return nil, fmt.Errorf("topic %q: %w", t.TopicName, err)
			}
			topic := config.Topic{Name: t.TopicName, Props: props}
			spager := c.NewListSubscriptionsPager(t.TopicName, nil)
			for spager.More() {
				page, err := spager.NextPage(ctx)
				if err != nil {
					return nil, listError(err, t.TopicName)
				}
				for _, s := range page.Subscriptions {
					sp, err := exportSubscriptionProps(&s.SubscriptionProperties)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", subscriptionName(t.TopicName, s.SubscriptionName), err)
					}
					sub := config.Subscription{Name: s.SubscriptionName, Props: sp}
					var rules []sbadmin.RuleProperties
					rpager := c.NewListRulesPager(t.TopicName, s.SubscriptionName, nil)
					for rpager.More() {
						page, err := rpager.NextPage(ctx)
						if err != nil {
							if uerr := unreadableRule(err, t.TopicName, s.SubscriptionName); uerr != nil {
								return nil, uerr
							}
							return nil, subscriptionError(ctx, c, err, t.TopicName, s.SubscriptionName)
						}
						rules = append(rules, page.Rules...)
					}
					var bad []string
					sub.Rules, bad = exportRules(rules)
					for _, b := range bad {
						problems = append(problems, subscriptionName(t.TopicName, s.SubscriptionName)+": "+b)
					}
					topic.Subscriptions = append(topic.Subscriptions, sub)
				}
			}
			topics = append(topics, topic)
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("cannot export, as Config.json cannot express:\n  %s", strings.Join(problems, "\n  "))
	}
	return &config.EmulatorConfig{
		Namespaces: []config.Namespace{{Name: ns, Queues: queues, Topics: topics}},
		Logging:    &config.Logging{Type: "File"},
	}, nil
}

// exportQueueProps keeps the properties of p that differ from the Service
// Bus defaults, which is what a Config.json leaves out.
func exportQueueProps(p *sbadmin.QueueProperties) (config.QueueProps, error) {
	def := broker.DefaultQueueProperties()
	var out config.QueueProps
	d := durations{}
	d.keep(p.LockDuration, def.LockDuration, &out.LockDuration)
	d.keep(p.DuplicateDetectionHistoryTimeWindow, def.DuplicateDetectionHistoryTimeWindow, &out.DuplicateDetectionHistoryTimeWindow)
	d.keep(p.DefaultMessageTimeToLive, def.DefaultMessageTimeToLive, &out.DefaultMessageTimeToLive)
	d.keep(p.AutoDeleteOnIdle, def.AutoDeleteOnIdle, &out.AutoDeleteOnIdle)
	if d.err != nil {
		return out, d.err
	}
	out.MaxSizeInMegabytes = differs(widen(p.MaxSizeInMegabytes), def.MaxSizeInMegabytes)
	out.MaxMessageSizeInKilobytes = differs(p.MaxMessageSizeInKilobytes, def.MaxMessageSizeInKilobytes)
	out.MaxDeliveryCount = differs(p.MaxDeliveryCount, def.MaxDeliveryCount)
	out.RequiresDuplicateDetection = differs(p.RequiresDuplicateDetection, def.RequiresDuplicateDetection)
	out.RequiresSession = differs(p.RequiresSession, def.RequiresSession)
	out.DeadLetteringOnMessageExpiration = differs(p.DeadLetteringOnMessageExpiration, def.DeadLetteringOnMessageExpiration)
	out.EnableBatchedOperations = differs(p.EnableBatchedOperations, def.EnableBatchedOperations)
	out.EnablePartitioning = differs(p.EnablePartitioning, def.EnablePartitioning)
	if p.Status != nil && string(*p.Status) != string(def.Status) {
		s := config.EntityStatus(*p.Status)
		out.Status = &s
	}
	out.ForwardTo = forwardName(p.ForwardTo)
	out.ForwardDeadLetteredMessagesTo = forwardName(p.ForwardDeadLetteredMessagesTo)
	if p.UserMetadata != nil && *p.UserMetadata != "" {
		out.UserMetadata = p.UserMetadata
	}
	return out, nil
}

// differs returns p when it is set to something other than dflt, else nil.
func differs[T comparable](p *T, dflt T) *T {
	if p == nil || *p == dflt {
		return nil
	}
	v := *p
	return &v
}

func widen(p *int32) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}

// exportTopicProps keeps the properties of p that differ from the Service
// Bus defaults.
func exportTopicProps(p *sbadmin.TopicProperties) (config.TopicProps, error) {
	def := broker.DefaultTopicProperties()
	var out config.TopicProps
	d := durations{}
	d.keep(p.DefaultMessageTimeToLive, def.DefaultMessageTimeToLive, &out.DefaultMessageTimeToLive)
	d.keep(p.DuplicateDetectionHistoryTimeWindow, def.DuplicateDetectionHistoryTimeWindow, &out.DuplicateDetectionHistoryTimeWindow)
	d.keep(p.AutoDeleteOnIdle, def.AutoDeleteOnIdle, &out.AutoDeleteOnIdle)
	if d.err != nil {
		return out, d.err
	}
	out.MaxSizeInMegabytes = differs(widen(p.MaxSizeInMegabytes), def.MaxSizeInMegabytes)
	out.MaxMessageSizeInKilobytes = differs(p.MaxMessageSizeInKilobytes, def.MaxMessageSizeInKilobytes)
	out.RequiresDuplicateDetection = differs(p.RequiresDuplicateDetection, def.RequiresDuplicateDetection)
	out.EnableBatchedOperations = differs(p.EnableBatchedOperations, def.EnableBatchedOperations)
	out.EnablePartitioning = differs(p.EnablePartitioning, def.EnablePartitioning)
	out.SupportOrdering = differs(p.SupportOrdering, def.SupportOrdering)
	if p.Status != nil && string(*p.Status) != string(def.Status) {
		s := config.EntityStatus(*p.Status)
		out.Status = &s
	}
	if p.UserMetadata != nil && *p.UserMetadata != "" {
		out.UserMetadata = p.UserMetadata
	}
	return out, nil
}

// exportSubscriptionProps keeps the properties of p that differ from the
// Service Bus defaults.
func exportSubscriptionProps(p *sbadmin.SubscriptionProperties) (config.SubscriptionProps, error) {
	def := broker.DefaultSubscriptionProperties()
	var out config.SubscriptionProps
	d := durations{}
	d.keep(p.LockDuration, def.LockDuration, &out.LockDuration)
	d.keep(p.DefaultMessageTimeToLive, def.DefaultMessageTimeToLive, &out.DefaultMessageTimeToLive)
	d.keep(p.AutoDeleteOnIdle, def.AutoDeleteOnIdle, &out.AutoDeleteOnIdle)
	if d.err != nil {
		return out, d.err
	}
	out.MaxDeliveryCount = differs(p.MaxDeliveryCount, def.MaxDeliveryCount)
	out.RequiresSession = differs(p.RequiresSession, def.RequiresSession)
	out.DeadLetteringOnMessageExpiration = differs(p.DeadLetteringOnMessageExpiration, def.DeadLetteringOnMessageExpiration)
	out.DeadLetteringOnFilterEvaluationExceptions = differs(p.EnableDeadLetteringOnFilterEvaluationExceptions, def.DeadLetteringOnFilterEvaluationExceptions)
	out.EnableBatchedOperations = differs(p.EnableBatchedOperations, def.EnableBatchedOperations)
	if p.Status != nil && string(*p.Status) != string(def.Status) {
		s := config.EntityStatus(*p.Status)
		out.Status = &s
	}
	out.ForwardTo = forwardName(p.ForwardTo)
	out.ForwardDeadLetteredMessagesTo = forwardName(p.ForwardDeadLetteredMessagesTo)
	if p.UserMetadata != nil && *p.UserMetadata != "" {
		out.UserMetadata = p.UserMetadata
	}
	return out, nil
}

// durations converts ISO 8601 durations from the management API,
// remembering the first error.
type durations struct{ err error }

// keep sets *dst to the duration iso gives when it differs from dflt.
func (d *durations) keep(iso *string, dflt time.Duration, dst **time.Duration) {
	if iso == nil || d.err != nil {
		return
	}
	v, err := config.ParseISO8601(*iso)
	if err != nil {
		d.err = err
		return
	}
	if v != dflt {
		*dst = &v
	}
}

// exportRules converts a subscription's rules (in the broker's order) to
// Config.json's, returning what cannot be converted as problems. A
// subscription whose only rule is $Default matching everything without an
// action gets no rules: loading the file gives it that very rule.
func exportRules(rules []sbadmin.RuleProperties) ([]config.Rule, []string) {
	if len(rules) == 0 {
		return nil, []string{"it has no rules (and so receives no messages); a subscription declared without rules gets $Default, which receives every message. " +
			"Give it a rule that matches nothing to export it, e.g. busbar rule create TOPIC SUB none --false"}
	}
	if len(rules) == 1 && strings.EqualFold(rules[0].Name, broker.DefaultRuleName) && rules[0].Action == nil {
		if _, ok := rules[0].Filter.(*sbadmin.TrueFilter); ok {
			return nil, nil
		}
	}
	var out []config.Rule
	var problems []string
	for _, r := range rules {
		cr, bad := exportRule(r)
		for _, b := range bad {
			problems = append(problems, fmt.Sprintf("rule %q: %s", r.Name, b))
		}
		out = append(out, cr)
	}
	return out, problems
}

func exportRule(r sbadmin.RuleProperties) (config.Rule, []string) {
	out := config.Rule{Name: r.Name}
	var problems []string
	sqlFilter := func(expr string) {
		out.Filter = config.Filter{Type: config.FilterSQL, SQL: expr}
	}
	switch f := r.Filter.(type) {
	case *sbadmin.TrueFilter:
		sqlFilter("1=1")
	case *sbadmin.FalseFilter:
		sqlFilter("1=0")
	case *sbadmin.SQLFilter:
		if len(f.Parameters) > 0 {
			problems = append(problems, "its SQL filter has parameters ("+strings.Join(sortedKeys(f.Parameters), ", ")+"), which Config.json cannot hold")
		}
		sqlFilter(f.Expression)
	case *sbadmin.CorrelationFilter:
		c := &config.CorrelationFilter{
			ContentType:      nonEmpty(f.ContentType),
			CorrelationID:    nonEmpty(f.CorrelationID),
			Label:            nonEmpty(f.Subject),
			MessageID:        nonEmpty(f.MessageID),
			ReplyTo:          nonEmpty(f.ReplyTo),
			ReplyToSessionID: nonEmpty(f.ReplyToSessionID),
			SessionID:        nonEmpty(f.SessionID),
			To:               nonEmpty(f.To),
		}
		for _, k := range sortedKeys(f.ApplicationProperties) {
			switch v := f.ApplicationProperties[k].(type) {
			case string, bool, int64, float64:
				if c.Properties == nil {
					c.Properties = map[string]any{}
				}
				c.Properties[k] = v
			default:
				problems = append(problems, fmt.Sprintf("its correlation filter property %q is a %T; Config.json holds strings, numbers and booleans", k, v))
			}
		}
		out.Filter = config.Filter{Type: config.FilterCorrelation, Correlation: c}
	case *sbadmin.UnknownRuleFilter:
		problems = append(problems, "its filter is a "+f.Type+", which Config.json cannot hold")
	default:
		problems = append(problems, "it has no filter")
	}
	switch a := r.Action.(type) {
	case nil:
	case *sbadmin.SQLAction:
		if len(a.Parameters) > 0 {
			problems = append(problems, "its action has parameters ("+strings.Join(sortedKeys(a.Parameters), ", ")+"), which Config.json cannot hold")
		}
		out.Action = a.Expression
	case *sbadmin.UnknownRuleAction:
		problems = append(problems, "its action is a "+a.Type+", which Config.json cannot hold")
	}
	return out, problems
}

func nonEmpty(p *string) *string {
	if p == nil || *p == "" {
		return nil
	}
	return p
}

// legacyNames describes each entity of cfg whose name only entities from
// before the naming rule can have (see package names).
func legacyNames(cfg *config.EmulatorConfig) []string {
	var out []string
	check := func(k names.Kind, what, name string) {
		err := names.Check(k, name)
		var ne *names.Error
		if errors.As(err, &ne) {
			out = append(out, fmt.Sprintf("%s has a name new entities may not have (%s); busbar serve --config refuses this file until it is renamed there", what, ne.Problem))
		}
	}
	for _, ns := range cfg.Namespaces {
		for _, q := range ns.Queues {
			check(names.Entity, queueName(q.Name), q.Name)
		}
		for _, t := range ns.Topics {
			check(names.Entity, topicName(t.Name), t.Name)
			for _, sub := range t.Subscriptions {
				check(names.Subscription, subscriptionName(t.Name, sub.Name), sub.Name)
				for _, r := range sub.Rules {
					check(names.Rule, ruleName(t.Name, sub.Name, r.Name), r.Name)
				}
			}
		}
	}
	return out
}
