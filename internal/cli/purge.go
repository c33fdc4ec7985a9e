package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

func newPurgeCmd(a *app) *cobra.Command {
	var (
		sub    subQueueFlags
		subscr subscriptionFlag
		wait   time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "purge (QUEUE | TOPIC --subscription SUB)",
		Short: "Delete every available message of a queue or subscription",
		Long: `Receive and delete messages from a queue, or from a topic's subscription, until
none has arrived for --wait, then print how many were deleted. Scheduled
messages (not yet enqueued), deferred messages and messages locked by other
receivers are left alone.

A subscription is named by its topic and --subscription (-s), or by its path
TOPIC/Subscriptions/SUB. Purging one subscription leaves the topic's other
subscriptions alone.

Exits with 3 if the queue or subscription does not exist.`,
		Example: `  busbar purge orders
  busbar purge orders --dlq
  busbar purge orders --json   # {"entity": "orders", "purged": 42}
  busbar purge events --subscription audit --dlq`,
		Args: exactArgs(1, "a queue name, or a topic name with --subscription"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := subscr.entity(cmd, args[0])
			if err != nil {
				return err
			}
			if err := sub.check(); err != nil {
				return err
			}
			if wait <= 0 {
				return usageErrorf("--wait must be positive")
			}
			n := 0
			err = a.withMessaging(cmd.Context(), func(c *azservicebus.Client) error {
				ctx := cmd.Context()
				r, err := e.newReceiver(c, &azservicebus.ReceiverOptions{
					ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
					SubQueue:    sub.subQueue(),
				})
				if err != nil {
					return e.err(err)
				}
				defer closeQuietly(ctx, r.Close)
				prog := newProgress(cmd.ErrOrStderr(), "purged", 0)
				defer prog.done()
				opts := &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: 50 * time.Millisecond}
				for {
					wctx, cancel := context.WithTimeout(ctx, wait)
					msgs, err := r.ReceiveMessages(wctx, 1000, opts)
					cancel()
					n += len(msgs)
					prog.update(n)
					if err != nil && !isIdle(ctx, err) {
						return e.err(err)
					}
					if len(msgs) == 0 {
						break
					}
				}
				rest, err := drainDeleted(ctx, r)
				n += len(rest)
				return err
			})
			if err != nil {
				if n > 0 {
					return fmt.Errorf("purged %s from %s, then: %w", plural(n, "message"), sub.path(e.path()), err)
				}
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), struct {
					Entity string `json:"entity"`
					Purged int    `json:"purged"`
				}{sub.path(e.path()), n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged %s from %s\n", plural(n, "message"), sub.path(e.path()))
			return nil
		},
	}
	subscr.register(cmd)
	sub.register(cmd, true)
	cmd.Flags().DurationVar(&wait, "wait", time.Second, "stop after no message has arrived for this long")
	addJSONFlag(cmd, &asJSON)
	return cmd
}
