package hook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/runner"
)

// runnerHost lays out what the runner has on its host for a job: the work
// directory with the checked-out repository (a real git repository with a
// base and an agent's head commit), externals, temp, the GitHub home and
// workflow directories with the event, and the hook's configuration.
type runnerHost struct {
	t                      testing.TB
	root, work, temp, repo string
	base, head             string
	env                    []string
	org                    string // the organisation policy's directory
	origin                 string // the repository GitHub has (a clone the job never touches)
	prepareJSON            []byte
	keyPub                 string
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
	h.repo = filepath.Join(h.work, "app", "app")
	for _, d := range []string{h.repo, h.temp, filepath.Join(h.temp, "_github_home"), filepath.Join(h.temp, "_github_workflow"), filepath.Join(h.root, "externals")} {
		os.MkdirAll(d, 0o755)
	}
	repo, git := testhost.NewRepo(t)
	os.RemoveAll(h.repo)
	h.repo = repo
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
	dst := filepath.Join(h.work, "app", "app")
	os.MkdirAll(filepath.Dir(dst), 0o755)
	if out, err := exec.Command("cp", "-a", repo, dst).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	h.origin, h.repo = repo, dst
	exec.Command("chown", "-R", "1000:1000", h.work).Run()
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
	t.Setenv(runner.PasswordEnv, "")
	os.Unsetenv(runner.PasswordEnv)
	if err := attest.WriteKeyPair(filepath.Join(dir, "k"), nil); err != nil {
		t.Fatalf("keys: %v", err)
	}
	h.keyPub = filepath.Join(dir, "k.pub")
	org := filepath.Join(dir, "org")
	h.org = org
	os.MkdirAll(org, 0o755)
	os.WriteFile(filepath.Join(org, "org.cue"), []byte("package airlock\negress: default: \"deny\"\n"), 0o644)
	h.env = []string{JobsRootEnv + "=" + filepath.Join(state, "hooks"), OrgDirEnv + "=" + org, AttestKeyEnv + "=" + filepath.Join(dir, "k.key")}

	// The runner's prepare_job call, shaped like the example of the
	// protocol, with this host's paths.
	mounts := []map[string]any{
		{"sourceVolumePath": "/var/run/docker.sock", "targetVolumePath": "/var/run/docker.sock", "readOnly": false},
		{"sourceVolumePath": h.work, "targetVolumePath": "/__w", "readOnly": false},
		{"sourceVolumePath": filepath.Join(h.root, "externals"), "targetVolumePath": "/__e", "readOnly": true},
		{"sourceVolumePath": h.temp, "targetVolumePath": "/__w/_temp", "readOnly": false},
		{"sourceVolumePath": filepath.Join(h.temp, "_github_home"), "targetVolumePath": "/github/home", "readOnly": false},
		{"sourceVolumePath": filepath.Join(h.temp, "_github_workflow"), "targetVolumePath": "/github/workflow", "readOnly": false},
	}
	h.prepareJSON, _ = json.Marshal(map[string]any{"command": "prepare_job", "state": map[string]any{}, "args": map[string]any{
		"container": map[string]any{
			"image": "node:20", "workingDirectory": "/__w/app/app", "environmentVariables": map[string]string{"NODE_ENV": "test"},
			"userMountVolumes":   []map[string]any{{"sourceVolumePath": "/etc", "targetVolumePath": "/host-etc", "readOnly": false}},
			"systemMountVolumes": mounts,
			"registry":           map[string]string{"username": "foo", "password": "registry-secret-bar", "serverUrl": "https://index.docker.io/v1"},
			"portMappings":       []string{},
		},
		"services": []any{},
	}})
	return h
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

// call runs one hook call in a fresh process, as the runner does.
func (h *runnerHost) call(input []byte) (int, string) {
	h.t.Helper()
	cmd := hookCommand(h.t)
	cmd.Env = append(cmd.Env, h.env...)
	cmd.Stdin = bytes.NewReader(input)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

func (h *runnerHost) prepare() map[string]any {
	h.t.Helper()
	resp := filepath.Join(h.temp, "response.json")
	os.WriteFile(resp, nil, 0o644)
	var in map[string]any
	json.Unmarshal(h.prepareJSON, &in)
	in["responseFile"] = resp
	b, _ := json.Marshal(in)
	if code, out := h.call(b); code != 0 {
		h.t.Fatalf("prepare_job: exit %d: %s", code, out)
	}
	line, _ := os.ReadFile(resp)
	var r map[string]any
	if err := json.Unmarshal(line, &r); err != nil {
		h.t.Fatalf("response %q: %v", line, err)
	}
	state := r["state"].(map[string]any)
	// A failing test still ends its job, as the runner would.
	h.t.Cleanup(func() { h.cleanup(state) })
	return state
}

func (h *runnerHost) step(state map[string]any, script string) (int, string) {
	h.t.Helper()
	name := filepath.Join(h.temp, "step.sh")
	os.WriteFile(name, []byte(script), 0o644)
	b, _ := json.Marshal(map[string]any{"command": "run_script_step", "state": state, "args": map[string]any{
		"entryPoint": "bash", "entryPointArgs": []string{"-e", "/__w/_temp/step.sh"},
		"environmentVariables": map[string]string{"GITHUB_WORKSPACE": "/__w/app/app", "STEP_VAR": "x"},
		"prependPath":          []string{"/__w/_temp/bin"}, "workingDirectory": "/__w/app/app",
	}})
	return h.call(b)
}

func (h *runnerHost) cleanup(state map[string]any) (int, string) {
	b, _ := json.Marshal(map[string]any{"command": "cleanup_job", "state": state, "args": map[string]any{}})
	return h.call(b)
}

// A whole job as the runner drives it: a fresh hook process per call;
// state persists across steps in the one sandbox; the job's volumes and
// the Docker socket are not mounted, the registry password goes nowhere;
// cleanup writes a signed attestation that verifies.
func TestHookJob(t *testing.T) {
	h := newRunnerHost(t)
	// The GitHub API, faked with the real shapes: the policy at the base
	// commit through the contents API (the workspace has no git objects
	// at prepare time on a real runner), and the check run.
	var mu sync.Mutex
	var calls []string
	var conclusion, checkText string
	var annotations int
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/repos/acme/app/contents/.github/airlock.cue" && r.URL.Query().Get("ref") == h.base:
			json.NewEncoder(w).Encode(map[string]any{"type": "file", "encoding": "base64", "size": 26, "path": ".github/airlock.cue",
				"content": base64.StdEncoding.EncodeToString([]byte("sandbox: limits: pids: 321\n"))})
		// The authored diff: the merge base, then trees and blobs.
		case r.Method == "GET" && r.URL.Path == "/repos/acme/app/compare/"+h.base+"..."+h.head:
			json.NewEncoder(w).Encode(map[string]any{"merge_base_commit": map[string]any{"sha": h.base}, "files": []any{}})
		case strings.HasPrefix(r.URL.Path, "/repos/acme/app/git/"):
			gitHubTrees(t, h.origin)(w, r)
		case r.Method == "POST" && r.URL.Path == "/repos/acme/app/check-runs":
			json.NewEncoder(w).Encode(map[string]any{"id": 5, "name": "airlock"})
		case r.Method == "PATCH" && r.URL.Path == "/repos/acme/app/check-runs/5":
			var body struct {
				Conclusion string `json:"conclusion"`
				Output     struct {
					Text        string `json:"text"`
					Annotations []any  `json:"annotations"`
				} `json:"output"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Conclusion != "" {
				conclusion = body.Conclusion
			}
			if body.Output.Text != "" {
				checkText = body.Output.Text
			}
			annotations += len(body.Output.Annotations)
			json.NewEncoder(w).Encode(map[string]any{"id": 5})
		default:
			http.Error(w, `{"message":"Not Found"}`, 404)
		}
	}))
	defer api.Close()
	h.env = append(h.env, GitHubAPIEnv+"="+api.URL, GitHubTokenEnv+"=ghp_hooktesttoken")
	// On a real runner the checkout comes later: no git objects yet.
	os.Rename(filepath.Join(h.repo, ".git"), filepath.Join(h.root, "git-later"))
	state := h.prepare()
	os.Rename(filepath.Join(h.root, "git-later"), filepath.Join(h.repo, ".git"))
	steps := []struct {
		script string
		code   int
		want   string
	}{
		{`echo "one $STEP_VAR $(pwd) $(id -u)"; echo kept > /tmp/state; sleep 600 & echo $! > /tmp/bg`, 0, "one x /__w/app/app 1000"},
		{`cat /tmp/state; kill -0 $(cat /tmp/bg) && echo background-alive; ls /host-etc /var/run/docker.sock 2>&1 | head -2; echo '{"state":{}}' > /__w/_temp/_runner_hook_responses/r.json || echo responses-refused; echo $PATH`, 0, "responses-refused"},
		{`git log --oneline | wc -l; env | grep -c registry-secret-bar || true; grep -rls registry-secret-bar /__w /github /tmp /run 2>/dev/null | head -1; exit 3`, 3, "2"},
	}
	for i, s := range steps {
		code, out := h.step(state, s.script)
		if code != s.code || !strings.Contains(out, s.want) {
			t.Fatalf("step %d: exit %d, output %s", i+1, code, out)
		}
		// stdout and stderr are separate streams: their lines may come in
		// either order.
		if i == 1 && (!strings.Contains(out, "background-alive") || !strings.Contains(out, "No such file") || !strings.Contains(out, "\n/__w/_temp/bin:")) {
			t.Errorf("step 2: %s", out)
		}
		if strings.Contains(out, "registry-secret-bar") {
			t.Errorf("the registry password reached the sandbox: %s", out)
		}
	}
	// actions/upload-artifact gets an interim attestation of the job so
	// far in $RUNNER_TEMP/airlock, written without following what the job
	// planted there.
	upload := func() (int, string) {
		b, _ := json.Marshal(map[string]any{"command": "run_script_step", "state": state, "args": map[string]any{
			"entryPoint": "bash", "entryPointArgs": []string{"-c", `wc -c < /__w/_temp/airlock/attestation.sigstore.json`, "/__w/_actions/actions/upload-artifact/v4/dist/upload/index.js"},
			"environmentVariables": map[string]string{}, "prependPath": []string{}, "workingDirectory": "/__w/app/app",
		}})
		return h.call(b)
	}
	if code, out := h.step(state, `ln -s /tmp /__w/_temp/airlock`); code != 0 {
		t.Fatalf("plant: %d %s", code, out)
	}
	if code, out := upload(); code == 0 || !strings.Contains(out, "no interim attestation for the upload") {
		t.Errorf("upload through a planted symlink: exit %d: %s", code, out)
	}
	if _, err := os.Stat("/tmp/" + interimName); err == nil {
		t.Errorf("the interim attestation was written through the job's symlink")
	}
	os.Remove(filepath.Join(h.temp, "airlock"))
	if code, out := upload(); code != 0 || !strings.Contains(out, "interim attestation of the job so far") {
		t.Fatalf("upload: exit %d: %s", code, out)
	}
	if _, iv, err := verified(t, h.keyPub, filepath.Join(h.temp, "airlock", interimName), ""); err != nil || !strings.Contains(iv, `"final": false`) || !strings.Contains(iv, "exit") {
		t.Errorf("interim attestation: %v %s", err, iv)
	}
	code, out := h.cleanup(state)
	if !strings.Contains(out, "airlock: attestation ") || code == 0 {
		t.Fatalf("cleanup of a failed job: exit %d: %s", code, out)
	}
	bundle, v, vj := h.finalAttestation(h.head)
	if !strings.Contains(vj, `"containerImage": "node:20"`) || !strings.Contains(vj, `"final": true`) {
		t.Errorf("the job image is not recorded: %.400s", vj)
	}
	if p := v.Predicate; p.Verdict.ExitCode != 3 || len(p.Policy.Sources) != 2 {
		t.Errorf("the attestation does not carry the failed step and both policies: exit %d, %d sources", p.Verdict.ExitCode, len(p.Policy.Sources))
	}
	// The authored diff came through the API: the new workflow and its
	// pull_request_target trigger are findings, annotated on the check run.
	for _, w := range []string{`"phase": "authored"`, `"path": ".github/workflows/ci.yml"`, "pull_request_target", `"agent": true`} {
		if !strings.Contains(vj, w) {
			t.Errorf("the attestation lacks %s", w)
		}
	}
	mu.Lock()
	// The bundle is published in the check run, byte for byte.
	_, published, _ := strings.Cut(checkText, "```json\n")
	published, _, _ = strings.Cut(published, "\n```")
	if onDisk, _ := os.ReadFile(bundle); published != string(onDisk) {
		t.Errorf("the check run does not carry the bundle: %.300s", checkText)
	}
	if conclusion != "failure" || annotations < 2 {
		t.Errorf("check run conclusion %q, %d annotations; API calls %v", conclusion, annotations, calls)
	}
	mu.Unlock()
	// A second cleanup is harmless.
	if code, out := h.cleanup(state); code != 0 {
		t.Errorf("second cleanup: exit %d: %s", code, out)
	}
}

// cleanup_job while a step still runs (the runner cancelled it): the step
// is killed and nothing is left; cleanup after a failed prepare works.
func TestHookCancelAndFailedPrepare(t *testing.T) {
	h := newRunnerHost(t)
	state := h.prepare()
	done := make(chan string, 1)
	go func() {
		_, out := h.step(state, "touch /__w/_temp/started; exec sleep 600")
		done <- out
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(h.temp, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("step never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out := h.cleanup(state); code != 0 && !strings.Contains(out, "failed") {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the running step survived cleanup")
	}
	if _, err := os.Stat(state["jobDir"].(string)); err == nil {
		t.Error("job directory left behind")
	}

	// A prepare that fails (no work directory mount) answers nothing;
	// the runner's cleanup with an empty state succeeds.
	bad := bytes.Replace(h.prepareJSON, []byte(`"/__w"`), []byte(`"/elsewhere"`), 1)
	resp := filepath.Join(h.temp, "response2.json")
	os.WriteFile(resp, nil, 0o644)
	var in map[string]any
	json.Unmarshal(bad, &in)
	in["responseFile"] = resp
	b, _ := json.Marshal(in)
	if code, out := h.call(b); code == 0 || !strings.Contains(out, "/__w") {
		t.Errorf("bad prepare: exit %d: %s", code, out)
	}
	if code, out := h.cleanup(map[string]any{}); code != 0 {
		t.Errorf("cleanup after failed prepare: exit %d: %s", code, out)
	}
}

// BenchmarkHookStep: a run_script_step of `true` through a fresh hook
// process (the runner's way: bash -e on a script) against an exec of the
// same bash into an existing sandbox (what airlock run does per step).
// Target: under 100 ms added. See BENCHMARKS.md.
func BenchmarkHookStep(b *testing.B) {
	h := newRunnerHost(b)
	state := h.prepare()
	defer h.cleanup(state)
	ws := workspace(b)
	sb, err := gvisor.Create(context.Background(), gvisor.Config{Workspace: ws, StateRoot: stateDir(b), Limits: gvisor.DefaultLimits()})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	var direct, viaHook time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if res, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"bash", "-e", "-c", "true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(err)
		}
		t1 := time.Now()
		if code, out := h.step(state, "true"); code != 0 {
			b.Fatalf("hook step: %d %s", code, out)
		}
		direct, viaHook = direct+t1.Sub(t0), viaHook+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Milliseconds())/n, "exec-ms")
	b.ReportMetric(float64(viaHook.Milliseconds())/n, "hook-ms")
	b.ReportMetric(float64((viaHook-direct).Milliseconds())/n, "added-ms")
}

// SIGTERM to a job's daemon (the runner host shutting down) ends the job
// and its sandbox even when its socket is gone with its directory.
func TestHookDaemonTerm(t *testing.T) {
	h := newRunnerHost(t)
	state := h.prepare()
	dir := state["jobDir"].(string)
	pid := daemonPID(dir)
	if pid == 0 {
		t.Fatal("no daemon")
	}
	os.Remove(filepath.Join(dir, daemonSocket))
	syscall.Kill(pid, syscall.SIGTERM)
	waitGone(pid, 30*time.Second)
	if syscall.Kill(pid, 0) == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(st), ") Z ") {
			t.Fatal("the daemon is still running")
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the job directory is still there")
	}
}

// The policy's artifact subjects are attested under the hook as under
// airlock run, read from the repository without following the job's
// symlinks: a link to a host file is no subject.
func TestHookArtifactSubjects(t *testing.T) {
	h := newRunnerHost(t)
	os.WriteFile(filepath.Join(h.org, "subjects.cue"), []byte("package airlock\nattest: subjects: [\"dist/*.txt\"]\n"), 0o644)
	state := h.prepare()
	if code, out := h.step(state, `mkdir -p dist && printf built > dist/app.txt && ln -s /etc/passwd dist/passwd.txt`); code != 0 {
		t.Fatalf("step: exit %d: %s", code, out)
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
	_, v, _ := h.finalAttestation(h.head)
	sum := sha256.Sum256([]byte("built"))
	if len(v.Artifacts) != 1 || v.Artifacts[0].Name != "dist/app.txt" || v.Artifacts[0].Digest["sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("artifacts: %+v", v.Artifacts)
	}
}
