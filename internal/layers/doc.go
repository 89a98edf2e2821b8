// Package layers holds no code: its test checks that airlock's packages
// import only downwards, and that the three places that say which layer
// a package is in agree: the test's table (the one list), each
// package's doc comment ("Layer N: ..."), and the diagram in
// docs/architecture.md.
//
// A package imports only packages of a lower layer, so nothing below
// runner knows of jobs, and the three leaves the design names (gvisor,
// policies, attest) import neither runner nor each other. cmd/airlock
// also imports no sandbox, gateway or trust package: gvisor only in
// main.go, for gvisor.Dispatch. A new package must be placed in the
// test's table, say its layer in its doc, and be drawn in the diagram.
//
// Layer 0: it imports nothing (the test reads sources, not packages).
package layers
