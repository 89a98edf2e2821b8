package main

import (
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/runner/hook"
)

// Set with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

// buildInfo is what `airlock version` reports.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	GVisor  string `json:"gvisor"`
	Go      string `json:"go"`
}

func readBuildInfo() buildInfo {
	bi := buildInfo{Version: version, Commit: commit, GVisor: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return bi
	}
	bi.Go = info.GoVersion
	for _, d := range info.Deps {
		if d.Path == "gvisor.dev/gvisor" {
			bi.GVisor = d.Version
		}
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && bi.Commit == "" {
			bi.Commit = s.Value
		}
	}
	if bi.Commit == "" {
		bi.Commit = "unknown"
	}
	return bi
}

// runtimeName is how results name the sandbox runtime.
func runtimeName() string { return "gVisor runsc " + readBuildInfo().GVisor + " (embedded)" }

// build identifies this binary to the runner hook.
func build() hook.Build { return hook.Build{Version: version, Commit: commit, Runtime: runtimeName()} }

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print airlock's version and the gVisor version it embeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi := readBuildInfo()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(bi)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "airlock %s (commit %s, %s)\ngVisor %s (embedded runsc)\n", bi.Version, bi.Commit, bi.Go, bi.GVisor)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
