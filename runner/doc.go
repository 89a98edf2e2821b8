// Package runner runs one CI job end to end. NewPlan turns what a door
// knows (the effective policy, the pull request, the door's own inputs)
// into a Job and its AttestConfig; a Session (Open, Step, Close) creates
// the job's gVisor sandbox with its egress gateway and trust watch,
// executes steps with their output streamed and capped, and on Close
// destroys the sandbox, has the trust watch diff the trust-sensitive
// files, tidies the workspace and returns the Result. What the Result
// says is reported by runner/report (predicate, attestation, summary).
//
// Trust is runner/trust's: the Session holds a trust.Watch and calls it
// before the sandbox exists (Begin), once the hook's checkout is done
// (Baseline, through Session.TrustBaseline) and after the sandbox is
// gone (Finish); runner makes no finding of its own.
//
// The same plan and session serve every door: `airlock run` and the
// composite action (cmd/airlock, which calls Run), and the runner hook
// (runner/hook, which spreads a Session over the runner's calls). They
// differ only in the Inputs they give NewPlan.
//
// Layer 5: above the leaves (gvisor, policies, attest) and the job's parts
// (runner/egress, runner/trust, runner/workspace), below the doors. It
// must not import runner/hook, runner/github or cmd; sandbox types reach
// the doors through it (sandbox.go).
package runner
