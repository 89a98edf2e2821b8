package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/runnersim"
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
	// sim is the runner's side: its payloads and directories.
	sim runnersim.Runner
	// job is prepare_job's payload (its container and services), which
	// a test may change before h.prepare.
	job payload
	// worker, when set, is a fake runner's bin/Runner.Worker (a shell)
	// that the hook's node runs under, as under the real runner.
	worker string
}

// payload and servicePayload are the runner's prepare_job and step
// payloads (internal/runnersim's templates).
type (
	payload        = runnersim.Payload
	servicePayload = runnersim.Service
)

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
	h.repo = filepath.Join(h.work, "app", "app")
	h.sim = runnersim.Runner{Work: h.work, Disk: h.work, Externals: h.externals, Repo: h.repo}
	h.sim.MakeDirs(t)
	os.MkdirAll(filepath.Join(h.externals, "node20", "bin"), 0o755)
	// The runner's node for JavaScript actions, where the runner keeps it.
	linkOrCopy(t, nodeBinary(t), filepath.Join(h.externals, "node20", "bin", "node"))
	repo, base, head := testhost.PullRequestRepo(t, "sandbox: limits: pids: 400\n", map[string]string{".github/workflows/ci.yml": agentWorkflow})
	h.base, h.head = base, head
	// The checkout, where the runner has it: _work/app/app.
	os.MkdirAll(filepath.Dir(h.repo), 0o755)
	if out, err := exec.Command("cp", "-a", repo, h.repo).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// The runner runs as root: all of this is root's.
	h.origin = repo
	h.sim.WriteEvent(t, h.base, h.head)

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

// render fills a template of the runner's payloads with p and this
// host's paths, as one compact line, as the runner writes it.
func (h *runnerHost) render(command string, p payload) []byte {
	h.t.Helper()
	return runnersim.Render(h.t, command, h.sim.Fill(p))
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
	p.Response = h.sim.NewResponseFile(h.t)
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
	r, err := runnersim.ReadResponse(resp, true, len(h.job.Services))
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
	stateJSON, _ := json.Marshal(state)
	code, out, _ := h.send(RunScriptStep, h.sim.ScriptStep(h.t, stateJSON, shell, format, script, env))
	return code, out
}

func (h *runnerHost) cleanup(state map[string]any) (int, string) {
	stateJSON, _ := json.Marshal(state)
	code, out, _ := h.send(CleanupJob, payload{State: stateJSON})
	return code, out
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
