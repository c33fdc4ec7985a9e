package cli

import (
	"fmt"

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

Exits with 3 if a queue does not exist, unless --if-exists is given. Queues are
deleted in the order given; the first failure stops the command.`,
		Example: `  busbar queue delete orders
  busbar queue delete orders payments --if-exists`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s takes at least one queue name\nUsage: %s", cmd.CommandPath(), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			type result struct {
				Name    string `json:"name"`
				Deleted bool   `json:"deleted"`
			}
			var results []result
			err := a.withAdmin(func(c *adminClient) error {
				for _, name := range args {
					_, err := c.DeleteQueue(cmd.Context(), name, nil)
					if err != nil && !(ifExists && isNotFound(err)) {
						return entityError(err, queueName(name))
					}
					results = append(results, result{name, err == nil})
					if !asJSON {
						if err == nil {
							fmt.Fprintf(cmd.OutOrStdout(), "deleted queue %s\n", name)
						} else {
							fmt.Fprintf(cmd.OutOrStdout(), "queue %s does not exist\n", name)
						}
					}
				}
				return nil
			})
			if asJSON && results != nil {
				if jerr := writeJSON(cmd.OutOrStdout(), results); err == nil {
					err = jerr
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when a queue does not exist")
	addJSONFlag(cmd, &asJSON)
	return cmd
}
