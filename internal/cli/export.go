package cli

import (
	"fmt"
	"os"
	"time"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
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
		Short: "Write the broker's queues as an emulator Config.json",
		Long: `Write the broker's topology, every queue with the properties that differ from the
Service Bus defaults, as a Service Bus emulator Config.json. Both busbar serve
--config and the emulator accept it; loaded into a new broker it declares the same
queues with the same properties. Messages are not exported.

Not exported, because Config.json cannot hold them: entity authorization rules,
and SupportOrdering, which the management API does not report for queues.`,
		Example: `  busbar export > Config.json
  busbar export -o Config.json && busbar serve --config Config.json --data-dir ./copy`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cfg *config.EmulatorConfig
			err := a.withAdmin(func(c *adminClient) error {
				ns := namespace
				if ns == "" {
					info, err := c.GetNamespaceProperties(cmd.Context(), nil)
					if err != nil {
						return entityError(err, "namespace")
					}
					ns = info.Name
				}
				if ns == "" {
					ns = emulatorNamespace
				}
				var queues []config.Queue
				pager := c.NewListQueuesPager(nil)
				for pager.More() {
					page, err := pager.NextPage(cmd.Context())
					if err != nil {
						return entityError(err, "queue list")
					}
					for _, q := range page.Queues {
						props, err := exportQueueProps(&q.QueueProperties)
						if err != nil {
							return fmt.Errorf("queue %q: %w", q.QueueName, err)
						}
						queues = append(queues, config.Queue{Name: q.QueueName, Props: props})
					}
				}
				cfg = &config.EmulatorConfig{
					Namespaces: []config.Namespace{{Name: ns, Queues: queues}},
					Logging:    &config.Logging{Type: "File"},
				}
				return nil
			})
			if err != nil {
				return err
			}
			if err := cfg.Validate(config.Options{}); err != nil {
				return fmt.Errorf("the exported configuration would not load back: %w", err)
			}
			data, err := cfg.Marshal()
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				_, err = cmd.OutOrStdout().Write(data)
				return err
			}
			if err := os.WriteFile(output, data, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s to %s\n", plural(len(cfg.Namespaces[0].Queues), "queue"), output)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file instead of standard output")
	cmd.Flags().StringVar(&namespace, "namespace", "", "namespace name to write (default: the broker's)")
	return cmd
}

// exportQueueProps keeps the properties of p that differ from the Service
// Bus defaults, which is what a Config.json leaves out.
func exportQueueProps(p *sbadmin.QueueProperties) (config.QueueProps, error) {
	def := broker.DefaultQueueProperties()
	var out config.QueueProps
	var err error
	dur := func(iso *string, dflt time.Duration, dst **time.Duration) {
		if iso == nil || err != nil {
			return
		}
		d, perr := config.ParseISO8601(*iso)
		if perr != nil {
			err = perr
			return
		}
		if d != dflt {
			*dst = &d
		}
	}
	dur(p.LockDuration, def.LockDuration, &out.LockDuration)
	dur(p.DuplicateDetectionHistoryTimeWindow, def.DuplicateDetectionHistoryTimeWindow, &out.DuplicateDetectionHistoryTimeWindow)
	dur(p.DefaultMessageTimeToLive, def.DefaultMessageTimeToLive, &out.DefaultMessageTimeToLive)
	dur(p.AutoDeleteOnIdle, def.AutoDeleteOnIdle, &out.AutoDeleteOnIdle)
	if err != nil {
		return out, err
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
