package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// purgeFlags are the flags of the purge command.
type purgeFlags struct {
	sub    subQueueFlags
	subscr subscriptionFlag
	sess   sessionFlag
	wait   time.Duration
	asJSON bool
}

func newPurgeCmd(a *app) *cobra.Command {
	var f purgeFlags
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
			return a.purge(cmd, args[0], &f)
		},
	}
	f.subscr.register(cmd)
	f.sub.register(cmd, true)
	f.sess.register(cmd)
	cmd.Flags().DurationVar(&f.wait, "wait", time.Second, "stop after no message (or, for every session, no session) has arrived for this long")
	addJSONFlag(cmd, &f.asJSON)
	return cmd
}

// purge runs the purge command on the entity arg names: it checks the
// flags, purges, and prints how many messages (and sessions) it purged.
func (a *app) purge(cmd *cobra.Command, arg string, f *purgeFlags) error {
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
	if f.wait <= 0 {
		return usageErrorf("--wait must be positive")
	}
	n := 0
	sessions := -1 // not session-enabled, or one session named
	from := f.sub.path(e.path())
	if f.sess.id != "" {
		from += " (session " + f.sess.id + ")"
	}
	err = a.withMessaging(cmd.Context(), func(c *azservicebus.Client) error {
		prog := newProgress(cmd.ErrOrStderr(), "purged", 0)
		defer prog.done()
		return purgeEntity(cmd.Context(), c, e, f, prog, &n, &sessions)
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
	if f.asJSON {
		v := struct {
			Entity   string `json:"entity"`
			Session  string `json:"sessionId,omitempty"`
			Purged   int    `json:"purged"`
			Sessions *int   `json:"sessions,omitempty"`
		}{Entity: f.sub.path(e.path()), Session: f.sess.id, Purged: n}
		if sessions >= 0 {
			v.Sessions = &sessions
		}
		return writeJSON(cmd.OutOrStdout(), v)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "purged %s %s\n", what, from)
	return nil
}

// purgeEntity purges e (its sub-queue, or the session the flags name),
// adding to *n the messages purged. On a session-enabled entity with no
// session named it purges every session, counting them in *sessions.
func purgeEntity(ctx context.Context, c *azservicebus.Client, e entityRef, f *purgeFlags, prog *progress, n, sessions *int) error {
	if f.sess.id != "" {
		r, err := e.acceptSession(ctx, c, f.sess.id, azservicebus.ReceiveModeReceiveAndDelete)
		if err != nil {
			return e.sessionErr(err)
		}
		return e.err(purgeReceiver(ctx, r, f.wait, prog, n))
	}
	r, err := e.newReceiver(c, &azservicebus.ReceiverOptions{
		ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
		SubQueue:    f.sub.subQueue(),
	})
	if err != nil {
		return e.err(err)
	}
	if err = attach(ctx, r); err == nil {
		return e.err(purgeReceiver(ctx, r, f.wait, prog, n))
	}
	closeQuietly(ctx, r.Close)
	if !requiresSession(err) || f.sub.any() {
		return e.err(err)
	}
	// A session-enabled entity: every session in turn.
	*sessions = 0
	for {
		wctx, cancel := context.WithTimeout(ctx, f.wait)
		r, ok, err := e.acceptNextSession(wctx, c, azservicebus.ReceiveModeReceiveAndDelete)
		cancel()
		if err != nil {
			return e.err(err)
		}
		if !ok {
			return nil
		}
		*sessions++
		if err := purgeReceiver(ctx, r, f.wait, prog, n); err != nil {
			return fmt.Errorf("session %s: %w", r.SessionID(), e.err(err))
		}
	}
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
