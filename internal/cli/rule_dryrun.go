package cli

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// dryRunVerdict is the answer of POST /$rules/dry-run.
type dryRunVerdict struct {
	Topic         string   `json:"topic"`
	Accepted      []string `json:"accepted"`
	DeadLettered  []string `json:"deadLettered"`
	Subscriptions []struct {
		Name             string `json:"name"`
		Accepted         bool   `json:"accepted"`
		Copies           int    `json:"copies,omitempty"`
		DeadLettered     bool   `json:"deadLettered,omitempty"`
		DeadLetterReason string `json:"deadLetterReason,omitempty"`
		DeadLetterDesc   string `json:"deadLetterDescription,omitempty"`
		Inactive         bool   `json:"inactive,omitempty"`
		Reason           string `json:"reason"`
		Rules            []struct {
			Name    string         `json:"name"`
			Filter  string         `json:"filter"`
			Action  string         `json:"action,omitempty"`
			Matched bool           `json:"matched"`
			Why     string         `json:"why,omitempty"`
			Error   string         `json:"error,omitempty"`
			Sets    map[string]any `json:"sets,omitempty"`
			Removes []string       `json:"removes,omitempty"`
		} `json:"rules"`
	} `json:"subscriptions"`
}

func newRuleDryRunCmd(a *app) *cobra.Command {
	var (
		props    []string
		body     string
		bodyFile string
		ttl      time.Duration
		asJSON   bool
		fields   = []struct{ flag, key, help string }{
			{"subject", "subject", "the message's Subject (Label)"},
			{"correlation-id", "correlationId", "the message's CorrelationId"},
			{"message-id", "messageId", "the message's MessageId"},
			{"to", "to", "the message's To"},
			{"reply-to", "replyTo", "the message's ReplyTo"},
			{"session-id", "sessionId", "the message's SessionId"},
			{"reply-to-session-id", "replyToSessionId", "the message's ReplyToSessionId"},
			{"content-type", "contentType", "the message's ContentType"},
		}
		values [8]string
	)
	cmd := &cobra.Command{
		Use:   "dry-run TOPIC",
		Short: "Show which subscriptions of a topic would take a message, and why",
		Long: `Evaluate every subscription's rules against a message, as a send would, without
sending it: which subscriptions take it, by which rule, what each rule's action would
set, and for every other subscription which filter did not match and why, including
filters that fail to evaluate (a subscription that dead-letters on filter evaluation
exceptions would put the message in its dead-letter queue).

--property takes key=value as busbar send does (an integer value is a long, true or
false a bool, else a string).`,
		Example: `  busbar rule dry-run events --property region=eu --property priority=3
  busbar rule dry-run events --subject vip --body '{"id": 1}' --json`,
		Args: exactArgs(1, "TOPIC"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pm, err := parseProperties(props)
			if err != nil {
				return err
			}
			if bodyFile != "" {
				b, err := os.ReadFile(bodyFile)
				if err != nil {
					return usageErrorf("--body-file: %v", err)
				}
				body = string(b)
			}
			m := map[string]any{"body": body}
			if len(pm) > 0 {
				jp := make(map[string]any, len(pm))
				for k, v := range pm {
					if t, ok := v.(time.Time); ok {
						v = t.UTC().Format(time.RFC3339Nano)
					}
					jp[k] = v
				}
				m["properties"] = jp
			}
			for i, f := range fields {
				if values[i] != "" {
					m[f.key] = values[i]
				}
			}
			if ttl > 0 {
				m["timeToLive"] = ttl.String()
			}
			var v dryRunVerdict
			if err := a.busbarAPI(cmd.Context(), http.MethodPost, "/$rules/dry-run", map[string]any{"topic": args[0], "message": m}, &v); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			return printDryRun(cmd, &v)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&props, "property", "p", nil, "application property key=value or key:type=value (repeatable)")
	fl.StringVar(&body, "body", "", "the message body (text)")
	fl.StringVar(&bodyFile, "body-file", "", "read the message body from this file")
	fl.DurationVar(&ttl, "ttl", 0, "the message's time to live")
	for i, f := range fields {
		fl.StringVar(&values[i], f.flag, "", f.help)
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func printDryRun(cmd *cobra.Command, v *dryRunVerdict) error {
	w := cmd.OutOrStdout()
	t := newTable(w, "SUBSCRIPTION", "VERDICT", "RULE", "FILTER", "RESULT")
	for _, s := range v.Subscriptions {
		verdict := "skipped"
		switch {
		case s.Accepted && s.DeadLettered:
			verdict = "accepted+dlq"
		case s.Accepted:
			verdict = "accepted"
			if s.Copies > 1 {
				verdict = fmt.Sprintf("accepted ×%d", s.Copies)
			}
		case s.DeadLettered:
			verdict = "dead-lettered"
		case s.Inactive:
			verdict = "inactive"
		}
		if len(s.Rules) == 0 {
			t.row(s.Name, verdict, "-", "-", s.Reason)
		}
		for i, r := range s.Rules {
			result := "no match"
			switch {
			case r.Error != "":
				result = "error: " + r.Error
			case r.Matched && len(r.Sets)+len(r.Removes) > 0:
				var parts []string
				for _, k := range sortedKeys(r.Sets) {
					parts = append(parts, fmt.Sprintf("%s=%v", k, r.Sets[k]))
				}
				for _, k := range r.Removes {
					parts = append(parts, "-"+k)
				}
				result = "match, sets " + strings.Join(parts, " ")
			case r.Matched:
				result = "match"
			case r.Why != "":
				result = "no match: " + r.Why
			}
			name, verd := s.Name, verdict
			if i > 0 {
				name, verd = "", ""
			}
			t.row(name, verd, r.Name, cell(r.Filter, 50), cell(result, 80))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, s := range v.Subscriptions {
		if s.DeadLettered {
			fmt.Fprintf(w, "\n%s: dead-lettered (%s: %s)\n", s.Name, s.DeadLetterReason, s.DeadLetterDesc)
		}
	}
	return nil
}
