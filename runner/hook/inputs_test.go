package hook

import (
	"encoding/json"
	"errors"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/runnersim"
	"github.com/airlock-ci/airlock/runner"
)

// planInputs is tested here without a host: no root, no sandbox, no
// files. The payloads are internal/runnersim/payloads/prepare_job.json (the runner's
// own shape, see its README) with the runner's directories where an
// actions/runner install in /home/runner has them
// (ContainerOperationProvider.MountWellKnownDirectories; the paths of
// the reference hooks' examples/prepare-job.json).

// The hook's side of these tests: its configuration, the job's
// directory, the github context's URLs.
var testHost = hostInputs{
	cfg: Config{JobsRoot: "/run/airlock/hooks", AttestKey: "/etc/airlock/attest.key"},
	dir: "/run/airlock/hooks/hook-0123456789abcdef", serverURL: "https://github.com", apiURL: "https://api.github.com",
}

const (
	testBase  = "1111111111111111111111111111111111111111"
	testHead  = "2222222222222222222222222222222222222222"
	testMerge = "3333333333333333333333333333333333333333"
)

// testEvent is a pull_request event as GitHub's webhook payload has it
// (docs.github.com, "Webhook events and payloads": pull_request; the
// fields policies.ParsePullRequest and eventRefs read), with its base
// repository's full name.
func testEvent(fullName string) eventFile {
	return eventFile{data: []byte(`{"action": "opened", "number": 7, "pull_request": {"number": 7,
		"user": {"login": "Copilot", "type": "Bot"}, "merge_commit_sha": "` + testMerge + `",
		"head": {"ref": "copilot/x", "sha": "` + testHead + `", "repo": {"full_name": "acme/app"}},
		"base": {"ref": "main", "sha": "` + testBase + `", "repo": {"full_name": ` + fullName + `}}}}`)}
}

// runnerArgs renders prepare_job's payload of job on the runner's
// directories, edited (old, new pairs, on the compact line the runner
// writes), and reads its arguments as prepare does.
func runnerArgs(t *testing.T, job payload, edits ...string) PrepareArgs {
	t.Helper()
	job.Work, job.Externals, job.Temp = "/home/runner/_work", "/home/runner/externals", "/home/runner/_work/_temp"
	job.Actions, job.Tool = "/home/runner/_work/_actions", "/home/runner/_work/_tool"
	job.Home, job.Workflow = "/home/runner/_work/_temp/_github_home", "/home/runner/_work/_temp/_github_workflow"
	job.Response = "/home/runner/_work/_temp/_runner_hook_responses/0b6f5c1e.json"
	line := string(runnersim.Render(t, PrepareJob, job))
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(line, edits[i]) {
			t.Fatalf("the payload has no %s: %s", edits[i], line)
		}
		line = strings.Replace(line, edits[i], edits[i+1], 1)
	}
	in, err := ReadInput(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	var args PrepareArgs
	if err := json.Unmarshal(in.Args, &args); err != nil {
		t.Fatal(err)
	}
	return args
}

// The runner's job: its paths as the plan's inputs, the runner's
// directories as mounts (never the Docker socket nor the workflow's
// volume), what the job may not see, its services by name, the pull
// request and the commits a checkout of it may be at.
func TestPlanInputs(t *testing.T) {
	work := "/home/runner/_work"
	args := runnerArgs(t, payload{Image: "node:20", RegistryPassword: "registry-secret-bar",
		Services: []servicePayload{{Image: "redis:7"}, {Image: "docker.io/library/redis"}, {Image: "ghcr.io/acme/db:1"}}})
	in, err := planInputs(args, testEvent(`"acme/app"`), testHost)
	if err != nil {
		t.Fatal(err)
	}
	want := runner.Inputs{
		Name: "job", Workspace: work, WorkspaceMount: "/__w", StateRoot: testHost.dir + "/state", SharedRoot: "/run/airlock/hooks",
		Image: "node:20", Env: []string{"CI=true", "GITHUB_ACTIONS=true", "HOME=/github/home", "NODE_ENV=test"},
		Mounts: []gvisor.Mount{
			{Source: "/home/runner/externals", Destination: "/__e", ReadOnly: true},
			{Source: work + "/_actions", Destination: "/__w/_actions", ReadOnly: true, Beneath: work},
			{Source: work + "/_temp", Destination: "/__w/_temp", Beneath: work},
			{Source: testHost.dir + "/file-commands", Destination: "/__w/_temp/_runner_file_commands"},
			{Source: work + "/_temp/_airlock_tool_cache", Destination: "/__w/_tool", Beneath: work},
			{Source: work + "/_temp/_github_home", Destination: "/github/home", Beneath: work},
			{Source: work + "/_temp/_github_workflow", Destination: "/github/workflow", Beneath: work},
		},
		Masks:         []string{testHost.dir, "/__w/_temp/_runner_hook_responses", "/home/runner"},
		WorkspaceKeep: []string{"_temp/_runner_hook_responses", "_temp/_runner_file_commands"},
		Services:      []runner.Service{{Name: "redis", Image: "redis:7"}, {Name: "redis-2", Image: "docker.io/library/redis"}, {Name: "db", Image: "ghcr.io/acme/db:1"}},
		TrustDir:      "app/app", CheckoutInJob: true, AttestKey: "/etc/airlock/attest.key",
		GitHubServerURL: "https://github.com", GitHubAPIURL: "https://api.github.com",
	}
	if !reflect.DeepEqual(in.inputs, want) {
		t.Errorf("inputs:\n got %+v\nwant %+v", in.inputs, want)
	}
	if in.userErr != nil || in.userVolumes != 1 || !slices.Equal(in.serviceNames, []string{"redis", "redis-2", "db"}) {
		t.Errorf("user %v, %d own volumes, services %q", in.userErr, in.userVolumes, in.serviceNames)
	}
	if in.fileCommands != testHost.dir+"/file-commands" || in.runnerFileCommands != work+"/_temp/_runner_file_commands" || in.toolCache != work+"/_temp/_airlock_tool_cache" {
		t.Errorf("file commands %s, the runner's %s, tool cache %s", in.fileCommands, in.runnerFileCommands, in.toolCache)
	}
	if h, _ := in.mounts.Host("/github/workflow/event.json"); h != work+"/_temp/_github_workflow/event.json" {
		t.Errorf("the event is at %q", h)
	}
	pr := in.pr
	if pr.Event == nil || pr.Event.Number != 7 || pr.Event.Author != "Copilot" || pr.Base != testBase || pr.Head != testHead || pr.Repository != "https://github.com/acme/app" {
		t.Errorf("pull request %+v, event %+v", pr.PullRequest, pr.Event)
	}
	if pr.owner != "acme" || pr.repo != "app" || !slices.Equal(pr.commits, []string{testHead, testMerge}) {
		t.Errorf("repository %s/%s, commits %q", pr.owner, pr.repo, pr.commits)
	}
}

// The event decides the pull request: none without an event file or for
// an event of another kind; an error that says what was wrong for one
// that does not read or parse (also run by the hook, TestEventPayload).
func TestPlanInputsEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event eventFile
		err   string
		// The pull request's number (0: none), its repository's URL and
		// the commits a checkout may be at.
		number     int
		repository string
		commits    []string
	}{
		{"a pull request", testEvent(`"acme/app"`), "", 7, "https://github.com/acme/app", []string{testHead, testMerge}},
		{"no event file", eventFile{err: fs.ErrNotExist}, "", 0, "", nil},
		// A push event (docs.github.com: push).
		{"a push", eventFile{data: []byte(`{"ref": "refs/heads/main", "before": "` + testBase + `", "after": "` + testHead + `"}`)}, "", 0, "", nil},
		{"not JSON", eventFile{data: []byte(`{"pull_request": {"number": 7,`)}, "the event payload (/github/workflow/event.json): event payload is not a GitHub event (JSON)", 0, "", nil},
		{"empty", eventFile{data: []byte{}}, "the event payload (/github/workflow/event.json): event payload is not a GitHub event (JSON)", 0, "", nil},
		{"odd bytes", eventFile{data: []byte("\x00\xff\xfe{\"pull_request\"\x1b[2J")}, "the event payload (/github/workflow/event.json): event payload is not a GitHub event (JSON)", 0, "", nil},
		{"unreadable", eventFile{err: errors.New("/home/runner/_work/_temp/_github_workflow/event.json is larger than 26214400 bytes")}, "the event payload (/github/workflow/event.json): /home/runner/_work/_temp/_github_workflow/event.json is larger than", 0, "", nil},
		{"a pull request without its head", eventFile{data: []byte(`{"pull_request": {"number": 7, "user": {"login": "Copilot"}, "base": {"sha": "` + testBase + `"}}}`)}, "the event payload (/github/workflow/event.json): event payload lacks the pull request's author, base or head commit", 0, "", nil},
		// A base repository that is no owner/name: no repository to ask
		// the GitHub API about, the pull request still is one.
		{"no owner/name", testEvent(`"acme/app/x"`), "", 7, "", []string{testHead, testMerge}},
		{"a name with a space", testEvent(`"acme/a b"`), "", 7, "", []string{testHead, testMerge}},
		{"no repository", testEvent(`""`), "", 7, "", []string{testHead, testMerge}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := planInputs(runnerArgs(t, payload{Image: "node:20"}), tc.event, testHost)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			number := 0
			if in.pr.Event != nil {
				number = in.pr.Event.Number
			}
			if number != tc.number || in.pr.Repository != tc.repository || !slices.Equal(in.pr.commits, tc.commits) {
				t.Errorf("pull request #%d of %q at %q, want #%d of %q at %q", number, in.pr.Repository, in.pr.commits, tc.number, tc.repository, tc.commits)
			}
			if (in.pr.owner == "") != (tc.repository == "") {
				t.Errorf("repository %q/%q for %q", in.pr.owner, in.pr.repo, tc.repository)
			}
		})
	}
}

// What else of the payload can be wrong, or odd: a job without a
// container, mounts airlock cannot take, the workflow's --user.
func TestPlanInputsPayload(t *testing.T) {
	user := func(uid, gid uint32) *gvisor.User { return &gvisor.User{UID: uid, GID: gid} }
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name  string
		job   payload
		edits []string // old, new pairs on the runner's line
		err   string   // planInputs' error
		// The workflow's --user, and what is wrong with it (an error
		// only where the policy lets the image choose).
		user    *gvisor.User
		userErr string
		// The checkout in the work directory.
		trustDir string
	}{
		{name: "the runner's job", job: payload{Image: "node:20"}, trustDir: "app/app"},
		// A job with services and no job container: the runner sends
		// container null (ContainerHookManager.PrepareJobAsync:
		// jobContainer?.GetHookContainer()); the reference docker hook
		// goes on without one (packages/docker/src/hooks/prepare-job.ts).
		{name: "no container", job: payload{NoContainer: true, Services: []servicePayload{{Image: "redis"}}},
			err: "the job has no container: airlock needs container: in every job (ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER=true)"},
		{name: "no work directory", job: payload{Image: "node:20"}, edits: []string{`"targetVolumePath":"/__w"`, `"targetVolumePath":"/elsewhere"`},
			err: "the runner gave no mount for /__w"},
		{name: "a mount below /__w from elsewhere", job: payload{Image: "node:20"}, edits: []string{`"sourceVolumePath":"/home/runner/_work/_actions"`, `"sourceVolumePath":"/srv/actions"`, `"targetVolumePath":"/__w/_actions"`, `"targetVolumePath":"/__w/cache"`},
			err: "mount /__w/cache is not below the runner's work directory; airlock needs it there"},
		{name: "a working directory that climbs out", job: payload{Image: "node:20"}, edits: []string{`"workingDirectory":"/__w/app/app"`, `"workingDirectory":"/__w/app/../../etc"`}},
		{name: "a user", job: payload{Image: "node:20", Options: str("--cpus 1 --user=1001:1002")}, user: user(1001, 1002), trustDir: "app/app"},
		{name: "root", job: payload{Image: "node:20", Options: str("-u root")}, user: user(0, 0), trustDir: "app/app"},
		{name: "a user's name", job: payload{Image: "node:20", Options: str("--user runner")}, userErr: `the container's options: --user "runner": airlock takes a numeric UID[:GID] (or root)`, trustDir: "app/app"},
		{name: "options that do not parse", job: payload{Image: "node:20", Options: str("--label 'unclosed")}, userErr: `the container's options "--label 'unclosed" do not parse`, trustDir: "app/app"},
		{name: "odd bytes in the options", job: payload{Image: "node:20", Options: str("--user \x00\xff\u202e1")}, userErr: "airlock takes a numeric UID[:GID] (or root)", trustDir: "app/app"},
		{name: "options too long", job: payload{Image: "node:20", Options: str(strings.Repeat("x", maxArgs+1))}, userErr: "the container's options are longer than 262144 bytes", trustDir: "app/app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := planInputs(runnerArgs(t, tc.job, tc.edits...), testEvent(`"acme/app"`), testHost)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch got := in.inputs.ContainerUser; {
			case (got == nil) != (tc.user == nil) || (got != nil && *got != *tc.user):
				t.Errorf("user %v, want %v", got, tc.user)
			case tc.userErr == "" && in.userErr != nil, tc.userErr != "" && (in.userErr == nil || !strings.Contains(in.userErr.Error(), tc.userErr)):
				t.Errorf("user error %v, want %q", in.userErr, tc.userErr)
			}
			if in.inputs.TrustDir != tc.trustDir {
				t.Errorf("TrustDir %q, want %q", in.inputs.TrustDir, tc.trustDir)
			}
			for _, m := range in.inputs.Mounts {
				if strings.Contains(m.Source, "docker.sock") || m.Source == "/etc" {
					t.Errorf("mounted: %+v", m)
				}
			}
		})
	}
}
