package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// subQueueFlags select a queue's or subscription's dead-letter or transfer
// dead-letter sub-queue.
type subQueueFlags struct {
	dlq         bool
	transferDLQ bool
}

func (s *subQueueFlags) register(cmd *cobra.Command, transfer bool) {
	cmd.Flags().BoolVar(&s.dlq, "dlq", false, "use the queue's (or subscription's) dead-letter queue")
	if transfer {
		cmd.Flags().BoolVar(&s.transferDLQ, "transfer-dlq", false, "use the queue's (or subscription's) transfer dead-letter queue")
	}
}

// subQueue is the SDK's value for the chosen sub-queue, 0 for the queue.
func (s *subQueueFlags) subQueue() azservicebus.SubQueue {
	switch {
	case s.dlq:
		return azservicebus.SubQueueDeadLetter
	case s.transferDLQ:
		return azservicebus.SubQueueTransfer
	}
	return 0
}

// path names the sub-queue of the entity at path for messages: orders,
// orders/$DeadLetterQueue, events/Subscriptions/audit/$DeadLetterQueue.
func (s *subQueueFlags) path(path string) string {
	switch {
	case s.dlq:
		return path + "/$DeadLetterQueue"
	case s.transferDLQ:
		return path + "/$Transfer/$DeadLetterQueue"
	}
	return path
}

func (s *subQueueFlags) any() bool { return s.dlq || s.transferDLQ }

// check rejects --dlq with --transfer-dlq.
func (s *subQueueFlags) check() error {
	if s.dlq && s.transferDLQ {
		return usageErrorf("--dlq and --transfer-dlq cannot be used together")
	}
	return nil
}

// attach makes r open its connection and links now, bounded by ctx only,
// by peeking one message. The SDK opens them in the first call that needs
// them; were that a receive bounded by --wait, a broker that cannot be
// reached within the wait would look like an empty queue, and the command
// would report success.
func attach(ctx context.Context, r messageReceiver) error {
	_, err := r.PeekMessages(ctx, 1, nil)
	return err
}

// positive checks a --count style flag.
func positive(flag string, n int) error {
	if n < 1 {
		return usageErrorf("--%s must be at least 1", flag)
	}
	return nil
}

// abandonAfterClose closes r and then unlocks msgs, which r received, by
// lock token through a new receiver's management link. Abandoning them on
// r itself would hand them straight back to r if it still has credit
// (after a receive that timed out, say), where they would stay locked
// until it closed and then until their lock expired.
func abandonAfterClose(ctx context.Context, c *azservicebus.Client, r *azservicebus.Receiver, e entityRef, sub azservicebus.SubQueue, msgs []*azservicebus.ReceivedMessage) error {
	closeQuietly(ctx, r.Close)
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r2, err := e.newReceiver(c, &azservicebus.ReceiverOptions{SubQueue: sub})
	if err != nil {
		return err
	}
	defer closeQuietly(ctx, r2.Close)
	var errs []error
	for _, m := range msgs {
		// A message with only a lock token is settled on the management link.
		if err := r2.AbandonMessage(ctx, &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil); err != nil {
			errs = append(errs, fmt.Errorf("message %s: %w", optInt(m.SequenceNumber), err))
		}
	}
	return errors.Join(errs...)
}

// abandonOn abandons msgs on r, which received them.
func abandonOn(ctx context.Context, r messageReceiver, msgs []*azservicebus.ReceivedMessage) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var errs []error
	for _, m := range msgs {
		if err := r.AbandonMessage(ctx, m, nil); err != nil {
			errs = append(errs, fmt.Errorf("message %s: %w", optInt(m.SequenceNumber), err))
		}
	}
	return errors.Join(errs...)
}
