package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/trust"
	"github.com/airlock-ci/airlock/runner/workspace"
)

// Job is one job to run.
type Job struct {
	// Name labels the job in the result. Default: "job".
	Name string
	// Steps run in order; the first failure ends the job.
	Steps []StepSpec
	// Sandbox configures the job sandbox (workspace, limits, user, ...).
	Sandbox gvisor.Config
	// Env is passed to every step (KEY=VALUE), before the step's own env.
	Env []string
	// Stdout and Stderr receive the steps' output live.
	Stdout, Stderr io.Writer
	// Log receives airlock's own progress lines. Nil: Stderr.
	Log io.Writer
	// Policy describes the policy that set this job up, for the result.
	Policy *PolicyInfo
	// Egress, when set, gives the sandbox a network through an egress
	// gateway that enforces it. Nil: loopback only.
	Egress *egress.Config
	// Trust, when set, diffs the trust-sensitive files: the pull request's
	// commits, and what the job changes in the workspace.
	Trust *Trust
}

// Trust configures the workspace-trust checks of a job.
type Trust struct {
	Set *trust.Set
	// Base and Head are the pull request's commits in the workspace's
	// repository, for the authored diff (empty: no authored diff).
	Base, Head string
}

// Step statuses in a Result.
const (
	StatusPassed  = "passed"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
	StatusError   = "error"
)

// StepOutcome is one step of a Result.
type StepOutcome struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	Status  string   `json:"status"`
	gvisor.StepResult
	// Processes counts execs recorded while the step ran.
	Processes int `json:"processes"`
}

// SandboxInfo identifies the sandbox a job ran in.
type SandboxInfo struct {
	ID             string        `json:"id"`
	Runtime        string        `json:"runtime"`
	Platform       string        `json:"platform"`
	RootFS         string        `json:"rootfs"`
	Workspace      string        `json:"workspace"`
	WorkspaceMount string        `json:"workspaceMount"`
	User           gvisor.User   `json:"user"`
	Limits         gvisor.Limits `json:"limits"`
	Network        string        `json:"network"`
}

// Result is the machine-readable outcome of a job (`airlock run --json`).
type Result struct {
	Job       string           `json:"job"`
	Passed    bool             `json:"passed"`
	ExitCode  int              `json:"exitCode"`
	Error     string           `json:"error,omitempty"`
	Start     time.Time        `json:"start"`
	End       time.Time        `json:"end"`
	Duration  time.Duration    `json:"durationNs"`
	Sandbox   SandboxInfo      `json:"sandbox"`
	Steps     []StepOutcome    `json:"steps"`
	Processes monitor.Snapshot `json:"processes"`
	Workspace workspace.Report `json:"workspaceTidy"`
	Reaped    []gvisor.Reaped  `json:"reaped,omitempty"`
	Policy    *PolicyInfo      `json:"policy,omitempty"`
	// Egress is every DNS query and connection attempt, when the job had
	// a gateway.
	Egress *egress.Report `json:"egress,omitempty"`
	// Trust is what changed in the trust-sensitive files, and what airlock
	// did about it.
	Trust *trust.Report `json:"trust,omitempty"`
}

// Run executes the job. The returned Result is complete on every path that
// got as far as creating the sandbox; the error is airlock's own failure
// (the job's steps failing is not an error, see Result.Passed).
func Run(ctx context.Context, job Job, runtime string) (res Result, err error) {
	if job.Name == "" {
		job.Name = "job"
	}
	if job.Log == nil {
		job.Log = job.Stderr
	}
	if job.Log == nil {
		job.Log = io.Discard
	}
	res = Result{Job: job.Name, Start: time.Now().UTC(), Steps: []StepOutcome{}, Policy: job.Policy}
	// Deferred in this order so the end time is taken after the sandbox
	// is destroyed (deferred calls run last-in first-out).
	defer func() {
		res.End = time.Now().UTC()
		res.Duration = res.End.Sub(res.Start)
	}()
	for _, kv := range job.Env {
		k, v, _ := cutEnv(kv)
		if err := checkEnv(k, v); err != nil {
			return res, err
		}
	}

	// Leftovers of an airlock that was killed are cleaned before we add
	// our own job.
	reaped, rerr := gvisor.Reap(ctx, job.Sandbox.StateRoot)
	if rerr != nil {
		slog.Warn("reaping leftover sandboxes", "err", rerr)
	}
	res.Reaped = reaped
	for _, r := range reaped {
		fmt.Fprintf(job.Log, "airlock: cleaned up job %s left by airlock pid %d\n", r.ID, r.OwnerPID)
		if r.Workspace != "" {
			if _, err := workspace.Tidy(r.Workspace, r.SandboxUID); err != nil {
				slog.Warn("tidying workspace of a leftover job", "workspace", r.Workspace, "err", err)
			}
		}
	}

	if job.Sandbox.Limits.JobTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, job.Sandbox.Limits.JobTimeout)
		defer cancel()
	}
	var gw *egress.Egress
	if job.Egress != nil {
		ecfg := *job.Egress
		if ecfg.CAValidity == 0 && job.Sandbox.Limits.JobTimeout > 0 {
			ecfg.CAValidity = job.Sandbox.Limits.JobTimeout + 10*time.Minute
		}
		if gw, err = egress.Start(ecfg); err != nil {
			err = fmt.Errorf("start the egress gateway: %w", err)
			res.Error = err.Error()
			return res, err
		}
		// Closed after the sandbox is destroyed (deferred calls run last
		// first), so the last connections are recorded.
		defer gw.Close()
		job.Sandbox.NetNS = gw.NetNS()
		files, err := gw.Files(rootfsSource(job.Sandbox.RootFS))
		if err != nil {
			res.Error = err.Error()
			return res, err
		}
		job.Sandbox.Files = append(job.Sandbox.Files, files...)
		job.Env = append(gw.Env(), job.Env...)
	}
	var before *trust.Snapshot
	if job.Trust != nil {
		res.Trust = &trust.Report{Findings: []trust.Finding{}}
		if before, err = beforeJob(ctx, &job, res.Trust); err != nil {
			res.Error = err.Error()
			return res, err
		}
	}
	sb, err := gvisor.Create(ctx, job.Sandbox)
	if err != nil {
		res.Error = err.Error()
		return res, err
	}
	cfg := sb.Config()
	res.Sandbox = SandboxInfo{
		ID: sb.ID(), Runtime: runtime, Platform: cfg.Platform, RootFS: rootfsName(cfg.RootFS),
		Workspace: cfg.Workspace, WorkspaceMount: cfg.WorkspaceMount, User: *cfg.User,
		Limits: cfg.Limits, Network: networkName(cfg.NetNS),
	}
	if gw != nil {
		res.Sandbox.Network = "egress gateway " + gw.GatewayAddr().String()
	}
	// Destroy on every path, with a context that outlives cancellation.
	defer func() {
		if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
			res.Error = joinMsg(res.Error, "destroy sandbox: "+err.Error())
		}
		res.Processes = sb.Record()
		if gw != nil {
			// Closed first: connections still open end now and are
			// recorded with their byte counts.
			gw.Close()
			rep := gw.Report(res.Processes)
			res.Egress = &rep
		}
		if before != nil {
			afterJob(cfg.Workspace, cfg.WorkspaceMount, job.Trust.Set, before, res.Trust, res.Processes.WritesRefused, res.Processes.Execs)
			if res.Trust.Failed {
				res.Passed = false
				if res.ExitCode == 0 {
					res.ExitCode = 1
				}
			}
		}
		rep, err := workspace.Tidy(cfg.Workspace, cfg.User.UID)
		if err != nil {
			res.Error = joinMsg(res.Error, "tidy workspace: "+err.Error())
		}
		res.Workspace = rep
	}()

	multi := len(job.Steps) > 1
	var outMu sync.Mutex
	failed := false
	for _, spec := range job.Steps {
		out := StepOutcome{Name: spec.Name, Command: spec.argv()}
		if failed || ctx.Err() != nil {
			out.Status = StatusSkipped
			res.Steps = append(res.Steps, out)
			continue
		}
		prefix := ""
		if multi {
			prefix = "[" + spec.Name + "] "
		}
		stdout := newPrefixWriter(&outMu, orDiscard(job.Stdout), prefix)
		stderr := newPrefixWriter(&outMu, orDiscard(job.Stderr), prefix)
		before := sb.ExecCount()
		stepStart := time.Now()
		sr, err := sb.Exec(ctx, gvisor.Step{
			Args:    spec.argv(),
			Env:     append(append([]string{}, job.Env...), envList(spec.Env)...),
			Dir:     workDir(cfg.WorkspaceMount, spec.WorkingDirectory),
			Timeout: time.Duration(spec.Timeout),
			Stdout:  stdout,
			Stderr:  stderr,
		})
		if gw != nil {
			// Tell the step (and an agent reading its log) what was
			// refused and how the policy would allow it.
			rep := gw.Report(sb.Record())
			egress.WriteRefusals(stderr, egress.Refusals(rep.Decisions, stepStart))
		}
		stdout.Flush()
		stderr.Flush()
		out.StepResult = sr
		out.Processes = sb.ExecCount() - before
		switch {
		case err != nil:
			out.Status = StatusError
			out.Message = err.Error()
			failed = true
		case sr.ExitCode != 0 || sr.Limit != "":
			out.Status = StatusFailed
			failed = true
		default:
			out.Status = StatusPassed
		}
		if out.Message != "" {
			fmt.Fprintf(job.Log, "airlock: step %q: %s\n", spec.Name, out.Message)
		}
		res.Steps = append(res.Steps, out)
	}
	res.Passed, res.ExitCode = verdict(res.Steps)
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		res.Error = joinMsg(res.Error, "job cancelled")
	}
	return res, nil
}

// verdict: passed when every step passed; the exit code is the first
// failing step's.
func verdict(steps []StepOutcome) (bool, int) {
	for _, s := range steps {
		switch s.Status {
		case StatusFailed:
			if s.ExitCode == 0 {
				return false, 1
			}
			return false, s.ExitCode
		case StatusError, StatusSkipped:
			return false, 1
		}
	}
	return len(steps) > 0, 0
}

func workDir(mount, wd string) string {
	switch {
	case wd == "":
		return mount
	case path.IsAbs(wd):
		return path.Clean(wd)
	default:
		return path.Join(mount, wd)
	}
}

// envList turns a step's env map into KEY=VALUE entries in key order, so
// runs are reproducible.
func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// rootfsSource is the host directory the sandbox's root comes from.
func rootfsSource(dir string) string {
	if dir == "" {
		return "/"
	}
	return dir
}

func rootfsName(dir string) string {
	if dir == "" {
		return "host"
	}
	return dir
}

func networkName(netns string) string {
	if netns == "" {
		return "none"
	}
	return netns
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
