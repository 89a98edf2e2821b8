package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/internal/shlex"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
)

// What the runner's payloads say of a job: planInputs is a pure function
// (no files, no GitHub API, no output) of prepare_job's arguments, the
// event file they name (already read: readEvent) and the host's
// configuration, to the plan's inputs and what the job keeps of the
// payload. (*job).build acts on its result (job.go).

// errNoContainer is a job the runner sent without a job container.
var errNoContainer = errors.New("the job has no container: airlock needs container: in every job (ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER=true)")

// hostInputs are what planInputs takes of the host, as plain values.
type hostInputs struct {
	// cfg is the hook's configuration; dir the job's directory (the
	// daemon's, which the job never sees).
	cfg Config
	dir string
	// serverURL and apiURL are the github context's URLs, which the
	// runner gives its hook in the environment (GITHUB_SERVER_URL,
	// GITHUB_API_URL).
	serverURL, apiURL string
	// runnerRoot is the runner's installation directory (its
	// secrets), found from the runner process the hook runs under.
	runnerRoot string
}

// eventFile is what reading the event file of the runner's payload gave:
// its bytes, or the error (fs.ErrNotExist: the job has none).
type eventFile struct {
	data []byte
	err  error
}

// pullRequestRef is the job's pull request as its event names it (zero:
// the job is no pull request's): the base and head commits and the
// event, its base repository (owner and repo, empty when the event names
// none), and the commits a checkout of it may be at (its head and its
// test merge commit).
type pullRequestRef struct {
	runner.PullRequest
	owner, repo string
	commits     []string
}

// jobInputs are what the runner's prepare_job payload says of the job.
type jobInputs struct {
	// inputs are the plan's (runner.NewPlan). Their ContainerUser is the
	// workflow's --user: nil when it asks for none, or when what it asks
	// for is garbled (userErr, an error only where the policy lets the
	// image choose).
	inputs  runner.Inputs
	userErr error
	pr      pullRequestRef
	// mounts are the job container's, as the runner gave them.
	mounts Mounts
	// fileCommands (the job's own file-command directory), the runner's,
	// and the job's own tool cache: host paths, empty when the runner
	// gave no temp directory.
	fileCommands, runnerFileCommands, toolCache string
	// serviceNames name the job's services, in the runner's order.
	serviceNames []string
	// userVolumes counts the workflow's own volumes, which are never
	// mounted.
	userVolumes int
}

// planInputs reads the runner's prepare_job payload (args), the event
// file it names and the host's configuration as the job's inputs, and
// does nothing else (no files, no API, no output): the runner's work
// directory as the workspace at /__w, its externals read-only, the GitHub
// home and workflow directories; never the Docker socket nor the
// workflow's own volumes. An event file that is there but does not read
// or parse is an error (the job would otherwise run as no pull
// request's); an event of another kind is a job without a pull request.
func planInputs(args PrepareArgs, event eventFile, host hostInputs) (jobInputs, error) {
	c := args.Container
	if c == nil {
		return jobInputs{}, errNoContainer
	}
	in := jobInputs{mounts: Mounts(c.SystemMountVolumes), serviceNames: serviceNames(args.Services), userVolumes: len(c.UserMountVolumes)}
	work, ok := in.mounts.Host(containerWork)
	if !ok {
		return jobInputs{}, fmt.Errorf("the runner gave no mount for %s", containerWork)
	}
	if tmp, ok := in.mounts.Host(containerTemp); ok {
		in.fileCommands = filepath.Join(host.dir, "file-commands")
		in.runnerFileCommands = filepath.Join(tmp, fileCommandsDir)
		in.toolCache = filepath.Join(tmp, toolCacheDir)
	}
	mounts, err := in.jobMounts(work)
	if err != nil {
		return jobInputs{}, err
	}
	if in.pr, err = pullRequestOf(event); err != nil {
		return jobInputs{}, err
	}
	stores, err := storeref.ParseList(host.cfg.AttestStores)
	if err != nil {
		return jobInputs{}, fmt.Errorf("%s: %w", AttestStoreEnv, err)
	}
	var user *gvisor.User
	user, in.userErr = optionsUser(c.CreateOptions)
	in.inputs = runner.Inputs{
		Name: "job", Workspace: work, WorkspaceMount: containerWork, StateRoot: filepath.Join(host.dir, "state"),
		// Failed starts' logs are the host's, kept across jobs (and the
		// KVM verdict, where /run/airlock/platform cannot be had).
		SharedRoot: host.cfg.JobsRoot,
		Image:      c.Image, ContainerUser: user, Env: runner.EnvList(runnerWatermark(c.Env)), Mounts: mounts,
		Masks: jobMasks(in.mounts, host.dir), WorkspaceKeep: runnersOwn(work, in.mounts), Services: jobServices(args.Services, in.serviceNames),
		TrustDir: repoDir(c.WorkingDirectory), CheckoutInJob: true, AttestKey: host.cfg.AttestKey, RunnerRoot: host.runnerRoot,
		GitHubServerURL: host.serverURL, GitHubAPIURL: host.apiURL, RunscBuildID: host.cfg.RunscBuildID,
		AttestStores: stores, AttestStoreAuth: host.cfg.AttestStoreAuth,
	}
	return in, nil
}

// pullRequestOf is the job's pull request as its event file names it:
// none when there is no file, or when its event is of another kind
// (policies.ErrNotPullRequest); an error when it is there but does not
// read or parse.
func pullRequestOf(event eventFile) (pullRequestRef, error) {
	if errors.Is(event.err, fs.ErrNotExist) {
		return pullRequestRef{}, nil
	}
	err := event.err
	var p policies.PullRequest
	if err == nil {
		p, err = policies.ParsePullRequest(event.data)
	}
	switch {
	case errors.Is(err, policies.ErrNotPullRequest):
		return pullRequestRef{}, nil
	case err != nil:
		return pullRequestRef{}, fmt.Errorf("the event payload (%s): %w", containerEvent, err)
	}
	ref := pullRequestRef{PullRequest: runner.PullRequest{Event: &p, Base: p.BaseSHA, Head: p.HeadSHA}, commits: []string{p.HeadSHA}}
	var merge string
	ref.owner, ref.repo, merge = eventRefs(event.data)
	if merge != "" {
		ref.commits = append(ref.commits, merge)
	}
	if ref.owner != "" {
		ref.Repository = "https://github.com/" + ref.owner + "/" + ref.repo
	}
	return ref, nil
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

// repoDir is the checkout inside the runner's work directory (relative):
// the job container's working directory below /__w; empty when it is not
// below it.
func repoDir(workingDirectory string) string {
	rel, ok := strings.CutPrefix(path.Clean(workingDirectory), containerWork+"/")
	if !ok {
		return ""
	}
	return rel
}

// jobMasks are what the job may not see besides the policy's masks: the
// daemon's job directory; the runner's hook responses in its temp
// directory (the runner reads each call's response, and the state it
// saves, from there); the runner's own directory (its credentials, its
// configuration, its logs), of which only the externals are mounted.
func jobMasks(m Mounts, dir string) []string {
	masks := []string{dir}
	if _, ok := m.Host(containerTemp); ok {
		masks = append(masks, path.Join(containerTemp, responsesDir))
	}
	if ext, ok := m.Host("/__e"); ok && filepath.Base(filepath.Clean(ext)) == "externals" {
		if dir := filepath.Dir(filepath.Clean(ext)); dir != "/" {
			masks = append(masks, dir)
		}
	}
	return masks
}

// runnersOwn are the runner's directories in its work directory that the
// job never writes (the hook's responses, masked in the sandbox, and the
// file commands, replaced by the job's own): they stay outside the
// workspace's size limit, so that the runner can still make its files
// there and answer the hook after a job that filled its workspace.
func runnersOwn(work string, m Mounts) []string {
	tmp, ok := m.Host(containerTemp)
	if !ok {
		return nil
	}
	rel, err := filepath.Rel(work, tmp)
	if err != nil || !filepath.IsLocal(rel) {
		return nil
	}
	return []string{filepath.Join(rel, responsesDir), filepath.Join(rel, fileCommandsDir)}
}

// jobServices are the job's services as the plan takes them: each by its
// name (serviceNames) and image.
func jobServices(services []Container, names []string) []runner.Service {
	var out []runner.Service
	for i, s := range services {
		out = append(out, runner.Service{Name: names[i], Image: s.Image})
	}
	return out
}

// jobMounts are the runner's directories as the job's mounts: the work
// directory is the workspace (not among them); its temp directory is a
// mount of its own, which the job cannot move or replace with a symlink
// (the runner writes there as root); the actions it downloaded are
// read-only; its tool cache is replaced by the job's own, so that a job
// cannot leave a poisoned tool for the runner's later jobs; the job sees
// its own file-command directory in place of the runner's
// (filecommands.go); externals, the GitHub home and workflow directories
// as the runner mounts them. Sources below the work directory are
// resolved without following symlinks when the sandbox starts
// (gvisor.Mount.Beneath). Never the Docker socket.
func (in *jobInputs) jobMounts(work string) ([]gvisor.Mount, error) {
	var out []gvisor.Mount
	for _, mt := range in.mounts.Sorted() {
		t, src := path.Clean(mt.Target), filepath.Clean(mt.Source)
		m := gvisor.Mount{Source: src, Destination: t, ReadOnly: mt.ReadOnly}
		switch {
		case t == containerWork:
			continue
		case strings.Contains(t, "docker.sock") || strings.Contains(src, "docker.sock"):
			continue // never
		case t == containerTemp:
		case t == containerActions:
			m.ReadOnly = true
		case t == containerTool:
			if in.toolCache == "" {
				continue // no temp directory to keep it in: the job has none
			}
			m.Source = in.toolCache
		case paths.Within(t, containerWork):
			if h, _ := in.mounts.Host(path.Dir(t)); h != "" && path.Join(h, path.Base(t)) == src {
				continue // already inside the workspace mount
			}
			return nil, fmt.Errorf("mount %s is not below the runner's work directory; airlock needs it there", t)
		}
		if paths.Below(m.Source, work) {
			m.Beneath = work
		}
		out = append(out, m)
	}
	if in.fileCommands != "" {
		out = append(out, gvisor.Mount{Source: in.fileCommands, Destination: fileCommandsInJob})
	}
	// Parents before what is mounted inside them.
	slices.SortFunc(out, func(a, b gvisor.Mount) int { return strings.Compare(a.Destination, b.Destination) })
	return out, nil
}

// optionsUser is the user the workflow's container options ask for
// (options: --user UID[:GID], -u, in the forms Docker's flag parser
// takes: "--user V", "--user=V", "-u V", "-u=V", "-uV"), or nil. Only
// numbers and root: the names of an image's /etc/passwd are not looked
// up.
func optionsUser(createOptions string) (*gvisor.User, error) {
	if len(createOptions) > maxArgs {
		return nil, fmt.Errorf("the container's options are longer than %d bytes", maxArgs)
	}
	opts, err := shlex.Split(createOptions)
	if err != nil {
		return nil, fmt.Errorf("the container's options %q do not parse: %w", createOptions, err)
	}
	var user *gvisor.User
	for i, o := range opts {
		v, ok := "", false
		switch {
		case (o == "--user" || o == "-u") && i+1 < len(opts):
			v, ok = opts[i+1], true
		case strings.HasPrefix(o, "--user="):
			v, ok = strings.TrimPrefix(o, "--user="), true
		case strings.HasPrefix(o, "-u") && !strings.HasPrefix(o, "--"):
			v, ok = strings.TrimPrefix(strings.TrimPrefix(o, "-u"), "="), true
		}
		if !ok {
			continue
		}
		id := v
		if name, _, _ := strings.Cut(v, ":"); name == "root" {
			id = "0" + strings.TrimPrefix(v, "root")
		}
		u, err := gvisor.ParseUser(id)
		if err != nil {
			return nil, fmt.Errorf("the container's options: --user %q: airlock takes a numeric UID[:GID] (or root)", v)
		}
		user = &u
	}
	return user, nil
}
