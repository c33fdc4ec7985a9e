package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// receiveBatch is the most messages asked for in one receive call.
const receiveBatch = 100

type receiveFlags struct {
	subscr      subscriptionFlag
	sub         subQueueFlags
	session     sessionFlag
	mode        string
	count       int
	wait        time.Duration
	settle      string
	reason      string
	description string
	deferred    []int64
	asJSON      bool
}

func newReceiveCmd(a *app) *cobra.Command {
	var f receiveFlags
	cmd := &cobra.Command{
		Use:   "receive (QUEUE | TOPIC --subscription SUB)",
		Short: "Receive messages and settle them",
		Long: `Receive up to --count messages from a queue, or from a topic's subscription, and
print them. Receiving stops after --count messages, or once no message has
arrived for --wait.

A subscription is named by its topic and --subscription (-s), or by its path
TOPIC/Subscriptions/SUB.

In peeklock mode (the default) each message is locked, printed and then settled
with --settle:
  complete     remove it (default)
  abandon      unlock it for redelivery (its delivery count goes up)
  deadletter   move it to the dead-letter queue, with --reason and --description
  defer        set it aside; receive it later by sequence number with --deferred
In receiveanddelete mode messages are removed as they are delivered.

On a session-enabled queue or subscription, --session-id receives from that
session (locking it while the command runs). Without it, the command takes the
next session with an available message, waiting up to --wait for one, and says
on standard error which one it got; it receives from that session only.
Deferred messages of a session need --session-id.

Exits with 0 when no message arrived, 3 if the queue or subscription does not
exist.`,
		Example: `  busbar receive orders
  busbar receive orders --count 10 --wait 2s --json
  busbar receive orders --settle deadletter --reason Poison --description 'bad schema'
  busbar receive orders --settle defer          # prints the sequence number
  busbar receive orders --deferred 42 --settle complete
  busbar receive orders --dlq --mode receiveanddelete --count 100
  busbar receive events --subscription audit --count 10
  busbar receive events/Subscriptions/audit --dlq --settle complete
  busbar receive carts --session-id customer-42 --count 10
  busbar receive carts --count 10              # the next session with messages`,
		Args: exactArgs(1, "a queue name, or a topic name with --subscription"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := f.subscr.entity(cmd, args[0])
			if err != nil {
				return err
			}
			return a.receive(cmd, e, &f)
		},
	}
	fs := cmd.Flags()
	f.subscr.register(cmd)
	f.sub.register(cmd, true)
	f.session.register(cmd)
	fs.StringVar(&f.mode, "mode", "peeklock", "peeklock or receiveanddelete")
	fs.IntVarP(&f.count, "count", "n", 1, "how many messages to receive at most")
	fs.DurationVar(&f.wait, "wait", 5*time.Second, "stop after no message has arrived for this long")
	fs.StringVar(&f.settle, "settle", "complete", "complete, abandon, deadletter or defer (peeklock mode)")
	fs.StringVar(&f.reason, "reason", "", "dead-letter reason (with --settle deadletter)")
	fs.StringVar(&f.description, "description", "", "dead-letter error description (with --settle deadletter)")
	fs.Int64SliceVar(&f.deferred, "deferred", nil, "receive these deferred messages by sequence number (comma-separated)")
	addJSONFlag(cmd, &f.asJSON)
	return cmd
}

// settlement is a peek-lock outcome.
type settlement struct {
	verb string // complete, abandon, ...
	name string // as printed: completed, abandoned, ...
	do   func(ctx context.Context, r messageReceiver, m *azservicebus.ReceivedMessage) error
}

func (f *receiveFlags) settlement() (settlement, error) {
	switch strings.ToLower(f.settle) {
	case "complete":
		return settlement{"complete", "completed", func(ctx context.Context, r messageReceiver, m *azservicebus.ReceivedMessage) error {
			return r.CompleteMessage(ctx, m, nil)
		}}, nil
	case "abandon":
		return settlement{"abandon", "abandoned", func(ctx context.Context, r messageReceiver, m *azservicebus.ReceivedMessage) error {
			return r.AbandonMessage(ctx, m, nil)
		}}, nil
	case "deadletter", "dead-letter":
		opts := &azservicebus.DeadLetterOptions{}
		if f.reason != "" {
			opts.Reason = &f.reason
		}
		if f.description != "" {
			opts.ErrorDescription = &f.description
		}
		return settlement{"deadletter", "dead-lettered", func(ctx context.Context, r messageReceiver, m *azservicebus.ReceivedMessage) error {
			return r.DeadLetterMessage(ctx, m, opts)
		}}, nil
	case "defer":
		return settlement{"defer", "deferred", func(ctx context.Context, r messageReceiver, m *azservicebus.ReceivedMessage) error {
			return r.DeferMessage(ctx, m, nil)
		}}, nil
	}
	return settlement{}, usageErrorf("--settle: %q is not one of complete, abandon, deadletter, defer", f.settle)
}

// receive runs the receive command: it checks how the flags combine
// (mode, settlement, deferred), opens the receiver, then receives, settles
// and prints the messages. Long on purpose: the flags combine, and each
// branch is one flag's check or effect, in the order applied.
func (a *app) receive(cmd *cobra.Command, e entityRef, f *receiveFlags) error {
	fs := cmd.Flags()
	if err := f.sub.check(); err != nil {
		return err
	}
	if err := f.session.check(cmd, &f.sub); err != nil {
		return err
	}
	if err := positive("count", f.count); err != nil {
		return err
	}
	if f.wait <= 0 {
		return usageErrorf("--wait must be positive")
	}
	var mode azservicebus.ReceiveMode
	switch strings.ToLower(f.mode) {
	case "peeklock", "peek-lock":
		mode = azservicebus.ReceiveModePeekLock
	case "receiveanddelete", "receive-and-delete":
		mode = azservicebus.ReceiveModeReceiveAndDelete
		if fs.Changed("settle") {
			return usageErrorf("--settle applies to peeklock mode only: receiveanddelete removes messages as they arrive")
		}
	default:
		return usageErrorf("--mode: %q is not peeklock or receiveanddelete", f.mode)
	}
	settle, err := f.settlement()
	if err != nil {
		return err
	}
	if (fs.Changed("reason") || fs.Changed("description")) && settle.name != "dead-lettered" {
		return usageErrorf("--reason and --description go with --settle deadletter")
	}
	if mode == azservicebus.ReceiveModeReceiveAndDelete && len(f.deferred) > 0 {
		return usageErrorf("--deferred needs peeklock mode")
	}

	var out []jsonMessage
	err = a.withMessaging(cmd.Context(), func(c *azservicebus.Client) (err error) {
		ctx := cmd.Context()
		var r messageReceiver
		sessionful := f.session.id != ""
		if sessionful {
			sr, err := e.acceptSession(ctx, c, f.session.id, mode)
			if err != nil {
				return e.sessionErr(err)
			}
			r = sr
		} else {
			pr, err := e.newReceiver(c, &azservicebus.ReceiverOptions{ReceiveMode: mode, SubQueue: f.sub.subQueue()})
			if err != nil {
				return e.err(err)
			}
			r = pr
		}
		defer func() { closeQuietly(ctx, r.Close) }()
		// Abandoned messages are unlocked once the receiver is closed (see
		// abandonAfterClose), so that this receive does not get them back.
		// A session's are abandoned on its receiver, which holds the
		// session lock they depend on; the SDK releases any that come back
		// to it.
		var abandon []*azservicebus.ReceivedMessage
		abandoning := mode == azservicebus.ReceiveModePeekLock && settle.verb == "abandon"
		defer func() {
			var aerr error
			if sessionful {
				aerr = abandonOn(ctx, r, abandon)
			} else if pr, ok := r.(*azservicebus.Receiver); ok {
				aerr = abandonAfterClose(ctx, c, pr, e, f.sub.subQueue(), abandon)
			}
			if aerr != nil && err == nil {
				err = fmt.Errorf("abandon failed (the messages unlock when their lock expires): %w", e.err(aerr))
			}
		}()
		// switchToSession replaces a plain receiver refused by a
		// session-enabled entity with one on its next available session.
		switchToSession := func(err error) (bool, error) {
			if sessionful || !requiresSession(err) || f.sub.any() {
				return false, err
			}
			closeQuietly(ctx, r.Close)
			wctx, cancel := context.WithTimeout(ctx, f.wait)
			sr, ok, err := e.acceptNextSession(wctx, c, mode)
			cancel()
			if err != nil || !ok {
				return false, err
			}
			r, sessionful = sr, true
			fmt.Fprintf(cmd.ErrOrStderr(), "receiving from session %s\n", sr.SessionID())
			return true, nil
		}
		if !sessionful && len(f.deferred) == 0 {
			if err := attach(ctx, r); err != nil {
				switched, err := switchToSession(err)
				if err != nil {
					return e.err(err)
				}
				if !switched {
					return nil // no session with messages came within --wait
				}
			}
		}
		take := func(msgs []*azservicebus.ReceivedMessage) error {
			for _, m := range msgs {
				j := toJSONMessage(m)
				if abandoning {
					abandon = append(abandon, m)
					j.Settled = settle.name
				} else if mode == azservicebus.ReceiveModePeekLock {
					if err := settle.do(ctx, r, m); err != nil {
						out = append(out, j)
						return fmt.Errorf("message %d: %s failed: %w", *m.SequenceNumber, settle.verb, e.err(err))
					}
					j.Settled = settle.name
				} else {
					j.Settled = "deleted"
				}
				out = append(out, j)
			}
			return nil
		}
		if len(f.deferred) > 0 {
			msgs, err := r.ReceiveDeferredMessages(ctx, f.deferred, nil)
			if err != nil && !sessionful && requiresSession(err) {
				return a.needSessionID(ctx, e, "receive --deferred")
			}
			if err != nil && isNotFound(err) && !isEntityNotFound(err) {
				return &exitError{code: ExitNotFound, err: fmt.Errorf("%s: no deferred message with sequence number %s (it does not exist, is not deferred, or is locked)", e, joinInts(f.deferred))}
			}
			if err != nil {
				return e.err(err)
			}
			return take(msgs)
		}
		for len(out) < f.count {
			wctx, cancel := context.WithTimeout(ctx, f.wait)
			msgs, err := r.ReceiveMessages(wctx, min(f.count-len(out), receiveBatch), nil)
			cancel()
			if err != nil && !isIdle(ctx, err) {
				return e.err(err)
			}
			if len(msgs) == 0 {
				break
			}
			if err := take(msgs); err != nil {
				return err
			}
		}
		if mode == azservicebus.ReceiveModeReceiveAndDelete {
			// Messages that arrived after the last call are already deleted
			// on the broker: collect them from the receiver's cache.
			msgs, err := drainDeleted(ctx, r)
			_ = take(msgs)
			return err
		}
		return nil
	})
	if err != nil && len(out) == 0 {
		return err
	}
	if perr := printMessages(cmd, out, f.asJSON, f.sub.any()); err == nil {
		err = perr
	}
	return err
}

// drainDeleted closes a receive-and-delete receiver and returns the
// messages it still holds: the broker has deleted them already.
func drainDeleted(ctx context.Context, r messageReceiver) ([]*azservicebus.ReceivedMessage, error) {
	closeQuietly(ctx, r.Close)
	var all []*azservicebus.ReceivedMessage
	for {
		msgs, err := r.ReceiveMessages(context.WithoutCancel(ctx), receiveBatch, nil)
		var sbErr *azservicebus.Error
		if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeClosed {
			return all, nil
		}
		if err != nil {
			return all, err
		}
		if len(msgs) == 0 {
			return all, nil
		}
		all = append(all, msgs...)
	}
}

func joinInts(ns []int64) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ",")
}
