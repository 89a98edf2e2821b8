package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/gvisor/quota"
	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/images"
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
	// commits, and what the job changes in the workspace (the session's
	// trust.Watch does both).
	Trust *trust.Config
	// Credentials, when set, keeps the job's credentials out of the
	// sandbox (see credentials.go); the gateway puts them back.
	Credentials *credentials.Vault
	// Images gives the job its images (NewPlan's ImageSource); the
	// session holds what it pulled in the cache until it ends. Nil: none.
	Images *ImageSource
	// PullImage, when set, is the job's image to pull (not mapped): the
	// sandbox's root, with its environment under the job's own.
	PullImage string
	// BeforeSteps, when set, is called by Run once the sandbox is up and
	// before the first step: what the caller did meanwhile (airlock run
	// resolves the attestation's subject while the sandbox starts) is
	// done before any of the job's code runs.
	BeforeSteps func()

	// soleWriter says that nothing but the job writes its mounts while
	// it runs: Run's jobs, whose steps follow one another with nothing
	// of the host in between; not the runner hook's, whose runner writes
	// each step's script into them.
	soleWriter bool
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

// EnclosingCgroup is SandboxInfo.LimitsEnforcedBy for a job bounded by
// the cgroup that encloses airlock.
const EnclosingCgroup = "the enclosing cgroup (the cgroup file system is read-only here, as in a pod that is not privileged: memory and CPU are the pod's limits, pids and the workspace gVisor's and airlock's own)"

// SandboxInfo identifies the sandbox a job ran in.
type SandboxInfo struct {
	ID       string `json:"id"`
	Runtime  string `json:"runtime"`
	Platform string `json:"platform"`
	// PlatformReason says why the sandbox runs on Platform, and
	// PlatformAttempts are its starts (two when a start on kvm failed and
	// it was created again on systrap).
	PlatformReason   string                   `json:"platformReason"`
	PlatformAttempts []attest.PlatformAttempt `json:"platformAttempts"`
	RootFS           string                   `json:"rootfs"`
	Workspace        string                   `json:"workspace"`
	WorkspaceMount   string                   `json:"workspaceMount"`
	User             gvisor.User              `json:"user"`
	Limits           gvisor.Limits            `json:"limits"`
	// LimitsEnforcedBy says who enforces Limits' memory and CPUs where
	// airlock could not make the sandbox's cgroup (a read-only cgroup file
	// system, as in a pod): the enclosing cgroup, whose values Limits then
	// holds (0: none). Empty: the sandbox's own cgroup, as configured.
	LimitsEnforcedBy string `json:"limitsEnforcedBy,omitempty"`
	Network          string `json:"network"`
}

// Result is the machine-readable outcome of a job (`airlock run --json`).
type Result struct {
	Job      string `json:"job"`
	Passed   bool   `json:"passed"`
	ExitCode int    `json:"exitCode"`
	// Interim marks the result of a job still running (Session.Interim).
	Interim   bool             `json:"interim,omitempty"`
	Error     string           `json:"error,omitempty"`
	Start     time.Time        `json:"start"`
	End       time.Time        `json:"end"`
	Duration  time.Duration    `json:"durationNs"`
	Sandbox   SandboxInfo      `json:"sandbox"`
	Steps     []StepOutcome    `json:"steps"`
	Processes monitor.Snapshot `json:"processes"`
	Workspace workspace.Report `json:"workspaceTidy"`
	// WorkspaceVolume is what the job wrote into its bounded workspace:
	// the limit, what it used, what was merged into the workspace.
	WorkspaceVolume *WorkspaceVolume `json:"workspaceVolume,omitempty"`
	Reaped          []gvisor.Reaped  `json:"reaped,omitempty"`
	// Images are the images the job pulled (or took from the cache):
	// each reference as written, the digest it resolved to, the
	// platform, the signature that verified it and the rule.
	Images []images.Resolved `json:"images,omitempty"`
	Policy *PolicyInfo       `json:"policy,omitempty"`
	// Egress is every DNS query and connection attempt, when the job had
	// a gateway.
	Egress *egress.Report `json:"egress,omitempty"`
	// Trust is what changed in the trust-sensitive files, and what airlock
	// did about it.
	Trust *trust.Report `json:"trust,omitempty"`
	// Credentials are the job's credentials the sandbox saw only as
	// placeholders, and where each went.
	Credentials *credentials.Record `json:"credentials,omitempty"`
}

// Run executes the job. The returned Result is complete on every path that
// got as far as creating the sandbox; the error is airlock's own failure
// (the job's steps failing is not an error, see Result.Passed).
func Run(ctx context.Context, job Job, runtime string) (Result, error) {
	job.soleWriter = true
	s, err := Open(ctx, job, runtime)
	if err != nil {
		return s.Abandon(), err
	}
	if job.BeforeSteps != nil {
		job.BeforeSteps()
	}
	failed := false
	for _, spec := range s.job.Steps {
		if failed || s.ctx.Err() != nil {
			s.res.Steps = append(s.res.Steps, StepOutcome{Name: spec.Name, Command: spec.argv(), Status: StatusSkipped})
			continue
		}
		out := s.Step(s.ctx, spec, s.job.Stdout, s.job.Stderr)
		failed = out.Status != StatusPassed
	}
	return s.Close(), nil
}

// Session is a job's sandbox open for steps: Open creates it (with its
// gateway and trust snapshot), Step runs one step at a time, Close ends
// it and returns the Result. airlock run does all three at once; the
// runner hook spreads them over the runner's calls.
type Session struct {
	job    Job
	res    Result
	ctx    context.Context
	cancel context.CancelFunc
	sb     *gvisor.Sandbox
	gw     *egress.Egress
	cfg    gvisor.Config
	// trust watches the trust-sensitive files, when the job has a Trust.
	trust  *trust.Watch
	outMu  sync.Mutex
	multi  bool
	closed bool
	// views are the files of the sandbox's views (gitConfigView),
	// removed when the session ends.
	views []string
	// imageEnv is the environment of the job's pulled image (PullImage).
	imageEnv []string
}

// RootFS is the host directory the job's sandbox runs on ("": the
// host's root); a pulled image's is known once the session is open.
func (s *Session) RootFS() string { return s.cfg.RootFS }

// ImageEnv is the environment of the image the session pulled for the
// job (Job.PullImage), under which the job's own goes; nil when it pulled
// none (a mapped image's is in the plan's Job.Env already).
func (s *Session) ImageEnv() []string { return slices.Clone(s.imageEnv) }

// Open reaps leftovers of killed airlocks, starts the egress gateway,
// takes the trust snapshot and creates the sandbox. On error the session
// is still returned for Abandon (its Result says what happened).
func Open(ctx context.Context, job Job, runtime string) (s *Session, err error) {
	if job.Name == "" {
		job.Name = "job"
	}
	if job.Log == nil {
		job.Log = job.Stderr
	}
	if job.Log == nil {
		job.Log = io.Discard
	}
	s = &Session{job: job, multi: len(job.Steps) > 1, ctx: ctx, cancel: func() {}}
	s.res = Result{Job: job.Name, Start: time.Now().UTC(), Steps: []StepOutcome{}, Policy: job.Policy}
	fail := func(e error) (*Session, error) {
		e = diskFull(e, job.Sandbox.StateRoot)
		s.res.Error = joinMsg(s.res.Error, e.Error())
		return s, e
	}
	for _, kv := range job.Env {
		k, v, _ := cutEnv(kv)
		if err := checkEnv(k, v); err != nil {
			return s, err
		}
	}

	// Leftovers of an airlock that was killed are cleaned before we add
	// our own job.
	s.res.Reaped = reapLeftovers(ctx, job)

	if job.Sandbox.Limits.JobTimeout > 0 {
		s.ctx, s.cancel = context.WithTimeout(ctx, job.Sandbox.Limits.JobTimeout)
	}
	if err := s.pullImage(job); err != nil {
		return fail(err)
	}
	s.job.Env = withholdList(job.Credentials, s.job.Env)
	if err := s.viewCheckoutToken(); err != nil {
		return fail(err)
	}
	if err := s.startEgress(job); err != nil {
		return fail(err)
	}
	if err := s.beginTrust(); err != nil {
		return fail(err)
	}
	s.job.Sandbox.ExclusiveMounts = exclusiveMounts(s.job)
	if s.sb, err = gvisor.Create(s.ctx, s.job.Sandbox); err != nil {
		return fail(err)
	}
	s.describeSandbox(runtime)
	return s, nil
}

// reapLeftovers cleans up what airlocks that were killed left under the
// job's state root (their sandboxes, and their workspaces' writes), and
// says so on the job's log.
func reapLeftovers(ctx context.Context, job Job) []gvisor.Reaped {
	reaped, rerr := gvisor.Reap(ctx, job.Sandbox.StateRoot)
	if rerr != nil {
		slog.Warn("reaping leftover sandboxes", "err", rerr)
	}
	for _, r := range reaped {
		fmt.Fprintf(job.Log, "airlock: cleaned up job %s left by airlock pid %d\n", r.ID, r.OwnerPID)
		if r.Writes != "" {
			fmt.Fprintf(job.Log, "airlock: its workspace writes: %s\n", r.Writes)
		}
		if r.Workspace != "" {
			if _, err := workspace.Tidy(r.Workspace, r.SandboxUID); err != nil {
				slog.Warn("tidying workspace of a leftover job", "workspace", r.Workspace, "err", err)
			}
		}
	}
	return reaped
}

// pullImage pulls the job's image (Job.PullImage), if any (job: as Open
// was given it): the sandbox runs on its root, under its environment.
func (s *Session) pullImage(job Job) error {
	if job.PullImage == "" {
		return nil
	}
	if job.Images.Log == nil {
		job.Images.Log = job.Log
	}
	img, err := job.Images.Open(s.ctx, job.PullImage, "the job's image")
	s.res.Images = job.Images.Resolved()
	if err != nil {
		return err
	}
	s.job.Sandbox.RootFS = img.RootFS
	s.imageEnv = slices.Clone(img.Env)
	s.job.Env = append(slices.Clone(img.Env), s.job.Env...)
	return nil
}

// startEgress starts the job's egress gateway, if it has one (job: as
// Open was given it), and gives the sandbox its network namespace, files
// and environment.
func (s *Session) startEgress(job Job) (err error) {
	if job.Egress == nil {
		return nil
	}
	ecfg := *job.Egress
	ecfg.Credentials = job.Credentials
	if ecfg.UploadSpool == "" {
		ecfg.UploadSpool = gvisor.DiskDir(job.Sandbox.StateRoot, "uploads")
	}
	if ecfg.CAValidity == 0 && job.Sandbox.Limits.JobTimeout > 0 {
		ecfg.CAValidity = job.Sandbox.Limits.JobTimeout + 10*time.Minute
	}
	if s.gw, err = egress.Start(ecfg); err != nil {
		return fmt.Errorf("start the egress gateway: %w", err)
	}
	s.job.Sandbox.NetNS = s.gw.NetNS()
	files, err := s.gw.Files(rootfsSource(job.Sandbox.RootFS))
	if err != nil {
		return err
	}
	s.job.Sandbox.Files = append(s.job.Sandbox.Files, files...)
	s.job.Env = append(s.gw.Env(), s.job.Env...)
	return nil
}

// describeSandbox records in the result what the sandbox is: its id,
// platform, root, workspace, user, the limits that hold and its network.
func (s *Session) describeSandbox(runtime string) {
	s.cfg = s.sb.Config()
	s.res.Sandbox = SandboxInfo{
		ID: s.sb.ID(), Runtime: runtime, Platform: s.cfg.Platform, RootFS: rootfsName(s.cfg.RootFS),
		PlatformReason: s.sb.Platform().Reason, PlatformAttempts: platformAttempts(s.sb.Platform()),
		Workspace: s.cfg.Workspace, WorkspaceMount: s.cfg.WorkspaceMount, User: *s.cfg.User,
		Limits: s.cfg.Limits, Network: networkName(s.cfg.NetNS),
	}
	if enc, ok := s.sb.Enclosing(); ok {
		// Never a limit that nothing enforces: what the pod's cgroup sets.
		s.res.Sandbox.Limits.Memory, s.res.Sandbox.Limits.CPUs = enc.Memory, enc.CPUs
		s.res.Sandbox.LimitsEnforcedBy = EnclosingCgroup
	}
	if s.gw != nil {
		s.res.Sandbox.Network = "egress gateway " + s.gw.GatewayAddr().String()
	}
}

// exclusiveMounts says whether the job's sandbox may keep its mounts'
// files as its own (gvisor.Config.ExclusiveMounts): only the job writes
// them, and in one container; no step runs a script its caller writes
// on the host (or rewrites: Session.withhold). The run-time trust diff
// and its reverts come after the sandbox is gone, so a policy does not
// change that.
func exclusiveMounts(job Job) bool {
	return job.soleWriter && !slices.ContainsFunc(job.Steps, func(s StepSpec) bool {
		return s.Image != nil || len(s.Scripts) > 0
	})
}

// viewCheckoutToken shows the sandbox the repository's git config with
// a placeholder for the job's token, read-only, when a checkout made on
// the host before the job left the token there.
func (s *Session) viewCheckoutToken() error {
	job := &s.job
	v := job.Credentials
	if v == nil || (job.Trust != nil && job.Trust.Deferred) {
		return nil
	}
	repo, root := "", job.Sandbox.StateRoot
	if job.Trust != nil {
		repo = job.Trust.Dir
	}
	if root == "" {
		root = gvisor.DefaultStateRoot
	}
	views, err := gitConfigViews(v, job.Sandbox.Workspace, repo, os.Getenv("RUNNER_TEMP"), filepath.Join(root, "views"))
	for _, view := range views {
		s.job.Sandbox.Views = append(s.job.Sandbox.Views, view)
		s.views = append(s.views, view.Source)
		fmt.Fprintf(job.Log, "airlock: %s holds the job's token: the sandbox sees it with a placeholder, read-only\n", view.Path)
	}
	return err
}

// ID is the sandbox's id.
func (s *Session) ID() string { return s.res.Sandbox.ID }

// Context ends when the job's time is up (or the job was cancelled).
func (s *Session) Context() context.Context { return s.ctx }

// Step runs one step in the sandbox, writing its output (prefixed with
// the step's name when the job has several) to stdout and stderr, and
// records its outcome.
func (s *Session) Step(ctx context.Context, spec StepSpec, stdout, stderr io.Writer) StepOutcome {
	out := StepOutcome{Name: spec.Name, Command: spec.argv()}
	prefix := ""
	if s.multi {
		prefix = "[" + spec.Name + "] "
	}
	pso, pse := newPrefixWriter(&s.outMu, orDiscard(stdout), prefix), newPrefixWriter(&s.outMu, orDiscard(stderr), prefix)
	spec, jobEnv, so, se := s.withhold(spec, pso, pse)
	before := s.sb.ExecCount()
	var mark egress.Mark
	connects := s.sb.ConnectCount()
	if s.gw != nil {
		mark = s.gw.Mark()
	}
	var sr gvisor.StepResult
	var err error
	if spec.Image == nil {
		env := append(append([]string{}, jobEnv...), EnvList(spec.Env)...)
		sr, err = s.sb.Exec(ctx, gvisor.Step{
			Args:    spec.argv(),
			Env:     env,
			Dir:     workDir(s.cfg.WorkspaceMount, spec.WorkingDirectory),
			Timeout: time.Duration(spec.Timeout),
			Stdout:  so,
			Stderr:  se,
		})
	} else {
		sr, err = s.containerStep(ctx, spec, so, se)
	}
	if s.gw != nil {
		// Tell the step (and an agent reading its log) what was refused
		// and how the policy would allow it.
		egress.WriteRefusals(se, s.gw.RefusalsSince(mark, s.sb.ConnectsFrom(connects)))
	}
	pso.Flush()
	pse.Flush()
	out.StepResult = sr
	out.Processes = s.sb.ExecCount() - before
	switch {
	case errors.Is(err, gvisor.ErrNoExecutable):
		// The command is not there: the step's own failure, as a shell
		// reports it (127), not airlock's.
		out.Status, out.ExitCode, out.Message = StatusFailed, 127, err.Error()
	case err != nil:
		out.Status = StatusError
		out.Message = err.Error()
	case sr.ExitCode != 0 || sr.Limit != "":
		out.Status = StatusFailed
	default:
		out.Status = StatusPassed
	}
	if out.Message != "" {
		fmt.Fprintf(s.job.Log, "airlock: step %q: %s\n", spec.Name, out.Message)
	}
	s.res.Steps = append(s.res.Steps, out)
	return out
}

// containerStep runs a step in a container of its own on its image.
func (s *Session) containerStep(ctx context.Context, spec StepSpec, stdout, stderr io.Writer) (gvisor.StepResult, error) {
	timeout := time.Duration(spec.Timeout)
	if timeout == 0 {
		timeout = s.cfg.Limits.StepTimeout // as for an exec'd step
	}
	c, err := s.StartContainer(ctx, gvisor.ContainerConfig{
		Name:   fmt.Sprintf("step-%d", len(s.res.Steps)+1),
		RootFS: spec.Image.RootFS, Mounts: spec.Mounts, Files: spec.Files,
		Args: spec.argv(), Env: append(append([]string{}, spec.Image.Env...), EnvList(spec.Env)...),
		Dir:     workDir(s.cfg.WorkspaceMount, spec.WorkingDirectory),
		Timeout: timeout, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return gvisor.StepResult{}, err
	}
	defer c.Destroy()
	return c.Wait(ctx)
}

// StartContainer starts a container of its own inside the job's sandbox
// (a Docker action's step, a service): its own root and mounts, the job's
// network with the gateway's files (resolv.conf, the job CA) and proxy
// variables, the job's limits and record. Sandbox.Destroy ends it at the
// latest.
func (s *Session) StartContainer(ctx context.Context, c gvisor.ContainerConfig) (*gvisor.Container, error) {
	c.Env = withholdList(s.job.Credentials, c.Env)
	if s.gw != nil {
		files, err := s.gw.Files(c.RootFS)
		if err != nil {
			return nil, err
		}
		c.Files = append(files, c.Files...)
		c.Env = append(s.gw.Env(), c.Env...)
	}
	return s.sb.StartContainer(ctx, c)
}

// StartService starts a long-running container in the job's sandbox (a
// service of the job), its output lines prefixed with its name (never a
// line of its own, such as a workflow command) on log. It runs until the
// session closes.
//
// A service whose command does not start (airlock's exec shim exits 127
// or 126 at once) is an error, as Docker's start of it would be, not a
// job left without its service: StartService gives it serviceGrace.
func (s *Session) StartService(ctx context.Context, c gvisor.ContainerConfig, log io.Writer) error {
	w := newPrefixWriter(&s.outMu, orDiscard(log), "["+c.Name+"] ")
	first := &headWriter{max: 512}
	c.Stdout, c.Stderr = w, io.MultiWriter(w, first)
	ct, err := s.StartContainer(ctx, c)
	if err != nil {
		return err
	}
	select {
	case <-ct.Exited():
		res, _ := ct.Wait(ctx)
		if res.ExitCode == 126 || res.ExitCode == 127 {
			return fmt.Errorf("its command did not start (exit %d): %s", res.ExitCode, strings.TrimSpace(first.String()))
		}
	case <-time.After(serviceGrace):
	}
	return nil
}

// serviceGrace is how long StartService watches a service for a command
// that does not start.
const serviceGrace = 250 * time.Millisecond

// beginTrust starts the job's trust watch: the authored diff and the
// baseline of a workspace that is filled already, whose read-only paths
// the sandbox then mounts. The hook's job fills the workspace with its
// checkout: its baseline is taken later (TrustBaseline).
func (s *Session) beginTrust() error {
	if s.job.Trust == nil {
		return nil
	}
	s.trust = trust.NewWatch(*s.job.Trust)
	s.res.Trust = s.trust.Report()
	ro, err := s.trust.Begin(s.ctx, s.job.Sandbox.Workspace)
	if err != nil {
		return err
	}
	s.job.Sandbox.ReadOnlyPaths = append(s.job.Sandbox.ReadOnlyPaths, ro...)
	return nil
}

// TrustBaseline takes the run-time trust snapshot now, when it was
// deferred and not yet taken (the hook takes it once the job's checkout
// has filled the workspace). The read-only mounts of a deferred baseline
// cannot be added to a running sandbox: "readonly" acts as "revert".
func (s *Session) TrustBaseline() error {
	if s.trust == nil {
		return nil
	}
	return s.trust.Baseline(s.cfg.Workspace)
}

// CheckedOut reports whether the trust checks' repository has a .git
// now (the hook takes the baseline once the checkout made one).
func (s *Session) CheckedOut() bool {
	if s.trust == nil {
		_, err := os.Lstat(filepath.Join(s.cfg.Workspace, ".git"))
		return err == nil
	}
	return s.trust.CheckedOut(s.cfg.Workspace)
}

// Kill stops every process of the running step (the sandbox stays).
func (s *Session) Kill() error {
	if s.sb == nil {
		return nil
	}
	return s.sb.Kill()
}

// Close ends the session: the verdict, then the sandbox destroyed, the
// gateway closed and its record read, the run-time trust diff and its
// actions, the workspace tidied. It returns the Result; a second call
// returns it again.
func (s *Session) Close() Result {
	if s.closed {
		return s.res
	}
	s.closed = true
	defer s.cancel()
	defer s.removeViews()
	s.res.Passed, s.res.ExitCode = verdict(s.res.Steps)
	if err := s.ctx.Err(); err != nil && errors.Is(err, context.Canceled) {
		s.res.Error = joinMsg(s.res.Error, "job cancelled")
	}
	ctx := context.WithoutCancel(s.ctx)
	if err := s.sb.Destroy(ctx); err != nil {
		s.res.Error = joinMsg(s.res.Error, "destroy sandbox: "+err.Error())
		// The job's workspace writes are lost: whatever its steps said,
		// the job did not do what it claims.
		if errors.Is(err, quota.ErrNotMerged) {
			s.res.Passed = false
			if s.res.ExitCode == 0 {
				s.res.ExitCode = 1
			}
		}
	}
	if s.job.Images != nil {
		s.res.Images = s.job.Images.Resolved()
		s.job.Images.Close()
	}
	s.res.Processes = s.sb.Record()
	if w := s.sb.Released(); w.Limit > 0 {
		s.res.WorkspaceVolume = &w
	}
	if s.gw != nil {
		// Closed first: connections still open end now and are recorded
		// with their byte counts.
		s.gw.Close()
		rep := s.gw.Report(s.res.Processes)
		s.res.Egress = &rep
	}
	if s.trust != nil {
		s.closeTrust(ctx)
	}
	rep, err := workspace.Tidy(s.cfg.Workspace, s.cfg.User.UID)
	if err != nil {
		s.res.Error = joinMsg(s.res.Error, "tidy workspace: "+err.Error())
	}
	// What a bounded workspace's merge kept from the host: the same as
	// Tidy's clearing, done before the files reached it.
	if v := s.res.WorkspaceVolume; v != nil {
		rep.SetIDCleared = append(rep.SetIDCleared, v.Merged.SetIDCleared...)
		rep.DevicesRemoved = append(rep.DevicesRemoved, v.Merged.Devices...)
	}
	s.res.Workspace = rep
	redact(&s.res, s.job.Credentials)
	s.res.End = time.Now().UTC()
	s.res.Duration = s.res.End.Sub(s.res.Start)
	return s.res
}

// Interim is the result of the job so far, for an attestation a step of
// the job can upload: its steps, processes and egress until now, the
// authored trust findings. The run-time trust diff and the final verdict
// come with Close.
func (s *Session) Interim() Result {
	res := s.res
	res.Interim = true
	res.Steps = slices.Clone(s.res.Steps)
	res.Passed, res.ExitCode = verdict(res.Steps)
	res.Processes = s.sb.Record()
	if s.gw != nil {
		rep := s.gw.Report(res.Processes)
		res.Egress = &rep
	}
	if s.trust != nil {
		res.Trust = s.trust.Interim()
		if res.Trust.Failed {
			res.Passed = false
		}
	}
	redact(&res, s.job.Credentials)
	res.End = time.Now().UTC()
	res.Duration = res.End.Sub(res.Start)
	return res
}

// closeTrust runs the run-time trust diff (the sandbox is gone, nothing
// writes any more); a trust failure fails the job.
func (s *Session) closeTrust(ctx context.Context) {
	rep := s.trust.Finish(ctx, s.cfg.Workspace, s.cfg.WorkspaceMount, s.res.Processes)
	if rep.Failed {
		s.res.Passed = false
		if s.res.ExitCode == 0 {
			s.res.ExitCode = 1
		}
	}
}

// Abandon releases what a failed Open started and returns its Result.
func (s *Session) Abandon() Result {
	if s.sb != nil {
		return s.Close()
	}
	s.closed = true
	s.cancel()
	s.removeViews()
	s.job.Images.Close()
	if s.gw != nil {
		s.gw.Close()
	}
	s.res.End = time.Now().UTC()
	s.res.Duration = s.res.End.Sub(s.res.Start)
	return s.res
}

// removeViews removes the files of the sandbox's views.
func (s *Session) removeViews() {
	for _, p := range s.views {
		os.Remove(p)
	}
	s.views = nil
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

// EnvList turns an env map (a step's, a container's) into KEY=VALUE
// entries in key order, so runs are reproducible.
func EnvList(m map[string]string) []string {
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

// diskFull adds to an error caused by a full disk (ENOSPC, EDQUOT) what
// to do about it: most likely the disk of the state directory, where
// airlock keeps each job's sandbox state and workspace volume.
func diskFull(err error, stateRoot string) error {
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return err
	}
	if stateRoot == "" {
		stateRoot = gvisor.DefaultStateRoot
	}
	return fmt.Errorf("%w (a disk is full: airlock keeps each job's state and workspace volume under %s; free space there, or give a state directory on another disk)", err, stateRoot)
}
