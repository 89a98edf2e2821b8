// Command airlock runs the CI jobs of agent-authored pull requests inside
// an embedded gVisor sandbox. See the README for usage and exit codes.
package main

import (
	"os"
	"path/filepath"

	"github.com/airlock-ci/airlock/gvisor"
)

func main() {
	dispatchRoles()
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatchRoles runs the roles this binary is re-executed in: runsc's
// (runsc-sandbox, runsc-gofer, ...), which must reach runsc before
// anything else runs, and the runner hook's job daemon.
func dispatchRoles() {
	gvisor.Dispatch()
	if filepath.Base(os.Args[0]) == daemonArg0 && len(os.Args) == 2 {
		os.Exit(hookDaemon(os.Args[1]))
	}
}
