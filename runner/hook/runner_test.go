package hook

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testtool"
	"github.com/airlock-ci/airlock/runner/report"
)

// The official runner, as far as the hook sees it: the directories it
// keeps on its host for a job, the payloads it writes on the hook's
// standard input (testdata/runner, in the runner's own shape), the way it
// launches the hook (node index.js, the payload on stdin, the response
// file created empty first) and the way it reads the response
// (ContainerHookManager.GetResponse, PrepareJobResponse.Validate,
// UpdateJobContext).

// runnerHost lays out what the runner has on its host for a job: the work
// directory with the checked-out repository (a real git repository with a
// base and an agent's head commit), the actions, tool and temp
// directories, externals with node, the GitHub home and workflow
// directories with the event, and the hook's configuration.
type runnerHost struct {
	t                      testing.TB
	root, work, temp, repo string
	externals              string
	base, head             string
	env                    []string
	org                    string // the organisation policy's directory
	origin                 string // the repository GitHub has (a clone the job never touches)
	keyPub                 string
	// job is prepare_job's payload (its container and services), which
	// a test may change before h.prepare.
	job payload
	// worker, when set, is a fake runner's bin/Runner.Worker (a shell)
	// that the hook's node runs under, as under the real runner.
	worker string
}

// payload fills a template of testdata/runner.
type payload struct {
	Response                                   string
	Work, Externals, Temp, Actions, Tool, Home string
	Workflow, FileCommands, Repo               string
	// prepare_job's job container (none: NoContainer, a job with
	// services only) and services.
	NoContainer bool
	Image       string
	Options     *string
	// The container's registry block: none unless one of these is set
	// (RegistryUser "octocat" unless given).
	RegistryUser, RegistryPassword string
	Services                       []servicePayload
	// A step's.
	EntryPoint  string
	Args        []string
	Env         map[string]string
	PrependPath any // a list, or a string (runners up to 2.293)
	Dockerfile  *string
	State       json.RawMessage
}

// servicePayload is one service of prepare_job.
type servicePayload struct {
	Image   string
	Args    []string
	Options *string
	Env     map[string]string
	Ports   []string
	// The service's registry block: none unless RegistryUser is set.
	RegistryUser, RegistryPassword string
}

// agentWorkflow is what the agent's pull request adds: a workflow that
// runs with the base repository's secrets.
const agentWorkflow = "on: pull_request_target\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo hi\n"

func newRunnerHost(t testing.TB) *runnerHost {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	h := &runnerHost{t: t, root: t.TempDir()}
	os.Chmod(h.root, 0o755)
	h.work = filepath.Join(h.root, "_work")
	h.temp = filepath.Join(h.work, "_temp")
	h.externals = filepath.Join(h.root, "externals")
	for _, d := range []string{h.temp, filepath.Join(h.temp, "_github_home"), filepath.Join(h.temp, "_github_workflow"), filepath.Join(h.temp, "_runner_file_commands"),
		filepath.Join(h.temp, responsesDir), filepath.Join(h.work, "_actions"), filepath.Join(h.work, "_tool"), filepath.Join(h.externals, "node20", "bin")} {
		os.MkdirAll(d, 0o755)
	}
	// The runner's node for JavaScript actions, where the runner keeps it.
	linkOrCopy(t, nodeBinary(t), filepath.Join(h.externals, "node20", "bin", "node"))
	repo, git := testhost.NewRepo(t)
	os.MkdirAll(filepath.Join(repo, ".github"), 0o755)
	os.WriteFile(filepath.Join(repo, ".github", "airlock.cue"), []byte("sandbox: limits: pids: 400\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main\n"), 0o644)
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	h.base = git("rev-parse", "HEAD")
	os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main\n// agent\n"), 0o644)
	os.MkdirAll(filepath.Join(repo, ".github", "workflows"), 0o755)
	os.WriteFile(filepath.Join(repo, ".github", "workflows", "ci.yml"), []byte(agentWorkflow), 0o644)
	git("add", "-A")
	git("commit", "-q", "-m", "agent")
	h.head = git("rev-parse", "HEAD")
	// The checkout, where the runner has it: _work/app/app.
	h.repo = filepath.Join(h.work, "app", "app")
	os.MkdirAll(filepath.Dir(h.repo), 0o755)
	if out, err := exec.Command("cp", "-a", repo, h.repo).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// The runner runs as root: all of this is root's.
	h.origin = repo
	event := map[string]any{"action": "opened", "number": 7, "pull_request": map[string]any{
		"number": 7, "user": map[string]any{"login": "Copilot", "type": "Bot"},
		"head": map[string]any{"ref": "copilot/x", "sha": h.head, "repo": map[string]any{"full_name": "acme/app"}},
		"base": map[string]any{"ref": "main", "sha": h.base, "repo": map[string]any{"full_name": "acme/app"}},
	}}
	eb, _ := json.Marshal(event)
	os.WriteFile(filepath.Join(h.temp, "_github_workflow", "event.json"), eb, 0o644)

	state := stateDir(t)
	dir := t.TempDir()
	// The hook processes inherit this environment: no key password.
	t.Setenv(report.PasswordEnv, "")
	os.Unsetenv(report.PasswordEnv)
	if err := attest.WriteKeyPair(filepath.Join(dir, "k"), nil); err != nil {
		t.Fatalf("keys: %v", err)
	}
	h.keyPub = filepath.Join(dir, "k.pub")
	h.org = filepath.Join(dir, "org")
	os.MkdirAll(h.org, 0o755)
	// The job's image (node:20, as the runner sends it) is not mapped,
	// and nothing is pulled: the job runs on the host's root, and these
	// tests dial no registry (the pulls are runner/images' and runner's
	// tests, against a registry on loopback).
	os.WriteFile(filepath.Join(h.org, "org.cue"), []byte("package airlock\negress: default: \"deny\"\nimages: pull: false\n"), 0o644)
	h.env = []string{JobsRootEnv + "=" + filepath.Join(state, "hooks"), OrgDirEnv + "=" + h.org, AttestKeyEnv + "=" + filepath.Join(dir, "k.key")}
	h.job = payload{Image: "node:20", RegistryPassword: "registry-secret-bar", Services: []servicePayload{}}
	return h
}

// nodeBinary is the node the tests launch the hook with, as the runner
// launches it with its own (skipped without node, or a failure under
// AIRLOCK_REQUIRE_NODE, which CI sets).
func nodeBinary(t testing.TB) string {
	t.Helper()
	node := testtool.Path(t, testtool.Node, "the hook's tests launch its index.js with node, as the runner does with its own")
	real, err := filepath.EvalSymlinks(node)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// linkOrCopy puts the file from at to: a hard link where it can.
func linkOrCopy(t testing.TB, from, to string) {
	t.Helper()
	if os.Link(from, to) == nil {
		return
	}
	copyFile(t, from, to)
}

// hooksRoot is the hook's directory on this host.
func (h *runnerHost) hooksRoot() string {
	for _, e := range h.env {
		if v, ok := strings.CutPrefix(e, JobsRootEnv+"="); ok {
			return v
		}
	}
	return ""
}

// render fills a template of testdata/runner with p and this host's
// paths, as one compact line, as the runner writes it.
func (h *runnerHost) render(command string, p payload) []byte {
	h.t.Helper()
	p.Work, p.Externals, p.Temp = h.work, h.externals, h.temp
	p.Actions, p.Tool = filepath.Join(h.work, "_actions"), filepath.Join(h.work, "_tool")
	p.Home, p.Workflow = filepath.Join(h.temp, "_github_home"), filepath.Join(h.temp, "_github_workflow")
	p.FileCommands, p.Repo = filepath.Join(h.temp, "_runner_file_commands"), h.repo
	return renderPayload(h.t, command, p)
}

// renderPayload fills a template of testdata/runner with p (its paths
// included), as one compact line, as the runner writes it.
func renderPayload(t testing.TB, command string, p payload) []byte {
	t.Helper()
	if p.State == nil {
		p.State = json.RawMessage("null")
	}
	tmpl, err := template.New(command + ".json").Funcs(template.FuncMap{"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}, "registryServer": registryServer}).ParseFiles(filepath.Join("testdata", "runner", command+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var b, line bytes.Buffer
	if err := tmpl.Execute(&b, p); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&line, b.Bytes()); err != nil {
		t.Fatalf("%s: %v\n%s", command, err, b.String())
	}
	return line.Bytes()
}

// registryServer is the serverUrl the runner sends with a container's
// credentials (actions/runner src/Runner.Worker/Container/DockerUtil.cs,
// ParseRegistryHostnameFromImageName, as ContainerInfo.cs sets
// RegistryServer): the first component of a name of two that has a ':'
// or a '.', the first of a name of three or more, else "" (Docker Hub).
func registryServer(image string) string {
	parts := strings.Split(image, "/")
	switch {
	case len(parts) == 2 && strings.ContainsAny(parts[0], ":."):
		return parts[0]
	case len(parts) > 2:
		return parts[0]
	}
	return ""
}

// newResponseFile is where the runner wants the call's response: a new
// empty file in _runner_hook_responses (GenerateResponsePath,
// IOUtil.CreateEmptyFile).
func (h *runnerHost) newResponseFile() string {
	b := make([]byte, 16)
	rand.Read(b)
	p := filepath.Join(h.temp, responsesDir, hex.EncodeToString(b)+".json")
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// call launches the hook as the runner does, with input on its standard
// input, and returns its exit status and output. The runner's node runs
// index.js, whose PATH starts with what the job put in $GITHUB_PATH.
func (h *runnerHost) call(input []byte) (int, string) {
	h.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	index, err := filepath.Abs("index.js")
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(nodeBinary(h.t), index)
	if h.worker != "" {
		// A child of the worker, not an exec: the runner's process tree.
		cmd = exec.Command(h.worker, "-c", `"$@"; exit $?`, "sh", nodeBinary(h.t), index)
	}
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+exe, hookProcessEnv+"=1", "PATH="+filepath.Join(h.temp, "bin")+":"+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, h.env...)
	cmd.Stdin = bytes.NewReader(append(input, '\n'))
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// send renders a command's payload and calls the hook with it. The
// response file is made and named as the runner does.
func (h *runnerHost) send(command string, p payload) (code int, out, response string) {
	h.t.Helper()
	p.Response = h.newResponseFile()
	code, out = h.call(h.render(command, p))
	return code, out, p.Response
}

// prepare runs prepare_job with h.job and returns the job's state, read
// from the response as the runner reads it.
func (h *runnerHost) prepare() map[string]any {
	h.t.Helper()
	code, out, resp := h.send(PrepareJob, h.job)
	if code != 0 {
		h.t.Fatalf("prepare_job: exit %d: %s", code, out)
	}
	r, err := readResponse(resp, true, len(h.job.Services))
	if err != nil {
		h.t.Fatalf("prepare_job's response: %v", err)
	}
	var state map[string]any
	json.Unmarshal(r.State, &state)
	// A failing test still ends its job, as the runner would.
	h.t.Cleanup(func() { h.cleanup(state) })
	return state
}

// prepareDaemon runs prepare_job and returns the state, the job's
// directory and its daemon's pid.
func (h *runnerHost) prepareDaemon() (state map[string]any, dir string, pid int) {
	h.t.Helper()
	state = h.prepare()
	dir = state["jobDir"].(string)
	if pid = daemonPID(dir); pid == 0 {
		h.t.Fatal("no daemon")
	}
	return state, dir, pid
}

// step runs a script step as the runner runs a run: step with the
// default bash: bash --noprofile --norc -e -o pipefail {0}, the script
// written to the runner's temp directory.
func (h *runnerHost) step(state map[string]any, script string) (int, string) {
	h.t.Helper()
	return h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", script, nil)
}

// script runs a script step with the runner's own shell format (a
// ScriptHandlerHelpers format: arguments with {0} for the script file),
// cut at single spaces as the runner cuts it.
func (h *runnerHost) script(state map[string]any, shell, format, script string, env map[string]string) (int, string) {
	h.t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	name := hex.EncodeToString(b) + ".sh"
	os.WriteFile(filepath.Join(h.temp, name), []byte(script), 0o644)
	stepEnv := map[string]string{"GITHUB_WORKSPACE": "/__w/app/app", "STEP_VAR": "x"}
	for k, v := range env {
		stepEnv[k] = v
	}
	stateJSON, _ := json.Marshal(state)
	code, out, _ := h.send(RunScriptStep, payload{
		EntryPoint: shell, Args: strings.Split(strings.ReplaceAll(format, "{0}", "/__w/_temp/"+name), " "),
		Env: stepEnv, PrependPath: []string{"/__w/_temp/bin"}, State: stateJSON,
	})
	return code, out
}

func (h *runnerHost) cleanup(state map[string]any) (int, string) {
	stateJSON, _ := json.Marshal(state)
	code, out, _ := h.send(CleanupJob, payload{State: stateJSON})
	return code, out
}

// runnerResponse is prepare_job's response as the runner reads it
// (HookResponse.cs: PrepareJobResponse); pointers tell a null from a
// missing value.
type runnerResponse struct {
	State   json.RawMessage `json:"state"`
	Context *struct {
		Container *struct {
			ID      *string `json:"id"`
			Network *string `json:"network"`
		} `json:"container"`
		Services json.RawMessage `json:"services"`
	} `json:"context"`
	IsAlpine *bool `json:"isAlpine"`
}

// responseService is one entry of context.services.
type responseService struct {
	ID      string             `json:"id"`
	Network string             `json:"network"`
	Ports   *map[string]string `json:"ports"`
}

// services are the response's services (none when it has none).
func (r runnerResponse) services() []responseService {
	var list []responseService
	if r.Context != nil {
		json.Unmarshal(r.Context.Services, &list)
	}
	return list
}

// readResponse reads a response file the way the runner does
// (ContainerHookManager.GetResponse and UpdateJobContext) and fails where
// the runner would: no file or an empty one for a job with a container,
// isAlpine missing, a state that is not an object (SaveHookState keeps
// the old one), services null, more of them than were asked for, or one
// with null ports (the runner iterates them without a null check).
// Encoding/json, like Newtonsoft, matches names without regard to case.
func readResponse(path string, hasContainer bool, services int) (runnerResponse, error) {
	var r runnerResponse
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		if hasContainer {
			return r, fmt.Errorf("response file is required but not found or empty: %v", err)
		}
		return r, nil
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("response %q: %v", b, err)
	}
	os.Remove(path) // the runner deletes it once read
	switch {
	case hasContainer && r.IsAlpine == nil:
		return r, fmt.Errorf("the property 'isAlpine' is required but was not found in the response file: %s", b)
	case len(r.State) == 0 || r.State[0] != '{':
		return r, fmt.Errorf("state is not an object: %s", b)
	case r.Context == nil:
		return r, nil // the runner sets no job context then
	case r.Context.Container != nil && r.Context.Container.ID == nil:
		return r, fmt.Errorf("context.container has no id: %s", b)
	}
	if string(r.Context.Services) == "null" {
		return r, fmt.Errorf("context.services is null: the runner counts it: %s", b)
	}
	if len(r.Context.Services) > 0 {
		var list []responseService
		if err := json.Unmarshal(r.Context.Services, &list); err != nil {
			return r, fmt.Errorf("context.services: %v: %s", err, b)
		}
		if len(list) != services {
			return r, fmt.Errorf("%d services answered for %d asked (the runner matches them by index): %s", len(list), services, b)
		}
		for i, s := range list {
			if s.Ports == nil {
				return r, fmt.Errorf("services[%d].ports is null: the runner dereferences it: %s", i, b)
			}
		}
	}
	return r, nil
}

// The event payload decides the pull request, and so the policy: one
// that is there but is not a GitHub event is an error that says what was
// wrong, never a job run as no pull request's; an event of another kind
// (a push) is a job without a pull request.
func TestEventPayload(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload string
		fails   string
	}{
		{"not JSON", `{"pull_request": {"number": 7,`, "the event payload (/github/workflow/event.json): event payload is not a GitHub event (JSON)"},
		{"a push", `{"ref": "refs/heads/main", "before": "0000000000000000000000000000000000000000", "after": "1111111111111111111111111111111111111111"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunnerHost(t)
			os.WriteFile(filepath.Join(h.temp, "_github_workflow", "event.json"), []byte(tc.payload), 0o644)
			if tc.fails == "" {
				h.prepare() // fails the test unless prepare_job passes; cleans up
				return
			}
			code, out, _ := h.send(PrepareJob, h.job)
			if code == 0 || !strings.Contains(out, tc.fails) {
				t.Fatalf("prepare_job: exit %d, want a failure saying %q: %s", code, tc.fails, out)
			}
		})
	}
}
