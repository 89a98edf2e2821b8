// Package gvisor runs one CI job inside one gVisor sandbox, using the runsc
// that is compiled into the airlock binary.
//
// A Sandbox owns everything a job creates on the host: a private state
// directory under the state root (OCI bundle, runsc state, overlay
// filestore, monitoring socket, lock file), the runsc sandbox and gofer
// processes, and the sandbox's cgroup. Destroy releases all of it and is
// safe to call on every path, more than once. A job directory whose lock is
// no longer held belongs to an airlock that died (SIGKILL, crash, reboot);
// Reap removes such leftovers.
//
// Trust: nothing that comes out of the sandbox is trusted. The workload runs
// as a non-root uid (or uid 0 without capabilities when the caller asks),
// with no_new_privs, an environment built from nothing, the host root
// read-only under a throw-away overlay, secret-bearing host paths masked,
// and only the workspace writable on the host. Runtime-monitoring events
// are decoded by package monitor under its own bounds. Output of steps is
// read through pipes with a byte cap.
//
// runsc is reached by executing our own binary (/proc/self/exe by default)
// with a runsc argv[0]; see Dispatch, which every binary that embeds this
// package must call first thing in main (tests: in TestMain).
package gvisor
