// Command busbar is the Busbar message broker: Azure Service Bus in one
// binary. `busbar serve` runs the broker; other subcommands talk to a
// running one.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the process exit code.
// Tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) (string, bool)) int {
	root := &cobra.Command{
		Use:           "busbar",
		Short:         "Busbar is Azure Service Bus in one binary",
		Long:          "Busbar is an open-source message broker that speaks Azure Service Bus's AMQP 1.0 dialect,\nso applications written with the official SDKs run against it with only the connection string changed.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Every mistake in the command line exits with 2, as documented: an
	// unknown command or flag, and arguments a command does not take.
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
		}
		return usageError{fmt.Errorf("%s\nRun '%s --help' for usage.", msg, cmd.CommandPath())} //lint:ignore ST1005 a usage hint for people, printed as the last line
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nRun '%s --help' for usage.", err, cmd.CommandPath())} //lint:ignore ST1005 a usage hint for people, printed as the last line
	})
	for _, c := range []*cobra.Command{newServeCmd(env), newHealthCmd(env), newVersionCmd()} {
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return usageError{err}
				}
				return nil
			}
		}
		root.AddCommand(c)
	}
	root.AddCommand(cli.Commands(env)...)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "busbar:", err)
		return exitCode(err)
	}
	return 0
}

// usageError marks a mistake in the command line (exit code 2).
type usageError struct{ error }

// exitCode maps an error to the exit codes the CLI documents: 1 failure,
// 2 usage, 3 not found, 4 access denied, 5 already exists.
func exitCode(err error) int {
	if _, ok := err.(usageError); ok {
		return 2
	}
	return cli.ExitCode(err)
}
