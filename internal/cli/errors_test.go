package cli

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestWrongKey(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	b.run("topic", "create", "t").ok(t)
	b.run("subscription", "create", "t", "s").ok(t)
	env := map[string]string{EnvConnectionString: connString(b.srv.AMQPAddr().String(), "not-the-key"), EnvAdmin: b.admin}
	for _, args := range [][]string{
		{"send", "t", "x"},
		{"peek", "t", "-s", "s"},
		{"topic", "list"},
		{"topic", "show", "t"},
		{"subscription", "create", "t", "other"},
		{"subscription", "show", "t", "s"},
		{"rule", "list", "t", "s"},
		{"rule", "create", "t", "s", "r", "--true"},
		{"dlq", "resubmit", "t", "-s", "s", "--to", "q"},
		{"send", "q", "x"},
		{"peek", "q"},
		{"receive", "q", "--wait", "1s"},
		{"purge", "q"},
		{"queue", "list"},
		{"queue", "create", "other"},
		{"export"},
		{"session", "list", "q"},
		{"session", "show", "q", "s"},
		{"session", "set-state", "q", "s", "x"},
		{"peek", "q", "--session-id", "s"},
	} {
		runCLI(t, env, "", args...).fails(t, ExitUnauthorized, "access denied", "SharedAccessKey")
	}
}

func TestBrokerDown(t *testing.T) {
	env := map[string]string{EnvConnectionString: connString("127.0.0.1:1", "SAS_KEY_VALUE"), EnvAdmin: "127.0.0.1:1"}
	runCLI(t, env, "", "peek", "q").fails(t, ExitFailure, "cannot reach the broker")
	runCLI(t, env, "", "queue", "list").fails(t, ExitFailure, "cannot reach the broker")
	runCLI(t, env, "", "session", "list", "q").fails(t, ExitFailure, "cannot reach the broker")
	// A wait shorter than the attempts to connect: still a failure, never
	// an empty queue (receive and purge connect before they start waiting).
	runCLI(t, env, "", "receive", "q", "--wait", "1ms").fails(t, ExitFailure, "cannot reach the broker")
	runCLI(t, env, "", "purge", "q", "--wait", "1ms").fails(t, ExitFailure, "cannot reach the broker")
}

func TestConnectionSettings(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)

	// Flags override the environment.
	env := map[string]string{EnvConnectionString: connString("127.0.0.1:1", "x"), EnvAdmin: "127.0.0.1:1"}
	runCLI(t, env, "", "queue", "show", "q", "--connection-string", b.cs, "--admin", "http://"+b.admin).ok(t)
	runCLI(t, env, "", "peek", "q", "--connection-string", b.cs).ok(t)

	// Without --admin, the admin API is the endpoint's host on port 5300
	// when the endpoint's AMQP port is 5672, said or not (checked without
	// dialing: a broker may be running on this machine).
	for host, want := range map[string]string{
		"localhost": "localhost:5300", "127.0.0.1:5672": "127.0.0.1:5300", "[::1]:5672": "[::1]:5300", "[::1]": "[::1]:5300",
	} {
		if got, err := emulatorAdminAddr(host); err != nil || got != want {
			t.Errorf("emulatorAdminAddr(%q) = %q, %v; want %q", host, got, err, want)
		}
	}
	// Any other AMQP port: no guess, a usage error naming --admin, from
	// every command that uses the management API; messaging commands do
	// not need it.
	other := map[string]string{EnvConnectionString: b.cs}
	runCLI(t, other, "", "queue", "show", "q").fails(t, ExitUsage, "--admin", "AMQP port "+strconv.Itoa(b.srv.AMQPAddr().(*net.TCPAddr).Port))
	runCLI(t, other, "", "export").fails(t, ExitUsage, "--admin HOST:PORT", EnvAdmin)
	runCLI(t, other, "", "peek", "q").ok(t)
	runCLI(t, other, "", "queue", "show", "q", "--admin", b.admin).ok(t)

	// A connection string that does not parse is a usage error.
	runCLI(t, map[string]string{EnvConnectionString: "Endpoint=sb://x"}, "", "peek", "q").fails(t, ExitUsage, EnvConnectionString)
	runCLI(t, nil, "", "peek", "q", "--connection-string", "nonsense").fails(t, ExitUsage, "--connection-string")
}

func TestEveryCommandHasHelpAndExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Short == "" {
			t.Errorf("%s has no short description", c.CommandPath())
		}
		if !c.HasSubCommands() && c.Example == "" {
			t.Errorf("%s has no examples", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	for _, c := range Commands(nil) {
		walk(c)
	}
	r := runCLI(t, nil, "", "dlq", "resubmit", "--help")
	if r.ok(t); !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "--filter") || !strings.Contains(r.stdout, "Exit codes: 0 success") {
		t.Errorf("help:\n%s", r.stdout)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("x"), 1},
		{usageErrorf("x"), 2},
		{&exitError{code: ExitNotFound, err: errors.New("x")}, 3},
		{entityError(errNotFound, "queue"), 3},
		{errorsJoinWrap(usageErrorf("x")), 2},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func errorsJoinWrap(err error) error { return errors.Join(errors.New("context"), err) }
