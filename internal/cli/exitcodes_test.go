package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestExitCodesPerCommand walks every command and checks the exit codes
// the package documentation (and the README) promise: 2 for an unknown
// flag and for wrong arguments, 3 for a missing entity, 4 for a wrong
// key, 5 for a create of an existing name, 1 when the broker cannot be
// reached. A command missing from the table fails the test.
func TestExitCodesPerCommand(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	b.run("queue", "create", "sq", "--requires-session").ok(t)
	b.run("topic", "create", "t").ok(t)
	b.run("subscription", "create", "t", "s").ok(t)
	b.run("rule", "create", "t", "s", "r", "--true").ok(t)

	type row struct {
		badArgs  []string // wrong arguments: exit 2
		notFound []string // a missing entity: exit 3 (nil: none is named)
		works    []string // a valid command line, run with a wrong key (4) and against no broker (1)
		exists   []string // create of an existing name: exit 5
	}
	table := map[string]row{
		"queue create": {badArgs: []string{}, works: []string{"q2"}, exists: []string{"q"}},
		"queue list":   {badArgs: []string{"x"}, works: []string{}},
		"queue show":   {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"q"}},
		"queue update": {badArgs: []string{"q", "--lock-duration", "soon"}, notFound: []string{"nosuch", "--max-delivery-count", "3"}, works: []string{"q", "--max-delivery-count", "3"}},
		"queue delete": {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"q"}},

		"topic create": {badArgs: []string{"a", "b"}, works: []string{"t2"}, exists: []string{"t"}},
		"topic list":   {badArgs: []string{"x"}, works: []string{}},
		"topic show":   {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"t"}},
		"topic update": {badArgs: []string{"t", "--default-ttl", "x"}, notFound: []string{"nosuch", "--default-ttl", "1h"}, works: []string{"t", "--default-ttl", "1h"}},
		"topic delete": {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"t"}},

		"subscription create": {badArgs: []string{"t"}, notFound: []string{"nosuch", "s"}, works: []string{"t", "s2"}, exists: []string{"t", "s"}},
		"subscription list":   {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"t"}},
		"subscription show":   {badArgs: []string{"t"}, notFound: []string{"t", "nosuch"}, works: []string{"t", "s"}},
		"subscription update": {badArgs: []string{"t", "s", "--max-delivery-count", "x"}, notFound: []string{"t", "nosuch", "--max-delivery-count", "3"}, works: []string{"t", "s", "--max-delivery-count", "3"}},
		"subscription delete": {badArgs: []string{"t"}, notFound: []string{"t", "nosuch"}, works: []string{"t", "s"}},

		"rule create": {badArgs: []string{"t", "s", "r2"}, notFound: []string{"t", "nosuch", "r2", "--true"}, works: []string{"t", "s", "r2", "--true"}, exists: []string{"t", "s", "r", "--true"}},
		"rule list":   {badArgs: []string{"t"}, notFound: []string{"t", "nosuch"}, works: []string{"t", "s"}},
		"rule show":   {badArgs: []string{"t", "s"}, notFound: []string{"t", "s", "nosuch"}, works: []string{"t", "s", "r"}},
		"rule update": {badArgs: []string{"t", "s", "r", "--sql", "x", "--true"}, notFound: []string{"t", "s", "nosuch", "--true"}, works: []string{"t", "s", "r", "--true"}},
		"rule delete": {badArgs: []string{"t", "s"}, notFound: []string{"t", "s", "nosuch"}, works: []string{"t", "s", "r"}},

		"send":         {badArgs: []string{}, notFound: []string{"nosuch", "x"}, works: []string{"q", "x"}},
		"peek":         {badArgs: []string{"q", "--count", "0"}, notFound: []string{"nosuch"}, works: []string{"q"}},
		"receive":      {badArgs: []string{"q", "--settle", "later"}, notFound: []string{"nosuch", "--wait", "1s"}, works: []string{"q", "--wait", "1s"}},
		"dlq resubmit": {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"q"}},
		"purge":        {badArgs: []string{"q", "--dlq", "--transfer-dlq"}, notFound: []string{"nosuch"}, works: []string{"q"}},
		"export":       {badArgs: []string{"x"}, works: []string{}},
		"import":       {badArgs: []string{}, works: []string{armDir + "exported.json", "--apply"}},

		// The broker runs without --faults: the fault commands' "works" lines
		// only meet the wrong key (4) and no broker (1).
		"fault add":   {badArgs: []string{"server-busy"}, works: []string{"server-busy", "q"}},
		"fault list":  {badArgs: []string{"x"}, works: []string{}},
		"fault clear": {badArgs: []string{"a", "b"}, works: []string{}},
		// Nor with --test-clock: the time commands likewise.
		"time show":    {badArgs: []string{"x"}, works: []string{}},
		"time advance": {badArgs: []string{"soon"}, works: []string{"10m"}},
		"time set":     {badArgs: []string{"tomorrow"}, works: []string{"2099-01-01T00:00:00Z"}},
		"rule dry-run": {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"t"}},
		// Nor with --history: likewise.
		"history": {badArgs: []string{"q"}, works: []string{"q", "--seq", "1"}},

		"namespace list":   {badArgs: []string{"x"}, works: []string{}},
		"namespace delete": {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"run-1"}},

		"session list":      {badArgs: []string{}, notFound: []string{"nosuch"}, works: []string{"sq"}},
		"session show":      {badArgs: []string{"sq"}, notFound: []string{"nosuch", "a"}, works: []string{"sq", "a"}},
		"session set-state": {badArgs: []string{"sq", "a"}, notFound: []string{"nosuch", "a", "x"}, works: []string{"sq", "a", "x"}},
	}

	wrongKey := map[string]string{EnvConnectionString: connString(b.srv.AMQPAddr().String(), "not-the-key"), EnvAdmin: b.admin}
	down := map[string]string{EnvConnectionString: connString("127.0.0.1:1", "SAS_KEY_VALUE"), EnvAdmin: "127.0.0.1:1"}
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), "busbar ")
		words := strings.Fields(path)
		if c.HasSubCommands() {
			b.run(words...).fails(t, ExitUsage, "needs a subcommand")
			b.run(append(words, "bogus")...).fails(t, ExitUsage, "unknown command")
			for _, s := range c.Commands() {
				walk(s)
			}
			return
		}
		seen[path] = true
		r, ok := table[path]
		if !ok {
			t.Errorf("%s: not in the exit code table", path)
			return
		}
		with := func(args []string) []string { return append(append([]string{}, words...), args...) }
		b.run(with([]string{"--no-such-flag"})...).fails(t, ExitUsage, "unknown flag")
		b.run(with(r.badArgs)...).fails(t, ExitUsage)
		if r.notFound != nil {
			b.run(with(r.notFound)...).fails(t, ExitNotFound, "nosuch")
		}
		if r.exists != nil {
			b.run(with(r.exists)...).fails(t, ExitExists, "already exists")
		}
		runCLI(t, wrongKey, "", with(r.works)...).fails(t, ExitUnauthorized, "access denied")
		runCLI(t, down, "", with(r.works)...).fails(t, ExitFailure, "cannot reach the broker")
	}
	root := &cobra.Command{Use: "busbar"}
	root.AddCommand(Commands(nil)...)
	for _, c := range root.Commands() {
		walk(c)
	}
	for path := range table {
		if !seen[path] {
			t.Errorf("%s: in the table but not a command", path)
		}
	}
}
