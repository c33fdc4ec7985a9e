package cli

import (
	"context"
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

// importFlags are the flags of the import command.
type importFlags struct {
	output     string
	apply      bool
	params     []string
	paramsFile string
	namespace  string
}

func newImportCmd(a *app) *cobra.Command {
	var f importFlags
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
			return a.runImport(cmd, args[0], &f)
		},
	}
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "write the Config.json to this file instead of standard output")
	cmd.Flags().BoolVar(&f.apply, "apply", false, "create the entities in the running broker through the admin API")
	cmd.Flags().StringArrayVarP(&f.params, "param", "p", nil, "template parameter NAME=VALUE (repeatable; wins over --parameters)")
	cmd.Flags().StringVar(&f.paramsFile, "parameters", "", "ARM parameters file ({\"parameters\": {NAME: {\"value\": …}}})")
	cmd.Flags().StringVar(&f.namespace, "namespace", "", "with --apply, the template namespace to create (needed when it has several)")
	return cmd
}

// runImport runs the import command on the template at path: it reads the
// template, reports what it cannot carry over, then writes the Config.json
// or (--apply) creates the entities.
func (a *app) runImport(cmd *cobra.Command, path string, f *importFlags) error {
	if f.apply && f.output != "" {
		return usageErrorf("-o and --apply exclude each other: write a Config.json, or create the entities")
	}
	imp, err := readImport(path, f)
	if err != nil {
		return err
	}
	reportImport(cmd.ErrOrStderr(), imp, f.apply)
	if !f.apply {
		return writeImport(cmd, imp, f.output)
	}
	ns, err := pickNamespace(imp.Config, f.namespace)
	if err != nil {
		return err
	}
	return a.withAdmin(func(c *adminClient) error {
		return applyImport(cmd, c, ns, imp.AuthRules)
	})
}

// readImport reads and evaluates the template at path with the parameters
// the flags give.
func readImport(path string, f *importFlags) (*config.ARMImport, error) {
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	opts := config.ARMOptions{Parameters: map[string]any{}}
	if f.paramsFile != "" {
		pdata, err := readLimited(f.paramsFile)
		if err != nil {
			return nil, err
		}
		ps, err := config.ParseARMParameters(pdata)
		if err != nil {
			return nil, usageErrorf("%s: %v", f.paramsFile, err)
		}
		opts.Parameters = ps
	}
	for _, p := range f.params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--param %q: want NAME=VALUE", p)
		}
		opts.Parameters[k] = v
	}
	imp, err := config.ParseARMTemplate(data, opts)
	if err != nil {
		return nil, &exitError{code: 1, err: fmt.Errorf("%s: %w", path, err)}
	}
	return imp, nil
}

// reportImport writes to stderr the warnings of the import and what of the
// template the Config.json (or, with apply, the broker) does not get.
func reportImport(stderr io.Writer, imp *config.ARMImport, apply bool) {
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
}

// writeImport writes the Config.json to output, or to standard output if
// output is "".
func writeImport(cmd *cobra.Command, imp *config.ARMImport, output string) error {
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
// a check that none exists, then queues and topics, the queues'
// forwarding (its targets must exist first), subscriptions and rules.
func applyImport(cmd *cobra.Command, c *adminClient, ns *config.Namespace, rules []config.ARMAuthRule) error {
	im := &importer{ctx: cmd.Context(), out: cmd.OutOrStdout(), c: c, ns: ns, rules: rules}
	for _, step := range []func() error{im.checkNoneExists, im.createQueues, im.createTopics, im.setForwarding, im.createSubscriptions} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// importer creates the entities of namespace ns, with the authorization
// rules among rules that belong to them, printing what it creates to out.
type importer struct {
	ctx   context.Context
	out   io.Writer
	c     *adminClient
	ns    *config.Namespace
	rules []config.ARMAuthRule
}

// checkNoneExists fails with ExitExists if any queue or topic exists.
func (im *importer) checkNoneExists() error {
	var exists []string
	for _, q := range im.ns.Queues {
		if r, err := im.c.GetQueue(im.ctx, q.Name, nil); err != nil {
			return entityError(err, queueName(q.Name))
		} else if r != nil {
			exists = append(exists, "queue "+q.Name)
		}
	}
	for _, t := range im.ns.Topics {
		if r, err := im.c.GetTopic(im.ctx, t.Name, nil); err != nil {
			return entityError(err, "topic "+t.Name)
		} else if r != nil {
			exists = append(exists, "topic "+t.Name)
		}
	}
	if len(exists) > 0 {
		return &exitError{code: ExitExists, err: fmt.Errorf("nothing was created: these exist already: %s", strings.Join(exists, ", "))}
	}
	return nil
}

// entityRules are the authorization rules of entity, with new keys.
func (im *importer) entityRules(entity string) ([]sbadmin.AuthorizationRule, error) {
	var out []sbadmin.AuthorizationRule
	for _, r := range im.rules {
		if r.Entity == "" || !strings.EqualFold(r.Entity, entity) || !strings.EqualFold(r.Namespace, im.ns.Name) {
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

// printRules prints the keys of the rules created for an entity.
func (im *importer) printRules(kind, entity string, rs []sbadmin.AuthorizationRule) {
	for _, r := range rs {
		fmt.Fprintf(im.out, "%s %s: authorization rule %s, primary key %s\n", kind, entity, *r.KeyName, *r.PrimaryKey)
	}
}

// createQueues creates the queues without their forwarding: its targets
// may not exist yet.
func (im *importer) createQueues() error {
	for _, q := range im.ns.Queues {
		p := importQueueProps(q.Props)
		ar, err := im.entityRules(q.Name)
		if err != nil {
			return err
		}
		p.AuthorizationRules = ar
		p.ForwardTo, p.ForwardDeadLetteredMessagesTo = nil, nil
		if _, err := im.c.CreateQueue(im.ctx, q.Name, &sbadmin.CreateQueueOptions{Properties: &p}); err != nil {
			return entityError(err, queueName(q.Name))
		}
		fmt.Fprintf(im.out, "created queue %s\n", q.Name)
		im.printRules("queue", q.Name, ar)
	}
	return nil
}

func (im *importer) createTopics() error {
	for _, t := range im.ns.Topics {
		p := importTopicProps(t.Props)
		ar, err := im.entityRules(t.Name)
		if err != nil {
			return err
		}
		p.AuthorizationRules = ar
		if _, err := im.c.CreateTopic(im.ctx, t.Name, &sbadmin.CreateTopicOptions{Properties: &p}); err != nil {
			return entityError(err, "topic "+t.Name)
		}
		fmt.Fprintf(im.out, "created topic %s\n", t.Name)
		im.printRules("topic", t.Name, ar)
	}
	return nil
}

// setForwarding sets the forwarding of the queues that have it, now that
// every target exists.
func (im *importer) setForwarding() error {
	for _, q := range im.ns.Queues {
		if q.Props.ForwardTo == nil && q.Props.ForwardDeadLetteredMessagesTo == nil {
			continue
		}
		cur, err := im.c.GetQueue(im.ctx, q.Name, nil)
		if err != nil || cur == nil {
			return entityError(err, queueName(q.Name))
		}
		p := cur.QueueProperties
		p.ForwardTo = q.Props.ForwardTo
		p.ForwardDeadLetteredMessagesTo = q.Props.ForwardDeadLetteredMessagesTo
		if _, err := im.c.UpdateQueue(im.ctx, q.Name, p, nil); err != nil {
			return entityError(err, queueName(q.Name))
		}
	}
	return nil
}

// createSubscriptions creates the subscriptions; a subscription's rules,
// if it has any, replace $Default in the template's order.
func (im *importer) createSubscriptions() error {
	for _, t := range im.ns.Topics {
		for _, s := range t.Subscriptions {
			p := importSubscriptionProps(s.Props)
			sctx := withSubscriptionStatus(im.ctx, p.Status)
			if _, err := im.c.CreateSubscription(sctx, t.Name, s.Name, &sbadmin.CreateSubscriptionOptions{Properties: &p}); err != nil {
				return entityError(err, fmt.Sprintf("subscription %s/%s", t.Name, s.Name))
			}
			fmt.Fprintf(im.out, "created subscription %s/%s\n", t.Name, s.Name)
			if len(s.Rules) == 0 {
				continue
			}
			if _, err := im.c.DeleteRule(im.ctx, t.Name, s.Name, "$Default", nil); err != nil {
				return entityError(err, fmt.Sprintf("rule %s/%s/$Default", t.Name, s.Name))
			}
			for _, r := range s.Rules {
				o := importRule(r)
				if _, err := im.c.CreateRule(im.ctx, t.Name, s.Name, &o); err != nil {
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
