package cli

import (
	"fmt"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/names"
)

func newQueueCreateCmd(a *app) *cobra.Command {
	var (
		f           queueFlags
		asJSON      bool
		ifNotExists bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a queue",
		Long: `Create a queue. Properties not given take the Service Bus defaults: lock
duration 1m, max delivery count 10, no expiry, duplicate detection off, 1024 MB.

Durations are Go durations with an optional day count (30s, 1h30m, 7d), ISO 8601
as Service Bus writes them (PT30S), or "never".

Exits with 5 if the queue already exists, unless --if-not-exists is given: then
it says so and exits with 0, leaving the queue as it is (its properties are not
compared with the flags). A topic of that name is still exit code 5.`,
		Example: `  busbar queue create orders
  busbar queue create orders --lock-duration 30s --max-delivery-count 5 --default-ttl 1h --dead-letter-on-expiration
  busbar queue create payments --duplicate-detection --duplicate-window 10m --forward-dlq-to payments-errors
  busbar queue create orders --if-not-exists   # in a setup script: exit 0 either way`,
		Args: exactArgs(1, "a queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkNewName(names.Entity, name); err != nil {
				return err
			}
			var props sbadmin.QueueProperties
			if err := f.apply(cmd.Flags(), &props); err != nil {
				return err
			}
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				resp, err := c.CreateQueue(ctx, name, &sbadmin.CreateQueueOptions{Properties: &props})
				if err != nil {
					err = entityError(err, queueName(name))
					if !ifNotExists || ExitCode(err) != ExitExists {
						return err
					}
					q, gerr := c.GetQueue(ctx, name, nil)
					if gerr != nil {
						return entityError(gerr, queueName(name))
					}
					if q == nil || !isQueue(&q.QueueProperties) {
						return nameTaken(queueName(name), name, "topic")
					}
					return existed(cmd, asJSON, queueName(name), newQueueView(name, &q.QueueProperties, nil))
				}
				v := newQueueView(name, &resp.QueueProperties, nil)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), v)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created queue %s\n", name)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), true)
	addIfNotExists(cmd, &ifNotExists)
	addJSONFlag(cmd, &asJSON)
	return cmd
}
