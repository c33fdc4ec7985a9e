package cli

import (
	"strconv"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/spf13/cobra"
)

func newQueueListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List queues with their message counts",
		Example: `  busbar queue list
  busbar queue list --json | jq -r '.[] | select(.runtime.deadLetterMessageCount > 0) | .name'`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAdmin(func(c *adminClient) error {
				views, err := listQueues(cmd, c)
				if err != nil {
					return err
				}
				if asJSON {
					if views == nil {
						views = []queueView{}
					}
					return writeJSON(cmd.OutOrStdout(), views)
				}
				t := newTable(cmd.OutOrStdout(), "NAME", "STATUS", "ACTIVE", "DEAD-LETTER", "SCHEDULED", "SIZE", "LOCK", "MAX-DELIVERY", "TTL")
				for _, v := range views {
					p, rt := v.Properties, v.Runtime
					if rt == nil {
						rt = &queueRuntime{}
					}
					t.row(cell(v.Name, 0), cell(optStr(p.Status), 0),
						strconv.Itoa(int(rt.ActiveMessageCount)), strconv.Itoa(int(rt.DeadLetterMessageCount)),
						strconv.Itoa(int(rt.ScheduledMessageCount)), sizeCell(rt.SizeInBytes),
						isoCell(p.LockDuration), optInt(p.MaxDeliveryCount), isoCell(p.DefaultMessageTimeToLive))
				}
				return t.flush()
			})
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// listQueues reads every queue with its runtime counts, in the broker's
// order (by name).
func listQueues(cmd *cobra.Command, c *adminClient) ([]queueView, error) {
	ctx := cmd.Context()
	var views []queueView
	index := map[string]int{}
	pager := c.NewListQueuesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, entityError(err, "queue list")
		}
		for _, q := range page.Queues {
			index[q.QueueName] = len(views)
			views = append(views, newQueueView(q.QueueName, &q.QueueProperties, nil))
		}
	}
	rtPager := c.NewListQueuesRuntimePropertiesPager(nil)
	for rtPager.More() {
		page, err := rtPager.NextPage(ctx)
		if err != nil {
			return nil, entityError(err, "queue list")
		}
		for _, q := range page.QueueRuntimeProperties {
			if i, ok := index[q.QueueName]; ok {
				views[i].Runtime = newQueueView(q.QueueName, &sbadmin.QueueProperties{}, &q.QueueRuntimeProperties).Runtime
			}
		}
	}
	return views, nil
}
