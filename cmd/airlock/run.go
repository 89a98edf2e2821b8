package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/report"
)

// runOptions are the flags of `airlock run`.
type runOptions struct {
	workspace      string
	workspaceMount string
	rootfs, image  string
	platform       string
	stepsFile      string
	jobName        string
	env            []string
	user           string
	caps           []string
	masks          []string
	stateDir       string
	limits         runner.Limits
	asJSON         bool
	resultFile     string
	runscFlags     []string
	// Policy mode.
	orgDir        string
	base          string
	head          string
	eventFile     string
	jobFromPolicy string
	// Attestation.
	attestDir          string
	retention          report.Retention
	attestKey          string
	attestPasswordFile string
	attestStores       []string
	attestStoreAuth    string
}

func (o *runOptions) addFlags(f *pflag.FlagSet) {
	d := runner.DefaultLimits()
	f.StringVarP(&o.workspace, "workspace", "w", ".", "host directory mounted read-write in the sandbox")
	f.StringVar(&o.workspaceMount, "workspace-mount", runner.DefaultWorkspaceMount, "where the workspace appears inside the sandbox")
	f.StringVar(&o.rootfs, "rootfs", "", "directory to use as root filesystem (an unpacked image); default: the host's root, read-only")
	f.StringVar(&o.image, "image", "", "image to run the job on (REF, e.g. node:20 or ghcr.io/org/img@sha256:...), pulled on the host under the policy's images section, unless sandbox.images maps it")
	f.StringVar(&o.platform, "platform", "auto", "gVisor platform: auto (kvm where a probe sandbox boots on it, else systrap), systrap or kvm (see airlock doctor)")
	f.StringVar(&o.stepsFile, "steps", "", "YAML or JSON file with the job's steps (name, run, env, working-directory, timeout)")
	f.StringVar(&o.jobName, "job-name", "", "name of the job in output and results")
	f.StringArrayVarP(&o.env, "env", "e", nil, "KEY=VALUE to set in the sandbox, or KEY to pass the host's value (repeatable)")
	f.StringVarP(&o.user, "user", "u", "", "UID[:GID] to run as inside the sandbox (default: the workspace owner, or 1000 if root owns it)")
	f.StringArrayVar(&o.caps, "cap", nil, "capability to grant the workload, e.g. CAP_NET_BIND_SERVICE (repeatable; default none)")
	f.StringArrayVar(&o.masks, "mask", nil, "extra host path to hide inside the sandbox (repeatable)")
	f.StringVar(&o.stateDir, "state-dir", runner.DefaultStateRoot, "directory for airlock's per-job state")
	l := &o.limits
	f.DurationVar(&l.JobTimeout, "timeout", d.JobTimeout, "wall-clock limit for the whole job (0: none)")
	f.DurationVar(&l.StepTimeout, "step-timeout", d.StepTimeout, "wall-clock limit per step (0: none)")
	f.Var(policies.NewSizeFlag(&l.Memory, d.Memory), "memory", "memory limit of the sandbox (e.g. 512M, 4G; 0: none)")
	f.IntVar(&l.Pids, "pids", d.Pids, "most processes and threads in the sandbox (0: none)")
	f.Float64Var(&l.CPUs, "cpus", d.CPUs, "CPU quota in cores, e.g. 1.5 (0: none)")
	f.Var(policies.NewSizeFlag(&l.Overlay, d.Overlay), "overlay-size", "size limit of the writable layer over the root filesystem")
	f.Var(policies.NewSizeFlag(&l.Tmp, d.Tmp), "tmp-size", "size limit of /tmp")
	f.Var(policies.NewSizeFlag(&l.Output, d.Output), "output-limit", "cap on stdout+stderr captured per step")
	f.Var(policies.NewSizeFlag(&l.Workspace, d.Workspace), "workspace-size", "most the job may write into the workspace, one file per 16K of it (past it: ENOSPC; 0: none)")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON on stdout (step output goes to stderr)")
	f.StringVar(&o.resultFile, "result", "", "also write the JSON result to this file")
	f.StringVar(&o.orgDir, "org", "", "organisation policy directory (default "+policies.DefaultOrgDir+" when it exists); turns on policy mode")
	f.StringVar(&o.base, "base", "", "pull request base commit: the workspace's "+policies.RepoPolicyPath+" is read from it")
	f.StringVar(&o.head, "head", "", "pull request head commit: report whether it edits the policy")
	f.StringVar(&o.eventFile, "event", "", "pull request event payload (JSON, as in GITHUB_EVENT_PATH): agent detection, base and head")
	f.StringVar(&o.jobFromPolicy, "job", "", "run the policy's steps.NAME job")
	f.StringVar(&o.attestDir, "attest-dir", "", "where the signed attestation goes (default STATE-DIR/attestations)")
	f.IntVar(&o.retention.Keep, "keep-attestations", report.DefaultRetention.Keep, "how many jobs' attestations STATE-DIR/attestations keeps (0: all); not applied to --attest-dir")
	f.DurationVar(&o.retention.MaxAge, "attestation-max-age", report.DefaultRetention.MaxAge, "how long STATE-DIR/attestations keeps a job's attestation (0: for ever)")
	f.StringVar(&o.attestKey, "attest-key", "", "signing key: a key file (PEM, ECDSA P-256 or Ed25519; encrypted ones take the password from "+report.PasswordEnv+") or a KMS URI; default the policy's attest.key")
	f.StringVar(&o.attestPasswordFile, "attest-key-password-file", "", "file with the signing key's password, when "+report.PasswordEnv+" is not set")
	f.StringArrayVar(&o.attestStores, "attest-store", nil, "also keep the signed bundles in this store before the job ends (oci://REGISTRY/REPOSITORY or file:///PATH; ?required=false: best-effort), beside the policy's attest.store (repeatable)")
	f.StringVar(&o.attestStoreAuth, "attest-store-auth", "", "Docker config.json holding the attestation stores' registry credentials (hidden from the job)")
	f.StringArrayVar(&o.runscFlags, "runsc-flag", nil, "extra global runsc flag, e.g. --runsc-flag=--directfs=false (experts)")
	f.MarkHidden("runsc-flag")
}

func newRunCmd(code *int) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [flags] [-- CMD ARGS...]",
		Short: "Run a command or a steps file as a job inside a gVisor sandbox",
		Long: `Run executes a job inside a fresh gVisor sandbox and destroys the sandbox
afterwards, whatever happens. Either give a command after --, run as one
step in the workspace, or --steps FILE with a list of steps.`,
		Example: `  airlock run -- make test
  airlock run --workspace ./repo --steps ci.yaml --json > result.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			plan, err := o.plan(cmd.Context(), cmd.Flags(), args, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			c, err := runJob(cmd.Context(), plan, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			*code = c
			return err
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// plan turns the flags into the job's plan: under the effective policy
// when there is one (any policy flag, or an organisation policy on the
// host), where the flags may only tighten it.
func (o *runOptions) plan(ctx context.Context, flags *pflag.FlagSet, args []string, stderr io.Writer) (runner.Plan, error) {
	in, err := o.inputs(flags, args)
	if err != nil {
		return runner.Plan{}, err
	}
	var eff *policies.Effective
	var pr runner.PullRequest
	if o.orgDir != "" || o.base != "" || o.eventFile != "" || o.jobFromPolicy != "" || policies.HostHasOrgPolicy() {
		if eff, pr, err = runner.LocalPolicy(ctx, o.workspace, o.orgDir, o.eventFile, o.base, o.head); err != nil {
			return runner.Plan{}, err
		}
	}
	plan, err := runner.NewPlan(eff, pr, in)
	if err != nil {
		return plan, err
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(stderr, "airlock: %s\n", n)
	}
	plan.Attest.Dir, plan.Attest.Repository = o.attestDir, o.workspace
	if plan.Attest.Dir == "" {
		plan.Attest.Dir = filepath.Join(o.stateDir, "attestations")
	}
	plan.Attest.Meta.AirlockVersion, plan.Attest.Meta.AirlockCommit = version, commit
	return plan, nil
}

// inputs turns the flags into the job's inputs.
func (o *runOptions) inputs(flags *pflag.FlagSet, args []string) (runner.Inputs, error) {
	in := runner.Inputs{
		Name: o.jobName, PolicyJob: o.jobFromPolicy, Workspace: o.workspace, StateRoot: o.stateDir, Image: o.image,
		Masks: o.masks, RunscFlags: o.runscFlags, RunscBuildID: runscBuildID, AttestKey: o.attestKey, AttestPasswordFile: o.attestPasswordFile, AttestStoreAuth: o.attestStoreAuth,
		RunnerRoot: runner.FindRunnerRoot(os.Getpid()), GitHubServerURL: os.Getenv("GITHUB_SERVER_URL"), GitHubAPIURL: os.Getenv("GITHUB_API_URL"),
		Requests: runner.Requests{RootFS: o.rootfs, Platform: o.platform, WorkspaceMount: o.workspaceMount, Capabilities: o.caps, Set: map[input.Name]bool{}},
	}
	var err error
	if in.Steps, err = runner.ChooseSteps(o.stepsFile, args, o.jobFromPolicy); err != nil {
		return in, err
	}
	if in.AttestStores, err = storeref.ParseList(strings.Join(o.attestStores, " ")); err != nil {
		return in, usageError{err}
	}
	if !slices.Contains(runner.Platforms, o.platform) {
		return in, usagef("--platform %q: use auto, systrap or kvm", o.platform)
	}
	if l := o.limits; l.Pids < 0 || l.CPUs < 0 || l.JobTimeout < 0 || l.StepTimeout < 0 {
		return in, usagef("limits must not be negative")
	}
	in.Requests.Limits = o.limits
	for _, n := range runner.RequestInputs() {
		in.Requests.Set[n] = flags.Changed(strings.TrimPrefix(flagSpelling().Of(n), "--"))
	}
	if o.user != "" {
		u, err := runner.ParseUser(o.user)
		if err != nil {
			return in, usagef("--user %v", err)
		}
		in.Requests.User = &u
	}
	in.Env, err = runner.PassEnv(o.env, os.LookupEnv)
	return in, err
}

// runJob runs the job with SIGINT/SIGTERM turned into cancellation, prints
// the summary and the result, and returns the exit code.
func runJob(ctx context.Context, plan runner.Plan, o *runOptions, stdout, stderr io.Writer) (int, error) {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	job := plan.Job
	job.Stdout, job.Stderr, job.Log = stdout, stderr, stderr
	if o.asJSON {
		job.Stdout = stderr
	}
	// The subject (git) resolves while the sandbox starts, and before
	// the job's first step, which could move the repository's HEAD.
	// Once the sandbox is up, the stores get the commit's share of the
	// push while the steps run (report.PrepareStores).
	resolved := plan.Attest.ResolveSubjectMeanwhile(ctx)
	stopPreparing := func() {}
	job.BeforeSteps = func() {
		resolved()
		stopPreparing = report.PrepareStores(ctx, &plan.Attest)
	}
	resume := report.PauseWorkflowCommands(stdout)
	res, err := runner.Run(ctx, job, runtimeName())
	resume()
	resolved()
	stopPreparing()
	if err != nil && res.Sandbox.ID == "" {
		// The sandbox never started: nothing to summarise.
		return 0, err
	}
	// airlock's own directory keeps a bounded past; a directory the user
	// named is theirs.
	keep := &o.retention
	if o.attestDir != "" {
		keep = nil
	}
	out, werr := report.Conclude(ctx, res, &plan.Attest, keep, report.ResultOutput{File: o.resultFile, JSON: o.asJSON}, stdout, stderr)
	if werr != nil {
		return exitInternal, werr
	}
	if fails := out.Attestation.StoreFailures(); len(fails) > 0 && res.ExitCode == 0 {
		// The job's record is not kept where its reviewers look.
		fmt.Fprintf(stderr, "airlock: the job fails: %s\n", strings.Join(fails, "; "))
		return exitCantCreate, nil
	}
	if ctx.Err() != nil {
		return exitInterrupted, nil
	}
	if err != nil {
		return 0, err
	}
	return res.ExitCode, nil
}
