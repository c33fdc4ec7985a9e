package cli

import (
	"github.com/spf13/cobra"
)

func newQueueShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a queue's properties and message counts",
		Long: `Show a queue's properties and its runtime counts: active, dead-lettered,
scheduled, transfer and transfer dead-letter messages, and its size.

Exits with 3 if the queue does not exist.`,
		Example: `  busbar queue show orders
  busbar queue show orders --json | jq .runtime.deadLetterMessageCount`,
		Args: exactArgs(1, "a queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				q, err := getQueue(ctx, c, name)
				if err != nil {
					return err
				}
				rt, err := c.GetQueueRuntimeProperties(ctx, name, nil)
				if err == nil && rt == nil {
					err = errNotFound
				}
				if err != nil {
					return entityError(err, queueName(name))
				}
				v := newQueueView(name, &q.QueueProperties, &rt.QueueRuntimeProperties)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), v)
				}
				return printQueue(cmd.OutOrStdout(), v)
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}
