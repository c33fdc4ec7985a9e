package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// deleteResult is one line of a delete command's --json output.
type deleteResult struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// deleteEach deletes names in the order given with del, which returns the
// error to report (already made readable, see entityError); the first
// failure stops. A name that does not exist is a failure unless ifExists.
// label names an entity in the table output: queue orders.
func deleteEach(cmd *cobra.Command, names []string, ifExists, asJSON bool, label func(string) string, del func(string) error) error {
	var results []deleteResult
	var err error
	for _, name := range names {
		derr := del(name)
		missing := derr != nil && ExitCode(derr) == ExitNotFound
		if derr != nil && !(ifExists && missing) {
			err = derr
			break
		}
		results = append(results, deleteResult{name, derr == nil})
		if !asJSON {
			if derr == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", label(name))
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s does not exist\n", label(name))
			}
		}
	}
	if asJSON && results != nil {
		if jerr := writeJSON(cmd.OutOrStdout(), results); err == nil {
			err = jerr
		}
	}
	return err
}

// atLeastArgs requires at least one argument after the first fixed ones.
func atLeastArgs(fixed int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) <= fixed {
			return usageErrorf("%s takes %s\nUsage: %s", cmd.CommandPath(), names, cmd.UseLine())
		}
		return nil
	}
}
