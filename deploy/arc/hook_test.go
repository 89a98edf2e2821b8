package arc

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/runnersim"
	"github.com/airlock-ci/airlock/internal/testhost"
)

// In the pod, where the values and the Dockerfile put them: the runner's
// work volume, its externals (the node it runs hooks and JavaScript
// actions with) and the hook.
const (
	podWork      = "/home/runner/_work"
	podExternals = "/home/runner/externals"
	podNode      = podExternals + "/node20/bin/node"
	podHook      = "/opt/airlock/index.js"
	// podCalls holds the payloads the test hands the runner's node on
	// its standard input (crictl's exec has no standard input of its
	// own): on the work volume, the one directory both see.
	podCalls = podWork + "/_hook_calls"
)

// podRunner is the runner in the pod as the hook sees it, with the
// files a pull request job has before its first hook call, written
// through the node's directory for the work volume: the checkout of an
// agent's pull request (a real git repository with the base and the
// agent's head commit) at _work/app/app, the runner's directories and
// the event.
func podRunner(t testing.TB, n node) runnersim.Runner {
	t.Helper()
	r := runnersim.Runner{Work: podWork, Disk: n.volumes["work"], Externals: podExternals, Repo: podWork + "/app/app"}
	r.MakeDirs(t)
	os.MkdirAll(r.OnDisk(podCalls), 0o755)
	repo, base, head := testhost.PullRequestRepo(t, "// acme/app's policy: the organisation's holds.\npackage airlock\n", nil)
	os.RemoveAll(r.OnDisk(r.Repo)) // an earlier job's, in the same volume
	os.MkdirAll(filepath.Dir(r.OnDisk(r.Repo)), 0o755)
	if out, err := exec.Command("cp", "-a", repo, r.OnDisk(r.Repo)).CombinedOutput(); err != nil {
		t.Fatalf("the checkout: %v %s", err, out)
	}
	r.WriteEvent(t, base, head)
	return r
}

// hookCall runs one hook call in the runner container id as the runner
// does: its node runs index.js (ACTIONS_RUNNER_CONTAINER_HOOKS) with the
// payload on a pipe as its standard input, in the container's
// environment (the values' env: AIRLOCK_BIN, AIRLOCK_ORG_DIR,
// AIRLOCK_ATTEST_KEY), the response file made empty first. It returns
// the call's exit status and output.
func (c *cri) hookCall(t testing.TB, r runnersim.Runner, id, command string, p runnersim.Payload) (int, string, string) {
	t.Helper()
	p.Response = r.NewResponseFile(t)
	call := filepath.Join(podCalls, filepath.Base(p.Response))
	if err := os.WriteFile(r.OnDisk(call), append(runnersim.Render(t, command, r.Fill(p)), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := c.exec(id, 5*time.Minute, "/bin/sh", "-c", `cat "$1" | "$2" "$3"`, "sh", call, podNode, podHook)
	return code, out, p.Response
}

// hookJob runs a pull request's job through airlock's container hook in
// the runner container id, in the runner's own payloads
// (internal/runnersim): prepare_job with a job container, a script step
// whose egress is allowed (the pod's server, as the organisation policy
// allows) and refused (any other name), a JavaScript action on the
// runner's node, and cleanup_job, whose attestation is signed with the
// key from the mounted Secret. It returns how long prepare_job took:
// the hook's set-up before the first step.
func (c *cri) hookJob(t *testing.T, n node, id string) time.Duration {
	t.Helper()
	r := podRunner(t, n)
	state, setUp := c.prepareJob(t, r, id)
	cleaned := false
	t.Cleanup(func() {
		if !cleaned { // a failing test still ends its job, as the runner would
			c.hookCall(t, r, id, runnersim.CleanupJob, runnersim.Payload{State: state})
		}
	})
	checkSandboxFromSidecar(t)

	steps := []struct {
		name    string
		payload runnersim.Payload
		want    []string
	}{
		{"a script step (shell: sh)", r.ScriptStep(t, state, "sh", "-e {0}", `wget -qO- http://registry.test:8080/m.zip | tee fetched
wget -qO- http://forbidden.test/ 2>&1 || echo "forbidden.test refused"
echo "STEP_VAR=$STEP_VAR in $(pwd)"
`, nil), []string{"module-zip", "forbidden.test refused", "STEP_VAR=x in /__w/app/app"}},
		{"a JavaScript action", r.JavaScriptAction(t, state, map[string]string{"INPUT_WHO": "Mona"}), []string{"::notice::greeted Mona with node v"}},
	}
	for _, s := range steps {
		code, out, _ := c.hookCall(t, r, id, runnersim.RunScriptStep, s.payload)
		t.Logf("%s: exit %d\n%s", s.name, code, out)
		if code != 0 {
			t.Errorf("%s: exit %d", s.name, code)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the output lacks %q", s.name, w)
			}
		}
	}
	// The runner reads the action's file commands from its temp directory.
	if b, _ := os.ReadFile(r.OnDisk(filepath.Join(r.Temp(), runnersim.FileCommandsDir, "set_output_js"))); string(b) != "greeting=Hello Mona\n" {
		t.Errorf("the action's output file command: %q", b)
	}

	code, out, _ := c.hookCall(t, r, id, runnersim.CleanupJob, runnersim.Payload{State: state})
	cleaned = true
	t.Logf("cleanup_job: exit %d\n%s", code, out)
	if code != 0 {
		t.Fatalf("cleanup_job: exit %d", code)
	}
	if !strings.Contains(out, "limits: enforced by the enclosing cgroup") {
		t.Errorf("the summary does not say that the pod's cgroup enforces the limits")
	}
	if b, _ := os.ReadFile(filepath.Join(r.OnDisk(r.Repo), "fetched")); string(b) != "module-zip\n" {
		t.Errorf("the step's fetch in the checkout after the job: %q", b)
	}
	checkHookAttestation(t, c, n, id, out)
	return setUp
}

// prepareJob runs prepare_job with a job container (node:20) in the
// runner container id, reads its response as the runner does, and
// returns the job's state and how long the call took.
func (c *cri) prepareJob(t testing.TB, r runnersim.Runner, id string) (json.RawMessage, time.Duration) {
	t.Helper()
	start := time.Now()
	code, out, resp := c.hookCall(t, r, id, runnersim.PrepareJob, runnersim.Payload{Image: "node:20", Services: []runnersim.Service{}})
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("prepare_job: exit %d\n%s", code, out)
	}
	res, err := runnersim.ReadResponse(r.OnDisk(resp), true, 0)
	if err != nil {
		t.Fatalf("prepare_job's response, as the runner reads it: %v\n%s", err, out)
	}
	t.Logf("prepare_job in %v:\n%s", took.Round(time.Millisecond), out)
	return res.State, took
}

// checkHookAttestation checks the attestation cleanup_job named in its
// output (out): airlock verify in the pod accepts it with the Secret's
// public key, and it records the step's egress (one allowed, one
// denied) and the runner's node as a process airlock started.
func checkHookAttestation(t *testing.T, c *cri, n node, id, out string) {
	t.Helper()
	_, after, ok := strings.Cut(out, "airlock: attestation ")
	if !ok {
		t.Fatal("cleanup_job names no attestation")
	}
	bundle := strings.Fields(after)[0]
	if vout, code := c.exec(id, time.Minute, "airlock", "verify", "--key", "/etc/airlock/signing.pub", bundle); code != 0 {
		t.Errorf("airlock verify of the hook's attestation in the pod: exit %d\n%s", code, vout)
	}
	rel, err := filepath.Rel("/run/airlock", bundle)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("the attestation %s is not in the state volume (/run/airlock)", bundle)
	}
	b, err := os.ReadFile(filepath.Join(n.volumes["airlock-state"], rel))
	if err != nil {
		t.Fatal(err)
	}
	v, err := attest.Inspect(b)
	if err != nil {
		t.Fatalf("the hook's attestation: %v", err)
	}
	allowed, denied := 0, 0
	for _, s := range v.Predicate.Egress.Summary {
		allowed, denied = allowed+s.Allowed, denied+s.Denied
	}
	if allowed != 1 || denied != 1 {
		summary, _ := json.Marshal(v.Predicate.Egress.Summary)
		t.Errorf("egress on the record: %d allowed, %d denied, want 1 and 1: %s", allowed, denied, summary)
	}
	node := false
	for _, e := range v.Predicate.Processes.Execs {
		node = node || (e.Source == "airlock" && e.Binary == "/__e/node20/bin/node" && e.SHA256 != "")
	}
	if !node {
		t.Errorf("the runner's node is not on the record as a process airlock started")
	}
	if v.Predicate.Job.PullRequest != 7 || v.Predicate.Job.Author != "Copilot" {
		t.Errorf("the job on the record: %+v", v.Predicate.Job)
	}
}

// checkSandboxFromSidecar: the job's gofer and sandbox, which live until
// cleanup_job, run from the image's runsc sidecar
// (/usr/local/bin/airlock-runsc, beside airlock; gvisor.FindRunsc), as
// the host sees their executables.
func checkSandboxFromSidecar(t *testing.T) {
	t.Helper()
	const sidecar = "/usr/local/bin/airlock-runsc"
	from := map[string][]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		role, _, _ := strings.Cut(string(cmdline), "\x00")
		if role != "runsc-sandbox" && role != "runsc-gofer" {
			continue
		}
		if exe, err := os.Readlink(filepath.Join(p, "exe")); err == nil {
			from[role] = append(from[role], exe)
		}
	}
	for _, role := range []string{"runsc-sandbox", "runsc-gofer"} {
		if len(from[role]) == 0 {
			t.Errorf("no %s process during the job: %v", role, from)
		}
		for _, exe := range from[role] {
			if !strings.HasSuffix(exe, sidecar) {
				t.Errorf("%s runs %s, not the image's %s", role, exe, sidecar)
			}
		}
	}
}
