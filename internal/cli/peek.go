package cli

import (
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// peekBatch is the most messages asked for in one peek request.
const peekBatch = 100

// peekFlags are the flags of the peek command.
type peekFlags struct {
	sub    subQueueFlags
	subscr subscriptionFlag
	sess   sessionFlag
	from   int64
	count  int
	asJSON bool
}

func newPeekCmd(a *app) *cobra.Command {
	var f peekFlags
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
			return a.peek(cmd, args[0], &f)
		},
	}
	f.subscr.register(cmd)
	f.sub.register(cmd, true)
	f.sess.register(cmd)
	cmd.Flags().Int64Var(&f.from, "from", 0, "start at this sequence number (default: the first message)")
	cmd.Flags().IntVarP(&f.count, "count", "n", 10, "how many messages to show at most")
	addJSONFlag(cmd, &f.asJSON)
	return cmd
}

// peek runs the peek command on the entity arg names: it checks the flags,
// peeks up to --count messages and prints them.
func (a *app) peek(cmd *cobra.Command, arg string, f *peekFlags) error {
	e, err := f.subscr.entity(cmd, arg)
	if err != nil {
		return err
	}
	if err := f.sub.check(); err != nil {
		return err
	}
	if err := f.sess.check(cmd, &f.sub); err != nil {
		return err
	}
	if err := positive("count", f.count); err != nil {
		return err
	}
	var out []jsonMessage
	err = a.withMessaging(cmd.Context(), func(c *azservicebus.Client) error {
		ctx := cmd.Context()
		var r messageReceiver
		if f.sess.id != "" {
			sr, err := e.acceptSession(ctx, c, f.sess.id, azservicebus.ReceiveModePeekLock)
			if err != nil {
				return e.sessionErr(err)
			}
			r = sr
		} else {
			pr, err := e.newReceiver(c, &azservicebus.ReceiverOptions{SubQueue: f.sub.subQueue()})
			if err != nil {
				return e.err(err)
			}
			r = pr
		}
		defer closeQuietly(ctx, r.Close)
		var opts *azservicebus.PeekMessagesOptions
		if cmd.Flags().Changed("from") {
			opts = &azservicebus.PeekMessagesOptions{FromSequenceNumber: &f.from}
		}
		for len(out) < f.count {
			msgs, err := r.PeekMessages(ctx, min(f.count-len(out), peekBatch), opts)
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
	return printMessages(cmd, out, f.asJSON, f.sub.any())
}
