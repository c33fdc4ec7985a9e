package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testBroker is a broker started for one test, in memory.
type testBroker struct {
	t     *testing.T
	srv   *server.Server
	cs    string // connection string
	admin string // management API address
}

func startBroker(t *testing.T, entities *config.EmulatorConfig) *testBroker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, Entities: entities})
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
	return &testBroker{
		t:     t,
		srv:   srv,
		cs:    connString(srv.AMQPAddr().String(), "SAS_KEY_VALUE"),
		admin: srv.HTTPAddr().String(),
	}
}

func connString(host, key string) string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=%s;UseDevelopmentEmulator=true;", host, key)
}

// result is the outcome of one command line.
type result struct {
	stdout, stderr string
	code           int
	err            error
}

// run executes a busbar command line the way cmd/busbar does, with the
// broker's addresses in the environment.
func (b *testBroker) run(args ...string) result {
	return b.runIn("", args...)
}

// runIn is run with stdin.
func (b *testBroker) runIn(stdin string, args ...string) result {
	b.t.Helper()
	env := map[string]string{EnvConnectionString: b.cs, EnvAdmin: b.admin}
	return runCLI(b.t, env, stdin, args...)
}

func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "busbar", SilenceUsage: true, SilenceErrors: true}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	root.AddCommand(Commands(lookup)...)
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetIn(strings.NewReader(stdin))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(&stderr, "busbar:", err)
	}
	return result{stdout.String(), stderr.String(), ExitCode(err), err}
}

// ok fails the test unless r succeeded, and returns its stdout.
func (r result) ok(t *testing.T) string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails checks the exit code and that stderr mentions each of texts.
func (r result) fails(t *testing.T, code int, texts ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range texts {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not mention %q:\n%s", s, r.stderr)
		}
	}
}

// decode parses JSON output into v.
func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output is not JSON (%v):\n%s", err, out)
	}
	return v
}

// adminClient is the commands' management client for b, closed when the
// test ends.
func (b *testBroker) adminClient() *adminClient {
	b.t.Helper()
	env := map[string]string{EnvConnectionString: b.cs, EnvAdmin: b.admin}
	a := &app{env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	c, err := a.admin()
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(c.close)
	return c
}
