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

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/runnersim"
)

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
	// Copied, not renamed: the work directory is the job's bounded
	// overlay now, another filesystem.
	if out, err := exec.Command("cp", "-a", filepath.Join(h.root, "git-later"), filepath.Join(h.repo, ".git")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// As actions/checkout leaves it, run by the job's user.
	exec.Command("chown", "-R", "1000:1000", filepath.Join(h.repo, ".git")).Run()
	steps := []struct {
		script string
		code   int
		want   string
	}{
		{`echo "one $STEP_VAR $(pwd) $(id -u)"; echo kept > /tmp/state; sleep 600 & echo $! > /tmp/bg`, 0, "one x /__w/app/app 1000"},
		{`cat /tmp/state; kill -0 $(cat /tmp/bg) && echo background-alive; (ls /host-etc /var/run/docker.sock 2>&1 || true) | head -2; echo '{"state":{}}' > /__w/_temp/_runner_hook_responses/r.json || echo responses-refused; echo $PATH`, 0, "responses-refused"},
		// The password as a pattern file a builtin writes: the script
		// does not hold it, nor does a command line.
		{`git log --oneline | wc -l; n() { printf '%s\n' registry-secret-"bar"; }; env | grep -c -f <(n) || true; { grep -rlsF -f <(n) /__w /github /tmp /run 2>/dev/null || true; } | while read -r f; do echo "found: $f"; done; exit 3`, 3, "2"},
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
		if strings.Contains(out, "registry-secret-bar") || strings.Contains(out, "found: ") {
			t.Errorf("the registry password reached the sandbox: %s", out)
		}
	}
	// actions/upload-artifact gets an interim attestation of the job so
	// far in $RUNNER_TEMP/airlock, written without following what the job
	// planted there.
	stateJSON, _ := json.Marshal(state)
	upload := func() (int, string) {
		code, out, _ := h.send(RunScriptStep, payload{EntryPoint: "bash", State: stateJSON, Env: map[string]string{}, PrependPath: []string{},
			Args: strings.Split(`-c 'wc -c < /__w/_temp/airlock/attestation.sigstore.json' /__w/_actions/actions/upload-artifact/v4/dist/upload/index.js`, " ")})
		return code, out
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
	// A step failed (exit 3), and the runner failed it: cleanup_job does
	// not fail the job again (its post step would fail the job even where
	// the workflow said continue-on-error), but says so.
	code, out := h.cleanup(state)
	if !strings.Contains(out, "airlock: attestation ") || code != 0 || !strings.Contains(out, "the runner reports the steps") {
		t.Fatalf("cleanup of a job with a failed step: exit %d: %s", code, out)
	}
	bundle, v, vj := h.finalAttestation(h.head)
	if strings.Contains(vj, "registry-secret-bar") {
		t.Error("the registry password is in the attestation")
	}
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
	if conclusion != "neutral" || annotations < 2 {
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
	bad := bytes.Replace(h.render(PrepareJob, payload{Response: h.sim.NewResponseFile(h.t), Image: "node:20", Services: []servicePayload{}}),
		[]byte(`"targetVolumePath":"/__w"`), []byte(`"targetVolumePath":"/elsewhere"`), 1)
	if code, out := h.call(bad); code == 0 || !strings.Contains(out, "/__w") {
		t.Errorf("bad prepare: exit %d: %s", code, out)
	}
	if code, out := h.cleanup(map[string]any{}); code != 0 {
		t.Errorf("cleanup after failed prepare: exit %d: %s", code, out)
	}
}

// BenchmarkHookStep: a run_script_step of `true` as the runner makes it
// (bash -e on a script; node index.js starting a fresh hook process)
// against an exec of the same bash into an existing sandbox (what
// airlock run does per step), and the same call made straight to the
// hook process, without node. airlock's own part is direct - exec
// (target: under 100 ms); node's is hook - direct, the price of a
// JavaScript hook, which the runner starts with its own node by absolute
// path (a .sh hook would be started with a bash looked up through the
// job's $GITHUB_PATH). See BENCHMARKS.md.
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
	os.WriteFile(filepath.Join(h.temp, "bench.sh"), []byte("true\n"), 0o644)
	stateJSON, _ := json.Marshal(state)
	input := func() []byte {
		return h.render(RunScriptStep, payload{Response: h.sim.NewResponseFile(h.t), EntryPoint: "bash", Args: strings.Split("--noprofile --norc -e -o pipefail /__w/_temp/bench.sh", " "),
			Env: map[string]string{"GITHUB_WORKSPACE": "/__w/app/app"}, PrependPath: []string{"/__w/_temp/bin"}, State: stateJSON})
	}
	var direct, viaNode, viaHook time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if res, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"bash", "-e", "-c", "true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(err)
		}
		t1 := time.Now()
		if code, out := h.call(input()); code != 0 {
			b.Fatalf("hook step through node: %d %s", code, out)
		}
		t2 := time.Now()
		cmd := hookCommand(b)
		cmd.Env = append(cmd.Env, h.env...)
		cmd.Stdin = bytes.NewReader(append(input(), '\n'))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("hook step: %v %s", err, out)
		}
		direct, viaNode, viaHook = direct+t1.Sub(t0), viaNode+t2.Sub(t1), viaHook+time.Since(t2)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(direct), "exec-ms")
	b.ReportMetric(ms(viaNode), "runner-ms")
	b.ReportMetric(ms(viaHook), "hook-ms")
	b.ReportMetric(ms(viaHook-direct), "airlock-added-ms")
	b.ReportMetric(ms(viaNode-viaHook), "node-added-ms")
}

// SIGTERM to a job's daemon (the runner host shutting down) ends the job
// and its sandbox even when its socket is gone with its directory.
func TestHookDaemonTerm(t *testing.T) {
	_, dir, pid := newRunnerHost(t).prepareDaemon()
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

// A daemon killed mid-job (the OOM killer, an administrator) leaves a
// sandbox and no attestation: cleanup_job reaps the sandbox, says what
// happened with the end of the daemon's log, and fails the job; a second
// cleanup_job finds nothing left and succeeds.
func TestHookDaemonKilled(t *testing.T) {
	h := newRunnerHost(t)
	state, dir, pid := h.prepareDaemon()
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(pid, 30*time.Second)
	code, out := h.cleanup(state)
	if code == 0 || !strings.Contains(out, "no attestation was signed") || !strings.Contains(out, "the end of the job daemon's log") {
		t.Errorf("cleanup after the daemon was killed: exit %d: %s", code, out)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the job directory is still there")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(dir)) {
			t.Errorf("a process of the job is left: %s: %q", p, b)
		}
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Errorf("second cleanup: exit %d: %s", code, out)
	}
}

// A job whose runner died without cleanup_job still runs when the next
// job is prepared on the same work directory: prepare_job ends it (its
// process that keeps writing into the checkout included) before the new
// job starts.
func TestHookStaleJob(t *testing.T) {
	h := newRunnerHost(t)
	old := h.prepare()
	oldDir := old["jobDir"].(string)
	// A step of the old job, never ended, that would tamper with the next.
	go h.step(old, "while :; do echo tampered > /__w/app/app/main.go; sleep 0.05; done")
	deadline := time.Now().Add(30 * time.Second)
	for b, _ := os.ReadFile(filepath.Join(h.repo, "main.go")); string(b) != "tampered\n"; b, _ = os.ReadFile(filepath.Join(h.repo, "main.go")) {
		if time.Now().After(deadline) {
			t.Fatal("the old job's step never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, resp := h.send(PrepareJob, h.job)
	if code != 0 || !strings.Contains(out, "still runs on "+h.work) {
		t.Fatalf("prepare_job of the next job: exit %d: %s", code, out)
	}
	r, err := runnersim.ReadResponse(resp, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	var next map[string]any
	json.Unmarshal(r.State, &next)
	t.Cleanup(func() { h.cleanup(next) })
	if _, err := os.Stat(oldDir); err == nil {
		t.Error("the old job's directory is still there")
	}
	os.WriteFile(filepath.Join(h.repo, "main.go"), []byte("clean\n"), 0o644)
	time.Sleep(300 * time.Millisecond)
	if b, _ := os.ReadFile(filepath.Join(h.repo, "main.go")); string(b) != "clean\n" {
		t.Errorf("the old job still writes into the checkout: %q", b)
	}
	if code, out := h.cleanup(old); code != 0 {
		t.Errorf("the old job's cleanup, late: exit %d: %s", code, out)
	}
	if code, out := h.cleanup(next); code != 0 {
		t.Errorf("cleanup: exit %d: %s", code, out)
	}
}
