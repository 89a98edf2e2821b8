package runner

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/trust"
)

// A job reaches airlock through one of its doors: `airlock run` (and the
// composite action, which calls it) or the runner hook. Every door turns
// what it knows into the same three things and calls NewPlan: the
// effective policy, the pull request's facts, and the door's own inputs
// (where the workspace is, what the user asked for). Where the doors
// differ, the difference is an input field here, not a second copy of
// the policy-to-job mapping.

// PullRequest is what a door knows of the pull request a job runs for.
type PullRequest struct {
	// Event is the pull request event; nil when the job has none.
	Event *policies.PullRequest
	// Repository names the repository in the attestation (a URL); empty:
	// GITHUB_REPOSITORY when the job runs under GitHub Actions.
	Repository string
	// Base and Head are the pull request's commits, or revisions that
	// AttestConfig.ResolveSubject resolves before the job runs.
	Base, Head string
	// HeadChangesPolicy says whether the head edits the repository's
	// policy file (airlock run compares the two commits).
	HeadChangesPolicy *policies.PolicyChange
}

// Requests are what the user of a door asks of the sandbox (airlock
// run's flags). Without a policy they are the sandbox as asked. Under a
// policy, each one the user gave (named in Set) may only tighten the
// policy: one that would loosen it is an InputError naming it.
type Requests struct {
	RootFS, Platform string
	WorkspaceMount   string
	Capabilities     []string
	User             *gvisor.User
	Limits           gvisor.Limits
	// Set names the requests the user gave (input.RootFS, input.Platform,
	// input.WorkspaceMount, input.Capabilities, and the limits':
	// input.JobTimeout ... input.Output).
	Set map[input.Name]bool
}

// RequestInputs are the inputs a Requests.Set may name: the requests
// that can only tighten a policy (a new slice each call).
func RequestInputs() []input.Name {
	return []input.Name{
		input.RootFS, input.Platform, input.WorkspaceMount, input.Capabilities, input.JobTimeout, input.StepTimeout,
		input.Memory, input.Pids, input.CPUs, input.Overlay, input.Tmp, input.Output, input.WorkspaceSize,
	}
}

// Inputs are what a door brings to a job besides the policy.
type Inputs struct {
	// Name labels the job; Steps are its steps (the policy's own,
	// steps.PolicyJob, when PolicyJob is set).
	Name      string
	Steps     []StepSpec
	PolicyJob string
	// Workspace is the host directory the job works in; StateRoot holds
	// the sandbox's state; SharedRoot what outlives the job (failed
	// starts' logs, and the KVM verdict where the host's directory cannot
	// be had; empty: StateRoot).
	Workspace, StateRoot, SharedRoot string
	// WorkspaceMount, when set, is where the door must put the workspace
	// (the runner's /__w): it wins over the policy's workspaceMount.
	WorkspaceMount string
	// Image is the job container's image (the runner hook): the job runs
	// on the root filesystem the organisation maps it to (sandbox.images)
	// with the image's environment, and it is recorded in the attestation.
	Image string
	// ContainerUser is the user the workflow asks the job container to
	// run as (options: --user), honoured only where the policy lets the
	// image choose (sandbox.user: "image").
	ContainerUser *gvisor.User
	// Env, Mounts, Masks and Files are the door's, added to the policy's:
	// env after the image's, mounts before the policy's, masks after.
	Env    []string
	Mounts []gvisor.Mount
	Masks  []string
	Files  []gvisor.File
	// WorkspaceKeep are the runner's directories in the workspace that
	// stay outside its size limit (gvisor.Config.WorkspaceKeep).
	WorkspaceKeep []string
	// RunscFlags are extra runsc flags (experts; airlock run only).
	RunscFlags []string
	// RunscBuildID is the Go build ID of the runsc sidecar the airlock
	// binary was built with (make build records it); empty: none, and
	// the job's sandbox starts from the airlock binary (gvisor.FindRunsc).
	RunscBuildID string
	// Services are the job's service containers, checked against the
	// policy (sandbox.services and sandbox.images).
	Services []Service
	// Requests are airlock run's flags.
	Requests Requests
	// TrustDir is the repository inside the workspace (relative; empty:
	// the workspace itself).
	TrustDir string
	// CheckoutInJob says the job checks the repository out itself (the
	// runner hook): the run-time baseline is taken after the checkout
	// (Session.TrustBaseline), any git hook but git's samples is a
	// finding, and the workspace's git objects, which earlier jobs left,
	// are no source for the authored diff. Otherwise the workspace is the
	// pull request's repository and its commits give the authored diff.
	CheckoutInJob bool
	// AttestKey is the door's signing key (a flag, the host's
	// configuration); empty: the organisation policy's attest.key.
	// AttestPasswordFile holds an encrypted key's password.
	AttestKey, AttestPasswordFile string
	// AttestStores are the door's stores (airlock run --attest-store, the
	// hook's AIRLOCK_ATTEST_STORE), kept beside the organisation
	// policy's attest.store; AttestStoreAuth names the Docker
	// config.json that holds their credentials (hidden from the sandbox).
	AttestStores    []storeref.Ref
	AttestStoreAuth string
	// RunnerRoot is the installation directory of the Actions runner
	// the job runs under (FindRunnerRoot), hidden from the sandbox; empty:
	// none.
	RunnerRoot string
	// LookupEnv reads airlock's own environment, where the values of the
	// policy's secrets live. Nil: os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// GitHubServerURL and GitHubAPIURL are the GitHub the job's token
	// belongs to (GITHUB_SERVER_URL, GITHUB_API_URL): where the gateway
	// may put it back.
	GitHubServerURL, GitHubAPIURL string
}

// Service is a service container of the job.
type Service struct {
	// Name is the workflow's name for it: the host name the job reaches
	// it at.
	Name  string
	Image string
}

// Plan is a job ready to run: what runs and where, and how its
// attestation is made.
type Plan struct {
	Job    Job
	Attest AttestConfig
	// Images gives the job's containers their images: mapped by the
	// organisation, or pulled under its policy (also Job.Images).
	Images *ImageSource
	// Hosts is the job's /etc/hosts (localhost, the sandbox's name, the
	// services' names, at loopback), also given to every container of
	// the job.
	Hosts []gvisor.File
	// Notes are for the door to tell the user: what the policy ignored
	// and why.
	Notes []string
}

// InputError is a door's input that cannot be honoured: a request that
// would loosen the policy, a job the policy does not have. Its Input
// names which, for the door to spell (input.Spelling).
type InputError = input.Error

// PolicyError is a policy that cannot be turned into a job (a size that
// does not parse, an egress rule that does not compile).
type PolicyError struct{ Err error }

func (e PolicyError) Error() string { return e.Err.Error() }
func (e PolicyError) Unwrap() error { return e.Err }

func inputf(format string, args ...any) error { return InputError{Err: fmt.Errorf(format, args...)} }

// NewPlan turns the effective policy, the pull request and the door's
// inputs into a job. Without a policy (eff nil: airlock run on a host
// with none) the job is the inputs alone: the sandbox as requested,
// loopback only, no trust checks.
func NewPlan(eff *policies.Effective, pr PullRequest, in Inputs) (Plan, error) {
	var err0 error
	p := Plan{Job: Job{Name: in.Name, Steps: in.Steps, Env: slices.Clone(in.Env)}}
	p.Attest.Meta = attest.Meta{Repository: pr.Repository, BaseSHA: pr.Base, HeadSHA: pr.Head, ContainerImage: in.Image}
	if ev := pr.Event; ev != nil {
		p.Attest.Meta.PullRequest, p.Attest.Meta.Author, p.Attest.Meta.Event = ev.Number, ev.Author, "pull_request"
	}
	p.Attest.Key, p.Attest.PasswordFile = in.AttestKey, in.AttestPasswordFile
	p.Attest.Stores, p.Attest.StoreAuth = slices.Clone(in.AttestStores), in.AttestStoreAuth
	if eff == nil {
		p.Job.Sandbox = requestedSandbox(in)
		if p.Images, err0 = NewImageSource(nil, nil, nil, false); err0 != nil {
			return p, PolicyError{err0}
		}
		p.Job.Images = p.Images
		if in.Image != "" {
			if err := p.Images.Check(in.Image, "the job's image"); err != nil {
				return p, InputError{Err: err}
			}
			p.Job.PullImage = in.Image
		}
		p.Job.Sandbox.ExtraMasks = append(p.Job.Sandbox.ExtraMasks, hiddenPaths(nil, in, p.Attest, p.Job.Sandbox.WorkspaceMount)...)
		p.addHosts(in.Services)
		p.runscSidecar(in.RunscBuildID)
		return p, nil
	}
	pol := eff.Policy
	p.Job.Policy = &PolicyInfo{Digest: eff.Digest, Sources: eff.Sources, HeadChangesPolicy: pr.HeadChangesPolicy}
	p.Job.Policy.Agent = agentDecision(eff, pr.Event)
	org := eff.Org
	if org == nil {
		org = &eff.Policy
	}
	agent := p.Job.Policy.Agent != nil && p.Job.Policy.Agent.Agent
	if p.Images, err0 = NewImageSource(pol.Sandbox.Images, &pol, org, agent); err0 != nil {
		return p, PolicyError{err0}
	}
	p.Job.Images = p.Images
	cfg, err := p.sandbox(pol.Sandbox, in)
	if err != nil {
		return p, err
	}
	p.Job.Sandbox = cfg
	p.addHosts(in.Services)
	if err := p.egress(eff, in); err != nil {
		return p, err
	}
	if p.Job.Trust, err = trustConfig(pol.Trust, pr, in); err != nil {
		return p, err
	}

	if in.PolicyJob != "" {
		if p.Job.Steps, err = StepsFromPolicy(pol, in.PolicyJob); err != nil {
			return p, InputError{Err: err}
		}
		if p.Job.Name == "" {
			p.Job.Name = in.PolicyJob
		}
	}

	p.attestation(eff)
	p.Job.Sandbox.ExtraMasks = append(p.Job.Sandbox.ExtraMasks, hiddenPaths(eff, in, p.Attest, p.Job.Sandbox.WorkspaceMount)...)
	p.runscSidecar(in.RunscBuildID)
	return p, nil
}

// runscSidecar starts the job's sandbox from the runsc sidecar beside the
// airlock binary (gvisor.FindRunsc) when the binary was built with one
// (buildID). One that cannot be used is a note, not an error: the
// airlock binary holds the same runsc, and starts the sandbox from itself
// about a tenth of a second slower.
func (p *Plan) runscSidecar(buildID string) {
	var err error
	if p.Job.Sandbox.RunscExe, err = gvisor.OwnRunsc(buildID); err != nil {
		p.Notes = append(p.Notes, err.Error()+"; the sandbox starts from airlock itself (slower)")
	}
}

// agentDecision decides whether the pull request is agent work (nil: no
// pull request event). A repository policy may add agents, never take
// the organisation's away.
func agentDecision(eff *policies.Effective, ev *policies.PullRequest) *policies.Detection {
	if ev == nil {
		return nil
	}
	d := policies.Decide(eff.Policy.Agents, *ev)
	if eff.Org != nil && !d.Agent {
		if od := policies.Decide(eff.Org.Agents, *ev); od.Agent {
			d = od
			d.Reason += " (the organisation policy's agents)"
		}
	}
	return &d
}

// sandbox is the job's sandbox: the policy's, on the root filesystem
// its image maps to, narrowed by the user's requests, with the door's
// workspace, mounts, masks and files, and its services' host names.
func (p *Plan) sandbox(sb policies.Sandbox, in Inputs) (gvisor.Config, error) {
	cfg, err := SandboxFromPolicy(sb)
	if err != nil {
		return cfg, PolicyError{err}
	}
	// The image first: under sandbox.user "image" it chooses the user
	// which a user's flags may then narrow.
	imageMode := sb.ImageUser()
	img, err := p.image(&cfg, sb, in.Image)
	if err != nil {
		return cfg, err
	}
	switch {
	case imageMode:
		if err := imageUser(&cfg, img, in.Image, in.ContainerUser); err != nil {
			return cfg, PolicyError{err}
		}
	case in.ContainerUser != nil:
		p.Notes = append(p.Notes, "the container's options: --user is not honoured: the policy sets who the job runs as (sandbox.user; \"image\" lets the image and the workflow choose)")
	}
	if err := tighten(&cfg, in.Requests, imageMode); err != nil {
		return cfg, err
	}
	if in.WorkspaceMount != "" {
		cfg.WorkspaceMount = in.WorkspaceMount
	}
	cfg.Workspace, cfg.StateRoot, cfg.SharedRoot, cfg.RunscFlags = in.Workspace, in.StateRoot, in.SharedRoot, in.RunscFlags
	cfg.Mounts = append(slices.Clone(in.Mounts), cfg.Mounts...)
	cfg.ExtraMasks = append(cfg.ExtraMasks, in.Masks...)
	cfg.Files, cfg.WorkspaceKeep = slices.Clone(in.Files), slices.Clone(in.WorkspaceKeep)
	if err := checkServices(sb, in.Services, p.Images); err != nil {
		return cfg, InputError{Err: err}
	}
	return cfg, nil
}

// egress is the job's gateway configuration and its credentials' vault.
func (p *Plan) egress(eff *policies.Effective, in Inputs) error {
	pol := eff.Policy
	lookup := in.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	// Agent work is never audited, and its credentials get the stricter
	// defaults of what they may do. Audit needs a pull request that is
	// known not to be agent work: without an event (a push, an event
	// that does not parse) the job is enforced.
	agent := p.Job.Policy.Agent != nil && p.Job.Policy.Agent.Agent
	var err error
	if p.Job.Egress, err = EgressFromPolicy(pol.Egress, p.Job.Policy.Agent, lookup); err != nil {
		return PolicyError{err}
	}
	for _, s := range in.Services {
		p.Job.Egress.LocalNames = append(p.Job.Egress.LocalNames, s.Name)
	}
	// The job's credentials stay out of its sandbox.
	creds := credentials.PolicyFor(pol.Credentials, agent)
	if eff.Org != nil {
		// The organisation pins what the job's credentials may do; a
		// repository may only narrow it.
		if loose := creds.Loosens(credentials.PolicyFor(eff.Org.Credentials, agent)); len(loose) > 0 {
			return PolicyError{fmt.Errorf("the repository policy loosens the organisation's credentials policy (%s): remove that from .github/airlock.cue, or ask the runner's administrators to allow it", strings.Join(loose, "; "))}
		}
	}
	p.Job.Credentials = credentials.NewVault(creds, in.GitHubServerURL, in.GitHubAPIURL)
	return nil
}

// trustConfig is the job's trust checks under the policy's trust
// section: a job that checks out itself (the hook) has its baseline
// taken after the checkout and no hooks but git's samples; otherwise the
// workspace is the pull request's repository, whose commits give the
// authored diff.
func trustConfig(t policies.Trust, pr PullRequest, in Inputs) (*trust.Config, error) {
	set, err := trust.NewSet(t)
	if err != nil {
		return nil, PolicyError{err}
	}
	cfg := &trust.Config{Set: set, Dir: in.TrustDir}
	switch {
	case in.CheckoutInJob:
		cfg.Deferred, cfg.NoHooks = true, true
	case pr.Base != "":
		cfg.Base, cfg.Head = pr.Base, pr.Head
		if pr.Head == "" {
			cfg.Head = "HEAD"
		}
	}
	return cfg, nil
}

// attestation takes the policy's outputs and the organisation's
// signing key (a door's key wins; a repository's is ignored, with a
// note).
func (p *Plan) attestation(eff *policies.Effective) {
	pol := eff.Policy
	p.Attest.Outputs = pol.Attest.OutputPatterns()
	orgKey := ""
	if eff.Org != nil {
		orgKey = eff.Org.Attest.Key
	}
	if pol.Attest.Key != "" && pol.Attest.Key != orgKey {
		p.Notes = append(p.Notes, "ignoring attest.key from the repository policy: the signing key is the organisation's to choose")
	}
	if p.Attest.Key == "" {
		p.Attest.Key = orgKey
	}
	if eff.Org != nil {
		// The organisation's stores first; the door's beside them.
		p.Attest.Stores = storeref.Merge(eff.Org.Attest.Stores(), p.Attest.Stores...)
	}
}

// requestedSandbox is the sandbox as airlock run's flags ask for it, when
// no policy governs the job.
func requestedSandbox(in Inputs) gvisor.Config {
	r := in.Requests
	cfg := gvisor.Config{
		StateRoot: in.StateRoot, RootFS: r.RootFS, Platform: r.Platform, Workspace: in.Workspace, WorkspaceMount: r.WorkspaceMount,
		ExtraMasks: slices.Clone(in.Masks), Capabilities: r.Capabilities, Limits: r.Limits, RunscFlags: in.RunscFlags,
		User: r.User, Mounts: slices.Clone(in.Mounts), Files: slices.Clone(in.Files), WorkspaceKeep: slices.Clone(in.WorkspaceKeep),
	}
	if in.WorkspaceMount != "" {
		cfg.WorkspaceMount = in.WorkspaceMount
	}
	return cfg
}

// tighten applies the user's requests to the policy's sandbox, refusing
// any that would loosen it. Where the image chooses the user
// (imageMode), so may the user.
func tighten(cfg *gvisor.Config, r Requests, imageMode bool) error {
	if r.Set[input.RootFS] && r.RootFS != cfg.RootFS {
		return input.Errorf(input.RootFS, "the policy sets it (sandbox.rootfs)")
	}
	if r.Set[input.Platform] {
		if cfg.Platform != "" && cfg.Platform != gvisor.PlatformAuto && r.Platform != cfg.Platform {
			return input.Errorf(input.Platform, "the organisation policy sets it (sandbox.platform: %q)", cfg.Platform)
		}
		cfg.Platform = r.Platform
	}
	if r.Set[input.WorkspaceMount] && r.WorkspaceMount != cfg.WorkspaceMount {
		return input.Errorf(input.WorkspaceMount, "the policy sets it (sandbox.workspaceMount)")
	}
	for _, c := range r.Capabilities {
		if !slices.Contains(cfg.Capabilities, c) {
			return input.Errorf(input.Capabilities, "%s: the policy does not grant it (sandbox.capabilities); a request can only tighten the policy", c)
		}
	}
	if r.Set[input.Capabilities] {
		cfg.Capabilities = r.Capabilities
	}
	if r.User != nil {
		if cfg.User != nil && *cfg.User != *r.User && !imageMode {
			return input.Errorf(input.User, "the policy sets it (sandbox.user)")
		}
		u := *r.User
		cfg.User = &u
	}
	l, err := TightenLimits(cfg.Limits, r.Limits, r.Set)
	if err != nil {
		return err
	}
	cfg.Limits = l
	return nil
}

// image runs the job on the root filesystem the organisation maps its
// image to, with the image's environment under the job's own (as in
// Docker), and returns the image. Any other image is checked against the
// policy now (a refused image fails the job before anything runs) and
// pulled when the session opens (Job.PullImage); where the policy pulls
// nothing (images.pull: false) the job runs on sandbox.rootfs, and a
// note says so.
func (p *Plan) image(cfg *gvisor.Config, sb policies.Sandbox, ref string) (*Image, error) {
	dir, ok := policies.ImageRoot(sb.Images, ref)
	if !ok {
		if ref != "" && !p.Images.Pulls() {
			p.Notes = append(p.Notes, fmt.Sprintf("the job's image %q is not mapped to a root filesystem (sandbox.images), and the policy pulls no images (images.pull: false): the job runs on sandbox.rootfs (%s)", ref, sb.RootFS))
			return nil, nil
		}
		if ref != "" {
			if err := p.Images.Check(ref, "the job's image"); err != nil {
				return nil, InputError{Err: err}
			}
			p.Job.PullImage = ref
		}
		return nil, nil
	}
	img, err := OpenImage(dir)
	if err != nil {
		return nil, fmt.Errorf("the job's image %q: %w", ref, err)
	}
	cfg.RootFS = img.RootFS
	p.Job.Env = append(slices.Clone(img.Env), p.Job.Env...)
	return &img, nil
}

// imageUser runs the job as its image's user (sandbox.user: "image"): the
// one the workflow asks for, else the image bundle's, else root. Only on
// an image the organisation maps: on the host's root (or the policy's),
// root with the policy's capabilities could read what the host keeps
// from other users. The capabilities are the policy's alone.
func imageUser(cfg *gvisor.Config, img *Image, ref string, workflow *gvisor.User) error {
	if img == nil {
		return fmt.Errorf("sandbox.user \"image\" runs a job as its image's user only on an image the organisation maps to a root filesystem (sandbox.images), and the job's image %q is not one: map it, or leave sandbox.user to the workspace owner", ref)
	}
	u := &gvisor.User{}
	switch {
	case workflow != nil:
		u = workflow
	case img.User != nil:
		u = img.User
	}
	cfg.User = &gvisor.User{UID: u.UID, GID: u.GID}
	return nil
}

// maxServices bounds a job's services.
const maxServices = 8

// serviceName is what a service's name must look like to be a host name.
// At most 56 characters: "service-" and the name are a container id
// of at most 64.
var serviceName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,54}[A-Za-z0-9])?$`)

// checkServices refuses the job's services unless the policy allows them
// and maps each one's image; the error names every service refused.
func checkServices(p policies.Sandbox, services []Service, src *ImageSource) error {
	if len(services) == 0 {
		return nil
	}
	if len(services) > maxServices {
		return fmt.Errorf("service containers refused: %d services, at most %d (each has its own writable layer of sandbox.limits.overlay on the runner's disk)", len(services), maxServices)
	}
	var bad []string
	for _, s := range services {
		switch {
		case !p.Services:
			bad = append(bad, fmt.Sprintf("%s (%s): the policy does not allow services (sandbox.services)", s.Name, s.Image))
		case !serviceName.MatchString(s.Name):
			bad = append(bad, fmt.Sprintf("%q: not a valid host name for a service (letters, digits and '-', at most 56)", s.Name))
		default:
			if err := src.Check(s.Image, "service "+s.Name); err != nil {
				bad = append(bad, err.Error())
			}
		}
	}
	if len(bad) > 0 {
		return errors.New("service containers refused: " + strings.Join(bad, "; ") + "; remove them from the job's services: or ask the runner's administrators")
	}
	return nil
}

// addHosts gives the job its /etc/hosts, and keeps it in p.Hosts for the
// job's containers.
func (p *Plan) addHosts(services []Service) {
	p.Hosts = []gvisor.File{hostsFile(services)}
	p.Job.Sandbox.Files = append(p.Job.Sandbox.Files, p.Hosts...)
}

// hostsFile is the job's /etc/hosts, for the job and its containers, as
// Docker writes a container's: localhost, the IPv6 names, the sandbox's
// own host name (git, and many tools, look it up: the host's file does
// not have it, and the egress gateway's DNS must not be asked), and the
// services' names, all at loopback.
func hostsFile(services []Service) gvisor.File {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
	// Both families: a lookup of one that the file lacks goes on to DNS.
	fmt.Fprintf(&b, "127.0.1.1\t%s\n::1\t%s\n", gvisor.Hostname, gvisor.Hostname)
	for _, s := range services {
		fmt.Fprintf(&b, "127.0.0.1\t%s\n", s.Name)
	}
	return gvisor.File{Path: "/etc/hosts", Data: []byte(b.String())}
}
