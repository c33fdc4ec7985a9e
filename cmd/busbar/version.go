package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/version"
)

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print Busbar's version, source revision and Go version",
		Long: `Print the version of this busbar binary: the release (or Go pseudo-version, or
"(devel)"), the git revision it was built from, whether that tree had
uncommitted changes, and the Go toolchain. The same version is in the broker's
start-up log line and in the GET /health body.`,
		Example: `  busbar version
  busbar version --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := version.Get()
			if asJSON {
				b, err := json.Marshal(struct {
					Version   string `json:"version"`
					Commit    string `json:"commit"`
					Modified  bool   `json:"modified"`
					GoVersion string `json:"go"`
				}{v.Version, v.Commit, v.Modified, v.GoVersion})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return err
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "busbar", v)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: version, commit, modified, go")
	return cmd
}
