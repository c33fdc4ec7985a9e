package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/spf13/cobra"
)

// maxStateFile bounds the session state read from --file: the largest
// message (and so session state) any Service Bus tier accepts.
const maxStateFile = 100 << 20

func newSessionCmd(a *app) *cobra.Command {
	return groupCmd("session", "List sessions, show one, set its state",
		`Work with the sessions of a session-enabled queue or subscription (created with
--requires-session). peek, receive and purge take --session-id for the messages
of one session.`,
		newSessionListCmd(a),
		newSessionShowCmd(a),
		newSessionSetStateCmd(a),
	)
}

// sessionArgs reads ENTITY [SESSION ...] with --subscription.
func sessionArgs(cmd *cobra.Command, subscr *subscriptionFlag, args []string) (entityRef, error) {
	e, err := subscr.entity(cmd, args[0])
	if err != nil {
		return e, err
	}
	if len(args) > 1 && args[1] == "" {
		return e, usageErrorf("empty session id")
	}
	return e, nil
}

func newSessionListCmd(a *app) *cobra.Command {
	var (
		subscr subscriptionFlag
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list (QUEUE | TOPIC --subscription SUB)",
		Short: "List the sessions that hold messages or state",
		Long: `List the ids of a session-enabled queue's (or subscription's) sessions that hold
messages, active, deferred or scheduled, or session state, in id order. The
list comes from the management operation com.microsoft:get-message-sessions;
no session is locked.

Exits with 3 if the queue or subscription does not exist.`,
		Example: `  busbar session list carts
  busbar session list events --subscription audit
  busbar session list carts --json | jq -r '.[]' | xargs -n1 busbar session show carts`,
		Args: exactArgs(1, "a queue name, or a topic name with --subscription"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := sessionArgs(cmd, &subscr, args)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			m, err := a.newMgmtClient(ctx)
			if err != nil {
				return e.err(err)
			}
			defer m.close()
			ids, more, err := m.listSessions(ctx, e.path(), maxSessionIDs)
			if err != nil {
				return e.err(err)
			}
			if more {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: only the first %d sessions are listed\n", maxSessionIDs)
			}
			if asJSON {
				if ids == nil {
					ids = []string{}
				}
				return writeJSON(cmd.OutOrStdout(), ids)
			}
			if len(ids) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no sessions")
				return nil
			}
			t := newTable(cmd.OutOrStdout(), "SESSION")
			for _, id := range ids {
				t.row(cell(id, 0))
			}
			return t.flush()
		},
	}
	subscr.register(cmd)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// sessionView is session show's output.
type sessionView struct {
	Entity       string  `json:"entity"`
	Session      string  `json:"sessionId"`
	MessageCount int     `json:"messageCount"`
	State        []byte  `json:"state"`               // base64; null for none
	StateText    *string `json:"stateText,omitempty"` // the state, when it is text
}

func newSessionShowCmd(a *app) *cobra.Command {
	var (
		subscr subscriptionFlag
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show (QUEUE | TOPIC --subscription SUB) SESSION",
		Short: "Show a session's state and message count",
		Long: `Show a session's state and how many messages it holds (active, deferred and
scheduled, counted by peeking them all). The session is locked while this runs,
so a session another receiver holds cannot be shown until it is released. A
session that holds nothing shows 0 messages and no state.

Exits with 3 if the queue or subscription does not exist, 2 if it is not
session-enabled.`,
		Example: `  busbar session show carts customer-42
  busbar session show events --subscription audit customer-42 --json`,
		Args: exactArgs(2, "a queue name (or a topic name with --subscription) and a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := sessionArgs(cmd, &subscr, args)
			if err != nil {
				return err
			}
			v := sessionView{Entity: e.path(), Session: args[1]}
			err = a.withSession(cmd.Context(), e, args[1], func(ctx context.Context, r *azservicebus.SessionReceiver) error {
				state, err := r.GetSessionState(ctx, nil)
				if err != nil {
					return err
				}
				v.State = state
				for {
					msgs, err := r.PeekMessages(ctx, peekBatch, nil)
					if err != nil {
						return err
					}
					if len(msgs) == 0 {
						return nil
					}
					v.MessageCount += len(msgs)
				}
			})
			if err != nil {
				return err
			}
			if v.State != nil && isText(v.State) {
				s := string(v.State)
				v.StateText = &s
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			t := newTable(cmd.OutOrStdout(), "Session:", cell(v.Session, 0))
			t.row("Entity:", cell(v.Entity, 0))
			t.row("Messages:", fmt.Sprint(v.MessageCount))
			switch {
			case v.State == nil:
				t.row("State:", "none")
			case v.StateText != nil:
				t.row("State:", cell(*v.StateText, 0))
			default:
				t.row("State:", fmt.Sprintf("(%d bytes of binary; --json shows them in base64)", len(v.State)))
			}
			return t.flush()
		},
	}
	subscr.register(cmd)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newSessionSetStateCmd(a *app) *cobra.Command {
	var (
		subscr subscriptionFlag
		file   string
		clear  bool
	)
	cmd := &cobra.Command{
		Use:   "set-state (QUEUE | TOPIC --subscription SUB) SESSION (STATE | --file FILE | --clear)",
		Short: "Set or clear a session's state",
		Long: `Set a session's state to STATE (as UTF-8 text), to the bytes of --file (- for
standard input), or clear it with --clear. The session is locked while this
runs, so a session another receiver holds cannot be changed until it is
released. The broker refuses state larger than the entity's maximum message
size.

Exits with 3 if the queue or subscription does not exist, 2 if it is not
session-enabled.`,
		Example: `  busbar session set-state carts customer-42 '{"step": 3}'
  busbar session set-state carts customer-42 --file state.bin
  busbar session set-state events -s audit customer-42 --clear`,
		Args: rangeArgs(2, 3, "a queue name (or a topic name with --subscription), a session id and the state"),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := sessionArgs(cmd, &subscr, args)
			if err != nil {
				return err
			}
			given := 0
			for _, b := range []bool{len(args) == 3, cmd.Flags().Changed("file"), clear} {
				if b {
					given++
				}
			}
			if given != 1 {
				return usageErrorf("give the state once: as an argument, with --file FILE, or --clear\nUsage: %s", cmd.UseLine())
			}
			var state []byte
			switch {
			case len(args) == 3:
				state = []byte(args[2])
			case cmd.Flags().Changed("file"):
				if state, err = readStateFile(cmd, file); err != nil {
					return err
				}
			}
			id := args[1]
			err = a.withSession(cmd.Context(), e, id, func(ctx context.Context, r *azservicebus.SessionReceiver) error {
				return r.SetSessionState(ctx, state, nil)
			})
			if err != nil {
				return err
			}
			if clear {
				fmt.Fprintf(cmd.OutOrStdout(), "cleared the state of session %s of %s\n", id, e.path())
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "set the state of session %s of %s (%s)\n", id, e.path(), plural(len(state), "byte"))
			}
			return nil
		},
	}
	subscr.register(cmd)
	cmd.Flags().StringVar(&file, "file", "", "read the state from this file (- for standard input)")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the session's state")
	return cmd
}

// readStateFile reads --file, at most maxStateFile bytes.
func readStateFile(cmd *cobra.Command, file string) ([]byte, error) {
	var r io.Reader = cmd.InOrStdin()
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usageErrorf("--file: %v", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxStateFile+1))
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	if len(data) > maxStateFile {
		return nil, usageErrorf("--file: over %d bytes, more than any Service Bus entity accepts as session state", maxStateFile)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// withSession locks session id of e, runs f with its receiver, and
// releases the session.
func (a *app) withSession(ctx context.Context, e entityRef, id string, f func(context.Context, *azservicebus.SessionReceiver) error) error {
	return a.withMessaging(ctx, func(c *azservicebus.Client) error {
		r, err := e.acceptSession(ctx, c, id, azservicebus.ReceiveModePeekLock)
		if err != nil {
			return e.sessionErr(err)
		}
		defer closeQuietly(ctx, r.Close)
		return e.err(f(ctx, r))
	})
}
