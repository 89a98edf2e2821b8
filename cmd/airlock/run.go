package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
)

// runOptions are the flags of `airlock run`.
type runOptions struct {
	workspace      string
	workspaceMount string
	rootfs         string
	stepsFile      string
	jobName        string
	env            []string
	user           string
	caps           []string
	masks          []string
	stateDir       string
	jobTimeout     time.Duration
	stepTimeout    time.Duration
	memory         string
	pids           int
	cpus           float64
	overlaySize    string
	tmpSize        string
	outputLimit    string
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
	attestKey          string
	attestPasswordFile string
	policyKey          string   // attest.key of the organisation policy
	attestSubjects     []string // attest.subjects of the policy
	// artifactsDir, when set, is where the artifact subjects are read
	// instead of workspace (the hook's repository, opened safely).
	artifactsDir    string
	meta            attest.Meta // what the policy mode learnt of the pull request
	headWasImplicit bool        // no --head: the subject is the workspace's HEAD
	subjectNotes    []string    // trouble resolving the subject, for the verdict
}

func (o *runOptions) addFlags(f *pflag.FlagSet) {
	d := gvisor.DefaultLimits()
	f.StringVarP(&o.workspace, "workspace", "w", ".", "host directory mounted read-write in the sandbox")
	f.StringVar(&o.workspaceMount, "workspace-mount", gvisor.DefaultWorkspaceMount, "where the workspace appears inside the sandbox")
	f.StringVar(&o.rootfs, "rootfs", "", "directory to use as root filesystem (an unpacked image); default: the host's root, read-only")
	f.StringVar(&o.stepsFile, "steps", "", "YAML or JSON file with the job's steps (name, run, env, working-directory, timeout)")
	f.StringVar(&o.jobName, "job-name", "", "name of the job in output and results")
	f.StringArrayVarP(&o.env, "env", "e", nil, "KEY=VALUE to set in the sandbox, or KEY to pass the host's value (repeatable)")
	f.StringVarP(&o.user, "user", "u", "", "UID[:GID] to run as inside the sandbox (default: the workspace owner, or 1000 if root owns it)")
	f.StringArrayVar(&o.caps, "cap", nil, "capability to grant the workload, e.g. CAP_NET_BIND_SERVICE (repeatable; default none)")
	f.StringArrayVar(&o.masks, "mask", nil, "extra host path to hide inside the sandbox (repeatable)")
	f.StringVar(&o.stateDir, "state-dir", gvisor.DefaultStateRoot, "directory for airlock's per-job state")
	f.DurationVar(&o.jobTimeout, "timeout", d.JobTimeout, "wall-clock limit for the whole job (0: none)")
	f.DurationVar(&o.stepTimeout, "step-timeout", d.StepTimeout, "wall-clock limit per step (0: none)")
	f.StringVar(&o.memory, "memory", sizeString(d.Memory), "memory limit of the sandbox (e.g. 512M, 4G; 0: none)")
	f.IntVar(&o.pids, "pids", d.Pids, "most processes and threads in the sandbox (0: none)")
	f.Float64Var(&o.cpus, "cpus", d.CPUs, "CPU quota in cores, e.g. 1.5 (0: none)")
	f.StringVar(&o.overlaySize, "overlay-size", sizeString(d.Overlay), "size limit of the writable layer over the root filesystem")
	f.StringVar(&o.tmpSize, "tmp-size", sizeString(d.Tmp), "size limit of /tmp")
	f.StringVar(&o.outputLimit, "output-limit", sizeString(d.Output), "cap on stdout+stderr captured per step")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON on stdout (step output goes to stderr)")
	f.StringVar(&o.resultFile, "result", "", "also write the JSON result to this file")
	f.StringVar(&o.orgDir, "org", "", "organisation policy directory (default "+defaultOrgPolicyDir+" when it exists); turns on policy mode")
	f.StringVar(&o.base, "base", "", "pull request base commit: the workspace's "+policies.RepoPolicyPath+" is read from it")
	f.StringVar(&o.head, "head", "", "pull request head commit: report whether it edits the policy")
	f.StringVar(&o.eventFile, "event", "", "pull request event payload (JSON, as in GITHUB_EVENT_PATH): agent detection, base and head")
	f.StringVar(&o.jobFromPolicy, "job", "", "run the policy's steps.NAME job")
	f.StringVar(&o.attestDir, "attest-dir", "", "where the signed attestation goes (default STATE-DIR/attestations)")
	f.StringVar(&o.attestKey, "attest-key", "", "signing key: a key file (PEM, ECDSA P-256 or Ed25519; encrypted ones take the password from "+passwordEnv+") or a KMS URI; default the policy's attest.key")
	f.StringVar(&o.attestPasswordFile, "attest-key-password-file", "", "file with the signing key's password, when "+passwordEnv+" is not set")
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
			job, err := o.job(args)
			if err != nil {
				return err
			}
			if err := o.applyPolicy(cmd.Context(), cmd.Flags(), &job); err != nil {
				return err
			}
			c, err := runJob(cmd.Context(), job, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			*code = c
			return err
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// job turns the flags into a runner.Job.
func (o *runOptions) job(args []string) (runner.Job, error) {
	var job runner.Job
	switch {
	case o.stepsFile != "" && len(args) > 0, o.jobFromPolicy != "" && (o.stepsFile != "" || len(args) > 0):
		return job, usagef("give one of --steps FILE, --job NAME or a command after --")
	case o.stepsFile != "":
		steps, err := runner.LoadSteps(o.stepsFile)
		if err != nil {
			return job, usageError{err}
		}
		job.Steps = steps
	case len(args) > 0:
		job.Steps = []runner.StepSpec{{Name: "run", Run: shellJoin(args)}}
	case o.jobFromPolicy != "":
		// Steps come from the policy, in applyPolicy.
	default:
		return job, usagef("nothing to run: give a command after -- (airlock run -- make test) or --steps FILE")
	}
	job.Name = o.jobName
	limits, err := o.limits()
	if err != nil {
		return job, err
	}
	cfg := gvisor.Config{
		StateRoot:      o.stateDir,
		RootFS:         o.rootfs,
		Workspace:      o.workspace,
		WorkspaceMount: o.workspaceMount,
		ExtraMasks:     o.masks,
		Capabilities:   o.caps,
		Limits:         limits,
		RunscFlags:     o.runscFlags,
	}
	if o.user != "" {
		u, err := parseUser(o.user)
		if err != nil {
			return job, err
		}
		cfg.User = &u
	}
	job.Sandbox = cfg
	for _, e := range o.env {
		if k, _, ok := strings.Cut(e, "="); ok {
			if k == "" {
				return job, usagef("--env %q: missing variable name", e)
			}
			job.Env = append(job.Env, e)
			continue
		}
		// KEY alone passes the host's value: the only way host variables
		// reach the sandbox is by being named here.
		if v, ok := os.LookupEnv(e); ok {
			job.Env = append(job.Env, e+"="+v)
		}
	}
	return job, nil
}

func (o *runOptions) limits() (gvisor.Limits, error) {
	l := gvisor.Limits{JobTimeout: o.jobTimeout, StepTimeout: o.stepTimeout, Pids: o.pids, CPUs: o.cpus}
	if o.pids < 0 || o.cpus < 0 || o.jobTimeout < 0 || o.stepTimeout < 0 {
		return l, usagef("limits must not be negative")
	}
	for _, s := range []struct {
		flag, val string
		dst       *int64
	}{
		{"--memory", o.memory, &l.Memory},
		{"--overlay-size", o.overlaySize, &l.Overlay},
		{"--tmp-size", o.tmpSize, &l.Tmp},
		{"--output-limit", o.outputLimit, &l.Output},
	} {
		n, err := policies.ParseSize(s.val)
		if err != nil {
			return l, usagef("%s %q: %v", s.flag, s.val, err)
		}
		*s.dst = n
	}
	return l, nil
}

// runJob runs the job with SIGINT/SIGTERM turned into cancellation, prints
// the summary and the result, and returns the exit code.
func runJob(ctx context.Context, job runner.Job, o *runOptions, stdout, stderr io.Writer) (int, error) {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	job.Stdout, job.Stderr, job.Log = stdout, stderr, stderr
	if o.asJSON {
		job.Stdout = stderr
	}
	// Under GitHub Actions the job's own output must not issue workflow
	// commands (a fake "::stop-commands::" would silence airlock's
	// annotations, "::add-mask::" hide evidence): they are off while the
	// job runs, with a token the job cannot guess.
	o.resolveSubject(ctx)
	resume := pauseWorkflowCommands(stdout)
	res, err := runner.Run(ctx, job, runtimeName())
	resume()
	if err != nil && res.Sandbox.ID == "" {
		// The sandbox never started: nothing to summarise.
		return 0, err
	}
	att := writeAttestation(ctx, res, o, stderr)
	runner.WriteSummary(stderr, res)
	if res.Trust != nil {
		publishTrust(res.Trust, stdout, stderr)
	}
	out := resultWithAttestation{Result: res, Attestation: att}
	if o.resultFile != "" {
		if werr := writeResult(o.resultFile, out); werr != nil {
			fmt.Fprintf(stderr, "airlock: %v\n", werr)
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return exitInternal, fmt.Errorf("write JSON result: %w", err)
		}
	}
	if ctx.Err() != nil {
		return exitInterrupted, nil
	}
	if err != nil {
		return 0, err
	}
	return res.ExitCode, nil
}

// resultWithAttestation is the JSON result: the job's, and where its
// attestation went.
type resultWithAttestation struct {
	runner.Result
	Attestation *attestationInfo `json:"attestation"`
}

func writeResult(path string, res resultWithAttestation) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// shellJoin quotes args for sh -c so that `airlock run -- a "b c"` runs
// exactly a with one argument "b c".
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return "exec " + strings.Join(q, " ")
}

func parseUser(s string) (gvisor.User, error) {
	us, gs, hasGID := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return gvisor.User{}, usagef("--user %q: want a numeric UID or UID:GID", s)
	}
	gid := uid
	if hasGID {
		if gid, err = strconv.ParseUint(gs, 10, 32); err != nil {
			return gvisor.User{}, usagef("--user %q: want a numeric UID or UID:GID", s)
		}
	}
	return gvisor.User{UID: uint32(uid), GID: uint32(gid)}, nil
}

func sizeString(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	}
	return strconv.FormatInt(n, 10)
}
