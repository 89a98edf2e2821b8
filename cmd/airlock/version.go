package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/internal/buildinfo"
	"github.com/airlock-ci/airlock/runner/hook"
)

// Set with -ldflags -X by make build (runscBuildID: its runsc sidecar's).
var version, commit, runscBuildID = "dev", "", ""

// runtimeName is how results name the sandbox runtime.
func runtimeName() string { return readBuildInfo().Runtime() }

func readBuildInfo() buildinfo.Info { return buildinfo.Read(version, commit) }

// build identifies this binary to the runner hook.
func build() hook.Build {
	return hook.Build{Version: version, Commit: commit, Runtime: runtimeName(), RunscBuildID: runscBuildID}
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print airlock's version and the gVisor version it embeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi := readBuildInfo()
			if asJSON {
				return printJSON(cmd.OutOrStdout(), bi)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "airlock %s (commit %s, %s)\ngVisor %s (embedded runsc)\n", bi.Version, bi.Commit, bi.Go, bi.GVisor)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
