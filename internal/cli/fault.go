package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/faults"
)

func newFaultCmd(a *app) *cobra.Command {
	return groupCmd("fault", "Inject faults into a running broker (started with --faults)",
		`Make the broker fail on purpose, to test how an application copes: a fault rule
names a kind of fault and an entity, and fires on the next --count operations on
it that match (then it is gone), or until it expires (--ttl, default 10m).

Kinds, and the operations they apply to (--op, the first is the default):
  lock-lost         settle, management                the settlement (or lock
                                                      renewal) fails with
                                                      message-lock-lost; the message
                                                      is available again
  server-busy       send, settle, attach, management  com.microsoft:server-busy,
                                                      "please wait --retry-after"
  detach            send, receive, settle, attach     the link is detached with
                                                      --condition
  close-connection  send, receive, settle, attach,    the connection is closed with
                    management                        --condition
  delay             settle, management                the answer waits --delay
  drop-frame        receive, management               the delivery or the answer is
                                                      never sent
  store-error       store                             the broker's disk write fails

The broker must run with --faults (BUSBAR_FAULTS=true); never turn that on in
production.`,
		newFaultAddCmd(a),
		newFaultListCmd(a),
		newFaultClearCmd(a),
	)
}

func newFaultAddCmd(a *app) *cobra.Command {
	var (
		sp                     faults.Spec
		op                     string
		delay, retryAfter, ttl time.Duration
		asJSON                 bool
	)
	cmd := &cobra.Command{
		Use:   "add KIND ENTITY",
		Short: "Add a fault rule",
		Long: `Add a fault rule for ENTITY: a queue, a topic, a subscription
(TOPIC/Subscriptions/NAME) or * for every entity. It prints the rule with its id.`,
		Example: `  busbar fault add server-busy orders --count 3 --retry-after 2s
  busbar fault add lock-lost orders
  busbar fault add detach orders --op receive --condition amqp:link:detach-forced
  busbar fault add delay orders --op management --delay 5s
  busbar fault add drop-frame orders --property kind=poison
  busbar fault add store-error orders --skip 10`,
		Args: exactArgs(2, "KIND and ENTITY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sp.Kind, sp.Entity, sp.Op = faults.Kind(args[0]), args[1], faults.Op(op)
			sp.Delay, sp.RetryAfter, sp.TTL = faults.Duration(delay), faults.Duration(retryAfter), faults.Duration(ttl)
			var r faults.Rule
			if err := a.busbarAPI(cmd.Context(), http.MethodPost, "/$faults", sp, &r); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return faultTable(cmd, []faults.Rule{r})
		},
	}
	f := cmd.Flags()
	f.StringVar(&op, "op", "", "operation: send, receive, settle, attach, management or store (default: the kind's first)")
	f.StringVar(&sp.Link, "link", "", "only operations on the link of this name")
	f.StringVar(&sp.Property, "property", "", "only messages with this application property, name=value (send, receive)")
	f.IntVar(&sp.Count, "count", 1, "how many operations to fail")
	f.IntVar(&sp.Skip, "skip", 0, "matching operations to let through first")
	f.StringVar(&sp.Condition, "condition", "", "AMQP condition of a detach or close-connection (default amqp:link:detach-forced, amqp:connection:forced)")
	f.StringVar(&sp.Description, "description", "", "the error description the client sees")
	f.DurationVar(&delay, "delay", 0, "how long a delay fault holds the answer")
	f.DurationVar(&retryAfter, "retry-after", 0, "the wait a server-busy fault tells the client (default 2s)")
	f.DurationVar(&ttl, "ttl", 0, "the rule expires after this long (default 10m, at most 24h)")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newFaultListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the active fault rules and how many faults each kind injected",
		Example: `  busbar fault list
  busbar fault list --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var l struct {
				Rules    []faults.Rule       `json:"rules"`
				Injected map[faults.Kind]int `json:"injected"`
			}
			if err := a.busbarAPI(cmd.Context(), http.MethodGet, "/$faults", nil, &l); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), l)
			}
			if err := faultTable(cmd, l.Rules); err != nil {
				return err
			}
			var parts []string
			for _, k := range faults.Kinds() {
				if n := l.Injected[k]; n > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", k, n))
				}
			}
			if len(parts) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "\ninjected so far: %s\n", strings.Join(parts, ", "))
			}
			return nil
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newFaultClearCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "clear [ID]",
		Short: "Remove one fault rule, or all of them",
		Example: `  busbar fault clear      # every rule
  busbar fault clear f3   # one rule, by the id fault add and fault list print`,
		Args: rangeArgs(0, 1, "at most one rule id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/$faults"
			if len(args) == 1 {
				path += "/" + url.PathEscape(args[0])
			}
			var res struct {
				Cleared int `json:"cleared"`
			}
			if err := a.busbarAPI(cmd.Context(), http.MethodDelete, path, nil, &res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cleared %s\n", plural(res.Cleared, "fault rule"))
			return nil
		},
	}
}

func faultTable(cmd *cobra.Command, rules []faults.Rule) error {
	t := newTable(cmd.OutOrStdout(), "ID", "KIND", "ENTITY", "OP", "MATCH", "REMAINING", "INJECTED", "EXPIRES")
	for _, r := range rules {
		var match []string
		if r.Link != "" {
			match = append(match, "link="+r.Link)
		}
		if r.Property != "" {
			match = append(match, r.Property)
		}
		if r.Skipping > 0 {
			match = append(match, "skip "+strconv.Itoa(r.Skipping))
		}
		t.row(r.ID, string(r.Kind), cell(r.Entity, 40), string(r.Op), cell(strings.Join(match, " "), 30),
			strconv.Itoa(r.Remaining), strconv.Itoa(r.Injected), r.Expires.Local().Format(time.DateTime))
	}
	return t.flush()
}
