package cli

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/config"
)

// maxTemplateBytes bounds the template and parameters files read.
const maxTemplateBytes = 64 << 20

func newImportCmd(a *app) *cobra.Command {
	var (
		output     string
		apply      bool
		params     []string
		paramsFile string
		namespace  string
	)
	cmd := &cobra.Command{
		Use:   "import TEMPLATE.json",
		Short: "Read an Azure ARM template into a Config.json, or create its entities in a running broker",
		Long: `Read an Azure Resource Manager (ARM) template, as "Export template" writes it
from a Service Bus namespace or as written by hand, and write the emulator
Config.json that declares the same queues, topics, subscriptions and rules
(to standard output, or to -o FILE), or with --apply create them in the running
broker through the admin API. Bicep users compile to ARM first:
az bicep build --file main.bicep (it writes main.json).

Read: Microsoft.ServiceBus/namespaces and their queues, topics,
topics/subscriptions, topics/subscriptions/rules and authorizationRules, as
top-level resources or nested in their parent. Other resources are skipped with
a warning. Names and properties may use the template's parameters (defaults,
--param NAME=VALUE or --parameters FILE) and variables and the functions concat,
format, toLower, toUpper, string, int, bool, if, equals, not, empty, length,
replace and trim; any other function stops the import with an error naming the
resource. "copy" loops are not supported.

Authorization rules: templates carry their rights but not their keys. A
namespace rule becomes a shared access policy only through busbar serve
--policies NAME=KEY:RIGHTS (a warning says so). With --apply, a queue's or topic's
rules are created with new random keys, printed on standard output; Config.json
cannot hold them (a warning says so).

With --apply nothing is created when any declared queue or topic exists already
(exit code 5); a template with several namespaces needs --namespace.`,
		Example: `  busbar import template.json -o Config.json
  busbar import template.json --param namespaceName=orders-dev --apply
  az bicep build --file main.bicep && busbar import main.json --parameters main.parameters.json -o Config.json`,
		Args: exactArgs(1, "an ARM template file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if apply && output != "" {
				return usageErrorf("-o and --apply exclude each other: write a Config.json, or create the entities")
			}
			data, err := readLimited(args[0])
			if err != nil {
				return err
			}
			opts := config.ARMOptions{Parameters: map[string]any{}}
			if paramsFile != "" {
				pdata, err := readLimited(paramsFile)
				if err != nil {
					return err
				}
				ps, err := config.ParseARMParameters(pdata)
				if err != nil {
					return usageErrorf("%s: %v", paramsFile, err)
				}
				opts.Parameters = ps
			}
			for _, p := range params {
				k, v, ok := strings.Cut(p, "=")
				if !ok || k == "" {
					return usageErrorf("--param %q: want NAME=VALUE", p)
				}
				opts.Parameters[k] = v
			}
			imp, err := config.ParseARMTemplate(data, opts)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("%s: %w", args[0], err)}
			}
			stderr := cmd.ErrOrStderr()
			for _, w := range imp.Warnings {
				fmt.Fprintf(stderr, "warning: %s\n", w)
			}
			for _, r := range imp.AuthRules {
				switch {
				case r.Entity == "":
					fmt.Fprintf(stderr, "warning: namespace authorization rule '%s' (%s) is not imported: templates carry no keys; give it to busbar serve as --policies '%s=KEY:%s'\n",
						r.Name, strings.Join(r.Rights, ", "), r.Name, strings.Join(r.Rights, ","))
				case !apply:
					fmt.Fprintf(stderr, "warning: authorization rule '%s' of '%s' is not written: Config.json cannot hold authorization rules (busbar import --apply creates them)\n", r.Name, r.Entity)
				}
			}
			for ns, sku := range imp.SKUs {
				fmt.Fprintf(stderr, "note: namespace '%s' is %s in the template; busbar serve --tier %s enforces that tier's limits\n", ns, sku, strings.ToLower(sku))
			}
			if !apply {
				b, err := imp.Config.Marshal()
				if err != nil {
					return err
				}
				if output == "" {
					_, err = cmd.OutOrStdout().Write(b)
					return err
				}
				if err := os.WriteFile(output, b, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", output)
				return nil
			}
			ns, err := pickNamespace(imp.Config, namespace)
			if err != nil {
				return err
			}
			return a.withAdmin(func(c *adminClient) error {
				return applyImport(cmd, c, ns, imp.AuthRules)
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the Config.json to this file instead of standard output")
	cmd.Flags().BoolVar(&apply, "apply", false, "create the entities in the running broker through the admin API")
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "template parameter NAME=VALUE (repeatable; wins over --parameters)")
	cmd.Flags().StringVar(&paramsFile, "parameters", "", "ARM parameters file ({\"parameters\": {NAME: {\"value\": …}}})")
	cmd.Flags().StringVar(&namespace, "namespace", "", "with --apply, the template namespace to create (needed when it has several)")
	return cmd
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTemplateBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTemplateBytes {
		return nil, usageErrorf("%s is over %d MB", path, maxTemplateBytes>>20)
	}
	return b, nil
}

func pickNamespace(cfg *config.EmulatorConfig, name string) (*config.Namespace, error) {
	var names []string
	for i := range cfg.Namespaces {
		if name == "" && len(cfg.Namespaces) == 1 || strings.EqualFold(cfg.Namespaces[i].Name, name) {
			return &cfg.Namespaces[i], nil
		}
		names = append(names, cfg.Namespaces[i].Name)
	}
	if name == "" {
		return nil, usageErrorf("the template declares %d namespaces (%s): choose one with --namespace", len(names), strings.Join(names, ", "))
	}
	return nil, usageErrorf("the template declares no namespace '%s' (it has %s)", name, strings.Join(names, ", "))
}

// applyImport creates a namespace's entities through the admin API: first
// a check that none exists, then queues, topics, subscriptions and rules.
func applyImport(cmd *cobra.Command, c *adminClient, ns *config.Namespace, rules []config.ARMAuthRule) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	var exists []string
	for _, q := range ns.Queues {
		if r, err := c.GetQueue(ctx, q.Name, nil); err != nil {
			return entityError(err, queueName(q.Name))
		} else if r != nil {
			exists = append(exists, "queue "+q.Name)
		}
	}
	for _, t := range ns.Topics {
		if r, err := c.GetTopic(ctx, t.Name, nil); err != nil {
			return entityError(err, "topic "+t.Name)
		} else if r != nil {
			exists = append(exists, "topic "+t.Name)
		}
	}
	if len(exists) > 0 {
		return &exitError{code: ExitExists, err: fmt.Errorf("nothing was created: these exist already: %s", strings.Join(exists, ", "))}
	}
	entityRules := func(entity string) ([]sbadmin.AuthorizationRule, error) {
		var out []sbadmin.AuthorizationRule
		for _, r := range rules {
			if r.Entity == "" || !strings.EqualFold(r.Entity, entity) || !strings.EqualFold(r.Namespace, ns.Name) {
				continue
			}
			var rights []sbadmin.AccessRight
			for _, x := range r.Rights {
				i := slices.IndexFunc([]string{"Manage", "Send", "Listen"}, func(s string) bool { return strings.EqualFold(s, x) })
				if i < 0 {
					return nil, fmt.Errorf("authorization rule '%s' of '%s': unknown right '%s' (Manage, Send, Listen)", r.Name, entity, x)
				}
				rights = append(rights, sbadmin.AccessRight([]string{"Manage", "Send", "Listen"}[i]))
			}
			out = append(out, sbadmin.AuthorizationRule{KeyName: to.Ptr(r.Name), AccessRights: rights, PrimaryKey: to.Ptr(newKey()), SecondaryKey: to.Ptr(newKey())})
		}
		return out, nil
	}
	printRules := func(kind, entity string, rs []sbadmin.AuthorizationRule) {
		for _, r := range rs {
			fmt.Fprintf(out, "%s %s: authorization rule %s, primary key %s\n", kind, entity, *r.KeyName, *r.PrimaryKey)
		}
	}
	// Forwarding targets must exist first: create queues without their
	// forwarding, then set it.
	for _, q := range ns.Queues {
		p := importQueueProps(q.Props)
		ar, err := entityRules(q.Name)
		if err != nil {
			return err
		}
		p.AuthorizationRules = ar
		fwd, fwdDLQ := p.ForwardTo, p.ForwardDeadLetteredMessagesTo
		p.ForwardTo, p.ForwardDeadLetteredMessagesTo = nil, nil
		if _, err := c.CreateQueue(ctx, q.Name, &sbadmin.CreateQueueOptions{Properties: &p}); err != nil {
			return entityError(err, queueName(q.Name))
		}
		fmt.Fprintf(out, "created queue %s\n", q.Name)
		printRules("queue", q.Name, ar)
		p.ForwardTo, p.ForwardDeadLetteredMessagesTo = fwd, fwdDLQ
	}
	for _, t := range ns.Topics {
		p := importTopicProps(t.Props)
		ar, err := entityRules(t.Name)
		if err != nil {
			return err
		}
		p.AuthorizationRules = ar
		if _, err := c.CreateTopic(ctx, t.Name, &sbadmin.CreateTopicOptions{Properties: &p}); err != nil {
			return entityError(err, "topic "+t.Name)
		}
		fmt.Fprintf(out, "created topic %s\n", t.Name)
		printRules("topic", t.Name, ar)
	}
	for _, q := range ns.Queues {
		if q.Props.ForwardTo == nil && q.Props.ForwardDeadLetteredMessagesTo == nil {
			continue
		}
		cur, err := c.GetQueue(ctx, q.Name, nil)
		if err != nil || cur == nil {
			return entityError(err, queueName(q.Name))
		}
		p := cur.QueueProperties
		p.ForwardTo = q.Props.ForwardTo
		p.ForwardDeadLetteredMessagesTo = q.Props.ForwardDeadLetteredMessagesTo
		if _, err := c.UpdateQueue(ctx, q.Name, p, nil); err != nil {
			return entityError(err, queueName(q.Name))
		}
	}
	for _, t := range ns.Topics {
		for _, s := range t.Subscriptions {
			p := importSubscriptionProps(s.Props)
			sctx := withSubscriptionStatus(ctx, p.Status)
			if _, err := c.CreateSubscription(sctx, t.Name, s.Name, &sbadmin.CreateSubscriptionOptions{Properties: &p}); err != nil {
				return entityError(err, fmt.Sprintf("subscription %s/%s", t.Name, s.Name))
			}
			fmt.Fprintf(out, "created subscription %s/%s\n", t.Name, s.Name)
			if len(s.Rules) == 0 {
				continue
			}
			// The rules replace $Default, in the template's order.
			if _, err := c.DeleteRule(ctx, t.Name, s.Name, "$Default", nil); err != nil {
				return entityError(err, fmt.Sprintf("rule %s/%s/$Default", t.Name, s.Name))
			}
			for _, r := range s.Rules {
				o := importRule(r)
				if _, err := c.CreateRule(ctx, t.Name, s.Name, &o); err != nil {
					return entityError(err, fmt.Sprintf("rule %s/%s/%s", t.Name, s.Name, r.Name))
				}
			}
		}
	}
	return nil
}

// newKey is a new random SAS key, as Azure makes them (32 bytes, base64).
func newKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func importQueueProps(c config.QueueProps) sbadmin.QueueProperties {
	p := sbadmin.QueueProperties{
		LockDuration:                        iso(c.LockDuration),
		DuplicateDetectionHistoryTimeWindow: iso(c.DuplicateDetectionHistoryTimeWindow),
		DefaultMessageTimeToLive:            iso(c.DefaultMessageTimeToLive),
		AutoDeleteOnIdle:                    iso(c.AutoDeleteOnIdle),
		MaxSizeInMegabytes:                  narrow(c.MaxSizeInMegabytes),
		MaxMessageSizeInKilobytes:           c.MaxMessageSizeInKilobytes,
		MaxDeliveryCount:                    c.MaxDeliveryCount,
		RequiresDuplicateDetection:          c.RequiresDuplicateDetection,
		RequiresSession:                     c.RequiresSession,
		DeadLetteringOnMessageExpiration:    c.DeadLetteringOnMessageExpiration,
		EnableBatchedOperations:             c.EnableBatchedOperations,
		EnablePartitioning:                  c.EnablePartitioning,
		ForwardTo:                           c.ForwardTo,
		ForwardDeadLetteredMessagesTo:       c.ForwardDeadLetteredMessagesTo,
		UserMetadata:                        c.UserMetadata,
	}
	if c.Status != nil {
		p.Status = to.Ptr(sbadmin.EntityStatus(*c.Status))
	}
	return p
}

func importTopicProps(c config.TopicProps) sbadmin.TopicProperties {
	p := sbadmin.TopicProperties{
		DefaultMessageTimeToLive:            iso(c.DefaultMessageTimeToLive),
		DuplicateDetectionHistoryTimeWindow: iso(c.DuplicateDetectionHistoryTimeWindow),
		AutoDeleteOnIdle:                    iso(c.AutoDeleteOnIdle),
		MaxSizeInMegabytes:                  narrow(c.MaxSizeInMegabytes),
		MaxMessageSizeInKilobytes:           c.MaxMessageSizeInKilobytes,
		RequiresDuplicateDetection:          c.RequiresDuplicateDetection,
		EnableBatchedOperations:             c.EnableBatchedOperations,
		EnablePartitioning:                  c.EnablePartitioning,
		SupportOrdering:                     c.SupportOrdering,
		UserMetadata:                        c.UserMetadata,
	}
	if c.Status != nil {
		p.Status = to.Ptr(sbadmin.EntityStatus(*c.Status))
	}
	return p
}

func importSubscriptionProps(c config.SubscriptionProps) sbadmin.SubscriptionProperties {
	p := sbadmin.SubscriptionProperties{
		LockDuration:                     iso(c.LockDuration),
		DefaultMessageTimeToLive:         iso(c.DefaultMessageTimeToLive),
		AutoDeleteOnIdle:                 iso(c.AutoDeleteOnIdle),
		MaxDeliveryCount:                 c.MaxDeliveryCount,
		RequiresSession:                  c.RequiresSession,
		DeadLetteringOnMessageExpiration: c.DeadLetteringOnMessageExpiration,
		EnableDeadLetteringOnFilterEvaluationExceptions: c.DeadLetteringOnFilterEvaluationExceptions,
		EnableBatchedOperations:                         c.EnableBatchedOperations,
		ForwardTo:                                       c.ForwardTo,
		ForwardDeadLetteredMessagesTo:                   c.ForwardDeadLetteredMessagesTo,
		UserMetadata:                                    c.UserMetadata,
	}
	if c.Status != nil {
		p.Status = to.Ptr(sbadmin.EntityStatus(*c.Status))
	}
	return p
}

func importRule(r config.Rule) sbadmin.CreateRuleOptions {
	o := sbadmin.CreateRuleOptions{Name: to.Ptr(r.Name)}
	if r.Filter.Type == config.FilterCorrelation && r.Filter.Correlation != nil {
		f := r.Filter.Correlation
		o.Filter = &sbadmin.CorrelationFilter{
			ApplicationProperties: f.Properties,
			ContentType:           f.ContentType,
			CorrelationID:         f.CorrelationID,
			MessageID:             f.MessageID,
			ReplyTo:               f.ReplyTo,
			ReplyToSessionID:      f.ReplyToSessionID,
			SessionID:             f.SessionID,
			Subject:               f.Label,
			To:                    f.To,
		}
	} else {
		o.Filter = &sbadmin.SQLFilter{Expression: r.Filter.SQL}
	}
	if r.Action != "" {
		o.Action = &sbadmin.SQLAction{Expression: r.Action}
	}
	return o
}

// iso writes a duration as the admin API takes it (ISO 8601); nil stays nil.
func iso(d *time.Duration) *string {
	if d == nil {
		return nil
	}
	return to.Ptr(config.FormatISO8601(*d))
}

// narrow converts MaxSizeInMegabytes to the admin client's int32, which
// Config.json validation keeps in range.
func narrow(p *int64) *int32 {
	if p == nil {
		return nil
	}
	v := int32(min(*p, math.MaxInt32))
	return &v
}
