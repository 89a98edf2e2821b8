// Package buildinfo says what this binary is: airlock's version and
// commit (set at link time in main), the gVisor it embeds and the Go it
// was built with, read from the module build information.
//
// Layer 0: a leaf; it imports nothing of airlock's.
package buildinfo

import "runtime/debug"

// Info is what `airlock version` reports.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	GVisor  string `json:"gvisor"`
	Go      string `json:"go"`
}

// Read returns the binary's build information; version and commit are
// what the link set (the commit falls back to the VCS revision Go
// recorded).
func Read(version, commit string) Info {
	bi := Info{Version: version, Commit: commit, GVisor: "unknown"}
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

// Runtime is how results name the sandbox runtime.
func (i Info) Runtime() string { return "gVisor runsc " + i.GVisor + " (embedded)" }
