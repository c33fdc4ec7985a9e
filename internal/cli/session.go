package cli

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/spf13/cobra"
)

// messageReceiver is what the commands use of a receiver: both
// *azservicebus.Receiver and *azservicebus.SessionReceiver have it.
type messageReceiver interface {
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	ReceiveDeferredMessages(ctx context.Context, sequenceNumbers []int64, options *azservicebus.ReceiveDeferredMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	PeekMessages(ctx context.Context, maxMessageCount int, options *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.AbandonMessageOptions) error
	DeferMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.DeferMessageOptions) error
	DeadLetterMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.DeadLetterOptions) error
	Close(ctx context.Context) error
}

var (
	_ messageReceiver = (*azservicebus.Receiver)(nil)
	_ messageReceiver = (*azservicebus.SessionReceiver)(nil)
)

// sessionFlag is --session-id of peek, receive and purge.
type sessionFlag struct{ id string }

func (s *sessionFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.id, "session-id", "", "work on this session of a session-enabled queue or subscription")
}

// check rejects an empty --session-id, and one with a dead-letter queue:
// those are never session-enabled.
func (s *sessionFlag) check(cmd *cobra.Command, sub *subQueueFlags) error {
	if !cmd.Flags().Changed("session-id") {
		return nil
	}
	if s.id == "" {
		return usageErrorf("--session-id: empty session id")
	}
	if sub.any() {
		return usageErrorf("--session-id does not go with --dlq or --transfer-dlq: dead-letter queues have no sessions (their messages keep their sessionId, shown by peek)")
	}
	return nil
}

// acceptSession locks session id of the entity for a session receiver.
// (A session another receiver just closed is free again: the broker
// releases it before it answers the detach.)
func (e entityRef) acceptSession(ctx context.Context, c *azservicebus.Client, id string, mode azservicebus.ReceiveMode) (*azservicebus.SessionReceiver, error) {
	opts := &azservicebus.SessionReceiverOptions{ReceiveMode: mode}
	if e.sub != "" {
		return c.AcceptSessionForSubscription(ctx, e.name, e.sub, id, opts)
	}
	return c.AcceptSessionForQueue(ctx, e.name, id, opts)
}

// acceptNextSession locks the next session with an available message,
// waiting until ctx ends; ok is false when none came.
func (e entityRef) acceptNextSession(ctx context.Context, c *azservicebus.Client, mode azservicebus.ReceiveMode) (r *azservicebus.SessionReceiver, ok bool, err error) {
	opts := &azservicebus.SessionReceiverOptions{ReceiveMode: mode}
	if e.sub != "" {
		r, err = c.AcceptNextSessionForSubscription(ctx, e.name, e.sub, opts)
	} else {
		r, err = c.AcceptNextSessionForQueue(ctx, e.name, opts)
	}
	// The wait ending is "no session came", whatever shape the SDK gives
	// the error: its own timeout, ctx's error, or (when the deadline falls
	// inside the attach's round trip on a loaded machine) an error that
	// only says so in its text.
	var sbErr *azservicebus.Error
	if err != nil && (errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return r, true, nil
}

// requiresSession tells the broker's refusal of a plain receiver on a
// session-enabled entity.
func requiresSession(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Condition == amqp.ErrCondNotAllowed &&
		strings.Contains(ae.Description, "requires sessions") && !strings.Contains(ae.Description, "does not require")
}

// withoutSessions tells the refusal of a session receiver on an entity
// that is not session-enabled.
func withoutSessions(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Condition == amqp.ErrCondNotAllowed && strings.Contains(ae.Description, "does not require sessions")
}

// sessionErr is e.err for a session receiver: a refused --session-id on
// an entity without sessions is a usage error.
func (e entityRef) sessionErr(err error) error {
	if withoutSessions(err) {
		return usageErrorf("%s is not session-enabled: leave out --session-id", e)
	}
	return e.err(err)
}

// needSessionID is the error of a command that needs --session-id on a
// session-enabled entity: it names a few of the sessions holding messages,
// when they can be listed.
func (a *app) needSessionID(ctx context.Context, e entityRef, what string) error {
	hint := ""
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if m, err := a.newMgmtClient(ctx); err == nil {
		const show = 5
		ids, more, err := m.listSessions(ctx, e.path(), show)
		m.close()
		switch {
		case err != nil:
		case len(ids) == 0:
			hint = " (no session holds messages now)"
		default:
			list := strings.Join(ids, ", ")
			if more {
				list += ", …"
			}
			hint = " (sessions with messages: " + list + ")"
		}
	}
	return usageErrorf("%s requires sessions: %s needs --session-id ID%s\nList them with 'busbar session list %s'.", e, what, hint, e.cliArgs())
}

// cliArgs is the entity as command arguments: orders, events -s audit.
func (e entityRef) cliArgs() string {
	if e.sub == "" {
		return e.name
	}
	return e.name + " --subscription " + e.sub
}
