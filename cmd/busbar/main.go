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
	root.AddCommand(newServeCmd(env), newHealthCmd(env), newVersionCmd())
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
