// Package layers holds no code: its test checks that airlock's packages
// import only downwards, the way docs/architecture.md draws them.
//
//	7  cmd/airlock                 flags, wiring and printing
//	6  runner/hook                 the Actions runner's container hook
//	5  runner                      one job: plan, session, result, attestation
//	4  runner/egress               a job's egress gateway, put together
//	3  runner/egress/{dns,gateway} the gateway's deciding servers;
//	   internal/testhost (tests' helpers: it reaps sandboxes)
//	2  gvisor, runner/trust, runner/egress/rules, runner/credentials
//	1  gvisor/monitor, policies, attest, runner/github, runner/workspace,
//	   runner/egress/netns
//	0  internal/{files,gitexec,paths,shlex,textsafe,leakcheck}
//
// A package imports only packages of a lower layer, so nothing below
// runner knows of jobs, and the three leaves the design names (gvisor,
// policies, attest) import neither runner nor each other. cmd/airlock
// also imports no sandbox, gateway or trust package: gvisor only in
// main.go, for gvisor.Dispatch. A new package must be placed in the
// test's table, which keeps this map and the code in step.
package layers
