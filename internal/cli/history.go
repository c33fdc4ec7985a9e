package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/history"
)

func newHistoryCmd(a *app) *cobra.Command {
	var (
		seq    int64
		id     string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "history ENTITY (--seq N | --message-id ID)",
		Short: "Print the life of a message (a broker started with --history)",
		Long: `Print what happened to a message of a queue, topic or subscription
(topic/Subscriptions/sub): enqueued (by which sender link), each delivery (to
which receiver link, lock token, locked until), renewals, abandon, defer,
release, lock expiry, dead-lettering (reason, description), expiry, completion,
auto-forwarding (to which entity, new sequence number) — then the histories it
led to: its copies in a topic's subscriptions, the entities it was forwarded to.

The broker keeps histories only when started with --history on or sampled, for
a bounded number of messages per entity and time (--history-messages,
--history-window, --history-max-bytes). Times are the broker's clock (the test
clock under --test-clock).`,
		Example: `  busbar history orders --seq 12
  busbar history orders --message-id order-1 --json
  busbar history events/Subscriptions/audit --seq 3`,
		Args: exactArgs(1, "an ENTITY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			bySeq, byID := cmd.Flags().Changed("seq"), cmd.Flags().Changed("message-id")
			if bySeq == byID {
				return usageErrorf("name the message with --seq N or --message-id ID (one of them)")
			}
			if bySeq && seq < 0 {
				return usageErrorf("--seq %d is not a sequence number", seq)
			}
			var segs []string
			for _, s := range strings.Split(strings.Trim(args[0], "/"), "/") {
				segs = append(segs, url.PathEscape(s))
			}
			path := "/$history/" + strings.Join(segs, "/") + "/messages"
			if bySeq {
				path += "/" + strconv.FormatInt(seq, 10)
			} else {
				path += "?message-id=" + url.QueryEscape(id)
			}
			var ans history.Answer
			if err := a.busbarAPI(cmd.Context(), http.MethodGet, path, nil, &ans); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), ans)
			}
			printHistory(cmd.OutOrStdout(), ans.Messages)
			return nil
		},
	}
	cmd.Flags().Int64Var(&seq, "seq", 0, "the message's sequence number in ENTITY")
	cmd.Flags().StringVar(&id, "message-id", "", "the message id (every kept message of ENTITY with it)")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// printHistory writes one block per message, one line per event.
func printHistory(w io.Writer, ms []history.Message) {
	for i, m := range ms {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  sequence number %d", m.Entity, m.SequenceNumber)
		if m.MessageID != "" {
			fmt.Fprintf(w, "  message id %s", m.MessageID)
		}
		fmt.Fprintln(w)
		if m.Omitted > 0 {
			fmt.Fprintf(w, "  (%d events omitted after the first)\n", m.Omitted)
		}
		for _, ev := range m.Events {
			fmt.Fprintf(w, "  %s  %-20s%s\n", ev.Time.Format(time.RFC3339Nano), ev.Kind, eventDetails(ev))
		}
	}
}

func eventDetails(ev history.EventView) string {
	var d []string
	add := func(format string, args ...any) { d = append(d, fmt.Sprintf(format, args...)) }
	if ev.SubQueue != "" {
		add("in %s", ev.SubQueue)
	}
	if ev.MovedTo != "" {
		add("to %s", ev.MovedTo)
	}
	if ev.To != "" {
		add("to %s as %d", ev.To, ev.PeerSeq)
	}
	if ev.From != "" {
		add("from %s (%d)", ev.From, ev.PeerSeq)
	}
	if ev.Reason != "" {
		add("reason %q", ev.Reason)
	}
	if ev.Description != "" {
		add("description %q", ev.Description)
	}
	if ev.LockToken != "" {
		add("lock %s", ev.LockToken)
	}
	if ev.LockedUntil != nil {
		add("until %s", ev.LockedUntil.Format(time.RFC3339Nano))
	}
	if ev.ScheduledFor != nil {
		add("scheduled for %s", ev.ScheduledFor.Format(time.RFC3339Nano))
	}
	if ev.DeliveryCount > 0 {
		add("delivery count %d", ev.DeliveryCount)
	}
	if ev.Link != "" {
		add("by %s", ev.Link)
	}
	if ev.Transaction {
		add("in a transaction")
	}
	return strings.Join(d, ", ")
}
