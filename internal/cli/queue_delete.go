package cli

import (
	"github.com/spf13/cobra"
)

func newQueueDeleteCmd(a *app) *cobra.Command {
	var (
		ifExists bool
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete queues and every message in them",
		Long: `Delete one or more queues, with their messages and dead-letter queues.

Exits with 3 if a queue does not exist (or the name is a topic's), unless
--if-exists is given. Queues are deleted in the order given; the first failure
stops the command.`,
		Example: `  busbar queue delete orders
  busbar queue delete orders payments --if-exists`,
		Args: atLeastArgs(0, "at least one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAdmin(func(c *adminClient) error {
				ctx := cmd.Context()
				return deleteEach(cmd, args, ifExists, asJSON, func(n string) string { return "queue " + n }, func(name string) error {
					// DELETE /NAME deletes a topic as well: make sure it is a queue.
					if _, err := getQueue(ctx, c, name); err != nil {
						return err
					}
					_, err := c.DeleteQueue(ctx, name, nil)
					return entityError(err, queueName(name))
				})
			})
		},
	}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when a queue does not exist")
	addJSONFlag(cmd, &asJSON)
	return cmd
}
