package cli

import (
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// peekBatch is the most messages asked for in one peek request.
const peekBatch = 100

func newPeekCmd(a *app) *cobra.Command {
	var (
		sub    subQueueFlags
		subscr subscriptionFlag
		sess   sessionFlag
		from   int64
		count  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "peek (QUEUE | TOPIC --subscription SUB)",
		Short: "Show messages without locking or removing them",
		Long: `Show up to --count messages of a queue, or of a topic's subscription, in
sequence-number order, without locking them: active, deferred and scheduled
messages alike. Nothing changes on the broker.

A subscription is named by its topic and --subscription (-s), or by its path
TOPIC/Subscriptions/SUB. A topic itself holds no messages to peek.

A session-enabled queue or subscription is peeked one session at a time:
--session-id names it ('busbar session list' shows those with messages).
Peeking a session locks it for a moment, so a session that another receiver
holds cannot be peeked until it is released. Its dead-letter queue has no
sessions and is peeked without --session-id.

Exits with 3 if the queue or subscription does not exist, 2 if it requires
sessions and --session-id is missing (or is given for one without sessions).`,
		Example: `  busbar peek orders
  busbar peek orders --dlq --count 50
  busbar peek orders --from 1200 --json | jq -r '.[].body'
  busbar peek events --subscription audit
  busbar peek events/Subscriptions/audit --dlq
  busbar peek carts --session-id customer-42`,
		Args: exactArgs(1, "a queue name, or a topic name with --subscription"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := subscr.entity(cmd, args[0])
			if err != nil {
				return err
			}
			if err := sub.check(); err != nil {
				return err
			}
			if err := sess.check(cmd, &sub); err != nil {
				return err
			}
			if err := positive("count", count); err != nil {
				return err
			}
			var out []jsonMessage
			err = a.withMessaging(cmd.Context(), func(c *azservicebus.Client) error {
				ctx := cmd.Context()
				var r messageReceiver
				if sess.id != "" {
					sr, err := e.acceptSession(ctx, c, sess.id, azservicebus.ReceiveModePeekLock)
					if err != nil {
						return e.sessionErr(err)
					}
					r = sr
				} else {
					pr, err := e.newReceiver(c, &azservicebus.ReceiverOptions{SubQueue: sub.subQueue()})
					if err != nil {
						return e.err(err)
					}
					r = pr
				}
				defer closeQuietly(ctx, r.Close)
				var opts *azservicebus.PeekMessagesOptions
				if cmd.Flags().Changed("from") {
					opts = &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from}
				}
				for len(out) < count {
					msgs, err := r.PeekMessages(ctx, min(count-len(out), peekBatch), opts)
					if err != nil && requiresSession(err) {
						return a.needSessionID(ctx, e, "peek")
					}
					if err != nil {
						return e.err(err)
					}
					if len(msgs) == 0 {
						break
					}
					for _, m := range msgs {
						out = append(out, toJSONMessage(m))
					}
					opts = nil // the receiver continues after the last one peeked
				}
				return nil
			})
			if err != nil {
				return err
			}
			return printMessages(cmd, out, asJSON, sub.any())
		},
	}
	subscr.register(cmd)
	sub.register(cmd, true)
	sess.register(cmd)
	cmd.Flags().Int64Var(&from, "from", 0, "start at this sequence number (default: the first message)")
	cmd.Flags().IntVarP(&count, "count", "n", 10, "how many messages to show at most")
	addJSONFlag(cmd, &asJSON)
	return cmd
}
