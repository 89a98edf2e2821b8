// Package runner runs one CI job end to end. NewPlan turns what a door
// knows (the effective policy, the pull request, the door's own inputs)
// into a Job and its AttestConfig; a Session (Open, Step, Close) creates
// the job's gVisor sandbox with its egress gateway and trust snapshot,
// executes steps with their output streamed and capped, and on Close
// destroys the sandbox, diffs the trust-sensitive files, tidies the
// workspace and returns the Result. What the Result says is reported by
// runner/report (predicate, attestation, summary).
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
