package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/internal/gitexec"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/policies"

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
	before, set, err := trust.TakeBaseline(ws, job.Trust.Set)
	if err != nil {
		return nil, fmt.Errorf("trust snapshot before the job: %w", err)
	}
	// Now with the files the agent tool configs run, for the snapshot
	// after the job.
	job.Trust.Set = set
	rep.ReadOnly = trust.ReadonlyPaths(before, job.Trust.Set, ws)
	job.Sandbox.ReadOnlyPaths = append(job.Sandbox.ReadOnlyPaths, rep.ReadOnly...)
	return before, nil
}

// afterJob compares the workspace with the pre-job snapshot (the sandbox
// is gone, nothing writes any more) and reverts what the policy says to;
// the caller (Session.closeTrust) decides the verdict.
func afterJob(ws, mount string, t *Trust, before *trust.Snapshot, rep *trust.Report, refused []monitor.WriteRefused, execs []monitor.Exec) {
	set := t.Set
	after, err := trust.Take(ws, set)
	if err != nil {
		rep.Error = joinMsg(rep.Error, "trust snapshot after the job: "+err.Error())
		return
	}
	if t.NoHooks {
		before = before.WithoutHooks()
	}
	if t.FromCommit != nil {
		// The worktree as the checked-out commit has it, the git
		// directory as the first snapshot found it.
		cb, note := t.FromCommit(ws, before, after, set)
		if cb != nil {
			before = cb.WithGit(before)
		}
		if note != "" {
			rep.Notes = append(rep.Notes, note)
		}
	}
	found := trust.Compare(before, after, set)
	if err := trust.Revert(ws, before, found); err != nil {
		rep.Error = joinMsg(rep.Error, "revert: "+err.Error())
	}
	rep.Findings = append(rep.Findings, found...)
	rep.Findings = append(rep.Findings, refusedWrites(mount, set, rep.ReadOnly, refused, execs)...)
	rep.Notes = append(append(rep.Notes, before.Notes...), after.Notes...)
}

// refusedWrites turns the sandbox's opens refused with EROFS on the
// read-only trust paths into findings: the attempt is on record even
// though nothing changed.
func refusedWrites(mount string, set *trust.Set, readOnly []string, refused []monitor.WriteRefused, execs []monitor.Exec) []trust.Finding {
	var out []trust.Finding
	seen := map[string]bool{}
	for _, w := range refused {
		rel, ok := strings.CutPrefix(w.Path, mount+"/")
		if !ok || seen[rel] || !paths.WithinAny(rel, readOnly) {
			continue
		}
		seen[rel] = true
		cat := set.Category(rel)
		switch {
		case rel == ".git/config":
			cat = trust.GitConfig
		case strings.HasPrefix(rel, ".git/hooks"):
			cat = trust.GitHooks
		}
		bin := ""
		for _, x := range execs {
			if x.PID == w.PID && !x.Time.After(w.Time) {
				bin = x.Binary
			}
		}
		out = append(out, trust.Finding{
			Phase: trust.Runtime, Category: cat, Path: rel, Kind: trust.KindWriteRefused,
			Reason: strings.TrimSpace(fmt.Sprintf("the job tried to write it (pid %d %s", w.PID, bin)) + ")",
			Action: set.RuntimeAction(cat), Severity: "warning", Outcome: "write refused: read-only",
		})
	}
	return out
}

// AuthoredReport is the authored diff alone, without a sandbox (`airlock
// trust diff`): what the commits base..head of the repository in dir
// change in the trust set that the organisation's sources (org) and the
// repository's policy at base define, decided.
func AuthoredReport(ctx context.Context, dir string, org []policies.Source, base, head string) (*trust.Report, error) {
	if _, err := gitexec.ResolveCommit(ctx, dir, base); err != nil {
		return nil, input.Errorf(input.Base, "%w (a shallow clone lacks older commits: fetch the history, e.g. actions/checkout with fetch-depth: 0)", err)
	}
	srcs := slices.Clone(org)
	src, err := policies.FromCommit(ctx, dir, base)
	if err != nil {
		return nil, inputf("repository policy: %w", err)
	}
	if src != nil {
		srcs = append(srcs, *src)
	}
	eff, err := policies.Load(ctx, srcs)
	if err != nil {
		return nil, PolicyError{err}
	}
	set, err := trust.NewSet(eff.Policy.Trust)
	if err != nil {
		return nil, PolicyError{err}
	}
	findings, err := trust.AuthoredDiff(ctx, dir, base, head, set)
	if err != nil {
		return nil, InputError{Err: err}
	}
	rep := &trust.Report{Findings: findings}
	if rep.Findings == nil {
		rep.Findings = []trust.Finding{}
	}
	rep.Decide()
	return rep, nil
}
