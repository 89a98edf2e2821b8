package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/hook"
	"github.com/airlock-ci/airlock/runner/trust"
	workspacetidy "github.com/airlock-ci/airlock/runner/workspace"
)

// Environment of the runner host that configures the hook.
const (
	hookDirEnv = "AIRLOCK_HOOK_DIR" // where job directories go (default /run/airlock/hooks)
	orgDirEnv  = "AIRLOCK_ORG_DIR"  // organisation policy (default /etc/airlock)
	keyEnv     = "AIRLOCK_ATTEST_KEY"
	// The GitHub API, optional: a token, or a GitHub App (id,
	// installation, private key file); the API root for GHES and tests.
	ghTokenEnv        = "AIRLOCK_GITHUB_TOKEN"
	ghAppIDEnv        = "AIRLOCK_GITHUB_APP_ID"
	ghInstallationEnv = "AIRLOCK_GITHUB_APP_INSTALLATION_ID"
	ghAppKeyEnv       = "AIRLOCK_GITHUB_APP_KEY"
	ghAPIEnv          = "AIRLOCK_GITHUB_API_URL"
)

// githubFromEnv returns the GitHub client the runner host configured, or
// nil when none is.
func githubFromEnv() (*github.Client, error) {
	o := github.Options{BaseURL: os.Getenv(ghAPIEnv), Token: os.Getenv(ghTokenEnv)}
	if id := os.Getenv(ghAppIDEnv); id != "" {
		var app github.App
		if _, err := fmt.Sscan(id, &app.ID); err != nil {
			return nil, fmt.Errorf("%s: %v", ghAppIDEnv, err)
		}
		if _, err := fmt.Sscan(os.Getenv(ghInstallationEnv), &app.InstallationID); err != nil {
			return nil, fmt.Errorf("%s: %v", ghInstallationEnv, err)
		}
		key, err := files.ReadCapped(os.Getenv(ghAppKeyEnv), 64<<10)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", ghAppKeyEnv, err)
		}
		app.PrivateKey = key
		o.App, o.Token = &app, ""
	}
	if o.Token == "" && o.App == nil {
		return nil, nil
	}
	return github.New(o)
}

// The job container's paths, as the runner mounts them.
const (
	containerWork     = "/__w"
	containerTemp     = "/__w/_temp"
	containerEvent    = "/github/workflow/event.json"
	safePath          = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	responsesDir      = "_runner_hook_responses"
	watchdogSlack     = 15 * time.Minute
	prepareTimeout    = 2 * time.Minute
	cleanupTimeout    = 5 * time.Minute
	daemonSocket      = "daemon.sock"
	daemonReady       = "ready"
	servicesFile      = "services.json"
	daemonFailed      = "failed"
	prepareInputFile  = "prepare.json"
	daemonLogFile     = "daemon.log"
	daemonPIDFile     = "daemon.pid"
	daemonArg0        = "airlock-hook-daemon"
	attestSubdir      = "airlock"
	defaultHookJobDir = "/run/airlock/hooks"
)

func newHookCmd(code *int) *cobra.Command {
	return &cobra.Command{
		Use:   "hook",
		Short: "The GitHub Actions runner's container hook (ACTIONS_RUNNER_CONTAINER_HOOKS runs it through index.js)",
		Long: `hook reads one container-hook call from standard input (prepare_job,
run_script_step, run_container_step or cleanup_job) and runs the job's
steps in an airlock sandbox. prepare_job starts a daemon per job that
owns the sandbox, its egress gateway and its records; the other calls
talk to it. Configure the runner host with AIRLOCK_ORG_DIR (organisation
policy), AIRLOCK_ATTEST_KEY (signing key) and AIRLOCK_HOOK_DIR.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// The runner prepends the job's $GITHUB_PATH entries to the
			// hook's PATH: nothing here, nor in the daemon, may look a
			// program up through it.
			os.Setenv("PATH", safePath)
			in, err := hook.ReadInput(c.InOrStdin())
			if err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			switch in.Command {
			case hook.PrepareJob:
				return hookPrepare(ctx, in, c.OutOrStdout())
			case hook.RunScriptStep:
				var args hook.ScriptArgs
				if err := json.Unmarshal(in.Args, &args); err != nil {
					return usagef("run_script_step: %v", err)
				}
				return hookStep(ctx, in.State, hook.Request{Op: "step", Step: &args}, c, code)
			case hook.RunContainerStep:
				var args hook.ContainerStepArgs
				if err := json.Unmarshal(in.Args, &args); err != nil {
					return usagef("run_container_step: %v", err)
				}
				args.Registry = nil // never passed on
				return hookStep(ctx, in.State, hook.Request{Op: "container-step", Container: &args}, c, code)
			default:
				return hookCleanup(ctx, in, c.OutOrStdout(), c.ErrOrStderr())
			}
		},
	}
}

// hookStep has the job's daemon run a step; the step's exit code is the
// hook's.
func hookStep(ctx context.Context, st hook.State, req hook.Request, c *cobra.Command, code *int) error {
	n, err := hook.Call(ctx, socketOf(st), req, c.OutOrStdout(), c.ErrOrStderr())
	if err != nil {
		return err
	}
	*code = n
	return nil
}

func hookJobsRoot() string {
	if d := os.Getenv(hookDirEnv); d != "" {
		return d
	}
	return defaultHookJobDir
}

// socketOf is the daemon socket of a job, from the runner's state. The
// directory must be one of ours.
func socketOf(st hook.State) string {
	dir := filepath.Clean(st.JobDir)
	if st.JobDir == "" || filepath.Dir(dir) != filepath.Clean(hookJobsRoot()) {
		return filepath.Join(hookJobsRoot(), "no-such-job", daemonSocket)
	}
	return filepath.Join(dir, daemonSocket)
}

// hookPrepare starts the job's daemon and answers the runner.
func hookPrepare(ctx context.Context, in hook.Input, stdout io.Writer) error {
	if in.ResponseFile == nil || *in.ResponseFile == "" {
		return usagef("prepare_job: no responseFile")
	}
	var args hook.PrepareArgs
	if err := json.Unmarshal(in.Args, &args); err != nil || args.Container == nil {
		return usagef("prepare_job: the job has no container: airlock needs container: in every job (ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER=true)")
	}
	args.Container.Registry = nil // never stored, never passed on
	for i := range args.Services {
		args.Services[i].Registry = nil
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := "hook-" + hex.EncodeToString(b)
	dir := filepath.Join(hookJobsRoot(), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("prepare_job: job directory: %w", err)
	}
	plan, _ := json.Marshal(args)
	if err := os.WriteFile(filepath.Join(dir, prepareInputFile), plan, 0o600); err != nil {
		return fmt.Errorf("prepare_job: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, daemonLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The daemon outlives this process: its own session, no terminal,
	// output to the job's log file.
	cmd := exec.Command("/proc/self/exe", dir)
	cmd.Args[0] = daemonArg0
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("prepare_job: start the job daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(prepareTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(filepath.Join(dir, daemonReady)); err == nil {
			break
		}
		select {
		case <-tick.C:
			continue
		case err := <-exited:
			msg, _ := os.ReadFile(filepath.Join(dir, daemonFailed))
			removeJob(dir)
			return fmt.Errorf("prepare_job: the job could not start: %s (%v)", strings.TrimSpace(string(msg)), err)
		case <-deadline.C:
			cmd.Process.Kill()
			<-exited
			removeJob(dir)
			return fmt.Errorf("prepare_job: the job daemon did not start within %v", prepareTimeout)
		case <-ctx.Done():
			cmd.Process.Kill()
			<-exited
			removeJob(dir)
			return ctx.Err()
		}
	}
	cmd.Process.Release()
	resp := hook.Response{
		State:   hook.State{Container: id, JobDir: dir},
		Context: hook.ResponseContext{Container: hook.ResponseContainer{ID: id, Network: "airlock", Ports: map[string]string{}}, Services: []hook.ResponseContainer{}},
	}
	if b, err := os.ReadFile(filepath.Join(dir, servicesFile)); err == nil {
		json.Unmarshal(b, &resp.Context.Services)
	}
	line, _ := json.Marshal(resp)
	f, err := os.OpenFile(*in.ResponseFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("prepare_job: response file: %w", err)
	}
	_, werr := f.Write(append(line, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	fmt.Fprintf(stdout, "airlock: job %s prepared in a gVisor sandbox\n", id)
	return werr
}

// hookCleanup ends the job through its daemon; without one (a failed
// prepare, a crash, a second cleanup) it removes what is left.
func hookCleanup(ctx context.Context, in hook.Input, stdout, stderr io.Writer) error {
	if in.State.JobDir == "" {
		return nil // prepare_job never answered: nothing was kept
	}
	sock := socketOf(in.State)
	dir := filepath.Dir(sock)
	// Bounded: a daemon that hangs must not hang the runner; what it
	// leaves is reaped below.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	pid := daemonPID(dir)
	_, err := hook.Call(cctx, sock, hook.Request{Op: "cleanup"}, stdout, stderr)
	var verdict *hook.DaemonError
	if err != nil && !errors.As(err, &verdict) && !isNoDaemon(err) {
		fmt.Fprintf(stderr, "airlock: cleanup: %v\n", err)
		// A daemon that did not answer is stopped (if that pid is still
		// our daemon); its sandbox is then a leftover like any other.
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// cleanup_job returns once the daemon is gone, not just answered.
	waitGone(pid, 10*time.Second)
	removeJob(dir)
	if verdict != nil {
		return verdict // the job failed: cleanup_job says so
	}
	return nil
}

// daemonPID is the pid of the job's daemon when it is running (the pid
// in its file, checked against the process's command line: a pid can be
// reused), or 0.
func daemonPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, daemonPIDFile))
	if err != nil {
		return 0
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
		return 0
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !strings.HasPrefix(string(cmdline), daemonArg0+"\x00"+dir) {
		return 0
	}
	return pid
}

// waitGone waits for a process to exit, up to timeout.
func waitGone(pid int, timeout time.Duration) {
	if pid <= 0 {
		return
	}
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		// A zombie is gone for our purposes.
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
			return
		}
	}
}

// removeJob reaps what a job left (its sandbox, if the daemon could not
// destroy it), tidies the workspace, and removes the job's directory.
func removeJob(dir string) {
	if filepath.Dir(dir) != filepath.Clean(hookJobsRoot()) {
		return
	}
	reaped, _ := gvisor.Reap(context.Background(), filepath.Join(dir, "state"))
	for _, r := range reaped {
		if r.Workspace != "" {
			workspacetidy.Tidy(r.Workspace, r.SandboxUID)
		}
	}
	os.RemoveAll(dir)
}

func isNoDaemon(err error) bool {
	return strings.Contains(err.Error(), "daemon is not running")
}

// hookDaemon is the job daemon (argv[0] daemonArg0): it opens the job's
// session and serves the hook calls until cleanup_job.
func hookDaemon(dir string) int {
	d := &hookJob{dir: dir}
	fail := func(err error) int {
		os.WriteFile(filepath.Join(dir, daemonFailed), []byte(err.Error()), 0o600)
		fmt.Fprintf(os.Stderr, "airlock hook daemon: %v\n", err)
		if d.checkID != 0 {
			// The check run does not stay "in progress".
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d.gh.CompleteCheck(ctx, d.owner, d.repo, d.checkID, github.Report{Conclusion: "failure", Title: "airlock: the job could not start", Summary: textsafe.Line(err.Error())})
		}
		return 1
	}
	signal.Ignore(syscall.SIGHUP)
	os.WriteFile(filepath.Join(dir, daemonPIDFile), []byte(fmt.Sprint(os.Getpid())), 0o600)
	b, err := os.ReadFile(filepath.Join(dir, prepareInputFile))
	if err != nil {
		return fail(err)
	}
	var args hook.PrepareArgs
	if err := json.Unmarshal(b, &args); err != nil || args.Container == nil {
		return fail(fmt.Errorf("prepare input: %v", err))
	}
	job, err := d.build(context.Background(), args)
	if err != nil {
		return fail(err)
	}
	logf := os.Stderr
	job.Log, job.Stdout, job.Stderr = logf, logf, logf
	s, err := runner.Open(context.Background(), job, runtimeName())
	if err != nil {
		s.Abandon()
		return fail(err)
	}
	d.session = s
	svcs, err := d.startServices(context.Background(), args.Services)
	if err != nil {
		s.Close()
		return fail(err)
	}
	if b, _ := json.Marshal(svcs); len(svcs) > 0 {
		os.WriteFile(filepath.Join(dir, servicesFile), b, 0o600)
	}
	sock := filepath.Join(dir, daemonSocket)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		s.Abandon()
		return fail(err)
	}
	os.Chmod(sock, 0o600)
	srv := hook.NewServer(d)
	// SIGTERM (the host shutting down) ends the job as cleanup would.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-term
		srv.Shutdown(os.Stderr, os.Stderr)
	}()
	// A job whose cleanup never comes (the runner died, or its state was
	// lost) ends by itself after its time.
	if d.jobTimeout > 0 {
		time.AfterFunc(d.jobTimeout+watchdogSlack, func() { srv.Shutdown(os.Stderr, os.Stderr) })
	}
	if err := os.WriteFile(filepath.Join(dir, daemonReady), []byte(s.ID()), 0o600); err != nil {
		s.Abandon()
		return fail(err)
	}
	srv.Serve(ln)
	<-srv.Done()
	// The job is over (cleanup_job, the watchdog or a signal): nothing of
	// it stays on the host but its attestation.
	os.RemoveAll(dir)
	return 0
}

// hookJob is the daemon's job: its session and what the attestation
// needs.
type hookJob struct {
	dir      string
	session  *runner.Session
	opts     runOptions
	mounts   hook.Mounts
	baseline bool
	// The GitHub API, when configured: the repository and the check run.
	gh          *github.Client
	owner, repo string
	checkID     int64
	jobTimeout  time.Duration
	// images are the policy's image directories, for Docker actions.
	images map[string]string
	// hosts is the job's /etc/hosts when it has services (their names).
	hosts []gvisor.File
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
}

// build turns the job container into a runner.Job under the effective
// policy: the runner's work directory as the workspace at /__w, its
// externals read-only, the GitHub home and workflow directories; never
// the Docker socket nor the workflow's own volumes.
func (d *hookJob) build(ctx context.Context, args hook.PrepareArgs) (runner.Job, error) {
	var job runner.Job
	c := args.Container
	d.mounts = hook.Mounts(c.SystemMountVolumes)
	work, ok := d.mounts.Host(containerWork)
	if !ok {
		return job, fmt.Errorf("the runner gave no mount for %s", containerWork)
	}
	if len(c.UserMountVolumes) > 0 {
		fmt.Fprintf(os.Stderr, "airlock: the job's own volumes are not mounted (%d): a workflow may not mount host paths into the sandbox\n", len(c.UserMountVolumes))
	}
	cfg := gvisor.Config{Workspace: work, WorkspaceMount: containerWork, StateRoot: filepath.Join(d.dir, "state"), Limits: gvisor.DefaultLimits()}
	for _, m := range d.mounts.Sorted() {
		t := path.Clean(m.Target)
		switch {
		case t == containerWork, strings.HasPrefix(t, containerWork+"/"):
			if h, _ := d.mounts.Host(path.Dir(t)); h != "" && path.Join(h, path.Base(t)) == path.Clean(m.Source) {
				continue // already inside the workspace mount
			}
			if t != containerWork {
				return job, fmt.Errorf("mount %s is not below the runner's work directory; airlock needs it there", t)
			}
		case strings.Contains(t, "docker.sock"):
			continue // never
		default:
			cfg.Mounts = append(cfg.Mounts, gvisor.Mount{Source: m.Source, Destination: t, ReadOnly: m.ReadOnly})
		}
	}
	job.Name = "job"
	d.opts.meta.ContainerImage = c.Image
	for k, v := range c.Env {
		job.Env = append(job.Env, k+"="+v)
	}
	// The policy: the organisation's, and the repository's at the pull
	// request's base commit when the workspace has it.
	srcs, err := loadOrgPolicy(os.Getenv(orgDirEnv))
	if err != nil {
		return job, err
	}
	info := &runner.PolicyInfo{}
	repoDir := ""
	if rel, ok := strings.CutPrefix(path.Clean(c.WorkingDirectory), containerWork+"/"); ok {
		repoDir = rel
	}
	if d.gh, err = githubFromEnv(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: GitHub API not used: %v\n", err)
	}
	var event *policies.PullRequest
	if ev, ok := d.mounts.Host(containerEvent); ok {
		if payload, err := files.ReadCapped(ev, policies.MaxEventSize); err == nil {
			if p, err := policies.ParsePullRequest(payload); err == nil {
				pr := p
				event = &pr
				d.opts.meta.PullRequest, d.opts.meta.Author, d.opts.meta.Event = pr.Number, pr.Author, "pull_request"
				d.opts.meta.BaseSHA, d.opts.meta.HeadSHA = pr.BaseSHA, pr.HeadSHA
				var merge string
				d.owner, d.repo, merge = eventRefs(payload)
				d.commits = []string{pr.HeadSHA}
				if merge != "" {
					d.commits = append(d.commits, merge)
				}
				if d.owner != "" {
					d.opts.meta.Repository = "https://github.com/" + d.owner + "/" + d.repo
				}
				src, err := d.repoPolicy(ctx, pr.BaseSHA)
				switch {
				case err != nil:
					fmt.Fprintf(os.Stderr, "airlock: the repository policy at %.12s could not be read (%v): the organisation policy applies alone\n", pr.BaseSHA, err)
				case src != nil:
					srcs = append(srcs, *src)
				}
			}
		}
	}
	eff, err := policies.Load(ctx, srcs)
	if err != nil {
		return job, err
	}
	info.Digest, info.Sources = eff.Digest, eff.Sources
	if event != nil {
		// Recorded; under the hook every job is sandboxed whatever the
		// detection says (the runner has no other way to run it).
		det := policies.Decide(eff.Policy.Agents, *event)
		info.Agent = &det
		fmt.Fprintf(os.Stderr, "airlock: pull request #%d: %s\n", event.Number, det.Reason)
	}
	job.Policy = info
	pcfg, err := runner.SandboxFromPolicy(eff.Policy.Sandbox)
	if err != nil {
		return job, err
	}
	if err := checkServices(eff.Policy.Sandbox, args.Services); err != nil {
		return job, err
	}
	if len(args.Services) > 0 {
		d.hosts = []gvisor.File{hostsFile(args.Services)}
		cfg.Files = append(cfg.Files, d.hosts...)
	}
	cfg.Limits, cfg.ExtraMasks, cfg.Capabilities, cfg.User = pcfg.Limits, pcfg.ExtraMasks, pcfg.Capabilities, pcfg.User
	cfg.Mounts = append(cfg.Mounts, pcfg.Mounts...)
	// The job container's image runs on the directory the policy maps it
	// to; any other image is recorded but not run (there is no image
	// store): the job gets the policy's root.
	cfg.RootFS = pcfg.RootFS
	if dir, ok := policies.ImageRoot(eff.Policy.Sandbox.Images, c.Image); ok {
		img, err := runner.OpenImage(dir)
		if err != nil {
			return job, fmt.Errorf("the job's image %q: %w", c.Image, err)
		}
		// The image's environment first: the job's own wins, as in
		// Docker.
		cfg.RootFS = img.RootFS
		job.Env = append(append([]string{}, img.Env...), job.Env...)
	} else if c.Image != "" {
		fmt.Fprintf(os.Stderr, "airlock: the job's image %q is not mapped to a root filesystem (sandbox.images): the job runs on sandbox.rootfs (%s)\n", c.Image, eff.Policy.Sandbox.RootFS)
	}
	d.images = eff.Policy.Sandbox.Images
	cfg.ExtraMasks = append(cfg.ExtraMasks, d.dir)
	// Policy masks name paths as the job sees them (below /__w: the
	// workspace's); Docker actions' volumes are host directories.
	for _, m := range pcfg.ExtraMasks {
		if h, ok := d.mounts.Host(m); ok {
			m = h
		}
		d.hostMasks = append(d.hostMasks, m)
	}
	d.hostMasks = append(d.hostMasks, d.dir)
	if job.Egress, err = runner.EgressFromPolicy(eff.Policy.Egress, os.LookupEnv); err != nil {
		return job, err
	}
	for _, s := range args.Services {
		job.Egress.LocalNames = append(job.Egress.LocalNames, s.ContextName)
	}
	set, err := trust.NewSet(eff.Policy.Trust)
	if err != nil {
		return job, err
	}
	job.Trust = &runner.Trust{Set: set, Deferred: true, Dir: repoDir, NoHooks: true}
	if d.gh != nil && d.owner != "" && len(d.commits) > 0 {
		job.Trust.FromCommit = func(root string, first, after *trust.Snapshot) (*trust.Snapshot, string) {
			return d.commitBaseline(root, set, first, after)
		}
	}
	switch {
	case d.gh != nil && d.owner != "" && d.opts.meta.PullRequest > 0:
		job.Trust.Authored, job.Trust.AuthoredError = authoredFromAPI(ctx, d.gh, d.owner, d.repo, d.opts.meta.BaseSHA, d.opts.meta.HeadSHA, set)
	case d.opts.meta.PullRequest > 0:
		job.Trust.AuthoredError = "authored diff: not taken: it needs the GitHub API (AIRLOCK_GITHUB_TOKEN or a GitHub App)"
	}
	d.jobTimeout = cfg.Limits.JobTimeout
	// What the attestation needs.
	d.opts.workspace = filepath.Join(work, repoDir)
	d.opts.stateDir = filepath.Join(d.dir, "state")
	// Attestations go where the job cannot reach (a symlink planted in
	// the runner's temp directory would make root write elsewhere).
	d.opts.attestDir = filepath.Join(hookJobsRoot(), "attestations")
	// The runner reads each call's response (and the state it saves) from
	// its temp directory: the job must not be able to write those.
	if tmp, ok := d.mounts.Host(containerTemp); ok {
		if err := os.MkdirAll(filepath.Join(tmp, responsesDir), 0o755); err == nil {
			cfg.ExtraMasks = append(cfg.ExtraMasks, path.Join(containerTemp, responsesDir))
			d.hostMasks = append(d.hostMasks, filepath.Join(tmp, responsesDir))
		}
	}
	d.pinMasks(work)
	d.opts.attestKey = os.Getenv(keyEnv)
	job.Sandbox = cfg
	if d.gh != nil && d.owner != "" && d.opts.meta.HeadSHA != "" {
		if d.checkID, err = d.gh.StartCheck(ctx, d.owner, d.repo, d.opts.meta.HeadSHA); err != nil {
			fmt.Fprintf(os.Stderr, "airlock: check run not created: %v\n", err)
		}
	}
	d.opts.policyKey = eff.Org.Attest.Key
	return job, nil
}

// repoPolicy reads .github/airlock.cue at the base commit through the
// GitHub API. Never from the workspace's git objects: on a self-hosted
// runner they are what earlier jobs left, and a job can rewrite a loose
// object (git does not re-hash what it reads).
func (d *hookJob) repoPolicy(ctx context.Context, base string) (*policies.Source, error) {
	if d.gh == nil || d.owner == "" {
		return nil, errors.New("no GitHub API is configured (AIRLOCK_GITHUB_TOKEN or a GitHub App)")
	}
	data, err := d.gh.FileAtRef(ctx, d.owner, d.repo, policies.RepoPolicyPath, base)
	if err != nil || data == nil {
		return nil, err
	}
	return &policies.Source{Kind: policies.KindRepo, Path: policies.RepoPolicyPath, Commit: base, Data: data}, nil
}

// eventRefs are the pull request's base repository and its test merge
// commit from the event.
func eventRefs(payload []byte) (owner, repo, merge string) {
	var ev struct {
		PullRequest struct {
			MergeCommitSHA string `json:"merge_commit_sha"`
			Base           struct {
				Repo struct {
					FullName string `json:"full_name"`
				} `json:"repo"`
			} `json:"base"`
		} `json:"pull_request"`
	}
	json.Unmarshal(payload, &ev)
	merge = ev.PullRequest.MergeCommitSHA
	owner, repo, _ = strings.Cut(ev.PullRequest.Base.Repo.FullName, "/")
	if repo == "" || strings.ContainsAny(repo, "/ ") {
		return "", "", merge
	}
	return owner, repo, merge
}

// Step runs one runner step: the entry point and its arguments, with the
// step's environment and PATH.
func (d *hookJob) Step(ctx context.Context, a hook.ScriptArgs, stdout, stderr io.Writer) (int, error) {
	d.takeBaseline(stderr)
	if uploadsArtifacts(a) {
		d.interimAttestation(ctx, stderr)
	}
	if a.EntryPoint == "" {
		return 1, errors.New("run_script_step: no entryPoint")
	}
	env := map[string]string{}
	for k, v := range a.Env {
		env[k] = v
	}
	p := safePath
	if len(a.PrependPath) > 0 {
		p = strings.Join(a.PrependPath, ":") + ":" + p
	}
	env["PATH"] = p
	return d.runStep(ctx, runner.StepSpec{
		Name: path.Base(a.EntryPoint), Command: append([]string{a.EntryPoint}, a.EntryPointArgs...),
		Env: env, WorkingDirectory: a.WorkingDirectory,
	}, stdout, stderr)
}

// takeBaseline takes the trust baseline before the first step that finds
// the repository checked out.
func (d *hookJob) takeBaseline(stderr io.Writer) {
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
func (d *hookJob) runStep(ctx context.Context, spec runner.StepSpec, stdout, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.session.Context(), cancel)
	defer stop()
	out := d.session.Step(ctx, spec, stdout, stderr)
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
func (d *hookJob) Cleanup(ctx context.Context, stdout, stderr io.Writer) error {
	if !d.baseline {
		// Not even one step: nothing to compare against.
		d.session.TrustBaseline()
	}
	d.opts.resolveSubject(ctx)
	res := d.session.Close()
	d.pinWorkspace()
	d.serviceLog.writeTo(stderr)
	att := writeAttestation(ctx, res, &d.opts, stderr)
	runner.WriteSummary(stderr, res)
	if res.Trust != nil {
		res.Trust.WriteAnnotations(stdout)
	}
	if att.Bundle != "" {
		fmt.Fprintf(stdout, "airlock: attestation %s\n", att.Bundle)
	}
	if d.checkID != 0 {
		if err := d.gh.CompleteCheck(ctx, d.owner, d.repo, d.checkID, checkReport(res, att)); err != nil {
			// Reported, never failing the job.
			fmt.Fprintf(stderr, "airlock: check run not completed: %v\n", err)
		}
	}
	if !res.Passed {
		return fmt.Errorf("the job failed: %s", strings.Join(attestReasons(res), "; "))
	}
	return nil
}

// maxCheckBundle is the largest attestation bundle put in the check run
// (whose text holds 65,535 characters).
const maxCheckBundle = 48 << 10

// checkReport turns a job's result into its check run.
func checkReport(res runner.Result, att *attestationInfo) github.Report {
	r := github.Report{Conclusion: "success", Title: "airlock: passed"}
	if !res.Passed {
		r.Conclusion, r.Title = "failure", "airlock: failed"
	}
	var sum strings.Builder
	for _, s := range res.Steps {
		fmt.Fprintf(&sum, "- step `%s`: %s (exit %d)\n", strings.ReplaceAll(s.Name, "`", "'"), s.Status, s.ExitCode)
	}
	if res.Trust != nil {
		sum.WriteString("\n" + res.Trust.Markdown())
		for _, f := range res.Trust.Findings {
			level := map[string]string{"error": "failure", "warning": "warning"}[f.Severity]
			if level == "" {
				level = "notice"
			}
			r.Annotations = append(r.Annotations, github.Annotation{Path: f.Path, Line: f.Line, Level: level, Title: "airlock trust: " + f.Category, Message: f.Reason})
		}
	}
	r.Summary = sum.String()
	var text strings.Builder
	if e := res.Egress; e != nil {
		fmt.Fprintf(&text, "Egress: %d allowed, %d denied.\n", e.Allowed, e.Denied)
	}
	if att != nil && att.Bundle != "" {
		if b, err := os.ReadFile(att.Bundle); err == nil {
			fmt.Fprintf(&text, "Attestation: `%s`, sha256 `%x`.\n", filepath.Base(att.Bundle), sha256.Sum256(b))
			// The hook's cleanup runs after the job's last step, so no
			// step can upload the bundle: a small one is published here,
			// for `airlock verify` or cosign anywhere.
			if len(b) <= maxCheckBundle && json.Valid(b) && !bytes.Contains(b, []byte("`")) {
				fmt.Fprintf(&text, "\n<details><summary>Attestation bundle (Sigstore)</summary>\n\n```json\n%s\n```\n</details>\n", b)
			}
		}
	}
	r.Text = text.String()
	return r
}

func attestReasons(res runner.Result) []string {
	var out []string
	for _, s := range res.Steps {
		if s.Status != runner.StatusPassed {
			out = append(out, fmt.Sprintf("step %s %s", s.Name, s.Status))
		}
	}
	if res.Trust != nil && res.Trust.Failed {
		out = append(out, res.Trust.Reason)
	}
	return out
}
