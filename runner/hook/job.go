package hook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/report"
)

// The job container's paths, as the runner mounts them.
const (
	containerWork    = "/__w"
	containerTemp    = "/__w/_temp"
	containerActions = "/__w/_actions"
	containerTool    = "/__w/_tool"
	containerHome    = "/github/home"
	containerEvent   = "/github/workflow/event.json"
	responsesDir     = "_runner_hook_responses"
	// toolCacheDir, in the runner's temp directory, is the job's own tool
	// cache (see jobMounts).
	toolCacheDir = "_airlock_tool_cache"
	// checkTimeout bounds the check run's completion at cleanup_job.
	checkTimeout = time.Minute
)

// job is a job as its daemon keeps it: its session, and what its steps,
// containers and attestation need of the runner's payloads.
type job struct {
	cfg     Config
	dir     string
	session *runner.Session
	attest  runner.AttestConfig
	// storesPrepared stops report.PrepareStores, started with the job.
	storesPrepared func()
	mounts         Mounts
	// baseline: the run-time trust baseline was taken.
	baseline bool
	// The GitHub API, when configured: the repository and the check run.
	gh          *github.Client
	owner, repo string
	checkID     int64
	jobTimeout  time.Duration
	// images gives the job's services and Docker actions their images
	// (mapped, or pulled under the policy); hosts is the job's
	// /etc/hosts (the services' names, serviceNames, in the runner's
	// order; the sandbox's own).
	images       *runner.ImageSource
	hosts        []gvisor.File
	serviceNames []string
	// user is who the job runs as.
	user gvisor.User
	// fileCommands is the job's own file-command directory (host), which
	// it sees in place of the runner's, runnerFileCommands (host): see
	// filecommands.go. toolCache is the job's own tool cache (host).
	fileCommands, runnerFileCommands, toolCache string
	// jobEnv is the plan's environment of the job, for containerPath.
	jobEnv []string
	// containerPath is the job container's PATH (its image's, or the
	// workflow's container env), which a step's prependPath goes before.
	containerPath string
	// serviceLog keeps the end of the services' output for cleanup_job.
	serviceLog tailBuffer
	// hostMasks are the host paths the job's sandbox hides (the runner's
	// hook responses, the policy's masks), covered in Docker actions too;
	// maskIDs are the identities of those below the work directory.
	hostMasks []string
	maskIDs   map[string]fileID
	// pinnedRepo keeps the repository open for the attestation (see
	// pinWorkspace).
	pinnedRepo *os.File
	// commits are the pull request's head and merge commits: a checkout
	// at one of them is compared with its tree as GitHub has it.
	commits []string
	// githubServer is the github context's server URL, where actions
	// come from; actionsSeen the actions and images already recorded for
	// the provenance (actions.go).
	githubServer string
	actionsSeen  map[string]bool
}

// build turns the runner's prepare_job payload into the job's plan. What
// the payload means is planInputs' (inputs.go); build acts on it: it
// reads the event file the payload names, then the policy (the
// organisation's, and the repository's at the pull request's base
// commit, read through the GitHub API), makes the plan, prepares the
// runner's directories on the host for the job, and starts the check run.
func (d *job) build(ctx context.Context, args PrepareArgs) (runner.Job, error) {
	in, err := planInputs(args, readEvent(args.Container), hostInputsFromEnv(d.cfg, d.dir))
	if err != nil {
		return runner.Job{}, err
	}
	d.keepInputs(in)
	if in.userVolumes > 0 {
		fmt.Fprintf(os.Stderr, "airlock: the job's own volumes are not mounted (%d): a workflow may not mount host paths into the sandbox\n", in.userVolumes)
	}
	if d.gh, err = githubFromEnv(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: GitHub API not used: %v\n", err)
	}
	plan, err := d.plan(ctx, in)
	if err != nil {
		return runner.Job{}, err
	}
	d.keepPlan(plan)
	j := plan.Job
	work, repoDir := in.inputs.Workspace, in.inputs.TrustDir
	if err := d.prepareHost(&j, work, repoDir); err != nil {
		return runner.Job{}, err
	}
	pr := in.pr.PullRequest
	set := j.Trust.Set
	if d.gh != nil && d.owner != "" && len(d.commits) > 0 {
		j.Trust.Commits = d.checkoutCommits()
	}
	switch {
	case d.gh != nil && d.owner != "" && pr.Event != nil && pr.Event.Number > 0:
		j.Trust.Authored, j.Trust.AuthoredError = authoredFromAPI(ctx, d.gh, d.owner, d.repo, pr.Base, pr.Head, set)
	case pr.Event != nil && pr.Event.Number > 0:
		j.Trust.AuthoredError = "authored diff: not taken: it needs the GitHub API (AIRLOCK_GITHUB_TOKEN or a GitHub App)"
	}
	// Attestations go where the job cannot reach (a symlink planted in
	// the runner's temp directory would make root write elsewhere).
	d.attest = plan.Attest
	d.attest.Dir = filepath.Join(d.cfg.JobsRoot, "attestations")
	d.attest.Repository = filepath.Join(work, repoDir)
	d.attest.Meta.AirlockVersion, d.attest.Meta.AirlockCommit = d.cfg.Version, d.cfg.Commit
	if d.gh != nil && d.owner != "" && pr.Head != "" {
		if d.checkID, err = d.gh.StartCheck(ctx, d.owner, d.repo, pr.Head); err != nil {
			fmt.Fprintf(os.Stderr, "airlock: check run not created: %v\n", err)
		}
	}
	return j, nil
}

// readEvent reads the event file the runner's payload names
// (GITHUB_EVENT_PATH, mounted at /github/workflow/event.json): no mount
// is no file. What it says is planInputs' to decide.
func readEvent(c *Container) eventFile {
	if c == nil {
		return eventFile{err: fs.ErrNotExist}
	}
	ev, ok := Mounts(c.SystemMountVolumes).Host(containerEvent)
	if !ok {
		return eventFile{err: fs.ErrNotExist}
	}
	data, err := files.ReadCapped(ev, policies.MaxEventSize)
	return eventFile{data: data, err: err}
}

// hostInputsFromEnv are the host's inputs of a job: the hook's
// configuration, the job's directory, and the github context's URLs,
// which the runner gives its hook in the environment.
func hostInputsFromEnv(cfg Config, dir string) hostInputs {
	// The daemon runs under the hook process until it is ready, and
	// the hook under the runner's node and Runner.Worker.
	return hostInputs{cfg: cfg, dir: dir, serverURL: os.Getenv("GITHUB_SERVER_URL"), apiURL: os.Getenv("GITHUB_API_URL"),
		runnerRoot: runner.FindRunnerRoot(os.Getpid())}
}

// keepInputs keeps what the job's steps, containers and trust baseline
// need of the runner's payload.
func (d *job) keepInputs(in jobInputs) {
	d.mounts, d.serviceNames = in.mounts, in.serviceNames
	d.fileCommands, d.runnerFileCommands, d.toolCache = in.fileCommands, in.runnerFileCommands, in.toolCache
	d.owner, d.repo, d.commits = in.pr.owner, in.pr.repo, in.pr.commits
	d.githubServer = in.inputs.GitHubServerURL
}

// plan is the job's plan: its policy applied to its inputs. The
// workflow's --user counts only where the policy lets the image choose
// (sandbox.user "image"); elsewhere a garbled one is no error. What the
// agent detection found and the plan's notes go to the job's log.
func (d *job) plan(ctx context.Context, in jobInputs) (runner.Plan, error) {
	eff, err := d.policy(ctx, in.pr.PullRequest)
	if err != nil {
		return runner.Plan{}, err
	}
	if in.userErr != nil && eff.Policy.Sandbox.ImageUser() {
		return runner.Plan{}, in.userErr
	}
	plan, err := runner.NewPlan(eff, in.pr.PullRequest, in.inputs)
	if err != nil {
		return runner.Plan{}, err
	}
	if det := plan.Job.Policy.Agent; det != nil {
		// Recorded; under the hook every job is sandboxed whatever the
		// detection says (the runner has no other way to run it).
		fmt.Fprintf(os.Stderr, "airlock: pull request #%d: %s\n", in.pr.Event.Number, det.Reason)
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(os.Stderr, "airlock: %s\n", n)
	}
	return plan, nil
}

// policy is the job's policy: the organisation's, and for a pull
// request the repository's at its base commit, read through the GitHub
// API (repoPolicy); one that cannot be read leaves the organisation's
// alone, said in the job's log.
func (d *job) policy(ctx context.Context, pr runner.PullRequest) (*policies.Effective, error) {
	srcs, err := policies.OrgSources(d.cfg.OrgDir)
	if err != nil {
		return nil, err
	}
	if pr.Event != nil {
		src, err := d.repoPolicy(ctx, pr.Base)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "airlock: the repository policy at %.12s could not be read (%v): the organisation policy applies alone\n", pr.Base, err)
		case src != nil:
			srcs = append(srcs, *src)
		}
	}
	return policies.Load(ctx, srcs)
}

// setContainerPath sets the container's PATH: the job's environment's
// (the workflow's container env, over a mapped image's), over imageEnv
// (a pulled image's, known once the session is open), else the
// sandbox's default.
func (d *job) setContainerPath(imageEnv []string) {
	d.containerPath = gvisor.DefaultPath
	for _, kv := range append(slices.Clone(imageEnv), d.jobEnv...) {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			d.containerPath = v
		}
	}
}

// keepPlan keeps what the job's steps and containers need of its plan:
// its images (mapped by the policy, or pulled into the hook's image
// cache, AIRLOCK_IMAGE_CACHE) and the job's /etc/hosts, the
// container's PATH (a step's prependPath goes before it), the job's
// timeout, and its masks as host paths.
func (d *job) keepPlan(plan runner.Plan) {
	d.images, d.hosts = plan.Images, plan.Hosts
	if d.cfg.ImageCache != "" {
		d.images.StoreDir = d.cfg.ImageCache
	}
	d.jobEnv = plan.Job.Env
	d.setContainerPath(nil)
	d.jobTimeout = plan.Job.Sandbox.Limits.JobTimeout
	// Masks name paths as the job sees them (below /__w: the workspace's);
	// Docker actions' volumes are host directories.
	for _, m := range plan.Job.Sandbox.ExtraMasks {
		if h, ok := d.mounts.Host(m); ok {
			m = h
		}
		d.hostMasks = append(d.hostMasks, m)
	}
}

// prepareHost makes the runner's directories on the host ready for the
// job before any of its code runs: the job's user chosen (the sandbox would pick the same), the temp
// directory prepared, and what the runner made for the job handed to
// that user (see handover.go).
func (d *job) prepareHost(j *runner.Job, work, repoDir string) error {
	if j.Sandbox.User == nil {
		u, err := gvisor.DefaultUser(work)
		if err != nil {
			return err
		}
		j.Sandbox.User = &u
	}
	d.user = *j.Sandbox.User
	if err := d.prepareTemp(work); err != nil {
		return err
	}
	handOver := []string{}
	if top, _, _ := strings.Cut(repoDir, "/"); top != "" {
		handOver = append(handOver, filepath.Join(work, top))
	}
	for _, p := range []string{containerTemp, containerHome} {
		if h, ok := d.mounts.Host(p); ok {
			handOver = append(handOver, h)
		}
	}
	return handOverDirs(work, d.user, handOver, responsesDir, fileCommandsDir)
}

// prepareTemp makes, before any of the job's code runs, what the job's
// mounts need in the runner's temp directory (reached without following
// symlinks): the runner's hook-response and file-command directories
// (the runner's, masked or covered in the sandbox), and a new, empty tool
// cache of the job's user; and the job's own file-command directory.
func (d *job) prepareTemp(work string) error {
	tmp, ok := d.mounts.Host(containerTemp)
	if !ok {
		return nil
	}
	root, err := files.OpenRootBeneath(work, tmp)
	if err != nil {
		return fmt.Errorf("the runner's temp directory: %w", err)
	}
	defer root.Close()
	for _, dir := range []string{responsesDir, fileCommandsDir} {
		if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("the runner's temp directory: %w", err)
		}
	}
	// The job's tool cache is mounted where the runner's is, which must
	// be a directory (a symlink would move the mount elsewhere).
	if h, ok := d.mounts.Host(containerTool); ok && d.toolCache != "" {
		fi, err := os.Lstat(h)
		if errors.Is(err, fs.ErrNotExist) {
			err = os.Mkdir(h, 0o755)
			fi, _ = os.Lstat(h)
		}
		if err != nil || fi == nil || !fi.IsDir() {
			return fmt.Errorf("the runner's tool cache %s is not a directory (a symlink?): airlock mounts the job's own there; make it a directory", h)
		}
	}
	if err := root.RemoveAll(toolCacheDir); err != nil {
		return fmt.Errorf("the job's tool cache: %w", err)
	}
	if err := root.Mkdir(toolCacheDir, 0o755); err != nil {
		return fmt.Errorf("the job's tool cache: %w", err)
	}
	if err := root.Lchown(toolCacheDir, int(d.user.UID), int(d.user.GID)); err != nil {
		return fmt.Errorf("the job's tool cache: %w", err)
	}
	return ownDir(d.fileCommands, d.user)
}

// removeToolCache removes the job's tool cache once the sandbox is gone.
func (d *job) removeToolCache() {
	if d.toolCache == "" {
		return
	}
	work, _ := d.mounts.Host(containerWork)
	root, err := files.OpenRootBeneath(work, filepath.Dir(d.toolCache))
	if err != nil {
		return
	}
	defer root.Close()
	root.RemoveAll(toolCacheDir)
}

// repoPolicy reads .github/airlock.cue at the base commit through the
// GitHub API. Never from the workspace's git objects: on a self-hosted
// runner they are what earlier jobs left, and a job can rewrite a loose
// object (git does not re-hash what it reads).
func (d *job) repoPolicy(ctx context.Context, base string) (*policies.Source, error) {
	if d.gh == nil || d.owner == "" {
		return nil, errors.New("no GitHub API is configured (AIRLOCK_GITHUB_TOKEN or a GitHub App)")
	}
	data, err := d.gh.FileAtRef(ctx, d.owner, d.repo, policies.RepoPolicyPath, base)
	if err != nil || data == nil {
		return nil, err
	}
	return &policies.Source{Kind: policies.KindRepo, Path: policies.RepoPolicyPath, Commit: base, Data: data}, nil
}

// Step runs one runner step: the entry point and its arguments, with the
// step's environment and PATH.
func (d *job) Step(ctx context.Context, a ScriptArgs, stdout, stderr io.Writer) (int, error) {
	d.takeBaseline(stderr)
	d.recordActions(a.EntryPointArgs, a.Env, stderr)
	if uploadsArtifacts(a) {
		d.interimAttestation(ctx, stderr)
	}
	if a.EntryPoint == "" {
		return 1, errors.New("run_script_step: no entryPoint")
	}
	args, err := Args(a.EntryPointArgs)
	if err != nil {
		return 1, fmt.Errorf("run_script_step: the arguments %q do not parse: %w", strings.Join(a.EntryPointArgs, " "), err)
	}
	env := maps.Clone(a.Env)
	if env == nil {
		env = map[string]string{}
	}
	// As the runner's docker exec does: the prepended directories
	// (newest first, as sent) before the container's PATH, which is left
	// alone when there are none.
	if len(a.PrependPath) > 0 {
		env["PATH"] = strings.Join(a.PrependPath, ":") + ":" + d.containerPath
	}
	staged := d.stageFileCommands(env, fileCommandsInJob)
	defer d.copyBack(staged, stderr)
	return d.runStep(ctx, runner.StepSpec{
		Name: path.Base(a.EntryPoint), Command: append([]string{a.EntryPoint}, args...),
		Env: env, WorkingDirectory: a.WorkingDirectory, Scripts: d.scripts(args),
	}, stdout, stderr)
}

// tempFile is a file of the runner's temp directory named in a step's
// arguments: the script of a run: step (bash's path, or pwsh's
// ". '/__w/_temp/x.ps1'").
var tempFile = regexp.MustCompile(`/__w/_temp/[A-Za-z0-9._-]+`)

// scripts are the files of the runner's temp directory a step's
// arguments name, for the session to hide the job's credentials in.
func (d *job) scripts(args []string) []runner.HostFile {
	work, _ := d.mounts.Host(containerWork)
	var out []runner.HostFile
	for _, a := range args {
		for _, p := range tempFile.FindAllString(a, -1) {
			if h, ok := d.mounts.Host(p); ok {
				out = append(out, runner.HostFile{Base: work, Path: h})
			}
		}
	}
	return out
}

// takeBaseline takes the trust baseline before the first step that finds
// the repository checked out.
func (d *job) takeBaseline(stderr io.Writer) {
	if d.baseline {
		return
	}
	if d.session.CheckedOut() {
		if err := d.session.TrustBaseline(); err != nil {
			fmt.Fprintf(stderr, "airlock: trust snapshot: %v\n", err)
		}
		d.baseline = true
	}
}

// runStep runs a step within the job's time and turns its outcome into
// the exit code the runner reports.
func (d *job) runStep(ctx context.Context, spec runner.StepSpec, stdout, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.session.Context(), cancel)
	defer stop()
	out := d.session.Step(ctx, spec, stdout, stderr)
	if out.Limit != "" && out.Message != "" {
		// Which limit stopped the step, and where it is set.
		fmt.Fprintf(stderr, "airlock: step %s: %s\n", spec.Name, out.Message)
	}
	switch {
	case out.Status == runner.StatusError:
		// airlock's own trouble, said in the step's log.
		fmt.Fprintf(stderr, "airlock: step %s: %s\n", spec.Name, out.Message)
		return 1, nil
	case out.ExitCode == 0 && out.Status != runner.StatusPassed:
		return 1, nil
	}
	return out.ExitCode, nil
}

// Cleanup ends the job: the sandbox destroyed, the run-time trust diff,
// the signed attestation in the runner's temp directory (for
// actions/upload-artifact), the summary and annotations in the log.
func (d *job) Cleanup(ctx context.Context, stdout, stderr io.Writer) error {
	if !d.baseline {
		// Not even one step: nothing to compare against.
		d.session.TrustBaseline()
	}
	if d.storesPrepared != nil {
		d.storesPrepared()
	}
	d.attest.ResolveSubject(ctx)
	res := d.session.Close()
	d.removeToolCache()
	d.pinWorkspace()
	d.serviceLog.writeTo(stderr)
	att := report.Finish(ctx, res, &d.attest, &d.cfg.Retention, stderr)
	if res.Trust != nil {
		res.Trust.WriteAnnotations(stdout)
	}
	if att.Bundle != "" {
		fmt.Fprintf(stdout, "airlock: attestation %s\n", att.Bundle)
	}
	if p := att.Provenance; p != nil && p.Bundle != "" {
		fmt.Fprintf(stdout, "airlock: provenance %s (%d artifact(s))\n", p.Bundle, p.Subjects)
	}
	fails := airlockFails(res, att, d.attest.Key != "")
	if d.checkID != 0 {
		// Bounded, within cleanup_job's own bound: a slow API must not
		// cost the runner's call its verdict.
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		defer cancel()
		if err := d.gh.CompleteCheck(cctx, d.owner, d.repo, d.checkID, checkReport(res, att, fails)); err != nil {
			// Reported, never failing the job.
			fmt.Fprintf(stderr, "airlock: check run not completed: %v\n", err)
		}
	}
	switch {
	case len(fails) > 0:
		return fmt.Errorf("airlock fails the job: %s", strings.Join(fails, "; "))
	case !res.Passed:
		fmt.Fprintf(stderr, "airlock: %s; the runner reports the steps, and airlock found nothing of its own to fail the job for\n", strings.Join(res.Reasons(), "; "))
	}
	return nil
}

// airlockFails are the reasons airlock itself fails the job, which only
// cleanup_job's exit status can say: a trust finding whose action is
// fail, and an attestation or provenance that a configured key could not
// sign, and a required attestation store that does not hold the job's
// record (report.Attestation.StoreFailures). A step that failed is not one: the runner already failed it, or
// let it fail (continue-on-error: true), and a failing cleanup_job would
// fail the job's post step, and so the job, whatever the workflow said.
func airlockFails(res runner.Result, att *report.Attestation, keyConfigured bool) []string {
	var out []string
	if res.Trust != nil && res.Trust.Failed {
		out = append(out, res.Trust.Reason)
	}
	if keyConfigured && (att == nil || att.Bundle == "") {
		why := "unknown"
		if att != nil && att.Error != "" {
			why = att.Error
		}
		out = append(out, "the attestation could not be signed: "+why)
	}
	if keyConfigured && att != nil && att.Bundle != "" && att.Provenance != nil && att.Provenance.None == "" && att.Provenance.Bundle == "" {
		out = append(out, "the provenance could not be signed: "+att.Provenance.Error)
	}
	return append(out, att.StoreFailures()...)
}
