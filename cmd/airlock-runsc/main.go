// Command airlock-runsc is the part of airlock that a job's sandbox runs
// on the host: runsc's sandbox (the sentry) and gofer, and the gofer's
// root skeleton (gvisor.Dispatch), built without airlock's policy,
// attestation and GitHub packages, so that each of those processes starts
// without their initialisation. airlock starts it from beside its own
// binary when it is of the same build (gvisor.FindRunsc); without it,
// airlock starts them from itself, which holds the same runsc. It is
// never run by hand.
//
// Layer 3: it imports gvisor alone (internal/layers checks that it stays
// without airlock's heavier packages).
package main

import (
	"fmt"
	"os"

	"github.com/airlock-ci/airlock/gvisor"
)

func main() {
	gvisor.Dispatch()
	fmt.Fprintln(os.Stderr, "airlock-runsc: airlock starts this binary for its sandboxes' own processes; run airlock instead")
	os.Exit(2)
}
