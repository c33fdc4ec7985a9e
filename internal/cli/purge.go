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
		sess   sessionFlag
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

On a session-enabled queue or subscription, --session-id purges that session.
Without it every session is purged, one after the other: each session with an
available message is locked, emptied and released, until none is offered for
--wait. Sessions that other receivers hold are left alone, and so is session
state. The dead-letter queues have no sessions.

Exits with 3 if the queue or subscription does not exist.`,
		Example: `  busbar purge orders
  busbar purge orders --dlq
  busbar purge orders --json   # {"entity": "orders", "purged": 42}
  busbar purge events --subscription audit --dlq
  busbar purge carts                           # every session: purged 9 messages from 3 sessions of carts
  busbar purge carts --session-id customer-42`,
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
			if wait <= 0 {
				return usageErrorf("--wait must be positive")
			}
			n := 0
			sessions := -1 // not session-enabled, or one session named
			from := sub.path(e.path())
			if sess.id != "" {
				from += " (session " + sess.id + ")"
			}
			err = a.withMessaging(cmd.Context(), func(c *azservicebus.Client) error {
				ctx := cmd.Context()
				prog := newProgress(cmd.ErrOrStderr(), "purged", 0)
				defer prog.done()
				if sess.id != "" {
					r, err := e.acceptSession(ctx, c, sess.id, azservicebus.ReceiveModeReceiveAndDelete)
					if err != nil {
						return e.sessionErr(err)
					}
					return e.err(purgeReceiver(ctx, r, wait, prog, &n))
				}
				r, err := e.newReceiver(c, &azservicebus.ReceiverOptions{
					ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
					SubQueue:    sub.subQueue(),
				})
				if err != nil {
					return e.err(err)
				}
				if err = attach(ctx, r); err == nil {
					return e.err(purgeReceiver(ctx, r, wait, prog, &n))
				}
				closeQuietly(ctx, r.Close)
				if !requiresSession(err) || sub.any() {
					return e.err(err)
				}
				// A session-enabled entity: every session in turn.
				sessions = 0
				for {
					wctx, cancel := context.WithTimeout(ctx, wait)
					r, ok, err := e.acceptNextSession(wctx, c, azservicebus.ReceiveModeReceiveAndDelete)
					cancel()
					if err != nil {
						return e.err(err)
					}
					if !ok {
						return nil
					}
					sessions++
					if err := purgeReceiver(ctx, r, wait, prog, &n); err != nil {
						return fmt.Errorf("session %s: %w", r.SessionID(), e.err(err))
					}
				}
			})
			what := plural(n, "message")
			if sessions >= 0 {
				what += " from " + plural(sessions, "session") + " of"
			} else {
				what += " from"
			}
			if err != nil {
				if n > 0 {
					return fmt.Errorf("purged %s %s, then: %w", what, from, err)
				}
				return err
			}
			if asJSON {
				v := struct {
					Entity   string `json:"entity"`
					Session  string `json:"sessionId,omitempty"`
					Purged   int    `json:"purged"`
					Sessions *int   `json:"sessions,omitempty"`
				}{Entity: sub.path(e.path()), Session: sess.id, Purged: n}
				if sessions >= 0 {
					v.Sessions = &sessions
				}
				return writeJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged %s %s\n", what, from)
			return nil
		},
	}
	subscr.register(cmd)
	sub.register(cmd, true)
	sess.register(cmd)
	cmd.Flags().DurationVar(&wait, "wait", time.Second, "stop after no message (or, for every session, no session) has arrived for this long")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// purgeReceiver receives and deletes with r (in receive-and-delete mode)
// until no message has arrived for wait, adding to *n, and closes r.
func purgeReceiver(ctx context.Context, r messageReceiver, wait time.Duration, prog *progress, n *int) error {
	defer closeQuietly(ctx, r.Close)
	opts := &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: 50 * time.Millisecond}
	for {
		wctx, cancel := context.WithTimeout(ctx, wait)
		msgs, err := r.ReceiveMessages(wctx, 1000, opts)
		cancel()
		*n += len(msgs)
		prog.update(*n)
		if err != nil && !isIdle(ctx, err) {
			return err
		}
		if len(msgs) == 0 {
			break
		}
	}
	rest, err := drainDeleted(ctx, r)
	*n += len(rest)
	return err
}
