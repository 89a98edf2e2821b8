// Command airlock runs the CI jobs of agent-authored pull requests inside
// an embedded gVisor sandbox. See the README for usage and exit codes.
package main

import (
	"os"

	"github.com/airlock-ci/airlock/gvisor"
)

func main() {
	// runsc re-executes this binary as runsc-sandbox, runsc-gofer, ...;
	// those invocations must reach runsc before anything else runs.
	gvisor.Dispatch()
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
