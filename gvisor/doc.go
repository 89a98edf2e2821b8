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
// A Sandbox may run sub-containers next to the job's container
// (StartContainer, container.go): services and Docker-action steps with
// an image directory of their own as root. They share the sandbox's
// kernel, network, cgroups and monitoring, and are destroyed with it.
//
// Trust: nothing that comes out of the sandbox is trusted. The workload runs
// as a non-root uid (or uid 0 without capabilities when the caller asks),
// with no_new_privs, an environment built from nothing, the host root
// read-only under a throw-away overlay, secret-bearing host paths masked,
// and only the workspace writable on the host. Runtime-monitoring events
// are decoded by package monitor under its own bounds. Output of steps and
// sub-containers is read through pipes with a byte cap. A sub-container
// runs under the same rules (own PID namespace, no capabilities unless
// asked, no_new_privs, environment from nothing); its image directory is
// trusted to be what an administrator put there, and is never written.
//
// Platform: package platform decides it (see its doc); this package
// hands it the host's seams (platform.go) and boots its probe sandboxes
// (kvmprobe.go). auto takes kvm only where a probe sandbox has booted on
// it, and never waits for the probe: the first job of a boot runs on
// systrap while the probe runs beside it. A sandbox that auto put on kvm
// and that does not boot is created again on systrap. kvm asked for
// where it cannot boot is refused before anything is created. runsc's
// logs of a failed start are kept under the shared root, never printed.
//
// Cgroups: package cgroup finds airlock's own and the job's below them
// (or, in a pod, the enclosing ones, whose limits then bound the job);
// this package gives runsc the job's cgroupsPath, reads the limits a step
// hit from the set, and removes it with the sandbox.
//
// runsc runs in two ways: its Go API in this process creates, starts,
// execs in and destroys containers (create.go, control.go), and the gofer
// and sandbox processes it starts are our own binary (/proc/self/exe)
// with a runsc argv[0]; see Dispatch, which every binary that embeds this
// package must call first thing in main (tests: in TestMain).
//
// Layer 2: a leaf (see internal/layers). It knows sandboxes, never jobs,
// policies or pull requests: it imports only gvisor/monitor and internal
// packages, never runner, policies or attest.
package gvisor
