package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// addIfNotExists declares --if-not-exists on a create command.
func addIfNotExists(cmd *cobra.Command, p *bool) {
	cmd.Flags().BoolVar(p, "if-not-exists", false, "succeed (exit 0) when it already exists, leaving it as it is")
}

// existed ends a create with --if-not-exists whose entity was there
// already: it says so, and with --json prints the entity as it is (not as
// the flags would have made it: nothing is compared or changed).
func existed(cmd *cobra.Command, asJSON bool, what string, view any) error {
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), view)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s already exists; left as it is\n", what)
	return nil
}

// nameTaken is the create error for a queue or topic name the other kind
// holds: --if-not-exists does not forgive it.
func nameTaken(what, name, other string) error {
	return &exitError{code: ExitExists, err: fmt.Errorf("%s cannot be created: %q is a %s (queues and topics share one name space)", what, name, other)}
}
