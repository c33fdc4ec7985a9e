package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
)

func newNamespaceCmd(a *app) *cobra.Command {
	return groupCmd("namespace", "List a running broker's namespaces, delete those made for key names",
		`List the namespaces a running broker serves (its Config.json's, and with
--namespace-per-key-name those its clients' key names made), or delete one made
for a key name: its connections are closed, its data directory removed, and the
next client with that key name gets a new, empty namespace. Both ask the default
namespace (Manage rights); don't give --namespace.`,
		newNamespaceListCmd(a),
		newNamespaceDeleteCmd(a),
	)
}

// namespaceEntry is one namespace of /$namespaces.
type namespaceEntry struct {
	Name     string `json:"name"`
	Default  bool   `json:"default,omitempty"`
	Origin   string `json:"origin"`
	Entities int    `json:"entities"`
	DataDir  string `json:"dataDir,omitempty"`
}

func newNamespaceListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the namespaces: name, origin (config or key-name), entities, data directory",
		Example: `  busbar namespace list
  busbar namespace list --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var l struct {
				Namespaces []namespaceEntry `json:"namespaces"`
			}
			if err := a.busbarAPI(cmd.Context(), http.MethodGet, "/$namespaces", nil, &l); err != nil {
				return err
			}
			if asJSON {
				if l.Namespaces == nil {
					l.Namespaces = []namespaceEntry{}
				}
				return writeJSON(cmd.OutOrStdout(), l.Namespaces)
			}
			t := newTable(cmd.OutOrStdout(), "NAME", "ORIGIN", "ENTITIES", "DATA")
			for _, n := range l.Namespaces {
				name, dir := n.Name, n.DataDir
				if n.Default {
					name += " (default)"
				}
				if dir == "" {
					dir = "(memory)"
				}
				t.row(name, n.Origin, strconv.Itoa(n.Entities), dir)
			}
			return t.flush()
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func newNamespaceDeleteCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a namespace made for a key name, with its messages and data",
		Long: `Delete a namespace made for a key name (--namespace-per-key-name): its
clients' connections are closed (amqp:not-found), its messages and data
directory are gone, and the next client with that key name makes a new one with
Config.json's entities. Namespaces declared in Config.json cannot be deleted
(exit code 2); an unknown name is exit code 3.`,
		Example: `  busbar namespace delete run-42`,
		Args:    exactArgs(1, "a NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var e namespaceEntry
			if err := a.busbarAPI(cmd.Context(), http.MethodDelete, "/$namespaces/"+url.PathEscape(args[0]), nil, &e); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted namespace %s (%d entities)\n", e.Name, e.Entities)
			return nil
		},
	}
}
