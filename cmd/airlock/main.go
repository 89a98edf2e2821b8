// Command airlock runs the CI jobs of agent-authored pull requests inside
// an embedded gVisor sandbox. See docs/run.md for usage and exit codes.
//
// This package is flags, wiring and printing only (at most 1,000 lines:
// internal/layers): what a command does lives in runner, runner/report,
// runner/hook, policies and attest. Apart from gvisor.Dispatch, it
// reaches no sandbox, gateway or trust package.
//
// Layer 8: the top; nothing imports it.
package main

import (
	"os"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/runner/hook"
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
	hook.Dispatch(build())
}
