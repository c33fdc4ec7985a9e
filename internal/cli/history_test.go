package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/history"
	"github.com/busbarmq/busbar/internal/server"
)

// TestHistoryCommand: busbar history by sequence number and message id,
// text and JSON, and its refusals.
func TestHistoryCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", History: "on"}})
	if err != nil {
		t.Fatalf("server.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	b := &testBroker{t: t, srv: srv, cs: connString(srv.AMQPAddr().String(), "SAS_KEY_VALUE"), admin: srv.HTTPAddr().String()}
	b.run("queue", "create", "q").ok(t)
	b.run("send", "q", "hello", "--message-id", "m-1").ok(t)
	b.run("receive", "q", "--count", "1", "--settle", "deadletter", "--reason", "Poison", "--description", "bad").ok(t)

	out := b.run("history", "q", "--seq", "1").ok(t)
	for _, want := range []string{"q  sequence number 1  message id m-1", "enqueued", "by link ", "delivered", "lock ", "dead-lettered", `reason "Poison"`, "to $DeadLetterQueue"} {
		if !strings.Contains(out, want) {
			t.Errorf("history output lacks %q:\n%s", want, out)
		}
	}
	ans := decode[history.Answer](t, b.run("history", "q", "--message-id", "m-1", "--json").ok(t))
	if len(ans.Messages) != 1 || ans.Messages[0].SequenceNumber != 1 || len(ans.Messages[0].Events) != 3 || ans.Mode != "on" {
		t.Errorf("--json: %+v", ans)
	}
	b.run("history", "q").fails(t, ExitUsage, "--seq N or --message-id ID")
	b.run("history", "q", "--seq", "1", "--message-id", "x").fails(t, ExitUsage, "one of them")
	b.run("history", "q", "--seq", "99").fails(t, ExitNotFound, "No history is kept")

	off := startBroker(t, nil)
	off.run("history", "q", "--seq", "1").fails(t, ExitNotFound, "--history")
}
