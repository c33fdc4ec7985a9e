package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

// TestTimeCommands: show, advance and set against a --test-clock broker,
// and the refusals: moving back, bad arguments, a broker without it.
func TestTimeCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TestClock: true}})
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

	if out := b.run("time", "show").ok(t); !strings.Contains(out, "(0s ahead of the wall clock)") {
		t.Fatalf("show: %s", out)
	}
	if out := b.run("time", "advance", "2h").ok(t); !strings.Contains(out, "(2h0m0s ahead of the wall clock)") {
		t.Fatalf("advance: %s", out)
	}
	to := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	st := decode[timeState](t, b.run("time", "set", to.Format(time.RFC3339), "--json").ok(t))
	if got, err := time.Parse(time.RFC3339Nano, st.Now); err != nil || !got.Equal(to) {
		t.Fatalf("set answered %+v, want %v", st, to)
	}
	b.run("time", "set", "2001-01-01T00:00:00Z").fails(t, ExitUsage, "only moves forward")
	b.run("time", "advance", "--", "-5m").fails(t, ExitUsage, "not a duration")
	b.run("time", "advance", "soon").fails(t, ExitUsage, "not a duration")
	b.run("time", "set", "tomorrow").fails(t, ExitUsage, "not an RFC 3339 time")

	off := startBroker(t, nil)
	off.run("time", "show").fails(t, ExitNotFound, "--test-clock")
}
