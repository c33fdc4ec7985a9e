package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sessionBroker is a broker with the session-enabled queue sq, the plain
// queue plain, and the topic t with the session-enabled subscription ss.
func sessionBroker(t *testing.T) *testBroker {
	t.Helper()
	b := startBroker(t, nil)
	b.run("queue", "create", "sq", "--requires-session").ok(t)
	b.run("queue", "create", "plain").ok(t)
	b.run("topic", "create", "t").ok(t)
	b.run("subscription", "create", "t", "ss", "--requires-session").ok(t)
	return b
}

func sessionsOf(msgs []jsonMessage) []string {
	var ids []string
	for _, m := range msgs {
		ids = append(ids, optStr(m.SessionID))
	}
	return ids
}

func TestSessionPeekAndList(t *testing.T) {
	b := sessionBroker(t)
	for _, s := range []string{"b", "a", "b"} {
		b.run("send", "sq", "to "+s, "--session-id", s).ok(t)
	}

	// Without --session-id: a usage error naming the flag, the sessions
	// and the command that lists them.
	b.run("peek", "sq").fails(t, ExitUsage, `queue "sq" requires sessions`, "--session-id",
		"sessions with messages: a, b", "busbar session list sq")
	b.run("receive", "sq", "--deferred", "1").fails(t, ExitUsage, "--session-id")
	// --session-id where it cannot apply.
	b.run("peek", "plain", "--session-id", "a").fails(t, ExitUsage, `queue "plain" is not session-enabled`)
	b.run("peek", "sq", "--session-id", "a", "--dlq").fails(t, ExitUsage, "dead-letter queues have no sessions")
	b.run("peek", "sq", "--session-id", "").fails(t, ExitUsage, "empty session id")
	b.run("peek", "nosuch", "--session-id", "a").fails(t, ExitNotFound, `queue "nosuch" not found`)
	// The dead-letter queue of a session-enabled queue is peeked without.
	b.run("peek", "sq", "--dlq").ok(t)

	msgs := decode[[]jsonMessage](t, b.run("peek", "sq", "--session-id", "b", "--json").ok(t))
	if got := sessionsOf(msgs); !slices.Equal(got, []string{"b", "b"}) {
		t.Errorf("peek --session-id b: sessions %v", got)
	}
	if ids := decode[[]string](t, b.run("session", "list", "sq", "--json").ok(t)); !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("session list: %v", ids)
	}
	if out := b.run("session", "list", "sq").ok(t); out != "SESSION\na\nb\n" {
		t.Errorf("session list table:\n%s", out)
	}
	// A plain queue has no sessions; a missing one is not found.
	if ids := decode[[]string](t, b.run("session", "list", "plain", "--json").ok(t)); len(ids) != 0 {
		t.Errorf("session list plain: %v", ids)
	}
	b.run("session", "list", "nosuch").fails(t, ExitNotFound, `queue "nosuch"`)
	b.run("session", "list", "t").fails(t, ExitFailure, "'t' is a topic", "--subscription NAME")

	// A session another receiver holds: a clear failure, not a hang.
	r, err := b.sdkClient().AcceptSessionForQueue(context.Background(), "sq", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b.run("peek", "sq", "--session-id", "a").fails(t, ExitFailure, "locked by another receiver")
	b.run("session", "show", "sq", "a").fails(t, ExitFailure, "locked by another receiver")
	_ = r.Close(context.Background())
	b.run("peek", "sq", "--session-id", "a").ok(t)
}

func TestSessionState(t *testing.T) {
	b := sessionBroker(t)
	b.run("send", "sq", "one", "--session-id", "a").ok(t)
	b.run("send", "sq", "two", "--session-id", "a").ok(t)

	show := func(id string) sessionView {
		t.Helper()
		return decode[sessionView](t, b.run("session", "show", "sq", id, "--json").ok(t))
	}
	if v := show("a"); v.MessageCount != 2 || v.State != nil || v.Session != "a" || v.Entity != "sq" {
		t.Errorf("show before: %+v", v)
	}
	if out := b.run("session", "set-state", "sq", "a", `{"step": 3}`).ok(t); out != "set the state of session a of sq (11 bytes)\n" {
		t.Errorf("set-state: %q", out)
	}
	if v := show("a"); string(v.State) != `{"step": 3}` || v.StateText == nil || *v.StateText != `{"step": 3}` {
		t.Errorf("show after set-state: %+v", v)
	}
	out := b.run("session", "show", "sq", "a").ok(t)
	for _, want := range []string{"Messages:  2", `State:     {"step": 3}`} {
		if !strings.Contains(out, want) {
			t.Errorf("show table lacks %q:\n%s", want, out)
		}
	}
	// Binary state from a file, then from standard input.
	file := filepath.Join(t.TempDir(), "state.bin")
	if err := os.WriteFile(file, []byte{0, 1, 2, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	b.run("session", "set-state", "sq", "a", "--file", file).ok(t)
	if v := show("a"); string(v.State) != "\x00\x01\x02\xff" || v.StateText != nil {
		t.Errorf("show after --file: %+v", v)
	}
	if out := b.run("session", "show", "sq", "a").ok(t); !strings.Contains(out, "4 bytes of binary") {
		t.Errorf("binary state:\n%s", out)
	}
	b.runIn("from stdin", "session", "set-state", "sq", "a", "--file", "-").ok(t)
	if v := show("a"); string(v.State) != "from stdin" {
		t.Errorf("show after --file -: %+v", v)
	}
	// A session with state but no messages is listed; cleared, it is not.
	b.run("session", "set-state", "sq", "z", "kept").ok(t)
	if ids := decode[[]string](t, b.run("session", "list", "sq", "--json").ok(t)); !slices.Equal(ids, []string{"a", "z"}) {
		t.Errorf("session list with state: %v", ids)
	}
	if out := b.run("session", "set-state", "sq", "z", "--clear").ok(t); out != "cleared the state of session z of sq\n" {
		t.Errorf("--clear: %q", out)
	}
	if v := show("z"); v.State != nil || v.MessageCount != 0 {
		t.Errorf("show after --clear: %+v", v)
	}
	if ids := decode[[]string](t, b.run("session", "list", "sq", "--json").ok(t)); !slices.Equal(ids, []string{"a"}) {
		t.Errorf("session list after --clear: %v", ids)
	}

	// State over the entity's maximum message size (256 KB) is refused.
	b.run("session", "set-state", "sq", "a", strings.Repeat("x", 300<<10)).fails(t, ExitFailure, "exceeds")
	if v := show("a"); string(v.State) != "from stdin" {
		t.Errorf("state after a refused set-state: %+v", v)
	}

	// Usage errors.
	b.run("session", "set-state", "sq", "a").fails(t, ExitUsage, "give the state once")
	b.run("session", "set-state", "sq", "a", "x", "--clear").fails(t, ExitUsage, "give the state once")
	b.run("session", "set-state", "sq", "a", "--file", filepath.Join(t.TempDir(), "missing")).fails(t, ExitUsage, "--file")
	b.run("session", "show", "sq").fails(t, ExitUsage, "takes a queue name")
	b.run("session", "show", "sq", "").fails(t, ExitUsage, "empty session id")
	b.run("session", "show", "plain", "a").fails(t, ExitUsage, "not session-enabled")
	b.run("session", "show", "nosuch", "a").fails(t, ExitNotFound, `queue "nosuch" not found`)
	b.run("session").fails(t, ExitUsage, "needs a subcommand")
}

func TestSessionReceiveAndPurge(t *testing.T) {
	b := sessionBroker(t)
	for _, s := range []string{"a", "b", "a", "c"} {
		b.run("send", "sq", "to "+s, "--session-id", s).ok(t)
	}

	// A named session.
	msgs := decode[[]jsonMessage](t, b.run("receive", "sq", "--session-id", "b", "--count", "5", "--wait", "1s", "--json").ok(t))
	if got := sessionsOf(msgs); !slices.Equal(got, []string{"b"}) || msgs[0].Settled != "completed" {
		t.Errorf("receive --session-id b: %v %+v", got, msgs)
	}
	// Abandoned on the session: still there, delivered once.
	got := decode[[]jsonMessage](t, b.run("receive", "sq", "--session-id", "c", "--settle", "abandon", "--wait", "1s", "--json").ok(t))
	msgs = decode[[]jsonMessage](t, b.run("peek", "sq", "--session-id", "c", "--json").ok(t))
	if len(got) != 1 || got[0].Settled != "abandoned" || len(msgs) != 1 || *msgs[0].DeliveryCount != *got[0].DeliveryCount+1 {
		t.Errorf("after abandon: received %+v, peeked %+v", got, msgs)
	}
	// Without --session-id: the next session with messages, said on
	// stderr; only that session's messages.
	r := b.run("receive", "sq", "--count", "5", "--wait", "2s", "--json")
	msgs = decode[[]jsonMessage](t, r.ok(t))
	ids := sessionsOf(msgs)
	if len(ids) == 0 || !strings.Contains(r.stderr, "receiving from session "+ids[0]) || len(slices.Compact(slices.Clone(ids))) != 1 {
		t.Errorf("receive without --session-id: %v, stderr %q", ids, r.stderr)
	}

	// Purge one session, then every session.
	b.run("send", "sq", "x", "--session-id", "d").ok(t)
	b.run("send", "sq", "y", "--session-id", "d").ok(t)
	b.run("send", "sq", "z", "--session-id", "e").ok(t)
	if out := b.run("purge", "sq", "--session-id", "d", "--wait", "1s").ok(t); out != "purged 2 messages from sq (session d)\n" {
		t.Errorf("purge --session-id: %q", out)
	}
	left := len(decode[[]string](t, b.run("session", "list", "sq", "--json").ok(t)))
	if left == 0 {
		t.Fatal("nothing left to purge")
	}
	type purged struct {
		Purged   int  `json:"purged"`
		Sessions *int `json:"sessions"`
	}
	p := decode[purged](t, b.run("purge", "sq", "--wait", "1s", "--json").ok(t))
	if p.Sessions == nil || *p.Sessions != left || p.Purged < left {
		t.Errorf("purge every session: %+v, %d sessions had messages", p, left)
	}
	if ids := decode[[]string](t, b.run("session", "list", "sq", "--json").ok(t)); len(ids) != 0 {
		t.Errorf("sessions after purge: %v", ids)
	}
	if out := b.run("purge", "sq", "--wait", "200ms").ok(t); out != "purged 0 messages from 0 sessions of sq\n" {
		t.Errorf("purge of nothing: %q", out)
	}
	// Receive from a session-enabled queue with nothing in it: no message,
	// exit 0, as for any empty queue.
	if r := b.run("receive", "sq", "--wait", "200ms"); r.code != 0 || !strings.Contains(r.stderr, "no messages") {
		t.Errorf("receive of nothing: %+v", r)
	}
}

func TestSessionSubscription(t *testing.T) {
	b := sessionBroker(t)
	b.run("send", "t", "one", "--session-id", "s1").ok(t)
	b.run("send", "t", "two", "--session-id", "s2").ok(t)

	b.run("peek", "t", "-s", "ss").fails(t, ExitUsage, `subscription "t/Subscriptions/ss" requires sessions`, "busbar session list t --subscription ss")
	if ids := decode[[]string](t, b.run("session", "list", "t", "--subscription", "ss", "--json").ok(t)); !slices.Equal(ids, []string{"s1", "s2"}) {
		t.Errorf("session list: %v", ids)
	}
	msgs := decode[[]jsonMessage](t, b.run("peek", "t/Subscriptions/ss", "--session-id", "s2", "--json").ok(t))
	if got := sessionsOf(msgs); !slices.Equal(got, []string{"s2"}) {
		t.Errorf("peek: %v", got)
	}
	b.run("session", "set-state", "t", "-s", "ss", "s1", "st").ok(t)
	if v := decode[sessionView](t, b.run("session", "show", "t", "-s", "ss", "s1", "--json").ok(t)); v.MessageCount != 1 || string(v.State) != "st" || v.Entity != "t/Subscriptions/ss" {
		t.Errorf("show: %+v", v)
	}
	b.run("receive", "t", "-s", "ss", "--session-id", "s1", "--wait", "1s").ok(t)
	if out := b.run("purge", "t", "-s", "ss", "--wait", "1s").ok(t); out != "purged 1 message from 1 session of t/Subscriptions/ss\n" {
		t.Errorf("purge: %q", out)
	}
	b.run("session", "list", "t", "-s", "nosuch").fails(t, ExitNotFound)
}
