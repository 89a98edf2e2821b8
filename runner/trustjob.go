package runner

import (
	"context"
	"fmt"

	"github.com/airlock-ci/airlock/runner/trust"
)

// beforeJob takes the authored diff and the pre-job snapshot, and mounts
// the read-only categories read-only into the job's sandbox.
func beforeJob(ctx context.Context, job *Job, rep *trust.Report) (*trust.Snapshot, error) {
	ws := job.Sandbox.Workspace
	if job.Trust.Base != "" && job.Trust.Head != "" {
		fs, err := trust.AuthoredDiff(ctx, ws, job.Trust.Base, job.Trust.Head, job.Trust.Set)
		if err != nil {
			// Reported, not fatal: the run-time checks still protect.
			rep.Error = "authored diff: " + err.Error()
		}
		rep.Findings = append(rep.Findings, fs...)
	}
	before, err := trust.Take(ws, job.Trust.Set)
	if err != nil {
		return nil, fmt.Errorf("trust snapshot before the job: %w", err)
	}
	rep.ReadOnly = trust.ReadonlyPaths(before, job.Trust.Set, ws)
	job.Sandbox.ReadOnlyPaths = append(job.Sandbox.ReadOnlyPaths, rep.ReadOnly...)
	return before, nil
}

// afterJob compares the workspace with the pre-job snapshot (the sandbox
// is gone, nothing writes any more), reverts what the policy says to, and
// decides whether the job fails for it.
func afterJob(ws string, set *trust.Set, before *trust.Snapshot, rep *trust.Report) {
	after, err := trust.Take(ws, set)
	if err != nil {
		rep.Error = joinMsg(rep.Error, "trust snapshot after the job: "+err.Error())
		rep.Decide()
		return
	}
	found := trust.Compare(before, after, set)
	if err := trust.Revert(ws, before, found); err != nil {
		rep.Error = joinMsg(rep.Error, "revert: "+err.Error())
	}
	rep.Findings = append(rep.Findings, found...)
	rep.Notes = append(append(rep.Notes, before.Notes...), after.Notes...)
	rep.Decide()
}
