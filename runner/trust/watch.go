package trust

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/internal/files"
)

// Config is what a job's trust checks look at, as its plan (and the
// door) sets them up.
type Config struct {
	// Set is the policy's trust set.
	Set *Set
	// Base and Head are the pull request's commits in the workspace's
	// repository, for the authored diff (empty: no authored diff).
	Base, Head string
	// Deferred leaves the run-time baseline to Watch.Baseline (the
	// workspace is empty when the sandbox is created).
	Deferred bool
	// Dir is the repository inside the workspace (relative; default the
	// workspace itself): the runner's work directory holds more than the
	// checkout.
	Dir string
	// Authored are authored findings found elsewhere (the hook reads the
	// pull request's files through the GitHub API), put in the report as
	// they are.
	Authored []Finding
	// AuthoredError says why the authored diff is missing or incomplete.
	AuthoredError string
	// Commits, when set, are the commits the job's checkout can be at,
	// with a trusted source of their trees: the worktree's baseline is
	// then the nearest one's (Commits.Baseline), and the first snapshot
	// counts for the git directory only.
	Commits *Commits
	// NoHooks: the git directory may hold no hooks but git's samples (a
	// CI runner's checkout has none), so any other is a finding, even one
	// planted before the baseline was taken.
	NoHooks bool
}

// Watch is one job's trust life cycle, from the baseline before its
// code runs to the report after its sandbox is gone:
//
//   - NewWatch, with the authored findings found elsewhere;
//   - Begin, before the sandbox is created: the authored diff and the
//     baseline of a workspace that is filled already (airlock run), and
//     the paths to mount read-only;
//   - Baseline, for a deferred watch, once the job's checkout filled the
//     workspace (the runner hook);
//   - Finish, once nothing in the sandbox writes any more: the run-time
//     diff, its reverts, the refused writes, the decision.
//
// Paths are the caller's at each call (the workspace on the host and
// where the sandbox sees it); the repository below it is opened without
// following symlinks, as the job may have replaced it with one.
type Watch struct {
	cfg    Config
	report *Report
	before *Snapshot
	// err is why the deferred baseline could not be taken.
	err error
}

// NewWatch starts a job's watch. Its report holds cfg's authored
// findings until Finish adds the rest.
func NewWatch(cfg Config) *Watch {
	return &Watch{cfg: cfg, report: &Report{Findings: append([]Finding{}, cfg.Authored...), Error: cfg.AuthoredError}}
}

// Report is the report the watch fills (the Result holds it from the
// start, so a job that fails to start still says what was authored).
func (w *Watch) Report() *Report { return w.report }

// Begin takes, in the workspace ws before the job's sandbox exists, the
// authored diff (when Base and Head are set) and the baseline, and
// returns the paths to mount read-only into the sandbox. A deferred
// watch does nothing here.
func (w *Watch) Begin(ctx context.Context, ws string) ([]string, error) {
	if w.cfg.Deferred {
		return nil, nil
	}
	rep := w.report
	if w.cfg.Base != "" && w.cfg.Head != "" {
		fs, err := AuthoredDiff(ctx, ws, w.cfg.Base, w.cfg.Head, w.cfg.Set)
		if err != nil {
			// Reported, not fatal: the run-time checks still protect.
			rep.Error = "authored diff: " + err.Error()
		}
		rep.Findings = append(rep.Findings, fs...)
	}
	before, set, err := TakeBaseline(ws, w.cfg.Set)
	if err != nil {
		return nil, fmt.Errorf("trust snapshot before the job: %w", err)
	}
	// Now with the files the agent tool configs run, for the snapshot
	// after the job.
	w.before, w.cfg.Set = before, set
	rep.ReadOnly = ReadonlyPaths(before, set, ws)
	return rep.ReadOnly, nil
}

// Baseline takes the run-time baseline in the workspace ws now, when it
// was deferred and not yet taken (the hook takes it once the job's
// checkout has filled the workspace). The read-only mounts of a
// deferred baseline cannot be added to a running sandbox: "readonly"
// acts as "revert".
func (w *Watch) Baseline(ws string) error {
	if w.before != nil {
		return nil
	}
	dir, done, err := w.openRoot(ws)
	if err != nil {
		w.err = err
		return err
	}
	defer done()
	b, set, err := TakeBaseline(dir, w.cfg.Set)
	if err != nil {
		w.err = err
		return err
	}
	w.before, w.err, w.cfg.Set = b, nil, set
	return nil
}

// CheckedOut reports whether the repository below the workspace ws has
// a .git now (the hook takes the baseline once the checkout made one).
func (w *Watch) CheckedOut(ws string) bool {
	dir, done, err := w.openRoot(ws)
	if err != nil {
		return false
	}
	defer done()
	_, err = os.Lstat(filepath.Join(dir, ".git"))
	return err == nil
}

// Interim is the report so far, decided, for an attestation of a job
// still running: the authored findings (the run-time diff is Finish's).
func (w *Watch) Interim() *Report {
	t := *w.report
	t.Findings = slices.Clone(t.Findings)
	t.Notes = append(slices.Clone(t.Notes), "interim: the run-time trust diff is made when the job ends")
	t.Decide()
	return &t
}

// Finish runs the run-time diff of the workspace ws (the sandbox is
// gone, nothing writes any more; mount is where the sandbox saw it, rec
// what its monitor recorded), reverts what the policy says to, and
// decides the report, authored findings included, also when there was
// nothing to compare.
func (w *Watch) Finish(ctx context.Context, ws, mount string, rec monitor.Snapshot) *Report {
	inspectErr := w.err
	if w.before != nil {
		if dir, done, err := w.openRoot(ws); err != nil {
			inspectErr = err
		} else {
			w.compare(ctx, dir, w.mountOf(mount), rec)
			done()
		}
	}
	// A repository that was never there has nothing to compare; one the
	// job made uninspectable (a symlink, a file) fails the job.
	if inspectErr != nil && !errors.Is(inspectErr, fs.ErrNotExist) {
		w.report.Findings = append(w.report.Findings, Finding{Phase: Runtime, Category: Inspection, Check: CheckRuntimeDiff, Path: w.cfg.Dir, Kind: KindIncomplete,
			Severity: SeverityError, Action: ActionFail, Reason: "the repository could not be inspected: " + inspectErr.Error()})
	}
	w.report.Decide()
	return w.report
}

// compare takes the snapshot after the job in the repository root and
// compares it with the baseline: as the checked-out commit has it when
// the Commits say so, with the git directory as the first snapshot found
// it.
func (w *Watch) compare(ctx context.Context, root, mount string, rec monitor.Snapshot) {
	rep, set, before := w.report, w.cfg.Set, w.before
	after, err := Take(root, set)
	if err != nil {
		rep.Error = joinMsg(rep.Error, "trust snapshot after the job: "+err.Error())
		return
	}
	if w.cfg.NoHooks {
		before = before.WithoutHooks()
	}
	if w.cfg.Commits != nil {
		cb, note := w.cfg.Commits.Baseline(ctx, root, before, after, set)
		if cb != nil {
			before = cb.WithGit(before)
		}
		if note != "" {
			rep.Notes = append(rep.Notes, note)
		}
	}
	found := Compare(before, after, set)
	if err := Revert(root, before, found); err != nil {
		rep.Error = joinMsg(rep.Error, "revert: "+err.Error())
	}
	rep.Findings = append(rep.Findings, found...)
	rep.Findings = append(rep.Findings, refusedWrites(mount, set, rep.ReadOnly, rec)...)
	rep.Notes = append(append(rep.Notes, before.Notes...), after.Notes...)
}

// openRoot opens the repository the checks look at, below the workspace
// ws, without following symlinks: the job can have replaced it with a
// symlink to a host directory, which airlock (root) must neither read
// into a report nor revert into. The path returned names the directory
// opened (its descriptor's link) until done is called.
func (w *Watch) openRoot(ws string) (dir string, done func(), err error) {
	if w.cfg.Dir == "" {
		return ws, func() {}, nil
	}
	f, err := files.OpenDirBeneath(ws, filepath.Join(ws, w.cfg.Dir))
	if err != nil {
		return "", nil, fmt.Errorf("the repository: %w", err)
	}
	return files.FDPath(f), func() { f.Close() }, nil
}

// mountOf is the repository inside the sandbox, whose workspace is at
// mount.
func (w *Watch) mountOf(mount string) string {
	if w.cfg.Dir == "" {
		return mount
	}
	return path.Join(mount, w.cfg.Dir)
}

// joinMsg adds message b to a (which may be empty), after "; ".
func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
