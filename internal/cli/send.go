package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// sendFlags are the message fields send takes as flags. With --jsonl they
// are defaults that each line may override.
type sendFlags struct {
	file          string
	jsonl         string
	properties    []string
	sessionID     string
	messageID     string
	correlationID string
	subject       string
	contentType   string
	to            string
	replyTo       string
	ttl           string
	schedule      string
	asJSON        bool
}

func newSendCmd(a *app) *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send (QUEUE | TOPIC) [BODY]",
		Short: "Send a message, or many from a JSON Lines file, to a queue or topic",
		Long: `Send one message to a queue or a topic. The body is the BODY argument, the
contents of --file, or standard input, byte for byte. A message sent to a topic
goes to every subscription whose rules it matches (one copy per matching rule
with an action); a subscription cannot be sent to directly.

--property key=value sets an application property (repeatable). An integer value
is sent as a long, true and false as booleans, anything else as a string; force a
type with key:type=value, type one of string, int (long), int32, double, bool or
time (RFC 3339).

--jsonl FILE sends many messages, one JSON object per line ("-" reads standard
input), in batches:

  {"body": "text", "properties": {"n": 1}, "messageId": "m1", "sessionId": "s",
   "correlationId": "c", "subject": "s", "contentType": "text/plain", "to": "t",
   "replyTo": "r", "replyToSessionId": "rs", "partitionKey": "k",
   "timeToLive": "1h", "scheduledEnqueueTime": "2030-01-02T15:04:05Z"}

A body that is not a JSON string is sent as its JSON text; "bodyBase64" carries a
binary body. Every line is checked before anything is sent. The message flags
apply to every line that does not set the field itself. peek and receive --json
print messages in this form, so their output can be sent again.`,
		Example: `  busbar send orders 'hello'
  busbar send orders --file order.json --content-type application/json -p priority=5 -p region=eu
  echo -n 'hi' | busbar send orders --session-id s1 --ttl 10m
  busbar send orders 'later' --schedule 30m
  busbar send orders --jsonl messages.jsonl
  busbar peek orders --json | jq -c '.[]' | busbar send orders-copy --jsonl -
  busbar send events '{"total": 12}' --subject order-placed -p region=eu   # a topic`,
		Args: rangeArgs(1, 2, "a queue or topic name and an optional body"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.send(cmd, args, &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.file, "file", "f", "", "read the body from this file")
	fs.StringVar(&f.jsonl, "jsonl", "", "send one message per line of this JSON Lines file (- for standard input)")
	fs.StringArrayVarP(&f.properties, "property", "p", nil, "application property key=value or key:type=value (repeatable)")
	fs.StringVar(&f.sessionID, "session-id", "", "session id")
	fs.StringVar(&f.messageID, "message-id", "", "message id (used by duplicate detection)")
	fs.StringVar(&f.correlationID, "correlation-id", "", "correlation id")
	fs.StringVar(&f.subject, "subject", "", "subject (the Label)")
	fs.StringVar(&f.contentType, "content-type", "", "content type, e.g. application/json")
	fs.StringVar(&f.to, "to", "", "the To property")
	fs.StringVar(&f.replyTo, "reply-to", "", "the ReplyTo property")
	fs.StringVar(&f.ttl, "ttl", "", "time to live, e.g. 30s, 1h, 7d")
	fs.StringVar(&f.schedule, "schedule", "", "enqueue at this time (RFC 3339) or after this long (e.g. 10m)")
	addJSONFlag(cmd, &f.asJSON)
	return cmd
}

// template builds the message the flags describe, without a body.
func (f *sendFlags) template(fs interface{ Changed(string) bool }, now time.Time) (*azservicebus.Message, error) {
	m := &azservicebus.Message{}
	var err error
	if m.ApplicationProperties, err = parseProperties(f.properties); err != nil {
		return nil, err
	}
	strs := []struct {
		flag string
		val  string
		dst  **string
	}{
		{"session-id", f.sessionID, &m.SessionID},
		{"message-id", f.messageID, &m.MessageID},
		{"correlation-id", f.correlationID, &m.CorrelationID},
		{"subject", f.subject, &m.Subject},
		{"content-type", f.contentType, &m.ContentType},
		{"to", f.to, &m.To},
		{"reply-to", f.replyTo, &m.ReplyTo},
	}
	for _, s := range strs {
		if fs.Changed(s.flag) {
			v := s.val
			*s.dst = &v
		}
	}
	if fs.Changed("ttl") {
		d, err := parseDuration(f.ttl)
		if err != nil {
			return nil, usageErrorf("--ttl: %v", err)
		}
		if d <= 0 {
			return nil, usageErrorf("--ttl must be positive")
		}
		m.TimeToLive = &d
	}
	if fs.Changed("schedule") {
		t, err := parseSchedule(f.schedule, now)
		if err != nil {
			return nil, usageErrorf("--schedule: %v", err)
		}
		m.ScheduledEnqueueTime = &t
	}
	return m, nil
}

// sendResult is what send prints with --json.
type sendResult struct {
	Entity          string  `json:"entity"` // the queue or topic`
	Sent            int     `json:"sent"`
	SequenceNumbers []int64 `json:"sequenceNumbers,omitempty"` // of a scheduled message
}

// sendTarget names a queue or topic in messages.
func sendTarget(name string) string { return fmt.Sprintf("queue or topic %q", name) }

func (a *app) send(cmd *cobra.Command, args []string, f *sendFlags) error {
	queue := args[0]
	if e, err := parseEntityPath(queue); err == nil && e.isSubscription() {
		return usageErrorf("cannot send to subscription %q: send to its topic %q, whose rules route the message to its subscriptions", queue, e.name)
	}
	fs := cmd.Flags()
	sources := 0
	for _, given := range []bool{len(args) == 2, fs.Changed("file"), fs.Changed("jsonl")} {
		if given {
			sources++
		}
	}
	if sources > 1 {
		return usageErrorf("give the body once: as an argument, with --file, or with --jsonl")
	}
	tmpl, err := f.template(fs, time.Now())
	if err != nil {
		return err
	}
	var msgs []*azservicebus.Message
	if fs.Changed("jsonl") {
		if msgs, err = readJSONL(cmd, f.jsonl, tmpl); err != nil {
			return err
		}
	} else {
		m := tmpl
		switch {
		case len(args) == 2:
			m.Body = []byte(args[1])
		case fs.Changed("file"):
			if m.Body, err = os.ReadFile(f.file); err != nil {
				return usageErrorf("--file: %v", err)
			}
		default:
			in := cmd.InOrStdin()
			if isTerminal(in) {
				fmt.Fprintln(cmd.ErrOrStderr(), "reading the message body from standard input (end it with Ctrl-D)")
			}
			if m.Body, err = io.ReadAll(in); err != nil {
				return fmt.Errorf("reading standard input: %w", err)
			}
		}
		msgs = []*azservicebus.Message{m}
	}

	res := sendResult{Entity: queue}
	err = a.withMessaging(cmd.Context(), func(c *azservicebus.Client) error {
		sender, err := c.NewSender(queue, nil)
		if err != nil {
			return entityError(err, sendTarget(queue))
		}
		defer closeQuietly(cmd.Context(), sender.Close)
		if len(msgs) == 1 && msgs[0].ScheduledEnqueueTime != nil {
			m := msgs[0]
			at := *m.ScheduledEnqueueTime
			m.ScheduledEnqueueTime = nil
			seqs, err := sender.ScheduleMessages(cmd.Context(), []*azservicebus.Message{m}, at, nil)
			if err != nil {
				return entityError(err, sendTarget(queue))
			}
			res.Sent, res.SequenceNumbers = 1, seqs
			return nil
		}
		if len(msgs) == 1 {
			if err := sender.SendMessage(cmd.Context(), msgs[0], nil); err != nil {
				return entityError(err, sendTarget(queue))
			}
			res.Sent = 1
			return nil
		}
		return sendBatches(cmd, sender, queue, msgs, &res.Sent)
	})
	if err != nil {
		if res.Sent > 0 {
			return fmt.Errorf("sent %d of %d messages to %s, then: %w", res.Sent, len(msgs), queue, err)
		}
		return err
	}
	if f.asJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	if len(res.SequenceNumbers) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "scheduled 1 message to %s (sequence number %d)\n", queue, res.SequenceNumbers[0])
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sent %s to %s\n", plural(res.Sent, "message"), queue)
	return nil
}

// sendBatches sends msgs in as few batches as they fit in, counting in
// *sent the messages the broker has accepted.
func sendBatches(cmd *cobra.Command, sender *azservicebus.Sender, queue string, msgs []*azservicebus.Message, sent *int) error {
	ctx := cmd.Context()
	prog := newProgress(cmd.ErrOrStderr(), "sending", len(msgs))
	defer prog.done()
	var batch *azservicebus.MessageBatch
	flush := func() error {
		if batch == nil || batch.NumMessages() == 0 {
			return nil
		}
		if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
			return entityError(err, sendTarget(queue))
		}
		*sent += int(batch.NumMessages())
		prog.update(*sent)
		batch = nil
		return nil
	}
	for i, m := range msgs {
		for {
			if batch == nil {
				var err error
				if batch, err = sender.NewMessageBatch(ctx, nil); err != nil {
					return entityError(err, sendTarget(queue))
				}
			}
			err := batch.AddMessage(m, nil)
			if err == nil {
				break
			}
			if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
				return fmt.Errorf("message %d: %w", i+1, err)
			}
			if batch.NumMessages() == 0 {
				return fmt.Errorf("message %d is larger than the largest message the queue or topic accepts", i+1)
			}
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// readJSONL reads and checks every line of a --jsonl file, each applied
// over the template the flags give.
func readJSONL(cmd *cobra.Command, path string, tmpl *azservicebus.Message) ([]*azservicebus.Message, error) {
	var r io.Reader
	if path == "-" {
		r = cmd.InOrStdin()
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, usageErrorf("--jsonl: %v", err)
		}
		defer f.Close()
		r = f
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var msgs []*azservicebus.Message
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("--jsonl: %w", err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			j, derr := decodeJSONMessage(trimmed)
			if derr != nil {
				return nil, usageErrorf("--jsonl %s: line %d: %v", path, n, derr)
			}
			m, cerr := j.toMessage()
			if cerr != nil {
				return nil, usageErrorf("--jsonl %s: line %d: %v", path, n, cerr)
			}
			msgs = append(msgs, overTemplate(m, tmpl))
		}
		if err == io.EOF {
			break
		}
	}
	if len(msgs) == 0 {
		return nil, usageErrorf("--jsonl %s: no messages", path)
	}
	return msgs, nil
}

// overTemplate fills the fields m leaves unset from the template.
func overTemplate(m, t *azservicebus.Message) *azservicebus.Message {
	fill := func(dst **string, src *string) {
		if *dst == nil {
			*dst = src
		}
	}
	fill(&m.SessionID, t.SessionID)
	fill(&m.MessageID, t.MessageID)
	fill(&m.CorrelationID, t.CorrelationID)
	fill(&m.Subject, t.Subject)
	fill(&m.ContentType, t.ContentType)
	fill(&m.To, t.To)
	fill(&m.ReplyTo, t.ReplyTo)
	if m.TimeToLive == nil {
		m.TimeToLive = t.TimeToLive
	}
	if m.ScheduledEnqueueTime == nil {
		m.ScheduledEnqueueTime = t.ScheduledEnqueueTime
	}
	if len(t.ApplicationProperties) > 0 {
		props := make(map[string]any, len(t.ApplicationProperties)+len(m.ApplicationProperties))
		for k, v := range t.ApplicationProperties {
			props[k] = v
		}
		for k, v := range m.ApplicationProperties {
			props[k] = v
		}
		m.ApplicationProperties = props
	}
	return m
}
