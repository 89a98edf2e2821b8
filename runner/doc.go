// Package runner runs one CI job end to end: it loads the job's steps,
// creates the job's gVisor sandbox, executes the steps in order with their
// output streamed and capped, records what ran, destroys the sandbox on
// every path and tidies the workspace it leaves behind.
//
// The same Run serves `airlock run`, the composite action and the runner
// hook: they differ only in how they fill in a Job.
package runner
