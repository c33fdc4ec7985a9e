package cli

import (
	"fmt"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
)

func newQueueUpdateCmd(a *app) *cobra.Command {
	var (
		f      queueFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change a queue's properties",
		Long: `Change the properties given as flags and keep the others. Duplicate detection and
sessions cannot be changed once a queue exists.

Exits with 3 if the queue does not exist.`,
		Example: `  busbar queue update orders --max-delivery-count 3
  busbar queue update orders --status ReceiveDisabled
  busbar queue update orders --forward-to ''   # stop forwarding`,
		Args: exactArgs(1, "a queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !f.anyChanged(cmd.Flags()) {
				return usageErrorf("nothing to update: give at least one property flag\nRun '%s --help' for the list.", cmd.CommandPath())
			}
			// Check the flags before going to the broker.
			if err := f.apply(cmd.Flags(), &sbadmin.QueueProperties{}); err != nil {
				return err
			}
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				q, err := getQueue(ctx, c, name)
				if err != nil {
					return err
				}
				props := q.QueueProperties
				if err := f.apply(cmd.Flags(), &props); err != nil {
					return err
				}
				resp, err := c.UpdateQueue(ctx, name, props, nil)
				if err != nil {
					return entityError(err, queueName(name))
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), newQueueView(name, &resp.QueueProperties, nil))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "updated queue %s\n", name)
				return nil
			})
		},
	}
	f.register(cmd.Flags(), false)
	addJSONFlag(cmd, &asJSON)
	return cmd
}
