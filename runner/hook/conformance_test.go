package hook

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/runnersim"
	"github.com/airlock-ci/airlock/internal/testimage"
)

// The conformance suite: the hook driven exactly as the official runner
// drives it (runner_test.go: its payloads, node index.js, its reading of
// the response), and the reference docker hook's own test cases
// (actions/runner-container-hooks packages/docker/tests) ported as
// behaviours.

// prepare-job-test.ts: the response is JSON with a context, the job
// container's id and ports, each service in the order given with its
// ports; isAlpine present and false for a Debian root. Services come
// without names: they are named after their images. The registry
// password of the payload is kept nowhere.
func TestConformancePrepareJob(t *testing.T) {
	h := newRunnerHost(t)
	svc := writeBundle(t, imageRootFS(t, "image-redis"), []string{"/usr/bin/sleep", "600"}, nil)
	pg := writeBundle(t, imageRootFS(t, "image-pg"), []string{"/usr/bin/sleep", "600"}, nil)
	os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: services: true\nsandbox: images: {%q: %q, %q: %q}\n", "redis:7", svc, "ghcr.io/acme/postgres:16", pg)), 0o644)
	health := "--health-cmd redis-cli ping --health-interval 10s"
	h.job.Services = []servicePayload{
		{Image: "redis:7", Args: []string{}, Options: &health, Env: map[string]string{"REDIS_ARGS": "--save 60"}, Ports: []string{"8080:6379", "6380/tcp"}},
		// A service with the workflow's credentials (HookContainer sends
		// them only with a username): they go to the daemon through its
		// pipe with the job container's, and nowhere else.
		{Image: "ghcr.io/acme/postgres:16", Args: []string{}, Env: map[string]string{}, Ports: []string{}, RegistryUser: "svc", RegistryPassword: "registry-secret-baz"},
		{Image: "docker.io/library/redis:7", Args: []string{}, Env: map[string]string{}, Ports: []string{"127.0.0.1:7000:6379"}},
	}
	code, out, respFile := h.send(PrepareJob, h.job)
	if code != 0 {
		t.Fatalf("prepare_job: exit %d: %s", code, out)
	}
	raw, _ := os.ReadFile(respFile)
	r, err := runnersim.ReadResponse(respFile, true, len(h.job.Services))
	if err != nil {
		t.Fatalf("the runner cannot read the response: %v", err)
	}
	var state map[string]any
	json.Unmarshal(r.State, &state)
	t.Cleanup(func() { h.cleanup(state) })
	if *r.IsAlpine {
		t.Errorf("isAlpine true for the host's Debian root: %s", raw)
	}
	if r.Context.Container == nil || *r.Context.Container.ID == "" {
		t.Errorf("no container id: %s", raw)
	}
	services := r.Services()
	want := []struct {
		id    string
		ports map[string]string
	}{
		{"service-redis", map[string]string{"6379": "6379", "6380": "6380"}},
		{"service-postgres", map[string]string{}},
		{"service-redis-2", map[string]string{"6379": "6379"}},
	}
	for i, w := range want {
		if services[i].ID != w.id || !maps.Equal(*services[i].Ports, w.ports) {
			t.Errorf("services[%d] = %+v, want %s with ports %v", i, services[i], w.id, w.ports)
		}
	}
	// The job reaches each service at its name.
	if code, out := h.step(state, `for n in redis postgres redis-2; do while read -r a b; do [ "$b" = "$n" ] && echo "$n at $a"; done < /etc/hosts; done`); code != 0 ||
		!strings.Contains(out, "redis at 127.0.0.1") || !strings.Contains(out, "postgres at 127.0.0.1") || !strings.Contains(out, "redis-2 at 127.0.0.1") {
		t.Errorf("service names: exit %d: %s", code, out)
	}
	// The daemon holds them in its memory alone: its standard input, the
	// pipe they came through, is /dev/null once read, and its command
	// line and environment are the hook's.
	pid := daemonPID(state["jobDir"].(string))
	if in, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", pid)); pid == 0 || in != os.DevNull {
		t.Errorf("the daemon (pid %d) reads its standard input from %q", pid, in)
	}
	for _, f := range []string{"environ", "cmdline"} {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f)); strings.Contains(string(b), "registry-secret-ba") {
			t.Errorf("a registry password is in the daemon's %s", f)
		}
	}
	err = filepath.WalkDir(h.hooksRoot(), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && (d.Name() == "volumes" || d.Name() == "volume-templates") {
			// The bounded workspaces' images (what the job wrote) and
			// their empty templates: 16 GiB files that are mostly hole.
			return filepath.SkipDir
		}
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), h.job.RegistryPassword) || strings.Contains(string(b), "registry-secret-baz") {
				t.Errorf("a registry password is in %s", p)
			}
		}
		return nil
	})
}

// prepare-job-test.ts "should have isAlpine field set correctly": an
// Alpine image's root says so (its os-release, read inside the root).
func TestConformanceIsAlpine(t *testing.T) {
	h := newRunnerHost(t)
	root := imageRootFS(t, "image-alpine")
	os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.20.0\n"), 0o644)
	os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: images: %q: %q\n", "alpine:3", root)), 0o644)
	h.job.Image = "alpine:3"
	code, out, respFile := h.send(PrepareJob, h.job)
	if code != 0 {
		t.Fatalf("prepare_job: exit %d: %s", code, out)
	}
	r, err := runnersim.ReadResponse(respFile, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	json.Unmarshal(r.State, &state)
	t.Cleanup(func() { h.cleanup(state) })
	if !*r.IsAlpine {
		t.Error("isAlpine false for an Alpine image")
	}
}

// run-script-step-test.ts, and the runner's own argument formats
// (ScriptHandlerHelpers.cs: bash, sh, pwsh, a custom shell), as the
// runner cuts them: each step's argv, PATH and environment.
func TestConformanceScriptSteps(t *testing.T) {
	h := newRunnerHost(t)
	h.job.Options = ptr("--cpus 1 --user 4242")
	state := h.prepare()
	stateJSON, _ := json.Marshal(state)
	defaultPath := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, tc := range []struct {
		name        string
		entryPoint  string
		pieces      []string
		prependPath any
		want        []string
		code        int
	}{
		{"Mona the Octocat", "echo", []string{`"Mona`, "the", `Octocat"`}, nil, []string{"Mona the Octocat\n"}, 0},
		{"prependPath as a string (runners up to 2.293)", "/bin/bash", strings.Split(`-c 'echo "PATH=$PATH"'`, " "), "/some/path", []string{"PATH=/some/path:" + defaultPath}, 0},
		{"prependPath as a list, newest first", "/bin/bash", strings.Split(`-c 'echo "PATH=$PATH"'`, " "), []string{"/newer/bin", "/older/bin"}, []string{"PATH=/newer/bin:/older/bin:" + defaultPath}, 0},
		{"no prependPath: the container's PATH", "/bin/bash", strings.Split(`-c 'echo "PATH=$PATH"'`, " "), []string{}, []string{"PATH=" + defaultPath + "\n"}, 0},
		{"CI and GITHUB_ACTIONS", "/bin/bash", strings.Split(`-c 'echo "CI=$CI GITHUB_ACTIONS=$GITHUB_ACTIONS"'`, " "), nil, []string{"CI=true GITHUB_ACTIONS=true"}, 0},
		{"pwsh's format: -command \". '{0}'\"", "bash", strings.Split(`-c ". '/__w/_temp/conformance.sh'"`, " "), nil, []string{"sourced with x"}, 0},
		{"an empty piece (two spaces)", "bash", strings.Split(`-e  /__w/_temp/conformance.sh`, " "), nil, []string{"sourced with x"}, 0},
		{"a custom shell: sh {0}", "sh", []string{"/__w/_temp/conformance.sh"}, nil, []string{"sourced with x"}, 0},
		{"the step's exit code", "bash", strings.Split(`-c 'exit 7'`, " "), nil, nil, 7},
		{"options: --user is not the policy's to take", "/bin/bash", strings.Split(`-c 'id -u'`, " "), nil, []string{"1000\n"}, 0},
		{"a quote that is not closed", "bash", strings.Split(`-c 'echo`, " "), nil, []string{"do not parse", "quoted string is not closed"}, 70},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(h.temp, "conformance.sh"), []byte("echo \"sourced with $STEP_VAR\"\n"), 0o644)
			code, out, _ := h.send(RunScriptStep, payload{EntryPoint: tc.entryPoint, Args: tc.pieces, PrependPath: tc.prependPath,
				Env: map[string]string{"STEP_VAR": "x"}, State: stateJSON})
			if code != tc.code {
				t.Errorf("exit %d, want %d: %s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q: %s", w, out)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The whole job of the issue, with the runner's exact payloads: a
// service, a step in pwsh's argument format, a tool found on the image's
// PATH, a failing step the workflow lets fail (continue-on-error), a
// JavaScript action run by the runner's node with its inputs and file
// commands, a Docker action with args:, and a cleanup that passes.
// (e2e-test.ts: prepare, script step, container step, cleanup.)
func TestConformanceJob(t *testing.T) {
	h := newRunnerHost(t)
	node := nodeBinary(t)
	// The job container's image: bash, a tool on the image's own PATH,
	// and what the runner's node needs to run on it.
	jobRoot := imageRootFS(t, "image-ci")
	os.MkdirAll(filepath.Join(jobRoot, "opt", "tool", "bin"), 0o755)
	os.WriteFile(filepath.Join(jobRoot, "opt", "tool", "bin", "mytool"), []byte("#!/usr/bin/bash\necho \"mytool from the image, TOOL_HOME=$TOOL_HOME\"\n"), 0o755)
	testimage.CopyLibraries(t, jobRoot, node)
	jobImage := writeBundle(t, jobRoot, []string{"/usr/bin/bash"}, []string{"PATH=/opt/tool/bin:/usr/bin:/bin", "TOOL_HOME=/opt/tool"})
	svc := writeBundle(t, imageRootFS(t, "image-redis"), []string{"/usr/bin/sleep", "600"}, nil)
	actionRoot := imageRootFS(t, "image-action")
	os.WriteFile(filepath.Join(actionRoot, "usr", "bin", "printargs"), []byte("#!/usr/bin/bash\nfor a; do echo \"arg[$a]\"; done\necho \"in $(pwd) CI=$CI GITHUB_ACTIONS=$GITHUB_ACTIONS PATH=$PATH\"\n"), 0o755)
	action := writeBundle(t, actionRoot, []string{"/usr/bin/printargs"}, []string{"PATH=/usr/bin:/bin"})
	os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: services: true\nsandbox: images: {%q: %q, %q: %q, %q: %q}\n",
		"ghcr.io/acme/ci:1", jobImage, "redis:7", svc, "ghcr.io/acme/printargs:1", action)), 0o644)
	h.job.Image = "ghcr.io/acme/ci:1"
	h.job.Services = []servicePayload{{Image: "redis:7", Args: []string{}, Env: map[string]string{}, Ports: []string{"6379:6379"}}}
	state := h.prepare()
	stateJSON, _ := json.Marshal(state)

	steps := []struct {
		name string
		run  func() (int, string)
		code int
		want []string
	}{
		{"shell: pwsh's argument format", func() (int, string) {
			return h.script(state, "bash", `-c ". '{0}'"`, `echo "sourced with $STEP_VAR"`, nil)
		}, 0, []string{"sourced with x"}},
		{"a tool on the image's PATH", func() (int, string) {
			return h.step(state, `mytool; echo "PATH=$PATH"`)
		}, 0, []string{"mytool from the image, TOOL_HOME=/opt/tool", "PATH=/__w/_temp/bin:/opt/tool/bin:/usr/bin:/bin"}},
		{"a failing step (continue-on-error: true)", func() (int, string) {
			return h.step(state, `echo about to fail; exit 3`)
		}, 3, []string{"about to fail"}},
		{"a JavaScript action", func() (int, string) {
			return h.javaScriptAction(state, map[string]string{"INPUT_WHO": "Mona the Octocat"})
		}, 0, []string{"::notice::greeted Mona the Octocat with node v"}},
		{"a Docker action with args:", func() (int, string) {
			// ContainerActionHandler: args: ["hello world", "x", ""] is
			// ` "hello world" "x" ""`, cut at spaces, empty pieces dropped.
			pieces := slices.DeleteFunc(strings.Split(` "hello world" "x" ""`, " "), func(s string) bool { return s == "" })
			code, out, _ := h.send(RunContainerStep, payload{Image: "ghcr.io/acme/printargs:1", Args: pieces, Env: map[string]string{"INPUT_WHO": "ci"}, State: stateJSON})
			return code, out
		}, 0, []string{"arg[hello world]\narg[x]\narg[]\n", "in /github/workspace CI=true GITHUB_ACTIONS=true PATH=/usr/bin:/bin"}},
	}
	for _, s := range steps {
		code, out := s.run()
		if code != s.code {
			t.Errorf("%s: exit %d, want %d: %s", s.name, code, s.code, out)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the output lacks %q: %s", s.name, w, out)
			}
		}
	}
	// The runner reads the JavaScript action's file commands on the host.
	if b, _ := os.ReadFile(filepath.Join(h.temp, "_runner_file_commands", "set_output_js")); string(b) != "greeting=Hello Mona the Octocat\n" {
		t.Errorf("the action's output file command: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(h.temp, "_runner_file_commands", "step_summary_js")); !strings.Contains(string(b), "greeted Mona the Octocat") {
		t.Errorf("the action's step summary: %q", b)
	}
	// The failed step was the workflow's to allow: cleanup passes.
	if code, out := h.cleanup(state); code != 0 || !strings.Contains(out, "step bash failed; the runner reports the steps") {
		t.Errorf("cleanup: exit %d: %s", code, out)
	}
	// cleanup-job-test.ts, and the runner's second call after a failure.
	if code, out := h.cleanup(state); code != 0 {
		t.Errorf("second cleanup: exit %d: %s", code, out)
	}
	// Every step's own process is on the record as airlock's, with its
	// digest: the script steps' shell, the JavaScript action's node, the
	// Docker action's and the service's first process (issue 24).
	own := h.ownProcesses()
	for _, bin := range []string{"/usr/bin/bash", "/__e/node20/bin/node", "/usr/bin/printargs", "/usr/bin/sleep"} {
		if own[bin] == "" {
			t.Errorf("%s is not on the record as a process airlock started (with its digest): %v", bin, own)
		}
	}
}

// ownProcesses reads the job's attestation (signed or not) in the hook's
// directory: the binaries of the processes airlock started, with their
// digests.
func (h *runnerHost) ownProcesses() map[string]string {
	h.t.Helper()
	files, _ := filepath.Glob(filepath.Join(h.hooksRoot(), "attestations", "*"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			h.t.Fatal(err)
		}
		v, err := attest.Inspect(b)
		if err != nil {
			if v, err = attest.InspectStatement(b); err != nil {
				continue
			}
		}
		for _, e := range v.Predicate.Processes.Execs {
			if e.Source == "airlock" {
				out[e.Binary] = e.SHA256
			}
		}
	}
	return out
}

// javaScriptAction runs the runner simulation's node action
// (acme/greet@v1) the way the runner runs one.
func (h *runnerHost) javaScriptAction(state map[string]any, inputs map[string]string) (int, string) {
	h.t.Helper()
	stateJSON, _ := json.Marshal(state)
	code, out, _ := h.send(RunScriptStep, h.sim.JavaScriptAction(h.t, stateJSON, inputs))
	return code, out
}

// cleanup_job fails the job for airlock's own verdict, and says why: a
// trust finding whose action is fail (a CI file the job changed), and an
// attestation a configured key cannot sign.
func TestConformanceCleanupVerdict(t *testing.T) {
	for _, tc := range []struct {
		name, step string
		key        string // AIRLOCK_ATTEST_KEY, when set
		want       string
	}{
		{"a CI file changed at run time", `echo '  evil: {runs-on: self-hosted}' >> .github/workflows/ci.yml`, "", "airlock fails the job: "},
		{"a key that does not sign", `true`, "/nonexistent/airlock.key", "airlock fails the job: the attestation could not be signed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunnerHost(t)
			if tc.key != "" {
				h.env = append(h.env, AttestKeyEnv+"="+tc.key)
			}
			state := h.prepare()
			if code, out := h.step(state, tc.step); code != 0 {
				t.Fatalf("step: exit %d: %s", code, out)
			}
			code, out := h.cleanup(state)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Errorf("cleanup: exit %d, want a failure saying %q: %s", code, tc.want, out)
			}
		})
	}
}

// sandbox.user "image": the job runs as its image's user (root here, the
// image records no other), or as the workflow's options: --user, with
// the policy's capabilities only; and only on an image the organisation
// maps. What the job leaves in the workspace is the runner's afterwards.
func TestConformanceImageUser(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policy   string
		unmapped bool
		options  *string
		want     string
	}{
		{"the image's user, without capabilities", "", false, nil, "uid=0 cannot-chown"},
		{"the policy's capabilities", "sandbox: capabilities: [\"CAP_CHOWN\"]\n", false, nil, "uid=0 can-chown"},
		{"options: --user", "", false, ptr("--user 4242:4343"), "uid=4242"},
		{"options: -u=N", "", false, ptr("-u=4242"), "uid=4242"},
		{"an image the organisation does not map", "", true, nil, "only on an image the organisation maps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunnerHost(t)
			pol := "package airlock\nsandbox: user: \"image\"\n" + tc.policy
			if !tc.unmapped {
				pol += fmt.Sprintf("sandbox: images: %q: %q\n", "node:20", imageRootFS(t, "image-job"))
			}
			os.WriteFile(filepath.Join(h.org, "user.cue"), []byte(pol), 0o644)
			h.job.Options = tc.options
			if tc.unmapped {
				if code, out, _ := h.send(PrepareJob, h.job); code == 0 || !strings.Contains(out, tc.want) {
					t.Fatalf("prepare_job: exit %d, want a refusal saying %q: %s", code, tc.want, out)
				}
				return
			}
			state := h.prepare()
			code, out := h.step(state, `echo "uid=$(id -u)"; touch /__w/app/app/made-in-job; (chown 1:1 /__w/app/app/made-in-job 2>/dev/null && echo can-chown) || echo cannot-chown; chown 0:0 /__w/app/app/made-in-job 2>/dev/null || true`)
			if code != 0 || !strings.Contains(strings.ReplaceAll(out, "\n", " "), tc.want) {
				t.Fatalf("step: exit %d, want %q: %s", code, tc.want, out)
			}
			if code, out := h.cleanup(state); code != 0 {
				t.Fatalf("cleanup: exit %d: %s", code, out)
			}
			fi, err := os.Lstat(filepath.Join(h.repo, "made-in-job"))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
				t.Errorf("the job's file is owned by %d:%d on the host, want the workspace owner's (the runner's, root)", st.Uid, st.Gid)
			}
		})
	}
}

// index.js refuses a runner that does not run as root, saying what to do
// (airlock takes no root through sudo: see index.js).
func TestConformanceNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to another user")
	}
	dir, err := os.MkdirTemp("", "airlock-notroot-") // reachable by uid 1000
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	index, _ := filepath.Abs("index.js")
	copyFile(t, index, filepath.Join(dir, "index.js"))
	cmd := exec.Command(nodeBinary(t), filepath.Join(dir, "index.js"))
	cmd.Env = []string{"AIRLOCK_BIN=/bin/true"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	cmd.Stdin = strings.NewReader(`{"command":"cleanup_job","responseFile":"/tmp/x","args":{},"state":null}`)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), "airlock needs root") {
		t.Errorf("index.js as uid 1000: %v %s", cmd.ProcessState, out)
	}
}

// What the runner (root) made for the job is handed to the job's user,
// without following what an earlier job on a persistent runner left: a
// symlink to a host directory, a hard link to a host file, a symlink in
// the tool cache (which the job does not see: it has its own).
// cleanup_job hands it all back.
func TestHookHandOver(t *testing.T) {
	h := newRunnerHost(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600)
	os.Symlink(outside, filepath.Join(h.temp, "link-out"))
	if err := os.Link(filepath.Join(outside, "secret"), filepath.Join(h.temp, "hardlink")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(outside, filepath.Join(h.work, "_tool", "node"))
	state := h.prepare()
	if code, out := h.step(state, `echo made > /__w/_temp/mine && touch /__w/app/app/new && mkdir -p /__w/_tool/node/20 && ls /__w/_tool && echo wrote`); code != 0 || !strings.Contains(out, "wrote") {
		t.Fatalf("the job cannot write its directories: exit %d: %s", code, out)
	}
	// The tool cache is the job's own: nothing reaches the runner's.
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("the job wrote into the runner's tool cache: %v", entries)
	}
	if _, err := os.Lstat(filepath.Join(h.temp, toolCacheDir, "node", "20")); err != nil {
		t.Errorf("the job's tool cache: %v", err)
	}
	for _, p := range []string{outside, filepath.Join(outside, "secret"), filepath.Join(h.temp, "hardlink")} {
		if fi, err := os.Lstat(p); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s was handed to the job's user", p)
		}
	}
	if fi, _ := os.Lstat(h.temp); fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("the runner's temp directory is not the job's")
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
	for _, p := range []string{h.temp, filepath.Join(h.temp, "mine"), filepath.Join(h.repo, "new")} {
		if fi, err := os.Lstat(p); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s is not handed back to the runner", p)
		}
	}
	if _, err := os.Lstat(filepath.Join(h.temp, toolCacheDir)); err == nil {
		t.Errorf("the job's tool cache outlives the job")
	}
}
