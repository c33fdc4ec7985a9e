package cli

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/filter"
)

type resubmitFlags struct {
	subscr     subscriptionFlag
	reason     string
	filter     string
	to         string
	count      int
	wait       time.Duration
	noDupCheck bool
	asJSON     bool
	sqlFilter  *filter.Filter
	dupWindow  time.Duration // the target's duplicate detection window, 0 if off
	target     string        // the queue or topic the copies are sent to
	source     entityRef
	sourceDLQ  string
	now        func() time.Time
}

func newDLQResubmitCmd(a *app) *cobra.Command {
	f := &resubmitFlags{now: time.Now}
	cmd := &cobra.Command{
		Use:   "resubmit (QUEUE | TOPIC --subscription SUB --to TARGET)",
		Short: "Move dead-lettered messages back to their queue, or on to another entity",
		Long: `Move messages from QUEUE's dead-letter queue back to QUEUE (or to --to), keeping
their body, application properties and message properties exactly as sent. Only
the DeadLetterReason and DeadLetterErrorDescription properties, and what the
broker itself stamped on the message (sequence number, enqueued time, delivery
count, dead-letter source, schedule), are dropped.

A subscription's dead letters (TOPIC --subscription SUB, or the path
TOPIC/Subscriptions/SUB) need --to: a subscription cannot be sent to, and
sending the messages to the topic would deliver them again to every
subscription whose rules match, not only to SUB. Give --to TOPIC to accept that
(what Service Bus Explorer does), or --to a queue or another topic, e.g. a retry
queue that a consumer of SUB also reads.

Each dead-lettered message is locked, copied to the target, and removed from the
dead-letter queue only once the copy has been accepted: if anything fails, the
message stays where it was. Messages not selected are unlocked again at the end.

Select messages with --reason (their DeadLetterReason, exactly) and/or --filter,
a Service Bus SQL filter evaluated against each message, e.g.
  --filter "DeadLetterReason = 'MaxDeliveryCountExceeded' AND sys.DeliveryCount < 20"

If the target queue or topic has duplicate detection on, a message enqueued less
than the detection window ago would be dropped by the broker as a duplicate of
itself, and be lost: such messages are left in the dead-letter queue and counted
as held back. --no-duplicate-check skips this (and the management API call it
needs).`,
		Example: `  busbar dlq resubmit orders
  busbar dlq resubmit orders --reason MaxDeliveryCountExceeded --count 100
  busbar dlq resubmit orders --filter "region = 'eu'" --to orders-retry
  busbar dlq resubmit events --subscription audit --to audit-retry
  busbar dlq resubmit events/Subscriptions/audit --to events   # every matching subscription gets them again`,
		Args: exactArgs(1, "a queue name, or a topic name with --subscription"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := f.subscr.entity(cmd, args[0])
			if err != nil {
				return err
			}
			return a.resubmit(cmd, e, f)
		},
	}
	fs := cmd.Flags()
	f.subscr.register(cmd)
	fs.StringVar(&f.reason, "reason", "", "resubmit only messages with this DeadLetterReason")
	fs.StringVar(&f.filter, "filter", "", "resubmit only messages matching this SQL filter")
	fs.StringVar(&f.to, "to", "", "send the messages to this queue or topic instead of QUEUE (required for a subscription)")
	fs.IntVarP(&f.count, "count", "n", 0, "resubmit at most this many messages (default all)")
	fs.DurationVar(&f.wait, "wait", time.Second, "stop after no message has arrived for this long")
	fs.BoolVar(&f.noDupCheck, "no-duplicate-check", false, "do not check the target's duplicate detection")
	addJSONFlag(cmd, &f.asJSON)
	return cmd
}

// resubmitResult is what dlq resubmit prints with --json.
type resubmitResult struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Resubmitted int    `json:"resubmitted"`
	Skipped     int    `json:"skipped"`  // not selected by --reason / --filter
	HeldBack    int    `json:"heldBack"` // inside the duplicate detection window
}

func (a *app) resubmit(cmd *cobra.Command, source entityRef, f *resubmitFlags) error {
	if f.count < 0 {
		return usageErrorf("--count must not be negative")
	}
	if f.wait <= 0 {
		return usageErrorf("--wait must be positive")
	}
	if f.filter != "" {
		var err error
		if f.sqlFilter, err = filter.CompileSQL(f.filter, nil); err != nil {
			return usageErrorf("--filter: %v", err)
		}
	}
	f.source, f.target = source, source.name
	if cmd.Flags().Changed("to") {
		if f.to == "" {
			return usageErrorf("--to: empty name")
		}
		if t, err := parseEntityPath(f.to); err == nil && t.isSubscription() {
			return usageErrorf("--to %s: a subscription cannot be sent to; give a queue or a topic", f.to)
		}
		f.target = f.to
	} else if source.isSubscription() {
		return usageErrorf("resubmitting %s's dead letters needs --to: sending them to topic %q would deliver them again to every subscription whose rules match, not only to %q.\nGive --to %s to do that anyway, or --to a queue (or topic) of your choice.",
			subscriptionName(source.name, source.sub), source.name, source.sub, source.name)
	}
	f.sourceDLQ = source.path() + "/$DeadLetterQueue"
	res := resubmitResult{From: f.sourceDLQ, To: f.target}

	if !f.noDupCheck {
		err := a.withAdmin(func(c *adminClient) error {
			dup, window, err := f.duplicateDetection(cmd.Context(), c)
			if err != nil {
				return err
			}
			if dup {
				f.dupWindow = 10 * time.Minute
				if window != nil {
					if d, err := config.ParseISO8601(*window); err == nil {
						f.dupWindow = d
					}
				}
			}
			return nil
		})
		if err != nil && ExitCode(err) == ExitFailure {
			return fmt.Errorf("checking the target's duplicate detection (skip with --no-duplicate-check): %w", err)
		}
		if err != nil {
			return err
		}
	}

	err := a.withMessaging(cmd.Context(), func(c *azservicebus.Client) error {
		return f.run(cmd, c, &res)
	})
	if err != nil {
		if res.Resubmitted > 0 {
			return fmt.Errorf("resubmitted %s from %s to %s, then: %w", plural(res.Resubmitted, "message"), res.From, res.To, err)
		}
		return err
	}
	if f.asJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "resubmitted %s from %s to %s\n", plural(res.Resubmitted, "message"), res.From, res.To)
	if res.Skipped > 0 {
		fmt.Fprintf(w, "left %s in the dead-letter queue: not selected by --reason/--filter\n", plural(res.Skipped, "message"))
	}
	if res.HeldBack > 0 {
		fmt.Fprintf(w, "left %s in the dead-letter queue: enqueued within %s's duplicate detection window (%s); try again later\n",
			plural(res.HeldBack, "message"), res.To, humanDuration(f.dupWindow))
	}
	return nil
}

// duplicateDetection reads whether the target has duplicate detection on,
// and its window. The target is the source queue itself, or what --to
// names: a queue or a topic.
func (f *resubmitFlags) duplicateDetection(ctx context.Context, c *adminClient) (bool, *string, error) {
	if f.target == f.source.name && !f.source.isSubscription() {
		q, err := getQueue(ctx, c, f.target)
		if err != nil {
			return false, nil, err
		}
		return q.RequiresDuplicateDetection != nil && *q.RequiresDuplicateDetection, q.DuplicateDetectionHistoryTimeWindow, nil
	}
	q, err := c.GetQueue(ctx, f.target, nil)
	if err != nil {
		return false, nil, entityError(err, sendTarget(f.target))
	}
	if q != nil && isQueue(&q.QueueProperties) {
		return q.RequiresDuplicateDetection != nil && *q.RequiresDuplicateDetection, q.DuplicateDetectionHistoryTimeWindow, nil
	}
	t, err := c.GetTopic(ctx, f.target, nil)
	if err == nil && (t == nil || !isTopic(&t.TopicProperties)) {
		err = errNotFound
	}
	if err != nil {
		return false, nil, entityError(err, sendTarget(f.target))
	}
	return t.RequiresDuplicateDetection != nil && *t.RequiresDuplicateDetection, t.DuplicateDetectionHistoryTimeWindow, nil
}

// run moves the messages. Every message it receives ends either completed
// (after its copy was sent) or in held, which is abandoned on the way out.
func (f *resubmitFlags) run(cmd *cobra.Command, c *azservicebus.Client, res *resubmitResult) (err error) {
	ctx := cmd.Context()
	r, err := f.source.newReceiver(c, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		return f.source.err(err)
	}
	defer closeQuietly(ctx, r.Close)
	if err := attach(ctx, r); err != nil {
		return f.source.err(err)
	}
	s, err := c.NewSender(f.target, nil)
	if err != nil {
		return entityError(err, sendTarget(f.target))
	}
	defer closeQuietly(ctx, s.Close)

	var held []*azservicebus.ReceivedMessage
	seen := map[int64]bool{} // held sequence numbers, which come back if their lock expires
	defer func() {
		// An error here leaves the lock to expire: the message is safe.
		_ = abandonAfterClose(ctx, c, r, f.source, azservicebus.SubQueueDeadLetter, held)
	}()
	prog := newProgress(cmd.ErrOrStderr(), "resubmitted", 0)
	defer prog.done()

	for f.count == 0 || res.Resubmitted < f.count {
		want := receiveBatch
		if f.count > 0 {
			want = min(want, f.count-res.Resubmitted)
		}
		wctx, cancel := context.WithTimeout(ctx, f.wait)
		msgs, err := r.ReceiveMessages(wctx, want, nil)
		cancel()
		if err != nil && !isIdle(ctx, err) {
			return f.source.err(err)
		}
		if len(msgs) == 0 {
			return nil
		}
		for i, m := range msgs {
			seq := int64(-1)
			if m.SequenceNumber != nil {
				seq = *m.SequenceNumber
			}
			switch {
			case seen[seq]:
				held = append(held, m) // already judged
				continue
			case !f.selected(m):
				res.Skipped++
			case f.inDupWindow(m):
				res.HeldBack++
			default:
				if err := s.SendAMQPAnnotatedMessage(ctx, resubmitCopy(m), nil); err != nil {
					held = append(held, msgs[i:]...)
					return fmt.Errorf("message %d stays dead-lettered: sending its copy failed: %w", seq, entityError(err, sendTarget(f.target)))
				}
				if err := r.CompleteMessage(ctx, m, nil); err != nil {
					held = append(held, msgs[i+1:]...)
					return fmt.Errorf("message %d was resubmitted but could not be removed from the dead-letter queue, so it is now in both: %w", seq, f.source.err(err))
				}
				res.Resubmitted++
				prog.update(res.Resubmitted)
				continue
			}
			seen[seq] = true
			held = append(held, m)
		}
	}
	return nil
}

// selected reports whether m passes --reason and --filter.
func (f *resubmitFlags) selected(m *azservicebus.ReceivedMessage) bool {
	if f.reason != "" && (m.DeadLetterReason == nil || *m.DeadLetterReason != f.reason) {
		return false
	}
	if f.sqlFilter != nil {
		ok, err := f.sqlFilter.Match(filterEnv(m))
		if err != nil || !ok {
			return false
		}
	}
	return true
}

// inDupWindow reports whether the target would take m's copy for a
// duplicate of m itself: duplicate detection on, a MessageId set, and m
// first enqueued less than the window ago.
func (f *resubmitFlags) inDupWindow(m *azservicebus.ReceivedMessage) bool {
	if f.dupWindow <= 0 || m.MessageID == "" {
		return false
	}
	if m.EnqueuedTime == nil {
		return true
	}
	return f.now().Before(m.EnqueuedTime.Add(f.dupWindow))
}

// brokerAnnotations are the message annotations the broker stamps on a
// message; a resubmitted copy goes without them (and so is enqueued now,
// not scheduled).
var brokerAnnotations = map[string]bool{
	"x-opt-enqueued-time":           true,
	"x-opt-sequence-number":         true,
	"x-opt-enqueue-sequence-number": true,
	"x-opt-locked-until":            true,
	"x-opt-lock-token":              true,
	"x-opt-scheduled-enqueue-time":  true,
	"x-opt-deadletter-source":       true,
	"x-opt-message-state":           true,
}

// resubmitCopy is the message to send in place of the dead-lettered m: its
// AMQP sections as received, minus the dead-letter properties and what the
// broker added.
func resubmitCopy(m *azservicebus.ReceivedMessage) *azservicebus.AMQPAnnotatedMessage {
	raw := m.RawAMQPMessage
	out := &azservicebus.AMQPAnnotatedMessage{
		Body:   raw.Body,
		Footer: raw.Footer,
	}
	if raw.Header != nil {
		out.Header = &azservicebus.AMQPAnnotatedMessageHeader{
			Durable:  raw.Header.Durable,
			Priority: raw.Header.Priority,
			TTL:      raw.Header.TTL,
		}
	}
	if raw.Properties != nil {
		p := *raw.Properties
		p.AbsoluteExpiryTime = nil // the broker's, computed from the TTL
		out.Properties = &p
	}
	if len(raw.ApplicationProperties) > 0 {
		out.ApplicationProperties = maps.Clone(raw.ApplicationProperties)
		delete(out.ApplicationProperties, "DeadLetterReason")
		delete(out.ApplicationProperties, "DeadLetterErrorDescription")
	}
	for k, v := range raw.MessageAnnotations {
		if name, ok := annotationKey(k); ok && brokerAnnotations[name] {
			continue
		}
		if out.MessageAnnotations == nil {
			out.MessageAnnotations = map[any]any{}
		}
		out.MessageAnnotations[k] = v
	}
	return out
}
