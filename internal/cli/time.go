package cli

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func newTimeCmd(a *app) *cobra.Command {
	return groupCmd("time", "Move a running broker's test clock (started with --test-clock)",
		`Show or move the test clock of a broker started with --test-clock
(BUSBAR_TEST_CLOCK=true): message expiry and dead-lettering, message and session
locks, scheduled messages, deferred messages' expiry, the duplicate-detection
window and auto-delete-on-idle all follow it, and so do the enqueued and
locked-until times clients see. It runs at the wall clock's pace, ahead of it by
what advance and set added; it never goes back. The SDKs' own timers (lock
renewal, receive timeouts, token refresh) keep real time.

Never turn --test-clock on in production.`,
		newTimeShowCmd(a),
		newTimeAdvanceCmd(a),
		newTimeSetCmd(a),
	)
}

// timeState is the answer of /$time.
type timeState struct {
	Now    string `json:"now"`
	Offset string `json:"offset"`
}

func printTime(cmd *cobra.Command, st timeState, asJSON bool) error {
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), st)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "test time %s (%s ahead of the wall clock)\n", st.Now, st.Offset)
	return nil
}

func newTimeShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show",
		Short:   "Print the test clock's time and how far it is ahead of the wall clock",
		Example: `  busbar time show`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st timeState
			if err := a.busbarAPI(cmd.Context(), http.MethodGet, "/$time", nil, &st); err != nil {
				return err
			}
			return printTime(cmd, st, asJSON)
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newTimeAdvanceCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "advance DURATION",
		Short: "Move the test clock forward by DURATION",
		Example: `  busbar time advance 10m
  busbar time advance 2h30m`,
		Args: exactArgs(1, "a DURATION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.ParseDuration(args[0])
			if err != nil || d < 0 {
				return usageErrorf("%q is not a duration to move forward by, such as 90s, 10m or 2h", args[0])
			}
			var st timeState
			if err := a.busbarAPI(cmd.Context(), http.MethodPost, "/$time/advance", map[string]string{"by": d.String()}, &st); err != nil {
				return err
			}
			return printTime(cmd, st, asJSON)
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newTimeSetCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set TIME",
		Short: "Move the test clock forward to TIME (RFC 3339)",
		Long: `Move the test clock forward to TIME, an RFC 3339 time such as
2030-01-01T00:00:00Z. A time before the test clock's current time is refused:
the clock never goes back.`,
		Example: `  busbar time set 2030-01-01T00:00:00Z`,
		Args:    exactArgs(1, "a TIME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := time.Parse(time.RFC3339Nano, args[0])
			if err != nil {
				return usageErrorf("%q is not an RFC 3339 time such as 2030-01-01T00:00:00Z", args[0])
			}
			var st timeState
			if err := a.busbarAPI(cmd.Context(), http.MethodPost, "/$time/set", map[string]string{"to": t.Format(time.RFC3339Nano)}, &st); err != nil {
				return err
			}
			return printTime(cmd, st, asJSON)
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}
